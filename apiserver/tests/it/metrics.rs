//! `/metrics` is valid Prometheus text.

use std::collections::{BTreeMap, BTreeSet};

use http::StatusCode;

use crate::support::{Client, start};

/// The families metrics-server's e2e asserts, exactly.
const METRICS_SERVER_FAMILIES: [&str; 6] = [
    "metrics_server_api_metric_freshness_seconds",
    "metrics_server_kubelet_last_request_time_seconds",
    "metrics_server_kubelet_request_duration_seconds",
    "metrics_server_kubelet_request_total",
    "metrics_server_manager_tick_duration_seconds",
    "metrics_server_storage_points",
];

/// Parses Prometheus text 0.0.4 strictly enough to catch what `expfmt` rejects: every sample
/// belongs to the family declared just before it, TYPE at most once per family and before
/// its samples, values are floats, label sets are well-formed. Returns family -> type.
fn parse_families(text: &str) -> BTreeMap<String, String> {
    let mut families = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in\n{text}");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "{line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                families.insert(name.to_owned(), kind.to_owned()).is_none(),
                "second TYPE for {name}"
            );
            current = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(valid_name(name), "{line}");
        let rest = &line[name_end..];
        let rest = if let Some(labels) = rest.strip_prefix('{') {
            let close = labels
                .rfind('}')
                .unwrap_or_else(|| panic!("unclosed labels: {line}"));
            for pair in split_labels(&labels[..close]) {
                let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{line}"));
                assert!(valid_name(k), "{line}");
                assert!(
                    v.starts_with('"') && v.ends_with('"') && v.len() >= 2,
                    "{line}"
                );
            }
            &labels[close + 1..]
        } else {
            rest
        };
        let mut fields = rest.split_whitespace();
        let value = fields.next().unwrap_or_else(|| panic!("no value: {line}"));
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "{line}"
        );
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().unwrap_or_else(|_| panic!("{line}"));
        }
        assert!(fields.next().is_none(), "{line}");
        let (family, kind) = current
            .as_ref()
            .unwrap_or_else(|| panic!("untyped sample {line}"));
        let ok = match kind.as_str() {
            "histogram" => [
                family.clone(),
                format!("{family}_bucket"),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_owned()),
            "summary" => [
                family.clone(),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_owned()),
            _ => name == family,
        };
        assert!(ok, "sample {name} outside its family {family}");
    }
    families
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn split_labels(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[tokio::test]
async fn metrics_is_prometheus_text() {
    let server = start(|_| {}).await;
    let c = Client::insecure();
    // Requests to count.
    c.get(server.addr, "/livez").await;
    c.get(server.addr, "/no-such-path").await;
    let reply = c.get(server.addr, "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers[http::header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!reply.body.contains("# EOF"));
    let families = parse_families(&reply.body);
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_open_fds", "gauge"),
        ("apiserver_request_total", "counter"),
        ("apiserver_request_duration_seconds", "histogram"),
        // Registered without an audit log, as k8s.io/apiserver registers them (the labelled
        // ones appear with their first sample, as client_golang writes them).
        ("apiserver_audit_event_total", "counter"),
        ("apiserver_audit_requests_rejected_total", "counter"),
    ] {
        assert_eq!(families.get(name).map(String::as_str), Some(kind), "{name}");
    }
    // Counted as k8s.io/apiserver counts: the health root, not a path no route serves.
    assert!(reply.body.contains(
        "apiserver_request_total{code=\"200\",component=\"\",dry_run=\"\",group=\"\",\
         resource=\"\",scope=\"\",subresource=\"/livez\",verb=\"GET\",version=\"\"} 1\n"
    ));
    assert!(!reply.body.contains("code=\"404\""), "{}", reply.body);
    assert!(reply.body.contains("\napiserver_audit_event_total 0\n"));
    // Whatever metrics_server_* families are registered are metrics-server's own.
    let ours: BTreeSet<&str> = families
        .keys()
        .map(String::as_str)
        .filter(|n| n.starts_with("metrics_server_"))
        .collect();
    let allowed: BTreeSet<&str> = METRICS_SERVER_FAMILIES.into_iter().collect();
    assert!(ours.is_subset(&allowed), "{ours:?}");

    // OpenMetrics when asked, with its terminator.
    let om = c
        .get_with(
            server.addr,
            "/metrics",
            &[("accept", "application/openmetrics-text; version=1.0.0")],
        )
        .await;
    assert!(
        om.headers[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    assert!(om.body.ends_with("# EOF\n"));
    server.shutdown.cancel();
}

#[test]
fn the_checker_rejects_what_expfmt_rejects() {
    for bad in [
        "# TYPE a counter\nb 1\n",
        "# TYPE a gauge\na{x=1} 1\n",
        "# TYPE a gauge\na one\n",
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",
        "a 1\n",
        "# EOF\n",
    ] {
        assert!(
            std::panic::catch_unwind(|| parse_families(bad)).is_err(),
            "{bad:?}"
        );
    }
    let good = "# HELP h_seconds H.\n# TYPE h_seconds histogram\nh_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_sum 0.5\nh_seconds_count 1\n";
    assert_eq!(parse_families(good)["h_seconds"], "histogram");
}
