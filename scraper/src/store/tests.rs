//! Store behaviour: metrics-server `pkg/storage` scenarios (reference §4.5, §4.8) and the
//! places where we deliberately differ.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::point::{ContainerSample, ContainerUsage, NodeName, NodeScrape, Sample};

const SECOND: i64 = 1_000_000_000;
const MS: i64 = 1_000_000;
const CORE_SECOND: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;
/// An arbitrary, realistic epoch for the tests.
const T0: i64 = 1_700_000_000 * SECOND;

fn store(resolution_s: u64) -> Store {
    Store::new(Config::new(Duration::from_secs(resolution_s)))
}

fn name(s: &str) -> NodeName {
    NodeName::from(s)
}

/// A cumulative node sample.
fn node_sample(ts: i64, cpu_ns: u64, memory: u64) -> Sample {
    Sample {
        timestamp_ns: ts,
        cpu_usage_ns_total: Some(cpu_ns),
        memory_working_set_bytes: Some(memory),
        ..Sample::default()
    }
}

/// A cumulative container sample.
fn sample(ts: i64, start: i64, cpu_ns: u64, memory: u64) -> Sample {
    Sample {
        timestamp_ns: ts,
        cpu_usage_ns_total: Some(cpu_ns),
        memory_working_set_bytes: Some(memory),
        start_time_ns: Some(start),
        cpu_nanocores: None,
        swap_bytes: None,
    }
}

fn container(pod: &str, container: &str, sample: Sample) -> ContainerSample<'static> {
    ContainerSample {
        namespace: Cow::Borrowed("ns"),
        pod: Cow::Owned(pod.to_owned()),
        container: Cow::Owned(container.to_owned()),
        sample,
    }
}

fn scrape(node: Option<Sample>, containers: Vec<ContainerSample<'static>>) -> NodeScrape<'static> {
    NodeScrape { node, containers }
}

/// Ingests one container's sample alone, scraped at the sample's own timestamp.
fn ingest_container(store: &Store, n: &NodeName, pod: &str, c: &str, s: Sample) -> Ingested {
    let now = s.timestamp_ns;
    store.ingest(n, &scrape(None, vec![container(pod, c, s)]), now)
}

/// Ingests `pod1`'s container `c1` alone, as [`ingest_container`].
fn ingest_c1(store: &Store, n: &NodeName, s: Sample) -> Ingested {
    ingest_container(store, n, "pod1", "c1", s)
}

/// Ingests a node's own sample alone, scraped at the sample's own timestamp.
fn ingest_node(store: &Store, n: &NodeName, s: Sample) -> Ingested {
    let now = s.timestamp_ns;
    store.ingest(n, &scrape(Some(s), vec![]), now)
}

fn usage(ts: i64, window_ns: i64, cpu_nanocores: u64, memory_bytes: u64) -> Usage {
    Usage {
        timestamp_ns: ts,
        window_ns,
        cpu_nanocores,
        memory_bytes,
        swap_bytes: None,
    }
}

fn container_usage(name: &str, cpu_nanocores: u64, memory_bytes: u64) -> ContainerUsage {
    ContainerUsage::new(Arc::from(name), cpu_nanocores, memory_bytes, None)
}

fn names(pod: &PodUsage) -> Vec<&str> {
    pod.containers.iter().map(|c| &*c.name).collect()
}

// ---- §4.8 node scenarios ----

#[test]
fn node_needs_two_batches_then_serves_exact_rate() {
    let store = store(60);
    let n1 = name("node1");
    let first = ingest_node(&store, &n1, node_sample(T0, 10 * CORE_SECOND, 2 * MIB));
    assert!(!first.node_usage);
    assert_eq!(store.node("node1", T0), None);
    assert_eq!(store.readiness(T0), Readiness::default());

    let t1 = T0 + 10 * SECOND;
    let second = ingest_node(&store, &n1, node_sample(t1, 20 * CORE_SECOND, 3 * MIB));
    assert!(second.node_usage);
    assert_eq!(
        store.node("node1", t1),
        Some(usage(t1, 10 * SECOND, 1_000_000_000, 3 * MIB))
    );
    assert_eq!(store.node("node2", t1), None);
    assert_eq!(
        store.points(),
        Points {
            nodes: 1,
            containers: 0
        }
    );
    // Node-only data: nodes ready, pods not.
    assert_eq!(
        store.readiness(t1),
        Readiness {
            nodes: true,
            pods: false
        }
    );

    // A batch without a node sample: no node usage.
    let t2 = T0 + 20 * SECOND;
    let third = store.ingest(&n1, &NodeScrape::default(), t2);
    assert!(!third.node_usage);
    assert_eq!(store.node("node1", t2), None);
    assert_eq!(store.points(), Points::default());
}

#[test]
fn node_with_zero_start_time_works_the_same() {
    let store = store(60);
    let n = name("node1");
    let mut s = node_sample(T0, 10 * CORE_SECOND, 2 * MIB);
    s.start_time_ns = Some(0);
    store.ingest(&n, &scrape(Some(s), vec![]), T0);
    let t1 = T0 + 10 * SECOND;
    let mut s = node_sample(t1, 20 * CORE_SECOND, 3 * MIB);
    s.start_time_ns = Some(0);
    store.ingest(&n, &scrape(Some(s), vec![]), t1);
    assert_eq!(
        store.node("node1", t1),
        Some(usage(t1, 10 * SECOND, 1_000_000_000, 3 * MIB))
    );
}

#[test]
fn rate_uses_go_float_math_for_sub_second_windows() {
    // types_test.go: +10ms window, 300 -> 500 ns of CPU => 20000 nanocores, memory 600.
    let store = store(60);
    let n = name("node1");
    ingest_node(&store, &n, node_sample(T0, 300, 600));
    let t1 = T0 + 10 * MS;
    ingest_node(&store, &n, node_sample(t1, 500, 600));
    assert_eq!(
        store.node("node1", t1),
        Some(usage(t1, 10 * MS, 20_000, 600))
    );
}

#[test]
fn node_with_zero_cpu_or_memory_yields_no_point() {
    let store = store(60);
    let n = name("node1");
    for (i, bad) in [
        node_sample(T0, 0, MIB),
        node_sample(T0, CORE_SECOND, 0),
        node_sample(0, CORE_SECOND, MIB),
        Sample {
            memory_working_set_bytes: None,
            ..node_sample(T0, CORE_SECOND, MIB)
        },
    ]
    .into_iter()
    .enumerate()
    {
        let t = T0 + i as i64 * 10 * SECOND;
        ingest_node(&store, &n, node_sample(t, 10 * CORE_SECOND, MIB));
        let t1 = t + 5 * SECOND;
        let bad = Sample {
            timestamp_ns: if bad.timestamp_ns == 0 { 0 } else { t1 },
            ..bad
        };
        let ingested = store.ingest(&n, &scrape(Some(bad), vec![]), t1);
        assert!(!ingested.node_usage, "case {i}");
        assert_eq!(store.node("node1", t1), None, "case {i}");
    }
}

// ---- §4.8 pod scenarios ----

#[test]
fn pod_not_fresh_needs_two_batches() {
    let store = store(60);
    let n = name("node1");
    let t1 = T0 + 120 * SECOND;
    let first = ingest_c1(&store, &n, sample(t1, T0, CORE_SECOND, 4 * MIB));
    assert_eq!((first.pods, first.pods_with_usage), (1, 0));
    assert_eq!(store.pod("ns", "pod1", t1), None);

    let t2 = T0 + 125 * SECOND;
    let second = ingest_c1(&store, &n, sample(t2, T0, 6 * CORE_SECOND, 5 * MIB));
    assert_eq!((second.pods, second.pods_with_usage), (1, 1));
    let pod = store
        .pod("ns", "pod1", t2)
        .expect("pod has usage after two batches");
    assert_eq!((pod.timestamp_ns, pod.window_ns), (t2, 5 * SECOND));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 1_000_000_000, 5 * MIB)]
    );
    assert_eq!(store.pod("ns", "other", t2), None);
    assert_eq!(store.pod("other", "pod1", t2), None);
}

