//! A workload model driven by a time parameter (no hidden clock): CPU counters grow at a
//! configured rate, memory wanders within bounds, containers restart (counter reset and a
//! new start time).
//!
//! Stats are sampled the way a kubelet's cAdvisor samples them: each container, and the
//! node's root cgroup, is refreshed on its own housekeeping timer ([`SimNode::housekeeping`]),
//! so a request between two refreshes sees the values and timestamps of the last one.

use std::time::Duration;

use crate::payload::{ContainerStats, NodeStats, PodStats};

/// cAdvisor's default `--housekeeping_interval`, which the kubelet keeps.
pub const DEFAULT_HOUSEKEEPING: Duration = Duration::from_secs(10);

/// One node's workload.
#[derive(Clone, Debug)]
pub struct SimNode {
    /// Node name.
    pub name: String,
    /// When the node booted, Unix ms (its CPU counter starts here).
    pub boot_ms: i64,
    /// CPU the node uses outside pods, in cores.
    pub system_cpu_cores: f64,
    /// Memory the node uses outside pods, bytes.
    pub system_memory_bytes: u64,
    /// Pods.
    pub pods: Vec<SimPod>,
    /// How often stats are refreshed (cAdvisor `--housekeeping_interval`, whole milliseconds;
    /// [`DEFAULT_HOUSEKEEPING`] by default). Each container, and the node's own sample, is
    /// refreshed at `phase + k * housekeeping` with its own phase in `[0, housekeeping)`
    /// hashed from the node, pod and container names; a request gets what the last refresh
    /// saw. Zero (or under 1 ms) samples everything at the request's time.
    pub housekeeping: Duration,
    /// Swap the node uses outside pods, bytes, on a node with swap on (NodeSwap, kubelet
    /// 1.30+): its kubelet then reports `*_swap_usage_bytes` for the node and every
    /// container. `None`: swap off, no swap series at all.
    pub system_swap_bytes: Option<u64>,
}

impl Default for SimNode {
    /// An empty node booted at the epoch, refreshed every [`DEFAULT_HOUSEKEEPING`].
    fn default() -> Self {
        SimNode {
            name: String::new(),
            boot_ms: 0,
            system_cpu_cores: 0.0,
            system_memory_bytes: 0,
            pods: Vec::new(),
            housekeeping: DEFAULT_HOUSEKEEPING,
            system_swap_bytes: None,
        }
    }
}

/// One pod.
#[derive(Clone, Debug, Default)]
pub struct SimPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Containers.
    pub containers: Vec<SimContainer>,
}

/// One container.
#[derive(Clone, Debug, Default)]
pub struct SimContainer {
    /// Name.
    pub name: String,
    /// When it first started, Unix ms; absent from the stats before that.
    pub created_ms: i64,
    /// CPU use, in cores (the counter grows by this many seconds per second).
    pub cpu_cores: f64,
    /// Relative amplitude (0 to 1) of a slow swing of the CPU rate around `cpu_cores`, over
    /// ten memory periods; 0 keeps the rate constant (what accuracy checks want).
    pub cpu_wobble: f64,
    /// Memory working set lower bound, bytes.
    pub memory_min_bytes: u64,
    /// Memory working set upper bound, bytes.
    pub memory_max_bytes: u64,
    /// Memory oscillation period (defaults to 5 minutes when zero).
    pub memory_period: Duration,
    /// Restarts this often after `created_ms` (counter reset, new start time).
    pub restart_every: Option<Duration>,
    /// Restarts at these times besides, Unix ms, ascending ([`SimContainer::restart_at`]).
    pub restarted_ms: Vec<i64>,
    /// Swap in use, bytes, when its node has swap on (a gauge; 0 for most containers).
    pub swap_bytes: u64,
}

