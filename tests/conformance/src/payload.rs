//! Rendering kubelet payloads in the real shapes of `testdata/kubelet/`. Owned by the parser
//! work; this is the agreed public surface.

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
}

/// Renders a `/metrics/resource` body (kubelet >= 1.29 shape, with HELP/TYPE and
/// `container_start_time_seconds`).
pub fn render_resource(node: &NodeStats) -> String {
    let _ = node;
    String::new()
}

/// Renders a `/stats/summary?only_cpu_and_memory=true` body.
pub fn render_summary(node: &NodeStats) -> String {
    let _ = node;
    String::new()
}
