//! Quantity formatting: `apiserver::api::quantity` (CPU in DecimalSI nanocores, memory in
//! BinarySI bytes, Go `Quantity.String()` canonical form).
//!
//! The crate has no quantity parser, so the checks use an independent one written here:
//! the string reads back to exactly the value `go_uint64` keeps (the value itself for sums
//! passed as `u128`); the form is canonical (no leading zeros, a DecimalSI amount never a
//! multiple of 1000, a BinarySI amount never a multiple of 1024 below `Ei`, a DecimalSI
//! suffix on memory only below 1024 bytes), which together with the value fixes the string uniquely; and
//! `cpu_len`/`memory_len` equal the written lengths.

#![no_main]

use apiserver::api::quantity::{
    cpu_len, go_uint64, memory_len, write_cpu, write_cpu_nanocores, write_memory,
    write_memory_bytes, write_u64, write_u128,
};
use libfuzzer_sys::fuzz_target;

/// Splits `s` into its decimal amount and suffix; asserts the amount is canonical digits.
fn split(s: &str) -> (u128, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    assert!(digits > 0, "{s:?} has no amount");
    let (amount, suffix) = s.split_at(digits);
    assert!(
        amount == "0" || !amount.starts_with('0'),
        "{s:?} has a leading zero"
    );
    let value = amount.parse::<u128>().expect("at most 39 digits");
    if value == 0 {
        assert_eq!(s, "0", "zero is written as 0");
    }
    (value, suffix)
}

/// Decimal SI: the value in units of 10^-9 (`n`) and the exponent of the suffix.
fn decimal_exponent(suffix: &str) -> Option<u32> {
    Some(match suffix {
        "n" => 0,
        "u" => 3,
        "m" => 6,
        "" => 9,
        "k" => 12,
        "M" => 15,
        "G" => 18,
        "T" => 21,
        "P" => 24,
        "E" => 27,
        _ => return None,
    })
}

/// A DecimalSI string at base unit 10^-9 as that many units, checking the canonical form.
fn read_decimal(s: &str, nano_base: u32) -> u128 {
    let (amount, suffix) = split(s);
    let exp = decimal_exponent(suffix).unwrap_or_else(|| panic!("{s:?}: bad suffix"));
    assert!(exp >= nano_base, "{s:?}: below the base unit");
    if amount != 0 && suffix != "E" {
        assert!(amount % 1000 != 0, "{s:?}: not canonical (amount x 1000)");
    }
    amount
        .checked_mul(10u128.pow(exp - nano_base))
        .unwrap_or_else(|| panic!("{s:?} overflows u128"))
}

fn read_binary(s: &str) -> u128 {
    let (amount, suffix) = split(s);
    let power = match suffix {
        "Ki" => 1,
        "Mi" => 2,
        "Gi" => 3,
        "Ti" => 4,
        "Pi" => 5,
        "Ei" => 6,
        // A plain amount: below 1024 bytes, or not a multiple of 1024.
        "" => {
            assert!(
                amount < 1024 || amount % 1024 != 0,
                "{s:?}: not canonical (amount x 1024)"
            );
            return amount;
        }
        // Below 1024 bytes the form is DecimalSI: `1k` is 1000 bytes.
        _ => {
            let v = read_decimal(s, 9);
            assert!(v < 1024, "{s:?}: DecimalSI at 1024 bytes or more");
            return v;
        }
    };
    if power < 6 {
        assert!(amount % 1024 != 0, "{s:?}: not canonical (amount x 1024)");
    }
    let v = amount
        .checked_mul(1u128 << (10 * power))
        .unwrap_or_else(|| panic!("{s:?} overflows u128"));
    assert!(v >= 1024, "{s:?}: BinarySI below 1024 bytes");
    v
}

fn text(out: &[u8]) -> &str {
    std::str::from_utf8(out).expect("quantities are ASCII")
}

fuzz_target!(|data: &[u8]| {
    let mut word = [0u8; 16];
    let n = data.len().min(16);
    word[..n].copy_from_slice(&data[..n]);
    let wide = u128::from_le_bytes(word);
    let mut out = Vec::with_capacity(48);

    for v in [wide as u64, (wide >> 64) as u64] {
        let kept = go_uint64(v);
        assert!(kept <= u128::from(v) && u128::from(v) - kept < 10);

        out.clear();
        write_cpu(&mut out, v);
        assert_eq!(cpu_len(v), out.len(), "cpu_len({v})");
        assert_eq!(read_decimal(text(&out), 0), kept, "cpu {v}: {}", text(&out));

        out.clear();
        write_memory(&mut out, v);
        assert_eq!(memory_len(v), out.len(), "memory_len({v})");
        assert_eq!(read_binary(text(&out)), kept, "memory {v}: {}", text(&out));

        out.clear();
        write_u64(&mut out, v);
        assert_eq!(text(&out), v.to_string());
    }

    // Sums (of per-container values) arrive as u128.
    out.clear();
    write_cpu_nanocores(&mut out, wide);
    assert_eq!(
        read_decimal(text(&out), 0),
        wide,
        "cpu sum {wide}: {}",
        text(&out)
    );
    out.clear();
    write_memory_bytes(&mut out, wide);
    assert_eq!(
        read_binary(text(&out)),
        wide,
        "memory sum {wide}: {}",
        text(&out)
    );
    out.clear();
    write_u128(&mut out, wide);
    assert_eq!(text(&out), wide.to_string());
});
