//! The scrape loop: every `--metric-resolution` period, one request per node, spread evenly
//! over the period, at most `max_in_flight` at once, each bounded by a deadline that counts
//! any queueing. Each node's result goes to the store as soon as it arrives: there is no
//! barrier waiting for the slowest kubelet (metrics-server waits for all, §3.2).
//!
//! # Layout
//! - this file: [`Config`], [`Progress`], [`run`] and the period planning.
//! - [`node`]: one node's scrape: resolve, queue, fetch, parse, store, count, log.

mod node;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::inventory::{Inventory, NodeRecord};
use crate::kubelet::Source;
use crate::kubelet::client::{Client, Resolver};
use crate::metrics::Metrics;
use crate::point::NodeName;
use crate::selector::LabelSelector;
use crate::store::Store;

pub use node::Error;

/// Scrape settings (metrics-server flag names in the docs).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--metric-resolution`: one request per node per period.
    pub resolution: Duration,
    /// `--kubelet-request-timeout`: bounds each whole request, any scheduling delay included.
    pub request_timeout: Duration,
    /// Scrapes in flight at most.
    pub max_in_flight: usize,
    /// Which kubelet endpoint.
    pub source: Source,
    /// `--kubelet-preferred-address-types`, in priority order.
    pub address_types: Vec<String>,
    /// `--kubelet-port`.
    pub kubelet_port: u16,
    /// `--kubelet-use-node-status-port`.
    pub use_node_status_port: bool,
    /// `--node-selector`: which nodes are scraped.
    pub node_selector: LabelSelector,
}

/// Progress of the loop, read by the health checks.
#[derive(Debug, Default)]
pub struct Progress {
    /// When the last tick (period) started, Unix ns; 0 before the first.
    pub last_tick_start_ns: AtomicI64,
    /// When a scrape last finished (success or failure), Unix ns; 0 before the first.
    pub last_scrape_done_ns: AtomicI64,
}

impl Progress {
    /// When the last tick started, if any.
    pub fn last_tick_start_ns(&self) -> Option<i64> {
        Some(self.last_tick_start_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// When a scrape last finished, if any.
    pub fn last_scrape_done_ns(&self) -> Option<i64> {
        Some(self.last_scrape_done_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }
}

/// Where the loop gets the nodes to scrape: the [`Inventory`] in production, anything that
/// lists node records in tests and benches.
pub trait NodeSource: Send + Sync + 'static {
    /// Every node, sorted by name.
    fn nodes(&self) -> Vec<Arc<NodeRecord>>;
}

impl NodeSource for Inventory {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        Inventory::nodes(self)
    }
}

/// Unix time read from the Tokio clock: the wall clock is read once, at start, and advanced
/// by `tokio::time::Instant`, so a paused test clock pauses Unix time too.
#[derive(Clone, Copy, Debug)]
struct Clock {
    base: Instant,
    base_unix_ns: i64,
}

impl Clock {
    fn start() -> Self {
        let base_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Clock {
            base: Instant::now(),
            base_unix_ns,
        }
    }

    fn unix_ns(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.base).as_nanos();
        self.base_unix_ns
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
    }
}

/// What every node task shares.
struct Shared {
    config: Config,
    request_timeout: Duration,
    resolver: Resolver,
    store: Arc<Store>,
    client: Client,
    metrics: Arc<Metrics>,
    progress: Arc<Progress>,
    slots: Semaphore,
    clock: Clock,
    /// Per-node state: a lock so one node never has two requests in flight, and the
    /// rate limiter of its error logs.
    nodes: parking_lot::Mutex<HashMap<NodeName, node::State>>,
}

/// One period: when it started and how many of its scrapes are still to finish. The last
/// one to finish observes the tick duration and the storage points.
struct Period {
    start: Instant,
    remaining: AtomicUsize,
}

impl Period {
    fn finish_one(&self, shared: &Shared) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            shared.period_done(self.start);
        }
    }
}