/// A reader's usage stays as it read it while scrapes go on; a usage no reader holds is
/// written over in its own allocation (no allocation per pod and scrape).
#[test]
fn a_held_usage_keeps_its_values_and_an_unheld_one_is_written_in_place() {
    let store = store(60);
    let n = name("node1");
    let at = |s: i64| T0 + 120 * SECOND + s * SECOND;
    ingest_c1(&store, &n, sample(at(0), T0, CORE_SECOND, 4 * MIB));
    ingest_c1(&store, &n, sample(at(5), T0, 6 * CORE_SECOND, 5 * MIB));
    let held = store.pod("ns", "pod1", at(5)).unwrap();
    ingest_c1(&store, &n, sample(at(10), T0, 8 * CORE_SECOND, 6 * MIB));
    // The reader's copy is the one it read; the store serves the new one.
    assert_eq!(held.timestamp_ns, at(5));
    assert_eq!(
        &*held.containers,
        &[container_usage("c1", 1_000_000_000, 5 * MIB)]
    );
    let third = store.pod("ns", "pod1", at(10)).unwrap();
    assert_eq!(third.timestamp_ns, at(10));
    assert_eq!(
        &*third.containers,
        &[container_usage("c1", 400_000_000, 6 * MIB)]
    );
    assert!(!Arc::ptr_eq(&held, &third));
    let place = Arc::as_ptr(&third);
    drop((held, third));
    // Nobody holds it now: the next scrape's usage is written where it was.
    ingest_c1(&store, &n, sample(at(15), T0, 9 * CORE_SECOND, 7 * MIB));
    let fourth = store.pod("ns", "pod1", at(15)).unwrap();
    assert_eq!(Arc::as_ptr(&fourth), place);
    assert_eq!(fourth.timestamp_ns, at(15));
    assert_eq!(
        &*fourth.containers,
        &[container_usage("c1", 200_000_000, 7 * MIB)]
    );
}

/// A store with a measure gives every pod usage it builds the measure of its containers
/// (sorted, as served), at every scrape; without one the length is 0 (unmeasured).
#[test]
fn pod_usage_carries_its_measure_of_each_scrape() {
    // Depends on names, order and values: a stale or unsorted measure shows.
    fn measure(containers: &[ContainerUsage]) -> u32 {
        containers.iter().enumerate().fold(0, |acc, (i, c)| {
            acc * 31 + (i as u32 + 1) * (c.name.len() as u32 + (c.memory_bytes / MIB) as u32)
        })
    }
    let measured = Store::new(Config::new(Duration::from_secs(60)).measured_by(measure));
    let plain = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    // The first scrape gives no usage (no rate yet); each later one builds it anew.
    for (i, memory) in [(0, MIB), (1, 2 * MIB), (2, 7 * MIB), (3, 5 * MIB)] {
        let ts = T0 + i * 15 * SECOND;
        let batch = vec![
            container(
                "pod1",
                "zeta",
                sample(ts, start, (i as u64 + 1) * CORE_SECOND, MIB),
            ),
            container(
                "pod1",
                "alpha",
                sample(ts, start, (i as u64 + 1) * CORE_SECOND, memory),
            ),
        ];
        measured.ingest(&n, &scrape(None, batch.clone()), ts);
        plain.ingest(&n, &scrape(None, batch), ts);
        if i == 0 {
            continue;
        }
        let (Some(pod), Some(unmeasured)) =
            (measured.pod("ns", "pod1", ts), plain.pod("ns", "pod1", ts))
        else {
            panic!("pod1 has usage after scrape {i}");
        };
        assert_eq!(names(&pod), ["alpha", "zeta"]);
        assert_eq!(pod.containers_len, measure(&pod.containers), "scrape {i}");
        assert_ne!(pod.containers_len, 0);
        assert_eq!(unmeasured.containers_len, 0);
        assert_eq!(unmeasured.containers, pod.containers);
    }
}

#[test]
fn pod_time_info_comes_from_the_earliest_container_and_containers_are_sorted() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    // "zeta" ends earliest (ts 120s, window 10s); "alpha" ends at 125s with a 5s window.
    let b1 = vec![
        container(
            "pod1",
            "zeta",
            sample(T0 + 110 * SECOND, start, CORE_SECOND, MIB),
        ),
        container(
            "pod1",
            "alpha",
            sample(T0 + 120 * SECOND, start, CORE_SECOND, MIB),
        ),
    ];
    store.ingest(&n, &scrape(None, b1), T0 + 120 * SECOND);
    let b2 = vec![
        container(
            "pod1",
            "zeta",
            sample(T0 + 120 * SECOND, start, 3 * CORE_SECOND, 2 * MIB),
        ),
        container(
            "pod1",
            "alpha",
            sample(T0 + 125 * SECOND, start, 2 * CORE_SECOND, 3 * MIB),
        ),
    ];
    let now = T0 + 125 * SECOND;
    store.ingest(&n, &scrape(None, b2), now);
    let pod = store.pod("ns", "pod1", now).expect("pod has usage");
    assert_eq!(
        (pod.timestamp_ns, pod.window_ns),
        (T0 + 120 * SECOND, 10 * SECOND)
    );
    assert_eq!(
        &*pod.containers,
        &[
            container_usage("alpha", 200_000_000, 3 * MIB),
            container_usage("zeta", 200_000_000, 2 * MIB)
        ]
    );
    assert_eq!(
        store.points(),
        Points {
            nodes: 0,
            containers: 2
        }
    );
}

#[test]
fn fresh_container_served_after_one_batch_only_between_10s_and_resolution() {
    // (age of the container at its first sample, served after one batch?)
    for (age_s, served) in [
        (10, true),
        (59, true),
        (9, false),
        (-1, false),
        (60, false),
        (120, false),
    ] {
        let store = store(60);
        let start = T0;
        let ts = start + age_s * SECOND;
        let s = sample(ts, start, 10 * CORE_SECOND, 4 * MIB);
        store.ingest(
            &name("node1"),
            &scrape(None, vec![container("pod1", "c1", s)]),
            ts,
        );
        let pod = store.pod("ns", "pod1", ts);
        assert_eq!(pod.is_some(), served, "age {age_s}s");
        if age_s == 10 {
            let pod = pod.expect("served");
            assert_eq!((pod.timestamp_ns, pod.window_ns), (ts, 10 * SECOND));
            assert_eq!(
                &*pod.containers,
                &[container_usage("c1", 1_000_000_000, 4 * MIB)]
            );
        }
    }
}

// ---- §4.5 restarts and counter resets ----

#[test]
fn restarted_container_uses_the_window_from_its_start_time() {
    let store = store(60);
    let n = name("node1");
    let old_start = T0 - 3600 * SECOND;
    ingest_c1(&store, &n, sample(T0, old_start, 100 * CORE_SECOND, MIB));
    let t1 = T0 + 10 * SECOND;
    ingest_c1(&store, &n, sample(t1, old_start, 101 * CORE_SECOND, MIB));
    assert!(store.pod("ns", "pod1", t1).is_some());
    // Restarted at +15s, scraped at +25s with 5 core-seconds: 500m over 10s.
    let t2 = T0 + 25 * SECOND;
    ingest_c1(
        &store,
        &n,
        sample(t2, T0 + 15 * SECOND, 5 * CORE_SECOND, 2 * MIB),
    );
    let pod = store
        .pod("ns", "pod1", t2)
        .expect("served through the fresh-container shortcut");
    assert_eq!((pod.timestamp_ns, pod.window_ns), (t2, 10 * SECOND));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 500_000_000, 2 * MIB)]
    );
}

#[test]
fn restarted_container_too_young_or_too_old_hides_the_pod_for_one_cycle() {
    // (start of the restarted container relative to its sample)
    for age_s in [5, 70] {
        let store = store(60);
        let n = name("node1");
        let old_start = T0 - 3600 * SECOND;
        ingest_c1(&store, &n, sample(T0, old_start, 100 * CORE_SECOND, MIB));
        let t1 = T0 + 10 * SECOND;
        ingest_c1(&store, &n, sample(t1, old_start, 110 * CORE_SECOND, MIB));
        assert!(store.pod("ns", "pod1", t1).is_some());

        let t2 = t1 + (age_s + 1) * SECOND;
        let restart = t2 - age_s * SECOND;
        ingest_c1(&store, &n, sample(t2, restart, CORE_SECOND, MIB));
        assert_eq!(store.pod("ns", "pod1", t2), None, "age {age_s}s");

        let t3 = t2 + 10 * SECOND;
        ingest_c1(&store, &n, sample(t3, restart, 3 * CORE_SECOND, MIB));
        let pod = store
            .pod("ns", "pod1", t3)
            .expect("back on the next scrape");
        assert_eq!(
            &*pod.containers,
            &[container_usage("c1", 200_000_000, MIB)],
            "age {age_s}s"
        );
    }
}

