//! Go `resource.Quantity` canonical strings (`Quantity.String()`, apimachinery
//! `CanonicalizeBytes`) for the two quantities the API serves, written without allocation.
//!
//! metrics-server builds them with `uint64Quantity` (`pkg/storage/types.go`): CPU as nanocores
//! at scale -9 in DecimalSI, memory as bytes at scale 0 in BinarySI. Values above
//! `i64::MAX` lose their last decimal digit (`NewScaledQuantity(val/10, scale+1)`).

use std::ops::{DivAssign, Mul, MulAssign, Rem};

use super::scratch::append_prefix;

/// Decimal SI suffixes by exponent / 3, from 10^-9 (`n`) to 10^18 (`E`).
const DECIMAL_SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
/// Binary SI suffixes by power of 1024.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The value `uint64Quantity` keeps: exact up to `i64::MAX`, one decimal digit dropped above.
pub fn go_uint64(value: u64) -> u128 {
    if value > i64::MAX as u64 {
        u128::from(value / 10) * 10
    } else {
        u128::from(value)
    }
}

/// Writes CPU usage given in nanocores (already passed through [`go_uint64`], or a sum of such
/// values) in canonical DecimalSI form: `4710169n`, `12345u`, `5m`, `1`, `2500m`, `0`.
pub fn write_cpu_nanocores(out: &mut Vec<u8>, nanocores: u128) {
    write_decimal_si(out, nanocores, -9);
}

/// Writes memory given in bytes (already passed through [`go_uint64`], or a sum) in canonical
/// BinarySI form: `12240Ki`, `3Mi`, `12533761`, and DecimalSI below 1024 (`1k`, `512`).
pub fn write_memory_bytes(out: &mut Vec<u8>, bytes: u128) {
    if bytes < 1024 {
        write_decimal_si(out, bytes, 0);
        return;
    }
    let mut amount = bytes;
    let mut power = 0;
    while amount.is_multiple_of(1024) && power < BINARY_SUFFIXES.len() - 1 {
        amount >>= 10;
        power += 1;
    }
    write_u128(out, amount);
    out.extend_from_slice(BINARY_SUFFIXES[power].as_bytes());
}

/// CPU from a raw `u64` count of nanocores, as metrics-server's `uint64Quantity`.
pub fn write_cpu(out: &mut Vec<u8>, nanocores: u64) {
    // Up to `u64::MAX / 100` (below `i64::MAX`: no digit dropped) in u64 arithmetic.
    if nanocores <= u64::MAX / 100 {
        write_decimal_si_u64(out, nanocores, -9);
        return;
    }
    write_cpu_nanocores(out, go_uint64(nanocores));
}

/// Memory from a raw `u64` count of bytes, as metrics-server's `uint64Quantity`.
pub fn write_memory(out: &mut Vec<u8>, bytes: u64) {
    // At or above 1024 and up to `i64::MAX` (exact) in u64 arithmetic.
    if (1024..=i64::MAX as u64).contains(&bytes) {
        let (amount, power) = binary_si(bytes);
        let mut buf = [0u8; SHORT];
        let mut n = digits_into(&mut buf, amount);
        for &b in BINARY_SUFFIXES[power].as_bytes() {
            buf[n] = b;
            n += 1;
        }
        append_prefix(out, &buf, n);
        return;
    }
    write_memory_bytes(out, go_uint64(bytes));
}

/// `bytes` as `amount` x 1024^`power` with as many factors of 1024 taken out as a suffix
/// names.
#[inline]
fn binary_si(bytes: u64) -> (u64, usize) {
    let (mut amount, mut power) = (bytes, 0);
    while amount.is_multiple_of(1024) && power < BINARY_SUFFIXES.len() - 1 {
        amount >>= 10;
        power += 1;
    }
    (amount, power)
}

/// The length of [`write_cpu`]'s output, without writing it (protobuf needs every length
/// before the bytes).
pub fn cpu_len(nanocores: u64) -> usize {
    if nanocores == 0 {
        return 1;
    }
    if nanocores <= u64::MAX / 100 {
        let (amount, exponent) = canonical(nanocores, -9);
        return digits_u64(amount) + decimal_suffix_len(exponent);
    }
    decimal_si_len(go_uint64(nanocores), -9)
}

/// The length of [`write_memory`]'s output, without writing it.
pub fn memory_len(bytes: u64) -> usize {
    if (1024..=i64::MAX as u64).contains(&bytes) {
        let (amount, power) = binary_si(bytes);
        return digits_u64(amount) + BINARY_SUFFIXES[power].len();
    }
    let bytes = go_uint64(bytes);
    if bytes < 1024 {
        return decimal_si_len(bytes, 0);
    }
    let (mut amount, mut power) = (bytes, 0);
    while amount.is_multiple_of(1024) && power < BINARY_SUFFIXES.len() - 1 {
        amount >>= 10;
        power += 1;
    }
    digits_u128(amount) + BINARY_SUFFIXES[power].len()
}