impl SimContainer {
    /// When the current incarnation started, Unix ms, or `None` before creation.
    pub fn started_ms(&self, now_ms: i64) -> Option<i64> {
        if now_ms < self.created_ms {
            return None;
        }
        let every = self
            .restart_every
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .filter(|&ms| ms > 0);
        let periodic = match every {
            Some(every) => self.created_ms + (now_ms - self.created_ms) / every * every,
            None => self.created_ms,
        };
        let explicit = self.restarted_ms.iter().rev().find(|&&t| t <= now_ms);
        Some(explicit.map_or(periodic, |&t| t.max(periodic)))
    }

    /// Restarts it at `at_ms` (after its creation and every earlier restart).
    pub fn restart_at(&mut self, at_ms: i64) {
        let last = self.restarted_ms.last().copied().unwrap_or(self.created_ms);
        self.restarted_ms.push(at_ms.max(last));
    }

    /// Cumulative CPU of the current incarnation, seconds.
    pub fn cpu_seconds(&self, now_ms: i64) -> f64 {
        self.started_ms(now_ms)
            .map_or(0.0, |s| self.cpu_integral(s, now_ms))
    }

    /// Cumulative CPU of every incarnation since creation (what the node's counter saw).
    fn cpu_seconds_all(&self, now_ms: i64) -> f64 {
        if now_ms < self.created_ms {
            return 0.0;
        }
        self.cpu_integral(self.created_ms, now_ms)
    }

    /// The CPU rate at `now_ms`, in cores.
    pub fn cpu_cores_at(&self, now_ms: i64) -> f64 {
        let (omega, phase, wobble) = self.cpu_swing();
        self.cpu_cores * (1.0 + wobble * (omega * now_ms as f64 + phase).sin())
    }

    /// CPU seconds used between two instants: the integral of [`Self::cpu_cores_at`], so the
    /// counter never decreases (the wobble is at most 1).
    fn cpu_integral(&self, from_ms: i64, to_ms: i64) -> f64 {
        let (omega, phase, wobble) = self.cpu_swing();
        let steady = (to_ms - from_ms) as f64;
        let swing = if wobble == 0.0 {
            0.0
        } else {
            wobble / omega
                * ((omega * from_ms as f64 + phase).cos() - (omega * to_ms as f64 + phase).cos())
        };
        self.cpu_cores * (steady + swing) / 1000.0
    }

    /// (angular frequency per ms, phase from the name, amplitude clamped to [0, 1]).
    fn cpu_swing(&self) -> (f64, f64, f64) {
        let (period_ms, phase) = self.period_and_phase();
        (
            std::f64::consts::TAU / (10.0 * period_ms),
            phase,
            self.cpu_wobble.clamp(0.0, 1.0),
        )
    }

    fn period_and_phase(&self) -> (f64, f64) {
        let period_ms = if self.memory_period.is_zero() {
            300_000.0
        } else {
            self.memory_period.as_millis() as f64
        };
        let phase = self
            .name
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
            as f64;
        (period_ms, phase)
    }

    /// Working set at `now_ms`: a sine between the bounds, phase-shifted by the name.
    pub fn memory_bytes(&self, now_ms: i64) -> u64 {
        let (lo, hi) = if self.memory_min_bytes <= self.memory_max_bytes {
            (self.memory_min_bytes, self.memory_max_bytes)
        } else {
            (self.memory_max_bytes, self.memory_min_bytes)
        };
        let (period_ms, phase) = self.period_and_phase();
        let x = (now_ms as f64 / period_ms) * std::f64::consts::TAU + phase;
        let span = (hi - lo) as f64;
        let v = lo as f64 + span * (0.5 + 0.5 * x.sin());
        // Page-aligned, as a kernel's working set is.
        ((v as u64) & !4095).clamp(lo, hi)
    }
}

/// How long after a container starts its kubelet first samples it (when the node refreshes
/// on a housekeeping interval).
pub(crate) const DISCOVERY_MS: i64 = 100;

