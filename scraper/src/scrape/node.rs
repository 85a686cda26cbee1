//! One node's scrape: resolve its URL, wait for its turn, fetch, parse, store, count, log.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use tokio::sync::SemaphorePermit;
use tokio::time::Instant;

use super::{Period, Shared};
use crate::inventory::NodeRecord;
use crate::kubelet::client::{self, Body, Resolver, Target, TargetError};
use crate::kubelet::{ParseError, summary};
use crate::point::NodeName;

/// Per-node error logs are repeated at most this often; counters count every failure.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(5 * 60);

/// Why one node's scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubelet URL for the node.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The request failed.
    #[error(transparent)]
    Kubelet(#[from] client::Error),
    /// Waiting for a free slot (`max_in_flight`) or for the node's previous request used up
    /// the whole timeout.
    #[error("node {node}: no scrape slot became free within {timeout:?}")]
    Queued {
        /// The node.
        node: NodeName,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The body was not a valid payload.
    #[error("node {node}: failed parsing metrics: {source}")]
    Parse {
        /// The node.
        node: NodeName,
        /// Where and what.
        #[source]
        source: ParseError,
    },
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Target(e) => e.reason(),
            Error::Kubelet(e) => e.reason(),
            Error::Queued { .. } => "queue_timeout",
            Error::Parse { .. } => "parse",
        }
    }
}

/// Which regime a scrape belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// On the evenly spread schedule: one deadline counts queueing and the request.
    Steady,
    /// Warm-up: many nodes are due at once, so a scrape may queue for a slot up to a
    /// resolution; the request deadline counts from the slot. The node's `first` warm-up
    /// scrape also asks for the kubelet's own rates (`--kubelet-summary-warmup`).
    Warmup {
        /// The node's first warm-up scrape.
        first: bool,
    },
}

/// What a scrape task hands back to the loop.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The node.
    pub(super) node: NodeName,
    /// The loop's epoch of the node when the scrape started.
    pub(super) epoch: u64,
    /// What the scrape brought; `None` when it failed.
    pub(super) fetched: Option<Fetched>,
}

/// What the loop keeps per node between periods.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Held while a request to this node is in flight.
    busy: Arc<tokio::sync::Mutex<()>>,
    /// Set while the node is failing.
    failing: Option<Failing>,
    /// The kubelet URL last resolved, and the node record it was resolved from: resolved
    /// again only when the inventory has a new record for the node.
    target: Option<(Arc<NodeRecord>, Arc<Target>)>,
}

impl State {
    /// The node's kubelet URL: the one resolved before while the node record is the same,
    /// else resolved from `record` now.
    fn target(
        &mut self,
        record: &Arc<NodeRecord>,
        resolver: &Resolver,
    ) -> Result<Arc<Target>, TargetError> {
        if let Some((of, target)) = &self.target
            && Arc::ptr_eq(of, record)
        {
            return Ok(Arc::clone(target));
        }
        let target = Arc::new(resolver.resolve(record)?);
        self.target = Some((Arc::clone(record), Arc::clone(&target)));
        Ok(target)
    }
}

#[derive(Debug)]
struct Failing {
    last_logged: Instant,
    suppressed: u64,
    failures: u64,
}

/// Runs one node's scrape that was scheduled to start at `start`.
pub(super) async fn scrape(
    shared: Arc<Shared>,
    record: Arc<NodeRecord>,
    epoch: u64,
    start: Instant,
    kind: Kind,
    period: Option<Arc<Period>>,
) -> Outcome {
    // Counts this scrape as done for the period even if the task is aborted.
    let _done = period.map(|period| PeriodGuard {
        period,
        shared: shared.clone(),
    });
    let result = fetch_and_store(&shared, &record, start, kind).await;
    let outcome = Outcome {
        node: record.name.clone(),
        epoch,
        fetched: result.as_ref().ok().copied(),
    };
    let finished = Instant::now();
    let finished_ns = shared.clock.unix_ns(finished);
    let elapsed = finished.saturating_duration_since(start);
    let node = &record.name;
    shared.metrics.observe_request(
        node.as_str(),
        elapsed,
        result.is_ok(),
        finished_ns as f64 / 1e9,
    );
    shared
        .progress
        .last_scrape_done_ns
        .store(finished_ns, Ordering::Relaxed);
    match result {
        Ok(Fetched { ingested, .. }) => {
            let recovered = shared
                .nodes
                .lock()
                .get_mut(node)
                .and_then(|s| s.failing.take());
            if let Some(failing) = recovered {
                scrape_recovered(node, failing.failures);
            }
            tracing::trace!(
                node = %node,
                pods = ingested.pods,
                pods_with_usage = ingested.pods_with_usage,
                containers_ignored = ingested.containers_ignored,
                elapsed_ms = elapsed.as_millis() as u64,
                "scraped node"
            );
        }
        Err(error) => {
            shared.store.scrape_failed(node, finished_ns);
            shared.metrics.observe_failure(error.reason());
            let log = {
                let mut nodes = shared.nodes.lock();
                let state = nodes.entry(node.clone()).or_default();
                match &mut state.failing {
                    None => {
                        state.failing = Some(Failing {
                            last_logged: finished,
                            suppressed: 0,
                            failures: 1,
                        });
                        Some(0)
                    }
                    Some(f) => {
                        f.failures += 1;
                        if finished.saturating_duration_since(f.last_logged) >= LOG_EVERY {
                            let suppressed = f.suppressed;
                            f.last_logged = finished;
                            f.suppressed = 0;
                            Some(suppressed)
                        } else {
                            f.suppressed += 1;
                            None
                        }
                    }
                }
            };
            if let Some(suppressed) = log {
                scrape_failed(node, &error, suppressed);
            }
        }
    }
    outcome
}

