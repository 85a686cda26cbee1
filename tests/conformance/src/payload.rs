//! Rendering kubelet payloads in the real shapes of `testdata/kubelet/`: what a simulated
//! kubelet serves on `/metrics/resource` and `/stats/summary`.
//!
//! - [`render_resource`] writes the Prometheus text of a kubelet >= 1.29 (HELP/TYPE lines,
//!   families sorted by name, series sorted by label values, Go float formatting such as
//!   `1.253376e+07`, `pod_*` families and `resource_scrape_error 0`).
//! - [`render_summary`] writes the `stats/v1alpha1` JSON like the v1.28/v1.35 captures
//!   (one-space indentation, RFC 3339 times with second precision, as `metav1.Time` has).
//! - [`generated_node`] builds a deterministic synthetic node for benchmarks and load tests.

use std::fmt::Write as _;

use serde::Serialize;

use crate::objects::build::rfc3339;

/// One node's stats at one instant.
#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    /// Node name.
    pub name: String,
    /// When the node sample was taken, Unix ms.
    pub timestamp_ms: i64,
    /// Cumulative node CPU, in seconds.
    pub cpu_seconds_total: f64,
    /// Node working set, bytes.
    pub memory_working_set_bytes: u64,
    /// Pods on the node.
    pub pods: Vec<PodStats>,
    /// When the node (its kubelet's root cgroup) started, Unix seconds; summary `node.startTime`.
    pub start_time_s: f64,
    /// The kubelet's own CPU rate for the node (summary `usageNanoCores`); omitted when `None`,
    /// as on a kubelet's first observation.
    pub cpu_nanocores: Option<u64>,
    /// Swap in use, bytes (`node_swap_usage_bytes`, summary `swap`); omitted when `None`
    /// (swap off, or a kubelet older than 1.30).
    pub swap_bytes: Option<u64>,
}

