//! The workload model: rates, restarts and memory bounds without housekeeping, then the
//! housekeeping schedule (each container and the node refreshed on its own timer).

use std::collections::BTreeMap;

use super::*;

fn container(restart: Option<u64>) -> SimContainer {
    SimContainer {
        name: "app".into(),
        created_ms: 1_000_000,
        cpu_cores: 0.25,
        cpu_wobble: 0.0,
        memory_min_bytes: 100 << 20,
        memory_max_bytes: 200 << 20,
        memory_period: Duration::from_secs(60),
        restart_every: restart.map(Duration::from_secs),
        restarted_ms: Vec::new(),
        swap_bytes: 0,
    }
}

fn node(restart: Option<u64>) -> SimNode {
    SimNode {
        name: "n1".into(),
        boot_ms: 0,
        system_cpu_cores: 0.5,
        system_memory_bytes: 1 << 30,
        pods: vec![SimPod {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
            containers: vec![container(restart)],
        }],
        housekeeping: Duration::ZERO,
        system_swap_bytes: None,
    }
}

#[test]
fn cpu_grows_at_the_configured_rate() {
    let n = node(None);
    let a = n.stats_at(1_010_000);
    let b = n.stats_at(1_020_000);
    let (ca, cb) = (&a.pods[0].containers[0], &b.pods[0].containers[0]);
    assert!((cb.cpu_seconds_total - ca.cpu_seconds_total - 2.5).abs() < 1e-9);
    assert!((b.cpu_seconds_total - a.cpu_seconds_total - (2.5 + 5.0)).abs() < 1e-9);
    assert_eq!(cb.timestamp_ms, 1_020_000);
    assert_eq!(ca.start_time_s, 1000.0);
}

#[test]
fn a_wobbling_rate_swings_but_the_counter_never_decreases_and_averages_out() {
    let mut c = container(None);
    c.cpu_wobble = 0.6;
    let (mut lo, mut hi) = (f64::MAX, 0.0_f64);
    let mut last = 0.0;
    for step in 0..=60 {
        let now = 1_000_000 + step * 1_000;
        let total = c.cpu_seconds(now);
        assert!(total >= last, "counter went back at {now}");
        last = total;
        let rate = c.cpu_cores_at(now);
        lo = lo.min(rate);
        hi = hi.max(rate);
    }
    assert!(hi > lo, "{lo}..{hi}");
    // Over one full swing (10 x 60 s) it integrates to zero: 0.25 cores on average.
    let full = c.cpu_seconds(1_600_000);
    assert!((full - 0.25 * 600.0).abs() < 1e-6, "{full}");
    let rates: Vec<f64> = (0..600)
        .map(|s| c.cpu_cores_at(1_000_000 + s * 1_000))
        .collect();
    let (lo, hi) = rates
        .iter()
        .fold((f64::MAX, 0.0_f64), |(l, h), &r| (l.min(r), h.max(r)));
    assert!(hi > 0.35 && lo < 0.15, "{lo}..{hi}");
    // Page-aligned memory, as a kernel reports it.
    assert_eq!(c.memory_bytes(1_030_000) % 4096, 0);
}

#[test]
fn restart_resets_the_counter_and_moves_the_start_time() {
    let n = node(Some(60));
    let before = n.stats_at(1_059_000);
    let after = n.stats_at(1_061_000);
    let (cb, ca) = (&before.pods[0].containers[0], &after.pods[0].containers[0]);
    assert!(ca.cpu_seconds_total < cb.cpu_seconds_total);
    assert!((ca.cpu_seconds_total - 0.25).abs() < 1e-9);
    assert_eq!(ca.start_time_s, 1060.0);
    // The node's counter never goes back.
    assert!(after.cpu_seconds_total > before.cpu_seconds_total);
}

