//! The rendered payloads have the real fixtures' shapes and round-trip through the scraper's
//! parsers to the model's values.

use std::collections::BTreeMap;

use scraper::kubelet::{resource, summary};
use scraper::point::{NodeScrape, Sample};

use super::*;

const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/kubelet")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A generated node plus the awkward cases: a finished init container, label characters
/// that need escaping, and a container without a kubelet CPU rate.
fn test_node() -> NodeStats {
    let mut node = generated_node(7, 2);
    let first = &mut node.pods[0];
    first.containers.push(ContainerStats {
        name: "init-config".to_owned(),
        start_time_s: 1_750_000_000.25,
        timestamp_ms: 1_750_607_840_123,
        terminated: true,
        ..ContainerStats::default()
    });
    node.pods[1].containers[0].name = "we\"ird\\name\nx".to_owned();
    node.pods[2].containers[1].cpu_nanocores = None;
    node
}

fn by_key(scrape: &NodeScrape<'_>) -> BTreeMap<(String, String, String), Sample> {
    let map: BTreeMap<_, _> = scrape
        .containers
        .iter()
        .map(|c| {
            (
                (
                    c.namespace.to_string(),
                    c.pod.to_string(),
                    c.container.to_string(),
                ),
                c.sample,
            )
        })
        .collect();
    assert_eq!(
        map.len(),
        scrape.containers.len(),
        "one entry per container"
    );
    map
}

#[test]
fn resource_round_trips_through_the_scraper_parser() {
    let node = test_node();
    let body = render_resource(&node);
    let scrape = resource::parse(body.as_bytes(), 0).expect("parses");

    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: node.timestamp_ms * MS,
            cpu_usage_ns_total: Some((node.cpu_seconds_total * 1e9) as u64),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(node.memory_working_set_bytes),
            start_time_ns: None,
            swap_bytes: None,
        })
    );
    let mut want = BTreeMap::new();
    for p in &node.pods {
        for c in p.containers.iter().filter(|c| !c.terminated) {
            want.insert(
                (p.namespace.clone(), p.name.clone(), c.name.clone()),
                Sample {
                    timestamp_ns: c.timestamp_ms * MS,
                    cpu_usage_ns_total: Some((c.cpu_seconds_total * 1e9) as u64),
                    cpu_nanocores: None,
                    memory_working_set_bytes: Some(c.memory_working_set_bytes),
                    start_time_ns: Some((c.start_time_s * 1e9) as i64),
                    swap_bytes: None,
                },
            );
        }
    }
    assert_eq!(want.len(), 14);
    assert_eq!(by_key(&scrape), want);
}

#[test]
fn summary_round_trips_through_the_scraper_parser() {
    let node = test_node();
    let body = render_summary(&node);
    let scrape = summary::parse(body.as_bytes(), 0).expect("parses");

    // metav1.Time has second precision.
    assert_eq!(
        scrape.node,
        Some(Sample {
            timestamp_ns: node.timestamp_ms.div_euclid(1000) * S,
            cpu_usage_ns_total: Some((node.cpu_seconds_total * 1e9) as u64),
            cpu_nanocores: node.cpu_nanocores,
            memory_working_set_bytes: Some(node.memory_working_set_bytes),
            start_time_ns: None,
            swap_bytes: None,
        })
    );
    let mut want = BTreeMap::new();
    for p in &node.pods {
        for c in &p.containers {
            let live = !c.terminated;
            want.insert(
                (p.namespace.clone(), p.name.clone(), c.name.clone()),
                Sample {
                    timestamp_ns: c.timestamp_ms.div_euclid(1000) * S,
                    cpu_usage_ns_total: Some(if live {
                        (c.cpu_seconds_total * 1e9) as u64
                    } else {
                        0
                    }),
                    cpu_nanocores: if live { c.cpu_nanocores } else { Some(0) },
                    memory_working_set_bytes: Some(if live {
                        c.memory_working_set_bytes
                    } else {
                        0
                    }),
                    start_time_ns: Some((c.start_time_s as i64) * S),
                    swap_bytes: None,
                },
            );
        }
    }
    assert_eq!(want.len(), 15);
    assert_eq!(by_key(&scrape), want);
}

