//! `/metrics`: one `prometheus_client` registry shared by every part of the server (passed in
//! from `run`), served as Prometheus text 0.0.4 (what metrics-server's e2e parses with
//! `expfmt`) or, when asked for, OpenMetrics 1.0.0. Also the process metrics and the
//! request counters this module owns.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::BodyExt as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use scraper::metrics::{NodeSeries, NodeText, detach_eof};

use crate::api::body::{Frames, Streamed};
use crate::body::Body;

/// `Content-Type` of the Prometheus text format, as Go's `expfmt.FmtText`.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels of `apiserver_request_total`, as k8s.io/apiserver's `endpoints/metrics` has them, in
/// the order client_golang writes them (by name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP status code.
    pub code: u16,
    #[prometheus(flatten)]
    kind: RequestKind,
}

/// What a request was, in k8s.io/apiserver's terms (`MonitorRequest`): the labels of
/// `apiserver_request_duration_seconds`, and with the code those of `apiserver_request_total`.
/// Bounded values only, never an echo of the path.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestKind {
    /// `apiserver` for the API's resources (`APIServerComponent`), empty for the health roots.
    pub component: &'static str,
    /// The request's `dryRun` values: empty, `All`, or `invalid` (`cleanDryRun`).
    pub dry_run: &'static str,
    /// `metrics.k8s.io` for the API's resources, else empty.
    pub group: &'static str,
    /// `nodes` or `pods` for the API's resources, else empty.
    pub resource: &'static str,
    /// `resource` (a named object), `namespace` (a namespaced list), `cluster` (a
    /// cluster-wide list), or empty for the health roots (`CleanScope`).
    pub scope: &'static str,
    /// Empty for the API's resources (they have none); the path for the health roots, as
    /// `healthz.InstallPathHandler` instruments them.
    pub subresource: &'static str,
    /// Upper case, as monitoring of kube-apiserver expects: `LIST` for a list (and `WATCH`
    /// when it asks to watch), `GET` for one object or a health root, else the method;
    /// methods k8s.io/apiserver does not know are `other` (`CanonicalVerb`, `cleanVerb`).
    pub verb: &'static str,
    /// `v1` or `v1beta1` for the API's resources, else empty.
    pub version: &'static str,
}

impl RequestKind {
    /// The kind of a request that k8s.io/apiserver counts in `apiserver_request_total`, or
    /// `None`: it counts the requests its instrumented routes serve, the API's resources
    /// (`InstrumentRouteFunc`) and the `/healthz`, `/livez` and `/readyz` roots
    /// (`InstrumentHandlerFunc`), not discovery, OpenAPI, `/metrics` or a path no route
    /// serves.
    pub fn of(method: &http::Method, uri: &http::Uri) -> Option<Self> {
        let path = uri.path();
        if matches!(path, "/healthz" | "/livez" | "/readyz") {
            return Some(RequestKind {
                component: "",
                dry_run: dry_run(uri.query()),
                group: "",
                resource: "",
                scope: "",
                subresource: health_root(path),
                verb: verb(method, "", uri.query()),
                version: "",
            });
        }
        let mut parts = path.strip_prefix("/apis/metrics.k8s.io/")?.split('/');
        let version = match parts.next() {
            Some("v1") => "v1",
            Some("v1beta1") => "v1beta1",
            _ => return None,
        };
        // At most four segments after the version: no allocation on every request.
        let mut segments = [""; 4];
        let mut n = 0;
        for segment in parts {
            *segments.get_mut(n)? = segment;
            n += 1;
        }
        let (resource, scope) = match &segments[..n] {
            ["nodes"] => ("nodes", "cluster"),
            ["nodes", _] => ("nodes", "resource"),
            ["pods"] => ("pods", "cluster"),
            ["namespaces", _, "pods"] => ("pods", "namespace"),
            ["namespaces", _, "pods", _] => ("pods", "resource"),
            _ => return None,
        };
        Some(RequestKind {
            component: "apiserver",
            dry_run: dry_run(uri.query()),
            group: "metrics.k8s.io",
            resource,
            scope,
            subresource: "",
            verb: verb(method, scope, uri.query()),
            version,
        })
    }
}