#[test]
fn cpu_counter_decrease_skips_only_that_container() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let batch = |ts: i64, a_cpu: u64, b_cpu: u64| {
        vec![
            container("pod1", "a", sample(ts, start, a_cpu, MIB)),
            container("pod1", "b", sample(ts, start, b_cpu, 2 * MIB)),
        ]
    };
    store.ingest(
        &n,
        &scrape(None, batch(T0, 50 * CORE_SECOND, 50 * CORE_SECOND)),
        T0,
    );
    let t1 = T0 + 10 * SECOND;
    store.ingest(
        &n,
        &scrape(None, batch(t1, 60 * CORE_SECOND, 60 * CORE_SECOND)),
        t1,
    );
    assert_eq!(
        store.pod("ns", "pod1", t1).map(|p| p.containers.len()),
        Some(2)
    );

    let t2 = T0 + 20 * SECOND;
    let ingested = store.ingest(
        &n,
        &scrape(None, batch(t2, 40 * CORE_SECOND, 70 * CORE_SECOND)),
        t2,
    );
    assert_eq!(ingested.pods_with_usage, 1);
    let pod = store
        .pod("ns", "pod1", t2)
        .expect("pod kept without the broken container");
    assert_eq!(
        &*pod.containers,
        &[container_usage("b", 1_000_000_000, 2 * MIB)]
    );
    assert_eq!(store.points().containers, 1);

    // Both containers broken: no pod at all (not an empty pod with a null timestamp).
    let t3 = T0 + 30 * SECOND;
    store.ingest(
        &n,
        &scrape(None, batch(t3, 30 * CORE_SECOND, 60 * CORE_SECOND)),
        t3,
    );
    assert_eq!(store.pod("ns", "pod1", t3), None);
    assert!(!store.readiness(t3).pods);
}

#[test]
fn start_time_decrease_skips_the_container() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    ingest_c1(&store, &n, sample(T0, start, 50 * CORE_SECOND, MIB));
    let t1 = T0 + 10 * SECOND;
    ingest_c1(
        &store,
        &n,
        sample(t1, start - SECOND, 60 * CORE_SECOND, MIB),
    );
    assert_eq!(store.pod("ns", "pod1", t1), None);
}

#[test]
fn node_reboot_is_skipped_for_one_cycle() {
    let store = store(60);
    let n = name("node1");
    ingest_node(&store, &n, node_sample(T0, 1000 * CORE_SECOND, MIB));
    let t1 = T0 + 10 * SECOND;
    ingest_node(&store, &n, node_sample(t1, 1010 * CORE_SECOND, MIB));
    assert!(store.node("node1", t1).is_some());
    let t2 = T0 + 20 * SECOND;
    let rebooted = ingest_node(&store, &n, node_sample(t2, 5 * CORE_SECOND, MIB));
    assert!(!rebooted.node_usage);
    assert_eq!(store.node("node1", t2), None);
    let t3 = T0 + 30 * SECOND;
    ingest_node(&store, &n, node_sample(t3, 15 * CORE_SECOND, MIB));
    assert_eq!(
        store.node("node1", t3),
        Some(usage(t3, 10 * SECOND, 1_000_000_000, MIB))
    );
}

#[test]
fn out_of_order_point_keeps_prev_and_replaces_last() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let at = |s: i64, cpu: u64| {
        let ts = T0 + s * SECOND;
        scrape(
            Some(node_sample(ts, cpu * CORE_SECOND, MIB)),
            vec![container(
                "pod1",
                "c1",
                sample(ts, start, cpu * CORE_SECOND, MIB),
            )],
        )
    };
    store.ingest(&n, &at(10, 10), T0 + 10 * SECOND);
    store.ingest(&n, &at(30, 50), T0 + 30 * SECOND);
    // A replica answered with older data: prev (10s) is kept, last becomes the 20s point.
    let now = T0 + 40 * SECOND;
    store.ingest(&n, &at(20, 35), now);
    let ts = T0 + 20 * SECOND;
    assert_eq!(
        store.node("node1", now),
        Some(usage(ts, 10 * SECOND, 2_500_000_000, MIB))
    );
    let pod = store.pod("ns", "pod1", now).expect("pod usage");
    assert_eq!((pod.timestamp_ns, pod.window_ns), (ts, 10 * SECOND));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 2_500_000_000, MIB)]
    );
}

#[test]
fn point_older_than_prev_drops_usage_until_the_next_good_pair() {
    let store = store(60);
    let n = name("node1");
    let at = |s: i64, cpu: u64| {
        scrape(
            Some(node_sample(T0 + s * SECOND, cpu * CORE_SECOND, MIB)),
            vec![],
        )
    };
    store.ingest(&n, &at(10, 10), T0 + 10 * SECOND);
    store.ingest(&n, &at(20, 20), T0 + 20 * SECOND);
    store.ingest(&n, &at(5, 5), T0 + 30 * SECOND);
    assert_eq!(store.node("node1", T0 + 30 * SECOND), None);
    store.ingest(&n, &at(25, 25), T0 + 40 * SECOND);
    assert_eq!(
        store.node("node1", T0 + 40 * SECOND),
        Some(usage(T0 + 25 * SECOND, 20 * SECOND, 1_000_000_000, MIB))
    );
}

#[test]
fn same_batch_twice_has_no_usage() {
    let store = store(60);
    let n = name("node1");
    let batch = scrape(
        Some(node_sample(T0, 10 * CORE_SECOND, MIB)),
        vec![container(
            "pod1",
            "c1",
            sample(T0, T0 - 3600 * SECOND, CORE_SECOND, MIB),
        )],
    );
    store.ingest(&n, &batch, T0);
    let again = store.ingest(&n, &batch, T0 + SECOND);
    assert_eq!(
        again,
        Ingested {
            node_usage: false,
            pods: 1,
            pods_with_usage: 0,
            containers_ignored: 0,
            pending: 2,
            unpaired: 0,
            waiting_newest_ns: T0,
        }
    );
    assert_eq!(store.node("node1", T0 + SECOND), None);
    assert_eq!(store.pod("ns", "pod1", T0 + SECOND), None);
    assert_eq!(store.readiness(T0 + SECOND), Readiness::default());
}

#[test]
fn pending_series_are_counted_until_their_timestamps_move() {
    // What the warm-up waits out: the node and two containers refreshed at different
    // moments (a kubelet's housekeeping is per container).
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let at = |node_ts: i64, c1_ts: i64, c2_ts: i64| {
        scrape(
            Some(node_sample(node_ts, (node_ts / MS) as u64, MIB)),
            vec![
                container("pod1", "c1", sample(c1_ts, start, (c1_ts / MS) as u64, MIB)),
                container("pod1", "c2", sample(c2_ts, start, (c2_ts / MS) as u64, MIB)),
            ],
        )
    };
    let first = store.ingest(&n, &at(T0, T0 - 4 * SECOND, T0 - 2 * SECOND), T0);
    assert_eq!((first.pending, first.waiting_newest_ns), (3, T0));
    // One second later only c1 refreshed: the node and c2 still wait; the newest of them is
    // the node's sample.
    let second = store.ingest(&n, &at(T0, T0 + SECOND, T0 - 2 * SECOND), T0 + SECOND);
    assert_eq!((second.pending, second.waiting_newest_ns), (2, T0));
    assert!(!second.node_usage);
    assert_eq!(second.pods_with_usage, 0, "c2 has no rate yet");
    // Everything refreshed: nothing pending, node and pod served.
    let third = store.ingest(
        &n,
        &at(T0 + 10 * SECOND, T0 + 6 * SECOND, T0 + 8 * SECOND),
        T0 + 10 * SECOND,
    );
    assert_eq!((third.pending, third.waiting_newest_ns), (0, 0));
    assert!(third.node_usage);
    assert_eq!(third.pods_with_usage, 1);
    assert!(store.pod("ns", "pod1", T0 + 10 * SECOND).is_some());
}

#[test]
fn swap_is_a_gauge_of_the_newest_sample_and_absent_stays_absent() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let at = |ts: i64, swap: Option<u64>| {
        let mut node = node_sample(ts, (ts / MS) as u64, MIB);
        node.swap_bytes = swap;
        let mut c1 = sample(ts, start, (ts / MS) as u64, MIB);
        c1.swap_bytes = swap;
        let c2 = sample(ts, start, (ts / MS) as u64, MIB);
        scrape(
            Some(node),
            vec![container("pod1", "c1", c1), container("pod1", "c2", c2)],
        )
    };
    store.ingest(&n, &at(T0, Some(4096)), T0);
    store.ingest(&n, &at(T0 + 10 * SECOND, Some(8192)), T0 + 10 * SECOND);
    let now = T0 + 10 * SECOND;
    assert_eq!(store.node("node1", now).unwrap().swap_bytes, Some(8192));
    let pod = store.pod("ns", "pod1", now).unwrap();
    let swap: Vec<_> = pod.containers.iter().map(|c| c.swap_bytes()).collect();
    assert_eq!(swap, [Some(8192), None]);
    // A kubelet that stops reporting swap: none is served, not the old value.
    store.ingest(&n, &at(T0 + 20 * SECOND, None), T0 + 20 * SECOND);
    assert_eq!(
        store.node("node1", T0 + 20 * SECOND).unwrap().swap_bytes,
        None
    );
    // No swap in use (what cgroup v2 kubelets report for every container of a node without
    // swap): the node's 0 is served, a container's is left out.
    store.ingest(&n, &at(T0 + 30 * SECOND, Some(0)), T0 + 30 * SECOND);
    let now = T0 + 30 * SECOND;
    assert_eq!(store.node("node1", now).unwrap().swap_bytes, Some(0));
    let pod = store.pod("ns", "pod1", now).unwrap();
    assert!(pod.containers.iter().all(|c| c.swap_bytes().is_none()));
}

