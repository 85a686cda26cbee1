//! Scraper self-metrics: the `metrics_server_*` families of metrics-server §3.6 / §5.4 with
//! their exact names, types, labels and `[ALPHA] ` help, plus one extra family of failures by
//! reason (deliberately without the `metrics_server_` prefix: that set is asserted exactly).
//!
//! The two families with a series per node are not in the registry: [`NodeSeries`] keeps
//! them and writes their text a few dozen nodes at a time ([`NodeText`]), so `/metrics` on
//! a 5,000-node cluster (~75,000 lines, 6 MB) is streamed in small frames, not built in one
//! string and then copied into another (which left its ~12 MB with the allocator).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

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

/// Why a warm node is scraped outside its periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowUpReason {
    /// The API showed a pod start on it.
    PodStart,
    /// A scrape found series that wait for a second sample (a restarted container, a pod
    /// the API did not show starting, a node sample that did not move).
    ContainerStart,
}

impl FollowUpReason {
    const ALL: [FollowUpReason; 2] = [FollowUpReason::PodStart, FollowUpReason::ContainerStart];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FollowUpReason::PodStart => "pod_start",
            FollowUpReason::ContainerStart => "container_start",
        }
    }
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
    nodes: Arc<NodeSeries>,
    request_total: Family<SuccessLabel, Counter>,
    tick_duration: Histogram,
    storage_points: Family<TypeLabel, Gauge>,
    failures: Family<ReasonLabel, Counter>,
    warming: Gauge,
    follow_up_scrapes: Family<ReasonLabel, Counter>,
    follow_up_scrapes_skipped: Family<ReasonLabel, Counter>,
    ticks: AtomicU64,
}

impl Default for Metrics {
    /// Unregistered families for a 60 s resolution (tests, tools).
    fn default() -> Self {
        Metrics::unregistered(Duration::from_secs(60))
    }
}

