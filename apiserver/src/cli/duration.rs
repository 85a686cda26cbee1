//! Go's `time.Duration` flag syntax (`15s`, `1m0s`, `1h`, `500ms`, `1.5s`) and Kubernetes
//! byte quantities (`64Mi`), parsed and printed the way metrics-server's flags show them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration written and printed in Go's `time.Duration` syntax (`1m0s`, `10s`, `500ms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub Duration);

/// A flag value that did not parse; the message names the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

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

impl FromStr for GoDuration {
    type Err = ParseError;

    /// Parses `[+]?([0-9]*(\.[0-9]*)?[a-z]+)+` as Go's `time.ParseDuration` does; `0` alone is
    /// allowed. Negative durations are refused: no flag here means anything by them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match GoDuration::parse_signed(s)? {
            (false, d) => Ok(d),
            (true, _) => Err(ParseError(format!(
                "time: negative duration \"{s}\" is not allowed"
            ))),
        }
    }
}

impl GoDuration {
    /// Go's `time.ParseDuration` whole: whether the duration is negative (`-` before it), and
    /// its magnitude; the errors are Go's.
    pub fn parse_signed(s: &str) -> Result<(bool, GoDuration), ParseError> {
        let invalid = || ParseError(format!("time: invalid duration \"{s}\""));
        let (negative, mut rest) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        if rest == "0" {
            return Ok((negative, GoDuration(Duration::ZERO)));
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
                return Err(ParseError(format!(
                    "time: missing unit in duration \"{s}\""
                )));
            }
            let per = NANOS_PER
                .iter()
                .find(|(name, _)| *name == unit && !name.is_empty())
                .map(|&(_, per)| per)
                .ok_or_else(|| {
                    ParseError(format!("time: unknown unit \"{unit}\" in duration \"{s}\""))
                })?;
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
        Ok((negative, GoDuration(Duration::new(secs, nanos))))
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String()`: `1h0m0s`, `1m0s`, `1.5s`, `500ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&scraper::go::duration_string(self.0))
    }
}

impl From<GoDuration> for Duration {
    fn from(d: GoDuration) -> Duration {
        d.0
    }
}

/// A size in bytes written as a Kubernetes quantity: `67108864`, `64Mi`, `1Gi`, `500k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

const SUFFIXES: [(&str, u64); 10] = [
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("Pi", 1 << 50),
    ("k", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("P", 1_000_000_000_000_000),
];

impl FromStr for ByteSize {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            ParseError(format!(
                "invalid byte quantity \"{s}\" (e.g. 67108864, 64Mi, 1Gi)"
            ))
        };
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, suffix) = s.split_at(digits);
        if number.is_empty() {
            return Err(invalid());
        }
        let number: u64 = number.parse().map_err(|_| invalid())?;
        let multiplier = if suffix.is_empty() {
            1
        } else {
            SUFFIXES
                .iter()
                .find(|(name, _)| *name == suffix)
                .map(|&(_, m)| m)
                .ok_or_else(invalid)?
        };
        number
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(invalid)
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary suffix that divides the value exactly, else plain bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &(name, m) in SUFFIXES[..5].iter().rev() {
            if self.0 != 0 && self.0.is_multiple_of(m) {
                return write!(f, "{}{name}", self.0 / m);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn d(s: &str) -> Duration {
        s.parse::<GoDuration>().unwrap().0
    }

    #[test]
    fn parses_go_duration_syntax() {
        assert_eq!(d("15s"), Duration::from_secs(15));
        assert_eq!(d("1m0s"), Duration::from_secs(60));
        assert_eq!(d("1h"), Duration::from_secs(3600));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("1h2m3.25s"), Duration::from_millis(3_723_250));
        assert_eq!(d(".5m"), Duration::from_secs(30));
        assert_eq!(d("2us"), Duration::from_nanos(2_000));
        assert_eq!(d("2µs"), Duration::from_nanos(2_000));
        assert_eq!(d("7ns"), Duration::from_nanos(7));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("0s"), Duration::ZERO);
        assert_eq!(d("+3s"), Duration::from_secs(3));
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in [
            "",
            "10",
            "1x",
            "s",
            ".s",
            "1.5",
            "-1s",
            "1s2",
            "abc",
            "1 s",
            "9999999999h",
        ] {
            assert!(bad.parse::<GoDuration>().is_err(), "{bad:?} parsed");
        }
        let err = "5x".parse::<GoDuration>().unwrap_err().to_string();
        assert_eq!(err, "time: unknown unit \"x\" in duration \"5x\"");
        let err = "10".parse::<GoDuration>().unwrap_err().to_string();
        assert_eq!(err, "time: missing unit in duration \"10\"");
    }

    #[test]
    fn prints_like_go() {
        let show = |ns: u64| GoDuration(Duration::from_nanos(ns)).to_string();
        assert_eq!(show(60_000_000_000), "1m0s");
        assert_eq!(show(10_000_000_000), "10s");
        assert_eq!(show(1_500_000_000), "1.5s");
        assert_eq!(show(500_000_000), "500ms");
        assert_eq!(show(3_600_000_000_000), "1h0m0s");
        assert_eq!(show(5_400_000_000_000), "1h30m0s");
        assert_eq!(show(0), "0s");
        assert_eq!(show(1_500), "1.5µs");
        assert_eq!(show(90_250_000_000), "1m30.25s");
    }

    #[test]
    fn printing_round_trips() {
        for ns in [
            1u64,
            999,
            1_000,
            1_234_567,
            999_999_999,
            1_000_000_001,
            61_000_000_000,
            7_384_000_000_000,
        ] {
            let text = GoDuration(Duration::from_nanos(ns)).to_string();
            assert_eq!(d(&text), Duration::from_nanos(ns), "{text}");
        }
    }

    #[test]
    fn byte_sizes() {
        let b = |s: &str| s.parse::<ByteSize>().unwrap().0;
        assert_eq!(b("64Mi"), 64 << 20);
        assert_eq!(b("1Gi"), 1 << 30);
        assert_eq!(b("500k"), 500_000);
        assert_eq!(b("1048576"), 1 << 20);
        for bad in ["", "Mi", "64MB", "-1", "1.5Mi", "99999999999Pi"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?} parsed");
        }
        assert_eq!(ByteSize(64 << 20).to_string(), "64Mi");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }
}