#[test]
fn summary_nanocores_leave_nothing_pending() {
    let store = store(60);
    let n = name("node1");
    let with_rate = |s: Sample| Sample {
        cpu_nanocores: Some(250_000_000),
        ..s
    };
    let first = store.ingest(
        &n,
        &scrape(
            Some(with_rate(node_sample(T0, CORE_SECOND, MIB))),
            vec![container(
                "pod1",
                "c1",
                with_rate(sample(T0, T0 - 3600 * SECOND, CORE_SECOND, MIB)),
            )],
        ),
        T0,
    );
    assert_eq!(
        (first.pending, first.node_usage, first.pods_with_usage),
        (0, true, 1)
    );
    // Served, but with no pair of points of their own yet.
    assert_eq!((first.unpaired, first.waiting_newest_ns), (2, T0));
}

// ---- readiness ----

#[test]
fn readiness_needs_nodes_and_pods_with_usage() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let batch = |ts: i64, cpu: u64| {
        scrape(
            Some(node_sample(ts, cpu * CORE_SECOND, MIB)),
            vec![container(
                "pod1",
                "c1",
                sample(ts, start, cpu * CORE_SECOND, MIB),
            )],
        )
    };
    store.ingest(&n, &batch(T0, 10), T0);
    assert_eq!(
        store.readiness(T0),
        Readiness {
            nodes: false,
            pods: false
        }
    );
    let t1 = T0 + 10 * SECOND;
    store.ingest(&n, &batch(t1, 20), t1);
    assert_eq!(
        store.readiness(t1),
        Readiness {
            nodes: true,
            pods: true
        }
    );
    assert_eq!(
        store.points(),
        Points {
            nodes: 1,
            containers: 1
        }
    );

    // Pods only (the node sample is missing): pods ready, nodes not.
    let pods_only = store_with_pods_only();
    assert_eq!(
        pods_only.readiness(t1),
        Readiness {
            nodes: false,
            pods: true
        }
    );
}

fn store_with_pods_only() -> Store {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    for (ts, cpu) in [(T0, 10), (T0 + 10 * SECOND, 20)] {
        ingest_c1(&store, &n, sample(ts, start, cpu * CORE_SECOND, MIB));
    }
    store
}

// ---- where we are deliberately better ----

#[test]
fn init_container_stubs_and_containers_without_memory_are_ignored_not_hiding_the_pod() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let batch = |ts: i64, cpu: u64| {
        vec![
            container("pod1", "app", sample(ts, start, cpu * CORE_SECOND, 7 * MIB)),
            // A finished init container: start time only, zero CPU and memory.
            container(
                "pod1",
                "init",
                Sample {
                    timestamp_ns: ts,
                    start_time_ns: Some(start),
                    ..Sample::default()
                },
            ),
            container("pod1", "init-zero", sample(ts, start, 0, 0)),
            // CPU but no memory series: not served with 0 bytes, which an HPA on memory
            // would scale down on (an explicit 0 is served, #1330).
            container(
                "pod1",
                "no-memory",
                Sample {
                    memory_working_set_bytes: None,
                    ..sample(ts, start, cpu * CORE_SECOND, 0)
                },
            ),
        ]
    };
    let first = store.ingest(&n, &scrape(None, batch(T0, 10)), T0);
    assert_eq!(first.containers_ignored, 3);
    let t1 = T0 + 10 * SECOND;
    let second = store.ingest(&n, &scrape(None, batch(t1, 12)), t1);
    assert_eq!((second.containers_ignored, second.pods_with_usage), (3, 1));
    let pod = store
        .pod("ns", "pod1", t1)
        .expect("served with its app container");
    assert_eq!(
        &*pod.containers,
        &[container_usage("app", 200_000_000, 7 * MIB)]
    );
}

/// The kubelet's CRI stats provider reports a cumulative CPU of 0 when the runtime gave no
/// CPU stats. That reading is no point: paired with the next real one it would be the
/// container's whole lifetime of CPU in one window (hundreds of cores, an HPA scaling out).
#[test]
fn a_cumulative_cpu_of_zero_is_no_reading_and_never_a_spike() {
    let store = store(15);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let at = |i: i64| T0 + i * 15 * SECOND;
    let cpu_seconds = [10_000, 10_015, 0, 10_045, 10_060];
    for (i, &cpu) in cpu_seconds.iter().enumerate() {
        let ts = at(i as i64);
        let batch = vec![container(
            "pod1",
            "app",
            sample(ts, start, cpu * CORE_SECOND, 100 * MIB),
        )];
        let ingested = store.ingest(&n, &scrape(None, batch), ts);
        let served = store
            .pod("ns", "pod1", ts)
            .map(|p| p.containers[0].cpu_nanocores);
        match i {
            1 | 4 => assert_eq!(served, Some(1_000_000_000), "scrape {i}"),
            // The zero is ignored and takes the container's history with it; the reading
            // after it starts a new pair, as after metrics-server drops the pod.
            2 => {
                assert_eq!(ingested.containers_ignored, 1);
                assert_eq!(served, None, "scrape {i}");
            }
            _ => assert_eq!(served, None, "scrape {i}"),
        }
    }
}

/// The summary source: a sample whose cumulative counter is 0 beside the kubelet's rate, then
/// one with the counter and no rate, makes no pair.
#[test]
fn a_zero_counter_beside_a_rate_pairs_with_nothing() {
    let store = store(15);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let first = Sample {
        cpu_nanocores: Some(500_000_000),
        ..sample(T0, start, 0, 100 * MIB)
    };
    store.ingest(&n, &scrape(None, vec![container("pod1", "app", first)]), T0);
    assert_eq!(
        store
            .pod("ns", "pod1", T0)
            .map(|p| p.containers[0].cpu_nanocores),
        Some(500_000_000)
    );
    let t1 = T0 + 15 * SECOND;
    let second = sample(t1, start, 10_000 * CORE_SECOND, 100 * MIB);
    store.ingest(
        &n,
        &scrape(None, vec![container("pod1", "app", second)]),
        t1,
    );
    assert_eq!(store.pod("ns", "pod1", t1), None);
}

#[test]
fn zero_memory_with_cpu_data_is_valid_and_memory_only_is_ignored() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let batch = |ts: i64, cpu: u64| {
        vec![
            container("pod1", "cpu-only", sample(ts, start, cpu * CORE_SECOND, 0)),
            container(
                "pod1",
                "memory-only",
                Sample {
                    timestamp_ns: ts,
                    memory_working_set_bytes: Some(MIB),
                    ..Sample::default()
                },
            ),
        ]
    };
    store.ingest(&n, &scrape(None, batch(T0, 10)), T0);
    let t1 = T0 + 10 * SECOND;
    let ingested = store.ingest(&n, &scrape(None, batch(t1, 15)), t1);
    assert_eq!(ingested.containers_ignored, 1);
    let pod = store
        .pod("ns", "pod1", t1)
        .expect("zero memory does not hide the pod");
    assert_eq!(
        &*pod.containers,
        &[container_usage("cpu-only", 500_000_000, 0)]
    );
}

#[test]
fn pod_with_only_stubs_is_not_stored() {
    let store = store(60);
    let n = name("node1");
    let stub = container("pod1", "init", sample(T0, T0 - SECOND, 0, 0));
    let ingested = store.ingest(&n, &scrape(None, vec![stub.clone()]), T0);
    assert_eq!((ingested.pods, ingested.containers_ignored), (1, 1));
    store.ingest(&n, &scrape(None, vec![stub]), T0 + 10 * SECOND);
    assert_eq!(store.pod("ns", "pod1", T0 + 10 * SECOND), None);
    assert!(!store.readiness(T0 + 10 * SECOND).pods);
}

#[test]
fn duplicate_container_in_one_scrape_is_ignored() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let c = container("pod1", "c1", sample(T0, start, CORE_SECOND, MIB));
    let ingested = store.ingest(&n, &scrape(None, vec![c.clone(), c]), T0);
    assert_eq!(ingested.containers_ignored, 1);
}

/// Two good scrapes of node1 with pod1 (15 s resolution, staleness 30 s); returns the time of
/// the second.
fn two_good_scrapes(store: &Store) -> i64 {
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    for (ts, cpu) in [(T0, 10), (T0 + 15 * SECOND, 25)] {
        let batch = scrape(
            Some(node_sample(ts, cpu * CORE_SECOND, MIB)),
            vec![container(
                "pod1",
                "c1",
                sample(ts, start, cpu * CORE_SECOND, MIB),
            )],
        );
        store.ingest(&n, &batch, ts);
    }
    T0 + 15 * SECOND
}

