//! Tests of the `/stats/summary` parser against the real kubelet payloads in
//! `testdata/kubelet/`. Expected values are read off the fixture text; RFC 3339 times are
//! converted with `calendar.timegm` by hand and written as Unix seconds.

use std::collections::BTreeSet;

use super::*;
use crate::kubelet::resource::fuzz::{Rng, mutate};

const S: i64 = 1_000_000_000;
const REQUEST_NS: i64 = 3_392_867_227 * S; // 2077-07-07T07:07:07Z

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/kubelet")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn find<'s, 'a>(
    scrape: &'s NodeScrape<'a>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> &'s Sample {
    &scrape
        .containers
        .iter()
        .find(|c| c.namespace == namespace && c.pod == pod && c.container == container)
        .unwrap_or_else(|| panic!("no container {namespace}/{pod}/{container}"))
        .sample
}

fn pod_count(scrape: &NodeScrape<'_>) -> usize {
    scrape
        .containers
        .iter()
        .map(|c| (&c.namespace, &c.pod))
        .collect::<BTreeSet<_>>()
        .len()
}

fn sample(ts_s: i64, cpu_ns: u64, nanocores: Option<u64>, memory: u64, start_s: i64) -> Sample {
    Sample {
        timestamp_ns: ts_s * S,
        cpu_usage_ns_total: Some(cpu_ns),
        cpu_nanocores: nanocores,
        memory_working_set_bytes: Some(memory),
        start_time_ns: Some(start_s * S),
        swap_bytes: None,
    }
}

/// `s` with swap reported and unused (`swapUsageBytes: 0`).
fn with_swap(s: Sample) -> Sample {
    Sample {
        swap_bytes: Some(0),
        ..s
    }
}

fn node(ts_s: i64, cpu_ns: u64, nanocores: u64, memory: u64) -> Option<Sample> {
    Some(Sample {
        timestamp_ns: ts_s * S,
        cpu_usage_ns_total: Some(cpu_ns),
        cpu_nanocores: Some(nanocores),
        memory_working_set_bytes: Some(memory),
        start_time_ns: None,
        swap_bytes: None,
    })
}

