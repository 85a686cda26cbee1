//! The one place this crate reads std's clocks (`clippy.toml` disallows them elsewhere, so
//! time stays injectable): the wall clock as Unix nanoseconds. Elapsed time comes from
//! `tokio::time::Instant`, which tests can pause.

/// The wall clock in Unix nanoseconds (0 before 1970, saturating in 2262).
#[allow(clippy::disallowed_methods)]
pub fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