#[test]
fn memory_wanders_within_bounds_and_containers_appear_when_created() {
    let n = node(None);
    let mut seen = std::collections::BTreeSet::new();
    for t in (1_000_000..1_120_000).step_by(1_000) {
        let m = n.stats_at(t).pods[0].containers[0].memory_working_set_bytes;
        assert!((100 << 20..=200 << 20).contains(&m));
        seen.insert(m);
    }
    assert!(seen.len() > 50, "memory should move");
    assert!(n.stats_at(999_999).pods[0].containers.is_empty());
}

#[test]
fn generated_nodes_are_deterministic_and_refreshed_like_a_kubelet() {
    assert_eq!(
        SimNode::generate("n", 1, 1, 0).housekeeping,
        Duration::from_secs(10)
    );
    assert_eq!(SimNode::default().housekeeping, Duration::from_secs(10));
    let a = SimNode::generate("n", 10, 2, 0).stats_at(30_000);
    let b = SimNode::generate("n", 10, 2, 0).stats_at(30_000);
    assert_eq!(a.pods.len(), 10);
    assert_eq!(a.pods[3].containers.len(), 2);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

// ---------------------------------------------------------------------------------------
// Housekeeping
// ---------------------------------------------------------------------------------------

/// The housekeeping interval of the tests below, ms.
const H: i64 = 10_000;

/// Four pods of three containers on `name`, booted at 0 and refreshed every [`H`]; one
/// container's rate wobbles.
fn housekept(name: &str) -> SimNode {
    let mut n = SimNode::generate(name, 4, 3, 0);
    n.pods[1].containers[2].cpu_wobble = 0.6;
    assert_eq!(n.housekeeping, Duration::from_millis(H as u64));
    n
}

/// Every container's stats as ((pod, container), stats).
fn by_container(s: &NodeStats) -> Vec<((String, String), &ContainerStats)> {
    s.pods
        .iter()
        .flat_map(|p| {
            p.containers
                .iter()
                .map(move |c| ((p.name.clone(), c.name.clone()), c))
        })
        .collect()
}

/// The model of one container.
fn model<'a>(n: &'a SimNode, pod: &str, container: &str) -> &'a SimContainer {
    n.pods
        .iter()
        .find(|p| p.name == pod)
        .and_then(|p| p.containers.iter().find(|c| c.name == container))
        .unwrap()
}

#[test]
fn two_requests_inside_one_refresh_window_get_identical_stats_and_timestamps() {
    let n = housekept("n1");
    let t = 1_000_000;
    let a = n.stats_at(t);
    // Nothing refreshes before the oldest sample is one interval old.
    let oldest = by_container(&a)
        .iter()
        .map(|(_, c)| c.timestamp_ms)
        .chain([a.timestamp_ms])
        .min()
        .unwrap();
    let later = oldest + H - 1;
    assert!(
        later > t + 100,
        "pick another t: the oldest sample is at {oldest}"
    );
    let b = n.stats_at(later);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(
        crate::payload::render_resource(&a),
        crate::payload::render_resource(&b)
    );
    assert_eq!(
        crate::payload::render_summary(&a),
        crate::payload::render_summary(&b)
    );
    // One millisecond later the oldest one has refreshed.
    assert_ne!(format!("{a:?}"), format!("{:?}", n.stats_at(oldest + H)));

    // Each container on its own: the same stats up to its next refresh, new ones at it.
    for ((pod, name), c) in by_container(&a) {
        let get = |at: i64| {
            let s = n.stats_at(at);
            by_container(&s)
                .into_iter()
                .find(|(k, _)| *k == (pod.clone(), name.clone()))
                .map(|(_, c)| format!("{c:?}"))
                .unwrap()
        };
        assert_eq!(
            get(c.timestamp_ms + H - 1),
            format!("{c:?}"),
            "{pod}/{name}"
        );
        let next = n.stats_at(c.timestamp_ms + H);
        let (_, moved) = by_container(&next)
            .into_iter()
            .find(|(k, _)| *k == (pod.clone(), name.clone()))
            .unwrap();
        assert_eq!(moved.timestamp_ms, c.timestamp_ms + H, "{pod}/{name}");
        assert!(
            moved.cpu_seconds_total > c.cpu_seconds_total,
            "{pod}/{name}"
        );
    }
    // And the node's own sample.
    assert_eq!(
        n.stats_at(a.timestamp_ms + H - 1).timestamp_ms,
        a.timestamp_ms
    );
    assert_eq!(
        n.stats_at(a.timestamp_ms + H).timestamp_ms,
        a.timestamp_ms + H
    );
}

