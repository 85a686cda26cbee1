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
    let mut buf = [0u8; SHORT];
    match memory_short(&mut buf, bytes) {
        Some(n) => append_prefix(out, &buf, n),
        None => write_memory_bytes(out, go_uint64(bytes)),
    }
}

/// [`write_cpu`]'s string at the front of `buf`, for every value but zero and those above
/// `u64::MAX / 100` (whose x100 could overflow, and above `i64::MAX` lose a digit): its
/// length, or `None` for those.
#[inline(always)]
pub fn cpu_short(buf: &mut [u8; SHORT], nanocores: u64) -> Option<usize> {
    if nanocores == 0 || nanocores > u64::MAX / 100 {
        return None;
    }
    let (amount, exponent) = canonical(nanocores, -9);
    Some(decimal_si_into(buf, amount, exponent))
}

/// [`write_memory`]'s string at the front of `buf` for 1024 bytes and up to `i64::MAX`:
/// its length, or `None` for other values.
#[inline(always)]
pub fn memory_short(buf: &mut [u8; SHORT], bytes: u64) -> Option<usize> {
    if !(1024..=i64::MAX as u64).contains(&bytes) {
        return None;
    }
    let (amount, power) = binary_si(bytes);
    Some(digits_then(buf, amount, BINARY_SUFFIXES[power].as_bytes()))
}

/// A canonical `amount` and multiple-of-three `exponent` with its DecimalSI suffix at the
/// front of `buf` (exponents stay within -9..=18 for these inputs: the suffix is one byte
/// or none); returns the length.
#[inline(always)]
fn decimal_si_into(buf: &mut [u8; SHORT], amount: u64, exponent: i32) -> usize {
    let suffix = DECIMAL_SUFFIXES
        .get((exponent / 3 + 3) as usize)
        .map_or(&[][..], |s| s.as_bytes());
    digits_then(buf, amount, suffix)
}

/// The digits of `amount`, then `suffix` (at most two bytes), at the front of `buf`;
/// returns the length.
#[inline(always)]
fn digits_then(buf: &mut [u8; SHORT], amount: u64, suffix: &[u8]) -> usize {
    let mut n = digits_into(buf, amount);
    for &b in suffix.iter().take(2) {
        buf[n & (SHORT - 1)] = b;
        n += 1;
    }
    n
}

/// `bytes` (not zero) as `amount` x 1024^`power` with as many factors of 1024 taken out as
/// a suffix names: the trailing zero bits say how many at once.
#[inline]
fn binary_si(bytes: u64) -> (u64, usize) {
    let power = ((bytes.trailing_zeros() / 10) as usize).min(BINARY_SUFFIXES.len() - 1);
    (bytes >> (10 * power), power)
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

/// Decimal digits in `v` (1 for 0): from the bit length, a guess that is exact or one
/// short, corrected against a power of ten (a multiply, a shift and a compare, where
/// `ilog10` divides twice).
#[inline(always)]
fn digits_u64(v: u64) -> usize {
    let v = v | 1;
    let bits = 64 - v.leading_zeros() as usize;
    // 1233 / 4096 ~ log10(2): floor(bits * log10 2) digits at least.
    let guess = (bits * 1233) >> 12;
    guess + usize::from(v >= POW10[guess & 31])
}

/// 10^i for i in 0..=19 (then the largest, never reached: a u64 has at most 20 digits).
const POW10: [u64; 32] = {
    let mut table = [u64::MAX; 32];
    let mut i = 0;
    let mut p = 1u64;
    while i < 20 {
        table[i] = p;
        p = p.wrapping_mul(10);
        i += 1;
    }
    table
};

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
    let n = decimal_si_into(&mut buf, amount, exponent);
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

/// The scratch of one short string: 20 digits of a `u64` and a suffix of up to 2 bytes,
/// in a power of two so that an index masked by `SHORT - 1` needs no bounds check.
pub const SHORT: usize = 32;

/// The decimal digits of `v` at the front of `buf`, four at a time, then two; returns how
/// many.
#[inline(always)]
fn digits_into(buf: &mut [u8; SHORT], mut v: u64) -> usize {
    let n = digits_u64(v);
    let mut i = n;
    let pair = |buf: &mut [u8; SHORT], i: usize, p: usize| {
        buf[i & (SHORT - 1)] = DIGIT_PAIRS[p * 2];
        buf[(i + 1) & (SHORT - 1)] = DIGIT_PAIRS[p * 2 + 1];
    };
    while v >= 10_000 {
        let four = (v % 10_000) as usize;
        v /= 10_000;
        i -= 4;
        pair(buf, i, four / 100);
        pair(buf, i + 2, four % 100);
    }
    let mut v = v as usize;
    if v >= 100 {
        pair(buf, i - 2, v % 100);
        v /= 100;
    }
    if v >= 10 {
        pair(buf, 0, v);
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

    /// The writers against a plain reference (strings and a loop, no fast paths) for values
    /// of every magnitude, round and not.
    #[test]
    fn writers_match_a_plain_reference() {
        fn reference_cpu(v: u64) -> String {
            if v == 0 {
                return "0".into();
            }
            let v = go_uint64(v);
            let (mut amount, mut exponent) = (v, -9i32);
            while amount.is_multiple_of(10) {
                amount /= 10;
                exponent += 1;
            }
            while exponent.rem_euclid(3) != 0 {
                amount *= 10;
                exponent -= 1;
            }
            while exponent > 18 {
                amount *= 1000;
                exponent -= 3;
            }
            let suffix =
                ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"][(exponent / 3 + 3) as usize];
            format!("{amount}{suffix}")
        }
        fn reference_memory(v: u64) -> String {
            let v = go_uint64(v);
            if v < 1024 {
                return if v != 0 && v.is_multiple_of(1000) {
                    format!("{}k", v / 1000)
                } else {
                    v.to_string()
                };
            }
            let (mut amount, mut power) = (v, 0);
            while amount.is_multiple_of(1024) && power < 6 {
                amount /= 1024;
                power += 1;
            }
            format!(
                "{amount}{}",
                ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power]
            )
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![0u64, 1, 999, 1000, 1023, 1024, u64::MAX];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (x % 64);
            values.extend([
                v,
                v / 1000 * 1000,
                (v >> 10) << 10,
                (v >> 20) << 20,
                v % 100_000_000,
            ]);
        }
        for v in values {
            assert_eq!(cpu(v), reference_cpu(v), "cpu {v}");
            assert_eq!(mem(v), reference_memory(v), "memory {v}");
        }
    }

    /// The digit count from the bit length, at both sides of every power of ten.
    #[test]
    fn digit_counts_at_every_power_of_ten() {
        let mut values = vec![0u64, 1, u64::MAX];
        let mut p = 1u64;
        while let Some(next) = p.checked_mul(10) {
            values.extend([p - 1, p, p + 1, next - 1]);
            p = next;
        }
        values.extend([p - 1, p, p + 1]);
        for v in values {
            assert_eq!(digits_u64(v), v.to_string().len(), "{v}");
            let mut buf = [0u8; SHORT];
            let n = digits_into(&mut buf, v);
            assert_eq!(&buf[..n], v.to_string().as_bytes());
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