#[test]
fn failed_scrape_keeps_last_good_data_until_stale() {
    let store = store(15);
    assert_eq!(store.config().staleness, Duration::from_secs(30));
    let t = two_good_scrapes(&store);
    let n = name("node1");
    // One failed scrape: still served (metrics-server would drop both for two periods).
    store.scrape_failed(&n, t + 15 * SECOND);
    let now = t + 30 * SECOND;
    assert_eq!(
        store.node("node1", now),
        Some(usage(t, 15 * SECOND, 1_000_000_000, MIB))
    );
    assert!(store.pod("ns", "pod1", now).is_some());
    assert_eq!(
        store.readiness(now),
        Readiness {
            nodes: true,
            pods: true
        }
    );

    // Older than the staleness bound: absent for reads, still held until evicted.
    let later = t + 31 * SECOND;
    assert_eq!(store.node("node1", later), None);
    assert_eq!(store.pod("ns", "pod1", later), None);
    assert_eq!(store.readiness(later), Readiness::default());
    assert_eq!(
        store.points(),
        Points {
            nodes: 1,
            containers: 1
        }
    );
    store.evict_stale(later);
    assert_eq!(store.points(), Points::default());
    assert_eq!(
        store.pod("ns", "pod1", t),
        None,
        "evicted, even for an earlier clock"
    );
}

#[test]
fn failed_scrape_past_staleness_frees_the_node() {
    let store = store(15);
    let t = two_good_scrapes(&store);
    store.scrape_failed(&name("node1"), t + 30 * SECOND);
    assert_eq!(
        store.points(),
        Points {
            nodes: 1,
            containers: 1
        }
    );
    store.scrape_failed(&name("node1"), t + 31 * SECOND);
    assert_eq!(store.points(), Points::default());
    assert_eq!(store.pod("ns", "pod1", t), None);
}

#[test]
fn evict_stale_keeps_fresh_nodes() {
    let store = store(15);
    let t = two_good_scrapes(&store);
    store.evict_stale(t + 30 * SECOND);
    assert!(store.node("node1", t + 30 * SECOND).is_some());
    assert!(store.pod("ns", "pod1", t + 30 * SECOND).is_some());
}

#[test]
fn remove_node_drops_its_pods_only() {
    let store = store(15);
    let t = two_good_scrapes(&store);
    let start = T0 - 3600 * SECOND;
    let n2 = name("node2");
    for (ts, cpu) in [(T0, 10), (t, 25)] {
        ingest_container(
            &store,
            &n2,
            "pod2",
            "c1",
            sample(ts, start, cpu * CORE_SECOND, MIB),
        );
    }
    store.remove_node("node1");
    assert_eq!(store.node("node1", t), None);
    assert_eq!(store.pod("ns", "pod1", t), None);
    assert!(store.pod("ns", "pod2", t).is_some());
    assert_eq!(
        store.points(),
        Points {
            nodes: 0,
            containers: 1
        }
    );
}

#[test]
fn pods_missing_from_the_next_scrape_are_dropped() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let both = |ts: i64, cpu: u64| {
        vec![
            container("pod1", "c", sample(ts, start, cpu, MIB)),
            container("pod2", "c", sample(ts, start, cpu, MIB)),
        ]
    };
    store.ingest(&n, &scrape(None, both(T0, CORE_SECOND)), T0);
    let t1 = T0 + 10 * SECOND;
    store.ingest(&n, &scrape(None, both(t1, 2 * CORE_SECOND)), t1);
    assert!(store.pod("ns", "pod2", t1).is_some());
    let t2 = T0 + 20 * SECOND;
    ingest_container(
        &store,
        &n,
        "pod1",
        "c",
        sample(t2, start, 3 * CORE_SECOND, MIB),
    );
    assert!(store.pod("ns", "pod1", t2).is_some());
    assert_eq!(store.pod("ns", "pod2", t2), None);

    // Same number of pods, one replaced by another.
    let t3 = T0 + 30 * SECOND;
    let swapped = vec![
        container("pod1", "c", sample(t3, start, 4 * CORE_SECOND, MIB)),
        container("pod3", "c", sample(t3, start, 4 * CORE_SECOND, MIB)),
    ];
    store.ingest(&n, &scrape(None, swapped), t3);
    let t4 = T0 + 40 * SECOND;
    let swapped_back = vec![
        container("pod2", "c", sample(t4, start, 5 * CORE_SECOND, MIB)),
        container("pod3", "c", sample(t4, start, 5 * CORE_SECOND, MIB)),
    ];
    store.ingest(&n, &scrape(None, swapped_back), t4);
    assert_eq!(store.pod("ns", "pod1", t4), None);
    assert!(store.pod("ns", "pod3", t4).is_some());
    assert_eq!(
        store.pod("ns", "pod2", t4),
        None,
        "pod2 is new again: no previous point"
    );
}

#[test]
fn pod_moving_between_nodes_is_first_writer_wins_while_the_owner_is_fresh() {
    let store = store(60);
    let (a, b) = (name("node-a"), name("node-b"));
    let start = T0 - 3600 * SECOND;
    let pod_at = |ts: i64, cpu: u64| {
        scrape(
            None,
            vec![container(
                "pod1",
                "c1",
                sample(ts, start, cpu * CORE_SECOND, MIB),
            )],
        )
    };
    store.ingest(&a, &pod_at(T0, 10), T0);
    store.ingest(&a, &pod_at(T0 + 10 * SECOND, 20), T0 + 10 * SECOND);

    // node-b reports the same pod while node-a's data is fresh: node-a keeps it.
    let t = T0 + 20 * SECOND;
    let from_b = store.ingest(&b, &pod_at(t, 500), t);
    assert_eq!(from_b.pods_with_usage, 0);
    let pod = store.pod("ns", "pod1", t).expect("still node-a's");
    assert_eq!(store.owner("ns", "pod1"), Some(a.clone()));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 1_000_000_000, MIB)]
    );

    // node-a stops reporting it; node-b's next two scrapes own it.
    store.ingest(&a, &NodeScrape::default(), t);
    assert_eq!(store.pod("ns", "pod1", t), None);
    store.ingest(&b, &pod_at(T0 + 30 * SECOND, 510), T0 + 30 * SECOND);
    store.ingest(&b, &pod_at(T0 + 40 * SECOND, 520), T0 + 40 * SECOND);
    let pod = store
        .pod("ns", "pod1", T0 + 40 * SECOND)
        .expect("node-b's now");
    assert_eq!(store.owner("ns", "pod1"), Some(b.clone()));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 1_000_000_000, MIB)]
    );
    // node-a's later scrapes do not take it back or remove it.
    store.ingest(&a, &NodeScrape::default(), T0 + 41 * SECOND);
    assert!(store.pod("ns", "pod1", T0 + 41 * SECOND).is_some());
    assert_eq!(store.owner("ns", "pod1"), Some(b));
}

/// `spec.nodeName` as a map from pod name to node.
#[derive(Debug)]
struct PlacedOn(HashMap<&'static str, &'static str>);

impl Placement for PlacedOn {
    fn is_on(&self, namespace: &str, name: &str, node: &str) -> Option<bool> {
        assert_eq!(namespace, "ns");
        self.0.get(name).map(|&on| on == node)
    }
}

/// A kubelet that still reports a pod it no longer runs (lingering cgroups, #1300; the old
/// incarnation of a rescheduled StatefulSet pod) loses it to the node the pod is placed on
/// at that node's first report, and never gets it back, even once that node's data is stale.
#[test]
fn a_pod_belongs_to_the_node_it_is_placed_on() {
    let placement = PlacedOn(HashMap::from([("pod1", "node-b"), ("pod2", "node-b")]));
    let store = store(15).placed_by(Arc::new(placement));
    let (a, b) = (name("node-a"), name("node-b"));
    let start = T0 - 3600 * SECOND;
    let pods_at = |pods: &[&str], ts: i64, cpu: u64| {
        let containers = pods
            .iter()
            .map(|p| container(p, "c1", sample(ts, start, cpu * CORE_SECOND, MIB)))
            .collect();
        scrape(None, containers)
    };
    // node-a's report of a pod placed on node-b is refused from the start.
    store.ingest(&a, &pods_at(&["pod1", "ghost"], T0, 10), T0);
    store.ingest(
        &a,
        &pods_at(&["pod1", "ghost"], T0 + 15 * SECOND, 25),
        T0 + 15 * SECOND,
    );
    assert_eq!(store.owner("ns", "pod1"), None);
    // A pod placement does not know stays with the node that reports it.
    assert_eq!(store.owner("ns", "ghost"), Some(a.clone()));

    // A store without placement gave pod1 to node-a; told of it, node-b takes it over at once.
    let unplaced = store_with_owner(&a, &pods_at(&["pod2"], T0, 10));
    let placed = unplaced.placed_by(Arc::new(PlacedOn(HashMap::from([("pod2", "node-b")]))));
    let t = T0 + 20 * SECOND;
    placed.ingest(&b, &pods_at(&["pod2"], t, 500), t);
    assert_eq!(placed.owner("ns", "pod2"), Some(b.clone()));
    let t2 = t + 15 * SECOND;
    placed.ingest(&a, &pods_at(&["pod2"], t2, 40), t2);
    placed.ingest(&b, &pods_at(&["pod2"], t2, 515), t2);
    assert_eq!(placed.owner("ns", "pod2"), Some(b.clone()));
    assert_eq!(
        &*placed.pod("ns", "pod2", t2).expect("node-b's").containers,
        &[container_usage("c1", 1_000_000_000, MIB)]
    );
    // node-b's data goes stale; node-a still does not get the pod.
    let late = t2 + 60 * SECOND;
    placed.ingest(&a, &pods_at(&["pod2"], late, 100), late);
    assert_eq!(placed.owner("ns", "pod2"), Some(b));
}

