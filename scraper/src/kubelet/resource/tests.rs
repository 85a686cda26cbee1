//! Tests of the `/metrics/resource` parser against the real kubelet payloads in
//! `testdata/kubelet/` and the metrics-server `decode_test.go` inputs (reference §3.7).
//!
//! Expected values are read off the fixture text by hand; float conversions are what Go's
//! `uint64(v * 1e9)` gives for the printed value (IEEE-754, the same in Rust).

use std::collections::BTreeSet;

use super::fuzz::{Rng, mutate};
use super::*;

const MS: i64 = 1_000_000;
const DEFAULT_NS: i64 = 3_392_867_227_000_000_000; // 2077-07-07T07:07:07Z, as in decode_test.go

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/kubelet")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const SEVENTY_PODS: &str = "metrics-resource-metrics-server-kind-v1.21-70pods.txt";
const SONGLEO: &str = "metrics-resource-songleo-kind-pre-v1.29.txt";
const V1_36_SHAPE: &str = "metrics-resource-kubelet-v1.36-shape-30pods-generated.txt";

fn find<'s, 'a>(
    scrape: &'s NodeScrape<'a>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> &'s ContainerSample<'a> {
    scrape
        .containers
        .iter()
        .find(|c| c.namespace == namespace && c.pod == pod && c.container == container)
        .unwrap_or_else(|| panic!("no container {namespace}/{pod}/{container}"))
}

fn pods(scrape: &NodeScrape<'_>) -> BTreeSet<(String, String)> {
    scrape
        .containers
        .iter()
        .map(|c| (c.namespace.to_string(), c.pod.to_string()))
        .collect()
}

/// Each container's key, CPU (whole seconds) and memory, in the order the parse found them.
type Merged<'s> = Vec<((&'s str, &'s str, &'s str), Option<u64>, Option<u64>)>;

fn merged<'s>(scrape: &'s NodeScrape<'_>) -> Merged<'s> {
    scrape
        .containers
        .iter()
        .map(|c| {
            (
                (c.namespace.as_ref(), c.pod.as_ref(), c.container.as_ref()),
                c.sample.cpu_usage_ns_total.map(|ns| ns / 1_000_000_000),
                c.sample.memory_working_set_bytes,
            )
        })
        .collect()
}

fn keys_unique(scrape: &NodeScrape<'_>) -> bool {
    let keys: BTreeSet<_> = scrape
        .containers
        .iter()
        .map(|c| (&c.namespace, &c.pod, &c.container))
        .collect();
    keys.len() == scrape.containers.len()
}

#[test]
fn kubelet_1_36_shape_with_pod_and_swap_families() {
    // The body the scale comparison serves: `pod_*` families are skipped, `*_swap_usage_bytes`
    // is read as a gauge that leaves the sample's timestamp alone.
    let body = fixture(V1_36_SHAPE);
    let scrape = parse(&body, DEFAULT_NS).expect("parses");
    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: 1_764_590_403_071 * MS,
            cpu_usage_ns_total: Some(2_116_293_392_466_016),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(9_317_390_335),
            start_time_ns: None,
            swap_bytes: Some(0),
        })
    );
    assert_eq!(pods(&scrape).len(), 30);
    assert_eq!(scrape.containers.len(), 60);
    assert!(keys_unique(&scrape));
    let pod = "auth-5-4dc65m2x49-5n6fd";
    assert_eq!(
        find(&scrape, "ns-0", pod, "app").sample,
        Sample {
            timestamp_ns: 1_764_590_403_370 * MS,
            cpu_usage_ns_total: Some(289_073_956_860),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(415_051_776),
            start_time_ns: Some(1_764_580_760_500_157_952),
            swap_bytes: Some(0),
        }
    );
    assert_eq!(
        find(&scrape, "ns-0", pod, "sidecar").sample,
        Sample {
            timestamp_ns: 1_764_590_407_634 * MS,
            cpu_usage_ns_total: Some(35_542_988_856),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(47_366_144),
            start_time_ns: Some(1_764_580_759_700_243_200),
            swap_bytes: Some(0),
        }
    );
    assert!(
        scrape
            .containers
            .iter()
            .all(|c| c.sample.swap_bytes == Some(0))
    );
}

#[test]
fn swap_values_are_read_and_absent_swap_stays_absent() {
    let body = b"node_cpu_usage_seconds_total 10 1000\n\
node_memory_working_set_bytes 20 1000\n\
node_swap_usage_bytes 3.3554432e+07 2000\n\
container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p\"} 1 1000\n\
container_swap_usage_bytes{container=\"a\",namespace=\"n\",pod=\"p\"} 4096 5000\n\
container_cpu_usage_seconds_total{container=\"b\",namespace=\"n\",pod=\"p\"} 1 1000\n\
container_swap_usage_bytes{container=\"c\",namespace=\"n\",pod=\"p\"} NaN 1000\n";
    let scrape = parse(body, DEFAULT_NS).expect("parses");
    let node = scrape.node.unwrap();
    assert_eq!(node.swap_bytes, Some(32 << 20));
    assert_eq!(
        node.timestamp_ns,
        1000 * MS,
        "swap does not move the timestamp"
    );
    let a = find(&scrape, "n", "p", "a");
    assert_eq!(
        (a.sample.swap_bytes, a.sample.timestamp_ns),
        (Some(4096), 1000 * MS)
    );
    assert_eq!(find(&scrape, "n", "p", "b").sample.swap_bytes, None);
    assert!(
        scrape
            .containers
            .iter()
            .all(|c| c.container != "c" || c.sample.swap_bytes.is_none())
    );
}