impl Metrics {
    /// Creates and registers the families on `registry`, except the per-node ones, which
    /// [`node_series`](Self::node_series) writes. `resolution` shapes the tick histogram
    /// buckets.
    pub fn new(registry: &mut Registry, resolution: Duration) -> Self {
        let metrics = Metrics::unregistered(resolution);
        // prometheus-client appends "." to HELP and "_total" to counter samples.
        registry.register(
            "metrics_server_kubelet_request",
            "[ALPHA] Number of requests sent to Kubelet API",
            metrics.request_total.clone(),
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
        registry.register(
            "scraper_warming_nodes",
            "Nodes in warm-up: asked again as soon as their kubelet's samples allow a rate, outside the periods",
            metrics.warming.clone(),
        );
        registry.register(
            "scraper_follow_up_scrapes",
            "Scrapes of a warm node outside its periods, until new containers are served, by reason (pod_start: the API showed a pod start on it; container_start: a scrape found series that wait for a second sample, as a restarted container's do)",
            metrics.follow_up_scrapes.clone(),
        );
        registry.register(
            "scraper_follow_up_scrapes_skipped",
            "Follow-up scrapes not made because the period's budget (a tenth of the nodes, at least 64) was spent, by reason",
            metrics.follow_up_scrapes_skipped.clone(),
        );
        metrics
    }

    fn unregistered(resolution: Duration) -> Self {
        let buckets = tick_buckets(resolution);
        let metrics = Metrics {
            nodes: Arc::default(),
            request_total: Family::default(),
            tick_duration: Histogram::new(buckets),
            storage_points: Family::default(),
            failures: Family::default(),
            warming: Gauge::default(),
            follow_up_scrapes: Family::default(),
            follow_up_scrapes_skipped: Family::default(),
            ticks: AtomicU64::new(0),
        };
        // Both reasons from the start, at zero.
        for reason in FollowUpReason::ALL.map(FollowUpReason::as_str) {
            let label = ReasonLabel { reason };
            let _ = metrics.follow_up_scrapes.get_or_create(&label);
            let _ = metrics.follow_up_scrapes_skipped.get_or_create(&label);
        }
        metrics
    }

    /// A node entered (`true`) or left warm-up.
    pub fn warming(&self, entered: bool) {
        if entered {
            self.warming.inc();
        } else {
            self.warming.dec();
        }
    }

    /// Counts a follow-up scrape started for `reason`.
    pub fn follow_up_scrape(&self, reason: FollowUpReason) {
        let reason = reason.as_str();
        self.follow_up_scrapes
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a follow-up scrape not made: the period's budget was spent.
    pub fn follow_up_scrape_skipped(&self, reason: FollowUpReason) {
        let reason = reason.as_str();
        self.follow_up_scrapes_skipped
            .get_or_create(&ReasonLabel { reason })
            .inc();
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
        self.nodes
            .observe(node, duration.as_secs_f64(), finished_unix_s);
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
        self.nodes.nodes.lock().remove(node);
    }

    /// The per-node families, for `/metrics` to write after the registry's.
    pub fn node_series(&self) -> Arc<NodeSeries> {
        self.nodes.clone()
    }

    /// The whole OpenMetrics text of `registry` (where these families were registered)
    /// and of the per-node families, at once: for tests and tools (`/metrics` streams it).
    pub fn exposition(&self, registry: &Registry) -> String {
        let mut out = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, registry);
        let tail = detach_eof(&mut out);
        let mut nodes = Vec::new();
        self.nodes.write_all(&mut nodes);
        out.push_str(&String::from_utf8_lossy(&nodes));
        out.push_str(tail);
        out
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

/// OpenMetrics' terminator, as prometheus-client ends a registry's text.
pub const EOF: &str = "# EOF\n";

/// Takes OpenMetrics' [`EOF`] off the end of a registry's text, and returns what goes after
/// the per-node families in its place: the terminator, or nothing for Prometheus text.
pub fn detach_eof(registry_text: &mut String) -> &'static str {
    match registry_text.strip_suffix(EOF) {
        Some(head) => {
            registry_text.truncate(head.len());
            EOF
        }
        None => "",
    }
}

/// One node's request duration histogram (`DEF_BUCKETS`) and last request time.
#[derive(Clone, Copy, Debug, Default)]
struct NodeStats {
    /// Requests that took no longer than each bound and longer than the one before.
    buckets: [u64; DEF_BUCKETS.len()],
    count: u64,
    sum: f64,
    last_unix_s: f64,
}

/// `metrics_server_kubelet_request_duration_seconds{node}` and
/// `metrics_server_kubelet_last_request_time_seconds{node}`, by node name.
#[derive(Debug, Default)]
pub struct NodeSeries {
    nodes: Mutex<BTreeMap<Box<str>, NodeStats>>,
}

const DURATION_FAMILY: &str = "metrics_server_kubelet_request_duration_seconds";
const LAST_TIME_FAMILY: &str = "metrics_server_kubelet_last_request_time_seconds";

/// The families' heads, as prometheus-client writes them (its "." after the help).
const DURATION_HEAD: &str = "# HELP metrics_server_kubelet_request_duration_seconds [ALPHA] \
    Duration of requests to Kubelet API in seconds.\n\
    # TYPE metrics_server_kubelet_request_duration_seconds histogram\n";
const LAST_TIME_HEAD: &str = "# HELP metrics_server_kubelet_last_request_time_seconds [ALPHA] \
    Time of last request performed to Kubelet API since unix epoch in seconds.\n\
    # TYPE metrics_server_kubelet_last_request_time_seconds gauge\n";

impl NodeSeries {
    fn observe(&self, node: &str, seconds: f64, finished_unix_s: f64) {
        let mut nodes = self.nodes.lock();
        let stats = match nodes.get_mut(node) {
            Some(stats) => stats,
            None => nodes.entry(node.into()).or_default(),
        };
        if let Some(i) = DEF_BUCKETS.iter().position(|&bound| seconds <= bound) {
            stats.buckets[i] += 1;
        }
        stats.count += 1;
        stats.sum += seconds;
        stats.last_unix_s = finished_unix_s;
    }

    /// The families' text from the start, to be written a part at a time.
    pub fn text(self: &Arc<Self>) -> NodeText {
        NodeText {
            series: self.clone(),
            family: Some(NodeFamily::Duration),
            after: None,
        }
    }

    /// The families' whole text (Prometheus text and OpenMetrics alike).
    pub fn write_all(self: &Arc<Self>, out: &mut Vec<u8>) {
        let mut text = self.text();
        while text.write_to(out, usize::MAX) {}
    }
}

/// Which of the two families a [`NodeText`] is writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeFamily {
    Duration,
    LastTime,
}

/// Where a [`NodeSeries`]' text has got to: the family, and the last node written. Nodes come
/// in name order; one that appears (or goes) while the text is written shows (or not) in a
/// family whose turn has not passed its name, as in a list read in pages.
#[derive(Debug)]
pub struct NodeText {
    series: Arc<NodeSeries>,
    family: Option<NodeFamily>,
    after: Option<Box<str>>,
}

impl NodeText {
    /// Appends whole nodes' lines (a family's head first) until `out` holds at least `limit`
    /// bytes or the text is complete, at least one node's when there is one; returns whether
    /// there is more to write. The series' lock is taken for [`NODES_PER_LOCK`] nodes at a
    /// time, so a scrape that records its request waits for no more than their lines.
    pub fn write_to(&mut self, out: &mut Vec<u8>, limit: usize) -> bool {
        loop {
            match self.write_some(out, limit) {
                Some(true) if out.len() < limit => {}
                Some(more) => return more,
                None => return false,
            }
        }
    }

