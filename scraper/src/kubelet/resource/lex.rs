//! Byte-level scanning for the `/metrics/resource` parser: character classes, the quote
//! search, and the number parsers. Positions are indices into the whole body so errors can
//! carry a byte offset.
//!
//! The small scanners run for every line and are `#[inline(always)]`: left to the compiler,
//! a change elsewhere in the parser made it call them instead, ~14k instructions a body
//! (`BENCHMARKS.md`, "The parser's per-line work").

/// Byte classes, one table lookup per byte on the hot loops.
pub(super) const BLANK: u8 = 1;
pub(super) const NAME: u8 = 2;
pub(super) const NAME_START: u8 = 4;
pub(super) const LABEL: u8 = 8;
pub(super) const LABEL_START: u8 = 16;
pub(super) const QUOTE_OR_BACKSLASH: u8 = 32;

static CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let alpha = b.is_ascii_alphabetic() || b == b'_';
        let digit = b.is_ascii_digit();
        let mut class = 0;
        if b == b' ' || b == b'\t' {
            class |= BLANK;
        }
        if alpha || b == b':' {
            class |= NAME_START | NAME;
        }
        if digit {
            class |= NAME | LABEL;
        }
        if alpha {
            class |= LABEL_START | LABEL;
        }
        if b == b'"' || b == b'\\' {
            class |= QUOTE_OR_BACKSLASH;
        }
        table[i] = class;
        i += 1;
    }
    table
};

#[inline(always)]
pub(super) fn is(class: u8, b: u8) -> bool {
    CLASS[b as usize] & class != 0
}

#[inline(always)]
pub(super) fn is_blank(b: u8) -> bool {
    is(BLANK, b)
}

#[inline(always)]
pub(super) fn skip_blanks(b: &[u8], mut pos: usize, end: usize) -> usize {
    while pos < end && is_blank(b[pos]) {
        pos += 1;
    }
    pos
}

