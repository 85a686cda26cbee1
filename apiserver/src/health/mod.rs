//! `/livez`, `/readyz` and `/healthz` with metrics-server's check names and order and the
//! generic apiserver's bodies (metrics-server.md §5.3, §6.3 items 8-9).
//!
//! Time is a parameter (`now_ns`), so every rule is tested without sleeping. Each check a
//! root endpoint runs is also recorded for `/metrics/slis` ([`slis`]).

mod slis;

pub use slis::SliCollector;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Response, StatusCode};
use scraper::inventory::Inventory;
use scraper::scrape::Progress;
use scraper::store::{Readiness, Store};

use crate::body::Body;

/// What the checks look at. [`Sources`] is the real one; tests supply their own.
pub trait Signals: Send + Sync {
    /// Whether the node and pod watches have completed their initial list.
    fn informers_synced(&self) -> bool;
    /// Whether the store holds usable node and pod data.
    fn storage(&self, now_ns: i64) -> Readiness;
    /// Whether the scrape loop's first round is complete: every node of the first list
    /// answered (with nothing left to wait for) or failed.
    fn first_round_complete(&self) -> bool;
    /// When the scrape loop last started a tick, Unix ns.
    fn last_tick_start_ns(&self) -> Option<i64>;
}

/// The running server's signals.
#[derive(Debug)]
pub struct Sources {
    /// The inventory the watches feed.
    pub inventory: Arc<Inventory>,
    /// The store the scrape loop fills.
    pub store: Arc<Store>,
    /// The scrape loop's progress.
    pub progress: Arc<Progress>,
    /// The inventory is filled by its owner, not by watches (sandbox, benches): it counts as
    /// synced.
    pub inventory_is_static: bool,
}

impl Signals for Sources {
    fn informers_synced(&self) -> bool {
        self.inventory_is_static || self.inventory.synced()
    }

    fn storage(&self, now_ns: i64) -> Readiness {
        self.store.readiness(now_ns)
    }

    fn first_round_complete(&self) -> bool {
        self.progress.first_round_complete()
    }

    fn last_tick_start_ns(&self) -> Option<i64> {
        self.progress.last_tick_start_ns()
    }
}

/// Health settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// `--metric-resolution`: `metric-collection-timely` fails after 1.5 x this without a tick.
    pub resolution: Duration,
    /// `--readiness-timeout`: after this long since start, `metric-storage-ready` passes with
    /// node metrics alone (no pod metrics, or a first round that never completes); never
    /// without any node's metrics. `None`: never.
    pub readiness_timeout: Option<Duration>,
    /// When the server started, Unix ns.
    pub started_ns: i64,
}

/// One named check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Ping,
    Log,
    MaxInFlightFilter,
    StorageObjectCountTracker,
    MetricCollectionTimely,
    MetricStorageReady,
    MetricInformerSync,
    MetadataInformerSync,
    Shutdown,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::MaxInFlightFilter => "poststarthook/max-in-flight-filter",
            Check::StorageObjectCountTracker => "poststarthook/storage-object-count-tracker-hook",
            Check::MetricCollectionTimely => "metric-collection-timely",
            Check::MetricStorageReady => "metric-storage-ready",
            Check::MetricInformerSync => "metric-informer-sync",
            Check::MetadataInformerSync => "metadata-informer-sync",
            Check::Shutdown => "shutdown",
        }
    }
}

/// The three endpoints, each with its checks in the order metrics-server serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Livez,
    Readyz,
    Healthz,
}

impl Endpoint {
    /// Every endpoint.
    const ALL: [Endpoint; 3] = [Endpoint::Livez, Endpoint::Readyz, Endpoint::Healthz];