/// A store (no placement) where `node` reported `scrape` first.
fn store_with_owner(node: &NodeName, scrape: &NodeScrape<'_>) -> Store {
    let store = store(15);
    store.ingest(node, scrape, T0);
    store
}

#[test]
fn pod_of_a_stale_owner_is_taken_over_without_its_history() {
    let store = store(15);
    let t = two_good_scrapes(&store); // node1 owns pod1, last good at t
    let b = name("node2");
    let start = T0 - 60 * SECOND;
    let later = t + 31 * SECOND; // node1 is stale now
    ingest_c1(&store, &b, sample(later, start, 2 * CORE_SECOND, MIB));
    assert_eq!(
        store.pod("ns", "pod1", later),
        None,
        "no pairing with node1's counters"
    );
    let t2 = later + 15 * SECOND;
    ingest_c1(&store, &b, sample(t2, start, 5 * CORE_SECOND, MIB));
    let pod = store.pod("ns", "pod1", t2).expect("node2 owns it");
    assert_eq!(store.owner("ns", "pod1"), Some(b));
    assert_eq!(&*pod.containers, &[container_usage("c1", 200_000_000, MIB)]);
    // node1 is removed later: node2's pod stays.
    store.remove_node("node1");
    assert!(store.pod("ns", "pod1", t2).is_some());
}

#[test]
fn a_stale_owner_that_comes_back_does_not_overwrite_the_new_owners_pod() {
    let store = store(15);
    let t = two_good_scrapes(&store); // node1 owns pod1 and still holds its history
    let (a, b) = (name("node1"), name("node2"));
    let start = T0 - 60 * SECOND;
    let later = t + 31 * SECOND; // node1 is stale now
    ingest_c1(&store, &b, sample(later, start, 2 * CORE_SECOND, MIB));
    let t2 = later + 15 * SECOND;
    ingest_c1(&store, &b, sample(t2, start, 5 * CORE_SECOND, MIB));
    let expected = [container_usage("c1", 200_000_000, MIB)];
    assert_eq!(
        &*store.pod("ns", "pod1", t2).expect("node2's").containers,
        &expected
    );

    // node1 answers again with the pod, whose counters pair with its own last ones: node2's
    // data is fresh, so node1's report is refused and node2's usage stays served.
    let back = t2 + SECOND;
    let cpu = (25 + 100) * CORE_SECOND; // node1's last was 25 core-seconds
    let from_a = store.ingest(
        &a,
        &scrape(
            None,
            vec![container(
                "pod1",
                "c1",
                sample(back, T0 - 3600 * SECOND, cpu, 7 * MIB),
            )],
        ),
        back,
    );
    assert_eq!((from_a.pods, from_a.pods_with_usage), (1, 0));
    assert_eq!(store.owner("ns", "pod1"), Some(b.clone()));
    let pod = store.pod("ns", "pod1", back).expect("still node2's");
    assert_eq!((pod.timestamp_ns, &*pod.containers), (t2, &expected[..]));
}

#[test]
fn pods_added_and_removed_between_scrapes_leave_the_others_history() {
    let store = store(15);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let batch = |ts: i64, cpu: u64, pods: &[usize]| {
        let containers = pods
            .iter()
            .map(|p| {
                container(
                    &format!("pod{p}"),
                    "c1",
                    sample(ts, start, cpu * CORE_SECOND, MIB),
                )
            })
            .collect();
        scrape(None, containers)
    };
    let all: Vec<usize> = (0..40).collect();
    store.ingest(&n, &batch(T0, 10, &all), T0);
    let t1 = T0 + 15 * SECOND;
    assert_eq!(
        store.ingest(&n, &batch(t1, 25, &all), t1).pods_with_usage,
        40
    );

    // Every fourth pod ends, ten new ones start: in the ingest's order they fall between the
    // survivors, whose usage needs their previous points.
    let mut next: Vec<usize> = all.iter().copied().filter(|p| p % 4 != 0).collect();
    next.extend(100..110);
    let t2 = t1 + 15 * SECOND;
    let ingested = store.ingest(&n, &batch(t2, 40, &next), t2);
    assert_eq!((ingested.pods, ingested.pods_with_usage), (40, 30));
    for p in 0..40 {
        let pod = store.pod("ns", &format!("pod{p}"), t2);
        if p % 4 == 0 {
            assert_eq!(pod, None, "pod{p} ended");
        } else {
            let pod = pod.unwrap_or_else(|| panic!("pod{p} kept its history"));
            assert_eq!(
                &*pod.containers,
                &[container_usage("c1", 1_000_000_000, MIB)]
            );
        }
    }
    assert_eq!(
        store.pod("ns", "pod105", t2),
        None,
        "new: waits for a second point"
    );
    assert_eq!(store.entries(), (1, 40));
}

// ---- summary usageNanoCores ----

#[test]
fn summary_nanocores_give_usage_after_one_scrape() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let with_rate = |ts: i64, nanocores: u64| Sample {
        timestamp_ns: ts,
        cpu_usage_ns_total: Some(1000 * CORE_SECOND),
        cpu_nanocores: Some(nanocores),
        memory_working_set_bytes: Some(3 * MIB),
        start_time_ns: Some(start),
        swap_bytes: None,
    };
    let first = store.ingest(
        &n,
        &scrape(
            Some(with_rate(T0, 2_000_000_000)),
            vec![container("pod1", "c1", with_rate(T0, 250_000_000))],
        ),
        T0,
    );
    assert_eq!((first.node_usage, first.pods_with_usage), (true, 1));
    assert_eq!(
        store.node("node1", T0),
        Some(usage(T0, 10 * SECOND, 2_000_000_000, 3 * MIB))
    );
    let pod = store.pod("ns", "pod1", T0).expect("usage after one scrape");
    assert_eq!((pod.timestamp_ns, pod.window_ns), (T0, 10 * SECOND));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 250_000_000, 3 * MIB)]
    );

    // With a previous sample the window is the real interval.
    let t1 = T0 + 15 * SECOND;
    store.ingest(
        &n,
        &scrape(
            Some(with_rate(t1, 1_500_000_000)),
            vec![container("pod1", "c1", with_rate(t1, 300_000_000))],
        ),
        t1,
    );
    assert_eq!(
        store.node("node1", t1),
        Some(usage(t1, 15 * SECOND, 1_500_000_000, 3 * MIB))
    );
    let pod = store.pod("ns", "pod1", t1).expect("usage");
    assert_eq!((pod.timestamp_ns, pod.window_ns), (t1, 15 * SECOND));
    assert_eq!(
        &*pod.containers,
        &[container_usage("c1", 300_000_000, 3 * MIB)]
    );
}

/// Warm-up with the summary's rates attached to a `/metrics/resource` scrape: the kubelet's
/// rate is served at once; a scrape that brings the same samples again (the kubelet has not
/// refreshed them) keeps serving it instead of taking the node and pod away; the next newer
/// sample pairs with the first and its exact rate replaces the kubelet's.
#[test]
fn a_kubelet_rate_is_served_until_a_newer_sample_pairs() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let t0 = T0 + 123 * MS;
    let at = |ts: i64, node_cpu: u64, c1_cpu: u64, rates: Option<(u64, u64)>| {
        scrape(
            Some(Sample {
                cpu_nanocores: rates.map(|r| r.0),
                ..node_sample(ts, node_cpu, 4 * MIB)
            }),
            vec![container(
                "pod1",
                "c1",
                Sample {
                    cpu_nanocores: rates.map(|r| r.1),
                    ..sample(ts, start, c1_cpu, MIB)
                },
            )],
        )
    };
    let first = store.ingest(
        &n,
        &at(
            t0,
            100 * CORE_SECOND,
            10 * CORE_SECOND,
            Some((900_000_000, 250_000_000)),
        ),
        t0,
    );
    assert_eq!(
        (first.pending, first.unpaired, first.waiting_newest_ns),
        (0, 2, t0)
    );
    let served = |now: i64| {
        (
            store
                .node("node1", now)
                .map(|u| (u.timestamp_ns, u.window_ns, u.cpu_nanocores)),
            store
                .pod("ns", "pod1", now)
                .map(|p| (p.timestamp_ns, p.window_ns, p.containers[0].cpu_nanocores)),
        )
    };
    let kubelet_rates = (
        Some((t0, 10 * SECOND, 900_000_000)),
        Some((t0, 10 * SECOND, 250_000_000)),
    );
    assert_eq!(served(t0), kubelet_rates);

    // A second later, the same samples without rates: nothing new, nothing taken away.
    let again = store.ingest(
        &n,
        &at(t0, 100 * CORE_SECOND, 10 * CORE_SECOND, None),
        t0 + SECOND,
    );
    assert_eq!((again.pending, again.unpaired), (0, 2));
    assert_eq!((again.node_usage, again.pods_with_usage), (true, 1));
    assert_eq!(served(t0 + SECOND), kubelet_rates);

    // The kubelet refreshed: the pair of counters gives the exact rates over the real window.
    let t1 = t0 + 10 * SECOND;
    let paired = store.ingest(&n, &at(t1, 105 * CORE_SECOND, 15 * CORE_SECOND, None), t1);
    assert_eq!(
        (paired.pending, paired.unpaired, paired.waiting_newest_ns),
        (0, 0, 0)
    );
    assert_eq!(
        served(t1),
        (
            Some((t1, 10 * SECOND, 500_000_000)),
            Some((t1, 10 * SECOND, 500_000_000))
        )
    );
}

