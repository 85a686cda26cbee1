//! Byte-level scanning for the `/metrics/resource` parser: character classes, the quote
//! search, and the number parsers. Positions are indices into the whole body so errors can
//! carry a byte offset.

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

pub(super) fn is(class: u8, b: u8) -> bool {
    CLASS[b as usize] & class != 0
}

pub(super) fn is_blank(b: u8) -> bool {
    is(BLANK, b)
}

pub(super) fn skip_blanks(b: &[u8], mut pos: usize, end: usize) -> usize {
    while pos < end && is_blank(b[pos]) {
        pos += 1;
    }
    pos
}

/// The first `"` or `\\` in `b[from..end]`, eight bytes at a time (SWAR): label values
/// are 5 to 60 bytes, too short for a SIMD search to pay for its setup.
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

/// Clinger's fast path for the plain decimals the kubelet prints (`4.710169`,
/// `1.253376e+07`): when the digits fit in 2^53 and the power of ten is at most 22, one
/// multiplication or division of two exact doubles is the correctly rounded result, the same
/// as Go's `strconv.ParseFloat`. Anything else (more digits, signs, `Inf`, `NaN`, huge
/// exponents) returns `None` and goes to the standard library's parser.
pub(super) fn parse_float(b: &[u8], start: usize, end: usize) -> Option<(f64, usize)> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let token = &b[start..end];
    let mut mantissa: u64 = 0;
    let mut digits = 0usize;
    let mut exponent: i64 = 0;
    let mut pos = 0;
    while pos < token.len() && token[pos].is_ascii_digit() {
        mantissa = mantissa.wrapping_mul(10) + u64::from(token[pos] - b'0');
        digits += 1;
        pos += 1;
    }
    if pos < token.len() && token[pos] == b'.' {
        pos += 1;
        while pos < token.len() && token[pos].is_ascii_digit() {
            mantissa = mantissa.wrapping_mul(10) + u64::from(token[pos] - b'0');
            digits += 1;
            exponent -= 1;
            pos += 1;
        }
    }
    if digits == 0 || digits > 15 {
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
    // 15 digits are below 2^53, so `mantissa as f64` is exact.
    let m = mantissa as f64;
    let value = match exponent {
        0..=22 => m * POW10[exponent as usize],
        -22..=-1 => m / POW10[(-exponent) as usize],
        _ => return None,
    };
    Some((value, start + pos))
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
    let digits_start = pos;
    // 19 digits always fit in a u64.
    let mut ms: u64 = 0;
    while pos < end && b[pos].is_ascii_digit() && pos - digits_start < 19 {
        ms = ms * 10 + u64::from(b[pos] - b'0');
        pos += 1;
    }
    if pos == digits_start || (pos < end && !is_blank(b[pos])) {
        return None;
    }
    let ns = i64::try_from(ms).ok()?.checked_mul(1_000_000)?;
    Some((ns, pos))
}