#[test]
fn v1_16_docker() {
    let body = fixture("stats-summary-nri-kubernetes-minikube-v1.16-docker.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    // 2021-12-15T13:51:05Z
    assert_eq!(
        scrape.node,
        node(1_639_576_265, 216_639_857_637, 418_300_610, 1_446_182_912)
    );
    assert_eq!(pod_count(&scrape), 15);
    assert_eq!(scrape.containers.len(), 15);
    // Idle busybox: usageNanoCores 0 but a cumulative counter.
    assert_eq!(
        *find(&scrape, "scraper", "e2e-ds-8zz8h", "busybox"),
        sample(1_639_576_249, 18_098_430, Some(0), 557_056, 1_639_575_992)
    );
    assert_eq!(
        *find(
            &scrape,
            "kube-system",
            "kube-apiserver-minikube",
            "kube-apiserver"
        ),
        sample(
            1_639_576_267,
            25_080_146_994,
            Some(37_210_684),
            240_455_680,
            1_639_575_798
        )
    );
}

#[test]
fn v1_20_node_zero_drops_the_node_but_keeps_pods() {
    let body = fixture("stats-summary-nri-kubernetes-minikube-v1.20-node-zero.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    assert_eq!(scrape.node, None);
    assert_eq!(pod_count(&scrape), 17);
    assert_eq!(scrape.containers.len(), 17);
    assert_eq!(
        *find(
            &scrape,
            "scraper",
            "e2e-scraper-9c979498b-qwt54",
            "e2e-scraper"
        ),
        sample(
            1_685_500_227,
            712_900_000,
            Some(926_792),
            3_039_232,
            1_685_499_879
        )
    );
}

#[test]
fn v1_28_multi_container_pods() {
    let body = fixture("stats-summary-nri-kubernetes-minikube-v1.28.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    // 2023-11-10T06:20:52Z
    // The first capture with `swap` objects: swap is on (1 GiB available) and unused.
    assert_eq!(
        scrape.node,
        node(1_699_597_252, 117_133_655_000, 677_703_301, 884_572_160).map(with_swap)
    );
    assert!(
        scrape
            .containers
            .iter()
            .all(|c| c.sample.swap_bytes == Some(0))
    );
    assert_eq!(pod_count(&scrape), 18);
    assert_eq!(scrape.containers.len(), 23);
    let two: Vec<_> = scrape
        .containers
        .iter()
        .filter(|c| c.pod == "e2e-daemonset-xbvmt")
        .map(|c| c.container.as_ref())
        .collect();
    assert_eq!(two, ["failing-container", "compute-pi-digits"]);
    assert_eq!(
        *find(
            &scrape,
            "scraper",
            "e2e-daemonset-xbvmt",
            "failing-container"
        ),
        with_swap(sample(
            1_699_597_248,
            12_958_000,
            Some(0),
            532_480,
            1_699_597_218
        ))
    );
    assert_eq!(
        *find(
            &scrape,
            "kube-system",
            "storage-provisioner",
            "storage-provisioner"
        ),
        with_swap(sample(
            1_699_597_240,
            274_106_000,
            Some(1_610_000),
            8_552_448,
            1_699_597_136
        ))
    );
    // Names are borrowed from the body.
    assert!(matches!(scrape.containers[0].pod, Cow::Borrowed(_)));
}

#[test]
fn v1_35_with_psi_and_io() {
    let body = fixture("stats-summary-nri-kubernetes-minikube-v1.35.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    // 2026-06-26T10:14:35Z
    assert_eq!(
        scrape.node,
        node(1_782_468_875, 62_148_052_000, 573_081_903, 917_110_784).map(with_swap)
    );
    assert_eq!(pod_count(&scrape), 17);
    assert_eq!(scrape.containers.len(), 17);
    assert_eq!(
        *find(
            &scrape,
            "scraper",
            "e2e-kube-state-metrics-75b885dc9-97mtr",
            "kube-state-metrics"
        ),
        with_swap(sample(
            1_782_468_871,
            111_020_000,
            Some(1_237_866),
            18_919_424,
            1_782_468_784
        ))
    );
}

#[test]
fn legacy_without_pod_cpu_keeps_old_container_times() {
    let body = fixture("stats-summary-nri-kubernetes-legacy-no-pod-cpu.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    // 2018-01-24T16:40:00Z
    assert_eq!(
        scrape.node,
        node(1_516_812_000, 353_998_913_059_080, 64_124_211, 540_618_752)
    );
    assert_eq!(pod_count(&scrape), 2);
    assert_eq!(scrape.containers.len(), 3);
    // 2017-11-30T14:48:12Z, ~55 days before the node sample.
    assert_eq!(
        *find(
            &scrape,
            "kube-system",
            "newrelic-infra-monitoring-pjp0v",
            "newrelic-infra"
        ),
        sample(
            1_512_053_292,
            303_855_795_298,
            Some(13_046_199),
            38_313_984,
            1_512_033_164
        )
    );
}

#[test]
fn windows_missing_nanocores_and_zero_init_containers() {
    let body = fixture("stats-summary-datadog-windows-eks.json");
    let scrape = parse(&body, REQUEST_NS).expect("parses");
    // 2020-04-24T15:54:11Z
    assert_eq!(
        scrape.node,
        node(1_587_743_651, 452_800_000_000, 500_000_000, 924_364_800)
    );
    assert_eq!(pod_count(&scrape), 2);
    assert_eq!(scrape.containers.len(), 6);
    assert_eq!(
        *find(&scrape, "default", "dd-datadog-lbvkl", "process-agent"),
        sample(
            1_587_743_654,
            9_359_375_000,
            None,
            65_474_560,
            1_587_743_620
        )
    );
    assert_eq!(
        *find(&scrape, "default", "dd-datadog-lbvkl", "init-config"),
        sample(1_587_743_658, 0, Some(0), 0, 1_587_743_600)
    );
    assert_eq!(
        *find(
            &scrape,
            "default",
            "windows-server-iis-6c68545d57-gwtn9",
            "windows-server-iis"
        ),
        sample(
            1_587_743_660,
            70_140_625_000,
            Some(905_162),
            136_814_592,
            1_587_743_302
        )
    );
}

#[test]
fn absent_and_null_fields_are_none_and_time_falls_back() {
    let body = br#"{
      "node": {"nodeName": "n", "cpu": null, "memory": {"time": "2023-11-10T06:20:52Z", "workingSetBytes": 5}},
      "pods": [
        {"podRef": {"name": "p", "namespace": "ns", "uid": "u"}, "containers": [
          {"name": "no-stats"},
          {"name": "nulls", "startTime": null, "cpu": {"time": null, "usageNanoCores": null, "usageCoreNanoSeconds": null}, "memory": null},
          {"name": "mem-time", "cpu": {"usageCoreNanoSeconds": 7}, "memory": {"time": "2023-11-10T06:20:40.5Z", "workingSetBytes": 9}}
        ]},
        {"podRef": {"name": "no-namespace"}, "containers": [{"name": "x"}]},
        {"containers": [{"name": "no-podref"}]},
        {"podRef": {"name": "p2", "namespace": "ns"}, "containers": null},
        {"podRef": {"name": "p3", "namespace": "ns"}, "containers": [{"cpu": {}}]}
      ]
    }"#;
    let scrape = parse(body, REQUEST_NS).expect("parses");
    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: 1_699_597_252 * S,
            cpu_usage_ns_total: None,
            cpu_nanocores: None,
            memory_working_set_bytes: Some(5),
            start_time_ns: None,
            swap_bytes: None,
        })
    );
    let got: Vec<_> = scrape
        .containers
        .iter()
        .map(|c| (c.container.as_ref(), c.sample))
        .collect();
    let empty = Sample {
        timestamp_ns: REQUEST_NS,
        ..Sample::default()
    };
    assert_eq!(
        got,
        [
            ("no-stats", empty),
            ("nulls", empty),
            (
                "mem-time",
                Sample {
                    timestamp_ns: 1_699_597_240 * S + 500_000_000,
                    cpu_usage_ns_total: Some(7),
                    memory_working_set_bytes: Some(9),
                    ..Sample::default()
                }
            ),
        ]
    );
}

#[test]
fn empty_summaries() {
    for body in [
        &b"{}"[..],
        b"{\"node\": null, \"pods\": null}",
        b"{\"node\":{},\"pods\":[]}",
    ] {
        let scrape = parse(body, 0).expect("parses");
        assert_eq!(scrape, NodeScrape::default());
    }
}

#[test]
fn escaped_names_are_unescaped() {
    let body = br#"{"pods":[{"podRef":{"name":"p\u002d1","namespace":"n\"s"},"containers":[{"name":"c"}]}]}"#;
    let scrape = parse(body, 0).expect("parses");
    assert_eq!(scrape.containers[0].pod, "p-1");
    assert_eq!(scrape.containers[0].namespace, "n\"s");
    assert!(matches!(scrape.containers[0].container, Cow::Borrowed("c")));
}

#[test]
fn invalid_json_and_schema_errors_report_an_offset() {
    let cases: [(&[u8], usize); 7] = [
        (b"<html>502</html>", 0),
        (b"", 0),
        (b"{\"node\": {\"cpu\": {\"usageNanoCores\": -1}}}", 37),
        (b"{\"node\": {\"cpu\": {\"usageNanoCores\": 1.5}}}", 37),
        (b"{\"node\": {\"cpu\": {\"time\": \"yesterday\"}}}", 36),
        (b"{\"pods\": [1]}", 10),
        (b"{\n\"pods\": [\n{\"podRef\": 3}]}", 24),
    ];
    for (body, near) in cases {
        let err = parse(body, 0).expect_err(&String::from_utf8_lossy(body));
        assert_eq!(err.kind, ParseErrorKind::Json);
        // serde reports the position where it noticed, within a token of the culprit.
        assert!(
            err.offset.abs_diff(near) <= 2 && err.offset <= body.len(),
            "{} at {} (expected ~{near})",
            String::from_utf8_lossy(body),
            err.offset
        );
    }
}

#[test]
fn invalid_utf8_is_reported_where_it_starts() {
    let body = b"{\"pods\": [{\"podRef\": {\"name\": \"p\xff\"}}]}";
    let err = parse(body, 0).expect_err("not UTF-8");
    let at = body.iter().position(|&b| b == 0xff);
    assert_eq!((err.kind, Some(err.offset)), (ParseErrorKind::Utf8, at));
}

#[test]
fn truncated_fixtures_never_panic_and_fail() {
    for name in [
        "stats-summary-nri-kubernetes-minikube-v1.28.json",
        "stats-summary-datadog-windows-eks.json",
    ] {
        let body = fixture(name);
        for cut in (0..body.len().saturating_sub(2)).step_by(97) {
            let err = parse(&body[..cut], 0).expect_err("truncated JSON is invalid");
            assert!(err.offset <= cut);
        }
    }
}

#[test]
fn mutation_fuzz_never_panics() {
    let seeds = [
        fixture("stats-summary-datadog-windows-eks.json"),
        fixture("stats-summary-nri-kubernetes-legacy-no-pod-cpu.json"),
    ];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut ok = 0;
    for i in 0..2000 {
        let mut body = seeds[i % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        match parse(&body, 0) {
            Ok(_) => ok += 1,
            Err(e) => assert!(e.offset <= body.len()),
        }
    }
    // Some mutations land in skipped fields or whitespace and still parse.
    assert!(ok > 50, "{ok}");
}

#[test]
fn rfc3339_matches_go_time_parse() {
    let cases = [
        ("1970-01-01T00:00:00Z", Some(0)),
        ("2023-11-10T06:20:52Z", Some(1_699_597_252 * S)),
        ("2023-11-10t06:20:52z", Some(1_699_597_252 * S)),
        (
            "2023-11-10T06:20:52.5Z",
            Some(1_699_597_252 * S + 500_000_000),
        ),
        (
            "2023-11-10T06:20:52.123456789Z",
            Some(1_699_597_252 * S + 123_456_789),
        ),
        (
            "2023-11-10T06:20:52.1234567891Z",
            Some(1_699_597_252 * S + 123_456_789),
        ),
        ("2023-11-10T08:20:52+02:00", Some(1_699_597_252 * S)),
        ("2023-11-10T01:50:52-04:30", Some(1_699_597_252 * S)),
        ("2024-02-29T00:00:00Z", Some(1_709_164_800 * S)),
        ("2000-03-01T00:00:00Z", Some(951_868_800 * S)),
        ("1969-12-31T23:59:59.5Z", Some(-S / 2)),
        ("2262-04-11T23:47:16.854775807Z", Some(i64::MAX)),
        ("2262-04-11T23:47:16.854775808Z", None),
        ("0001-01-01T00:00:00Z", None),
        ("2023-02-29T00:00:00Z", None),
        ("2023-13-01T00:00:00Z", None),
        ("2023-11-10T24:00:00Z", None),
        ("2023-11-10T06:20:60Z", None),
        ("2023-11-10T06:20:52", None),
        ("2023-11-10T06:20:52.Z", None),
        ("2023-11-10T06:20:52+0200", None),
        ("2023-11-10 06:20:52Z", None),
        ("2023-11-10T06:20:52ZZ", None),
        ("2023-1a-10T06:20:52Z", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(rfc3339_ns(text), want, "{text}");
    }
}

#[test]
fn swap_usage_is_read_where_present_and_absent_otherwise() {
    let body =
        br#"{"node":{"nodeName":"n","cpu":{"time":"2026-01-01T00:00:00Z","usageCoreNanoSeconds":5},
        "memory":{"time":"2026-01-01T00:00:00Z","workingSetBytes":7},
        "swap":{"time":"2026-01-01T00:00:00Z","swapAvailableBytes":100,"swapUsageBytes":42}},
      "pods":[{"podRef":{"name":"p","namespace":"ns","uid":"u"},"containers":[
        {"name":"a","cpu":{"usageCoreNanoSeconds":1},"swap":{"swapUsageBytes":4096}},
        {"name":"b","cpu":{"usageCoreNanoSeconds":1},"swap":null},
        {"name":"c","cpu":{"usageCoreNanoSeconds":1},"swap":{"swapAvailableBytes":9}}]}]}"#;
    let scrape = parse(body, REQUEST_NS).expect("parses");
    assert_eq!(scrape.node.unwrap().swap_bytes, Some(42));
    let swap: Vec<_> = scrape
        .containers
        .iter()
        .map(|c| c.sample.swap_bytes)
        .collect();
    assert_eq!(swap, [Some(4096), None, None]);
}

/// The summary's rates lent to a `/metrics/resource` scrape of the same node: only where the
/// summary has a rate of the very sample the resource scrape read (`time` in whole seconds
/// against milliseconds), never to a series it has a newer sample of (counted, so the scrape
/// can read the resource again), nor one it lacks.
#[test]
fn rates_are_attached_to_the_same_samples_only() {
    const T: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    let resource = format!(
        "# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{{container=\"app\",namespace=\"ns\",pod=\"p\"}} 12.5 {T}123
container_cpu_usage_seconds_total{{container=\"fresh\",namespace=\"ns\",pod=\"p\"}} 0.2 {T}123
container_cpu_usage_seconds_total{{container=\"later\",namespace=\"ns\",pod=\"p\"}} 3 {T}123
container_cpu_usage_seconds_total{{container=\"other\",namespace=\"ns\",pod=\"q\"}} 3 {T}123
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{{container=\"app\",namespace=\"ns\",pod=\"p\"}} 1e+06 {T}123
container_memory_working_set_bytes{{container=\"fresh\",namespace=\"ns\",pod=\"p\"}} 1e+06 {T}123
container_memory_working_set_bytes{{container=\"later\",namespace=\"ns\",pod=\"p\"}} 1e+06 {T}123
container_memory_working_set_bytes{{container=\"other\",namespace=\"ns\",pod=\"q\"}} 1e+06 {T}123
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 100 {T}456
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1e+09 {T}456
"
    );
    let summary = br#"{"node":{"nodeName":"n","cpu":{"time":"2026-01-01T00:00:00Z","usageNanoCores":900000000,"usageCoreNanoSeconds":100000000000},
        "memory":{"time":"2026-01-01T00:00:00Z","workingSetBytes":1000000000}},
      "pods":[{"podRef":{"name":"p","namespace":"ns","uid":"u"},"containers":[
        {"name":"app","cpu":{"time":"2026-01-01T00:00:00Z","usageNanoCores":250000000,"usageCoreNanoSeconds":12500000000}},
        {"name":"fresh","cpu":{"time":"2026-01-01T00:00:00Z","usageCoreNanoSeconds":200000000}},
        {"name":"later","cpu":{"time":"2026-01-01T00:00:10Z","usageNanoCores":7,"usageCoreNanoSeconds":4000000000}}]}]}"#;
    let mut scrape =
        crate::kubelet::resource::parse(resource.as_bytes(), REQUEST_NS).expect("resource");
    let rates = parse(summary, REQUEST_NS).expect("summary");
    assert_eq!(
        attach_rates(&mut scrape, &rates),
        Attached { rates: 2, newer: 1 },
        "app and the node; later was refreshed in between"
    );
    assert_eq!(scrape.node.expect("node").cpu_nanocores, Some(900_000_000));
    let rate = |pod, c| find(&scrape, "ns", pod, c).cpu_nanocores;
    assert_eq!(
        [
            rate("p", "app"),
            rate("p", "fresh"),
            rate("p", "later"),
            rate("q", "other")
        ],
        [Some(250_000_000), None, None, None]
    );
    // Nothing else of the resource scrape changed.
    let app = find(&scrape, "ns", "p", "app");
    assert_eq!(
        (app.timestamp_ns, app.cpu_usage_ns_total),
        (T * S + 123_000_000, Some(12_500_000_000))
    );
}