impl Shared {
    fn period_done(&self, start: Instant) {
        self.metrics
            .observe_tick(Instant::now().saturating_duration_since(start));
        self.metrics.set_storage_points(self.store.points());
    }
}

/// Runs the loop until `shutdown` is cancelled; in-flight requests are then cancelled.
pub async fn run<N: NodeSource + ?Sized>(
    config: Config,
    inventory: Arc<N>,
    store: Arc<Store>,
    client: Client,
    metrics: Arc<Metrics>,
    progress: Arc<Progress>,
    shutdown: CancellationToken,
) {
    let resolver = Resolver::new(
        &config.address_types,
        config.kubelet_port,
        config.use_node_status_port,
        config.source,
        client.plain_http(),
    );
    let request_timeout = if config.request_timeout.is_zero() {
        client.timeout()
    } else {
        config.request_timeout
    };
    let resolution = config.resolution.max(Duration::from_millis(1));
    let shared = Arc::new(Shared {
        slots: Semaphore::new(config.max_in_flight.max(1)),
        config,
        request_timeout,
        resolver,
        store,
        client,
        metrics,
        progress,
        clock: Clock::start(),
        nodes: parking_lot::Mutex::new(HashMap::new()),
    });

    let mut ticker = tokio::time::interval(resolution);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut in_flight: HashMap<NodeName, AbortHandle> = HashMap::new();
    let mut known: HashSet<NodeName> = HashSet::new();
    let mut queue: VecDeque<(Instant, Arc<NodeRecord>, Arc<Period>)> = VecDeque::new();

    loop {
        let next_start = queue.front().map(|(at, _, _)| *at);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            tick = ticker.tick() => {
                queue = plan(&shared, &*inventory, tick, resolution, &mut known, &mut in_flight);
            }
            () = sleep_until(next_start), if next_start.is_some() => {
                let now = Instant::now();
                while queue.front().is_some_and(|(at, _, _)| *at <= now) {
                    let Some((start, record, period)) = queue.pop_front() else { break };
                    let name = record.name.clone();
                    let handle = tasks.spawn(node::scrape(shared.clone(), record, start, period));
                    in_flight.insert(name, handle);
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "node scrape task panicked");
                }
            }
        }
    }
    tasks.shutdown().await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Starts a period: records progress, evicts stale data, forgets nodes that are gone and
/// lays out this period's start times (node i of n at i x period / n).
fn plan<N: NodeSource + ?Sized>(
    shared: &Arc<Shared>,
    inventory: &N,
    now: Instant,
    resolution: Duration,
    known: &mut HashSet<NodeName>,
    in_flight: &mut HashMap<NodeName, AbortHandle>,
) -> VecDeque<(Instant, Arc<NodeRecord>, Arc<Period>)> {
    let now_ns = shared.clock.unix_ns(now);
    shared
        .progress
        .last_tick_start_ns
        .store(now_ns, Ordering::Relaxed);
    shared.store.evict_stale(now_ns);

    let selector = &shared.config.node_selector;
    let nodes: Vec<Arc<NodeRecord>> = inventory
        .nodes()
        .into_iter()
        .filter(|n| selector.matches(&n.labels))
        .collect();
    let current: HashSet<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    for gone in known.difference(&current) {
        if let Some(handle) = in_flight.remove(gone) {
            handle.abort();
        }
        shared.store.remove_node(gone.as_str());
        shared.metrics.forget_node(gone.as_str());
        shared.nodes.lock().remove(gone);
        node::forgotten(gone);
    }
    in_flight.retain(|_, handle| !handle.is_finished());
    *known = current;

    let period = Arc::new(Period {
        start: now,
        remaining: AtomicUsize::new(nodes.len()),
    });
    if nodes.is_empty() {
        shared.period_done(now);
        return VecDeque::new();
    }
    let n = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, record)| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            (now + resolution / n * i, record, period.clone())
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