impl SimNode {
    /// A node with `pods` pods of `containers` containers each, deterministic rates and
    /// bounds, booted and with every container created at `boot_ms`, refreshed every
    /// [`DEFAULT_HOUSEKEEPING`].
    pub fn generate(name: &str, pods: usize, containers: usize, boot_ms: i64) -> Self {
        let pods = (0..pods)
            .map(|p| SimPod {
                namespace: format!("ns-{}", p % 7),
                name: format!("{name}-pod-{p}"),
                uid: format!("00000000-0000-4000-8000-{:012}", p),
                containers: (0..containers)
                    .map(|c| SimContainer {
                        name: format!("c{c}"),
                        created_ms: boot_ms,
                        cpu_cores: 0.001 * (1 + (p * 7 + c * 3) % 200) as f64,
                        cpu_wobble: 0.0,
                        memory_min_bytes: (16 + (p % 32) as u64) << 20,
                        memory_max_bytes: (48 + (p % 64) as u64) << 20,
                        memory_period: Duration::from_secs(120 + (c as u64) * 30),
                        restart_every: None,
                        restarted_ms: Vec::new(),
                        swap_bytes: 0,
                    })
                    .collect(),
            })
            .collect();
        SimNode {
            name: name.to_owned(),
            boot_ms,
            system_cpu_cores: 0.1,
            system_memory_bytes: 512 << 20,
            pods,
            housekeeping: DEFAULT_HOUSEKEEPING,
            system_swap_bytes: None,
        }
    }

    /// The node's stats as a request at `now_ms` (Unix ms) gets them, ready for
    /// `payload::render_*`: each container as of its last refresh (see
    /// [`SimNode::housekeeping`]), the node's own sample as of the node's.
    ///
    /// A container appears [`DISCOVERY_MS`] after its creation, sampled then (cAdvisor
    /// housekeeps a new container as soon as it discovers it); so does each restart (a new
    /// container to cAdvisor), and in between the container is absent.
    /// `usageNanoCores` is the average rate since the previous refresh (what cAdvisor
    /// computes from its last two samples) and absent on a container's first sample; with
    /// no housekeeping it is the instantaneous rate at `now_ms`.
    pub fn stats_at(&self, now_ms: i64) -> NodeStats {
        let every = self.housekeeping_ms();
        let pods = self
            .pods
            .iter()
            .map(|pod| PodStats {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                containers: pod
                    .containers
                    .iter()
                    .filter_map(|c| self.container_stats(pod, c, now_ms, every))
                    .collect(),
            })
            .collect();
        let (at, cores) = self.node_sample(now_ms, every);
        let swap_bytes = self.system_swap_bytes.map(|system| {
            let containers = self.pods.iter().flat_map(|p| &p.containers);
            containers
                .filter(|c| c.created_ms <= at)
                .fold(system, |sum, c| sum.saturating_add(c.swap_bytes))
        });
        NodeStats {
            name: self.name.clone(),
            timestamp_ms: at,
            cpu_seconds_total: self.node_cpu_seconds(at),
            memory_working_set_bytes: self.node_memory_bytes(at),
            start_time_s: self.boot_ms as f64 / 1000.0,
            cpu_nanocores: cores.map(|n| (n * 1e9) as u64),
            swap_bytes,
            pods,
        }
    }

    /// One container's stats as of its last refresh at or before `now_ms` (`every`: the
    /// housekeeping interval in ms), `None` before its creation.
    fn container_stats(
        &self,
        pod: &SimPod,
        c: &SimContainer,
        now_ms: i64,
        every: Option<i64>,
    ) -> Option<ContainerStats> {
        if now_ms < c.created_ms {
            return None;
        }
        let (at, cores) = match every {
            None => (now_ms, Some(c.cpu_cores_at(now_ms))),
            Some(every) => {
                let phase = phase_ms(&[&self.name, &pod.namespace, &pod.name, &c.name], every);
                // The first housekeeping runs when the container (this incarnation) is
                // discovered, a moment after it started (cAdvisor's sample time is never its
                // start time).
                let discovered = c.started_ms(now_ms)?.saturating_add(DISCOVERY_MS);
                if now_ms < discovered {
                    return None;
                }
                let at = last_refresh(now_ms, phase, every).max(discovered);
                let from = at.saturating_sub(every).max(c.started_ms(at)?);
                // The discovery sample is the first: no rate yet.
                (
                    at,
                    (from < at && at > discovered)
                        .then(|| average_cores(c.cpu_integral(from, at), from, at)),
                )
            }
        };
        Some(ContainerStats {
            name: c.name.clone(),
            start_time_s: c.started_ms(at)? as f64 / 1000.0,
            timestamp_ms: at,
            cpu_seconds_total: c.cpu_seconds(at),
            memory_working_set_bytes: c.memory_bytes(at),
            cpu_nanocores: cores.map(|n| (n * 1e9) as u64),
            swap_bytes: self.system_swap_bytes.map(|_| c.swap_bytes),
            terminated: false,
        })
    }

