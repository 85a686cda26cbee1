//! The scrape loop. It starts once the inventory's first list of nodes is in (the pods'
//! list, which takes seconds in a large cluster, goes on meanwhile: a scrape needs only the
//! node) and runs every node through two regimes:
//!
//! - **Warm-up** (at start, and for a node that appears later, at once): a first scrape of
//!   every node together, spread over at most [`FIRST_ROUND_SPREAD`] and bounded by the
//!   in-flight limit; then the node again as soon as a rate can be computed, that is when
//!   the kubelet's sample timestamps have moved on (see [`warmup`]). A node leaves warm-up
//!   when nothing it reported waits for a second point, when a scrape fails, or after
//!   [`warmup::limit`] (a period plus a housekeeping interval). With `usageNanoCores`
//!   (`--kubelet-source=summary`) the first scrape is enough. With `/metrics/resource`,
//!   the first warm-up scrape also asks `/stats/summary` (`--kubelet-summary-warmup`) and
//!   lends its `usageNanoCores` to the samples: the node and its pods are served after that
//!   one scrape, and the warm-up goes on until their counters pair.
//! - **Steady**: every `--metric-resolution` period, one request per node, spread evenly
//!   over the first [`PERIOD_SPREAD`] of the period (so the last request has the rest of it
//!   to finish, and a period's `metrics_server_manager_tick_duration_seconds` stays under the
//!   resolution when every kubelet is healthy) in slices of [`PERIOD_GRID`] that start
//!   together, each bounded by a deadline that counts any queueing.
//! - **Follow-ups**, beside either: a node on which a pod started (one the inventory's watch
//!   adds after its first list) is asked again 1 s later and then until the pod is served
//!   ([`warmup::follow_up_next`]); so is a warm node whose steady scrape found more series
//!   waiting for a second sample than its last scrape did (a container that restarted, whose
//!   first sample cannot be rated: without this its pod would be hidden until the next
//!   period). Within a budget per period ([`follow_up_budget`]); these scrapes belong to no
//!   period.
//!
//! Each node's result goes to the store as soon as it arrives: there is no barrier waiting
//! for the slowest kubelet (metrics-server waits for all, §3.2). [`Progress`] tells the
//! health checks and the cold-store rule when the first round is complete: every node of the
//! first list answered (with everything it reported served) or failed, and the pods are listed
//! (a list serves only the pods the inventory has).
//!
//! # Layout
//! - this file: [`Config`], [`Progress`], [`NodeSource`], [`run`] and the schedule.
//! - [`warmup`]: when a node is asked again outside its periods (warm-up, follow-ups).
//! - [`node`]: one node's scrape: resolve, queue, fetch, parse, store, count, log.

mod node;
mod warmup;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::{self, AbortHandle, JoinError, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::inventory::{Inventory, NodeRecord};
use crate::kubelet::Source;
use crate::kubelet::client::{Client, Resolver};
use crate::metrics::{FollowUpReason, Metrics};
use crate::point::NodeName;
use crate::selector::LabelSelector;
use crate::store::{Ingested, Store};

pub use node::Error;
pub use warmup::FIRST_ROUND_SPREAD;

/// Scrape settings (metrics-server flag names in the docs).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--metric-resolution`: one request per node per period.
    pub resolution: Duration,
    /// `--kubelet-request-timeout`: bounds each whole request, any scheduling delay included.
    pub request_timeout: Duration,
    /// Scrapes in flight at most: the bound on bodies arriving together.
    pub max_in_flight: usize,
    /// How long a request holds its in-flight slot: one still running after this gives the
    /// slot back and goes on without it, so kubelets that do not answer (nodes gone dark, a
    /// zone cut off) hold no slot for their whole timeout, and a few dozen of them do not
    /// starve the healthy nodes, which metrics-server's goroutine per node never does.
    /// [`DEFAULT_SLOT_HOLD`] by default.
    pub slot_hold: Duration,
    /// Which kubelet endpoint.
    pub source: Source,
    /// `--kubelet-summary-warmup`: with the `/metrics/resource` source, a node's first
    /// warm-up scrape also asks `/stats/summary` and lends its `usageNanoCores` (the
    /// kubelet's own rate) to the samples, so the node and its pods are served at once
    /// instead of after the kubelet's next refresh. Needs `get` on `nodes/stats`; a 403
    /// turns it off with one log line.
    pub summary_warmup: bool,
    /// `--kubelet-preferred-address-types`, in priority order.
    pub address_types: Vec<String>,
    /// `--kubelet-port`.
    pub kubelet_port: u16,
    /// `--kubelet-use-node-status-port`.
    pub use_node_status_port: bool,
    /// `--node-selector`: which nodes are scraped.
    pub node_selector: LabelSelector,
    /// The runtimes the scrapes run on, a node always on the same one (by a hash of its name:
    /// its kept-alive kubelet connection belongs to that runtime's driver); empty: the loop's
    /// own.
    pub threads: Vec<tokio::runtime::Handle>,
}

