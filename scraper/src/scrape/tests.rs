//! Loop scheduling under a paused clock. Nodes here have no usable address, so every scrape
//! fails at once without I/O and the timing of each attempt is the schedule itself. Real
//! HTTPS scrapes are in `tests/conformance/tests/it/scrape.rs`.

use super::*;
use crate::inventory::Labels;
use prometheus_client::registry::Registry;

/// A node source whose list and sync state the test sets.
struct Fixed {
    nodes: parking_lot::Mutex<Vec<Arc<NodeRecord>>>,
    nodes_listed: std::sync::atomic::AtomicBool,
    pods_listed: std::sync::atomic::AtomicBool,
    changes: watch::Sender<u64>,
    pod_starts: parking_lot::Mutex<Vec<NodeName>>,
    pod_starts_changed: watch::Sender<u64>,
}

impl Fixed {
    fn new(names: &[&str], listed: bool) -> Self {
        Fixed {
            nodes: parking_lot::Mutex::new(names.iter().map(|n| record(n)).collect()),
            nodes_listed: std::sync::atomic::AtomicBool::new(listed),
            pods_listed: std::sync::atomic::AtomicBool::new(listed),
            changes: watch::Sender::new(0),
            pod_starts: parking_lot::Mutex::new(Vec::new()),
            pod_starts_changed: watch::Sender::new(0),
        }
    }

    /// A pod started on `node`; notifies the loop.
    fn start_pod(&self, node: &str) {
        self.pod_starts.lock().push(NodeName::from(node));
        self.pod_starts_changed.send_modify(|g| *g += 1);
    }

    /// Lists these nodes (the first list, or a change) and the pods, and notifies the loop.
    fn list(&self, names: &[&str]) {
        self.list_nodes(names);
        self.list_pods();
    }

    /// Lists these nodes only and notifies the loop.
    fn list_nodes(&self, names: &[&str]) {
        *self.nodes.lock() = names.iter().map(|n| record(n)).collect();
        self.nodes_listed.store(true, Ordering::Release);
        self.changes.send_modify(|g| *g += 1);
    }

    /// The pods' first list is in; notifies the loop.
    fn list_pods(&self) {
        self.pods_listed.store(true, Ordering::Release);
        self.changes.send_modify(|g| *g += 1);
    }
}

impl NodeSource for Fixed {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.nodes.lock().clone()
    }
    fn nodes_listed(&self) -> bool {
        self.nodes_listed.load(Ordering::Acquire)
    }
    fn pods_listed(&self) -> bool {
        self.pods_listed.load(Ordering::Acquire)
    }
    fn subscribe_pod_starts(&self) -> Option<watch::Receiver<u64>> {
        Some(self.pod_starts_changed.subscribe())
    }
    fn take_pod_starts(&self) -> Vec<NodeName> {
        std::mem::take(&mut *self.pod_starts.lock())
    }
    fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

fn record(name: &str) -> Arc<NodeRecord> {
    Arc::new(NodeRecord {
        name: NodeName::from(name),
        labels: Labels::default(),
        addresses: Vec::new(),
        kubelet_port: None,
        metrics_path: None,
    })
}

fn config(resolution: Duration) -> Config {
    Config {
        resolution,
        request_timeout: resolution / 2,
        max_in_flight: 4,
        slot_hold: super::DEFAULT_SLOT_HOLD,
        source: Source::Resource,
        summary_warmup: false,
        address_types: vec!["InternalIP".to_owned()],
        kubelet_port: 10250,
        use_node_status_port: false,
        node_selector: LabelSelector::default(),
        threads: Vec::new(),
    }
}

struct Running {
    nodes: Arc<Fixed>,
    metrics: Arc<Metrics>,
    progress: Arc<Progress>,
    registry: Registry,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(names: &[&str], resolution: Duration) -> Running {
    start_with(Fixed::new(names, true), resolution)
}

/// As [`start`], with an inventory that has not listed yet.
fn start_unsynced(names: &[&str], resolution: Duration) -> Running {
    start_with(Fixed::new(names, false), resolution)
}

fn start_with(nodes: Fixed, resolution: Duration) -> Running {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry, resolution));
    let nodes = Arc::new(nodes);
    let progress = Arc::new(Progress::default());
    let shutdown = CancellationToken::new();
    let client = Client::new(crate::kubelet::client::Config::default()).unwrap();
    let task = tokio::spawn(run(
        config(resolution),
        nodes.clone(),
        Arc::new(Store::new(crate::store::Config::new(resolution))),
        client,
        metrics.clone(),
        progress.clone(),
        shutdown.clone(),
    ));
    Running {
        nodes,
        metrics,
        progress,
        registry,
        shutdown,
        task,
    }
}

