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

impl FromStr for GoDuration {
    type Err = ParseError;

    /// Parses `[+]?([0-9]*(\.[0-9]*)?[a-z]+)+` as Go's `time.ParseDuration` does
    /// ([`scraper::go::parse_duration`]); `0` alone is allowed. Negative durations are
    /// refused: no flag here means anything by them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match scraper::go::parse_duration(s).map_err(ParseError)? {
            (false, d) => Ok(GoDuration(d)),
            (true, _) => Err(ParseError(format!(
                "time: negative duration \"{s}\" is not allowed"
            ))),
        }
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