/// [`Config::slot_hold`] by default: a healthy kubelet answers in milliseconds, a loaded one
/// within a few hundred.
pub const DEFAULT_SLOT_HOLD: Duration = Duration::from_secs(1);

// The first round's states; 0 (the default) is "not started".
const ROUND_RUNNING: u8 = 1;
const ROUND_COMPLETE: u8 = 2;

/// Progress of the loop, read by the health checks and the cold-store rule.
#[derive(Debug, Default)]
pub struct Progress {
    /// When the last tick (period) started, Unix ns; 0 before the first.
    pub last_tick_start_ns: AtomicI64,
    /// When a scrape last finished (success or failure), Unix ns; 0 before the first.
    pub last_scrape_done_ns: AtomicI64,
    /// Not started (0), running or complete.
    first_round: AtomicU8,
    /// Parts of the first round not yet done: each node not yet served (nor failed), and the
    /// inventory's first list of pods while it is not in.
    first_round_pending: AtomicUsize,
}

impl Progress {
    /// Progress of a store that its owner filled, with no loop behind it (benches, tests):
    /// its first round counts as complete.
    pub fn completed() -> Self {
        let progress = Progress::default();
        progress
            .first_round
            .store(ROUND_COMPLETE, Ordering::Release);
        progress
    }

    /// When the last tick started, if any.
    pub fn last_tick_start_ns(&self) -> Option<i64> {
        Some(self.last_tick_start_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// When a scrape last finished, if any.
    pub fn last_scrape_done_ns(&self) -> Option<i64> {
        Some(self.last_scrape_done_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// Whether every node of the first list has answered (with everything it reported
    /// served) or failed, and the pods are listed. Until then a list may be partial.
    pub fn first_round_complete(&self) -> bool {
        self.first_round.load(Ordering::Acquire) == ROUND_COMPLETE
    }

    /// Parts of the first round not yet done (nodes not yet served nor failed, plus one while
    /// the pods are not listed); `None` before the round starts (the inventory has not listed
    /// the nodes yet) and once it is complete.
    pub fn first_round_pending(&self) -> Option<usize> {
        (self.first_round.load(Ordering::Acquire) == ROUND_RUNNING)
            .then(|| self.first_round_pending.load(Ordering::Acquire))
    }

    fn start_first_round(&self, parts: usize) {
        self.first_round_pending.store(parts, Ordering::Release);
        let state = if parts == 0 {
            ROUND_COMPLETE
        } else {
            ROUND_RUNNING
        };
        self.first_round.store(state, Ordering::Release);
    }

    /// One part of the first round is done; true when it was the last.
    fn first_round_part_done(&self) -> bool {
        let before = self.first_round_pending.fetch_sub(1, Ordering::AcqRel);
        if before == 1 {
            self.first_round.store(ROUND_COMPLETE, Ordering::Release);
        }
        before == 1
    }
}

/// Where the loop gets the nodes to scrape: the [`Inventory`] in production, anything that
/// lists node records in tests and benches.
pub trait NodeSource: Send + Sync + 'static {
    /// Every node, sorted by name.
    fn nodes(&self) -> Vec<Arc<NodeRecord>>;

    /// Whether the first list of nodes is in: the loop starts only then.
    fn nodes_listed(&self) -> bool {
        true
    }

    /// Whether the first list of pods is in: the first round is complete only then.
    fn pods_listed(&self) -> bool {
        true
    }

    /// A receiver that changes when the node set does, so a new node is scraped at once and
    /// a deleted one forgotten at once; `None`: changes are seen at the next period.
    fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// A receiver that changes when a pod starts on a node; `None`: pods that start wait
    /// for their node's next period.
    fn subscribe_pod_starts(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// The nodes on which a pod started since the last call.
    fn take_pod_starts(&self) -> Vec<NodeName> {
        Vec::new()
    }
}

impl NodeSource for Inventory {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        Inventory::nodes(self)
    }

    fn nodes_listed(&self) -> bool {
        Inventory::nodes_listed(self)
    }

    fn pods_listed(&self) -> bool {
        Inventory::pods_listed(self)
    }

    fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        Some(Inventory::subscribe(self))
    }

    fn subscribe_pod_starts(&self) -> Option<watch::Receiver<u64>> {
        Some(Inventory::subscribe_pod_starts(self))
    }

    fn take_pod_starts(&self) -> Vec<NodeName> {
        Inventory::take_pod_starts(self)
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
        let base_unix_ns = crate::clock::unix_now_ns();
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

    /// The instant of a Unix time (the clock's start for anything before it).
    fn instant(&self, unix_ns: i64) -> Instant {
        let since = u64::try_from(unix_ns.saturating_sub(self.base_unix_ns)).unwrap_or(0);
        self.base + Duration::from_nanos(since)
    }
}

/// What every node task shares.
struct Shared {
    config: Config,
    request_timeout: Duration,
    resolution: Duration,
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
    /// Set when a kubelet refused `/stats/summary` (403): warm-up scrapes stop asking it.
    summary_refused: AtomicBool,
}

/// One period: when it started and how many of its scrapes are still to finish. The last
/// one to finish observes the tick duration and the storage points.
struct Period {
    start: Instant,
    remaining: AtomicUsize,
}

impl Period {
    fn new(shared: &Shared, start: Instant, nodes: usize) -> Arc<Period> {
        if nodes == 0 {
            shared.period_done(start);
        }
        Arc::new(Period {
            start,
            remaining: AtomicUsize::new(nodes),
        })
    }

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
        resolution,
        resolver,
        store,
        client,
        metrics,
        progress,
        clock: Clock::start(),
        nodes: parking_lot::Mutex::new(HashMap::new()),
        summary_refused: AtomicBool::new(false),
    });

    let mut changes = inventory.subscribe();
    let mut pod_starts = inventory.subscribe_pod_starts();
    while !inventory.nodes_listed() {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            () = changed(&mut changes, SYNC_POLL) => {}
        }
    }

