//! `meta.k8s.io/v1` Table output for `kubectl get nodes`, `pods` and `configmaps`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Kind, build};

/// Go's `duration.HumanDuration`, as kubectl's AGE column shows it.
fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 730 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

/// Parses an RFC 3339 time (`YYYY-MM-DDTHH:MM:SSZ` as the objects carry it) into Unix seconds.
fn parse_rfc3339(s: &str) -> Option<i64> {
    scraper::kubelet::summary::rfc3339_ns(s).map(|ns| ns.div_euclid(1_000_000_000))
}

fn age(object: &Value) -> String {
    let now = parse_rfc3339(&build::now_rfc3339()).unwrap_or(0);
    match object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
    {
        Some(created) => human_duration(now - created),
        None => "<unknown>".to_owned(),
    }
}

fn column(name: &str, kind: &str, format: &str, priority: u32) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": "", "priority": priority})
}

/// A `meta.k8s.io/v1` Table, with the columns kube-apiserver prints for the kind.
pub(crate) fn table_json(
    kind: Kind,
    rv: u64,
    items: &[Arc<Value>],
    continue_token: Option<&str>,
) -> Value {
    let columns = match kind {
        Kind::Node => vec![
            column("Name", "string", "name", 0),
            column("Status", "string", "", 0),
            column("Roles", "string", "", 0),
            column("Age", "string", "", 0),
            column("Version", "string", "", 0),
        ],
        Kind::Pod => vec![
            column("Name", "string", "name", 0),
            column("Ready", "string", "", 0),
            column("Status", "string", "", 0),
            column("Restarts", "string", "", 0),
            column("Age", "string", "", 0),
            column("Node", "string", "", 1),
        ],
        Kind::ConfigMap => vec![
            column("Name", "string", "name", 0),
            column("Data", "integer", "", 0),
            column("Age", "string", "", 0),
        ],
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let name = o["metadata"]["name"].clone();
            let cells = match kind {
                Kind::Node => {
                    let ready = o["status"]["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                        .is_some_and(|c| c["status"] == "True");
                    let roles: Vec<&str> = o["metadata"]["labels"]
                        .as_object()
                        .map(|ls| {
                            ls.keys()
                                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                                .collect()
                        })
                        .unwrap_or_default();
                    let roles = if roles.is_empty() { "<none>".to_owned() } else { roles.join(",") };
                    json!([name, if ready { "Ready" } else { "NotReady" }, roles, age(o), o["status"]["nodeInfo"]["kubeletVersion"]])
                }
                Kind::Pod => {
                    let statuses = o["status"]["containerStatuses"].as_array();
                    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                    let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
                    let restarts: i64 = statuses.map_or(0, |s| s.iter().filter_map(|c| c["restartCount"].as_i64()).sum());
                    let phase = o["status"]["phase"].as_str().unwrap_or("Unknown");
                    let phase = if phase == "Succeeded" { "Completed" } else { phase };
                    json!([name, format!("{ready}/{total}"), phase, restarts, age(o), o["spec"]["nodeName"].as_str().unwrap_or("<none>")])
                }
                Kind::ConfigMap => {
                    let data = o["data"].as_object().map_or(0, serde_json::Map::len);
                    json!([name, data, age(o)])
                }
            };
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(5 * 3600 + 60), "5h1m");
        assert_eq!(human_duration(3 * 86_400), "3d");
    }

    #[test]
    fn rfc3339_round_trips() {
        for t in [0, 1_748_855_671, 951_782_400] {
            assert_eq!(parse_rfc3339(&build::rfc3339(t)), Some(t));
        }
        assert_eq!(parse_rfc3339("2025-06-02 09:14:31"), None);
    }
}