#[test]
fn seventy_pod_fixture_yields_one_node_and_seventy_pods() {
    let body = fixture(SEVENTY_PODS);
    let scrape = parse(&body, DEFAULT_NS).expect("parses");

    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: 1_633_253_809_720 * MS,
            cpu_usage_ns_total: Some(357_354_910_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(1_616_273_408),
            start_time_ns: None,
            swap_bytes: None,
        })
    );
    assert_eq!(pods(&scrape).len(), 70);
    assert_eq!(scrape.containers.len(), 70);
    assert!(keys_unique(&scrape));
    // Every container got both families merged, and no start time (the family is absent).
    assert!(scrape.containers.iter().all(|c| {
        c.sample.cpu_usage_ns_total.is_some()
            && c.sample.memory_working_set_bytes.is_some()
            && c.sample.start_time_ns.is_none()
    }));

    let sleeper = find(&scrape, "sleeper-1", "sleeper-1-77f658b69-2msf9", "sleeper");
    assert_eq!(
        sleeper.sample,
        Sample {
            timestamp_ns: 1_633_253_814_014 * MS,
            cpu_usage_ns_total: Some(1_421_659_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(495_616),
            start_time_ns: None,
            swap_bytes: None,
        }
    );
    let apiserver = find(
        &scrape,
        "kube-system",
        "kube-apiserver-e2e-control-plane",
        "kube-apiserver",
    );
    assert_eq!(apiserver.sample.memory_working_set_bytes, Some(353_316_864));
    assert_eq!(apiserver.sample.timestamp_ns, 1_633_253_814_382 * MS);
    // Labels are borrowed from the body, not copied.
    assert!(matches!(sleeper.pod, Cow::Borrowed(_)));
}

#[test]
fn seventy_pod_fixture_keeps_per_container_timestamps() {
    let body = fixture(SEVENTY_PODS);
    let scrape = parse(&body, DEFAULT_NS).expect("parses");
    let min = scrape
        .containers
        .iter()
        .map(|c| c.sample.timestamp_ns)
        .min();
    let max = scrape
        .containers
        .iter()
        .map(|c| c.sample.timestamp_ns)
        .max();
    assert_eq!(min, Some(1_633_253_798_973 * MS));
    assert_eq!(max, Some(1_633_253_817_851 * MS));
}

#[test]
fn songleo_fixture_merges_multi_container_pods_and_ignores_start_time_timestamp() {
    let body = fixture(SONGLEO);
    let scrape = parse(&body, DEFAULT_NS).expect("parses");

    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: 1_704_815_761_870 * MS,
            cpu_usage_ns_total: Some(5_716_152_579_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(2_642_427_904),
            start_time_ns: None,
            swap_bytes: None,
        })
    );
    assert_eq!(pods(&scrape).len(), 9);
    assert_eq!(scrape.containers.len(), 12);
    assert!(keys_unique(&scrape));
    let web: Vec<_> = scrape
        .containers
        .iter()
        .filter(|c| c.pod == "awx-web-5d5d7ccf85-7jjgm")
        .map(|c| c.container.as_ref())
        .collect();
    assert_eq!(web, ["awx-rsyslog", "awx-web", "redis"]);

    let rsyslog = find(&scrape, "awx", "awx-web-5d5d7ccf85-7jjgm", "awx-rsyslog");
    assert_eq!(
        rsyslog.sample,
        Sample {
            // The memory sample's time, not the start-time sample's (1704801726838).
            timestamp_ns: 1_704_815_766_953 * MS,
            cpu_usage_ns_total: Some(56_167_570_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(162_619_392),
            start_time_ns: Some(1_704_801_726_838_995_456),
            swap_bytes: None,
        }
    );
}

/// decode_test.go "Normal" (reference §3.7 A).
const NORMAL: &str = r#"# HELP container_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 4.710169 1633253812125
# HELP container_memory_working_set_bytes [ALPHA] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.253376e+07 1633253812125
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.633252712e+9 1633253812125
# HELP node_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35491 1633253809720
# HELP node_memory_working_set_bytes [ALPHA] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.616273408e+09 1633253809720
# HELP pod_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 4.67812 1633253803935
# HELP pod_memory_working_set_bytes [ALPHA] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.2627968e+07 1633253803935
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"#;

