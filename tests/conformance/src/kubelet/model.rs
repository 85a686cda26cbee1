//! A workload model driven by a time parameter (no hidden clock): CPU counters grow at a
//! configured rate, memory wanders within bounds, containers restart (counter reset and a
//! new start time).

use std::time::Duration;

use crate::payload::{ContainerStats, NodeStats, PodStats};

/// One node's workload.
#[derive(Clone, Debug, Default)]
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
        Some(match every {
            Some(every) => self.created_ms + (now_ms - self.created_ms) / every * every,
            None => self.created_ms,
        })
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

impl SimNode {
    /// A node with `pods` pods of `containers` containers each, deterministic rates and
    /// bounds, booted and with every container created at `boot_ms`.
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
        }
    }

    /// The node's stats at `now_ms` (Unix ms), ready for `payload::render_*`.
    pub fn stats_at(&self, now_ms: i64) -> NodeStats {
        let mut node_cpu = self.system_cpu_cores * (now_ms - self.boot_ms).max(0) as f64 / 1000.0;
        let mut node_memory = self.system_memory_bytes;
        let mut node_cores = self.system_cpu_cores;
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
                    .filter_map(|c| {
                        let started = c.started_ms(now_ms)?;
                        let memory = c.memory_bytes(now_ms);
                        node_cpu += c.cpu_seconds_all(now_ms);
                        node_cores += c.cpu_cores_at(now_ms);
                        node_memory = node_memory.saturating_add(memory);
                        Some(ContainerStats {
                            name: c.name.clone(),
                            start_time_s: started as f64 / 1000.0,
                            timestamp_ms: now_ms,
                            cpu_seconds_total: c.cpu_seconds(now_ms),
                            memory_working_set_bytes: memory,
                            cpu_nanocores: Some((c.cpu_cores_at(now_ms) * 1e9) as u64),
                            terminated: false,
                        })
                    })
                    .collect(),
            })
            .collect();
        NodeStats {
            name: self.name.clone(),
            timestamp_ms: now_ms,
            cpu_seconds_total: node_cpu,
            memory_working_set_bytes: node_memory,
            start_time_s: self.boot_ms as f64 / 1000.0,
            cpu_nanocores: Some((node_cores * 1e9) as u64),
            pods,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn container(restart: Option<u64>) -> SimContainer {
        SimContainer {
            name: "app".into(),
            created_ms: 1_000_000,
            cpu_cores: 0.25,
            cpu_wobble: 0.0,
            memory_min_bytes: 100 << 20,
            memory_max_bytes: 200 << 20,
            memory_period: Duration::from_secs(60),
            restart_every: restart.map(Duration::from_secs),
        }
    }

    fn node(restart: Option<u64>) -> SimNode {
        SimNode {
            name: "n1".into(),
            boot_ms: 0,
            system_cpu_cores: 0.5,
            system_memory_bytes: 1 << 30,
            pods: vec![SimPod {
                namespace: "default".into(),
                name: "p".into(),
                uid: "u".into(),
                containers: vec![container(restart)],
            }],
        }
    }

    #[test]
    fn cpu_grows_at_the_configured_rate() {
        let n = node(None);
        let a = n.stats_at(1_010_000);
        let b = n.stats_at(1_020_000);
        let (ca, cb) = (&a.pods[0].containers[0], &b.pods[0].containers[0]);
        assert!((cb.cpu_seconds_total - ca.cpu_seconds_total - 2.5).abs() < 1e-9);
        assert!((b.cpu_seconds_total - a.cpu_seconds_total - (2.5 + 5.0)).abs() < 1e-9);
        assert_eq!(cb.timestamp_ms, 1_020_000);
        assert_eq!(ca.start_time_s, 1000.0);
    }

    #[test]
    fn a_wobbling_rate_swings_but_the_counter_never_decreases_and_averages_out() {
        let mut c = container(None);
        c.cpu_wobble = 0.6;
        let (mut lo, mut hi) = (f64::MAX, 0.0_f64);
        let mut last = 0.0;
        for step in 0..=60 {
            let now = 1_000_000 + step * 1_000;
            let total = c.cpu_seconds(now);
            assert!(total >= last, "counter went back at {now}");
            last = total;
            let rate = c.cpu_cores_at(now);
            lo = lo.min(rate);
            hi = hi.max(rate);
        }
        assert!(hi > lo, "{lo}..{hi}");
        // Over one full swing (10 x 60 s) it integrates to zero: 0.25 cores on average.
        let full = c.cpu_seconds(1_600_000);
        assert!((full - 0.25 * 600.0).abs() < 1e-6, "{full}");
        let rates: Vec<f64> = (0..600)
            .map(|s| c.cpu_cores_at(1_000_000 + s * 1_000))
            .collect();
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0.0_f64), |(l, h), &r| (l.min(r), h.max(r)));
        assert!(hi > 0.35 && lo < 0.15, "{lo}..{hi}");
        // Page-aligned memory, as a kernel reports it.
        assert_eq!(c.memory_bytes(1_030_000) % 4096, 0);
    }

    #[test]
    fn restart_resets_the_counter_and_moves_the_start_time() {
        let n = node(Some(60));
        let before = n.stats_at(1_059_000);
        let after = n.stats_at(1_061_000);
        let (cb, ca) = (&before.pods[0].containers[0], &after.pods[0].containers[0]);
        assert!(ca.cpu_seconds_total < cb.cpu_seconds_total);
        assert!((ca.cpu_seconds_total - 0.25).abs() < 1e-9);
        assert_eq!(ca.start_time_s, 1060.0);
        // The node's counter never goes back.
        assert!(after.cpu_seconds_total > before.cpu_seconds_total);
    }

    #[test]
    fn memory_wanders_within_bounds_and_containers_appear_when_created() {
        let n = node(None);
        let mut seen = std::collections::BTreeSet::new();
        for t in (1_000_000..1_120_000).step_by(1_000) {
            let m = n.stats_at(t).pods[0].containers[0].memory_working_set_bytes;
            assert!((100 << 20..=200 << 20).contains(&m));
            seen.insert(m);
        }
        assert!(seen.len() > 50, "memory should move");
        assert!(n.stats_at(999_999).pods[0].containers.is_empty());
    }

    #[test]
    fn generated_nodes_are_deterministic() {
        let a = SimNode::generate("n", 10, 2, 0).stats_at(30_000);
        let b = SimNode::generate("n", 10, 2, 0).stats_at(30_000);
        assert_eq!(a.pods.len(), 10);
        assert_eq!(a.pods[3].containers.len(), 2);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
}
