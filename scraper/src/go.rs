//! Go's text formats where the API must write what a Go server writes: `strconv.Quote` (the
//! `%q` in apimachinery's error messages), `strconv.ParseInt`'s errors and
//! `time.Duration.String()` (the `window` field, flag defaults) and `time.ParseDuration`
//! (flags, a request's `?timeout=`). One implementation each, for both crates.

use std::fmt::Write as _;

/// Go's `strconv.Quote` (`%q`): double quotes, `\a \b \f \n \r \t \v \\ \"` escaped,
/// other control and non-printable characters as `\xNN`, `\uNNNN` or `\UNNNNNNNN`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if !is_print(c) => {
                let n = c as u32;
                let _ = if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Nanoseconds per unit of Go's duration syntax (`time.unitMap`).
const NANOS_PER: [(&str, u128); 9] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // µ (micro sign), as Go accepts
    ("\u{3bc}s", 1_000), // μ (Greek mu), as Go accepts
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("", 0),
];

/// Go's `time.ParseDuration`: whether the duration is negative (`-` before it) and its
/// magnitude, from `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+` (`0` alone allowed; units `ns`, `us`,
/// `µs`, `μs`, `ms`, `s`, `m`, `h`; fractions truncated to nanoseconds; at most an `int64` of
/// them), with Go's error texts (`time: invalid duration "x"`, `time: unknown unit "x" in
/// duration "5x"`, `time: missing unit in duration "5"`).
pub fn parse_duration(s: &str) -> Result<(bool, std::time::Duration), String> {
    let invalid = || format!("time: invalid duration \"{s}\"");
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok((negative, std::time::Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration \"{s}\""));
        }
        let per = NANOS_PER
            .iter()
            .find(|(name, _)| *name == unit && !name.is_empty())
            .map(|&(_, per)| per)
            .ok_or_else(|| format!("time: unknown unit \"{unit}\" in duration \"{s}\""))?;
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut ns = int.checked_mul(per).ok_or_else(invalid)?;
        // The fraction, truncated to nanoseconds as Go does.
        let mut scale = per;
        for digit in frac_part.bytes().take(30) {
            scale /= 10;
            if scale == 0 {
                break;
            }
            ns += u128::from(digit - b'0') * scale;
        }
        total_ns = total_ns.checked_add(ns).ok_or_else(invalid)?;
        rest = after;
    }
    // Go's Duration is an int64 of nanoseconds.
    if total_ns > i64::MAX as u128 {
        return Err(invalid());
    }
    let secs = (total_ns / 1_000_000_000) as u64;
    let nanos = (total_ns % 1_000_000_000) as u32;
    Ok((negative, std::time::Duration::new(secs, nanos)))
}

/// Go's `strconv.ParseInt(s, 10, bits)`, with its error text (`strconv.ParseInt: parsing
/// "abc": invalid syntax`, `... value out of range`).
pub fn parse_int(s: &str, bits: u32) -> Result<i64, String> {
    let bits = bits.clamp(1, 64);
    let fits = |v: i64| bits == 64 || (v >= -(1i64 << (bits - 1)) && v < (1i64 << (bits - 1)));
    let why = match s.parse::<i64>() {
        Ok(v) if fits(v) => return Ok(v),
        Ok(_) => "value out of range",
        Err(e) => match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        },
    };
    Err(format!("strconv.ParseInt: parsing {}: {why}", quote(s)))
}

/// Go's `strconv.IsPrint` for what reaches error messages: control characters (C0, DEL, C1),
/// the line and paragraph separators, the byte-order mark, surrogates' neighbours in the
/// specials block and non-characters are not printable; the rest is (Go's tables also leave
/// out unassigned code points, which a selector or name here never holds).
fn is_print(c: char) -> bool {
    let n = c as u32;
    !(n < 0x20
        || (0x7f..=0x9f).contains(&n)
        || n == 0xad
        || n == 0x2028
        || n == 0x2029
        || n == 0xfeff
        || (0xfff9..=0xfffb).contains(&n)
        || (0xfdd0..=0xfdef).contains(&n)
        || n & 0xfffe == 0xfffe)
}

/// Writes Go's `time.Duration(ns).String()`: `10s`, `15.012s`, `1m0s`, `1h2m3.5s`, `1.5ms`,
/// `1µs`, `500ns`, `0s`, `-2s`.
pub fn write_go_duration(out: &mut Vec<u8>, ns: i64) {
    let mut buf = [0u8; 32];
    let mut w = buf.len();
    let neg = ns < 0;
    let mut u = ns.unsigned_abs();
    if u < 1_000_000_000 {
        w -= 1;
        buf[w] = b's';
        w -= 1;
        let prec;
        if u == 0 {
            buf[w] = b'0';
            out.extend_from_slice(&buf[w..]);
            return;
        } else if u < 1_000 {
            prec = 0;
            buf[w] = b'n';
        } else if u < 1_000_000 {
            prec = 3;
            // U+00B5 MICRO SIGN, as Go writes it.
            w -= 1;
            buf[w] = 0xC2;
            buf[w + 1] = 0xB5;
        } else {
            prec = 6;
            buf[w] = b'm';
        }
        (w, u) = fmt_frac(&mut buf, w, u, prec);
        w = fmt_int(&mut buf, w, u);
    } else {
        w -= 1;
        buf[w] = b's';
        (w, u) = fmt_frac(&mut buf, w, u, 9);
        w = fmt_int(&mut buf, w, u % 60);
        u /= 60;
        if u > 0 {
            w -= 1;
            buf[w] = b'm';
            w = fmt_int(&mut buf, w, u % 60);
            u /= 60;
            if u > 0 {
                w -= 1;
                buf[w] = b'h';
                w = fmt_int(&mut buf, w, u);
            }
        }
    }
    if neg {
        w -= 1;
        buf[w] = b'-';
    }
    out.extend_from_slice(&buf[w..]);
}