/// One pod's stats.
#[derive(Clone, Debug, Default)]
pub struct PodStats {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Running containers (and finished init containers, which kubelets report with zeros
    /// in the summary and not at all in `/metrics/resource`).
    pub containers: Vec<ContainerStats>,
}

/// One container's stats.
#[derive(Clone, Debug, Default)]
pub struct ContainerStats {
    /// Container name.
    pub name: String,
    /// Start time, Unix seconds (fractional).
    pub start_time_s: f64,
    /// When sampled, Unix ms.
    pub timestamp_ms: i64,
    /// Cumulative CPU, seconds.
    pub cpu_seconds_total: f64,
    /// Working set, bytes.
    pub memory_working_set_bytes: u64,
    /// A finished init container (rendered as an all-zero stub in the summary only).
    pub terminated: bool,
    /// The kubelet's own CPU rate (summary `usageNanoCores`); omitted when `None`.
    pub cpu_nanocores: Option<u64>,
    /// Swap in use, bytes (`container_swap_usage_bytes`, summary `swap`); omitted when
    /// `None`.
    pub swap_bytes: Option<u64>,
}

const CONTAINER_CPU: &str = "container_cpu_usage_seconds_total";
const CONTAINER_MEMORY: &str = "container_memory_working_set_bytes";
const CONTAINER_START: &str = "container_start_time_seconds";
const CONTAINER_SWAP: &str = "container_swap_usage_bytes";

/// Renders a `/metrics/resource` body (kubelet >= 1.29 shape, with HELP/TYPE and
/// `container_start_time_seconds` carrying the start time as its own timestamp).
pub fn render_resource(node: &NodeStats) -> String {
    // Series of one family sorted by label values in label-name order, as client_golang does.
    let mut containers: Vec<(&PodStats, &ContainerStats)> = node
        .pods
        .iter()
        .flat_map(|p| p.containers.iter().map(move |c| (p, c)))
        .filter(|(_, c)| !c.terminated)
        .collect();
    containers.sort_by(|(pa, ca), (pb, cb)| {
        (&ca.name, &pa.namespace, &pa.name).cmp(&(&cb.name, &pb.namespace, &pb.name))
    });
    let mut pods: Vec<&PodStats> = node
        .pods
        .iter()
        .filter(|p| p.containers.iter().any(|c| !c.terminated))
        .collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut out = String::with_capacity(256 + containers.len() * 420 + pods.len() * 220);
    let container_labels = |out: &mut String, p: &PodStats, c: &ContainerStats| {
        out.push_str("{container=\"");
        escape_label(out, &c.name);
        out.push_str("\",namespace=\"");
        escape_label(out, &p.namespace);
        out.push_str("\",pod=\"");
        escape_label(out, &p.name);
        out.push_str("\"} ");
    };
    let pod_labels = |out: &mut String, p: &PodStats| {
        out.push_str("{namespace=\"");
        escape_label(out, &p.namespace);
        out.push_str("\",pod=\"");
        escape_label(out, &p.name);
        out.push_str("\"} ");
    };

    header(
        &mut out,
        CONTAINER_CPU,
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    );
    for (p, c) in &containers {
        out.push_str(CONTAINER_CPU);
        container_labels(&mut out, p, c);
        sample(&mut out, c.cpu_seconds_total, c.timestamp_ms);
    }
    header(
        &mut out,
        CONTAINER_MEMORY,
        "Current working set of the container in bytes",
        "gauge",
    );
    for (p, c) in &containers {
        out.push_str(CONTAINER_MEMORY);
        container_labels(&mut out, p, c);
        sample(&mut out, c.memory_working_set_bytes as f64, c.timestamp_ms);
    }
    header(
        &mut out,
        CONTAINER_START,
        "Start time of the container since unix epoch in seconds",
        "gauge",
    );
    for (p, c) in &containers {
        out.push_str(CONTAINER_START);
        container_labels(&mut out, p, c);
        sample(&mut out, c.start_time_s, (c.start_time_s * 1000.0) as i64);
    }
    // Kubelet 1.30+ on a node with swap: one more gauge per container, node and pod.
    if containers.iter().any(|(_, c)| c.swap_bytes.is_some()) {
        alpha_header(
            &mut out,
            CONTAINER_SWAP,
            "Current amount of the container swap usage in bytes. Reported only on non-windows systems",
        );
        for (p, c) in &containers {
            if let Some(swap) = c.swap_bytes {
                out.push_str(CONTAINER_SWAP);
                container_labels(&mut out, p, c);
                sample(&mut out, swap as f64, c.timestamp_ms);
            }
        }
    }
    header(
        &mut out,
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        "counter",
    );
    out.push_str("node_cpu_usage_seconds_total ");
    sample(&mut out, node.cpu_seconds_total, node.timestamp_ms);
    header(
        &mut out,
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        "gauge",
    );
    out.push_str("node_memory_working_set_bytes ");
    sample(
        &mut out,
        node.memory_working_set_bytes as f64,
        node.timestamp_ms,
    );
    if let Some(swap) = node.swap_bytes {
        alpha_header(
            &mut out,
            "node_swap_usage_bytes",
            "Current swap usage of the node in bytes. Reported only on non-windows systems",
        );
        out.push_str("node_swap_usage_bytes ");
        sample(&mut out, swap as f64, node.timestamp_ms);
    }
    header(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
    );
    for p in &pods {
        out.push_str("pod_cpu_usage_seconds_total");
        pod_labels(&mut out, p);
        let running = || p.containers.iter().filter(|c| !c.terminated);
        let cpu: f64 = running().map(|c| c.cpu_seconds_total).sum();
        sample(&mut out, cpu, pod_timestamp_ms(p));
    }
    header(
        &mut out,
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        "gauge",
    );
    for p in &pods {
        out.push_str("pod_memory_working_set_bytes");
        pod_labels(&mut out, p);
        let running = || p.containers.iter().filter(|c| !c.terminated);
        let memory: u64 = running().map(|c| c.memory_working_set_bytes).sum();
        sample(&mut out, memory as f64, pod_timestamp_ms(p));
    }
    let pod_swap = |p: &PodStats| {
        let running = p.containers.iter().filter(|c| !c.terminated);
        running.map(|c| c.swap_bytes).sum::<Option<u64>>()
    };
    if pods.iter().any(|p| pod_swap(p).is_some()) {
        alpha_header(
            &mut out,
            "pod_swap_usage_bytes",
            "Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
        );
        for p in &pods {
            if let Some(swap) = pod_swap(p) {
                out.push_str("pod_swap_usage_bytes");
                pod_labels(&mut out, p);
                sample(&mut out, swap as f64, pod_timestamp_ms(p));
            }
        }
    }
    header(
        &mut out,
        "resource_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    out.push_str("resource_scrape_error 0\n");
    out
}

/// The pod cgroup is sampled on its own; use the newest of its containers' times.
fn pod_timestamp_ms(p: &PodStats) -> i64 {
    p.containers
        .iter()
        .filter(|c| !c.terminated)
        .map(|c| c.timestamp_ms)
        .max()
        .unwrap_or(0)
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}");
}

/// The HELP/TYPE lines of an `[ALPHA]` gauge (the swap families).
fn alpha_header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} [ALPHA] {help}\n# TYPE {name} gauge");
}

