//! Properties of the rate computation over any sequence of kubelet samples: whatever the
//! kubelet reports, usage is never NaN or garbage, and a counter reset never shows as a spike.

use std::borrow::Cow;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::point::{ContainerSample, NodeName, NodeScrape, Sample};

const SECOND: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * SECOND;
/// The fastest a container here burns CPU: 64 cores.
const MAX_NANOCORES: u64 = 64_000_000_000;

/// One step of a container's life between two scrapes.
#[derive(Clone, Debug)]
struct Step {
    /// Time since the previous sample, ms (0: the kubelet served the same sample again).
    gap_ms: u32,
    /// CPU burned over the gap, in nanocores.
    nanocores: u64,
    /// The container restarted during the gap: the counter starts again from zero.
    restart: bool,
    /// The sample carries the kubelet's own rate (summary `usageNanoCores`).
    with_rate: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u32), 1u32..30_000],
        0..=MAX_NANOCORES,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(gap_ms, nanocores, restart, with_rate)| Step {
            gap_ms,
            nanocores,
            restart,
            with_rate,
        })
}

fn scrape(sample: Sample) -> NodeScrape<'static> {
    NodeScrape {
        node: Some(Sample {
            start_time_ns: None,
            ..sample
        }),
        containers: vec![ContainerSample {
            namespace: Cow::Borrowed("ns"),
            pod: Cow::Borrowed("p"),
            container: Cow::Borrowed("c"),
            sample,
        }],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Monotone timestamps, any rates, restarts and repeated samples: every usage served is a
    /// finite rate no higher than the fastest the container really ran or the kubelet
    /// reported (a reset is never
    /// read as the counter jumping by 2^64 or by the old total), and its window is positive.
    #[test]
    fn usage_is_bounded_by_the_real_rate_and_resets_never_spike(
        steps in prop::collection::vec(step(), 1..40),
        resolution_s in prop_oneof![Just(10u64), Just(15), Just(60)],
    ) {
        let store = Store::new(Config::new(Duration::from_secs(resolution_s)));
        let node = NodeName::from("n");
        let (mut ts, mut start, mut cpu_ns) = (T0, T0 - 3600 * SECOND, 5 * SECOND as u64);
        let mut fastest = 0u64;
        for s in &steps {
            let gap_ns = i64::from(s.gap_ms) * 1_000_000;
            if gap_ns > 0 {
                if s.restart {
                    // Restarted somewhere in the gap; the new counter only counts since.
                    start = ts + gap_ns / 2;
                    cpu_ns = (s.nanocores as u128 * (gap_ns - gap_ns / 2) as u128 / 1_000_000_000) as u64;
                } else {
                    cpu_ns += (s.nanocores as u128 * gap_ns as u128 / 1_000_000_000) as u64;
                }
                ts += gap_ns;
                fastest = fastest.max(s.nanocores);
            }
            if s.with_rate {
                // The kubelet's own rate is served as reported, and kept while the same
                // sample is scraped again.
                fastest = fastest.max(s.nanocores);
            }
            let sample = Sample {
                timestamp_ns: ts,
                cpu_usage_ns_total: Some(cpu_ns),
                cpu_nanocores: s.with_rate.then_some(s.nanocores),
                memory_working_set_bytes: Some(1 << 20),
                start_time_ns: Some(start),
                swap_bytes: None,
            };
            store.ingest(&node, &scrape(sample), ts);
            let served = [
                store.node("n", ts),
                store.pod("ns", "p", ts).map(|p| Usage {
                    timestamp_ns: p.timestamp_ns,
                    window_ns: p.window_ns,
                    cpu_nanocores: p.containers[0].cpu_nanocores,
                    memory_bytes: p.containers[0].memory_bytes,
                    swap_bytes: p.containers[0].swap_bytes(),
                }),
            ];
            for usage in served.into_iter().flatten() {
                prop_assert!(usage.window_ns > 0, "{usage:?}");
                // Counter arithmetic truncates; allow one nanocore per second of window.
                let slack = 1 + 1_000_000_000 / usage.window_ns as u64;
                prop_assert!(
                    usage.cpu_nanocores <= fastest + slack,
                    "served {} nanocores, fastest real rate {fastest}: {usage:?}",
                    usage.cpu_nanocores
                );
                prop_assert_eq!(usage.memory_bytes, 1 << 20);
            }
        }
    }

    /// Timestamps that go backwards or repeat never panic and never serve a window that is
    /// not positive.
    #[test]
    fn out_of_order_samples_never_serve_a_non_positive_window(
        offsets in prop::collection::vec(-20_000i64..20_000, 1..30),
        counters in prop::collection::vec(0u64..u64::MAX / 2, 30),
    ) {
        let store = Store::new(Config::new(Duration::from_secs(15)));
        let node = NodeName::from("n");
        for (i, offset) in offsets.iter().enumerate() {
            let ts = T0 + offset * 1_000_000;
            let sample = Sample {
                timestamp_ns: ts,
                cpu_usage_ns_total: Some(counters[i]),
                cpu_nanocores: None,
                memory_working_set_bytes: Some(1 << 20),
                start_time_ns: Some(T0 - 3600 * SECOND),
                swap_bytes: None,
            };
            store.ingest(&node, &scrape(sample), T0);
            if let Some(usage) = store.node("n", T0) {
                prop_assert!(usage.window_ns > 0, "{usage:?}");
            }
            if let Some(pod) = store.pod("ns", "p", T0) {
                prop_assert!(pod.window_ns > 0, "{pod:?}");
            }
        }
    }
}
