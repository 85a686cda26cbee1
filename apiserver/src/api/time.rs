//! Go's time formats: `metav1.Time` (RFC 3339, whole seconds, UTC `Z`), written without
//! allocation; `time.Duration.String()` (the `window` field) is [`scraper::go`]'s.

pub use scraper::go::write_go_duration;

const NS_PER_S: i64 = 1_000_000_000;

/// Civil date and time of a Unix instant, in UTC. Seconds are floored toward -inf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    /// Year (proleptic Gregorian).
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    /// 0..=23
    pub hour: u32,
    /// 0..=59
    pub minute: u32,
    /// 0..=59
    pub second: u32,
    /// 0 = Sunday
    pub weekday: u32,
}

impl Civil {
    /// From Unix seconds.
    pub fn from_unix_seconds(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400) as u32;
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: sod / 3600,
            minute: sod / 60 % 60,
            second: sod % 60,
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }

    /// From Unix nanoseconds (floored to the second).
    pub fn from_unix_ns(ns: i64) -> Self {
        Self::from_unix_seconds(ns.div_euclid(NS_PER_S))
    }
}

fn push2(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&digits2(v));
}

/// Four digits of `year`; i64 nanoseconds span the years 1677..=2262, so this is exact.
fn push_year(out: &mut Vec<u8>, year: i64) {
    let y = year.clamp(0, 9999) as u32;
    push2(out, y / 100);
    push2(out, y % 100);
}

/// `15:04:05`.
fn push_clock(out: &mut Vec<u8>, c: &Civil) {
    push2(out, c.hour);
    out.push(b':');
    push2(out, c.minute);
    out.push(b':');
    push2(out, c.second);
}

/// Two ASCII digits of `v % 100`.
#[inline]
fn digits2(v: u32) -> [u8; 2] {
    [b'0' + (v / 10 % 10) as u8, b'0' + (v % 10) as u8]
}

/// `2006-01-02T15:04:05Z` of a Unix time in nanoseconds, as bytes.
#[inline]
pub fn rfc3339(unix_ns: i64) -> [u8; 20] {
    let c = Civil::from_unix_ns(unix_ns);
    let y = c.year.clamp(0, 9999) as u32;
    let [y0, y1] = digits2(y / 100);
    let [y2, y3] = digits2(y % 100);
    let [m0, m1] = digits2(c.month);
    let [d0, d1] = digits2(c.day);
    let [h0, h1] = digits2(c.hour);
    let [i0, i1] = digits2(c.minute);
    let [s0, s1] = digits2(c.second);
    [
        y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1, b'T', h0, h1, b':', i0, i1, b':', s0, s1, b'Z',
    ]
}

/// How many seconds [`Stamps`] keeps: more than the seconds a list's pods fall on (they were
/// scraped within the staleness bound, two resolutions).
const STAMP_SLOTS: usize = 64;

/// [`rfc3339`] of recently asked whole seconds, kept by a writer of many objects: the pods of
/// a list were scraped within a few periods, so their timestamps fall on a few dozen seconds
/// and each is formatted about once per list. One slot per second modulo [`STAMP_SLOTS`].
#[derive(Clone, Debug)]
pub struct Stamps([(i64, [u8; 20]); STAMP_SLOTS]);

impl Default for Stamps {
    fn default() -> Self {
        // No instant floors to `i64::MIN` seconds: every slot starts empty.
        Stamps([(i64::MIN, [0; 20]); STAMP_SLOTS])
    }
}

impl Stamps {
    /// [`rfc3339`] of `unix_ns`.
    #[inline]
    pub fn get(&mut self, unix_ns: i64) -> [u8; 20] {
        let secs = unix_ns.div_euclid(NS_PER_S);
        let slot = &mut self.0[secs.rem_euclid(STAMP_SLOTS as i64) as usize];
        if slot.0 != secs {
            *slot = (secs, rfc3339(unix_ns));
        }
        slot.1
    }
}

/// Writes Go's `time.RFC1123` (`Mon, 02 Jan 2006 15:04:05 UTC`) for a UTC Unix time.
pub fn write_rfc1123(out: &mut Vec<u8>, unix_ns: i64) {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let c = Civil::from_unix_ns(unix_ns);
    out.extend_from_slice(DAYS[c.weekday as usize % 7].as_bytes());
    out.extend_from_slice(b", ");
    push2(out, c.day);
    out.push(b' ');
    out.extend_from_slice(MONTHS[(c.month as usize + 11) % 12].as_bytes());
    out.push(b' ');
    push_year(out, c.year);
    out.push(b' ');
    push_clock(out, &c);
    out.extend_from_slice(b" UTC");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rfc(ns: i64) -> String {
        String::from_utf8(rfc3339(ns).to_vec()).unwrap()
    }

    /// Kept stamps are those of the second asked, whatever was asked before: seconds that
    /// share a slot, nanoseconds within one second, instants before 1970, the extremes.
    #[test]
    fn stamps_are_the_seconds_asked() {
        let mut stamps = Stamps::default();
        let base = 1_715_611_601 * NS_PER_S;
        let slots = STAMP_SLOTS as i64;
        let mut asked = Vec::new();
        for round in 0..3 {
            for s in [0, 1, slots, 2 * slots, 1, slots + 1, -1, -slots] {
                for frac in [0, 1, NS_PER_S - 1] {
                    asked.push(base + s * NS_PER_S + frac + round);
                }
            }
        }
        asked.extend([
            i64::MIN,
            i64::MIN + 1,
            -1,
            0,
            1,
            i64::MAX,
            -NS_PER_S,
            i64::MIN,
        ]);
        for ns in asked {
            assert_eq!(stamps.get(ns), rfc3339(ns), "{ns}");
        }
    }

    #[test]
    fn rfc3339_whole_seconds_utc() {
        let s = 1_000_000_000i64;
        assert_eq!(rfc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc(1_715_611_608 * s), "2024-05-13T14:46:48Z");
        assert_eq!(rfc(1_715_611_595 * s + 999_999_999), "2024-05-13T14:46:35Z");
        assert_eq!(rfc(951_782_400 * s), "2000-02-29T00:00:00Z");
        assert_eq!(rfc(1_570_232_645 * s), "2019-10-04T23:44:05Z");
        // Negative instants floor toward -inf.
        assert_eq!(rfc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc(-s), "1969-12-31T23:59:59Z");
        assert_eq!(rfc(-s - 1), "1969-12-31T23:59:58Z");
        assert_eq!(rfc(i64::MAX), "2262-04-11T23:47:16Z");
        assert_eq!(rfc(i64::MIN), "1677-09-21T00:12:43Z");
    }

    #[test]
    fn rfc1123() {
        let mut out = Vec::new();
        write_rfc1123(&mut out, 1_136_214_245 * 1_000_000_000);
        assert_eq!(out, b"Mon, 02 Jan 2006 15:04:05 UTC");
    }
}