fn sample(out: &mut String, value: f64, timestamp_ms: i64) {
    go_float(out, value);
    let _ = writeln!(out, " {timestamp_ms}");
}

/// Escapes a label value as the Prometheus text format requires.
fn escape_label(out: &mut String, value: &str) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

/// Writes `value` as Go's `strconv.FormatFloat(value, 'g', -1, 64)` does (what expfmt uses):
/// the shortest digits that round-trip, in exponent form (`1.253376e+07`) when the decimal
/// exponent is < -4 or >= 6 (`eprec = 6` for the shortest precision), else plain
/// (`495616`, `0.092544`).
pub fn go_float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    if value == 0.0 {
        out.push_str(if value.is_sign_negative() { "-0" } else { "0" });
        return;
    }
    // Rust's `{:e}` prints the shortest round-trip digits too: "-1.253376e7".
    let formatted = format!("{value:e}");
    let (mantissa, exponent) = formatted.split_once('e').unwrap_or((&formatted, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if negative {
        out.push('-');
    }
    if !(-4..6).contains(&exponent) {
        out.push_str(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if exponent < 0 {
        out.push_str("0.");
        for _ in 0..(-exponent - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exponent as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
}

/// Renders a `/stats/summary?only_cpu_and_memory=true` body: `node` with `nodeName`,
/// `systemContainers`, `startTime`, `cpu`, `memory`; `pods` with `podRef`, `startTime`,
/// `containers`, `cpu`, `memory`. Terminated init containers are all-zero stubs (cpu and
/// memory with `time` and zero values only), like the Windows capture.
pub fn render_summary(node: &NodeStats) -> String {
    let node_time = rfc3339(node.timestamp_ms.div_euclid(1000));
    let node_memory = node.memory_working_set_bytes;
    let summary = Summary {
        node: Node {
            node_name: &node.name,
            system_containers: vec![SystemContainer {
                name: "kubelet",
                start_time: rfc3339(node.start_time_s as i64),
                cpu: Cpu {
                    time: node_time.clone(),
                    usage_nano_cores: node.cpu_nanocores.map(|n| n / 20),
                    usage_core_nano_seconds: seconds_to_ns(node.cpu_seconds_total) / 20,
                },
                memory: Memory::running(node_time.clone(), node_memory / 16, None),
            }],
            start_time: rfc3339(node.start_time_s as i64),
            cpu: Cpu {
                time: node_time.clone(),
                usage_nano_cores: node.cpu_nanocores,
                usage_core_nano_seconds: seconds_to_ns(node.cpu_seconds_total),
            },
            memory: Memory::running(
                node_time.clone(),
                node_memory,
                Some(node_memory.saturating_mul(4)),
            ),
            swap: node
                .swap_bytes
                .map(|used| Swap::new(node_time, used, Some(1 << 30))),
        },
        pods: node.pods.iter().map(pod).collect(),
    };
    let mut out = Vec::with_capacity(1024 + node.pods.len() * 1500);
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(b" "),
    );
    // Serializing plain structs of strings and integers into a Vec cannot fail.
    let _ = summary.serialize(&mut serializer);
    String::from_utf8(out).unwrap_or_default()
}

fn pod(p: &PodStats) -> Pod<'_> {
    let running: Vec<&ContainerStats> = p.containers.iter().filter(|c| !c.terminated).collect();
    let newest_ms = running.iter().map(|c| c.timestamp_ms).max().unwrap_or(0);
    let time = rfc3339(newest_ms.div_euclid(1000));
    let start_s = p
        .containers
        .iter()
        .map(|c| c.start_time_s as i64)
        .min()
        .unwrap_or(0);
    let memory: u64 = running.iter().map(|c| c.memory_working_set_bytes).sum();
    let cpu: f64 = running.iter().map(|c| c.cpu_seconds_total).sum();
    let nanocores = running.iter().map(|c| c.cpu_nanocores).sum::<Option<u64>>();
    let swap = running.iter().map(|c| c.swap_bytes).sum::<Option<u64>>();
    Pod {
        pod_ref: PodRef {
            name: &p.name,
            namespace: &p.namespace,
            uid: &p.uid,
        },
        start_time: rfc3339(start_s),
        containers: p.containers.iter().map(container).collect(),
        cpu: Cpu {
            time: time.clone(),
            usage_nano_cores: nanocores,
            usage_core_nano_seconds: seconds_to_ns(cpu),
        },
        memory: Memory::running(time.clone(), memory, None),
        swap: swap.map(|used| Swap::new(time, used, None)),
    }
}

fn container(c: &ContainerStats) -> Container<'_> {
    let time = rfc3339(c.timestamp_ms.div_euclid(1000));
    if c.terminated {
        return Container {
            name: &c.name,
            start_time: rfc3339(c.start_time_s as i64),
            cpu: Cpu {
                time: time.clone(),
                usage_nano_cores: Some(0),
                usage_core_nano_seconds: 0,
            },
            memory: Memory {
                time,
                working_set_bytes: 0,
                ..Memory::default()
            },
            swap: None,
        };
    }
    Container {
        name: &c.name,
        start_time: rfc3339(c.start_time_s as i64),
        cpu: Cpu {
            time: time.clone(),
            usage_nano_cores: c.cpu_nanocores,
            usage_core_nano_seconds: seconds_to_ns(c.cpu_seconds_total),
        },
        memory: Memory::running(time.clone(), c.memory_working_set_bytes, None),
        swap: c.swap_bytes.map(|used| Swap::new(time, used, Some(0))),
    }
}

/// Go's `uint64(seconds * 1e9)`, the inverse of what the kubelet divides by.
fn seconds_to_ns(seconds: f64) -> u64 {
    (seconds * 1e9) as u64
}

#[derive(Serialize)]
struct Summary<'a> {
    node: Node<'a>,
    pods: Vec<Pod<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Node<'a> {
    node_name: &'a str,
    system_containers: Vec<SystemContainer>,
    start_time: String,
    cpu: Cpu,
    memory: Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    swap: Option<Swap>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SystemContainer {
    name: &'static str,
    start_time: String,
    cpu: Cpu,
    memory: Memory,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Pod<'a> {
    pod_ref: PodRef<'a>,
    start_time: String,
    containers: Vec<Container<'a>>,
    cpu: Cpu,
    memory: Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    swap: Option<Swap>,
}

#[derive(Serialize)]
struct PodRef<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Container<'a> {
    name: &'a str,
    start_time: String,
    cpu: Cpu,
    memory: Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    swap: Option<Swap>,
}

/// `SwapStats` (kubelet 1.30+): `swapAvailableBytes` is omitted where the kubelet has no
/// limit to report.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Swap {
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    swap_available_bytes: Option<u64>,
    swap_usage_bytes: u64,
}