    fn name(self) -> &'static str {
        match self {
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
            Endpoint::Healthz => "healthz",
        }
    }

    fn checks(self) -> &'static [Check] {
        use Check::*;
        match self {
            Endpoint::Livez => &[
                Ping,
                Log,
                MaxInFlightFilter,
                StorageObjectCountTracker,
                MetricCollectionTimely,
                MetadataInformerSync,
            ],
            Endpoint::Readyz => &[
                Ping,
                Log,
                MaxInFlightFilter,
                StorageObjectCountTracker,
                MetricStorageReady,
                MetricInformerSync,
                MetadataInformerSync,
                Shutdown,
            ],
            Endpoint::Healthz => &[
                Ping,
                Log,
                MaxInFlightFilter,
                StorageObjectCountTracker,
                MetadataInformerSync,
            ],
        }
    }
}

/// The health endpoints.
pub struct Health {
    config: Config,
    signals: Arc<dyn Signals>,
    shutting_down: AtomicBool,
    storage_was_ready: AtomicBool,
    startup_timeout_logged: AtomicBool,
    slis: Arc<slis::Slis>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("config", &self.config)
            .field("shutting_down", &self.shutting_down)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// Health checks over these signals.
    pub fn new(config: Config, signals: Arc<dyn Signals>) -> Self {
        Health {
            config,
            signals,
            shutting_down: AtomicBool::new(false),
            storage_was_ready: AtomicBool::new(false),
            startup_timeout_logged: AtomicBool::new(false),
            slis: Arc::default(),
        }
    }

    /// The collector of `/metrics/slis`, over the checks these endpoints run.
    pub fn sli_collector(&self) -> SliCollector {
        SliCollector(self.slis.clone())
    }

    /// Shutdown has begun: `/readyz`'s `shutdown` check fails from now on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Every path [`Health::handle`] answers: each endpoint and each of its checks.
    pub fn paths() -> impl Iterator<Item = String> {
        Endpoint::ALL.into_iter().flat_map(|e| {
            std::iter::once(format!("/{}", e.name())).chain(
                e.checks()
                    .iter()
                    .map(move |c| format!("/{}/{}", e.name(), c.name())),
            )
        })
    }

