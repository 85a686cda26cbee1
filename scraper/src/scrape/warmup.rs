//! When a node is asked again outside its periods: while it warms up, and after a pod started
//! on it ([`follow_up_next`]).
//!
//! A rate needs two samples with different timestamps. A kubelet does not sample on
//! request: cAdvisor refreshes each container's stats (and the node's) on its own
//! housekeeping timer, `--housekeeping_interval`, 10 s by default; the CRI stats provider
//! (containerd) samples containers per request but still reports the node from cAdvisor.
//! So after the first scrape a warming node is asked:
//! 1. again after [`QUICK_RETRY`], which completes whatever is sampled per request, or
//!    after [`REFRESHED_RETRY`] when the first scrape's summary showed that the kubelet
//!    refreshed some series between its two requests;
//! 2. then when the newest still-waiting series should have been refreshed: its timestamp
//!    plus [`HOUSEKEEPING`] plus [`REFRESH_MARGIN`], at least [`backoff`] and at most one
//!    housekeeping interval from now (node and server clocks may disagree);
//! 3. and, if the kubelet refreshes more slowly than that, with a growing backoff.
//!
//! A scrape that returns the same timestamps is not wasted: the store keeps the point and
//! the next newer one completes the pair.

use std::time::Duration;

use tokio::time::Instant;

/// The first round is spread over at most this long (or the resolution, if shorter).
pub const FIRST_ROUND_SPREAD: Duration = Duration::from_secs(1);

/// The second scrape of a warming node comes this long after its first.
pub(super) const QUICK_RETRY: Duration = Duration::from_secs(1);

/// The next scrape of a warming node whose kubelet refreshed some series between the first
/// scrape's two requests (its `/stats/summary` showed newer samples than its
/// `/metrics/resource` answer): those newer samples pair with the first ones at once. A
/// moment later rather than at once, so that a housekeeping pass, which refreshes the
/// containers one after another, is likely over.
pub(super) const REFRESHED_RETRY: Duration = Duration::from_millis(100);

/// The kubelet's stats refresh interval the schedule expects: cAdvisor's default
/// `--housekeeping_interval`.
pub(super) const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// How long after an expected refresh the kubelet is asked, for the refresh itself to finish.
pub(super) const REFRESH_MARGIN: Duration = Duration::from_millis(500);

/// How long a warm-up may last: one period plus one housekeeping interval (and the first
/// round's spread), so a kubelet whose housekeeping is as long as the period still completes
/// its pairs, and one that never refreshes is left to the steady schedule.
pub(super) fn limit(resolution: Duration) -> Duration {
    resolution + HOUSEKEEPING + REFRESH_MARGIN + FIRST_ROUND_SPREAD
}

/// The least wait before warm-up attempt `attempts + 1`, after `attempts` scrapes: 0.5 s,
/// 1 s, 2 s, then 4 s.
pub(super) fn backoff(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(2).min(3);
    Duration::from_millis(500) * (1 << shift)
}

/// When a series last sampled at `newest_ns` (Unix ns) should have been refreshed and the
/// refresh served.
pub(super) fn expected_refresh_ns(newest_ns: i64) -> i64 {
    let ahead = HOUSEKEEPING + REFRESH_MARGIN;
    newest_ns.saturating_add(i64::try_from(ahead.as_nanos()).unwrap_or(i64::MAX))
}

/// When to scrape a warming node again after its `attempts`-th scrape finished at `now`,
/// with the waiting series expected to refresh at `refresh`.
pub(super) fn next_attempt(attempts: u32, refresh: Instant, now: Instant) -> Instant {
    if attempts <= 1 {
        return now + QUICK_RETRY;
    }
    let earliest = now + backoff(attempts);
    let latest = now + HOUSEKEEPING + REFRESH_MARGIN;
    refresh.clamp(earliest, latest.max(earliest))
}

/// A pod that starts on a node is served once a scrape brings a sample of each of its
/// containers taken at least 10 s after the container started (the store rates it from its
/// start, as metrics-server's fresh-container rule does) or a second sample: one
/// housekeeping interval after the first, or up to two (cAdvisor jitters each interval up to
/// twice its length). The node's follow-ups go on at least this long after the pod was seen,
/// whatever the first ones found (a container the kubelet has not sampled yet is not pending:
/// it is not there at all).
pub(super) const FOLLOW_UP_SETTLE: Duration = HOUSEKEEPING.saturating_add(REFRESH_MARGIN);