async fn fetch_and_store(
    shared: &Shared,
    record: &Arc<NodeRecord>,
    start: Instant,
    kind: Kind,
) -> Result<Fetched, Error> {
    let node = &record.name;
    let queue_limit = match kind {
        Kind::Steady => shared.request_timeout,
        Kind::Warmup { .. } => shared.resolution.max(shared.request_timeout),
    };
    let queued = || Error::Queued {
        node: node.clone(),
        timeout: queue_limit,
    };
    let queue_deadline = start + queue_limit;
    // One request per node at a time: a node still busy from the previous period (only
    // possible when the node order changed) is waited for, within this request's deadline.
    let (busy, target) = {
        let mut nodes = shared.nodes.lock();
        let state = nodes.entry(node.clone()).or_default();
        (state.busy.clone(), state.target(record, &shared.resolver)?)
    };
    let _busy = tokio::time::timeout_at(queue_deadline, busy.lock_owned())
        .await
        .map_err(|_| queued())?;
    let slot = tokio::time::timeout_at(queue_deadline, shared.slots.acquire())
        .await
        .map_err(|_| queued())?
        .map_err(|_| queued())?;
    let deadline = match kind {
        Kind::Steady => start + shared.request_timeout,
        Kind::Warmup { .. } => Instant::now() + shared.request_timeout,
    };
    let rates = match kind {
        Kind::Warmup { first: true }
            if shared.config.summary_warmup && !shared.summary_refused.load(Ordering::Relaxed) =>
        {
            shared.resolver.summary(record, &target)
        }
        _ => None,
    };
    let request_time_ns = shared.clock.unix_ns(Instant::now());
    let fetch = async {
        let body = shared.client.fetch(&target, deadline).await?;
        let rates = match &rates {
            Some(summary) => fetch_rates(shared, summary, deadline).await,
            None => None,
        };
        Ok::<_, client::Error>((body, rates))
    };
    let (fetched, _slot) = holding_for_at_most(fetch, slot, shared.config.slot_hold).await;
    let (body, rates) = fetched?;
    let mut scrape = shared
        .config
        .source
        .parse(&body, request_time_ns)
        .map_err(|source| Error::Parse {
            node: node.clone(),
            source,
        })?;
    let refreshed = rates
        .as_ref()
        .is_some_and(|rates| lend_rates(node, &mut scrape, rates, request_time_ns));
    let now_ns = shared.clock.unix_ns(Instant::now());
    Ok(Fetched {
        ingested: shared.store.ingest(node, &scrape, now_ns),
        refreshed,
    })
}

/// What one node's scrape brought.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fetched {
    /// What the store did with it.
    pub(super) ingested: crate::store::Ingested,
    /// The kubelet refreshed some series between the warm-up's two requests (its summary
    /// has newer samples than its `/metrics/resource` answer): a new read pairs them at once.
    pub(super) refreshed: bool,
}

/// Lends the kubelet's own rates in the summary body `rates` to `scrape`
/// ([`summary::attach_rates`]); true when the summary has newer samples of some series
/// than the scrape.
fn lend_rates(
    node: &NodeName,
    scrape: &mut crate::point::NodeScrape<'_>,
    rates: &Body,
    request_time_ns: i64,
) -> bool {
    match summary::parse(rates, request_time_ns) {
        Ok(summary) => {
            let attached = summary::attach_rates(scrape, &summary);
            tracing::trace!(node = %node, rates = attached.rates, newer = attached.newer, "kubelet rates attached");
            attached.newer > 0
        }
        Err(error) => {
            tracing::debug!(node = %node, %error, "kubelet summary unreadable; warm-up waits for the next sample");
            false
        }
    }
}