    let start = Instant::now();
    let mut schedule = Schedule::new(shared, inventory);
    schedule.first_round(start);
    let mut ticker = tokio::time::interval_at(start + resolution, resolution);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        let next = schedule.next_due();
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            tick = ticker.tick() => schedule.tick(tick),
            () = changed(&mut changes, Duration::MAX) => {
                let now = Instant::now();
                schedule.sync(now);
                schedule.check_pods_listed(now);
            }
            () = changed(&mut pod_starts, Duration::MAX) => {
                schedule.pods_started(Instant::now());
            }
            () = sleep_until(next), if next.is_some() => schedule.start_due(Instant::now()),
            Some(joined) = schedule.tasks.join_next_with_id(), if !schedule.tasks.is_empty() => {
                schedule.finished(joined, Instant::now());
            }
        }
    }
    schedule.tasks.shutdown().await;
}

/// How often a source without change notifications is asked whether it has listed.
const SYNC_POLL: Duration = Duration::from_millis(100);

/// Resolves when `changes` changes; without a receiver (or once its sender is gone), after
/// `poll` (`Duration::MAX`: never).
async fn changed(changes: &mut Option<watch::Receiver<u64>>, poll: Duration) {
    if let Some(rx) = changes {
        if rx.changed().await.is_ok() {
            return;
        }
        *changes = None;
    }
    match Instant::now().checked_add(poll) {
        Some(at) if poll != Duration::MAX => tokio::time::sleep_until(at).await,
        _ => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One scheduled scrape in the heap; stale entries (rescheduled or forgotten nodes) are
/// skipped when popped.
type Due = Reverse<(Instant, u64, NodeName)>;

/// What the loop knows of one node.
struct Tracked {
    record: Arc<NodeRecord>,
    /// Tells this node's task outcomes from those of an earlier node of the same name.
    epoch: u64,
    /// While warming up: when the warm-up started, and the scrapes it has had.
    warming: Option<(Instant, u32)>,
    /// Counted in the first round until all it reported is served or its warm-up ends.
    first_round: bool,
    /// The scheduled scrape.
    next: Option<Next>,
    task: Option<AbortHandle>,
    /// Pods or containers started on the node: the node is asked again, outside its
    /// periods, until they are served.
    follow_up: Option<FollowUp>,
    /// Series its last ingested scrape left waiting for a second sample: a steady scrape that
    /// finds more starts a follow-up.
    pending: u32,
}

/// A node's scrapes after a pod or container started on it, so the pod is served as soon as
/// its containers have a sample the store can rate (see [`warmup::FOLLOW_UP_SETTLE`])
/// instead of at the node's next period: up to a resolution later.
struct FollowUp {
    reason: FollowUpReason,
    /// When the last start on the node was seen.
    since: Instant,
    /// Follow-up scrapes finished.
    attempts: u32,
    /// The scheduled one (its heap sequence number, and when); `None` while it runs.
    seq: Option<(u64, Instant)>,
    /// The running one, and when it started.
    task: Option<(AbortHandle, Instant)>,
}

impl FollowUp {
    /// How long after `since` the follow-ups go on even when nothing waits: after a pod
    /// start, until its containers have surely been sampled ([`warmup::FOLLOW_UP_SETTLE`]);
    /// after a scrape that saw the waiting series, not at all.
    fn settle(&self) -> Duration {
        match self.reason {
            FollowUpReason::PodStart => warmup::FOLLOW_UP_SETTLE,
            FollowUpReason::ContainerStart => Duration::ZERO,
        }
    }

    /// When to ask the node again after a scrape found `ingested` at `now`; `None`: done
    /// ([`warmup::follow_up_next`]).
    fn next(&self, ingested: &Ingested, clock: &Clock, now: Instant) -> Option<Instant> {
        let refresh = warmup::expected_refresh_ns(ingested.waiting_newest_ns);
        warmup::follow_up_next(
            self.since,
            self.settle(),
            self.attempts,
            ingested.pending,
            clock.instant(refresh),
            now,
        )
    }

    /// Its scrape is running (one that ended without reporting, a panic, does not count).
    fn running(&self) -> bool {
        self.task.as_ref().is_some_and(|(t, _)| !t.is_finished())
    }
}

/// A node's scheduled scrape: its heap sequence number, when, and the period it belongs to.
struct Next {
    seq: u64,
    at: Instant,
    period: Option<Arc<Period>>,
}

/// How the first round ended, for its log line.
#[derive(Debug, Default)]
struct RoundTally {
    nodes: usize,
    warm: usize,
    failed: usize,
    gave_up: usize,
}

/// Why a node's warm-up ended.
#[derive(Clone, Copy, Debug)]
enum WarmupEnd {
    /// Nothing it reported waits for a second point.
    Warm,
    /// A scrape failed: it is retried on the steady schedule.
    Failed,
    /// [`warmup::limit`] passed with series still waiting (a kubelet that does not
    /// refresh, or data that never yields a rate): the steady schedule takes it over.
    GaveUp,
    /// It left the inventory or the node selector.
    Gone,
}

/// The schedule: every tracked node, the heap of due scrapes, the running scrape tasks.
struct Schedule<N: ?Sized> {
    shared: Arc<Shared>,
    inventory: Arc<N>,
    nodes: HashMap<NodeName, Tracked>,
    due: BinaryHeap<Due>,
    seq: u64,
    tasks: JoinSet<node::Outcome>,
    started: Instant,
    tally: RoundTally,
    /// The first round began before the inventory's first list of pods was in, and it is
    /// still not in.
    pods_pending: bool,
    /// Pod-start scrapes the current period may still start ([`follow_up_budget`]).
    follow_up_budget: usize,
}

/// Pod-start scrapes per period: a tenth of the nodes, so a large cluster whose pods churn
/// fast pays at most ~10 % more kubelet requests, and at least 64, so a small cluster's
/// rollout (two to seven scrapes a pod) is served at once; past it a started pod waits for
/// its node's period, as it did without them.
fn follow_up_budget(nodes: usize) -> usize {
    (nodes / 10).max(64)
}

/// Queues a scrape of `name` at `at`; returns its sequence number, which tells the entry from
/// those it replaces (stale entries are skipped when popped).
fn push_due(seq: &mut u64, due: &mut BinaryHeap<Due>, at: Instant, name: NodeName) -> u64 {
    *seq += 1;
    due.push(Reverse((at, *seq, name)));
    *seq
}

/// Spawns a scrape of `tracked`'s node that was due at `at`.
fn spawn(
    tasks: &mut JoinSet<node::Outcome>,
    shared: &Arc<Shared>,
    tracked: &Tracked,
    at: Instant,
    kind: node::Kind,
    period: Option<Arc<Period>>,
) -> AbortHandle {
    let scrape = node::scrape(
        shared.clone(),
        tracked.record.clone(),
        tracked.epoch,
        at,
        kind,
        period,
    );
    match thread_of(&shared.config.threads, &tracked.record.name) {
        Some(thread) => tasks.spawn_on(scrape, thread),
        None => tasks.spawn(scrape),
    }
}

/// Which of `threads` scrapes `node`: the same one every time.
fn thread_of<'a>(
    threads: &'a [tokio::runtime::Handle],
    node: &NodeName,
) -> Option<&'a tokio::runtime::Handle> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    match threads {
        [] => None,
        [only] => Some(only),
        _ => {
            let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(node.as_str());
            threads.get((hash % threads.len() as u64) as usize)
        }
    }
}