fn coredns(timestamp_ns: i64) -> ContainerSample<'static> {
    ContainerSample {
        namespace: "kube-system".into(),
        pod: "coredns-558bd4d5db-4dpjz".into(),
        container: "coredns".into(),
        sample: Sample {
            timestamp_ns,
            cpu_usage_ns_total: Some(4_710_169_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(12_533_760),
            start_time_ns: Some(1_633_252_712_000_000_000), // 2021-10-03T09:18:32Z
            swap_bytes: None,
        },
    }
}

fn node1(timestamp_ns: i64) -> Sample {
    Sample {
        timestamp_ns,
        cpu_usage_ns_total: Some(357_354_910_000),
        cpu_nanocores: None,
        memory_working_set_bytes: Some(1_616_273_408),
        start_time_ns: None,
        swap_bytes: None,
    }
}

#[test]
fn decode_test_normal() {
    let scrape = parse(NORMAL.as_bytes(), DEFAULT_NS).expect("parses");
    assert_eq!(scrape.node, Some(node1(1_633_253_809_720 * MS)));
    assert_eq!(scrape.containers, vec![coredns(1_633_253_812_125 * MS)]);
}

#[test]
fn decode_test_without_timestamps_uses_default_time() {
    let body = r#"container_cpu_usage_seconds_total{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 4.710169
container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.253376e+07
container_start_time_seconds{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.633252712e+9
node_cpu_usage_seconds_total 357.35491
node_memory_working_set_bytes 1.616273408e+09
"#;
    let scrape = parse(body.as_bytes(), DEFAULT_NS).expect("parses");
    assert_eq!(scrape.node, Some(node1(DEFAULT_NS)));
    assert_eq!(scrape.containers, vec![coredns(DEFAULT_NS)]);
}

/// §3.7 C: incomplete inputs are not errors; the parser reports exactly what was present and
/// the store drops incomplete points.
#[test]
fn decode_test_incomplete_inputs_keep_presence_explicit() {
    let ts = 1_633_253_812_125 * MS;
    let only_memory = r#"container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.253376e+07 1633253812125"#;
    let scrape = parse(only_memory.as_bytes(), DEFAULT_NS).expect("parses");
    assert_eq!(scrape.node, None);
    assert_eq!(scrape.containers.len(), 1);
    assert_eq!(scrape.containers[0].sample.cpu_usage_ns_total, None);
    assert_eq!(
        scrape.containers[0].sample.memory_working_set_bytes,
        Some(12_533_760)
    );
    assert_eq!(scrape.containers[0].sample.timestamp_ns, ts);

    let cpu_zero = r#"container_cpu_usage_seconds_total{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 0 1633253812125
container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns-558bd4d5db-4dpjz"} 1.253376e+07 1633253812125"#;
    let scrape = parse(cpu_zero.as_bytes(), DEFAULT_NS).expect("parses");
    assert_eq!(scrape.containers[0].sample.cpu_usage_ns_total, Some(0));

    let node_only_memory = "node_memory_working_set_bytes 1.616273408e+09 1633253809720\n";
    let scrape = parse(node_only_memory.as_bytes(), DEFAULT_NS).expect("parses");
    let node = scrape.node.expect("memory alone is reported");
    assert_eq!(node.cpu_usage_ns_total, None);
    assert_eq!(node.memory_working_set_bytes, Some(1_616_273_408));
    assert!(scrape.containers.is_empty());

    for zero in [
        "node_cpu_usage_seconds_total 0 1633253809720\nnode_memory_working_set_bytes 0 1633253809720\n",
        "node_cpu_usage_seconds_total 0 1633253809720\n",
        "scrape_error 0\n",
        "",
    ] {
        let scrape = parse(zero.as_bytes(), DEFAULT_NS).expect("parses");
        assert_eq!(scrape.node, None, "{zero:?}");
    }
}

#[test]
fn decode_test_negative_timestamp_fails_the_node() {
    let body = r#"# HELP container_start_time_seconds [ALPHA] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="metrics-server",namespace="kubernetes-dashboard",pod="kubernetes-dashboard-metrics-server-77db45cdf4-fppzx"} -6.7953645788713455e+09 -62135596800000
container_start_time_seconds{container="metrics-server",namespace="kubernetes-dashboard",pod="kubernetes-dashboard-metrics-server-77db45cdf4-tpx4v"} 1.6509742024191372e+09 1650974202419
"#;
    let err = parse(body.as_bytes(), DEFAULT_NS).expect_err("negative timestamp");
    assert_eq!(err.kind, ParseErrorKind::Timestamp);
    let at = body.find("-62135596800000").expect("in body");
    assert_eq!(err.offset, at);
}

#[test]
fn timestamps_that_overflow_or_are_not_integers_fail() {
    for ts in [
        "9223372036854775807",
        "99999999999999999999",
        "1.5",
        "12a",
        "+",
    ] {
        let body = format!("node_cpu_usage_seconds_total 1 {ts}\n");
        let err = parse(body.as_bytes(), 0).expect_err(ts);
        assert_eq!(err.kind, ParseErrorKind::Timestamp, "{ts}");
    }
    let scrape = parse(b"node_cpu_usage_seconds_total 1 +1000\n", 0).expect("+ sign");
    assert_eq!(scrape.node.map(|n| n.timestamp_ns), Some(1000 * MS));
}

#[test]
fn label_escapes_are_unescaped_and_other_labels_ignored() {
    let body = r#"container_cpu_usage_seconds_total{container="a\"b",namespace="ns\\x",pod="p\nq",image="i\"{}"} 1 1000
container_memory_working_set_bytes{container="a\"b",namespace="ns\\x",pod="p\nq"} 2 2000
container_cpu_usage_seconds_total{container="keep\t",namespace="n",pod="p"} 1 1000
"#;
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(scrape.containers.len(), 2);
    let c = &scrape.containers[0];
    assert_eq!(c.container, "a\"b");
    assert_eq!(c.namespace, "ns\\x");
    assert_eq!(c.pod, "p\nq");
    assert_eq!(c.sample.cpu_usage_ns_total, Some(1_000_000_000));
    assert_eq!(c.sample.memory_working_set_bytes, Some(2));
    assert_eq!(c.sample.timestamp_ns, 2000 * MS);
    // An unknown escape stays as written, like Prometheus' lvalReplacer.
    assert_eq!(scrape.containers[1].container, "keep\\t");
}

#[test]
fn labels_in_any_order_with_blanks_and_trailing_comma_merge_into_one_container() {
    let body = "container_cpu_usage_seconds_total{pod=\"p\",container=\"c\",namespace=\"n\",} 1.5 1000\n\
                container_memory_working_set_bytes { namespace = \"n\" , pod=\"p\",\tcontainer=\"c\" }\t4096 2000\n\
                container_start_time_seconds{container=\"c\",pod=\"p\",namespace=\"n\"} 10 5\n";
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(
        scrape.containers,
        vec![ContainerSample {
            namespace: "n".into(),
            pod: "p".into(),
            container: "c".into(),
            sample: Sample {
                timestamp_ns: 2000 * MS,
                cpu_usage_ns_total: Some(1_500_000_000),
                cpu_nanocores: None,
                memory_working_set_bytes: Some(4096),
                start_time_ns: Some(10_000_000_000),
                swap_bytes: None,
            },
        }]
    );
}

#[test]
fn families_out_of_order_and_interleaved_still_merge() {
    let body = "container_memory_working_set_bytes{container=\"b\",namespace=\"n\",pod=\"p\"} 2 1\n\
                container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p\"} 1 1\n\
                container_memory_working_set_bytes{container=\"a\",namespace=\"n\",pod=\"p\"} 3 1\n\
                container_cpu_usage_seconds_total{container=\"b\",namespace=\"n\",pod=\"p\"} 4 1\n\
                container_cpu_usage_seconds_total{container=\"b\",namespace=\"n\",pod=\"p\"} 5 1\n";
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(
        merged(&scrape),
        [
            (("n", "p", "b"), Some(5), Some(2)),
            (("n", "p", "a"), Some(1), Some(3))
        ]
    );
}

/// Containers in the kubelet's order (ascending container, namespace, pod) need no index;
/// the first out of that order (here a repeat, then a new one below the last) builds it,
/// and every container found after that, by any label text, is the same one.
#[test]
fn containers_out_of_the_kubelet_s_order_merge_by_their_labels() {
    let body = "container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p1\"} 1 1\n\
                container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p2\"} 2 1\n\
                container_cpu_usage_seconds_total{container=\"b\",namespace=\"n\",pod=\"p1\"} 3 1\n\
                container_cpu_usage_seconds_total{pod=\"p2\",namespace=\"n\",container=\"a\"} 4 1\n\
                container_cpu_usage_seconds_total{container=\"a\",namespace=\"m\",pod=\"p9\"} 5 1\n\
                container_memory_working_set_bytes{container=\"a\",namespace=\"n\",pod=\"p1\"} 10 1\n\
                container_memory_working_set_bytes{namespace=\"n\",pod=\"p1\",container=\"b\"} 30 1\n\
                container_memory_working_set_bytes{container=\"a\",namespace=\"m\",pod=\"p9\"} 50 1\n\
                container_memory_working_set_bytes{container=\"z\",namespace=\"n\",pod=\"p1\"} 60 1\n";
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(
        merged(&scrape),
        [
            (("n", "p1", "a"), Some(1), Some(10)),
            (("n", "p2", "a"), Some(4), None),
            (("n", "p1", "b"), Some(3), Some(30)),
            (("m", "p9", "a"), Some(5), Some(50)),
            (("n", "p1", "z"), None, Some(60)),
        ]
    );
}

#[test]
fn go_float_syntax_is_accepted() {
    for (text, ns) in [
        ("1.253376e+07", 12_533_760_000_000_000u64),
        ("1.7506078418297591e+09", 1_750_607_841_829_759_232),
        ("2E3", 2_000_000_000_000),
        (".5", 500_000_000),
        ("+7", 7_000_000_000),
        ("1e-9", 1),
        ("0.0000000019", 1),
    ] {
        let body = format!("node_cpu_usage_seconds_total {text}\n");
        let scrape = parse(body.as_bytes(), 0).expect(text);
        assert_eq!(
            scrape.node.and_then(|n| n.cpu_usage_ns_total),
            Some(ns),
            "{text}"
        );
    }
    let scrape = parse(b"node_memory_working_set_bytes 2.642427904e+09\n", 0).expect("parses");
    assert_eq!(
        scrape.node.and_then(|n| n.memory_working_set_bytes),
        Some(2_642_427_904)
    );
}

#[test]
fn nan_infinite_and_negative_values_skip_only_that_sample() {
    for bad in ["NaN", "+Inf", "-Inf", "-1", "-1e-3", "Inf", "nan"] {
        let body = format!(
            "container_cpu_usage_seconds_total{{container=\"c\",namespace=\"n\",pod=\"p\"}} {bad} 1000\n\
             container_memory_working_set_bytes{{container=\"c\",namespace=\"n\",pod=\"p\"}} 4096 1000\n\
             container_start_time_seconds{{container=\"c\",namespace=\"n\",pod=\"p\"}} {bad}\n\
             node_cpu_usage_seconds_total 2 1000\n\
             node_memory_working_set_bytes {bad} 3000\n"
        );
        let scrape = parse(body.as_bytes(), 0).expect(bad);
        let node = scrape.node.expect("cpu is valid");
        assert_eq!(node.cpu_usage_ns_total, Some(2_000_000_000), "{bad}");
        assert_eq!(node.memory_working_set_bytes, None, "{bad}");
        // The skipped memory sample does not move the node's timestamp either.
        assert_eq!(node.timestamp_ns, 1000 * MS, "{bad}");
        let c = &scrape.containers[0].sample;
        assert_eq!(c.cpu_usage_ns_total, None, "{bad}");
        assert_eq!(c.memory_working_set_bytes, Some(4096), "{bad}");
        assert_eq!(c.start_time_ns, None, "{bad}");
    }
}

#[test]
fn container_series_without_identifying_labels_are_skipped() {
    let body = "container_cpu_usage_seconds_total{container=\"c\",namespace=\"n\"} 1 1000\n\
                container_cpu_usage_seconds_total{namespace=\"n\",pod=\"p\"} 1 1000\n\
                container_cpu_usage_seconds_total 1 1000\n\
                container_cpu_usage_seconds_total{container=\"c\",namespace=\"n\",pod=\"p\"} 3 1000\n\
                node_cpu_usage_seconds_total 1 1000\n";
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(scrape.containers.len(), 1);
    assert_eq!(
        scrape.containers[0].sample.cpu_usage_ns_total,
        Some(3_000_000_000)
    );
    assert!(scrape.node.is_some());
}

#[test]
fn exact_family_names_only() {
    let body = "node_cpu_usage_seconds_total_extra 5 1000\n\
                container_cpu_usage_seconds{container=\"c\",namespace=\"n\",pod=\"p\"} 1 1000\n\
                xnode_memory_working_set_bytes 7 1000\n";
    let scrape = parse(body.as_bytes(), 0).expect("parses");
    assert_eq!(scrape, NodeScrape::default());
}

/// Each family that is read is recognised by its whole name followed by `{`, a space or a
/// tab, and by nothing else: not a name one byte longer or shorter, nor one that differs in
/// any single byte (a line that is not recognised is skipped, leaving the scrape as it was).
#[test]
fn each_family_is_recognised_by_its_whole_name() {
    const NAMES: [&str; 7] = [
        "node_cpu_usage_seconds_total",
        "node_memory_working_set_bytes",
        "node_swap_usage_bytes",
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
        "container_swap_usage_bytes",
    ];
    const LABELS: &str = "{container=\"c\",namespace=\"n\",pod=\"p\"}";
    let base = format!(
        "node_memory_working_set_bytes 7 1000\ncontainer_memory_working_set_bytes{LABELS} 7 1000\n"
    );
    let with = |name: &str, after: &str| {
        let labels = if name.starts_with("container_") {
            LABELS
        } else {
            ""
        };
        let body = format!("{base}{name}{labels}{after}5 1000\n");
        parse(body.as_bytes(), 0).map(|s| format!("{s:?}"))
    };
    let unchanged = Ok(format!("{:?}", parse(base.as_bytes(), 0).expect("parses")));
    for name in NAMES {
        for after in [" ", "\t", "  "] {
            assert_ne!(
                with(name, after),
                unchanged,
                "{name:?} then {after:?} is read"
            );
        }
        if name.starts_with("container_") {
            // `{` right after the name: the labels are the separator.
            let body = format!("{base}{name}{LABELS} 5 1000\n");
            let read = parse(body.as_bytes(), 0).map(|s| format!("{s:?}"));
            assert_ne!(read, unchanged, "{name:?}{{...}} is read");
        }
        let mut variants = vec![format!("{name}x"), name[..name.len() - 1].to_string()];
        for at in 0..name.len() {
            let mut changed = name.as_bytes().to_vec();
            changed[at] = if changed[at] == b'q' { b'z' } else { b'q' };
            variants.push(String::from_utf8(changed).expect("ascii"));
        }
        for variant in variants {
            assert_eq!(with(&variant, " "), unchanged, "{variant:?} is not read");
        }
    }
}

#[test]
fn crlf_line_endings_are_tolerated() {
    let crlf = NORMAL.replace('\n', "\r\n");
    let scrape = parse(crlf.as_bytes(), DEFAULT_NS).expect("parses");
    assert_eq!(scrape.node, Some(node1(1_633_253_809_720 * MS)));
    assert_eq!(scrape.containers, vec![coredns(1_633_253_812_125 * MS)]);

    let fixture = String::from_utf8(fixture(SONGLEO)).expect("utf-8");
    let crlf = fixture.replace('\n', "\r\n");
    let lf = parse(fixture.as_bytes(), 0).expect("parses");
    assert_eq!(parse(crlf.as_bytes(), 0).expect("parses"), lf);
}

#[test]
fn last_line_without_newline_is_read() {
    let scrape = parse(b"node_memory_working_set_bytes 42 1000", 0).expect("parses");
    assert_eq!(
        scrape.node.and_then(|n| n.memory_working_set_bytes),
        Some(42)
    );
}

#[test]
fn lines_of_families_not_read_need_only_a_name_and_a_number() {
    let body = b"scrape_error 0\n\
        resource_scrape_error NaN\n\
        pod_swap_usage_bytes{namespace=\"a b\",pod=\"x}\"} +Inf 1700000000000  \n\
        pod_memory_working_set_bytes{pod=\"p\"}\t1.5e+09\t1700000000000\r\n\
        other_total -0.5\n\
        node_memory_working_set_bytes 42 1000\n";
    let scrape = parse(body, 0).expect("parses");
    assert_eq!(
        scrape.node.and_then(|n| n.memory_working_set_bytes),
        Some(42)
    );
}

#[test]
fn garbage_and_error_pages_fail_with_an_offset() {
    let cases: [(&[u8], ParseErrorKind, usize); 13] = [
        // A plain-text error page served with 200: not a body of families that are not read.
        (b"Internal Server Error\n", ParseErrorKind::Value, 9),
        (
            b"scrape_error 0\npod_cpu_usage_seconds_total{pod=\"p\"} abc def ghi\n",
            ParseErrorKind::Value,
            60,
        ),
        (
            b"pod_cpu_usage_seconds_total{pod=\"p\"}\n",
            ParseErrorKind::Value,
            27,
        ),
        (b"scrape_error zero 1\n", ParseErrorKind::Value, 13),
        (
            b"<html><body>502 Bad Gateway</body></html>\n",
            ParseErrorKind::Syntax,
            0,
        ),
        (b"{\"node\":{}}", ParseErrorKind::Syntax, 0),
        (
            b"# ok\nscrape_error 0\n404 page not found\n",
            ParseErrorKind::Syntax,
            20,
        ),
        (b"scrape_error\n", ParseErrorKind::Syntax, 12),
        (b"scrape-error 0\n", ParseErrorKind::Syntax, 6),
        (
            b"node_cpu_usage_seconds_total abc 1\n",
            ParseErrorKind::Value,
            29,
        ),
        (
            b"node_cpu_usage_seconds_total 1 2 3\n",
            ParseErrorKind::Syntax,
            33,
        ),
        (
            b"container_cpu_usage_seconds_total{pod=\"p} 1 2\n",
            ParseErrorKind::Labels,
            45,
        ),
        (
            b"node_cpu_usage_seconds_total \xff\n",
            ParseErrorKind::Utf8,
            29,
        ),
    ];
    for (body, kind, offset) in cases {
        let err = parse(body, 0).expect_err(&String::from_utf8_lossy(body));
        assert_eq!(
            (err.kind, err.offset),
            (kind, offset),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    for labels in [
        "{pod}",
        "{pod=p}",
        "{=\"p\"}",
        "{pod=\"p\" container=\"c\"}",
        "{pod=\"p\"",
        "{,}",
        "{pod=\"p\\",
    ] {
        let body = format!("container_cpu_usage_seconds_total{labels} 1\n");
        let err = parse(body.as_bytes(), 0).expect_err(labels);
        assert_eq!(err.kind, ParseErrorKind::Labels, "{labels}");
    }
}

#[test]
fn truncated_fixture_never_panics() {
    let body = fixture(SEVENTY_PODS);
    let full = parse(&body, 0).expect("parses");
    for cut in (0..body.len()).step_by(97) {
        if let Ok(scrape) = parse(&body[..cut], 0) {
            assert!(scrape.containers.len() <= full.containers.len());
            assert!(keys_unique(&scrape));
        }
    }
}

#[test]
fn mutation_fuzz_never_panics() {
    let seeds = [
        fixture(SEVENTY_PODS),
        fixture(SONGLEO),
        NORMAL.as_bytes().to_vec(),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut errors = 0;
    for i in 0..3000 {
        let mut body = seeds[i % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        match parse(&body, 0) {
            Ok(scrape) => assert!(keys_unique(&scrape)),
            Err(e) => {
                assert!(e.offset <= body.len());
                errors += 1;
            }
        }
    }
    // The mutations do reach the error paths (and not only skipped comment lines).
    assert!(errors > 100, "{errors}");
}

#[test]
fn swar_quote_search_finds_the_first_quote_or_backslash() {
    for len in 0..40 {
        for at in 0..=len {
            for mark in [b'"', b'\\'] {
                let mut text = vec![b'a'; len];
                // Bytes next to the mark that upset naive zero-byte tricks.
                if at > 0 {
                    text[at - 1] = 0x23;
                }
                if at < len {
                    text[at] = mark;
                    if at + 1 < len {
                        text[at + 1] = b'"';
                    }
                }
                let want = (at < len).then_some(at + 3);
                let mut body = b"xyz".to_vec();
                body.extend_from_slice(&text);
                assert_eq!(find_quote(&body, 3, body.len()), want, "{len} {at}");
            }
        }
    }
    // Never past `end`.
    assert_eq!(find_quote(b"aaaaaaaaaaaa\"", 0, 12), None);
}

#[test]
fn the_merge_index_is_seeded_per_parse() {
    // Two parses hash the same label values differently: a kubelet cannot precompute
    // colliding keys.
    use std::hash::BuildHasher;
    let key = ("sleeper", "sleeper-1-77f658b69-2msf9", "c");
    let index = || {
        let mut containers = Containers::with_capacity(0);
        for (pod, span) in [("b", &b"{b}"[..]), ("a", b"{a}")] {
            containers.find_or_insert(("n".into(), pod.into(), "c".into()), span, 0);
        }
        containers
            .index
            .expect("built at the first key out of order")
    };
    let a = index().hasher().hash_one(key);
    let b = index().hasher().hash_one(key);
    assert_ne!(a, b);
}

#[test]
fn float_fast_path_agrees_with_the_standard_parser() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let (mut fast, mut slow) = (0, 0);
    for _ in 0..200_000 {
        let digits = 1 + rng.below(17);
        let mut text: String = (0..digits)
            .map(|_| char::from(b'0' + rng.below(10) as u8))
            .collect();
        if rng.below(2) == 0 {
            text.insert(rng.below(digits + 1), '.');
        }
        match rng.below(3) {
            0 => text.push_str(&format!("e{}", rng.below(60) as i64 - 30)),
            1 => text.push_str(&format!("e+{:02}", rng.below(30))),
            _ => {}
        }
        let std: Option<f64> = text.parse().ok();
        // The same token inside a line (a timestamp after it), and cut by the line's end
        // with digits after that: read the same, to the same end.
        let in_line = format!("x {text} 1764590403370\n");
        let cut = format!("{text}123456789");
        assert_eq!(
            parse_float(in_line.as_bytes(), 2, in_line.len() - 1).map(|(v, end)| (v, end - 2)),
            parse_float(text.as_bytes(), 0, text.len()),
            "{text}"
        );
        assert_eq!(
            parse_float(cut.as_bytes(), 0, text.len()),
            parse_float(text.as_bytes(), 0, text.len()),
            "{text}"
        );
        match parse_float(text.as_bytes(), 0, text.len()) {
            Some((Some(v), end)) => {
                assert_eq!(end, text.len());
                fast += 1;
                assert_eq!(Some(v.to_bits()), std.map(f64::to_bits), "{text}");
            }
            // A plain decimal for the standard parser: all of it, and it parses.
            Some((None, end)) => {
                assert_eq!(end, text.len(), "{text}");
                assert!(std.is_some(), "{text}");
                slow += 1;
            }
            None => assert!(std.is_none(), "{text}"),
        }
    }
    assert!(fast > 100_000, "{fast}");
    assert!(slow > 10_000, "{slow}");
    for text in [
        "", ".", "1e", "1e+", "-1", "+1", "1e99999", "0x10", "NaN", "1.2.3", "1e2e3",
    ] {
        let std: Option<f64> = text.parse().ok();
        assert!(
            parse_float(text.as_bytes(), 0, text.len()).is_none() || std.is_some(),
            "{text}"
        );
    }
}

/// `parse(body)` by the general path alone, every line searched for its end and every label
/// set read by the general loop.
fn parse_general(body: &[u8], default_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
    GENERAL_ONLY.with(|g| g.set(true));
    let parsed = parse(body, default_ns);
    GENERAL_ONLY.with(|g| g.set(false));
    parsed
}

/// The kubelet's lines in the shapes next to the fast paths' (blanks, CRLF, no timestamp,
/// a signed one, escapes, another label order or set, values the fast path does not round,
/// the body's end in every place): read the same, or failed the same, as by the general
/// path alone.
#[test]
fn the_fast_paths_read_what_the_general_path_reads() {
    let first = "container_cpu_usage_seconds_total{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 2.5 1764590403370\n";
    let lines = [
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1.253376e+07 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"}\t1253376\t1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370 ",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 ",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 +1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 -1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 17645904033701234567890",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370x",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370\r",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370\rx",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} NaN 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} -5 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1e400 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 12345678901234567890123 1764590403370",
        "container_start_time_seconds{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1.7645807605001578e+09 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376x 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"}1253376 1764590403370",
        "container_memory_working_set_bytes {container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370",
        " container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-2\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\",x=\"y\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{namespace=\"ns\",pod=\"p-1\",container=\"app\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"app\", namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"a\\\"pp\",namespace=\"ns\",pod=\"p-1\"} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\",} 1253376 1764590403370",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1",
        "container_swap_usage_bytes{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 0 1764590403370",
        "container_swap_usage_bytesx{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 0 1764590403370",
        "container_cpu_usage_seconds_total{container=\"app\",namespace=\"ns\",pod=\"p-1\"} 3.5 1764590418370",
    ];
    let mut bodies = Vec::new();
    for line in lines {
        for newline in ["\n", "\r\n", ""] {
            let text = format!("{first}{line}{newline}");
            // The body cut at every byte of the second line, and whole.
            for cut in first.len()..=text.len() {
                bodies.push(text.as_bytes()[..cut].to_vec());
            }
            bodies.push(format!("{text}{line}{newline}").into_bytes());
        }
        // The first family's label set alone, in each shape.
        if let Some(labels) = line.split_once('{').map(|(_, rest)| rest) {
            bodies.push(format!("container_cpu_usage_seconds_total{{{labels}\n").into_bytes());
        }
    }
    let before = fast_lines();
    for body in &bodies {
        let fast = parse(body, DEFAULT_NS);
        let general = parse_general(body, DEFAULT_NS);
        assert_eq!(fast, general, "{:?}", String::from_utf8_lossy(body));
    }
    // The bodies do reach the fast path's reading (and not only its refusals).
    let read = fast_lines() - before;
    assert!(read > 100, "{read}");
}

/// Lines the fast path has read on this thread so far.
fn fast_lines() -> usize {
    FAST_LINES.with(std::cell::Cell::get)
}

/// The comparison's body: the memory and swap series (60 containers x 2) are read by the
/// fast path; the first family's introduce their containers, and the kubelet prints start
/// times without a timestamp, so those take the general path.
#[test]
fn the_kubelets_memory_and_swap_lines_take_the_fast_path() {
    let body = fixture(V1_36_SHAPE);
    let before = fast_lines();
    let scrape = parse(&body, DEFAULT_NS).expect("the fixture parses");
    assert_eq!(scrape.containers.len(), 60);
    assert_eq!(fast_lines() - before, 120);
}

/// The three fixture files, the tests' `NORMAL` body and the 1.36 fixture in CRLF, and
/// 20,000 random mutations of them: the fast paths change nothing that
/// the general path would read, nor where or how a body fails.
#[test]
fn the_fast_paths_agree_with_the_general_path_on_mutated_bodies() {
    let mut crlf = fixture(V1_36_SHAPE);
    crlf = String::from_utf8(crlf)
        .expect("a UTF-8 fixture")
        .replace('\n', "\r\n")
        .into_bytes();
    let seeds = [
        fixture(V1_36_SHAPE),
        fixture(SEVENTY_PODS),
        fixture(SONGLEO),
        NORMAL.as_bytes().to_vec(),
        crlf,
    ];
    let before = fast_lines();
    for seed in &seeds {
        assert_eq!(parse(seed, DEFAULT_NS), parse_general(seed, DEFAULT_NS));
    }
    assert!(fast_lines() - before > 300, "the seeds reach the fast path");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut differ_from_seed = 0;
    for i in 0..20_000 {
        let mut body = seeds[i % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        let fast = parse(&body, DEFAULT_NS);
        assert_eq!(
            fast,
            parse_general(&body, DEFAULT_NS),
            "{:?}",
            String::from_utf8_lossy(&body)
        );
        differ_from_seed += usize::from(fast != parse(&seeds[i % seeds.len()], DEFAULT_NS));
    }
    assert!(differ_from_seed > 5_000, "{differ_from_seed}");
}