/// How long the warm-up's summary may take beyond the `/metrics/resource` answer: the data
/// in hand is not held back longer for it.
const RATES_WAIT: Duration = Duration::from_secs(2);

/// The node's `/stats/summary`, for its rates; `None` when it cannot be had. A 403 (the
/// server may `get` `nodes/metrics` but not `nodes/stats`, as with metrics-server's RBAC)
/// turns the summary off for every later warm-up, with one log line.
async fn fetch_rates(shared: &Shared, summary: &Target, deadline: Instant) -> Option<Body> {
    let deadline = deadline.min(Instant::now() + RATES_WAIT);
    match shared.client.fetch(summary, deadline).await {
        Ok(body) => Some(body),
        Err(client::Error::Status { status, .. }) if status == StatusCode::FORBIDDEN => {
            if !shared.summary_refused.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    node = %summary.node,
                    "kubelet refused /stats/summary (403): warm-up waits for each kubelet's next refresh (about 10 s) instead of using its own rates; grant get on nodes/stats to serve metrics within a second of start, or set --kubelet-summary-warmup=false"
                );
            }
            None
        }
        Err(error) => {
            tracing::debug!(node = %summary.node, %error, "kubelet summary unavailable; warm-up waits for the next sample");
            None
        }
    }
}

/// Runs `work` holding `slot` for at most `hold`: work still running then gives the slot back
/// and finishes without it. The slot, when still held, comes back with the output.
async fn holding_for_at_most<F: Future>(
    work: F,
    slot: SemaphorePermit<'_>,
    hold: Duration,
) -> (F::Output, Option<SemaphorePermit<'_>>) {
    // On the heap: the task of every scrape would otherwise carry the request's state twice
    // (before and inside the timeout), which the allocator keeps as ~1 KiB per node.
    let mut work = Box::pin(work);
    match tokio::time::timeout(hold, &mut work).await {
        Ok(output) => (output, Some(slot)),
        Err(_) => {
            drop(slot);
            (work.await, None)
        }
    }
}

struct PeriodGuard {
    period: Arc<Period>,
    shared: Arc<Shared>,
}

impl Drop for PeriodGuard {
    fn drop(&mut self) {
        self.period.finish_one(&self.shared);
    }
}

/// A node's scrape failed (logged on the first failure, then at most every [`LOG_EVERY`]),
/// as metrics-server logs it (`klog.ErrorS(err, "Failed to scrape node", "node", ...)`: an
/// error, `err` first), with the failure's class and how many repeats went unlogged.
fn scrape_failed(node: &NodeName, error: &Error, suppressed: u64) {
    tracing::error!(
        error = %error,
        node = %node,
        reason = error.reason(),
        suppressed,
        "Failed to scrape node"
    );
}

/// A failing node answered again.
fn scrape_recovered(node: &NodeName, failures: u64) {
    tracing::info!(node = %node, failures, "node scrape recovered");
}

/// A node left the inventory (or the node selector) and was forgotten.
pub(super) fn forgotten(node: &NodeName) {
    tracing::debug!(node = %node, "node gone: removed from store and metrics");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::inventory::{Labels, NodeAddress};
    use crate::kubelet::Source;

    fn record(address: &str) -> Arc<NodeRecord> {
        Arc::new(NodeRecord {
            name: NodeName::from("n"),
            labels: Labels::default(),
            addresses: vec![NodeAddress {
                kind: "InternalIP".into(),
                address: address.into(),
            }],
            kubelet_port: None,
            metrics_path: None,
        })
    }

    #[test]
    fn a_node_is_resolved_again_only_when_its_record_changes() {
        let resolver = Resolver::new(
            &["InternalIP".to_owned()],
            10250,
            false,
            Source::Resource,
            false,
        );
        let mut state = State::default();
        let first = record("10.0.0.1");
        let a = state.target(&first, &resolver).unwrap();
        let again = state.target(&first, &resolver).unwrap();
        assert!(
            Arc::ptr_eq(&a, &again),
            "the same record is not resolved again"
        );
        // The node moved: its new record is resolved, and the next scrape goes there.
        let moved = record("10.0.0.2");
        let b = state.target(&moved, &resolver).unwrap();
        assert_eq!(b.uri.to_string(), "https://10.0.0.2:10250/metrics/resource");
        // A record that no longer resolves fails, rather than reusing the last URL.
        let gone = Arc::new(NodeRecord {
            addresses: Vec::new(),
            ..(*moved).clone()
        });
        assert_eq!(
            state.target(&gone, &resolver).unwrap_err().reason(),
            "no_address"
        );
    }
}