impl<N: NodeSource + ?Sized> Schedule<N> {
    fn new(shared: Arc<Shared>, inventory: Arc<N>) -> Self {
        Schedule {
            shared,
            inventory,
            nodes: HashMap::new(),
            due: BinaryHeap::new(),
            seq: 0,
            tasks: JoinSet::new(),
            started: Instant::now(),
            tally: RoundTally::default(),
            pods_pending: false,
            follow_up_budget: follow_up_budget(0),
        }
    }

    fn selected(&self) -> Vec<Arc<NodeRecord>> {
        let selector = &self.shared.config.node_selector;
        self.inventory
            .nodes()
            .into_iter()
            .filter(|n| selector.matches(&n.labels))
            .collect()
    }

    fn record_tick(&self, now: Instant) {
        let now_ns = self.shared.clock.unix_ns(now);
        self.shared
            .progress
            .last_tick_start_ns
            .store(now_ns, Ordering::Relaxed);
        self.shared.store.evict_stale(now_ns);
    }

    /// The warm-up round: every node at once, spread over at most [`FIRST_ROUND_SPREAD`].
    fn first_round(&mut self, now: Instant) {
        self.started = now;
        self.record_tick(now);
        let nodes = self.selected();
        self.tally.nodes = nodes.len();
        self.follow_up_budget = follow_up_budget(nodes.len());
        self.pods_pending = !self.inventory.pods_listed();
        let parts = nodes.len() + usize::from(self.pods_pending);
        self.shared.progress.start_first_round(parts);
        tracing::info!(
            nodes = nodes.len(),
            pods_listed = !self.pods_pending,
            "nodes listed; first scrape round"
        );
        let period = Period::new(&self.shared, now, nodes.len());
        let spread = FIRST_ROUND_SPREAD.min(self.shared.resolution);
        for (at, record) in spaced(now, spread, Duration::ZERO, nodes) {
            let name = record.name.clone();
            self.track(record, now, true);
            self.schedule(&name, at, Some(period.clone()));
        }
    }

