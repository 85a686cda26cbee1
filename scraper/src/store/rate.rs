//! Raw points, which samples are valid, how `prev` advances, and the CPU rate.
//!
//! Mirrors metrics-server `pkg/storage/types.go` (`resourceUsage`), `node.go` and `pod.go`
//! (the `last`/`prev` rules), with the validity rules of DESIGN.md "Where we are deliberately
//! better".

// `Point::swap_bytes` when the kubelet reported no swap (keeps a point at 48 bytes).
use crate::point::{NO_SWAP, Sample, Usage};

const NS_PER_SECOND: i64 = 1_000_000_000;

/// metrics-server `freshContainerMinMetricsResolution`: a container younger than this gets no
/// synthesized previous point (its first CPU samples are too noisy).
pub(super) const FRESH_CONTAINER_MIN_AGE_NS: i64 = 10 * NS_PER_SECOND;

/// The window reported for a summary `usageNanoCores` value when there is no previous sample
/// to measure the real interval against. The kubelet computes `usageNanoCores` from cAdvisor
/// stats, which cAdvisor refreshes every `--housekeeping_interval` (10 s by default), so 10 s
/// is the interval the value most likely covers.
pub(super) const SUMMARY_DEFAULT_WINDOW_NS: i64 = 10 * NS_PER_SECOND;

/// A valid raw sample as stored: 48 bytes, `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Point {
    /// When the sample was taken, Unix ns.
    pub(super) timestamp_ns: i64,
    /// Container start time, Unix ns; 0 when unknown (Go's zero `time.Time`, which compares
    /// before every real timestamp).
    pub(super) start_time_ns: i64,
    /// Cumulative CPU time, ns, when the kubelet reported it.
    pub(super) cpu_usage_ns_total: Option<u64>,
    /// Memory working set, bytes (0 when absent).
    pub(super) memory_bytes: u64,
    /// Swap in use, bytes; [`NO_SWAP`] when absent.
    swap_bytes: u64,
}

impl Point {
    fn from_sample(sample: &Sample) -> Point {
        Point {
            timestamp_ns: sample.timestamp_ns,
            start_time_ns: sample.start_time_ns.unwrap_or(0),
            // A cumulative counter at 0 is no reading: the kubelet's CRI stats provider
            // reports 0 when the runtime gave no CPU stats. Paired with a real value it would
            // be a spike of the container's whole lifetime in one window.
            cpu_usage_ns_total: sample.cpu_usage_ns_total.filter(|&v| v > 0),
            memory_bytes: sample.memory_working_set_bytes.unwrap_or(0),
            swap_bytes: sample.swap_bytes.unwrap_or(NO_SWAP),
        }
    }

    /// Swap in use, when the kubelet reported it.
    pub(super) fn swap_bytes(&self) -> Option<u64> {
        Some(self.swap_bytes).filter(|&b| b != NO_SWAP)
    }

    /// A node sample is used only with a timestamp, CPU > 0 and memory > 0 (metrics-server
    /// `decode.go` "Failed getting complete node metric", reference §2.8): a broken kubelet
    /// that reports zeros yields no node point.
    pub(super) fn node(sample: &Sample) -> Option<Point> {
        let cpu = sample.cpu_usage_ns_total.is_some_and(|v| v > 0)
            || sample.cpu_nanocores.is_some_and(|v| v > 0);
        let memory = sample.memory_working_set_bytes.is_some_and(|v| v > 0);
        (sample.timestamp_ns != 0 && cpu && memory).then(|| Point::from_sample(sample))
    }

    /// A container sample is used when it has a timestamp, a CPU value (a cumulative counter
    /// above 0, or the summary's `usageNanoCores`) and a memory value, and is not an all-zero
    /// stub (a finished init container). Zero memory with CPU data is valid (#1330); a
    /// cumulative CPU of 0 or a missing memory series is not (metrics-server
    /// `checkContainerMetrics`), so neither is served as a spike or as 0 bytes, which an HPA
    /// on memory would scale down on. Unlike metrics-server, an unusable container is
    /// ignored instead of hiding its whole pod (#792, #1330).
    pub(super) fn container(sample: &Sample) -> Option<Point> {
        let has_cpu =
            sample.cpu_usage_ns_total.is_some_and(|v| v > 0) || sample.cpu_nanocores.is_some();
        let all_zero = sample.cpu_usage_ns_total.unwrap_or(0) == 0
            && sample.cpu_nanocores.unwrap_or(0) == 0
            && sample.memory_working_set_bytes.unwrap_or(0) == 0;
        let usable = sample.timestamp_ns != 0
            && has_cpu
            && sample.memory_working_set_bytes.is_some()
            && !all_zero;
        usable.then(|| Point::from_sample(sample))
    }
}

