//! The vocabulary shared by every stage: names, raw kubelet samples and computed usage.
//!
//! Time is always Unix nanoseconds in an `i64` (`*_ns`), taken from the kubelet payload or
//! passed in by the caller; nothing here reads the clock.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// A node's name, cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeName(pub Arc<str>);

impl NodeName {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for NodeName {
    fn from(s: &str) -> Self {
        NodeName(Arc::from(s))
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::borrow::Borrow<str> for NodeName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A pod's identity: namespace, then name (the sort order of every pod list).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct PodKey {
    /// `metadata.namespace`
    pub namespace: Arc<str>,
    /// `metadata.name`
    pub name: Arc<str>,
}

impl PodKey {
    /// Builds a key from borrowed parts.
    pub fn new(namespace: &str, name: &str) -> Self {
        PodKey {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One raw sample of a node or a container, as the kubelet reported it.
///
/// Mirrors metrics-server's `MetricsPoint` (`pkg/storage/types.go`), with presence kept
/// explicit so the store, not the parser, decides what is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// When the sample was taken (the sample's own timestamp, or the request time when the
    /// payload carries none), Unix nanoseconds.
    pub timestamp_ns: i64,
    /// Cumulative CPU time in nanoseconds: `*_cpu_usage_seconds_total` x 1e9, or the summary's
    /// `usageCoreNanoSeconds`.
    pub cpu_usage_ns_total: Option<u64>,
    /// Instantaneous CPU rate the kubelet computed itself (summary `usageNanoCores`), if any.
    pub cpu_nanocores: Option<u64>,
    /// Memory working set in bytes (`*_memory_working_set_bytes`, summary `workingSetBytes`).
    pub memory_working_set_bytes: Option<u64>,
    /// Container start time (`container_start_time_seconds`, summary `startTime`), Unix ns.
    pub start_time_ns: Option<i64>,
    /// Swap in use, bytes (`*_swap_usage_bytes`, summary `swap.swapUsageBytes`; kubelet
    /// 1.30+), when the kubelet reported it.
    pub swap_bytes: Option<u64>,
}

/// One container's sample within a node's scrape, borrowed from the response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSample<'a> {
    /// Pod namespace (the `namespace` label / `podRef.namespace`).
    pub namespace: Cow<'a, str>,
    /// Pod name (the `pod` label / `podRef.name`).
    pub pod: Cow<'a, str>,
    /// Container name (the `container` label / `containers[].name`).
    pub container: Cow<'a, str>,
    /// The values.
    pub sample: Sample,
}

/// Everything one scrape of one kubelet yielded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeScrape<'a> {
    /// The node-level sample, when the payload had one.
    pub node: Option<Sample>,
    /// Every container sample, in payload order; one entry per (namespace, pod, container).
    pub containers: Vec<ContainerSample<'a>>,
}

/// Usage computed from two samples (or one, with the fresh-container shortcut), ready to serve.
///
/// Mirrors metrics-server's `resourceUsage` result (`pkg/storage/types.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// End of the measurement window (the newer sample's timestamp), Unix ns.
    pub timestamp_ns: i64,
    /// Length of the measurement window in nanoseconds (newer minus older timestamp).
    pub window_ns: i64,
    /// Average CPU over the window, in nanocores (truncated, as metrics-server does).
    pub cpu_nanocores: u64,
    /// Memory working set of the newer sample, in bytes.
    pub memory_bytes: u64,
    /// Swap in use of the newer sample, in bytes, when the kubelet reported it (a gauge,
    /// like memory).
    pub swap_bytes: Option<u64>,
}

/// One container's usage within a pod.
#[derive(Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name as the kubelet reported it.
    pub name: Arc<str>,
    /// Average CPU over the container's window, in nanocores.
    pub cpu_nanocores: u64,
    /// Memory working set in bytes.
    pub memory_bytes: u64,
    /// Swap in use in bytes; [`NO_SWAP`] when the kubelet reported none. 8 bytes where an
    /// `Option<u64>` takes 16: two containers and their [`PodUsage`] fit the allocation
    /// they took before [`PodUsage::containers_len`] was added.
    swap: u64,
}

/// [`ContainerUsage`]'s and the store's mark of "no swap reported" (a kubelet reporting
/// 2^64 - 1 bytes of swap, or more, is read as reporting none).
pub const NO_SWAP: u64 = u64::MAX;

impl ContainerUsage {
    /// A container's usage; `swap_bytes` where the kubelet reported it.
    pub fn new(
        name: Arc<str>,
        cpu_nanocores: u64,
        memory_bytes: u64,
        swap_bytes: Option<u64>,
    ) -> Self {
        ContainerUsage {
            name,
            cpu_nanocores,
            memory_bytes,
            swap: swap_bytes.unwrap_or(NO_SWAP),
        }
    }

    /// Swap in use in bytes, when the kubelet reported it.
    #[inline]
    pub fn swap_bytes(&self) -> Option<u64> {
        Some(self.swap).filter(|&b| b != NO_SWAP)
    }
}

/// Shows swap as reported (`None`), not as the stored mark.
impl std::fmt::Debug for ContainerUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerUsage")
            .field("name", &self.name)
            .field("cpu_nanocores", &self.cpu_nanocores)
            .field("memory_bytes", &self.memory_bytes)
            .field("swap_bytes", &self.swap_bytes())
            .finish()
    }
}

/// A pod's usage: every container with data, and the time info of its earliest container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    /// Timestamp of the container with the earliest timestamp, Unix ns (metrics-server
    /// `pkg/storage/pod.go`).
    pub timestamp_ns: i64,
    /// That same container's window, ns.
    pub window_ns: i64,
    /// Containers sorted by name.
    pub containers: Containers,
    /// `containers`' length in the API server's encoding, as the store's
    /// [`crate::store::Config::measure`] gave it when the usage was built; 0 when there is
    /// no measure. A list that needs its length before its first byte (protobuf's) reads
    /// this instead of every container's memory.
    pub containers_len: u32,
}

// A usage of up to two containers, with its `Arc` counts (16 bytes) and malloc's header
// (8), fits one 144-byte heap block as long as it is at most 120 bytes: 150,000 pods' usage
// is much of a 5,000-node server's memory, and the next block size (160) would cost ~0.5 KiB
// per node.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PodUsage>() <= 120);

/// A pod's containers' usage: up to two inline in the [`PodUsage`] itself (one allocation per
/// pod for the common shapes, and a read touches one block), more on the heap.
pub type Containers = smallvec::SmallVec<[ContainerUsage; 2]>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Swap reads back as it was given: none stays none, zero stays a reported zero (kubectl
    /// shows `0Mi` for it), and the debug form shows what was reported, not the mark.
    #[test]
    fn container_swap_reads_back_as_reported() {
        for swap in [None, Some(0), Some(1), Some(NO_SWAP - 1)] {
            let c = ContainerUsage::new(Arc::from("app"), 5, 7, swap);
            assert_eq!(c.swap_bytes(), swap);
            assert!(
                format!("{c:?}").contains(&format!("swap_bytes: {swap:?}")),
                "{c:?}"
            );
        }
    }
}