/// A node's follow-ups end this long after the last pod start seen on it: past the latest
/// second sample (two housekeeping intervals after the first, which cAdvisor takes when it
/// discovers the container) and the backoff step (4 s at most) that may straddle it.
pub(super) const FOLLOW_UP_LIMIT: Duration = HOUSEKEEPING
    .saturating_mul(2)
    .saturating_add(Duration::from_millis(2_500));

/// When to ask a node again after its `attempts`-th follow-up scrape (they began at
/// `since`) finished at `now` with `pending` series waiting for a newer sample, expected at
/// `refresh`; `None`: the follow-ups are over.
///
/// Until `settle` after `since` it goes on whatever it found, next at that time if nothing
/// waits ([`FOLLOW_UP_SETTLE`] after a pod start, whose containers may not be sampled yet;
/// zero after a scrape found the waiting series itself); then while series wait, as a
/// warm-up does ([`next_attempt`]), until [`FOLLOW_UP_LIMIT`].
pub(super) fn follow_up_next(
    since: Instant,
    settle: Duration,
    attempts: u32,
    pending: u32,
    refresh: Instant,
    now: Instant,
) -> Option<Instant> {
    let settled = since + settle;
    let at = if pending == 0 {
        if now >= settled {
            return None;
        }
        settled
    } else {
        // The first attempt holds the first samples; what follows aims at the refresh.
        next_attempt(attempts.max(2), refresh, now)
    };
    (at <= since + FOLLOW_UP_LIMIT).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_four_seconds() {
        let ms = |a| backoff(a).as_millis();
        assert_eq!(
            [ms(2), ms(3), ms(4), ms(5), ms(50)],
            [500, 1000, 2000, 4000, 4000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn follow_ups_settle_then_follow_waiting_series_within_the_limit() {
        let since = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // The first follow-up (1 s after the start) found nothing waiting (the containers not
        // sampled yet): asked again when they should have a second sample.
        assert_eq!(
            follow_up_next(since, FOLLOW_UP_SETTLE, 1, 0, since + s(30), since + s(1)),
            Some(since + FOLLOW_UP_SETTLE)
        );
        // It found the first samples waiting: asked at their expected refresh.
        assert_eq!(
            follow_up_next(since, FOLLOW_UP_SETTLE, 1, 2, since + s(11), since + s(1)),
            Some(since + s(11))
        );
        // Settled and nothing waits: done.
        assert_eq!(
            follow_up_next(since, FOLLOW_UP_SETTLE, 2, 0, since, since + ms(10_600)),
            None
        );
        // Still waiting after the expected refresh (a long cAdvisor interval): the backoff.
        assert_eq!(
            follow_up_next(
                since,
                FOLLOW_UP_SETTLE,
                2,
                1,
                since + s(11),
                since + ms(10_600)
            ),
            Some(since + ms(11_100))
        );
        // Never past the limit.
        assert_eq!(
            follow_up_next(since, FOLLOW_UP_SETTLE, 5, 1, since + s(30), since + s(20)),
            None
        );
        // Found by a scrape (no settling): the waiting series' refresh, then done once
        // nothing waits.
        let z = Duration::ZERO;
        assert_eq!(
            follow_up_next(since, z, 1, 1, since + s(9), since),
            Some(since + s(9))
        );
        assert_eq!(follow_up_next(since, z, 2, 0, since, since + s(9)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_aim_at_the_expected_refresh_within_bounds() {
        let now = Instant::now();
        let s = Duration::from_secs;
        // After the first scrape: the quick retry, whatever the timestamps say.
        assert_eq!(next_attempt(1, now + s(9), now), now + QUICK_RETRY);
        // Then the expected refresh...
        assert_eq!(next_attempt(2, now + s(9), now), now + s(9));
        // ...but not sooner than the backoff (a refresh that is overdue) ...
        assert_eq!(next_attempt(2, now, now), now + Duration::from_millis(500));
        assert_eq!(next_attempt(4, now, now), now + s(2));
        // ...nor later than one housekeeping interval (a node clock far ahead).
        assert_eq!(
            next_attempt(2, now + s(3600), now),
            now + s(10) + REFRESH_MARGIN
        );
    }
}