/// The health root `path` as a `'static` label value.
fn health_root(path: &str) -> &'static str {
    match path {
        "/healthz" => "/healthz",
        "/livez" => "/livez",
        _ => "/readyz",
    }
}

/// k8s.io/apiserver's reported verb: `CanonicalVerb` (a GET or HEAD of a list is `LIST`),
/// then `cleanVerb` (a GET whose `watch` is true as `Convert_Slice_string_To_bool` reads it
/// is `WATCH`; a method outside its known verbs is `other`).
fn verb(method: &http::Method, scope: &str, query: Option<&str>) -> &'static str {
    let list = !matches!(scope, "" | "resource");
    match *method {
        http::Method::GET if crate::api::query::flag(query, "watch") => "WATCH",
        http::Method::GET | http::Method::HEAD if list => "LIST",
        http::Method::GET | http::Method::HEAD => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        http::Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// `cleanDryRun`: no `dryRun` parameter is empty; values that are all `All` (the only dry
/// run there is) are `All`; anything else is `invalid`.
fn dry_run(query: Option<&str>) -> &'static str {
    let mut values = crate::api::query::values(query, "dryRun").peekable();
    if values.peek().is_none() {
        ""
    } else if values.all(|v| v == "All") {
        "All"
    } else {
        "invalid"
    }
}

/// The request metrics: `apiserver_request_total` and `apiserver_request_duration_seconds`.
#[derive(Clone, Debug)]
pub struct Requests {
    total: Family<RequestLabels, Counter>,
    duration: Family<RequestKind, Histogram>,
}

/// Request latency buckets, seconds: k8s.io/apiserver's, chosen for its latency SLOs.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

impl Requests {
    /// Creates and registers the request metric families.
    pub fn new(registry: &mut Registry) -> Self {
        let total = Family::<RequestLabels, Counter>::default();
        let duration: Family<RequestKind, Histogram> =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS));
        registry.register(
            "apiserver_request",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, \
             group, version, resource, scope, component, and HTTP response code",
            total.clone(),
        );
        registry.register_with_unit(
            "apiserver_request_duration",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, \
             group, version, resource, subresource, scope and component",
            Unit::Seconds,
            duration.clone(),
        );
        Requests { total, duration }
    }

    /// Records one finished request.
    pub fn observe(&self, kind: RequestKind, code: u16, elapsed: Duration) {
        self.total
            .get_or_create(&RequestLabels { code, kind })
            .inc();
        self.duration
            .get_or_create(&kind)
            .observe(elapsed.as_secs_f64());
    }
}

