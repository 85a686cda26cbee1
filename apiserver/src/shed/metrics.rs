//! The load shedder's metric families, named as kube-apiserver's APF ones with `class` in
//! place of `priority_level` / `flow_schema`:
//! - `apiserver_flowcontrol_rejected_requests_total{class,reason}`: 429s by reason
//!   (`concurrency-limit`, `queue-full`, `time-out`, and `storage-initializing` for a cold
//!   store);
//! - `apiserver_flowcontrol_current_executing_requests{class}`: seats in use;
//! - `apiserver_flowcontrol_current_inqueue_requests{class}`: requests waiting;
//! - `apiserver_flowcontrol_nominal_limit_seats{class}`: seats (0: unlimited);
//! - `apiserver_flowcontrol_request_wait_duration_seconds{class,execute}`: time to a decision;
//! - `apiserver_storage_incomplete_lists_total{class}`: cluster-wide lists served while the
//!   first scrape round was still incomplete (after the cold-store window, or with it off),
//!   which may lack nodes and pods.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::class::Class;

/// Labels of the rejection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// `autoscalers` or `default`.
    pub class: &'static str,
    /// Why.
    pub reason: &'static str,
}

/// Labels of the gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// `exempt`, `autoscalers` or `default`.
    pub class: &'static str,
}

/// Labels of the wait histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaitLabels {
    /// The class.
    pub class: &'static str,
    /// `true` when the request went on to execute, `false` when it was rejected.
    pub execute: &'static str,
}

/// Wait buckets, seconds (APF's `apiserver_flowcontrol_request_wait_duration_seconds`).
const WAIT_BUCKETS: [f64; 11] = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Every family, registered once.
#[derive(Clone, Debug)]
pub struct Metrics {
    rejected: Family<RejectLabels, Counter>,
    executing: Family<ClassLabels, Gauge>,
    inqueue: Family<ClassLabels, Gauge>,
    limit: Family<ClassLabels, Gauge>,
    wait: Family<WaitLabels, Histogram>,
    incomplete: Family<ClassLabels, Counter>,
}

impl Metrics {
    /// Creates and registers the families.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Metrics {
            rejected: Family::default(),
            executing: Family::default(),
            inqueue: Family::default(),
            limit: Family::default(),
            wait: Family::new_with_constructor(|| Histogram::new(WAIT_BUCKETS)),
            incomplete: Family::default(),
        };
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by the load shedder, by class and reason",
            m.rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests holding a seat, by class",
            m.executing.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests waiting for a seat, by class",
            m.inqueue.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Seats of each class (0: unlimited)",
            m.limit.clone(),
        );
        registry.register_with_unit(
            "apiserver_flowcontrol_request_wait_duration",
            "Time requests spent waiting for a seat, by class and whether they executed",
            Unit::Seconds,
            m.wait.clone(),
        );
        registry.register(
            "apiserver_storage_incomplete_lists",
            "Cluster-wide lists served before the first scrape round was complete, by class",
            m.incomplete.clone(),
        );
        // Every limited class shows up at 0 from the start.
        for class in Class::LIMITED {
            m.class(class);
        }
        m
    }

    /// The handles of one class.
    pub fn class(&self, class: Class) -> ClassMetrics {
        let labels = ClassLabels {
            class: class.as_str(),
        };
        ClassMetrics {
            executing: self.executing.get_or_create(&labels).clone(),
            inqueue: self.inqueue.get_or_create(&labels).clone(),
            limit: self.limit.get_or_create(&labels).clone(),
        }
    }

    /// Counts one 429.
    pub fn rejected(&self, class: Class, reason: &'static str) {
        self.rejected
            .get_or_create(&RejectLabels {
                class: class.as_str(),
                reason,
            })
            .inc();
    }

    /// Counts one cluster-wide list served from an incomplete first round.
    pub fn incomplete(&self, class: Class) {
        self.incomplete
            .get_or_create(&ClassLabels {
                class: class.as_str(),
            })
            .inc();
    }

    /// Records how long a request waited for its decision.
    pub fn waited(&self, class: Class, executed: bool, waited: Duration) {
        self.wait
            .get_or_create(&WaitLabels {
                class: class.as_str(),
                execute: if executed { "true" } else { "false" },
            })
            .observe(waited.as_secs_f64());
    }
}

/// The gauges of one class.
#[derive(Clone, Debug)]
pub struct ClassMetrics {
    executing: Gauge,
    inqueue: Gauge,
    limit: Gauge,
}

impl ClassMetrics {
    /// Seats in use.
    pub fn executing(&self, n: usize) {
        self.executing.set(gauge(n));
    }

    /// Requests waiting.
    pub fn queued(&self, n: usize) {
        self.inqueue.set(gauge(n));
    }

    /// Seats.
    pub fn limit(&self, n: usize) {
        self.limit.set(gauge(n));
    }

    /// One more executing (exempt requests, counted without a limit).
    pub fn inc_executing(&self) {
        self.executing.inc();
    }

    /// One fewer executing.
    pub fn dec_executing(&self) {
        self.executing.dec();
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