/// Why no usage could be computed from a pair of points (metrics-server's messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum RateError {
    /// The newer point has an earlier start time (metrics-server PR #1300).
    #[error("unexpected decrease in startTime of node/container")]
    StartTimeDecreased,
    /// The cumulative CPU counter went down without a restart (#745, #1008).
    #[error("unexpected decrease in cumulative CPU usage value")]
    CpuDecreased,
    /// The window between the points is not positive.
    #[error("measurement window is not positive")]
    EmptyWindow,
}

/// The previous point after storing `new` (metrics-server `pkg/storage/node.go`, and step 3
/// of `pod.go` for a container that did not restart): the old `last` when `new` is newer,
/// else the old `prev` when it is older than `new`, else none (the pair is dropped and usage
/// returns after the next good point).
pub(super) fn next_prev(
    old_last: Option<&Point>,
    old_prev: Option<&Point>,
    new: &Point,
) -> Option<Point> {
    match (old_last, old_prev) {
        (Some(last), _) if new.timestamp_ns > last.timestamp_ns => Some(*last),
        (Some(_), Some(prev)) if prev.timestamp_ns < new.timestamp_ns => Some(*prev),
        _ => None,
    }
}

/// The previous point of a container after storing `new` (metrics-server `pkg/storage/pod.go`):
/// the fresh-container shortcut first, then the node rules when the container has not
/// restarted since `old_last` (`new.start < old_last.timestamp`). A container seen for the
/// first time has no previous point (no zero point, unlike metrics-server's quirk).
pub(super) fn next_container_prev(
    old_last: Option<&Point>,
    old_prev: Option<&Point>,
    new: &Point,
    resolution_ns: i64,
) -> Option<Point> {
    let age_ns = new.timestamp_ns.saturating_sub(new.start_time_ns);
    if new.start_time_ns != 0
        && new.start_time_ns < new.timestamp_ns
        && (FRESH_CONTAINER_MIN_AGE_NS..resolution_ns).contains(&age_ns)
    {
        return Some(Point {
            timestamp_ns: new.start_time_ns,
            start_time_ns: new.start_time_ns,
            cpu_usage_ns_total: Some(0),
            memory_bytes: new.memory_bytes,
            swap_bytes: new.swap_bytes,
        });
    }
    match old_last {
        Some(last) if new.start_time_ns < last.timestamp_ns => next_prev(old_last, old_prev, new),
        _ => None,
    }
}

/// Go's `time.Duration.Seconds()`, bit for bit.
fn go_seconds(duration_ns: i64) -> f64 {
    let sec = duration_ns / NS_PER_SECOND;
    let nsec = duration_ns % NS_PER_SECOND;
    sec as f64 + nsec as f64 / 1e9
}

/// Usage from a pair of points (metrics-server `resourceUsage`), or from the kubelet's own
/// `usageNanoCores` of the newer sample when it has one. `Ok(None)`: no previous point yet.
pub(super) fn usage(
    prev: Option<&Point>,
    last: &Point,
    last_cpu_nanocores: Option<u64>,
) -> Result<Option<Usage>, RateError> {
    if let Some(prev) = prev
        && last.start_time_ns < prev.start_time_ns
    {
        return Err(RateError::StartTimeDecreased);
    }
    // `None` inside: the difference overflows (timestamps centuries apart), no window either.
    let window_ns = prev.map(|prev| last.timestamp_ns.checked_sub(prev.timestamp_ns));
    let window_ns = match window_ns {
        Some(Some(w)) if w > 0 => Some(w),
        Some(_) => return Err(RateError::EmptyWindow),
        None => None,
    };
    if let Some(cpu_nanocores) = last_cpu_nanocores {
        return Ok(Some(Usage {
            timestamp_ns: last.timestamp_ns,
            window_ns: window_ns.unwrap_or(SUMMARY_DEFAULT_WINDOW_NS),
            cpu_nanocores,
            memory_bytes: last.memory_bytes,
            swap_bytes: last.swap_bytes(),
        }));
    }
    let (Some(prev), Some(window_ns)) = (prev, window_ns) else {
        return Ok(None);
    };
    let (Some(last_cpu), Some(prev_cpu)) = (last.cpu_usage_ns_total, prev.cpu_usage_ns_total)
    else {
        // The previous sample carried only a kubelet-computed rate: no pair to compute from.
        return Ok(None);
    };
    if last_cpu < prev_cpu {
        return Err(RateError::CpuDecreased);
    }
    let cpu_nanocores = ((last_cpu - prev_cpu) as f64 / go_seconds(window_ns)) as u64;
    Ok(Some(Usage {
        timestamp_ns: last.timestamp_ns,
        window_ns,
        cpu_nanocores,
        memory_bytes: last.memory_bytes,
        swap_bytes: last.swap_bytes(),
    }))
}