    /// Answers `/livez`, `/readyz`, `/healthz` and their `/<check>` sub-paths; `None` for any
    /// other path. `query` is the raw query string (`verbose`, `exclude=<name>`).
    pub fn handle(&self, path: &str, query: Option<&str>, now_ns: i64) -> Option<Response<Body>> {
        let (endpoint, rest) = Endpoint::ALL.into_iter().find_map(|e| {
            let rest = path.strip_prefix('/')?.strip_prefix(e.name())?;
            Some((e, rest))
        })?;
        if rest.is_empty() {
            return Some(self.root(endpoint, query, now_ns));
        }
        let name = rest.strip_prefix('/')?;
        let check = endpoint.checks().iter().find(|c| c.name() == name)?;
        Some(match self.run(*check, now_ns) {
            Ok(()) => text(StatusCode::OK, "ok".to_owned()),
            Err(reason) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {reason}\n"),
            ),
        })
    }

    /// The generic apiserver's `handleRootHealth`.
    fn root(&self, endpoint: Endpoint, query: Option<&str>, now_ns: i64) -> Response<Body> {
        let mut verbose = false;
        let mut excluded = BTreeSet::new();
        for (key, value) in crate::api::query::pairs(query) {
            match &*key {
                "verbose" => verbose = true,
                "exclude" => {
                    excluded.insert(value.into_owned());
                }
                _ => {}
            }
        }
        let mut body = String::new();
        let mut failed = Vec::new();
        for (position, &check) in endpoint.checks().iter().enumerate() {
            let name = check.name();
            if excluded.remove(name) {
                body.push_str(&format!("[+]{name} excluded: ok\n"));
                continue;
            }
            let result = self.run(check, now_ns);
            self.slis.observe(endpoint, position, result.is_ok());
            match result {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    body.push_str(&format!("[-]{name} failed: reason withheld\n"));
                    failed.push((name, reason));
                }
            }
        }
        if !excluded.is_empty() {
            let names: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
            body.push_str(&format!(
                "warn: some health checks cannot be excluded: no matches for {}\n",
                names.join(",")
            ));
        }
        let endpoint_name = endpoint.name();
        if !failed.is_empty() {
            for (probe, reason) in &failed {
                tracing::info!(probe, err = %reason, endpoint = endpoint_name, "Failed probe");
            }
            body.push_str(&format!("{endpoint_name} check failed\n"));
            return text(StatusCode::INTERNAL_SERVER_ERROR, body);
        }
        if !verbose {
            return text(StatusCode::OK, "ok".to_owned());
        }
        body.push_str(&format!("{endpoint_name} check passed\n"));
        text(StatusCode::OK, body)
    }

    /// One check: `Err` carries the reason, logged but never served by the root endpoints.
    fn run(&self, check: Check, now_ns: i64) -> Result<(), &'static str> {
        match check {
            Check::Ping
            | Check::Log
            | Check::MaxInFlightFilter
            | Check::StorageObjectCountTracker => Ok(()),
            Check::MetricCollectionTimely => self.timely(now_ns),
            Check::MetricStorageReady => self.storage_ready(now_ns),
            Check::MetricInformerSync | Check::MetadataInformerSync => {
                if self.signals.informers_synced() {
                    Ok(())
                } else {
                    Err("informers not synced")
                }
            }
            Check::Shutdown => {
                if self.shutting_down.load(Ordering::Relaxed) {
                    Err("process is shutting down")
                } else {
                    Ok(())
                }
            }
        }
    }

    /// metrics-server `pkg/server/server.go` `probeMetricCollectionTimely`: passes before the
    /// first tick; fails once the last tick started more than 1.5 x resolution ago.
    fn timely(&self, now_ns: i64) -> Result<(), &'static str> {
        let Some(last) = self.signals.last_tick_start_ns() else {
            return Ok(());
        };
        let max_wait_ns = duration_ns(self.config.resolution).saturating_mul(3) / 2;
        if now_ns.saturating_sub(last) > max_wait_ns {
            Err("metric collection didn't finish on time")
        } else {
            Ok(())
        }
    }

    /// The scrape loop's first round is complete and the store has node and pod usage
    /// (metrics-server `storage.Ready()`, which only asks for one of each), or the start-up
    /// timeout has passed and the store has node metrics: a replica takes traffic only once
    /// it would serve the whole cluster, or once waiting longer would not change that.
    fn storage_ready(&self, now_ns: i64) -> Result<(), &'static str> {
        let first_round = self.signals.first_round_complete();
        let readiness = self.signals.storage(now_ns);
        if first_round && readiness.nodes && readiness.pods {
            if !self.storage_was_ready.swap(true, Ordering::Relaxed) {
                tracing::info!("metric storage is ready: node and pod metrics available");
            }
            return Ok(());
        }
        if self.storage_was_ready.swap(false, Ordering::Relaxed) {
            tracing::info!(
                nodes = readiness.nodes,
                pods = readiness.pods,
                "metric storage is no longer ready"
            );
        }
        if let Some(timeout) = self.config.readiness_timeout {
            let deadline_ns = self.config.started_ns.saturating_add(duration_ns(timeout));
            // Past the start-up timeout node metrics alone do: the scrapes work, and what is
            // missing is pods to measure or nodes that never answer. Without any node's
            // metrics nothing works (a wrong kubelet CA, no RBAC on nodes/metrics), and a
            // replica that would serve nothing stays out, as metrics-server's does, so a
            // rollout with a bad setting stalls instead of replacing a working replica.
            if now_ns >= deadline_ns && readiness.nodes {
                if !self.startup_timeout_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        first_round,
                        pods = readiness.pods,
                        timeout = ?timeout,
                        "start-up timeout passed with node metrics but without pod metrics \
                         or a complete first round; reporting metric-storage-ready"
                    );
                }
                return Ok(());
            }
        }
        Err(if readiness.nodes && readiness.pods {
            "the first scrape round is not complete: metrics of some nodes are missing"
        } else if readiness.nodes {
            "no metrics to serve: pod metrics are missing, this may indicate a \
             container-runtime or kubelet issue"
        } else {
            "no metrics to serve"
        })
    }
}

fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A plain-text response as Go's `http.Error` / `fmt.Fprint` write it.
fn text(status: StatusCode, body: String) -> Response<Body> {
    crate::body::text(status, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