#[test]
fn swap_round_trips_through_both_parsers_where_reported() {
    let mut node = test_node();
    node.swap_bytes = Some(96 << 20);
    for (i, c) in node
        .pods
        .iter_mut()
        .flat_map(|p| &mut p.containers)
        .enumerate()
    {
        c.swap_bytes = Some(if i % 3 == 0 { (i as u64 + 1) << 20 } else { 0 });
    }
    // One container reports none (a Windows container on a mixed kubelet, say).
    node.pods[3].containers[0].swap_bytes = None;
    let want: BTreeMap<_, _> = node
        .pods
        .iter()
        .flat_map(|p| {
            p.containers
                .iter()
                .filter(|c| !c.terminated)
                .map(move |c| (p, c))
        })
        .map(|(p, c)| {
            (
                (p.namespace.clone(), p.name.clone(), c.name.clone()),
                c.swap_bytes,
            )
        })
        .collect();
    let resource_body = render_resource(&node);
    assert!(resource_body.contains("# HELP container_swap_usage_bytes [ALPHA]"));
    assert!(resource_body.contains("\nnode_swap_usage_bytes 1.00663296e+08 "));
    let summary_body = render_summary(&node);
    for scrape in [
        resource::parse(resource_body.as_bytes(), 0).expect("parses"),
        summary::parse(summary_body.as_bytes(), 0).expect("parses"),
    ] {
        assert_eq!(scrape.node.unwrap().swap_bytes, Some(96 << 20));
        let got: BTreeMap<_, _> = by_key(&scrape)
            .into_iter()
            .filter(|(_, s)| s.cpu_usage_ns_total.unwrap_or(0) > 0)
            .map(|(k, s)| (k, s.swap_bytes))
            .collect();
        assert_eq!(got, want);
    }
    // Without swap on the node, no swap family at all (today's bytes).
    assert!(!render_resource(&test_node()).contains("swap"));
    assert!(!render_summary(&test_node()).contains("swap"));
}

