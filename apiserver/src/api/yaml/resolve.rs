//! go-yaml v2's implicit typing of a plain scalar (`resolve.go`), with the parts of Go's
//! `strconv` and `time` it calls: whether a string, written plain, would read back as
//! something else.

/// `resolveMap`'s strings that start with a hinted character: bools, nulls, infinities and
/// NaN (`<<` is there too, but `<` has no hint, so it is never looked up).
const RESOLVE_MAP: [&str; 38] = [
    "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no", "No",
    "NO", "false", "False", "FALSE", "off", "Off", "OFF", "~", "null", "Null", "NULL", ".nan",
    ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
];

/// `resolve("", s)` gives a tag other than `!!str`: plain, `s` would read back as a null, a
/// bool, a number or a timestamp. The first byte's hint (`resolveTable`) picks the checks.
pub(super) fn resolves_to_other_tag(s: &str) -> bool {
    let Some(&first) = s.as_bytes().first() else {
        // Hint 'N': "" is `resolveMap`'s null.
        return true;
    };
    let in_map = || RESOLVE_MAP.contains(&s);
    match first {
        b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~' => in_map(),
        b'.' => in_map() || dot_float_parses(s),
        b'+' | b'-' | b'0'..=b'9' => in_map() || number_or_timestamp(s),
        _ => false,
    }
}

/// `resolve`'s 'D' and 'S' hints: a timestamp, then (underscores dropped) an int, a uint, a
/// float in YAML's syntax that Go reads without overflow, a `0b` / `-0b` binary int Go's
/// `ParseInt` reads with a sign after the prefix, or an unsigned integer past 64 bits
/// (a `*big.Int`).
fn number_or_timestamp(s: &str) -> bool {
    if parses_as_timestamp(s) {
        return true;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let plain = plain.as_bytes();
    if parse_int_ok(plain, 0) {
        return true;
    }
    let unsigned = parse_uint(plain, 0);
    if unsigned.is_ok() {
        return true;
    }
    if is_yaml_style_float(plain) && parses_to_finite_f64(plain) {
        return true;
    }
    let binary = if let Some(digits) = plain.strip_prefix(b"0b") {
        parse_int_ok(digits, 2) || parse_uint(digits, 2).is_ok()
    } else if let Some(digits) = plain.strip_prefix(b"-0b") {
        parse_int_ok(&[b"-", digits].concat(), 2)
    } else {
        false
    };
    binary || (unsigned == Err(NumError::Range) && is_unsigned_literal(plain))
}

/// Why Go's `strconv.ParseUint` fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumError {
    Syntax,
    Range,
}

/// Go's `strconv.ParseUint(s, base, 64)` for base 0 (`0b`, `0o`, `0x` and `0` prefixes) or
/// an explicit base, on a string without `_`. As in Go, an overflow is reported as soon as
/// it happens, before the digits after it are checked.
fn parse_uint(s: &[u8], base: u32) -> Result<u64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let (base, digits) = if base == 0 { base_prefix(s) } else { (base, s) };
    digits.iter().try_fold(0u64, |n, &c| {
        let digit = char::from(c)
            .to_digit(36)
            .filter(|&d| d < base)
            .ok_or(NumError::Syntax)?;
        n.checked_mul(u64::from(base))
            .and_then(|n| n.checked_add(u64::from(digit)))
            .ok_or(NumError::Range)
    })
}

/// `ParseUint`'s base 0: the base a prefix names and the digits after it.
fn base_prefix(s: &[u8]) -> (u32, &[u8]) {
    match s {
        [b'0', p, rest @ ..] if !rest.is_empty() && matches!(p | 0x20, b'b' | b'o' | b'x') => {
            let base = match p | 0x20 {
                b'b' => 2,
                b'o' => 8,
                _ => 16,
            };
            (base, rest)
        }
        [b'0', rest @ ..] => (8, rest),
        _ => (10, s),
    }
}

/// Go's `strconv.ParseInt(s, base, 64)` succeeds: an optional sign, then what
/// [`parse_uint`] reads, within `int64`.
fn parse_int_ok(s: &[u8], base: u32) -> bool {
    let (negative, unsigned) = match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    };
    let limit = 1u64 << 63;
    parse_uint(unsigned, base).is_ok_and(|n| if negative { n <= limit } else { n < limit })
}

/// `big.Int.SetString(s, 0)` succeeds, for a string `ParseUint` found too large: the digits
/// after the base prefix are all of that base.
fn is_unsigned_literal(s: &[u8]) -> bool {
    let (base, digits) = base_prefix(s);
    !digits.is_empty()
        && digits
            .iter()
            .all(|&c| char::from(c).to_digit(36).is_some_and(|d| d < base))
}