#[test]
fn after_one_interval_every_sample_is_one_interval_newer() {
    let n = housekept("n1");
    for t in [1_000_000, 1_234_567, 7_654_321] {
        let (a, b) = (n.stats_at(t), n.stats_at(t + H));
        assert_eq!(b.timestamp_ms, a.timestamp_ms + H);
        assert!(b.cpu_seconds_total > a.cpu_seconds_total);
        let (ca, cb) = (by_container(&a), by_container(&b));
        assert_eq!(ca.len(), 12);
        for ((key, x), (_, y)) in ca.iter().zip(&cb) {
            assert_eq!(y.timestamp_ms, x.timestamp_ms + H, "{key:?} at {t}");
            assert!(y.cpu_seconds_total > x.cpu_seconds_total, "{key:?} at {t}");
        }
    }
}

#[test]
fn containers_and_the_node_refresh_at_their_own_moments() {
    let stamps = |n: &SimNode| -> Vec<i64> {
        let s = n.stats_at(1_000_000);
        by_container(&s)
            .iter()
            .map(|(_, c)| c.timestamp_ms)
            .chain([s.timestamp_ms])
            .collect()
    };
    let a = stamps(&housekept("n1"));
    let distinct: std::collections::BTreeSet<i64> = a.iter().copied().collect();
    assert_eq!(distinct.len(), a.len(), "{a:?}");
    // Spread over the interval, not bunched.
    let (lo, hi) = (distinct.first().unwrap(), distinct.last().unwrap());
    assert!(hi - lo > H / 2, "{a:?}");
    // The same names on another node refresh at other moments; the same node, the same ones.
    let mut other = housekept("n2");
    for (pod, mine) in other.pods.iter_mut().zip(&housekept("n1").pods) {
        pod.name.clone_from(&mine.name);
    }
    assert_ne!(stamps(&other), a);
    assert_eq!(stamps(&housekept("n1")), a);
}

#[test]
fn timestamps_are_refresh_instants_and_values_are_the_models_at_them() {
    let n = housekept("n1");
    let mut phases: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut node_phase = None;
    for step in 0..200 {
        let t = 1_000_000 + step * 777;
        let s = n.stats_at(t);
        assert!(s.timestamp_ms <= t && t - s.timestamp_ms < H, "node at {t}");
        let phase = s.timestamp_ms.rem_euclid(H);
        assert_eq!(*node_phase.get_or_insert(phase), phase, "node at {t}");
        let at = s.timestamp_ms;
        let system = 0.1 * at as f64 / 1000.0;
        let containers: f64 = n
            .pods
            .iter()
            .flat_map(|p| &p.containers)
            .map(|c| c.cpu_seconds(at))
            .sum();
        assert!(
            (s.cpu_seconds_total - system - containers).abs() < 1e-6,
            "node cpu at {t}"
        );
        for ((pod, name), c) in by_container(&s) {
            let ts = c.timestamp_ms;
            assert!(ts <= t && t - ts < H, "{pod}/{name} at {t}: {ts}");
            let phase = ts.rem_euclid(H);
            assert_eq!(
                *phases.entry((pod.clone(), name.clone())).or_insert(phase),
                phase
            );
            let m = model(&n, &pod, &name);
            assert_eq!(
                c.memory_working_set_bytes,
                m.memory_bytes(ts),
                "{pod}/{name} at {t}"
            );
            assert!(
                (c.cpu_seconds_total - m.cpu_seconds(ts)).abs() < 1e-12,
                "{pod}/{name}"
            );
        }
    }
    assert_eq!(phases.len(), 12);
}

