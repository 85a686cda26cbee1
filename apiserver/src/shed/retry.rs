//! `Retry-After` values: the adaptive one of an overloaded class (APF's dropped-requests
//! tracker) and the one of a cold store (KEP-4568's curve).

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Retry-After for a store still initializing, `t` after start:
/// `clamp(e^(0.06 t), 1, 30)` truncated to whole seconds, as kube-apiserver's
/// `calculateRetryAfterForUnreadyCache` (`apiserver: pkg/storage/cacher/util.go`).
pub fn cold_store_seconds(t: Duration) -> u32 {
    let seconds = (0.06 * t.as_secs_f64()).exp().clamp(1.0, 30.0);
    // Truncated as Go's int(); the clamp keeps it in 1..=30.
    seconds as u32
}

/// The adaptive Retry-After of one class, modelled on APF's `droppedRequestsStats`
/// (`apiserver: pkg/util/flowcontrol/dropped_requests_tracker.go`): it starts at 1 s and
/// doubles (up to `max`) when at least 3 x Retry-After requests were dropped within the last
/// Retry-After seconds and Retry-After seconds have passed since the last increase. Where APF
/// steps down by 1 s only on the next drop, this one decays by 1 s for every second that the
/// last Retry-After seconds held fewer than Retry-After drops, so a quiet class gets back to
/// 1 s.
#[derive(Debug)]
pub struct Tracker {
    origin: Instant,
    max_seconds: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    retry_after: u64,
    /// (second since origin, drops in that second), oldest first, at most `max_seconds` long.
    history: VecDeque<(u64, u64)>,
    /// When Retry-After last went up.
    increased_at: u64,
    /// The last second at which decay was applied.
    decayed_at: u64,
}

impl Tracker {
    /// A tracker at 1 s that never goes above `max` (at least 1 s).
    pub fn new(max: Duration, origin: Instant) -> Self {
        Tracker {
            origin,
            max_seconds: max.as_secs().max(1),
            state: Mutex::new(State {
                retry_after: 1,
                history: VecDeque::new(),
                increased_at: 0,
                decayed_at: 0,
            }),
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    /// Records one dropped request at `now` and returns the Retry-After to send with it.
    pub fn drop_one(&self, now: Instant) -> u32 {
        let t = self.second(now);
        let mut s = self.state.lock();
        match s.history.back_mut() {
            Some((second, count)) if *second == t => *count += 1,
            _ => s.history.push_back((t, 1)),
        }
        while s
            .history
            .front()
            .is_some_and(|(second, _)| t.saturating_sub(*second) > self.max_seconds)
        {
            s.history.pop_front();
        }
        self.update(&mut s, t, true);
        to_u32(s.retry_after)
    }

    /// The current Retry-After at `now`, decayed if drops have stopped.
    pub fn current(&self, now: Instant) -> u32 {
        let t = self.second(now);
        let mut s = self.state.lock();
        self.update(&mut s, t, false);
        to_u32(s.retry_after)
    }

    /// APF's update, plus time-based decay; a drop always counts as at least one step.
    fn update(&self, s: &mut State, t: u64, on_drop: bool) {
        let retry_after = s.retry_after;
        let recent: u64 = s
            .history
            .iter()
            .rev()
            .take_while(|(second, _)| t.saturating_sub(*second) <= retry_after)
            .map(|(_, count)| count)
            .sum();
        // A window of Retry-After seconds since the last increase must have passed.
        let settled = t.saturating_sub(s.increased_at) >= retry_after;
        if settled && recent >= 3 * retry_after {
            if retry_after < self.max_seconds {
                s.retry_after = (retry_after * 2).min(self.max_seconds);
                s.increased_at = t;
            }
            s.decayed_at = t;
        } else if settled && recent < retry_after && retry_after > 1 {
            let elapsed = t.saturating_sub(s.decayed_at);
            let steps = if on_drop { elapsed.max(1) } else { elapsed };
            if steps > 0 {
                s.retry_after = retry_after.saturating_sub(steps).max(1);
                s.decayed_at = t;
            }
        } else {
            s.decayed_at = t;
        }
    }
}

fn to_u32(seconds: u64) -> u32 {
    u32::try_from(seconds).unwrap_or(u32::MAX)
}