/// `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &[u8]) -> bool {
    let s = strip_sign(s);
    let (int_digits, s) = split_digits(s);
    let s = match s.strip_prefix(b".") {
        Some(fraction) => {
            let (fraction_digits, rest) = split_digits(fraction);
            if int_digits == 0 && fraction_digits == 0 {
                return false;
            }
            rest
        }
        None if int_digits == 0 => return false,
        None => s,
    };
    match s {
        [] => true,
        [b'e' | b'E', exponent @ ..] => {
            let exponent = strip_sign(exponent);
            !exponent.is_empty() && exponent.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

/// `s` without one leading `+` or `-`.
fn strip_sign(s: &[u8]) -> &[u8] {
    match s {
        [b'+' | b'-', rest @ ..] => rest,
        _ => s,
    }
}

/// The number of leading ASCII digits of `s`, and the rest.
fn split_digits(s: &[u8]) -> (usize, &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    (n, s.get(n..).unwrap_or_default())
}

/// Go's `strconv.ParseFloat(s, 64)` gives no `ErrRange` for a decimal string it reads: the
/// nearest `f64` is finite.
fn parses_to_finite_f64(s: &[u8]) -> bool {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}

/// `resolve`'s '.' hint: Go's `strconv.ParseFloat(s, 64)` succeeds for `s` starting with
/// `.` (`readFloat`: digits and `_` with one `.`, an optional exponent; `underscoreOK`; no
/// overflow).
fn dot_float_parses(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut saw_dot = false;
    let mut saw_digits = false;
    let mantissa = bytes
        .iter()
        .take_while(|&&c| match c {
            b'_' => true,
            b'.' if !saw_dot => {
                saw_dot = true;
                true
            }
            b'0'..=b'9' => {
                saw_digits = true;
                true
            }
            _ => false,
        })
        .count();
    let rest = bytes.get(mantissa..).unwrap_or_default();
    let rest = match rest {
        [b'e' | b'E', exponent @ ..] => {
            let exponent = strip_sign(exponent);
            if !exponent.first().is_some_and(u8::is_ascii_digit) {
                return false;
            }
            let n = exponent
                .iter()
                .take_while(|&&c| c.is_ascii_digit() || c == b'_')
                .count();
            exponent.get(n..).unwrap_or_default()
        }
        _ => rest,
    };
    saw_digits
        && rest.is_empty()
        && underscores_between_digits(bytes)
        && parses_to_finite_f64(
            &bytes
                .iter()
                .copied()
                .filter(|&c| c != b'_')
                .collect::<Vec<_>>(),
        )
}

/// Go's `underscoreOK` for a number without sign or base prefix: each `_` sits between two
/// digits.
fn underscores_between_digits(s: &[u8]) -> bool {
    let digit_at = |i: Option<usize>| i.and_then(|i| s.get(i)).is_some_and(u8::is_ascii_digit);
    s.iter()
        .enumerate()
        .filter(|&(_, &c)| c == b'_')
        .all(|(i, _)| digit_at(i.checked_sub(1)) && digit_at(i.checked_add(1)))
}

/// `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`, which go-yaml
/// quotes for older YAML 1.1 readers.
pub(super) fn is_base60_float(s: &str) -> bool {
    let digit_or_underscore = |c: &u8| c.is_ascii_digit() || *c == b'_';
    let s = strip_sign(s.as_bytes());
    let [b'0'..=b'9', rest @ ..] = s else {
        return false;
    };
    let mut rest = rest.get(rest.iter().take_while(|c| digit_or_underscore(c)).count()..);
    let mut groups = 0;
    while let Some([b':', after @ ..]) = rest {
        rest = match after {
            [b'0'..=b'5', b'0'..=b'9', tail @ ..] | [b'0'..=b'9', tail @ ..] => Some(tail),
            _ => return false,
        };
        groups += 1;
    }
    let rest = rest.unwrap_or_default();
    groups > 0
        && match rest {
            [] => true,
            [b'.', fraction @ ..] => fraction.iter().all(digit_or_underscore),
            _ => false,
        }
}

/// One element of a Go time layout, as `time.Parse` splits it (`nextStdChunk`).
#[derive(Clone, Copy, Debug)]
enum Chunk {
    /// Text to match (`skip`: a space matches any run of spaces).
    Literal(&'static [u8]),
    /// `2006`
    LongYear,
    /// `1`
    NumMonth,
    /// `2`
    Day,
    /// `15`
    Hour,
    /// `4`
    Minute,
    /// `5`
    Second,
    /// `.999999999`
    FracSecond9,
    /// `Z07:00`
    Iso8601ColonTz,
}

/// The date of the timestamp layouts: `2006-1-2`.
const DATE: &[Chunk] = &[
    Chunk::LongYear,
    Chunk::Literal(b"-"),
    Chunk::NumMonth,
    Chunk::Literal(b"-"),
    Chunk::Day,
];

/// The time of day of the timestamp layouts: `15:4:5.999999999`.
const CLOCK: &[Chunk] = &[
    Chunk::Hour,
    Chunk::Literal(b":"),
    Chunk::Minute,
    Chunk::Literal(b":"),
    Chunk::Second,
    Chunk::FracSecond9,
];

/// `allowedTimestampFormats`, each in parts: `2006-1-2T15:4:5.999999999Z07:00`, the same
/// with `t`, `2006-1-2 15:4:5.999999999` and `2006-1-2`.
const TIMESTAMP_FORMATS: [&[&[Chunk]]; 4] = [
    &[
        DATE,
        &[Chunk::Literal(b"T")],
        CLOCK,
        &[Chunk::Iso8601ColonTz],
    ],
    &[
        DATE,
        &[Chunk::Literal(b"t")],
        CLOCK,
        &[Chunk::Iso8601ColonTz],
    ],
    &[DATE, &[Chunk::Literal(b" ")], CLOCK],
    &[DATE],
];

/// `parseTimestamp`: four digits and `-`, then one of the formats `time.Parse` accepts.
fn parses_as_timestamp(s: &str) -> bool {
    let bytes = s.as_bytes();
    let year_digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    year_digits == 4
        && bytes.get(4) == Some(&b'-')
        && TIMESTAMP_FORMATS
            .iter()
            .any(|parts| time_parse(parts.iter().copied().flatten(), bytes).is_some())
}

/// Go's `time.Parse(layout, value)` succeeds: every chunk reads, its value in range, nothing
/// left over, and the day exists in its month.
fn time_parse<'c>(layout: impl Iterator<Item = &'c Chunk>, mut value: &[u8]) -> Option<()> {
    let (mut year, mut month, mut day) = (0, 1, 1);
    for chunk in layout {
        value = match *chunk {
            Chunk::Literal(prefix) => skip(value, prefix)?,
            Chunk::LongYear => {
                let (digits, rest) = value.split_at_checked(4)?;
                if !digits.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                year = digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
                rest
            }
            Chunk::NumMonth => {
                let rest;
                (month, rest) = getnum(value).filter(|(m, _)| (1..=12).contains(m))?;
                rest
            }
            Chunk::Day => {
                let rest;
                (day, rest) = getnum(value)?;
                rest
            }
            Chunk::Hour => getnum(value).filter(|&(h, _)| h < 24)?.1,
            Chunk::Minute | Chunk::Second => getnum(value).filter(|&(n, _)| n < 60)?.1,
            Chunk::FracSecond9 => fractional_second(value),
            Chunk::Iso8601ColonTz => iso8601_colon_tz(value)?,
        };
    }
    (value.is_empty() && (1..=days_in(month, year)).contains(&day)).then_some(())
}

/// Go's `skip`: `value` after `prefix`, a space in `prefix` matching any run of spaces.
fn skip<'v>(mut value: &'v [u8], mut prefix: &[u8]) -> Option<&'v [u8]> {
    let after_spaces = |s: &[u8]| s.iter().take_while(|&&c| c == b' ').count();
    while let Some((&p, prefix_rest)) = prefix.split_first() {
        if p == b' ' {
            if value.first().is_some_and(|&v| v != b' ') {
                return None;
            }
            prefix = prefix.get(after_spaces(prefix)..).unwrap_or_default();
            value = value.get(after_spaces(value)..).unwrap_or_default();
            continue;
        }
        let (&v, value_rest) = value.split_first()?;
        if v != p {
            return None;
        }
        (prefix, value) = (prefix_rest, value_rest);
    }
    Some(value)
}