/// Registers the `process_*` metrics (read from `/proc/self` on each scrape).
pub fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// `process_*` metrics as Go's client_golang process collector names them.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = process::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(p.cpu_seconds_total);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds.",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<Unit>, f64); 5] = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(Unit::Bytes),
                p.resident_memory_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                p.virtual_memory_bytes,
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(Unit::Seconds),
                p.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                p.max_fds,
            ),
        ];
        for (name, help, unit, value) in gauges {
            if value.is_nan() {
                continue;
            }
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Reading `/proc/self`.
mod process {
    /// One reading; NaN where a value could not be read.
    pub(super) struct Reading {
        pub(super) cpu_seconds_total: f64,
        pub(super) resident_memory_bytes: f64,
        pub(super) virtual_memory_bytes: f64,
        pub(super) start_time_seconds: f64,
        pub(super) open_fds: f64,
        pub(super) max_fds: f64,
    }

    pub(super) fn read() -> Option<Reading> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the `(comm)`, which may itself contain spaces and parentheses.
        let after_comm = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        // Field numbers from proc(5), minus the 2 before `state` (pid, comm), minus 1.
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
        let ticks = clock_ticks_per_second();
        let cpu = match (field(14), field(15)) {
            (Some(utime), Some(stime)) => (utime + stime) / ticks,
            _ => f64::NAN,
        };
        let start = match (field(22), boot_time_seconds()) {
            (Some(start_ticks), Some(boot)) => boot + start_ticks / ticks,
            _ => f64::NAN,
        };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map_or(f64::NAN, |v| v * 1024.0)
        };
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(f64::NAN, |d| d.count() as f64);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| {
                let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
                line["Max open files".len()..]
                    .split_whitespace()
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(f64::NAN);
        Some(Reading {
            cpu_seconds_total: cpu,
            resident_memory_bytes: kib("VmRSS:"),
            virtual_memory_bytes: kib("VmSize:"),
            start_time_seconds: start,
            open_fds,
            max_fds,
        })
    }

    /// `sysconf(_SC_CLK_TCK)` from the auxiliary vector (`AT_CLKTCK`), else Linux's 100.
    fn clock_ticks_per_second() -> f64 {
        const AT_CLKTCK: u64 = 17;
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        auxv.chunks_exact(16)
            .find_map(|pair| {
                let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
                let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
                (key == AT_CLKTCK && value > 0).then_some(value as f64)
            })
            .unwrap_or(100.0)
    }

    fn boot_time_seconds() -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()
    }
}

/// Which text format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4 (the default, what `expfmt` and metrics-server serve).
    Prometheus,
    /// OpenMetrics 1.0.0 text, with its `# EOF` terminator.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the `Accept` header names it, else Prometheus text.
    pub fn negotiate(accept: Option<&HeaderValue>) -> Self {
        match accept.and_then(|a| a.to_str().ok()) {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }
}

/// Encodes the registry in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut openmetrics = String::new();
    prometheus_client::encoding::text::encode(&mut openmetrics, registry)?;
    Ok(match format {
        Format::OpenMetrics => openmetrics,
        Format::Prometheus => to_prometheus_text(&openmetrics),
    })
}

/// The `/metrics` response: `registry`'s families, then `nodes`' (those with a series per
/// node, ~15 lines each), which are written a frame at a time as the client reads them.
pub fn response(
    registry: &Registry,
    nodes: Option<&Arc<NodeSeries>>,
    accept: Option<&HeaderValue>,
) -> Response<Body> {
    let format = Format::negotiate(accept);
    match encode(registry, format) {
        Ok(mut text) => {
            let body = match nodes {
                None => crate::body::full(text),
                Some(nodes) => {
                    let tail = detach_eof(&mut text);
                    let frames = NodeFrames {
                        text: nodes.text(),
                        tail: tail.as_bytes(),
                        done: false,
                    };
                    Streamed::new(frames, Some(Bytes::from(text))).boxed()
                }
            };
            let mut response = Response::new(body);
            let content_type = match format {
                Format::Prometheus => PROMETHEUS_TEXT,
                Format::OpenMetrics => OPENMETRICS_TEXT,
            };
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            response
        }
        Err(_) => crate::status::Status::internal("encoding metrics failed").into_response(),
    }
}

/// The per-node families' frames, then the document's tail.
struct NodeFrames {
    text: NodeText,
    tail: &'static [u8],
    done: bool,
}

impl Frames for NodeFrames {
    fn fill(&mut self, out: &mut Vec<u8>, target: usize) {
        if !self.text.write_to(out, target) {
            out.extend_from_slice(self.tail);
            self.done = true;
        }
    }

    fn done(&self) -> bool {
        self.done
    }
}