/// The length of [`write_decimal_si`]'s output.
fn decimal_si_len(mantissa: u128, scale: i32) -> usize {
    if mantissa == 0 {
        return 1;
    }
    if let Ok(m) = u64::try_from(mantissa)
        && m <= u64::MAX / 100
    {
        let (amount, exponent) = canonical(m, scale);
        return digits_u128(u128::from(amount)) + decimal_suffix_len(exponent);
    }
    // Rare (beyond ~1.8e17): write it out.
    let mut scratch = Vec::with_capacity(48);
    write_decimal_si(&mut scratch, mantissa, scale);
    scratch.len()
}

fn decimal_suffix_len(exponent: i32) -> usize {
    DECIMAL_SUFFIXES
        .get((exponent / 3 + 3) as usize)
        .map_or(0, |s| s.len())
}

/// Decimal digits in `v` (1 for 0).
#[inline]
fn digits_u64(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Decimal digits in `v` (1 for 0).
fn digits_u128(v: u128) -> usize {
    match u64::try_from(v) {
        Ok(small) => small.checked_ilog10().map_or(1, |d| d as usize + 1),
        Err(_) => v.ilog10() as usize + 1,
    }
}

/// `int64Amount.AsCanonicalBytes` + the DecimalSI suffix: strip factors of ten into the
/// exponent, then bring the exponent down to a multiple of three.
fn write_decimal_si(out: &mut Vec<u8>, mantissa: u128, scale: i32) {
    // The common case stays in u64 arithmetic (u128 division is a library call).
    if let Ok(m) = u64::try_from(mantissa)
        && m <= u64::MAX / 100
    {
        write_decimal_si_u64(out, m, scale);
        return;
    }
    if mantissa == 0 {
        out.push(b'0');
        return;
    }
    let (mut amount, mut exponent) = canonical(mantissa, scale);
    // Beyond `E` Go has no suffix; our inputs (< 2^64 nanocores or bytes) never get there,
    // but stay exact anyway by writing the zeros out.
    while exponent > 18 {
        amount *= 1000;
        exponent -= 3;
    }
    write_u128(out, amount);
    push_decimal_suffix(out, exponent);
}

/// [`write_decimal_si`] for mantissas up to `u64::MAX / 100` (the x100 cannot overflow).
fn write_decimal_si_u64(out: &mut Vec<u8>, mantissa: u64, scale: i32) {
    if mantissa == 0 {
        out.push(b'0');
        return;
    }
    let (amount, exponent) = canonical(mantissa, scale);
    let mut buf = [0u8; SHORT];
    let mut n = digits_into(&mut buf, amount);
    // Exponents stay within -9..=18 for these inputs; every suffix is one byte or none.
    if let Some(&[suffix]) = DECIMAL_SUFFIXES
        .get((exponent / 3 + 3) as usize)
        .map(|s| s.as_bytes())
    {
        buf[n] = suffix;
        n += 1;
    }
    append_prefix(out, &buf, n);
}

/// A non-zero `amount` x 10^`exponent` with the factors of ten stripped into the exponent,
/// then the exponent brought down to a multiple of three (the amount must have room for
/// a x100).
fn canonical<T>(mut amount: T, mut exponent: i32) -> (T, i32)
where
    T: Copy + PartialEq + From<u8> + Rem<Output = T> + DivAssign + MulAssign + Mul<Output = T>,
{
    let (zero, ten, thousand) = (T::from(0), T::from(10), T::from(100) * T::from(10));
    // Three zeros at a time first: round values (`250m`, `2`) take a third
    // of the divisions, and the result is the same.
    while amount % thousand == zero {
        amount /= thousand;
        exponent += 3;
    }
    while amount % ten == zero {
        amount /= ten;
        exponent += 1;
    }
    match exponent.rem_euclid(3) {
        1 => {
            amount *= ten;
            exponent -= 1;
        }
        2 => {
            amount *= T::from(100);
            exponent -= 2;
        }
        _ => {}
    }
    (amount, exponent)
}

/// The DecimalSI suffix for a multiple-of-three `exponent` (none beyond `E`).
fn push_decimal_suffix(out: &mut Vec<u8>, exponent: i32) {
    let index = (exponent / 3 + 3) as usize;
    if let Some(suffix) = DECIMAL_SUFFIXES.get(index) {
        out.extend_from_slice(suffix.as_bytes());
    }
}

/// Decimal digits of `v`.
pub fn write_u128(out: &mut Vec<u8>, v: u128) {
    if let Ok(small) = u64::try_from(v) {
        write_u64(out, small);
        return;
    }
    let mut v = v;
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// The scratch of one short string: 20 digits of a `u64` and a suffix of up to 2 bytes.
const SHORT: usize = 24;

/// The decimal digits of `v` at the front of `buf`, two at a time; returns how many.
#[inline]
fn digits_into(buf: &mut [u8; SHORT], mut v: u64) -> usize {
    let n = digits_u64(v);
    let mut i = n;
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i] = DIGIT_PAIRS[pair];
        buf[i + 1] = DIGIT_PAIRS[pair + 1];
    }
    if v >= 10 {
        let pair = v as usize * 2;
        buf[0] = DIGIT_PAIRS[pair];
        buf[1] = DIGIT_PAIRS[pair + 1];
    } else {
        buf[0] = b'0' + v as u8;
    }
    n
}