    /// Up to [`NODES_PER_LOCK`] nodes' lines, under one lock; `None` once complete.
    fn write_some(&mut self, out: &mut Vec<u8>, limit: usize) -> Option<bool> {
        let family = self.family?;
        let nodes = self.series.nodes.lock();
        let from = match &self.after {
            None => {
                out.extend_from_slice(match family {
                    NodeFamily::Duration => DURATION_HEAD.as_bytes(),
                    NodeFamily::LastTime => LAST_TIME_HEAD.as_bytes(),
                });
                Bound::Unbounded
            }
            Some(after) => Bound::Excluded(&**after),
        };
        let mut written = 0;
        for (name, stats) in nodes.range::<str, _>((from, Bound::Unbounded)) {
            match family {
                NodeFamily::Duration => write_duration(out, name, stats),
                NodeFamily::LastTime => {
                    let _ = writeln!(
                        out,
                        "{LAST_TIME_FAMILY}{{node=\"{}\"}} {}",
                        Escaped(name),
                        Float(stats.last_unix_s)
                    );
                }
            }
            written += 1;
            if out.len() >= limit || written == NODES_PER_LOCK {
                self.after = Some(name.clone());
                return Some(true);
            }
        }
        self.after = None;
        self.family = match family {
            NodeFamily::Duration => Some(NodeFamily::LastTime),
            NodeFamily::LastTime => None,
        };
        Some(self.family.is_some())
    }
}

/// Nodes written under one lock of the series: up to ~85 KB of the histogram's text.
const NODES_PER_LOCK: usize = 64;

/// `le` of each of `DEF_BUCKETS`, as prometheus-client writes them.
const LE: [&str; DEF_BUCKETS.len()] = [
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0",
];

fn write_duration(out: &mut Vec<u8>, name: &str, stats: &NodeStats) {
    let node = Escaped(name);
    let _ = writeln!(
        out,
        "{DURATION_FAMILY}_sum{{node=\"{node}\"}} {}",
        Float(stats.sum)
    );
    let _ = writeln!(
        out,
        "{DURATION_FAMILY}_count{{node=\"{node}\"}} {}",
        stats.count
    );
    let mut cumulative = 0u64;
    for (le, n) in LE.iter().zip(stats.buckets) {
        cumulative += n;
        let _ = writeln!(
            out,
            "{DURATION_FAMILY}_bucket{{node=\"{node}\",le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "{DURATION_FAMILY}_bucket{{node=\"{node}\",le=\"+Inf\"}} {}",
        stats.count
    );
}

/// A label value with `\`, `"` and newlines escaped, as the text formats want.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        if !s.contains(['\\', '"', '\n']) {
            return f.write_str(s);
        }
        for c in s.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A sample value: the shortest text that reads back as the same `f64`, with `.0` on whole
/// numbers (as prometheus-client writes them), and the text formats' names for the rest.
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v.is_nan() {
            f.write_str("NaN")
        } else if v.is_infinite() {
            f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            write!(f, "{v:?}")
        }
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
        metrics.exposition(&registry)
    }

    fn whole(series: &Arc<NodeSeries>) -> String {
        let mut out = Vec::new();
        series.write_all(&mut out);
        String::from_utf8(out).unwrap()
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
        assert!(text.contains(
            "metrics_server_kubelet_request_duration_seconds_bucket{node=\"n1\",le=\"0.05\"} 1"
        ));
        // 20 s is past the last bound: only in +Inf.
        assert!(text.contains(
            "metrics_server_kubelet_request_duration_seconds_bucket{node=\"n2\",le=\"10.0\"} 0"
        ));
        assert!(text.contains(
            "metrics_server_kubelet_request_duration_seconds_bucket{node=\"n2\",le=\"+Inf\"} 1"
        ));
        assert!(
            text.contains("metrics_server_kubelet_request_duration_seconds_sum{node=\"n2\"} 20.0")
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

    /// The per-node families as prometheus-client wrote them when they were registry
    /// families, for the same observations: the streamed text must say the same.
    #[test]
    fn node_series_say_what_the_registry_families_said() {
        use prometheus_client::metrics::gauge::Gauge;
        #[derive(
            Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
        )]
        struct NodeLabel {
            node: String,
        }
        let observations = [
            ("b", 0.004, 1_700_000_000.25),
            ("a", 0.3, 1_700_000_001.0),
            ("b", 7.5, 1_700_000_015.5),
            ("c", 0.01, 17.0),
            ("a", 11.0, 1e-7),
        ];
        let mut registry = Registry::default();
        let durations =
            Family::<NodeLabel, Histogram>::new_with_constructor(|| Histogram::new(DEF_BUCKETS));
        let last: Family<NodeLabel, Gauge<f64, AtomicU64>> = Family::default();
        registry.register(
            "metrics_server_kubelet_request_duration_seconds",
            "[ALPHA] Duration of requests to Kubelet API in seconds",
            durations.clone(),
        );
        registry.register(
            "metrics_server_kubelet_last_request_time_seconds",
            "[ALPHA] Time of last request performed to Kubelet API since unix epoch in seconds",
            last.clone(),
        );
        let series = Arc::new(NodeSeries::default());
        for (node, seconds, at) in observations {
            let label = NodeLabel {
                node: node.to_owned(),
            };
            durations.get_or_create(&label).observe(seconds);
            last.get_or_create(&label).set(at);
            series.observe(node, seconds, at);
        }
        let mut want = String::new();
        encode(&mut want, &registry).unwrap();
        let mut got = whole(&series);
        got.push_str("# EOF\n");
        // The same lines, each family's together; the order of series and labels may differ.
        let normalize = |text: &str| {
            let mut lines: Vec<String> = text
                .lines()
                .map(|l| {
                    // `{le="x",node="y"}` (prometheus-client) and `{node="y",le="x"}` (ours).
                    match (l.find("{le=\""), l.find("\",node=")) {
                        (Some(open), Some(comma)) => {
                            let le = &l[open + 1..comma + 1];
                            let close = l.rfind('}').unwrap();
                            let node = &l[comma + 2..close];
                            format!("{}{{{node},{le}}}{}", &l[..open], &l[close + 1..])
                        }
                        _ => l.to_owned(),
                    }
                })
                .collect();
            lines.sort();
            lines
        };
        assert_eq!(normalize(&got), normalize(&want), "{got}\n---\n{want}");
    }

    #[test]
    fn label_values_are_escaped() {
        // prometheus-client writes a quote in a label value as it is, which no parser reads.
        let series = Arc::new(NodeSeries::default());
        series.observe("a\"b\\c\nd", 0.02, 1.0);
        let out = whole(&series);
        assert!(
            out.contains("_last_request_time_seconds{node=\"a\\\"b\\\\c\\nd\"} 1.0\n"),
            "{out}"
        );
        assert_eq!(out.lines().count(), 4 + 14 + 1, "{out}");
    }

    #[test]
    fn node_text_comes_in_parts_of_whole_nodes_in_name_order() {
        let series = Arc::new(NodeSeries::default());
        for i in (0..100).rev() {
            series.observe(&format!("node-{i:03}"), 0.02, f64::from(i));
        }
        let whole = whole(&series);

        let mut text = series.text();
        let mut parts = Vec::new();
        loop {
            let mut part = Vec::new();
            let more = text.write_to(&mut part, 4096);
            parts.push(String::from_utf8(part).unwrap());
            if !more {
                break;
            }
        }
        assert!(!text.write_to(&mut Vec::new(), 4096), "ended");
        assert_eq!(parts.concat(), whole);
        // A part ends after the node that took it past the limit: one node's histogram is
        // ~1.3 KB, so no part is larger than the limit and one node.
        assert!(parts.len() > 5, "{} parts", parts.len());
        // Only the call that finds the end may write nothing: a part that ends a family
        // goes on with the next.
        let (last, written) = parts.split_last().unwrap();
        assert!(last.is_empty() || last.ends_with('\n'));
        for part in written {
            assert!(part.len() < 4096 + 2048, "{}", part.len());
            assert!(part.ends_with('\n'), "{part}");
        }
        // Every node of each family, in name order.
        let nodes = |prefix: &str| -> Vec<String> {
            whole
                .lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| {
                    l[l.find("node=\"").unwrap() + 6..]
                        .split('"')
                        .next()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        let names: Vec<String> = (0..100).map(|i| format!("node-{i:03}")).collect();
        assert_eq!(
            nodes("metrics_server_kubelet_request_duration_seconds_count"),
            names
        );
        assert_eq!(
            nodes("metrics_server_kubelet_last_request_time_seconds{"),
            names
        );
    }

    #[test]
    fn node_text_with_nodes_coming_and_going_between_parts() {
        let series = Arc::new(NodeSeries::default());
        for name in ["a", "c", "e"] {
            series.observe(name, 0.02, 1.0);
        }
        let mut text = series.text();
        let mut out = Vec::new();
        // The head and node "a" of the duration family.
        assert!(text.write_to(&mut out, 1));
        series.observe("0", 0.02, 2.0);
        series.observe("f", 0.02, 2.0);
        series.nodes.lock().remove("c");
        while text.write_to(&mut out, usize::MAX) {}
        let out = String::from_utf8(out).unwrap();
        let count_lines: Vec<&str> = out.lines().filter(|l| l.contains("_count{")).collect();
        // "0" came behind the cursor, "c" went, "f" came ahead of it.
        assert_eq!(count_lines.len(), 3, "{out}");
        assert!(count_lines[1].contains("node=\"e\""));
        assert!(count_lines[2].contains("node=\"f\""));
        // The second family starts over and sees all that is there by then.
        let last_lines = out
            .lines()
            .filter(|l| l.starts_with("metrics_server_kubelet_last_request_time_seconds{"))
            .count();
        assert_eq!(last_lines, 4, "{out}");
        assert_eq!(out.matches("# TYPE").count(), 2);
    }

    #[test]
    fn no_node_yet_still_declares_both_families() {
        let series = Arc::new(NodeSeries::default());
        assert_eq!(whole(&series), format!("{DURATION_HEAD}{LAST_TIME_HEAD}"));
    }

    #[test]
    fn the_lock_is_let_go_every_few_dozen_nodes() {
        // A scrape records its request under the same lock: however large the frame, no
        // more than NODES_PER_LOCK nodes are written while it is held.
        let series = Arc::new(NodeSeries::default());
        for i in 0..3 * NODES_PER_LOCK {
            series.observe(&format!("node-{i:04}"), 0.02, 1.0);
        }
        let mut text = series.text();
        let mut out = Vec::new();
        assert_eq!(text.write_some(&mut out, usize::MAX), Some(true));
        let text_so_far = String::from_utf8(out).unwrap();
        assert_eq!(
            text_so_far.matches("_count{").count(),
            NODES_PER_LOCK,
            "{text_so_far}"
        );
    }

    #[test]
    fn the_terminator_goes_after_the_per_node_families() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry, Duration::from_secs(15));
        metrics.observe_request("n1", Duration::from_millis(30), true, 1.0);
        let text = metrics.exposition(&registry);
        assert!(text.ends_with("_last_request_time_seconds{node=\"n1\"} 1.0\n# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);

        let mut prometheus = String::from("# TYPE a gauge\na 1\n");
        assert_eq!(detach_eof(&mut prometheus), "");
        assert_eq!(prometheus, "# TYPE a gauge\na 1\n");
    }
}