/// Rewrites `prometheus_client`'s OpenMetrics text as Prometheus text 0.0.4: counter families
/// are named after their `_total` samples, `# UNIT` lines and the `# EOF` terminator go,
/// `unknown` becomes `untyped`, `info` becomes a gauge, and exemplars are dropped.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, pending_help.take(), None);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            pending_help = Some((name, help));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
                "counter" => (name.to_owned(), "counter"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_owned(), "gauge"),
                _ => (name.to_owned(), "untyped"),
            };
            let help = pending_help
                .take()
                .filter(|(n, _)| *n == rest.split(' ').next().unwrap_or(""));
            flush_help(&mut out, help, Some(&name));
            let _ = writeln!(out, "# TYPE {name} {kind}");
        } else if line.starts_with("# UNIT ") || line == "# EOF" || line.is_empty() {
            continue;
        } else if line.starts_with('#') {
            flush_help(&mut out, pending_help.take(), None);
        } else {
            flush_help(&mut out, pending_help.take(), None);
            out.push_str(strip_exemplar(line));
            out.push('\n');
        }
    }
    flush_help(&mut out, pending_help.take(), None);
    out
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>, rename: Option<&str>) {
    if let Some((name, text)) = help {
        let _ = writeln!(out, "# HELP {} {}", rename.unwrap_or(name), text);
    }
}