    /// A period: every node gets its slot, spread evenly over it. A warming node keeps its
    /// warm-up attempt instead when that comes first; a warm-up past [`warmup::limit`] ends
    /// here. Nodes the inventory no longer has are forgotten.
    fn tick(&mut self, now: Instant) {
        self.record_tick(now);
        let nodes = self.sync(now);
        self.follow_up_budget = follow_up_budget(nodes.len());
        let resolution = self.shared.resolution;
        let limit = warmup::limit(resolution);
        let mut slots = Vec::with_capacity(nodes.len());
        let spread = resolution.mul_f64(PERIOD_SPREAD);
        for (at, record) in spaced(now, spread, PERIOD_GRID, nodes) {
            let Some(tracked) = self.nodes.get_mut(&record.name) else {
                continue;
            };
            tracked.record = record.clone();
            if let Some((since, _)) = tracked.warming {
                if now.saturating_duration_since(since) >= limit {
                    self.end_warmup(&record.name, WarmupEnd::GaveUp, now);
                } else if tracked.next.as_ref().is_some_and(|next| next.at <= at) {
                    continue;
                }
            }
            slots.push((at, record.name.clone()));
        }
        let period = Period::new(&self.shared, now, slots.len());
        for (at, name) in slots {
            self.schedule(&name, at, Some(period.clone()));
        }
    }