/// What a series serves once a scrape brought `last`: [`usage`], except that a scrape that
/// brought back the very sample the series already held (`held`, the same timestamp: the
/// kubelet has not refreshed it) and made no pair keeps `served`, the usage it had. So a rate
/// the kubelet computed (summary `usageNanoCores`, lent at warm-up) stays until a newer sample
/// pairs, instead of going away until the kubelet's next refresh; a scrape with nothing new
/// changes nothing.
pub(super) fn next_usage(
    prev: Option<&Point>,
    last: &Point,
    last_cpu_nanocores: Option<u64>,
    held: Option<&Point>,
    served: Option<Usage>,
) -> Result<Option<Usage>, RateError> {
    let same_sample = held.is_some_and(|held| held.timestamp_ns == last.timestamp_ns);
    Ok(usage(prev, last, last_cpu_nanocores)?.or(served.filter(|_| same_sample)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timestamps centuries apart (a hostile summary's `time`) overflow the window: no usage,
    /// and no panic where overflow is checked.
    #[test]
    fn a_window_that_overflows_is_empty() {
        let point = |timestamp_ns: i64, cpu: u64| Point {
            timestamp_ns,
            start_time_ns: 0,
            cpu_usage_ns_total: Some(cpu),
            memory_bytes: 1,
            swap_bytes: NO_SWAP,
        };
        let (early, late) = (i64::MIN + 1, i64::MAX - 1);
        assert_eq!(
            usage(Some(&point(early, 1)), &point(late, 2), None),
            Err(RateError::EmptyWindow)
        );
        assert_eq!(
            usage(
                Some(&point(0, 1)),
                &point(15 * NS_PER_SECOND, 15_000_000_001),
                None
            )
            .map(|u| u.map(|u| u.cpu_nanocores)),
            Ok(Some(1_000_000_000))
        );
    }

    /// A rescrape of the same sample keeps what was served; a newer sample without a pair,
    /// or a rescrape of a series that had nothing, does not; a pair wins over what was served.
    #[test]
    fn only_a_rescrape_of_the_same_sample_keeps_what_was_served() {
        let point = |timestamp_ns: i64, cpu: Option<u64>| Point {
            timestamp_ns,
            start_time_ns: 0,
            cpu_usage_ns_total: cpu,
            memory_bytes: 1,
            swap_bytes: NO_SWAP,
        };
        let served = Usage {
            timestamp_ns: 10 * NS_PER_SECOND,
            window_ns: SUMMARY_DEFAULT_WINDOW_NS,
            cpu_nanocores: 7,
            memory_bytes: 1,
            swap_bytes: None,
        };
        let held = point(10 * NS_PER_SECOND, Some(100));
        let same = point(10 * NS_PER_SECOND, Some(100));
        assert_eq!(
            next_usage(None, &same, None, Some(&held), Some(served)),
            Ok(Some(served))
        );
        assert_eq!(next_usage(None, &same, None, Some(&held), None), Ok(None));
        let newer = point(20 * NS_PER_SECOND, Some(200));
        assert_eq!(
            next_usage(None, &newer, None, Some(&held), Some(served)),
            Ok(None)
        );
        let paired = next_usage(Some(&held), &newer, None, Some(&held), Some(served));
        assert_eq!(paired.map(|u| u.map(|u| u.cpu_nanocores)), Ok(Some(10)));
    }
}