/// Decimal digits of `v`.
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; SHORT];
    let n = digits_into(&mut buf, v);
    append_prefix(out, &buf, n);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cpu(v: u64) -> String {
        let mut out = Vec::new();
        write_cpu(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn mem(v: u64) -> String {
        let mut out = Vec::new();
        write_memory(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    /// metrics-server.md §2.3, §4.8 and apimachinery canonicalization edge cases.
    #[test]
    fn cpu_matches_go_decimal_si() {
        let cases: &[(u64, &str)] = &[
            (0, "0"),
            (1, "1n"),
            (10, "10n"),
            (100, "100n"),
            (1000, "1u"),
            (4710169, "4710169n"),
            (12345000, "12345u"),
            (5000000, "5m"),
            (1000000000, "1"),
            (500000000, "500m"),
            (2500000000, "2500m"),
            (20000, "20u"),
            (167390565, "167390565n"),
            (7338891, "7338891n"),
            (10000000000, "10"),
            (100000000000, "100"),
            (1000000000000, "1k"),
            (1500000000000, "1500"),
            (1234567890123, "1234567890123n"),
            (1000000000000000000, "1G"),
            (i64::MAX as u64, "9223372036854775807n"),
            // Above i64::MAX one digit is dropped: MaxInt64+10 -> (MaxInt64/10+1) x 10^-8.
            (i64::MAX as u64 + 10, "9223372036854775810n"),
            (1u64 << 63, "9223372036854775800n"),
            (u64::MAX, "18446744073709551610n"),
            (10000000000000000000, "10G"),
        ];
        for (v, want) in cases {
            assert_eq!(cpu(*v), *want, "cpu {v}");
        }
    }

    #[test]
    fn memory_matches_go_binary_si() {
        let cases: &[(u64, &str)] = &[
            (0, "0"),
            (1, "1"),
            (512, "512"),
            (600, "600"),
            (1000, "1k"),
            (1023, "1023"),
            (1024, "1Ki"),
            (1025, "1025"),
            (2000, "2000"),
            (12533760, "12240Ki"),
            (12533761, "12533761"),
            (3145728, "3Mi"),
            (5 << 20, "5Mi"),
            (4 << 20, "4Mi"),
            (1616273408, "1578392Ki"),
            (1731416064, "1690836Ki"),
            (14868480, "14520Ki"),
            (1 << 30, "1Gi"),
            (1 << 40, "1Ti"),
            (1 << 50, "1Pi"),
            (1 << 60, "1Ei"),
            (3 << 60, "3Ei"),
            (i64::MAX as u64, "9223372036854775807"),
            (1u64 << 63, "9223372036854775800"),
            (u64::MAX, "18446744073709551610"),
        ];
        for (v, want) in cases {
            assert_eq!(mem(*v), *want, "memory {v}");
        }
    }

    #[test]
    fn integer_writers() {
        for v in [0u64, 7, 10, 99, 100, 101, 12345, 1_000_000, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
            out.clear();
            write_u128(&mut out, u128::from(v) * 1000 + 7);
            assert_eq!(out, (u128::from(v) * 1000 + 7).to_string().as_bytes());
        }
    }

    #[test]
    fn sums_above_u64_stay_exact() {
        let mut out = Vec::new();
        write_cpu_nanocores(&mut out, u128::from(u64::MAX) * 3);
        assert_eq!(out, b"55340232221128654845n");
        out.clear();
        write_memory_bytes(&mut out, 1u128 << 70);
        assert_eq!(out, b"1024Ei");
    }

    #[test]
    fn lengths_match_the_writers() {
        let mut values: Vec<u64> = vec![0, 1, 9, 10, 999, 1000, 1023, 1024, 1025, 12_345_000];
        for shift in 0..64 {
            let p = 1u64 << shift;
            values.extend([p - 1, p, p + 1]);
        }
        let mut p10 = 1u64;
        while let Some(next) = p10.checked_mul(10) {
            values.extend([p10 - 1, p10, p10 + 1, p10 * 3, next / 2]);
            p10 = next;
        }
        values.extend([u64::MAX, u64::MAX - 1, i64::MAX as u64, i64::MAX as u64 + 1]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.extend([x, x >> (x % 64), (x >> 40) * 1000, (x >> 44) << 10]);
        }
        for v in values {
            assert_eq!(cpu_len(v), cpu(v).len(), "cpu {v}");
            assert_eq!(memory_len(v), mem(v).len(), "memory {v}");
        }
    }
}
