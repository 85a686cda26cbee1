//! `/metrics/slis`: the component SLIs that every Kubernetes component built on
//! k8s.io/apiserver serves (k8s.io/component-base `metrics/prometheus/slis`, GA in 1.29), fed
//! as `handleRootHealth` feeds them: each check a root endpoint (`/livez`, `/readyz`,
//! `/healthz`) runs sets `kubernetes_healthcheck{name,type}` to 1 or 0 and counts one
//! `kubernetes_healthchecks_total{name,status,type}`. Excluded checks and the per-check
//! sub-paths record nothing, as upstream. A pair appears once it has been observed.
//!
//! The table is fixed (every endpoint's checks are known), so nothing a client sends can grow
//! it; the collector writes it in the order Go's registry gathers: sorted by label values.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::Endpoint;

const UNOBSERVED: u8 = 0;
const SUCCESS: u8 = 1;
const ERROR: u8 = 2;

/// One (endpoint, check) pair's observations.
#[derive(Debug, Default)]
struct Cell {
    last: AtomicU8,
    success: AtomicU64,
    error: AtomicU64,
}

/// Every pair's observations: per endpoint, a cell for each of its checks, in its order.
/// The table is derived from the endpoints' own check lists, so it always matches them.
#[derive(Debug)]
pub(super) struct Slis {
    cells: Vec<(Endpoint, Box<[Cell]>)>,
}

impl Default for Slis {
    fn default() -> Self {
        Slis {
            cells: Endpoint::ALL
                .iter()
                .map(|&e| (e, e.checks().iter().map(|_| Cell::default()).collect()))
                .collect(),
        }
    }
}

impl Slis {
    /// `slis.ObserveHealthcheck`: one run of the check at `position` in `endpoint`'s list
    /// by its root handler.
    pub(super) fn observe(&self, endpoint: Endpoint, position: usize, ok: bool) {
        let Some(cell) = self
            .cells
            .iter()
            .find(|(e, _)| *e == endpoint)
            .and_then(|(_, cells)| cells.get(position))
        else {
            return;
        };
        let (state, count) = if ok {
            (SUCCESS, &cell.success)
        } else {
            (ERROR, &cell.error)
        };
        cell.last.store(state, Ordering::Relaxed);
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The `prometheus_client` collector of `/metrics/slis`' own registry.
#[derive(Clone, Debug)]
pub struct SliCollector(pub(super) Arc<Slis>);

impl Collector for SliCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // (name, type, cell) for every observed pair, sorted as Go's gatherer sorts.
        let mut observed: Vec<(&str, &str, &Cell)> = self
            .0
            .cells
            .iter()
            .flat_map(|(e, cells)| {
                e.checks()
                    .iter()
                    .zip(cells.iter())
                    .map(move |(c, cell)| (c.name(), e.name(), cell))
            })
            .filter(|(_, _, cell)| cell.last.load(Ordering::Relaxed) != UNOBSERVED)
            .collect();
        if observed.is_empty() {
            return Ok(());
        }
        observed.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));

        let mut gauges = encoder.encode_descriptor(
            "kubernetes_healthcheck",
            "[STABLE] This metric records the result of a single healthcheck.",
            None,
            MetricType::Gauge,
        )?;
        for &(name, kind, cell) in &observed {
            let value = i64::from(cell.last.load(Ordering::Relaxed) == SUCCESS);
            ConstGauge::new(value)
                .encode(gauges.encode_family(&[("name", name), ("type", kind)])?)?;
        }

        // Labels name, status, type: sorted on that order, so within a check every "error"
        // sample comes before every "success" one.
        let mut counts: Vec<(&str, &str, &str, u64)> = observed
            .iter()
            .flat_map(|&(name, kind, cell)| {
                [("error", &cell.error), ("success", &cell.success)]
                    .map(|(status, count)| (name, status, kind, count.load(Ordering::Relaxed)))
            })
            .filter(|&(.., count)| count > 0)
            .collect();
        counts.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut counters = encoder.encode_descriptor(
            "kubernetes_healthchecks",
            "[STABLE] This metric records the results of all healthcheck.",
            None,
            MetricType::Counter,
        )?;
        for (name, status, kind, count) in counts {
            ConstCounter::new(count).encode(counters.encode_family(&[
                ("name", name),
                ("status", status),
                ("type", kind),
            ])?)?;
        }
        Ok(())
    }
}
