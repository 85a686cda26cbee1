//! The vocabulary shared by every stage: names, raw kubelet samples and computed usage.
//!
//! Time is always Unix nanoseconds in an `i64` (`*_ns`), taken from the kubelet payload or
//! passed in by the caller; nothing here reads the clock.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::quantity::SHORT;
use crate::scratch::append_prefix;

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

/// One container's usage within a pod, with the canonical strings of its CPU and memory.
///
/// Built by [`ContainerUsage::new`], which writes the strings once (the store does it as it
/// computes the usage): every list writes them, a cluster-wide list 300,000 of them, in JSON
/// and in protobuf alike, as Go's `resource.Quantity` keeps the string it was last written as.
/// The numbers are for reading; changing one would leave its string behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name as the kubelet reported it.
    pub name: Arc<str>,
    /// Average CPU over the container's window, in nanocores.
    pub cpu_nanocores: u64,
    /// Memory working set in bytes.
    pub memory_bytes: u64,
    /// Swap in use in bytes, when the kubelet reported it.
    pub swap_bytes: Option<u64>,
    text: QuantityText,
}

impl ContainerUsage {
    /// A container's usage and its quantity strings.
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
            swap_bytes,
            text: QuantityText::new(cpu_nanocores, memory_bytes),
        }
    }

    /// Appends the CPU's canonical string (`quantity::write_cpu`): a copy of the kept one.
    #[inline]
    pub fn write_cpu(&self, out: &mut Vec<u8>) {
        match self.text.cpu_len {
            0 => crate::quantity::write_cpu(out, self.cpu_nanocores),
            n => append_prefix(out, &self.text.cpu, usize::from(n)),
        }
    }

    /// Appends the memory's canonical string (`quantity::write_memory`): a copy of the kept one.
    #[inline]
    pub fn write_memory(&self, out: &mut Vec<u8>) {
        match self.text.memory_len {
            0 => crate::quantity::write_memory(out, self.memory_bytes),
            n => append_prefix(out, &self.text.memory, usize::from(n)),
        }
    }

    /// The length of [`ContainerUsage::write_cpu`]'s string.
    #[inline]
    pub fn cpu_len(&self) -> usize {
        match self.text.cpu_len {
            0 => crate::quantity::cpu_len(self.cpu_nanocores),
            n => usize::from(n),
        }
    }

    /// The length of [`ContainerUsage::write_memory`]'s string.
    #[inline]
    pub fn memory_len(&self) -> usize {
        match self.text.memory_len {
            0 => crate::quantity::memory_len(self.memory_bytes),
            n => usize::from(n),
        }
    }
}

/// The CPU and memory strings of a container, each in a fixed array so that a copy is a few
/// register moves; a length of 0 (no quantity string is empty) when the string is longer
/// than its array (CPU of 100 cores or more, or memory of 95 GiB or more, to the last
/// nanocore or KiB): the writers format that one from the number.
#[derive(Clone, Copy, PartialEq, Eq)]
struct QuantityText {
    cpu: [u8; 12],
    memory: [u8; 10],
    cpu_len: u8,
    memory_len: u8,
}

impl QuantityText {
    fn new(cpu_nanocores: u64, memory_bytes: u64) -> Self {
        fn keep<const N: usize>(len: Option<usize>, scratch: &[u8; SHORT]) -> ([u8; N], u8) {
            let mut kept = [0u8; N];
            match len {
                Some(n) if n <= N => {
                    kept[..n].copy_from_slice(&scratch[..n]);
                    (kept, n as u8)
                }
                _ => (kept, 0),
            }
        }
        let mut scratch = [0u8; SHORT];
        let (cpu, cpu_len) = keep(
            crate::quantity::cpu_into(&mut scratch, cpu_nanocores),
            &scratch,
        );
        let (memory, memory_len) = keep(
            crate::quantity::memory_into(&mut scratch, memory_bytes),
            &scratch,
        );
        QuantityText {
            cpu,
            memory,
            cpu_len,
            memory_len,
        }
    }
}

impl fmt::Debug for QuantityText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |b: &[u8], n: u8| String::from_utf8_lossy(&b[..usize::from(n)]).into_owned();
        f.debug_struct("QuantityText")
            .field("cpu", &text(&self.cpu, self.cpu_len))
            .field("memory", &text(&self.memory, self.memory_len))
            .finish()
    }
}

/// A pod's usage: every container with data, and the time info of its earliest container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    /// The node whose kubelet reported the pod.
    pub node: NodeName,
    /// Timestamp of the container with the earliest timestamp, Unix ns (metrics-server
    /// `pkg/storage/pod.go`).
    pub timestamp_ns: i64,
    /// That same container's window, ns.
    pub window_ns: i64,
    /// Containers sorted by name.
    pub containers: Containers,
}

/// A pod's containers' usage: up to two inline in the [`PodUsage`] itself (one allocation per
/// pod for the common shapes, and a read touches one block), more on the heap.
pub type Containers = smallvec::SmallVec<[ContainerUsage; 2]>;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::quantity::{cpu_len, memory_len, write_cpu, write_memory};

    /// What a container writes is what the quantity writers write of its numbers, whether
    /// the string was kept or is too long for its array (and the lengths agree).
    fn check(cpu: u64, memory: u64) {
        let c = ContainerUsage::new(Arc::from("c"), cpu, memory, None);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        write_cpu(&mut want, cpu);
        c.write_cpu(&mut got);
        assert_eq!(got, want, "cpu {cpu}");
        assert_eq!(c.cpu_len(), want.len(), "cpu {cpu}");
        assert_eq!(cpu_len(cpu), want.len(), "cpu {cpu}");
        want.clear();
        got.clear();
        write_memory(&mut want, memory);
        c.write_memory(&mut got);
        assert_eq!(got, want, "memory {memory}");
        assert_eq!(c.memory_len(), want.len(), "memory {memory}");
        assert_eq!(memory_len(memory), want.len(), "memory {memory}");
    }

    #[test]
    fn kept_strings_are_the_quantity_strings() {
        let c = ContainerUsage::new(Arc::from("c"), 4_710_169, 12_533_760, None);
        let mut out = Vec::new();
        c.write_cpu(&mut out);
        out.push(b' ');
        c.write_memory(&mut out);
        assert_eq!(out, b"4710169n 12240Ki");
        for cpu in [
            0,
            1,
            999,
            1_000,
            250_000_000,
            1_000_000_000,
            // 11 digits and `n`: the longest kept; one more digit is formatted each time.
            99_999_999_999,
            100_000_000_001,
            u64::MAX / 100,
            u64::MAX / 100 + 1,
            i64::MAX as u64 + 1,
            u64::MAX,
        ] {
            for memory in [
                0,
                1,
                1023,
                1024,
                1025,
                12_533_760,
                // 8 digits and `Ki`: the longest kept; 9 digits are formatted.
                99_999_999 * 1024,
                100_000_001 * 1024,
                9_999_999_999,
                10_000_000_001,
                i64::MAX as u64,
                i64::MAX as u64 + 1,
                u64::MAX,
            ] {
                check(cpu, memory);
            }
        }
    }

    proptest! {
        #[test]
        fn kept_strings_match_at_every_magnitude(
            cpu in any::<u64>(), cpu_shift in 0u32..64,
            memory in any::<u64>(), memory_shift in 0u32..64, pages in any::<bool>(),
        ) {
            let memory = memory >> memory_shift;
            check(cpu >> cpu_shift, if pages { memory & !4095 } else { memory });
        }
    }
}