impl Swap {
    fn new(time: String, used: u64, capacity: Option<u64>) -> Self {
        Swap {
            time,
            swap_available_bytes: capacity.map(|c| c.saturating_sub(used)),
            swap_usage_bytes: used,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Cpu {
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_nano_cores: Option<u64>,
    usage_core_nano_seconds: u64,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Memory {
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_bytes: Option<u64>,
    working_set_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    major_page_faults: Option<u64>,
}

impl Memory {
    /// A running cgroup's memory: usage includes page cache above the working set, RSS is
    /// below it (plausible ratios from the v1.28 capture).
    fn running(time: String, working_set_bytes: u64, limit_bytes: Option<u64>) -> Memory {
        Memory {
            time,
            available_bytes: limit_bytes.map(|l| l.saturating_sub(working_set_bytes)),
            usage_bytes: Some(working_set_bytes + working_set_bytes / 8),
            working_set_bytes,
            rss_bytes: Some(working_set_bytes / 10 * 9),
            page_faults: Some(working_set_bytes / 4096),
            major_page_faults: Some(0),
        }
    }
}

/// A deterministic synthetic node: `pods` pods of `containers_per_pod` running containers,
/// spread over 12 namespaces, with kubelet-like names, values and per-container timestamps
/// that spread over ~19 s (as in the 70-pod capture). Same arguments, same node.
pub fn generated_node(pods: usize, containers_per_pod: usize) -> NodeStats {
    const NOW_MS: i64 = 1_750_607_841_000;
    const CONTAINER_NAMES: [&str; 4] = ["app", "istio-proxy", "log-shipper", "metrics-exporter"];
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut node_cpu_s = 40_000.0;
    let mut node_memory = 1_500_000_000_u64;
    let pods = (0..pods)
        .map(|i| {
            let namespace = format!("team-{:02}", i % 12);
            let hash = next();
            let name = format!(
                "service-{i}-{:08x}-{:05x}",
                ((hash >> 32) as u32) & 0x7fff_ffff,
                hash & 0xf_ffff
            );
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                hash >> 32,
                (hash >> 16) & 0xffff,
                hash & 0xfff,
                next() & 0xfff,
                next() & 0xffff_ffff_ffff
            );
            let pod_start_s = NOW_MS / 1000 - 3600 - (next() % 86_400) as i64;
            let containers = (0..containers_per_pod)
                .map(|j| {
                    let cpu_ns = next() % 2_000_000_000_000 + 1_000_000;
                    let memory = (next() % 500_000 + 1_000) * 4096;
                    node_cpu_s += cpu_ns as f64 / 1e9;
                    node_memory += memory;
                    ContainerStats {
                        name: match CONTAINER_NAMES.get(j) {
                            Some(n) => (*n).to_owned(),
                            None => format!("container-{j}"),
                        },
                        start_time_s: pod_start_s as f64 + (next() % 5_000_000_000) as f64 / 1e9,
                        timestamp_ms: NOW_MS - (next() % 19_000) as i64,
                        cpu_seconds_total: cpu_ns as f64 / 1e9,
                        memory_working_set_bytes: memory,
                        terminated: false,
                        cpu_nanocores: Some(next() % 900_000_000),
                        swap_bytes: None,
                    }
                })
                .collect();
            PodStats {
                namespace,
                name,
                uid,
                containers,
            }
        })
        .collect();
    NodeStats {
        name: "generated-node".to_owned(),
        timestamp_ms: NOW_MS - 2_000,
        cpu_seconds_total: node_cpu_s,
        memory_working_set_bytes: node_memory,
        pods,
        start_time_s: (NOW_MS / 1000 - 7 * 86_400) as f64,
        cpu_nanocores: Some(1_250_000_000),
        swap_bytes: None,
    }
}

#[cfg(test)]
mod tests;