#[test]
fn usage_nano_cores_is_the_rate_since_the_previous_refresh() {
    let n = housekept("n1");
    let t = 3_000_000;
    let (now, before) = (n.stats_at(t), n.stats_at(t - H));
    let rate = |a: f64, b: f64| ((a - b) * 1e9 / (H as f64 / 1000.0)) as i64;
    let nanocores = |c: &ContainerStats| c.cpu_nanocores.unwrap() as i64;
    for ((key, c), (_, p)) in by_container(&now).iter().zip(&by_container(&before)) {
        assert_eq!(c.timestamp_ms - p.timestamp_ms, H);
        let want = rate(c.cpu_seconds_total, p.cpu_seconds_total);
        assert!(
            (nanocores(c) - want).abs() <= 2,
            "{key:?}: {c:?} after {p:?}"
        );
    }
    // The wobbling container: the window's average, not the rate at the refresh instant.
    let ((pod, name), wobbly) = by_container(&now)
        .into_iter()
        .find(|(k, _)| k.1 == "c2" && k.0.ends_with("pod-1"))
        .unwrap();
    let instant = (model(&n, &pod, &name).cpu_cores_at(wobbly.timestamp_ms) * 1e9) as i64;
    assert!(
        (nanocores(wobbly) - instant).abs() > 1_000,
        "{wobbly:?} vs {instant}"
    );
    // The node's likewise, from its own counter.
    let want = rate(now.cpu_seconds_total, before.cpu_seconds_total);
    assert!((now.cpu_nanocores.unwrap() as i64 - want).abs() <= 2);
}

#[test]
fn the_node_counter_never_decreases_and_a_restart_is_sampled_at_its_discovery() {
    let mut n = SimNode {
        housekeeping: Duration::from_millis(H as u64),
        ..node(Some(60))
    };
    n.pods[0].containers[0].cpu_wobble = 0.6;
    let (mut node_cpu, mut container) = (0.0, (0.0, 0.0));
    let mut restarts = 0;
    for step in 0..=800 {
        let s = n.stats_at(1_000_000 + DISCOVERY_MS + step * 250);
        assert!(
            s.cpu_seconds_total >= node_cpu,
            "node counter went back at step {step}"
        );
        node_cpu = s.cpu_seconds_total;
        let c = &s.pods[0].containers[0];
        if c.start_time_s != container.1 {
            restarts += 1;
        } else {
            assert!(
                c.cpu_seconds_total >= container.0,
                "container counter went back at step {step}"
            );
        }
        container = (c.cpu_seconds_total, c.start_time_s);
    }
    assert_eq!(
        restarts,
        1 + 3,
        "created, then restarted at 60, 120 and 180 s"
    );

    // Restarted at 1060 s: absent until cAdvisor discovers the new container, sampled then
    // (with no rate: its first sample), then on the container's timer.
    let restart = 1_060_000;
    let discovered = restart + DISCOVERY_MS;
    let old = n.stats_at(restart - 1);
    assert_eq!(old.pods[0].containers[0].start_time_s, 1000.0);
    assert!(n.stats_at(discovered - 1).pods[0].containers.is_empty());
    let new = n.stats_at(discovered);
    let c = &new.pods[0].containers[0];
    assert_eq!((c.start_time_s, c.timestamp_ms), (1060.0, discovered));
    assert!(c.cpu_seconds_total < old.pods[0].containers[0].cpu_seconds_total);
    assert_eq!(c.cpu_nanocores, None);
    let phase = old.pods[0].containers[0].timestamp_ms.rem_euclid(H);
    let next = discovered + 1 + (phase - discovered - 1).rem_euclid(H);
    let held = n.stats_at(next - 1);
    assert_eq!(held.pods[0].containers[0].timestamp_ms, discovered);
    let refreshed = n.stats_at(next);
    let c = &refreshed.pods[0].containers[0];
    assert_eq!((c.start_time_s, c.timestamp_ms), (1060.0, next));
    // The rate covers only the new incarnation's part of the window.
    let want = c.cpu_seconds_total * 1e9 / ((next - restart) as f64 / 1000.0);
    assert!(
        (c.cpu_nanocores.unwrap() as f64 - want).abs() <= 2.0,
        "{c:?}"
    );
}