/// A sample line without its ` # {...} value` exemplar, if any.
fn strip_exemplar(line: &str) -> &str {
    // Skip the label set, whose quoted values may contain " # ".
    let mut end_of_labels = 0;
    if let Some(open) = line.find('{') {
        let name_part = &line[..open];
        if !name_part.contains(' ') {
            let mut in_quotes = false;
            let mut escaped = false;
            for (i, c) in line[open..].char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' if in_quotes => escaped = true,
                    '"' => in_quotes = !in_quotes,
                    '}' if !in_quotes => {
                        end_of_labels = open + i;
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    match line[end_of_labels..].find(" # ") {
        Some(i) => &line[..end_of_labels + i],
        None => line,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn counters_are_named_after_their_samples_and_eof_goes() {
        let mut registry = Registry::default();
        let requests = Requests::new(&mut registry);
        requests.observe(
            kind(&http::Method::GET, "/apis/metrics.k8s.io/v1beta1/nodes").unwrap(),
            200,
            Duration::from_millis(3),
        );
        let g: Gauge = Gauge::default();
        g.set(7);
        registry.register("metrics_server_storage_points", "[ALPHA] points", g);
        let text = encode(&registry, Format::Prometheus).unwrap();
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        assert!(
            text.contains("# TYPE apiserver_request_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP apiserver_request_total [STABLE] Counter of"),
            "{text}"
        );
        // k8s.io/apiserver's labels, in the order client_golang writes them.
        assert!(
            text.contains(
                "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",\
                 group=\"metrics.k8s.io\",resource=\"nodes\",scope=\"cluster\",\
                 subresource=\"\",verb=\"LIST\",version=\"v1beta1\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE apiserver_request_duration_seconds histogram\n"));
        assert!(
            text.contains(
                "apiserver_request_duration_seconds_bucket{le=\"0.005\",component=\"apiserver\",\
                 dry_run=\"\",group=\"metrics.k8s.io\",resource=\"nodes\",scope=\"cluster\",\
                 subresource=\"\",verb=\"LIST\",version=\"v1beta1\"} 1\n"
            ),
            "{text}"
        );
        assert_eq!(
            text.matches("apiserver_request_duration_seconds_bucket{")
                .count(),
            24,
            "k8s.io/apiserver's 23 buckets and +Inf: {text}"
        );
        assert!(text.contains(
            "# TYPE metrics_server_storage_points gauge\nmetrics_server_storage_points 7\n"
        ));
        let om = encode(&registry, Format::OpenMetrics).unwrap();
        assert!(om.ends_with("# EOF\n"));
    }

    #[test]
    fn conversion_handles_every_openmetrics_shape() {
        let om = "# HELP a_thing A thing.\n# TYPE a_thing counter\n# UNIT a_thing things\n\
                  a_thing_total{x=\"a # b\"} 3 # {trace=\"1\"} 1.0\n\
                  # HELP b B.\n# TYPE b unknown\nb 1\n\
                  # HELP c C.\n# TYPE c info\nc_info{v=\"1\"} 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_thing_total A thing.\n# TYPE a_thing_total counter\n\
             a_thing_total{x=\"a # b\"} 3\n\
             # HELP b B.\n# TYPE b untyped\nb 1\n\
             # HELP c_info C.\n# TYPE c_info gauge\nc_info{v=\"1\"} 1\n"
        );
    }

    /// `RequestKind::of` on a path with an optional query.
    fn kind(method: &http::Method, path_and_query: &str) -> Option<RequestKind> {
        RequestKind::of(method, &http::Uri::try_from(path_and_query).unwrap())
    }

    #[test]
    fn requests_are_classified_as_k8s_io_apiserver_reports_them() {
        let get = http::Method::GET;
        let labels = |k: Option<RequestKind>| {
            let k = k.unwrap();
            (k.verb, k.version, k.resource, k.scope, k.component)
        };
        let api = "/apis/metrics.k8s.io";
        assert_eq!(
            labels(kind(
                &get,
                &format!("{api}/v1/namespaces/kube-system/pods/p1")
            )),
            ("GET", "v1", "pods", "resource", "apiserver")
        );
        assert_eq!(
            labels(kind(
                &get,
                &format!("{api}/v1beta1/namespaces/ns/pods?labelSelector=a")
            )),
            ("LIST", "v1beta1", "pods", "namespace", "apiserver")
        );
        assert_eq!(
            labels(kind(&get, &format!("{api}/v1beta1/pods"))),
            ("LIST", "v1beta1", "pods", "cluster", "apiserver")
        );
        assert_eq!(
            labels(kind(&get, &format!("{api}/v1beta1/nodes/n1"))),
            ("GET", "v1beta1", "nodes", "resource", "apiserver")
        );
        assert_eq!(
            labels(kind(&http::Method::HEAD, &format!("{api}/v1/nodes"))),
            ("LIST", "v1", "nodes", "cluster", "apiserver")
        );
        // A watch is WATCH whatever the route does with it; `watch=false` and `0` are not.
        for (query, verb) in [
            ("watch=true", "WATCH"),
            ("watch", "WATCH"),
            ("watch=1&watch=false", "WATCH"),
            ("watch=FALSE", "LIST"),
            ("watch=0", "LIST"),
            ("watching=true", "LIST"),
        ] {
            let k = kind(&get, &format!("{api}/v1/pods?{query}")).unwrap();
            assert_eq!(k.verb, verb, "{query}");
        }
        // Methods are upper case; those k8s.io/apiserver does not know are `other`.
        assert_eq!(
            kind(&http::Method::POST, &format!("{api}/v1/pods"))
                .unwrap()
                .verb,
            "POST"
        );
        assert_eq!(
            kind(&http::Method::OPTIONS, &format!("{api}/v1/pods"))
                .unwrap()
                .verb,
            "other"
        );
        // dryRun: empty, All, or invalid.
        for (query, dry_run) in [
            ("", ""),
            ("?dryRun=All", "All"),
            ("?dryRun=All&dryRun=All", "All"),
            ("?dryRun=all", "invalid"),
            ("?dryRun=", "invalid"),
            ("?dryRun=All&dryRun=x", "invalid"),
        ] {
            let k = kind(&get, &format!("{api}/v1/nodes{query}")).unwrap();
            assert_eq!(k.dry_run, dry_run, "{query}");
        }
        // The health roots, with their path as the subresource and no component.
        let k = kind(&get, "/readyz?verbose").unwrap();
        assert_eq!(
            (k.verb, k.subresource, k.scope, k.component, k.group),
            ("GET", "/readyz", "", "", "")
        );
        // What k8s.io/apiserver does not count: discovery, OpenAPI, /metrics, health checks
        // below the roots, and paths no route serves (never an echo of the path).
        for path in [
            "/apis/metrics.k8s.io/v1beta1",
            "/apis",
            "/openapi/v2",
            "/metrics",
            "/livez/ping",
            "/apis/metrics.k8s.io/v2/nodes",
            "/apis/metrics.k8s.io/v1/secrets",
            "/apis/metrics.k8s.io/v1/namespaces/ns/pods/p1/extra",
            "/apis/metrics.k8s.io/v1/namespaces/ns/pods/p1/a/b/c",
            "/random/x",
        ] {
            assert_eq!(kind(&get, path), None, "{path}");
        }
    }

    #[test]
    fn process_metrics_are_read_from_proc() {
        let mut registry = Registry::default();
        register_process_metrics(&mut registry);
        let text = encode(&registry, Format::Prometheus).unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing in {text}"))
                .parse()
                .unwrap()
        };
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        // Started within the last day, after 2020.
        let start = value("process_start_time_seconds");
        let now = scraper::clock::unix_now_ns() as f64 / 1e9;
        assert!(
            start > 1.6e9 && start <= now + 1.0 && now - start < 86_400.0,
            "{start}"
        );
    }

    #[test]
    fn negotiates_openmetrics_only_when_asked() {
        let om =
            HeaderValue::from_static("application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
        assert_eq!(Format::negotiate(Some(&om)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some(&HeaderValue::from_static("*/*"))),
            Format::Prometheus
        );
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        let registry = Registry::default();
        let r = response(&registry, None, None);
        assert_eq!(r.headers()[header::CONTENT_TYPE], PROMETHEUS_TEXT);
    }

    /// The whole body of `response`, and its frames' sizes.
    fn drain(response: Response<Body>) -> (String, Vec<usize>) {
        let mut body = std::pin::pin!(response.into_body());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let (mut text, mut frames) = (Vec::new(), Vec::new());
        while let std::task::Poll::Ready(Some(Ok(frame))) =
            http_body::Body::poll_frame(body.as_mut(), &mut cx)
        {
            let data = frame.into_data().unwrap();
            frames.push(data.len());
            text.extend_from_slice(&data);
        }
        (String::from_utf8(text).unwrap(), frames)
    }

    #[test]
    fn per_node_families_are_streamed_after_the_registry_in_both_formats() {
        let mut registry = Registry::default();
        let metrics = scraper::metrics::Metrics::new(&mut registry, Duration::from_secs(15));
        let nodes = 2_000;
        for i in 0..nodes {
            metrics.observe_request(
                &format!("node-{i:05}"),
                Duration::from_millis(30),
                true,
                1.7e9,
            );
        }
        let series = metrics.node_series();
        let mut per_node = Vec::new();
        series.write_all(&mut per_node);
        let per_node = String::from_utf8(per_node).unwrap();

        let accept = HeaderValue::from_static("application/openmetrics-text;version=1.0.0");
        for (accept, format) in [
            (None, Format::Prometheus),
            (Some(&accept), Format::OpenMetrics),
        ] {
            let (text, frames) = drain(response(&registry, Some(&series), accept));
            let head = encode(&registry, format).unwrap();
            let head = head.strip_suffix("# EOF\n").unwrap_or(&head);
            let tail = if format == Format::OpenMetrics {
                "# EOF\n"
            } else {
                ""
            };
            assert_eq!(text, format!("{head}{per_node}{tail}"), "{format:?}");
            // ~2.9 MB in frames of about a list's, none much larger.
            assert!(text.len() > 2_000_000, "{}", text.len());
            assert!(frames.len() > 10, "{format:?}: {frames:?}");
            let limit = crate::api::body::CHUNK_BYTES + crate::api::body::FRAME_SLACK_BYTES;
            assert!(frames.iter().all(|&n| n <= limit), "{frames:?}");
            // Every node in each family, and the families once each.
            assert_eq!(
                text.matches("metrics_server_kubelet_request_duration_seconds_count{")
                    .count(),
                nodes
            );
            assert_eq!(
                text.matches("metrics_server_kubelet_last_request_time_seconds{")
                    .count(),
                nodes
            );
            assert_eq!(
                text.matches("# TYPE metrics_server_kubelet_request_duration_seconds ")
                    .count(),
                1
            );
        }
    }
}