    /// Brings the tracked set in line with the inventory: new nodes start their warm-up now,
    /// gone ones are forgotten. Returns the selected nodes, sorted by name.
    fn sync(&mut self, now: Instant) -> Vec<Arc<NodeRecord>> {
        let nodes = self.selected();
        let current: HashSet<&NodeName> = nodes.iter().map(|n| &n.name).collect();
        let gone: Vec<NodeName> = self
            .nodes
            .keys()
            .filter(|name| !current.contains(name))
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name, now);
        }
        for record in &nodes {
            match self.nodes.get_mut(&record.name) {
                Some(tracked) => tracked.record = record.clone(),
                None => {
                    tracing::debug!(node = %record.name, "new node: warming up");
                    let name = record.name.clone();
                    self.track(record.clone(), now, false);
                    self.schedule(&name, now, None);
                }
            }
        }
        nodes
    }

    fn track(&mut self, record: Arc<NodeRecord>, now: Instant, first_round: bool) {
        self.seq += 1;
        self.shared.metrics.warming(true);
        let tracked = Tracked {
            record: record.clone(),
            epoch: self.seq,
            warming: Some((now, 0)),
            first_round,
            next: None,
            task: None,
            follow_up: None,
            pending: 0,
        };
        self.nodes.insert(record.name.clone(), tracked);
    }

    /// Sets the node's next scrape; one it replaces counts as done for its period.
    fn schedule(&mut self, name: &NodeName, at: Instant, period: Option<Arc<Period>>) {
        let Some(tracked) = self.nodes.get_mut(name) else {
            return;
        };
        let seq = push_due(&mut self.seq, &mut self.due, at, name.clone());
        let next = Next { seq, at, period };
        if let Some(Next {
            period: Some(replaced),
            ..
        }) = tracked.next.replace(next)
        {
            replaced.finish_one(&self.shared);
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Starts every scrape that is due.
    fn start_due(&mut self, now: Instant) {
        while let Some(Reverse((at, seq, _))) = self.due.peek()
            && *at <= now
        {
            let (at, seq) = (*at, *seq);
            let Some(Reverse((_, _, name))) = self.due.pop() else {
                break;
            };
            let Some(tracked) = self.nodes.get_mut(&name) else {
                continue;
            };
            if tracked.next.as_ref().is_some_and(|next| next.seq == seq) {
                let period = tracked.next.take().and_then(|next| next.period);
                let kind = match tracked.warming {
                    Some((_, attempts)) => node::Kind::Warmup {
                        first: attempts == 0,
                    },
                    None => node::Kind::Steady,
                };
                tracked.task = Some(spawn(
                    &mut self.tasks,
                    &self.shared,
                    tracked,
                    at,
                    kind,
                    period,
                ));
            } else if tracked
                .follow_up
                .as_ref()
                .is_some_and(|f| f.seq.is_some_and(|(s, _)| s == seq))
            {
                self.start_follow_up(name, at, now);
            }
        }
    }

    /// Starts a node's due follow-up scrape: after its scheduled scrape if that is running,
    /// not at all past the period's budget.
    fn start_follow_up(&mut self, name: NodeName, at: Instant, now: Instant) {
        let Some(tracked) = self.nodes.get_mut(&name) else {
            return;
        };
        let Some(follow_up) = tracked.follow_up.as_mut() else {
            return;
        };
        if tracked.task.as_ref().is_some_and(|t| !t.is_finished()) {
            let retry = now + warmup::QUICK_RETRY;
            let seq = push_due(&mut self.seq, &mut self.due, retry, name);
            follow_up.seq = Some((seq, retry));
            return;
        }
        follow_up.seq = None;
        let reason = follow_up.reason;
        if self.follow_up_budget == 0 {
            self.shared.metrics.follow_up_scrape_skipped(reason);
            tracked.follow_up = None;
            return;
        }
        self.follow_up_budget -= 1;
        self.shared.metrics.follow_up_scrape(reason);
        let task = spawn(
            &mut self.tasks,
            &self.shared,
            tracked,
            at,
            node::Kind::Steady,
            None,
        );
        if let Some(follow_up) = tracked.follow_up.as_mut() {
            follow_up.task = Some((task, now));
        }
    }

    /// A scrape task ended: a warming node is asked again, or leaves warm-up.
    fn finished(&mut self, joined: Result<(task::Id, node::Outcome), JoinError>, now: Instant) {
        let (task, outcome) = match joined {
            Ok(joined) => joined,
            Err(e) => {
                if e.is_panic() {
                    tracing::error!(error = %e, "node scrape task panicked");
                }
                return;
            }
        };
        let Some(tracked) = self.nodes.get_mut(&outcome.node) else {
            return;
        };
        if tracked.epoch != outcome.epoch {
            return;
        }
        let pending_before = tracked.pending;
        if let Some(fetched) = &outcome.fetched {
            tracked.pending = fetched.ingested.pending;
        }
        let follow_up = tracked.follow_up.as_ref().and_then(|f| f.task.as_ref());
        if follow_up.is_some_and(|(running, _)| running.id() == task) {
            self.follow_up_finished(&outcome, now);
            return;
        }
        let Some((since, attempts)) = &mut tracked.warming else {
            if tracked.pending > pending_before {
                self.containers_started(&outcome, now);
            }
            return;
        };
        *attempts += 1;
        let (since, attempts) = (*since, *attempts);
        let Some(node::Fetched {
            ingested,
            refreshed,
        }) = outcome.fetched
        else {
            self.end_warmup(&outcome.node, WarmupEnd::Failed, now);
            return;
        };
        // Series served from the kubelet's own rate still wait for a pair of their own with
        // `/metrics/resource`; with the summary source that rate is the steady state.
        let unpaired = match self.shared.config.source {
            Source::Resource => ingested.unpaired,
            Source::Summary => 0,
        };
        if ingested.pending + unpaired == 0 {
            self.end_warmup(&outcome.node, WarmupEnd::Warm, now);
            return;
        }
        if ingested.pending == 0 {
            // Everything it reported is served: the first round need not wait for the pairs.
            self.first_round_done(&outcome.node, WarmupEnd::Warm, now);
        }
        let at = if refreshed {
            // The kubelet already has newer samples of some series: they pair now.
            now + warmup::REFRESHED_RETRY
        } else {
            let refresh = warmup::expected_refresh_ns(ingested.waiting_newest_ns);
            warmup::next_attempt(attempts, self.shared.clock.instant(refresh), now)
        };
        if at.saturating_duration_since(since) >= warmup::limit(self.shared.resolution) {
            // The next tick puts it on the steady schedule.
            self.end_warmup(&outcome.node, WarmupEnd::GaveUp, now);
            return;
        }
        tracing::trace!(node = %outcome.node, pending = ingested.pending, unpaired, attempts,
            since_ms = now.saturating_duration_since(since).as_millis() as u64,
            "warming up: series wait for a newer sample");
        // A tick past about a period of warm-up replaces this with the steady slot.
        self.schedule(&outcome.node, at, None);
    }

    /// Pods started on these nodes: each is asked again, [`warmup::QUICK_RETRY`] from now
    /// (for the containers' first samples) and then as a warm-up is, until they are served;
    /// also a node still warming up, whose warm-up may end before the kubelet samples the
    /// new containers.
    fn pods_started(&mut self, now: Instant) {
        for name in self.inventory.take_pod_starts() {
            let Some(tracked) = self.nodes.get_mut(&name) else {
                continue;
            };
            let follow_up = tracked.follow_up.get_or_insert(FollowUp {
                reason: FollowUpReason::PodStart,
                since: now,
                attempts: 0,
                seq: None,
                task: None,
            });
            follow_up.reason = FollowUpReason::PodStart;
            follow_up.since = now;
            follow_up.attempts = 0;
            let running = follow_up.running();
            // One already due sooner stays (so starts in a row do not put it off); a later
            // one, waiting for earlier containers' next samples, comes forward.
            let at = now + warmup::QUICK_RETRY;
            let sooner = follow_up.seq.is_some_and(|(_, due)| due <= at);
            if !running && !sooner {
                tracing::trace!(node = %name, "pod started: asking the node again");
                let seq = push_due(&mut self.seq, &mut self.due, at, name);
                follow_up.seq = Some((seq, at));
            }
        }
    }

    /// A steady scrape of a warm node found more series waiting for a second sample than the
    /// node's last scrape left (a container restarted, or started unseen by the inventory):
    /// unless follow-ups already run, the node is asked again when they should have one, and
    /// then as after a pod start, without the settling (the scrape saw the samples).
    fn containers_started(&mut self, outcome: &node::Outcome, now: Instant) {
        let Some(tracked) = self.nodes.get_mut(&outcome.node) else {
            return;
        };
        let Some(fetched) = &outcome.fetched else {
            return;
        };
        if tracked.follow_up.is_some() {
            return;
        }
        let mut follow_up = FollowUp {
            reason: FollowUpReason::ContainerStart,
            since: now,
            // This scrape was the first.
            attempts: 1,
            seq: None,
            task: None,
        };
        let Some(at) = follow_up.next(&fetched.ingested, &self.shared.clock, now) else {
            return;
        };
        tracing::trace!(node = %outcome.node, pending = fetched.ingested.pending,
            "series started since the last scrape: asking the node again");
        let seq = push_due(&mut self.seq, &mut self.due, at, outcome.node.clone());
        follow_up.seq = Some((seq, at));
        tracked.follow_up = Some(follow_up);
    }

    /// A follow-up scrape finished: the node is asked again while series wait for a sample
    /// ([`warmup::follow_up_next`]).
    fn follow_up_finished(&mut self, outcome: &node::Outcome, now: Instant) {
        let Some(tracked) = self.nodes.get_mut(&outcome.node) else {
            return;
        };
        let Some(follow_up) = tracked.follow_up.as_mut() else {
            return;
        };
        let started = follow_up.task.take().map(|(_, started)| started);
        if follow_up.seq.is_none() && started.is_some_and(|started| started < follow_up.since) {
            // A pod started while this scrape ran, which may have come before its containers:
            // asked again as a pod start asks.
            let at = (follow_up.since + warmup::QUICK_RETRY).max(now);
            let seq = push_due(&mut self.seq, &mut self.due, at, outcome.node.clone());
            follow_up.seq = Some((seq, at));
            return;
        }
        follow_up.attempts += 1;
        let next = outcome
            .fetched
            .as_ref()
            .and_then(|fetched| follow_up.next(&fetched.ingested, &self.shared.clock, now));
        if follow_up.seq.is_some() {
            // A pod started after this task ended and before its outcome came: that start
            // scheduled the next one.
            return;
        }
        match next {
            Some(at) => {
                let name = outcome.node.clone();
                let seq = push_due(&mut self.seq, &mut self.due, at, name);
                follow_up.seq = Some((seq, at));
            }
            None => tracked.follow_up = None,
        }
    }

    fn end_warmup(&mut self, name: &NodeName, end: WarmupEnd, now: Instant) {
        let Some(tracked) = self.nodes.get_mut(name) else {
            return;
        };
        let Some((since, attempts)) = tracked.warming.take() else {
            return;
        };
        self.shared.metrics.warming(false);
        tracing::debug!(node = %name, ?end, attempts,
            elapsed_ms = now.saturating_duration_since(since).as_millis() as u64,
            "warm-up done");
        self.first_round_done(name, end, now);
    }

    /// A node of the first round is served, failed, gave up or is gone; logs the round's
    /// end with the last of them.
    fn first_round_done(&mut self, name: &NodeName, end: WarmupEnd, now: Instant) {
        let Some(tracked) = self.nodes.get_mut(name) else {
            return;
        };
        if !std::mem::take(&mut tracked.first_round) {
            return;
        }
        match end {
            WarmupEnd::Warm => self.tally.warm += 1,
            WarmupEnd::Failed => self.tally.failed += 1,
            WarmupEnd::GaveUp => self.tally.gave_up += 1,
            WarmupEnd::Gone => {}
        }
        self.first_round_part_done(now);
    }

    /// The pods' first list, if the first round waits for it, is in.
    fn check_pods_listed(&mut self, now: Instant) {
        if self.pods_pending && self.inventory.pods_listed() {
            self.pods_pending = false;
            tracing::debug!(
                elapsed_ms = now.saturating_duration_since(self.started).as_millis() as u64,
                "pods listed during the first round"
            );
            self.first_round_part_done(now);
        }
    }

    /// Logs the round's end with its last part.
    fn first_round_part_done(&mut self, now: Instant) {
        if self.shared.progress.first_round_part_done() {
            let t = &self.tally;
            tracing::info!(
                nodes = t.nodes,
                warm = t.warm,
                failed = t.failed,
                gave_up = t.gave_up,
                elapsed_ms = now.saturating_duration_since(self.started).as_millis() as u64,
                "first scrape round complete"
            );
        }
    }

    /// A node left the inventory or the selector: its scrape is cancelled and its data and
    /// series are dropped.
    fn forget(&mut self, name: &NodeName, now: Instant) {
        self.end_warmup(name, WarmupEnd::Gone, now);
        let Some(tracked) = self.nodes.remove(name) else {
            return;
        };
        if let Some(task) = tracked.task {
            task.abort();
        }
        if let Some((task, _)) = tracked.follow_up.and_then(|f| f.task) {
            task.abort();
        }
        if let Some(Next {
            period: Some(period),
            ..
        }) = tracked.next
        {
            period.finish_one(&self.shared);
        }
        self.shared.store.remove_node(name.as_str());
        self.shared.metrics.forget_node(name.as_str());
        self.shared.nodes.lock().remove(name);
        node::forgotten(name);
    }
}

/// The share of a period its requests are spread over: at 15,000 nodes and 15 s the last of
/// them starts 1.5 s before the next period instead of 1 ms (measured: with the whole period,
/// half the periods ended a few milliseconds past the resolution).
pub const PERIOD_SPREAD: f64 = 0.9;

/// The steady schedule's start times are multiples of this from the period's start: the
/// scrapes of one such slice start together, so one timer wake-up starts them and their
/// answers, arriving within a few milliseconds of each other, are read in fewer wake-ups
/// (at 5,000 nodes and 15 s, 37 per slice instead of one every 2.7 ms). A node never starts
/// later than its even share of the spread would have it; with a spread shorter than a
/// slice (a resolution under ~111 ms) every node starts with the period.
pub const PERIOD_GRID: Duration = Duration::from_millis(100);

/// Start times of `nodes` spread evenly over `over` from `start`: node i of n at
/// `start + i x over / n`, rounded down to a multiple of `grid` (none when zero).
fn spaced(
    start: Instant,
    over: Duration,
    grid: Duration,
    nodes: Vec<Arc<NodeRecord>>,
) -> impl Iterator<Item = (Instant, Arc<NodeRecord>)> {
    let n = u32::try_from(nodes.len()).unwrap_or(u32::MAX).max(1);
    let grid_ns = grid.as_nanos().max(1);
    nodes.into_iter().enumerate().map(move |(i, record)| {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let share = over / n * i;
        // Less than `grid`, so it fits whenever `grid` does.
        let past_slice = u64::try_from(share.as_nanos() % grid_ns).unwrap_or(0);
        (start + (share - Duration::from_nanos(past_slice)), record)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