#[test]
fn an_explicit_restart_moves_the_start_time_once() {
    let mut c = container(None);
    c.restart_at(1_030_000);
    assert_eq!(c.started_ms(1_029_999), Some(1_000_000));
    assert_eq!(c.started_ms(1_030_000), Some(1_030_000));
    assert_eq!(c.started_ms(2_000_000), Some(1_030_000));
    // The counter starts again from zero.
    assert!(c.cpu_seconds(1_030_000).abs() < 1e-9);
    assert!((c.cpu_seconds(1_034_000) - 1.0).abs() < 1e-9);
    // A restart never goes back before the previous one.
    c.restart_at(1_010_000);
    assert_eq!(c.started_ms(2_000_000), Some(1_030_000));
}

#[test]
fn a_new_container_is_sampled_at_discovery_then_on_its_timer() {
    let n = SimNode {
        housekeeping: Duration::from_millis(H as u64),
        ..node(None)
    };
    let created = 1_000_000;
    let discovered = created + DISCOVERY_MS;
    assert!(n.stats_at(created).pods[0].containers.is_empty());
    assert!(n.stats_at(discovered - 1).pods[0].containers.is_empty());
    let first = n.stats_at(discovered);
    let c = &first.pods[0].containers[0];
    // Sampled a moment after its start, never at it (a pair with a later sample is a rate).
    assert_eq!(c.timestamp_ms, discovered);
    assert_eq!(c.start_time_s, created as f64 / 1000.0);
    assert!((c.cpu_seconds_total - 0.25 * DISCOVERY_MS as f64 / 1000.0).abs() < 1e-9);
    assert_eq!(c.cpu_nanocores, None, "one sample has no rate");
    // The node's own sample is older and does not count it yet.
    assert!(first.timestamp_ms < created);
    assert!((first.cpu_seconds_total - 0.5 * first.timestamp_ms as f64 / 1000.0).abs() < 1e-6);
    // Until its first timer refresh it keeps the creation sample.
    let phase = n.stats_at(created + 5 * H).pods[0].containers[0]
        .timestamp_ms
        .rem_euclid(H);
    let refresh = discovered + 1 + (phase - discovered - 1).rem_euclid(H);
    assert!(refresh > discovered && refresh - discovered <= H);
    assert_eq!(
        n.stats_at(refresh - 1).pods[0].containers[0].timestamp_ms,
        discovered
    );
    let c = n.stats_at(refresh).pods[0].containers[0].clone();
    assert_eq!(c.timestamp_ms, refresh);
    assert_eq!(c.cpu_nanocores, Some(250_000_000));
}

#[test]
fn without_housekeeping_every_request_samples_its_own_instant() {
    let mut n = node(Some(60));
    n.pods[0].containers[0].cpu_wobble = 0.6;
    assert_eq!(n.housekeeping, Duration::ZERO);
    for t in [1_000_000, 1_000_001, 1_033_333, 1_060_000] {
        let (s, next) = (n.stats_at(t), n.stats_at(t + 1));
        assert_eq!(s.timestamp_ms, t);
        assert!(next.cpu_seconds_total > s.cpu_seconds_total);
        let c = &s.pods[0].containers[0];
        assert_eq!(c.timestamp_ms, t);
        let m = &n.pods[0].containers[0];
        assert_eq!(c.cpu_nanocores, Some((m.cpu_cores_at(t) * 1e9) as u64));
        let cores = 0.5 + m.cpu_cores_at(t);
        assert_eq!(s.cpu_nanocores, Some((cores * 1e9) as u64));
    }
    // A restart shows at once.
    assert_eq!(
        n.stats_at(1_060_000).pods[0].containers[0].start_time_s,
        1060.0
    );
}