    /// When the node's own (root cgroup) sample was taken for a request at `now_ms`, and its
    /// CPU rate in cores.
    fn node_sample(&self, now_ms: i64, every: Option<i64>) -> (i64, Option<f64>) {
        let Some(every) = every else {
            return (now_ms, Some(self.node_cores_at(now_ms)));
        };
        let phase = phase_ms(&[&self.name], every);
        // The first sample is taken at boot.
        let at = last_refresh(now_ms, phase, every).max(self.boot_ms.min(now_ms));
        let from = at.saturating_sub(every).max(self.boot_ms);
        let used = self.node_cpu_seconds(at) - self.node_cpu_seconds(from);
        (at, (from < at).then(|| average_cores(used, from, at)))
    }

    /// [`SimNode::housekeeping`] in whole milliseconds, `None` when under 1 ms.
    fn housekeeping_ms(&self) -> Option<i64> {
        Some(i64::try_from(self.housekeeping.as_millis()).unwrap_or(i64::MAX)).filter(|&ms| ms > 0)
    }

    /// The node's cumulative CPU at `at_ms`: the system's since boot plus every incarnation
    /// of every container created by then (the root cgroup's counter).
    fn node_cpu_seconds(&self, at_ms: i64) -> f64 {
        self.containers().fold(
            self.system_cpu_cores * (at_ms - self.boot_ms).max(0) as f64 / 1000.0,
            |sum, c| sum + c.cpu_seconds_all(at_ms),
        )
    }

    /// The node's working set at `at_ms`: the system's plus every running container's.
    fn node_memory_bytes(&self, at_ms: i64) -> u64 {
        self.containers()
            .filter(|c| c.created_ms <= at_ms)
            .fold(self.system_memory_bytes, |sum, c| {
                sum.saturating_add(c.memory_bytes(at_ms))
            })
    }

    /// The node's instantaneous CPU rate at `at_ms`, in cores.
    fn node_cores_at(&self, at_ms: i64) -> f64 {
        self.containers()
            .filter(|c| c.created_ms <= at_ms)
            .fold(self.system_cpu_cores, |sum, c| sum + c.cpu_cores_at(at_ms))
    }

    fn containers(&self) -> impl Iterator<Item = &SimContainer> {
        self.pods.iter().flat_map(|p| &p.containers)
    }
}

/// The average rate, in cores, of `cpu_seconds` used between two instants (`from_ms < to_ms`).
fn average_cores(cpu_seconds: f64, from_ms: i64, to_ms: i64) -> f64 {
    cpu_seconds * 1000.0 / (to_ms - from_ms) as f64
}

/// The last refresh instant `phase_ms + k * every_ms` at or before `now_ms`.
fn last_refresh(now_ms: i64, phase_ms: i64, every_ms: i64) -> i64 {
    now_ms - now_ms.saturating_sub(phase_ms).rem_euclid(every_ms)
}

/// A stable phase in `[0, every_ms)` for a cgroup named by `parts` (FNV-1a with a
/// splitmix64 finaliser: the same on every run and platform, unlike `RandomState`).
fn phase_ms(parts: &[&str], every_ms: i64) -> i64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0xFF]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    // `every_ms` is positive, so the remainder fits in i64.
    i64::try_from(h % every_ms.unsigned_abs()).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