/// A container that never had usage is not kept served by a rescrape of its sample: it stays
/// pending, and so does its pod.
#[test]
fn a_rescraped_sample_without_usage_stays_pending() {
    let store = store(60);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    let first = ingest_c1(&store, &n, sample(T0, start, CORE_SECOND, MIB));
    let again = ingest_c1(&store, &n, sample(T0, start, CORE_SECOND, MIB));
    assert_eq!((first.pending, again.pending, again.unpaired), (1, 1, 0));
    assert_eq!(store.pod("ns", "pod1", T0), None);
}

// ---- concurrency ----

#[test]
fn racing_ingests_of_one_node_leave_no_pod_behind() {
    // The scrape loop never runs two ingests of one node at once, but the store allows it:
    // whichever finishes last keeps its pods, and the other's go with the node.
    const RACERS: usize = 4;
    const ROUNDS: i64 = 300;
    let store = store(15);
    let n = name("node1");
    let start = T0 - 3600 * SECOND;
    std::thread::scope(|scope| {
        for racer in 0..RACERS {
            let (store, n) = (&store, &n);
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let ts = T0 + round * SECOND;
                    // Each racer reports its own pods, and a few every racer shares.
                    let containers = (0..20)
                        .map(|p| {
                            let pod = if p < 5 {
                                format!("shared-{p}")
                            } else {
                                format!("pod-{racer}-{}", (round as usize + p) % 40)
                            };
                            container(
                                &pod,
                                "c1",
                                sample(ts, start, round as u64 * CORE_SECOND, MIB),
                            )
                        })
                        .collect();
                    store.ingest(n, &scrape(None, containers), ts);
                }
            });
        }
    });
    let (nodes, pods) = store.entries();
    assert_eq!(nodes, 1);
    assert!(pods <= 20, "only the last ingest's pods are held: {pods}");
    store.evict_stale(T0 + (ROUNDS + 31) * SECOND);
    assert_eq!(store.entries(), (0, 0));
}

#[test]
fn concurrent_ingests_and_reads_stay_consistent() {
    const WRITERS: usize = 4;
    const NODES_PER_WRITER: usize = 25;
    const PODS: usize = 10;
    const ROUNDS: i64 = 20;
    let store = store(60);
    let start = T0 - 3600 * SECOND;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let store = &store;
        let done = &done;
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            writers.push(scope.spawn(move || {
                for round in 0..ROUNDS {
                    let ts = T0 + round * 10 * SECOND;
                    // Every container uses exactly one core.
                    let cpu = (round as u64) * 10 * CORE_SECOND;
                    for n in 0..NODES_PER_WRITER {
                        let node = name(&format!("node-{w}-{n}"));
                        let containers = (0..PODS)
                            .flat_map(|p| {
                                ["a", "b"].map(|c| ContainerSample {
                                    namespace: Cow::Owned(format!("ns-{w}")),
                                    pod: Cow::Owned(format!("pod-{n}-{p}")),
                                    container: Cow::Borrowed(c),
                                    sample: sample(ts, start, cpu, MIB),
                                })
                            })
                            .collect();
                        store.ingest(
                            &node,
                            &scrape(Some(node_sample(ts, cpu + 1, MIB)), containers),
                            ts,
                        );
                    }
                }
            }));
        }
        for r in 0..2 {
            scope.spawn(move || {
                let mut seen = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for w in 0..WRITERS {
                        for n in 0..NODES_PER_WRITER {
                            let node = format!("node-{w}-{n}");
                            if let Some(u) = store.node(&node, T0 + ROUNDS * 10 * SECOND) {
                                assert_eq!(
                                    (u.cpu_nanocores, u.window_ns),
                                    (1_000_000_000, 10 * SECOND)
                                );
                            }
                            let pod = store.pod(
                                &format!("ns-{w}"),
                                &format!("pod-{n}-{}", (n + r) % PODS),
                                T0 + ROUNDS * 10 * SECOND,
                            );
                            if let Some(pod) = pod {
                                seen += 1;
                                let owner = store.owner(
                                    &format!("ns-{w}"),
                                    &format!("pod-{n}-{}", (n + r) % PODS),
                                );
                                assert_eq!(
                                    owner.as_ref().map(NodeName::as_str),
                                    Some(node.as_str())
                                );
                                assert_eq!(names(&pod), ["a", "b"]);
                                assert!(
                                    pod.containers
                                        .iter()
                                        .all(|c| c.cpu_nanocores == 1_000_000_000)
                                );
                            }
                        }
                    }
                    let _ = store.readiness(T0);
                    let _ = store.points();
                }
                seen
            });
        }
        for writer in writers {
            writer.join().expect("writer finished");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let now = T0 + (ROUNDS - 1) * 10 * SECOND;
    let total = (WRITERS * NODES_PER_WRITER) as u64;
    assert_eq!(
        store.points(),
        Points {
            nodes: total,
            containers: total * PODS as u64 * 2
        }
    );
    assert_eq!(
        store.readiness(now),
        Readiness {
            nodes: true,
            pods: true
        }
    );
    for w in 0..WRITERS {
        for n in 0..NODES_PER_WRITER {
            for p in 0..PODS {
                let pod = store
                    .pod(&format!("ns-{w}"), &format!("pod-{n}-{p}"), now)
                    .expect("every pod has usage");
                assert_eq!(pod.timestamp_ns, now);
            }
        }
    }
}

/// 1,000 periods of a 100-node cluster whose pods churn (a tenth of each node's pods replaced
/// by new names every period, one node replaced every 10 periods): what the store holds stays
/// what the cluster runs, never the sum of everything it has seen.
#[test]
fn a_thousand_periods_of_churn_hold_only_what_runs() {
    const NODES: usize = 100;
    const PODS: usize = 30;
    let store = store(15);
    let mut generation = vec![0usize; NODES];
    let mut node_names: Vec<NodeName> = (0..NODES).map(|n| name(&format!("node-{n}"))).collect();
    let mut most = (0, 0);
    for period in 0..1_000i64 {
        let ts = T0 + period * 15 * SECOND;
        if period % 10 == 9 {
            let gone = usize::try_from(period / 10).unwrap_or(0) % NODES;
            store.remove_node(node_names[gone].as_str());
            node_names[gone] = name(&format!("node-{gone}-{period}"));
        }
        for (n, node) in node_names.iter().enumerate() {
            generation[n] += 1;
            let containers = (0..PODS)
                .map(|p| {
                    // Pod p was replaced (a new name) when the generation passed it.
                    let born = (generation[n] + PODS - p) / 10 * 10;
                    let pod = format!("pod-{n}-{p}-{born}");
                    let cpu = u64::try_from(period + 1).unwrap_or(0) * CORE_SECOND;
                    container(&pod, "c", sample(ts, T0 - 60 * SECOND, cpu, 64 * MIB))
                })
                .collect();
            let cpu = u64::try_from(period + 1).unwrap_or(0) * 4 * CORE_SECOND;
            store.ingest(
                node,
                &scrape(Some(node_sample(ts, cpu, MIB)), containers),
                ts,
            );
        }
        let (nodes, pods) = store.entries();
        most = (most.0.max(nodes), most.1.max(pods));
        assert!(
            nodes <= NODES && pods <= NODES * PODS,
            "period {period}: {nodes} nodes, {pods} pods"
        );
    }
    assert_eq!(most, (NODES, NODES * PODS));
    assert!(store.points().containers > 0, "usage is served throughout");
}

// ---- links from inventory records ----

