//! Scraper self-metrics: the `metrics_server_*` families of metrics-server §3.6 / §5.4 with
//! their exact names, types, labels and `[ALPHA] ` help, plus one extra family of failures by
//! reason (deliberately without the `metrics_server_` prefix: that set is asserted exactly).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::store::Points;

/// Prometheus Go client `DefBuckets`.
pub const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `{node="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

/// `{success="true"|"false"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SuccessLabel {
    success: &'static str,
}

/// `{type="node"|"container"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    r#type: &'static str,
}

/// `{reason="timeout"|...}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn def_histogram() -> Histogram {
    Histogram::new(DEF_BUCKETS)
}

/// metrics-server `pkg/utils/monitoring.go` `BucketsForScrapeDuration`: `DefBuckets` plus,
/// when the resolution exceeds 10 s, `[10+(r-10)/2, r, 1.5r, 2r]`.
pub fn tick_buckets(resolution: Duration) -> Vec<f64> {
    let mut buckets = DEF_BUCKETS.to_vec();
    let r = resolution.as_secs_f64();
    if r > 10.0 {
        buckets.extend([10.0 + (r - 10.0) / 2.0, r, 1.5 * r, 2.0 * r]);
    }
    buckets
}

/// The scraper's metric families.
#[derive(Debug)]
pub struct Metrics {
    request_duration: HistogramFamily<NodeLabel>,
    request_total: Family<SuccessLabel, Counter>,
    last_request_time: Family<NodeLabel, Gauge<f64, AtomicU64>>,
    tick_duration: Histogram,
    storage_points: Family<TypeLabel, Gauge>,
    failures: Family<ReasonLabel, Counter>,
    ticks: AtomicU64,
}

impl Default for Metrics {
    /// Unregistered families for a 60 s resolution (tests, tools).
    fn default() -> Self {
        Metrics::unregistered(Duration::from_secs(60))
    }
}

impl Metrics {
    /// Creates and registers the families on `registry`. `resolution` shapes the tick
    /// histogram buckets.
    pub fn new(registry: &mut Registry, resolution: Duration) -> Self {
        let metrics = Metrics::unregistered(resolution);
        // prometheus-client appends "." to HELP and "_total" to counter samples.
        registry.register(
            "metrics_server_kubelet_request_duration_seconds",
            "[ALPHA] Duration of requests to Kubelet API in seconds",
            metrics.request_duration.clone(),
        );
        registry.register(
            "metrics_server_kubelet_request",
            "[ALPHA] Number of requests sent to Kubelet API",
            metrics.request_total.clone(),
        );
        registry.register(
            "metrics_server_kubelet_last_request_time_seconds",
            "[ALPHA] Time of last request performed to Kubelet API since unix epoch in seconds",
            metrics.last_request_time.clone(),
        );
        registry.register(
            "metrics_server_manager_tick_duration_seconds",
            "[ALPHA] The total time spent collecting and storing metrics in seconds",
            metrics.tick_duration.clone(),
        );
        registry.register(
            "metrics_server_storage_points",
            "[ALPHA] Number of metrics points stored",
            metrics.storage_points.clone(),
        );
        registry.register(
            "scraper_kubelet_scrape_failures",
            "Failed node scrapes by reason (timeout, connection_refused, tls_unknown_authority, status, body_too_large, parse, ...)",
            metrics.failures.clone(),
        );
        metrics
    }

    fn unregistered(resolution: Duration) -> Self {
        let buckets = tick_buckets(resolution);
        Metrics {
            request_duration: Family::new_with_constructor(def_histogram),
            request_total: Family::default(),
            last_request_time: Family::default(),
            tick_duration: Histogram::new(buckets),
            storage_points: Family::default(),
            failures: Family::default(),
            ticks: AtomicU64::new(0),
        }
    }

    /// Records one finished kubelet request (success or failure): its duration, the success
    /// counter and the node's last request time (Unix seconds when it finished).
    pub fn observe_request(
        &self,
        node: &str,
        duration: Duration,
        success: bool,
        finished_unix_s: f64,
    ) {
        let label = NodeLabel {
            node: node.to_owned(),
        };
        self.request_duration
            .get_or_create(&label)
            .observe(duration.as_secs_f64());
        self.last_request_time
            .get_or_create(&label)
            .set(finished_unix_s);
        self.request_total
            .get_or_create(&SuccessLabel {
                success: if success { "true" } else { "false" },
            })
            .inc();
    }