#[test]
fn resource_has_the_family_layout_of_a_real_kubelet() {
    let body = render_resource(&test_node());
    let types = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(str::to_owned)
            .collect()
    };
    let mut real = types(&fixture("metrics-resource-songleo-kind-pre-v1.29.txt"));
    // kubelet 1.29 renamed scrape_error.
    for t in &mut real {
        if t == "scrape_error gauge" {
            *t = "resource_scrape_error gauge".to_owned();
        }
    }
    assert_eq!(types(&body), real);
    assert!(body.ends_with("resource_scrape_error 0\n"));
    // 14 running containers x 3 families, 7 pods x 2, the node x 2, 8 HELP + 8 TYPE, 1.
    assert_eq!(body.lines().count(), 14 * 3 + 7 * 2 + 2 + 16 + 1);
    assert!(
        !body.contains("init-config"),
        "finished init containers are not reported"
    );
    assert!(body.contains(r#"container="we\"ird\\name\nx""#));
    // The start-time series carries the start time (ms) as its timestamp.
    let node = test_node();
    let c = &node.pods[0].containers[0];
    let line = body
        .lines()
        .find(|l| l.starts_with("container_start_time_seconds") && l.contains(&node.pods[0].name))
        .expect("start time line");
    let ts = line.rsplit(' ').next().expect("timestamp");
    assert_eq!(ts, ((c.start_time_s * 1000.0) as i64).to_string());
}

/// Collects every object path's key set, e.g. `pods[].containers[].memory` -> {time, ...}.
fn shapes(value: &serde_json::Value, path: &str, out: &mut BTreeMap<String, Vec<String>>) {
    match value {
        serde_json::Value::Object(map) => {
            let keys = out.entry(path.to_owned()).or_default();
            for k in map.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
            for (k, v) in map {
                shapes(v, &format!("{path}.{k}"), out);
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                shapes(v, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn summary_uses_only_fields_of_the_real_v1_28_shape() {
    let ours: serde_json::Value =
        serde_json::from_str(&render_summary(&test_node())).expect("valid JSON");
    let real: serde_json::Value =
        serde_json::from_str(&fixture("stats-summary-nri-kubernetes-minikube-v1.28.json"))
            .expect("valid JSON");
    let (mut ours_shape, mut real_shape) = (BTreeMap::new(), BTreeMap::new());
    shapes(&ours, "", &mut ours_shape);
    shapes(&real, "", &mut real_shape);
    for (path, keys) in &ours_shape {
        let real_keys = real_shape
            .get(path)
            .unwrap_or_else(|| panic!("{path} is not in the real payload"));
        for k in keys {
            assert!(
                real_keys.contains(k),
                "{path}.{k} is not in the real payload"
            );
        }
    }
    for path in [
        ".node",
        ".node.cpu",
        ".node.memory",
        ".pods[]",
        ".pods[].podRef",
        ".pods[].containers[]",
        ".pods[].containers[].cpu",
        ".pods[].containers[].memory",
    ] {
        assert!(ours_shape.contains_key(path), "{path} missing");
    }
    // Same key order as the kubelet's Go structs (serde_json::Value sorts keys, so look at
    // the text).
    let body = render_summary(&test_node());
    let container = &body[body.find("\"containers\"").expect("containers")..];
    let at = |key: &str| container.find(key).expect(key);
    assert!(at("\"time\"") < at("\"usageNanoCores\""));
    assert!(at("\"usageNanoCores\"") < at("\"usageCoreNanoSeconds\""));
    assert!(at("\"usageBytes\"") < at("\"workingSetBytes\""));
    assert!(at("\"workingSetBytes\"") < at("\"rssBytes\""));
    assert!(body.starts_with("{\n \"node\": {\n  \"nodeName\": \"generated-node\",\n"));

    // The finished init container is an all-zero stub, as in the Windows capture.
    let init = ours["pods"][0]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "init-config"))
        .expect("init container present");
    assert_eq!(init["cpu"]["usageCoreNanoSeconds"], 0);
    assert_eq!(init["cpu"]["usageNanoCores"], 0);
    let memory_keys: Vec<_> = init["memory"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(memory_keys, ["time", "workingSetBytes"]);
    assert_eq!(init["memory"]["workingSetBytes"], 0);
}

#[test]
fn go_float_formats_like_strconv() {
    // Every pair is a value printed by a real kubelet (fixtures) or strconv.FormatFloat.
    for (value, go) in [
        (12_533_760.0, "1.253376e+07"),
        (495_616.0, "495616"),
        (357.35491, "357.35491"),
        (1_616_273_408.0, "1.616273408e+09"),
        (7_729_152.0, "7.729152e+06"),
        (0.092544, "0.092544"),
        (1.704_801_726_838_995_5e9, "1.7048017268389955e+09"),
        (1e6, "1e+06"),
        (999_999.0, "999999"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e-7, "1.5e-07"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (0.0, "0"),
        (-2.5, "-2.5"),
        (f64::INFINITY, "+Inf"),
        (f64::NAN, "NaN"),
    ] {
        let mut out = String::new();
        go_float(&mut out, value);
        assert_eq!(out, go, "{value}");
    }
}

#[test]
fn rfc3339_renders_what_the_parser_reads() {
    for unix_s in [
        0,
        951_782_400,   // 2000-02-29
        1_699_597_252, // 2023-11-10T06:20:52Z
        4_107_542_399, // 2100-02-28T23:59:59Z
        -86_401,
    ] {
        let text = rfc3339(unix_s);
        assert_eq!(summary::rfc3339_ns(&text), Some(unix_s * S), "{text}");
    }
    assert_eq!(rfc3339(1_699_597_252), "2023-11-10T06:20:52Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
}

#[test]
fn generated_node_is_deterministic_and_sized() {
    let a = generated_node(110, 2);
    let b = generated_node(110, 2);
    assert_eq!(render_resource(&a), render_resource(&b));
    assert_eq!(render_summary(&a), render_summary(&b));
    assert_eq!(a.pods.len(), 110);
    assert!(a.pods.iter().all(|p| p.containers.len() == 2));
    let names: std::collections::BTreeSet<_> =
        a.pods.iter().map(|p| (&p.namespace, &p.name)).collect();
    assert_eq!(names.len(), 110, "pod names are unique");
    let resource_body = render_resource(&a);
    let scrape = resource::parse(resource_body.as_bytes(), 0).expect("parses");
    assert_eq!(scrape.containers.len(), 220);
    let summary_body = render_summary(&a);
    let scrape = summary::parse(summary_body.as_bytes(), 0).expect("parses");
    assert_eq!(scrape.containers.len(), 220);
    // Timestamps spread like a real kubelet's (up to ~19 s), not all identical.
    let spread = a
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .map(|c| c.timestamp_ms)
        .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    assert!(spread.1 - spread.0 > 10_000, "{spread:?}");
}