/// Go's `fmtFrac`: the fraction of `v / 10^prec` without trailing zeros, into `buf[..w]`.
/// Trailing zeros are dropped three at a time first, and a whole number takes no digit loop
/// (a list writes one window per item).
fn fmt_frac(buf: &mut [u8; 32], mut w: usize, mut v: u64, mut prec: usize) -> (usize, u64) {
    while prec >= 3 && v.is_multiple_of(1000) {
        v /= 1000;
        prec -= 3;
    }
    let mut print = false;
    for _ in 0..prec {
        let digit = v % 10;
        print = print || digit != 0;
        if print {
            w -= 1;
            buf[w] = digit as u8 + b'0';
        }
        v /= 10;
    }
    if print {
        w -= 1;
        buf[w] = b'.';
    }
    (w, v)
}

/// Go's `fmtInt`: decimal `v` into `buf[..w]`.
fn fmt_int(buf: &mut [u8; 32], mut w: usize, mut v: u64) -> usize {
    if v == 0 {
        w -= 1;
        buf[w] = b'0';
    } else {
        while v > 0 {
            w -= 1;
            buf[w] = (v % 10) as u8 + b'0';
            v /= 10;
        }
    }
    w
}

/// Go's `time.Duration.String()` of `d` (saturating at Go's largest duration).
pub fn duration_string(d: std::time::Duration) -> String {
    let mut out = Vec::with_capacity(24);
    write_go_duration(&mut out, i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn dur(ns: i64) -> String {
        let mut out = Vec::new();
        write_go_duration(&mut out, ns);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parse_int_as_go() {
        assert_eq!(parse_int("42", 64), Ok(42));
        assert_eq!(parse_int("+4", 32), Ok(4));
        assert_eq!(parse_int("-2147483648", 32), Ok(-2_147_483_648));
        for (text, bits, quoted, why) in [
            ("2147483648", 32, r#""2147483648""#, "value out of range"),
            (
                "99999999999999999999",
                64,
                r#""99999999999999999999""#,
                "value out of range",
            ),
            ("4\n", 32, r#""4\n""#, "invalid syntax"),
            ("", 64, r#""""#, "invalid syntax"),
        ] {
            assert_eq!(
                parse_int(text, bits).unwrap_err(),
                format!("strconv.ParseInt: parsing {quoted}: {why}"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn go_duration_strings() {
        let ms = 1_000_000i64;
        let s = 1_000_000_000i64;
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (500, "500ns"),
            (999, "999ns"),
            (1_000, "1µs"),
            (1_100, "1.1µs"),
            (1_500_000, "1.5ms"),
            (ms, "1ms"),
            (999_999_999, "999.999999ms"),
            (s, "1s"),
            (10 * s, "10s"),
            (15_012 * ms, "15.012s"),
            (20_034 * ms, "20.034s"),
            (17_913 * ms, "17.913s"),
            // Every count of trailing zeros in the fraction.
            (1_200 * ms, "1.2s"),
            (1_230 * ms, "1.23s"),
            (s + 1_000_000, "1.001s"),
            (s + 100_000, "1.0001s"),
            (s + 10_000, "1.00001s"),
            (s + 1_000, "1.000001s"),
            (s + 100, "1.0000001s"),
            (s + 10, "1.00000001s"),
            (1_000_100, "1.0001ms"),
            (1_010_000, "1.01ms"),
            (15 * s + 1_000_000_001 - s, "15.000000001s"),
            (60 * s, "1m0s"),
            (61 * s + 1, "1m1.000000001s"),
            (3600 * s, "1h0m0s"),
            (3723 * s + 500 * ms, "1h2m3.5s"),
            (-2 * s, "-2s"),
            (-1_500_000, "-1.5ms"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (ns, want) in cases {
            assert_eq!(dur(*ns), *want, "{ns}");
        }
    }

    #[test]
    fn parse_duration_reads_the_sign_and_errs_as_go() {
        use std::time::Duration;
        assert_eq!(
            parse_duration("1m30s"),
            Ok((false, Duration::from_secs(90)))
        );
        assert_eq!(
            parse_duration("+1.5s"),
            Ok((false, Duration::from_millis(1500)))
        );
        assert_eq!(
            parse_duration("-500ms"),
            Ok((true, Duration::from_millis(500)))
        );
        assert_eq!(parse_duration("-0"), Ok((true, Duration::ZERO)));
        assert_eq!(
            parse_duration("-"),
            Err("time: invalid duration \"-\"".to_owned())
        );
        assert_eq!(
            parse_duration("5x"),
            Err("time: unknown unit \"x\" in duration \"5x\"".to_owned())
        );
        assert_eq!(
            parse_duration("5"),
            Err("time: missing unit in duration \"5\"".to_owned())
        );
    }

    #[test]
    fn quote_is_gos_strconv_quote() {
        let cases: &[(&str, &str)] = &[
            ("", r#""""#),
            ("web", r#""web""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("\n\t\r", r#""\n\t\r""#),
            ("\u{7}\u{8}\u{c}\u{b}", r#""\a\b\f\v""#),
            ("\u{1}\u{1f}\u{7f}", r#""\x01\x1f\x7f""#),
            ("\u{85}\u{2028}\u{feff}", r#""\u0085\u2028\ufeff""#),
            ("\u{10fffe}", r#""\U0010fffe""#),
            ("µs ünïcödé 日本", r#""µs ünïcödé 日本""#),
        ];
        for (input, want) in cases {
            assert_eq!(quote(input), *want, "{input:?}");
        }
    }
}