/// Go's `getnum(s, false)`: one or two digits.
fn getnum(s: &[u8]) -> Option<(u32, &[u8])> {
    let digit = |d: &u8| u32::from(d - b'0');
    match s {
        [a @ b'0'..=b'9', b @ b'0'..=b'9', rest @ ..] => Some((digit(a) * 10 + digit(b), rest)),
        [a @ b'0'..=b'9', rest @ ..] => Some((digit(a), rest)),
        _ => None,
    }
}

/// `stdFracSecond9`: a `.` or `,` and all the digits after it, when a digit follows it.
fn fractional_second(value: &[u8]) -> &[u8] {
    match value {
        [b'.' | b',', digits @ ..] if digits.first().is_some_and(u8::is_ascii_digit) => {
            split_digits(digits).1
        }
        _ => value,
    }
}

/// `stdISO8601ColonTZ`: `Z`, or a sign, `hh:mm` with hours to 24 and minutes to 60.
fn iso8601_colon_tz(value: &[u8]) -> Option<&[u8]> {
    if let Some(rest) = value.strip_prefix(b"Z") {
        return Some(rest);
    }
    let two = |a: u8, b: u8| u32::from(a - b'0') * 10 + u32::from(b - b'0');
    match *value {
        [
            b'+' | b'-',
            h1 @ b'0'..=b'9',
            h2 @ b'0'..=b'9',
            b':',
            m1 @ b'0'..=b'9',
            m2 @ b'0'..=b'9',
            ref rest @ ..,
        ] if two(h1, h2) <= 24 && two(m1, m2) <= 60 => Some(rest),
        _ => None,
    }
}

/// Go's `daysIn` for a month 1..=12.
fn days_in(month: u32, year: u32) -> u32 {
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}