/// Two scrapes of `pod1` (container `c1`) on `n`, 5 s apart, starting at `t`: usage at
/// `t + 5 s` with `cpu_cores` cores.
fn two_scrapes(store: &Store, n: &NodeName, t: i64, cpu_cores: u64) {
    ingest_c1(store, n, sample(t, T0, CORE_SECOND, 4 * MIB));
    ingest_c1(
        store,
        n,
        sample(
            t + 5 * SECOND,
            T0,
            (1 + 5 * cpu_cores) * CORE_SECOND,
            4 * MIB,
        ),
    );
}

#[test]
fn a_link_reads_what_a_lookup_reads_and_follows_every_ingest() {
    let store = store(60);
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    let link = UsageLink::new();
    assert_eq!(store.pod_linked(&link, "ns", "pod1", t), None);
    assert!(!link.is_linked(), "no entry, nothing to link");

    ingest_c1(&store, &n, sample(t, T0, CORE_SECOND, 4 * MIB));
    assert_eq!(store.pod_linked(&link, "ns", "pod1", t), None);
    assert!(link.is_linked(), "an entry without usage yet is linked");

    let t2 = t + 5 * SECOND;
    ingest_c1(&store, &n, sample(t2, T0, 6 * CORE_SECOND, 4 * MIB));
    let linked = store.pod_linked(&link, "ns", "pod1", t2);
    assert_eq!(linked, store.pod("ns", "pod1", t2));
    assert_eq!(
        linked.map(|p| p.containers[0].cpu_nanocores),
        Some(CORE_SECOND)
    );
    // The next ingest is read through the same link.
    let t3 = t2 + 5 * SECOND;
    ingest_c1(&store, &n, sample(t3, T0, 16 * CORE_SECOND, 4 * MIB));
    assert_eq!(
        store
            .pod_linked(&link, "ns", "pod1", t3)
            .map(|p| (p.timestamp_ns, p.containers[0].cpu_nanocores)),
        Some((t3, 2 * CORE_SECOND))
    );
    // Staleness applies as to a lookup.
    let late = t3 + 121 * SECOND;
    assert_eq!(store.pod("ns", "pod1", late), None);
    assert_eq!(store.pod_linked(&link, "ns", "pod1", late), None);
}

#[test]
fn a_link_to_a_dropped_pod_stops_serving_and_falls_back_to_a_lookup() {
    let store = store(60);
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    two_scrapes(&store, &n, t, 1);
    let t2 = t + 5 * SECOND;
    let link = UsageLink::new();
    assert!(store.pod_linked(&link, "ns", "pod1", t2).is_some());
    assert!(link.is_linked());

    store.remove_node("node1");
    assert_eq!(store.pod("ns", "pod1", t2), None);
    assert_eq!(
        store.pod_linked(&link, "ns", "pod1", t2),
        None,
        "the retired slot must not serve the dropped pod's usage"
    );

    // The pod comes back as a new entry (another node): the old link is retired, the
    // lookup finds the new one.
    let n2 = name("node2");
    let t3 = t2 + 10 * SECOND;
    two_scrapes(&store, &n2, t3, 3);
    let back = store.pod_linked(&link, "ns", "pod1", t3 + 5 * SECOND);
    assert_eq!(back, store.pod("ns", "pod1", t3 + 5 * SECOND));
    assert_eq!(
        back.map(|p| p.containers[0].cpu_nanocores),
        Some(3 * CORE_SECOND)
    );
    assert_eq!(store.owner("ns", "pod1"), Some(n2));
}

#[test]
fn a_link_made_by_one_store_is_not_read_by_another() {
    let (a, b) = (store(60), store(60));
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    two_scrapes(&a, &n, t, 1);
    two_scrapes(&b, &n, t, 2);
    let t2 = t + 5 * SECOND;
    let link = UsageLink::new();
    assert!(a.pod_linked(&link, "ns", "pod1", t2).is_some());
    assert_eq!(
        b.pod_linked(&link, "ns", "pod1", t2)
            .map(|p| p.containers[0].cpu_nanocores),
        Some(2 * CORE_SECOND),
        "b answers from its own entry"
    );
    // A clone starts unlinked.
    assert!(!link.clone().is_linked());
}

#[test]
fn evicting_stale_pods_retires_their_links() {
    let store = store(60);
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    two_scrapes(&store, &n, t, 1);
    let t2 = t + 5 * SECOND;
    let link = UsageLink::new();
    assert!(store.pod_linked(&link, "ns", "pod1", t2).is_some());
    store.evict_stale(t2 + 200 * SECOND);
    assert_eq!(store.entries(), (0, 0));
    // Read at a time the data would still be fresh: only the retirement hides it.
    assert_eq!(store.pod_linked(&link, "ns", "pod1", t2), None);
}

#[test]
fn namespaces_and_container_names_are_shared_between_pods() {
    let store = store(60);
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    for (i, ts) in [t, t + 5 * SECOND].into_iter().enumerate() {
        let cpu = (1 + 5 * i as u64) * CORE_SECOND;
        let s = sample(ts, T0, cpu, 4 * MIB);
        let containers = ["pod1", "pod2"]
            .into_iter()
            .flat_map(|p| [container(p, "app", s), container(p, "sidecar", s)])
            .collect();
        store.ingest(&n, &scrape(None, containers), ts);
    }
    let now = t + 5 * SECOND;
    let (a, b) = (
        store.pod("ns", "pod1", now).expect("pod1 has usage"),
        store.pod("ns", "pod2", now).expect("pod2 has usage"),
    );
    assert_eq!(
        (names(&a), names(&b)),
        (vec!["app", "sidecar"], vec!["app", "sidecar"])
    );
    for (x, y) in a.containers.iter().zip(b.containers.iter()) {
        assert!(
            Arc::ptr_eq(&x.name, &y.name),
            "{} is one allocation",
            x.name
        );
    }
    let keys: Vec<PodKey> = store.pods.iter().map(|e| e.key().clone()).collect();
    assert_eq!(keys.len(), 2);
    assert!(Arc::ptr_eq(&keys[0].namespace, &keys[1].namespace));
}

/// A batch read answers what a lookup answers for each pod, whatever its link: made before,
/// made by the batch itself, retired (the pod left its node), or impossible (no such pod);
/// and longer than one batch.
#[test]
fn a_batch_read_through_links_answers_what_lookups_answer() {
    let store = store(60);
    let n = name("node1");
    let t = T0 + 120 * SECOND;
    let pods: Vec<String> = (0..20).map(|i| format!("pod{i:02}")).collect();
    let round = |ts: i64, cpu: u64, which: &[String]| {
        let containers = which
            .iter()
            .map(|p| container(p, "c", sample(ts, T0, cpu, 4 * MIB)))
            .collect();
        store.ingest(&n, &scrape(None, containers), ts);
    };
    round(t, CORE_SECOND, &pods);
    round(t + 5 * SECOND, 6 * CORE_SECOND, &pods);
    let keys: Vec<PodKey> = pods
        .iter()
        .map(|p| PodKey::new("ns", p))
        .chain([PodKey::new("ns", "unknown")])
        .collect();
    let links: Vec<UsageLink> = keys.iter().map(|_| UsageLink::new()).collect();
    // Every other pod, and the one that leaves, linked before the batch.
    for (link, key) in links
        .iter()
        .zip(&keys)
        .take(20)
        .step_by(2)
        .chain([(&links[19], &keys[19])])
    {
        assert!(
            store
                .pod_linked(link, &key.namespace, &key.name, t + 5 * SECOND)
                .is_some()
        );
    }
    let t3 = t + 10 * SECOND;
    round(t3, 11 * CORE_SECOND, &pods[..19]);

    let batch: Vec<(&UsageLink, &PodKey)> = links.iter().zip(&keys).collect();
    let mut out = vec![None; batch.len()];
    store.pods_linked(&batch, t3, &mut out);
    for (got, key) in out.iter().zip(&keys) {
        assert_eq!(*got, store.pod(&key.namespace, &key.name, t3), "{key}");
    }
    assert!(out[..19].iter().all(Option::is_some), "{out:?}");
    assert_eq!((&out[19], &out[20]), (&None, &None));
    assert!(links[..19].iter().all(UsageLink::is_linked));
    assert!(!links[20].is_linked(), "nothing to link an unknown pod to");
    // Read again through the links the batch made: the same answers.
    let mut again = vec![None; batch.len()];
    store.pods_linked(&batch, t3, &mut again);
    assert_eq!(again, out);
    // Slices of different lengths: the shorter decides, nothing panics.
    let mut short = vec![None; 3];
    store.pods_linked(&batch, t3, &mut short);
    assert_eq!(short[..], out[..3]);
    let mut long = vec![None; batch.len() + 2];
    store.pods_linked(&batch[..2], t3, &mut long);
    assert_eq!(long[..2], out[..2]);
    assert!(long[2..].iter().all(Option::is_none));
    // Staleness applies as to a lookup.
    store.pods_linked(&batch, t3 + 121 * SECOND, &mut out);
    assert!(out.iter().all(Option::is_none));
}