async fn at(t0: Instant, offset: Duration) {
    tokio::time::sleep_until(t0 + offset).await;
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Checks, at each `(offset_ms, expected)` in turn, how many requests the loop has made.
async fn requests_by(r: &Running, t0: Instant, steps: &[(u64, u64)]) {
    for &(offset_ms, expected) in steps {
        at(t0, ms(offset_ms)).await;
        assert_eq!(
            r.metrics.requests(false),
            expected,
            "requests done by t={offset_ms}ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_first_round_asks_every_node_at_once_then_periods_spread_them() {
    let t0 = Instant::now();
    let r = start(&["a", "b", "c", "d"], Duration::from_secs(4));
    // First round: all four within FIRST_ROUND_SPREAD (0, 250, 500, 750 ms). They fail
    // (no address), which ends their warm-up. Then node i of 4 at 4 + i x 0.9 seconds: the
    // period's requests are spread over its first 90 %.
    let steps = [
        (1, 1),
        (800, 4),
        (3_999, 4),
        (4_001, 5),
        (4_899, 5),
        (4_901, 6),
        (6_699, 7),
        (6_701, 8),
    ];
    requests_by(&r, t0, &steps).await;
    at(t0, ms(7_999)).await;
    assert_eq!(
        r.metrics.requests(false),
        8,
        "the last 1.3 s of the period are quiet"
    );
    assert_eq!(r.metrics.failures("no_address"), 8);
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_period_starts_its_scrapes_in_slices_of_the_grid() {
    let t0 = Instant::now();
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let r = start(&names, Duration::from_secs(1));
    // The first round (1 s over 10 nodes: every 100 ms) is done by 1 s. The period's even
    // shares are i x 90 ms; on the 100 ms grid the first two start at once, then one per
    // slice, none later than its share.
    let steps = [
        (999, 10),
        (1_001, 12),
        (1_099, 12),
        (1_101, 13),
        (1_801, 20),
    ];
    requests_by(&r, t0, &steps).await;
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[test]
fn spaced_starts_lie_on_the_grid_and_never_after_their_share() {
    let start = Instant::now();
    let nodes: Vec<Arc<NodeRecord>> = (0..5_000).map(|i| record(&format!("n{i}"))).collect();
    let over = Duration::from_millis(13_500);
    let even: Vec<Instant> = spaced(start, over, Duration::ZERO, nodes.clone())
        .map(|(at, _)| at)
        .collect();
    let gridded: Vec<Instant> = spaced(start, over, PERIOD_GRID, nodes)
        .map(|(at, _)| at)
        .collect();
    assert_eq!(even[1] - even[0], over / 5_000, "no grid: evenly spaced");
    let mut slices = HashSet::new();
    for (share, at) in even.iter().zip(&gridded) {
        let offset = *at - start;
        assert_eq!(offset.as_nanos() % PERIOD_GRID.as_nanos(), 0, "{offset:?}");
        assert!(
            at <= share && *share - *at < PERIOD_GRID,
            "{at:?} vs {share:?}"
        );
        slices.insert(offset);
    }
    assert_eq!(
        slices.len(),
        135,
        "13.5 s of 100 ms slices, each with ~37 nodes"
    );
}

#[tokio::test(start_paused = true)]
async fn progress_and_tick_are_recorded_per_period() {
    let t0 = Instant::now();
    let r = start(&["a", "b"], Duration::from_secs(10));
    assert!(!r.progress.first_round_complete());
    at(t0, ms(1)).await;
    let first_tick = r.progress.last_tick_start_ns().unwrap();
    assert!(r.progress.last_scrape_done_ns().is_some());
    // The first round is complete only once b (at 500 ms) is done.
    assert_eq!(r.metrics.ticks(), 0);
    assert_eq!(r.progress.first_round_pending(), Some(1));
    at(t0, ms(501)).await;
    assert_eq!(r.metrics.ticks(), 1);
    assert!(r.progress.first_round_complete());
    assert_eq!(r.progress.first_round_pending(), None);
    at(t0, ms(10_001)).await;
    let second_tick = r.progress.last_tick_start_ns().unwrap();
    assert_eq!(second_tick - first_tick, 10_000_000_000);
    // The second period: b at 15 s.
    at(t0, ms(15_001)).await;
    assert_eq!(r.metrics.ticks(), 2);
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_loop_waits_for_the_inventory_and_scrapes_new_nodes_at_once() {
    let t0 = Instant::now();
    let r = start_unsynced(&["a"], Duration::from_secs(60));
    at(t0, ms(5_000)).await;
    assert_eq!(
        r.metrics.requests(false),
        0,
        "nothing before the first list"
    );
    assert_eq!(r.progress.first_round_pending(), None);
    assert!(!r.progress.first_round_complete());
    r.nodes.list(&["a", "b"]);
    at(t0, ms(5_600)).await;
    assert_eq!(
        r.metrics.requests(false),
        2,
        "both, within the first-round spread"
    );
    assert!(r.progress.first_round_complete());
    // A node that joins mid-period is scraped at once, not at the next period (65 s).
    at(t0, ms(20_000)).await;
    r.nodes.list(&["a", "b", "late"]);
    at(t0, ms(20_001)).await;
    assert_eq!(r.metrics.requests(false), 3);
    let text = r.metrics.exposition(&r.registry);
    assert!(text.contains("node=\"late\""), "{text}");
    // A node that leaves is forgotten at once.
    r.nodes.list(&["a", "b"]);
    at(t0, ms(20_002)).await;
    let text = r.metrics.exposition(&r.registry);
    assert!(!text.contains("node=\"late\""), "{text}");
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_loop_scrapes_while_the_pods_are_listed_and_completes_the_round_with_them() {
    let t0 = Instant::now();
    let r = start_unsynced(&["a"], Duration::from_secs(60));
    at(t0, ms(1_000)).await;
    r.nodes.list_nodes(&["a", "b"]);
    at(t0, ms(1_600)).await;
    assert_eq!(
        r.metrics.requests(false),
        2,
        "both nodes scraped before the pods' list is in"
    );
    assert!(
        !r.progress.first_round_complete(),
        "a list would lack every pod: the round waits for the pods"
    );
    assert_eq!(r.progress.first_round_pending(), Some(1));
    at(t0, ms(3_000)).await;
    r.nodes.list_pods();
    at(t0, ms(3_001)).await;
    assert!(r.progress.first_round_complete());
    assert_eq!(r.progress.first_round_pending(), None);
    assert_eq!(
        r.metrics.requests(false),
        2,
        "the pods' list asks no node again"
    );
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_pod_start_asks_its_warm_node_again_outside_the_periods() {
    let t0 = Instant::now();
    // No kubelet answers: every scrape fails, so each node leaves warm-up after its first.
    let r = start(&["a", "b"], Duration::from_secs(60));
    at(t0, ms(1_000)).await;
    assert_eq!(r.metrics.requests(false), 2, "the first round");
    at(t0, ms(20_000)).await;
    r.nodes.start_pod("a");
    r.nodes.start_pod("unknown");
    at(t0, ms(20_999)).await;
    assert_eq!(r.metrics.requests(false), 2);
    at(t0, ms(21_001)).await;
    assert_eq!(
        r.metrics.requests(false),
        3,
        "a asked again a second after its pod started, not at the next period (60 s)"
    );
    // The follow-up failed: it ends there; the next request is the period's.
    at(t0, ms(59_999)).await;
    assert_eq!(r.metrics.requests(false), 3);
    let text = r.metrics.exposition(&r.registry);
    assert!(text.contains("node=\"a\""), "{text}");
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn pod_start_scrapes_stay_within_the_periods_budget() {
    let t0 = Instant::now();
    let names: Vec<String> = (0..70).map(|i| format!("n{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let r = start(&names, Duration::from_secs(60));
    at(t0, ms(1_000)).await;
    assert_eq!(r.metrics.requests(false), 70, "the first round");
    at(t0, ms(20_000)).await;
    for name in &names {
        r.nodes.start_pod(name);
    }
    at(t0, ms(21_001)).await;
    // At least 64 a period: 64 of the 70 nodes are asked again, 6 wait for the period.
    assert_eq!(r.metrics.requests(false), 134);
    let text = r.metrics.exposition(&r.registry);
    assert!(
        text.contains("scraper_follow_up_scrapes_total{reason=\"pod_start\"} 64\n"),
        "{text}"
    );
    assert!(
        text.contains("scraper_follow_up_scrapes_skipped_total{reason=\"pod_start\"} 6\n"),
        "{text}"
    );
    // The next period brings a new budget.
    at(t0, ms(61_000)).await;
    r.nodes.start_pod("n00");
    at(t0, ms(62_001)).await;
    let text = r.metrics.exposition(&r.registry);
    assert!(
        text.contains("scraper_follow_up_scrapes_total{reason=\"pod_start\"} 65\n"),
        "{text}"
    );
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn nodes_that_leave_lose_their_series() {
    let t0 = Instant::now();
    let r = start(&["a", "gone"], Duration::from_secs(2));
    at(t0, ms(1_500)).await;
    let text = r.metrics.exposition(&r.registry);
    assert!(text.contains("node=\"gone\""));
    r.nodes.nodes.lock().retain(|n| n.name.as_str() != "gone");
    at(t0, ms(2_500)).await;
    let text = r.metrics.exposition(&r.registry);
    assert!(!text.contains("node=\"gone\""), "{text}");
    assert!(text.contains("node=\"a\""));
    r.shutdown.cancel();
    r.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_loop_promptly() {
    let t0 = Instant::now();
    let r = start(&["a", "b", "c"], Duration::from_secs(60));
    at(t0, ms(100)).await;
    r.shutdown.cancel();
    tokio::time::timeout(ms(10), r.task)
        .await
        .expect("loop did not stop")
        .unwrap();
    // b and c (due at 333 ms and 666 ms of the first round) never ran.
    assert_eq!(r.metrics.requests(false), 1);
}

#[test]
fn clock_follows_the_tokio_clock() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = Clock::start();
        let a = clock.unix_ns(Instant::now());
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(clock.unix_ns(Instant::now()) - a, 3_000_000_000);
    });
}

/// Counts `Failed to scrape node` events; enough of a subscriber for that.
struct CountFailures(Arc<std::sync::atomic::AtomicU64>);

impl tracing::Subscriber for CountFailures {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && format!("{value:?}") == "Failed to scrape node" {
                    self.0 = true;
                }
            }
        }
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(start_paused = true)]
async fn per_node_error_logs_are_rate_limited_but_counters_are_not() {
    let logged = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let _guard = tracing::subscriber::set_default(CountFailures(logged.clone()));
    let t0 = Instant::now();
    let r = start(&["a"], Duration::from_secs(10));
    // Failures at 0, 10, ..., 650 s: 66 of them. Logged at 0, then at 300 s and 600 s.
    at(t0, ms(655_000)).await;
    assert_eq!(r.metrics.failures("no_address"), 66);
    assert_eq!(logged.load(Ordering::Relaxed), 3);
    r.shutdown.cancel();
    r.task.await.unwrap();
}

/// A node's scrapes always run on the same thread (its kept-alive connection belongs to that
/// runtime), and the nodes are spread over every thread.
#[test]
fn a_node_is_scraped_on_the_same_thread_each_time_and_the_nodes_are_spread() {
    let runtimes: Vec<tokio::runtime::Runtime> = (0..2)
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime")
        })
        .collect();
    let threads: Vec<tokio::runtime::Handle> =
        runtimes.iter().map(|r| r.handle().clone()).collect();
    let index = |node: &NodeName| {
        let handle = thread_of(&threads, node).expect("a thread");
        threads
            .iter()
            .position(|t| t.id() == handle.id())
            .expect("one of the threads")
    };
    let mut per_thread = [0usize; 2];
    for i in 0..1000 {
        let node = NodeName::from(format!("node-{i}").as_str());
        let first = index(&node);
        assert_eq!(index(&node), first, "{node:?} moved");
        assert_eq!(index(&NodeName::from(node.as_str())), first);
        per_thread[first] += 1;
    }
    assert!(
        per_thread.iter().all(|&n| n > 400),
        "1,000 nodes spread as {per_thread:?}"
    );
    assert!(thread_of(&[], &NodeName::from("n")).is_none());
    assert_eq!(
        thread_of(&threads[..1], &NodeName::from("n")).map(|h| h.id()),
        Some(threads[0].id())
    );
}