    /// Counts a failed scrape by reason (`kubelet::client::Error::reason` and friends).
    pub fn observe_failure(&self, reason: &'static str) {
        self.failures.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Records how long a period took to collect and store every node's result.
    pub fn observe_tick(&self, duration: Duration) {
        self.tick_duration.observe(duration.as_secs_f64());
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets `metrics_server_storage_points{type}`.
    pub fn set_storage_points(&self, points: Points) {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.storage_points
            .get_or_create(&TypeLabel { r#type: "node" })
            .set(clamp(points.nodes));
        self.storage_points
            .get_or_create(&TypeLabel {
                r#type: "container",
            })
            .set(clamp(points.containers));
    }

    /// Removes every per-node series of a node that is gone (metrics-server #1876).
    pub fn forget_node(&self, node: &str) {
        let label = NodeLabel {
            node: node.to_owned(),
        };
        self.request_duration.remove(&label);
        self.last_request_time.remove(&label);
    }

    /// Requests counted so far with this outcome (for tests and health reporting).
    pub fn requests(&self, success: bool) -> u64 {
        self.request_total
            .get(&SuccessLabel {
                success: if success { "true" } else { "false" },
            })
            .map_or(0, |c| c.get())
    }

    /// Failures counted so far with this reason.
    pub fn failures(&self, reason: &'static str) -> u64 {
        self.failures
            .get(&ReasonLabel { reason })
            .map_or(0, |c| c.get())
    }

    /// Periods observed so far.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn exposition(metrics_setup: impl FnOnce(&Metrics), resolution: Duration) -> String {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry, resolution);
        metrics_setup(&metrics);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    fn families(text: &str, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
            .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
            .map(|n| {
                for suffix in ["_bucket", "_sum", "_count"] {
                    if let Some(base) = n.strip_suffix(suffix) {
                        return base.to_owned();
                    }
                }
                n
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn exposes_exactly_the_metrics_server_families() {
        let text = exposition(
            |m| {
                m.observe_request("n1", Duration::from_millis(30), true, 1_700_000_000.5);
                m.observe_request("n2", Duration::from_secs(20), false, 1_700_000_001.0);
                m.observe_tick(Duration::from_millis(700));
                m.set_storage_points(Points {
                    nodes: 2,
                    containers: 7,
                });
                m.observe_failure("timeout");
            },
            Duration::from_secs(15),
        );
        assert_eq!(
            families(&text, "metrics_server_"),
            [
                "metrics_server_kubelet_last_request_time_seconds",
                "metrics_server_kubelet_request_duration_seconds",
                "metrics_server_kubelet_request_total",
                "metrics_server_manager_tick_duration_seconds",
                "metrics_server_storage_points",
            ]
        );
        for line in text
            .lines()
            .filter(|l| l.starts_with("# HELP metrics_server_"))
        {
            assert!(line.split(' ').nth(3) == Some("[ALPHA]"), "{line}");
        }
        assert!(text.contains("# TYPE metrics_server_kubelet_request_duration_seconds histogram"));
        assert!(text.contains("# TYPE metrics_server_kubelet_request counter"));
        assert!(text.contains("metrics_server_kubelet_request_total{success=\"true\"} 1"));
        assert!(text.contains("metrics_server_kubelet_request_total{success=\"false\"} 1"));
        assert!(text.contains(
            "metrics_server_kubelet_last_request_time_seconds{node=\"n1\"} 1700000000.5"
        ));
        assert!(
            text.contains(
                "metrics_server_kubelet_request_duration_seconds_bucket{le=\"0.05\",node=\"n1\"} 1"
            ) || text.contains(
                "metrics_server_kubelet_request_duration_seconds_bucket{node=\"n1\",le=\"0.05\"} 1"
            )
        );
        assert!(text.contains("metrics_server_storage_points{type=\"node\"} 2"));
        assert!(text.contains("metrics_server_storage_points{type=\"container\"} 7"));
        assert!(text.contains("scraper_kubelet_scrape_failures_total{reason=\"timeout\"} 1"));
    }

    #[test]
    fn tick_buckets_follow_the_resolution() {
        assert_eq!(tick_buckets(Duration::from_secs(10)), DEF_BUCKETS.to_vec());
        let b15 = tick_buckets(Duration::from_secs(15));
        assert_eq!(&b15[11..], &[12.5, 15.0, 22.5, 30.0]);
        let b60 = tick_buckets(Duration::from_secs(60));
        assert_eq!(&b60[11..], &[35.0, 60.0, 90.0, 120.0]);
        let text = exposition(
            |m| m.observe_tick(Duration::from_secs(20)),
            Duration::from_secs(15),
        );
        assert!(
            text.contains("metrics_server_manager_tick_duration_seconds_bucket{le=\"22.5\"} 1")
        );
        assert!(
            text.contains("metrics_server_manager_tick_duration_seconds_bucket{le=\"15.0\"} 0")
        );
    }

    #[test]
    fn forget_node_removes_its_series_only() {
        let text = exposition(
            |m| {
                m.observe_request("gone", Duration::from_millis(5), true, 1.0);
                m.observe_request("kept", Duration::from_millis(5), true, 2.0);
                m.forget_node("gone");
            },
            Duration::from_secs(15),
        );
        assert!(!text.contains("node=\"gone\""));
        assert!(text.contains("node=\"kept\""));
        // The success counter is cluster-wide and keeps counting.
        assert!(text.contains("metrics_server_kubelet_request_total{success=\"true\"} 2"));
    }
}