/// The first `"` or `\\` in `b[from..end]`, eight bytes at a time (SWAR): label values
/// are 5 to 60 bytes, too short for a SIMD search to pay for its setup.
#[inline(always)]
pub(super) fn find_quote(b: &[u8], from: usize, end: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut pos = from;
    while pos + 8 <= end {
        let Ok(chunk) = <[u8; 8]>::try_from(&b[pos..pos + 8]) else {
            break;
        };
        let word = u64::from_le_bytes(chunk);
        let quotes = word ^ (ONES * u64::from(b'"'));
        let backslashes = word ^ (ONES * u64::from(b'\\'));
        // A zero byte of `x` sets its high bit in `x - ONES & !x & HIGHS`; the lowest one is
        // exact (borrows only move upwards).
        let found = (quotes.wrapping_sub(ONES) & !quotes & HIGHS)
            | (backslashes.wrapping_sub(ONES) & !backslashes & HIGHS);
        if found != 0 {
            return Some(pos + (found.trailing_zeros() / 8) as usize);
        }
        pos += 8;
    }
    while pos < end {
        if is(QUOTE_OR_BACKSLASH, b[pos]) {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// The value of the eight ASCII digits at `b[pos..pos + 8]`, or `None` when they are not all
/// digits (or fewer than eight bytes are left): one load, one check and three multiplications
/// instead of eight rounds of the byte loop (the kubelet's timestamps have 13 digits, its
/// values' fractions 6 to 10).
#[inline(always)]
fn eight_digits(b: &[u8], pos: usize) -> Option<u64> {
    let chunk: [u8; 8] = b.get(pos..pos.checked_add(8)?)?.try_into().ok()?;
    let word = u64::from_le_bytes(chunk);
    // A byte below `0` borrows into its high bit; one above `9` carries into it.
    let below = word.wrapping_sub(0x3030_3030_3030_3030);
    let above = word.wrapping_add(0x4646_4646_4646_4646);
    if (below | above) & 0x8080_8080_8080_8080 != 0 {
        return None;
    }
    // Pairs, then quads, then the eight digits (the first digit is the lowest byte).
    let pairs = below.wrapping_mul(10).wrapping_add(below >> 8);
    const LOW: u64 = 0x0000_00ff_0000_00ff;
    let quads = (pairs & LOW).wrapping_mul(100 + (1_000_000 << 32));
    let rest = ((pairs >> 16) & LOW).wrapping_mul(1 + (10_000 << 32));
    Some(quads.wrapping_add(rest) >> 32)
}

/// Appends the run of decimal digits at `token[pos..]` to `mantissa`; returns the position
/// after it and how many digits it had. 19 digits always fit in a u64; past that the
/// mantissa wraps, and the callers refuse so many (a float's fast path more than 15, a
/// timestamp more than 19).
#[inline(always)]
fn digit_run(token: &[u8], mut pos: usize, mantissa: &mut u64) -> (usize, usize) {
    let start = pos;
    while let Some(eight) = eight_digits(token, pos) {
        *mantissa = mantissa.wrapping_mul(100_000_000).wrapping_add(eight);
        pos += 8;
    }
    while pos < token.len() && token[pos].is_ascii_digit() {
        *mantissa = mantissa
            .wrapping_mul(10)
            .wrapping_add(u64::from(token[pos] - b'0'));
        pos += 1;
    }
    (pos, pos - start)
}

/// A plain decimal at `b[start..]` (digits, an optional fraction and exponent, then a blank
/// or the end of the line), and the position after it. Clinger's fast path gives its value
/// (`Some`) for the decimals the kubelet prints (`4.710169`, `1.253376e+07`): when the
/// digits fit in 2^53 and the power of ten is at most 22, one multiplication or division of
/// two exact doubles is the correctly rounded result, the same as Go's `strconv.ParseFloat`.
/// A plain decimal with more digits (a start time, `1.7645807605001578e+09`) or a larger
/// exponent is `None`, for the standard library's parser to read from `b[start..]` to the
/// position returned; anything else (signs, `Inf`, `NaN`) is not a plain decimal: `None`
/// altogether.
#[inline(always)]
pub(super) fn parse_float(b: &[u8], start: usize, end: usize) -> Option<(Option<f64>, usize)> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let token = &b[start..end];
    let mut mantissa: u64 = 0;
    let mut exponent: i64 = 0;
    let (mut pos, mut digits) = digit_run(token, 0, &mut mantissa);
    if pos < token.len() && token[pos] == b'.' {
        let fraction;
        (pos, fraction) = digit_run(token, pos + 1, &mut mantissa);
        digits += fraction;
        exponent -= fraction as i64;
    }
    if digits == 0 {
        return None;
    }
    if pos < token.len() && (token[pos] == b'e' || token[pos] == b'E') {
        pos += 1;
        let negative = match token.get(pos) {
            Some(b'-') => {
                pos += 1;
                true
            }
            Some(b'+') => {
                pos += 1;
                false
            }
            _ => false,
        };
        let exp_start = pos;
        let mut e: i64 = 0;
        while pos < token.len() && token[pos].is_ascii_digit() && pos - exp_start < 4 {
            e = e * 10 + i64::from(token[pos] - b'0');
            pos += 1;
        }
        if pos == exp_start {
            return None;
        }
        exponent += if negative { -e } else { e };
    }
    if pos < token.len() && !is_blank(token[pos]) {
        return None;
    }
    if digits > 15 {
        let value = if digits <= 19 {
            long_decimal(mantissa, exponent)
        } else {
            None
        };
        return Some((value, start + pos));
    }
    // 15 digits are below 2^53, so `mantissa as f64` is exact.
    let m = mantissa as f64;
    let value = match exponent {
        0..=22 => Some(m * POW10[exponent as usize]),
        -22..=-1 => Some(m / POW10[(-exponent) as usize]),
        _ => None,
    };
    Some((value, start + pos))
}

/// `mantissa * 10^exponent` correctly rounded (to nearest, ties to even, as Go's
/// `strconv.ParseFloat` and the standard library round), for the 16 to 19 digits that
/// Clinger's fast path cannot take: the kubelet's nanosecond start times
/// (`1.7645807605001578e+09`). The exact value is a ratio of integers that fit in 128 bits,
/// so it is computed exactly (an integer, or a quotient of 54 bits or more and whether a
/// remainder was left) and rounded once. `None` (the standard library's parser then reads
/// the text) outside what 128 bits hold exactly.
fn long_decimal(mantissa: u64, exponent: i64) -> Option<f64> {
    /// 10^0 to 10^27, as u128.
    const POW10: [u128; 28] = {
        let mut table = [1u128; 28];
        let mut i = 1;
        while i < 28 {
            table[i] = table[i - 1] * 10;
            i += 1;
        }
        table
    };
    let (q, inexact, scale) = match exponent {
        // `mantissa < 2^64` and `10^19 < 2^64`: the product fits.
        0..=19 => (u128::from(mantissa) * POW10[exponent as usize], false, 0),
        -27..=-1 => {
            // 10^27 < 2^90: the quotient of `mantissa * 2^64` keeps at least 54 bits when
            // the mantissa has 16 digits or more and the power is not too large; otherwise
            // the standard library's parser takes it. One division; the remainder is what
            // the quotient times the divisor falls short by.
            let divisor = POW10[(-exponent) as usize];
            let scaled = u128::from(mantissa) << 64;
            let q = scaled / divisor;
            (q, q * divisor != scaled, -64)
        }
        _ => return None,
    };
    round_to_f64(q, inexact, scale)
}

/// The double nearest `q * 2^scale` (ties to even), `inexact` saying that the true value is
/// a little above `q * 2^scale` (a remainder was dropped). `None` when `q` has fewer than 54
/// bits and is inexact (too few bits to round from) or when the result would not be a
/// normal double.
fn round_to_f64(q: u128, inexact: bool, scale: i32) -> Option<f64> {
    let bits = 128 - q.leading_zeros() as i32;
    let (mantissa, shift) = if bits <= 53 {
        if inexact {
            return None;
        }
        (q as u64, 0)
    } else {
        let shift = bits - 53;
        let mantissa = (q >> shift) as u64;
        let dropped = q & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let up = dropped > half || (dropped == half && (inexact || mantissa & 1 == 1));
        (mantissa + u64::from(up), shift)
    };
    // `mantissa` has at most 54 bits (2^53 after rounding up), exact as a double; scaling
    // by a power of two within the normal range is exact too.
    let exponent = shift + scale;
    if !(-1022..=1023).contains(&exponent) {
        return None;
    }
    let power = f64::from_bits(((exponent + 1023) as u64) << 52);
    Some(mantissa as f64 * power)
}

/// A Prometheus timestamp (integer Unix ms, optional `+`) at `b[start..]`, in Unix ns, and
/// the position after it. `None` when it is not an integer followed by a blank or the end,
/// or is negative, or is out of range.
pub(super) fn timestamp_ns(b: &[u8], start: usize, end: usize) -> Option<(i64, usize)> {
    let mut pos = start;
    match b.get(pos) {
        Some(b'+') => pos += 1,
        Some(b'-') => return None,
        _ => {}
    }
    let mut ms: u64 = 0;
    let digits;
    (pos, digits) = digit_run(&b[..end], pos, &mut ms);
    if pos < end && !is_blank(b[pos]) {
        return None;
    }
    Some((ms_to_ns(ms, digits)?, pos))
}

/// A timestamp's `digits` digits, read as `ms`, in Unix ns: `None` for no digit, more than
/// 19 (a u64 holds 19; more would have wrapped) or past what an i64 of ns holds.
#[inline(always)]
fn ms_to_ns(ms: u64, digits: usize) -> Option<i64> {
    if digits == 0 || digits > 19 {
        return None;
    }
    i64::try_from(ms).ok()?.checked_mul(1_000_000)
}

/// A timestamp at `b[start..]` that ends its line: its value in Unix ns (as
/// [`timestamp_ns`] reads it) and where the next line starts, after the `\n` or `\r\n`
/// that follows the digits, or the body's end. `None` for anything else (a blank, another
/// byte, a lone `\r` at the body's end), which the general path then reads.
#[inline(always)]
pub(super) fn timestamp_and_line_end(b: &[u8], start: usize) -> Option<(i64, usize)> {
    let mut ms: u64 = 0;
    let (end, digits) = digit_run(b, start, &mut ms);
    let next = match b.get(end) {
        None => end,
        Some(b'\n') => end + 1,
        Some(b'\r') if b.get(end + 1) == Some(&b'\n') => end + 2,
        Some(_) => return None,
    };
    Some((ms_to_ns(ms, digits)?, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_digits_reads_only_runs_of_eight_digits() {
        assert_eq!(eight_digits(b"12345678", 0), Some(12_345_678));
        assert_eq!(eight_digits(b"00000000", 0), Some(0));
        assert_eq!(eight_digits(b"99999999", 0), Some(99_999_999));
        assert_eq!(eight_digits(b"x17645904", 1), Some(17_645_904));
        assert_eq!(eight_digits(b"1234567", 0), None, "seven bytes");
        assert_eq!(eight_digits(b"12345678", 1), None, "past the end");
        // The neighbours of `0` and `9`, and bytes with the high bit, at every place.
        for bad in [b'/', b':', b' ', b'.', b'e', 0x80, 0xb0, 0xff] {
            for at in 0..8 {
                let mut chunk = *b"12345678";
                chunk[at] = bad;
                assert_eq!(eight_digits(&chunk, 0), None, "{bad:#x} at {at}");
            }
        }
    }

    /// What `parse_float` reads `text` as, the standard parser finishing what it leaves.
    fn read(text: &str) -> Option<f64> {
        let (value, end) = parse_float(text.as_bytes(), 0, text.len())?;
        value.or_else(|| text[..end].parse().ok())
    }

    #[test]
    fn long_decimals_round_as_the_standard_parser_does() {
        let cases = [
            // The kubelet's nanosecond start times, as the comparison's fixture has them.
            "1.7645807605001578e+09",
            "1.76444698622967e+09",
            "1.7643759145966237e+09",
            "1764580760.5001578",
            // Ties between two doubles: to even, and up when anything follows.
            "9007199254740993",
            "9007199254740995",
            "9007199254740993.0",
            "900719925474099.3e1",
            "9007199254740993000",
            "18014398509481986",
            "18014398509481990",
            // 19 digits, the most a u64 holds; powers at the edges of the exact path.
            "9999999999999999999",
            "1844674407370955161.5",
            "1.234567890123456789e-27",
            "1.234567890123456789e+19",
            "1234567890123456789e19",
            "0.0000000000000000000",
            "0000000000000000001",
        ];
        for text in cases {
            let expected: f64 = text.parse().expect("a number");
            assert_eq!(
                read(text).map(f64::to_bits),
                Some(expected.to_bits()),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        /// 16 to 19 significant digits, the point anywhere, an optional exponent: the same
        /// double as the standard library's parser (and so as Go's), bit for bit.
        #[test]
        fn long_decimals_agree_with_the_standard_parser(
            digits in "[1-9][0-9]{15,18}",
            point in 0usize..20,
            exponent in proptest::option::of(-30i32..30),
        ) {
            let point = point.min(digits.len());
            let mut text = format!("{}.{}", &digits[..point], &digits[point..]);
            if let Some(e) = exponent {
                text.push_str(&format!("e{e:+03}"));
            }
            let expected: f64 = text.parse().expect("a number");
            proptest::prop_assert_eq!(read(&text).map(f64::to_bits), Some(expected.to_bits()), "{}", text);
        }

        /// On and beside the halfway points between two doubles: `2^53 + 2j + 1` (times a
        /// power of two) lies exactly between two of them, its neighbours just off it.
        #[test]
        fn ties_agree_with_the_standard_parser(j in 0u64..(1 << 52), shift in 0u32..11, off in -1i64..2) {
            let m = ((1u64 << 53) + 2 * j + 1).wrapping_shl(shift).wrapping_add_signed(off);
            let digits = m.to_string();
            for text in [digits.clone(), format!("{digits}e0"), format!("{}.{}e{}", &digits[..1], &digits[1..], digits.len() - 1)] {
                let expected: f64 = text.parse().expect("a number");
                proptest::prop_assert_eq!(read(&text).map(f64::to_bits), Some(expected.to_bits()), "{}", text);
            }
        }
    }

    #[test]
    fn timestamps_of_every_length_agree_with_the_standard_parser() {
        let digits = b"9182736450918273645091827";
        for len in 1..=digits.len() {
            for tail in ["", " ", "x"] {
                let text = [&digits[..len], tail.as_bytes()].concat();
                // Up to 19 digits, ended by a blank or the end of the line.
                let expected = std::str::from_utf8(&digits[..len])
                    .ok()
                    .filter(|_| len <= 19 && tail != "x")
                    .and_then(|t| t.parse::<u64>().ok())
                    .and_then(|ms| i64::try_from(ms).ok()?.checked_mul(1_000_000))
                    .map(|ns| (ns, len));
                assert_eq!(
                    timestamp_ns(&text, 0, text.len()),
                    expected,
                    "{}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
        // Twenty digits that a u64 would wrap to a small number (2^64 + 384) are refused.
        let wraps = b"18446744073709552000";
        assert_eq!(timestamp_ns(wraps, 0, wraps.len()), None);
    }
}
