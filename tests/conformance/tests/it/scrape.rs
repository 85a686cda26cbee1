//! The kubelet client and the scrape loop against simulated kubelets over real HTTPS on
//! 127.0.0.1, serving the real fixture payloads.

use std::sync::Arc;
use std::time::Duration;

use conformance::kubelet::{CertKind, Fault, Options, SimKubelet};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use scraper::inventory::NodeRecord;
use scraper::kubelet::Source;
use scraper::kubelet::client::{self, Client, Error, Resolver};
use scraper::metrics::Metrics;
use scraper::scrape::{self, NodeSource, Progress};
use scraper::selector::LabelSelector;
use scraper::store::Store;
use tls::client::Verify;
use tls::issue::Ca;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "metrics-resource-metrics-server-kind-v1.21-70pods.txt";
const SUMMARY: &str = "stats-summary-nri-kubernetes-minikube-v1.35.json";

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/kubelet")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ca() -> Ca {
    Ca::new("test cluster CA").unwrap()
}

async fn kubelet(ca: &Ca, name: &str, f: impl FnOnce(Options) -> Options) -> SimKubelet {
    let options = f(Options::new(name).fixed(fixture(RESOURCE), fixture(SUMMARY)));
    SimKubelet::start(ca, options).await.unwrap()
}

/// A kubelet serving the fixtures with `fault`.
async fn faulty(ca: &Ca, name: &str, fault: Fault) -> SimKubelet {
    kubelet(ca, name, |o| Options { fault, ..o }).await
}

/// A kubelet serving the fixtures under a `cert` of the given kind.
async fn with_cert(ca: &Ca, name: &str, cert: CertKind) -> SimKubelet {
    kubelet(ca, name, |o| Options { cert, ..o }).await
}

fn client_config(ca: &Ca) -> client::Config {
    client::Config {
        verify: Verify::Roots(vec![ca.cert().clone()]),
        timeout: Duration::from_secs(5),
        ..client::Config::default()
    }
}

fn client(config: client::Config) -> Client {
    Client::new(config).unwrap()
}

// ---------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn fetches_fixture_bodies_over_one_kept_alive_connection() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| o).await;
    let c = client(client_config(&ca));
    let resource = c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(&resource[..], &fixture(RESOURCE)[..]);
    let summary = c
        .get(&k.url("/stats/summary?only_cpu_and_memory=true"))
        .await
        .unwrap();
    assert_eq!(&summary[..], &fixture(SUMMARY)[..]);
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.requests(), 3);
    assert_eq!(
        k.connections(),
        1,
        "connections must be kept alive and reused"
    );
    assert_eq!(k.seen()[1].path, "/stats/summary?only_cpu_and_memory=true");
    // Asked gzipped, as Go's client asks; the kubelet gzipped /metrics/resource (twice; the
    // fixture above came back whole through the inflater) and not /stats/summary.
    let resource_len = fixture(RESOURCE).len() as u64;
    let summary_len = fixture(SUMMARY).len() as u64;
    assert!(
        k.body_bytes() < summary_len + resource_len / 2,
        "{} bytes sent",
        k.body_bytes()
    );
    for seen in k.seen() {
        assert_eq!(
            seen.headers
                .get("accept-encoding")
                .and_then(|v| v.to_str().ok()),
            Some("gzip")
        );
    }
}

#[tokio::test]
async fn without_compression_the_kubelet_is_asked_for_plain_text() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| o).await;
    let c = client(client::Config {
        compression: false,
        ..client_config(&ca)
    });
    let resource = c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(&resource[..], &fixture(RESOURCE)[..]);
    assert!(k.seen()[0].headers.get("accept-encoding").is_none());
    assert_eq!(k.body_bytes(), fixture(RESOURCE).len() as u64);
}

#[tokio::test]
async fn without_keep_alive_each_scrape_opens_its_own_connection() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| o).await;
    let c = client(client::Config {
        keep_alive: false,
        ..client_config(&ca)
    });
    for _ in 0..3 {
        let body = c.get(&k.url("/metrics/resource")).await.unwrap();
        assert_eq!(&body[..], &fixture(RESOURCE)[..]);
    }
    assert_eq!(k.requests(), 3);
    assert_eq!(k.connections(), 3, "no idle connection may be kept");
}

#[tokio::test]
async fn a_hanging_kubelet_times_out_within_the_timeout() {
    let ca = ca();
    let k = faulty(&ca, "n1", Fault::Hang).await;
    let c = client(client::Config {
        timeout: Duration::from_millis(400),
        ..client_config(&ca)
    });
    let url = k.url("/metrics/resource");
    let start = Instant::now();
    let err = c.get(&url).await.unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(err.reason(), "timeout");
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    assert!(
        err.to_string().starts_with(&format!("GET {url}: ")),
        "{err}"
    );
    assert!(
        err.to_string().contains("did not answer within 400ms"),
        "{err}"
    );
    assert_eq!(k.requests(), 1);
}

#[tokio::test]
async fn a_slow_body_counts_against_the_timeout_too() {
    let ca = ca();
    // Headers are only sent after the delay, so this also covers "slow headers"; the
    // oversized stream below covers a body cut off mid-way.
    let k = faulty(&ca, "n1", Fault::Slow(Duration::from_millis(800))).await;
    let fast = client(client::Config {
        timeout: Duration::from_millis(300),
        ..client_config(&ca)
    });
    assert_eq!(
        fast.get(&k.url("/metrics/resource"))
            .await
            .unwrap_err()
            .reason(),
        "timeout"
    );
    let patient = client(client_config(&ca));
    let body = patient.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(body.len(), fixture(RESOURCE).len());
}

#[tokio::test]
async fn a_500_is_a_status_error_with_metrics_servers_message() {
    let ca = ca();
    let k = faulty(&ca, "n1", Fault::Status(500)).await;
    let url = k.url("/metrics/resource");
    let err = client(client_config(&ca)).get(&url).await.unwrap_err();
    assert!(
        matches!(err, Error::Status { status, .. } if status.as_u16() == 500),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!("GET {url}: request failed, status: \"500 Internal Server Error\"")
    );
}

#[tokio::test]
async fn garbage_is_returned_as_bytes_for_the_parser_to_reject() {
    let ca = ca();
    let k = faulty(&ca, "n1", Fault::Garbage).await;
    let body = client(client_config(&ca))
        .get(&k.url("/metrics/resource"))
        .await
        .unwrap();
    assert!(body.starts_with(b"<html>"));
    assert!(body.len() > 4096);
}

#[tokio::test]
async fn garbage_fails_to_parse() {
    let ca = ca();
    let k = faulty(&ca, "n1", Fault::Garbage).await;
    let body = client(client_config(&ca))
        .get(&k.url("/metrics/resource"))
        .await
        .unwrap();
    assert!(Source::Resource.parse(&body, 0).is_err());
}

#[tokio::test]
async fn an_oversized_body_is_refused_while_streaming() {
    let ca = ca();
    let k = faulty(&ca, "n1", Fault::Oversized { bytes: 8 << 20 }).await;
    let c = client(client::Config {
        max_body_bytes: 1 << 20,
        ..client_config(&ca)
    });
    let url = k.url("/metrics/resource");
    let err = c.get(&url).await.unwrap_err();
    assert!(
        matches!(err, Error::BodyTooLarge { limit_bytes, .. } if limit_bytes == 1 << 20),
        "{err}"
    );
    assert_eq!(err.reason(), "body_too_large");
    assert!(
        err.to_string().contains("larger than 1048576 bytes"),
        "{err}"
    );
    // Just under the limit is fine.
    k.set_fault(Fault::Oversized {
        bytes: (1 << 20) - 1,
    });
    assert_eq!(c.get(&url).await.unwrap().len(), (1 << 20) - 1);
}

#[tokio::test]
async fn bodies_in_flight_are_bounded_in_total_not_only_each() {
    let ca = ca();
    let a = faulty(&ca, "a", Fault::Oversized { bytes: 700 << 10 }).await;
    let b = faulty(&ca, "b", Fault::Oversized { bytes: 700 << 10 }).await;
    let c = client(client::Config {
        timeout: Duration::from_millis(500),
        max_body_bytes: 1 << 20,
        max_bodies_bytes: 1 << 20,
        ..client_config(&ca)
    });
    // a's body holds its room until it is dropped (parsed and stored, in the scrape loop):
    // b's cannot fit beside it and waits, here until its deadline.
    let held = c.get(&a.url("/metrics/resource")).await.unwrap();
    assert_eq!(held.len(), 700 << 10);
    let err = c.get(&b.url("/metrics/resource")).await.unwrap_err();
    assert_eq!(err.reason(), "timeout", "{err}");
    drop(held);
    assert_eq!(
        c.get(&b.url("/metrics/resource")).await.unwrap().len(),
        700 << 10
    );
}

#[tokio::test]
async fn an_untrusted_certificate_says_what_to_do() {
    let ca = ca();
    let k = with_cert(&ca, "node-a", CertKind::OtherCa).await;
    let c = client(client_config(&ca));
    let target = resolver().resolve(&k.node_record()).unwrap();
    let err = c
        .fetch(&target, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownAuthority { .. }), "{err}");
    assert_eq!(err.reason(), "tls_unknown_authority");
    let message = err.to_string();
    let addr = k.addr();
    assert!(
        message.contains(&format!(
            "kubelet serving certificate for node node-a at {addr} is not signed by a trusted CA: pass --kubelet-certificate-authority or use signed kubelet serving certificates (serverTLSBootstrap); --kubelet-insecure-tls disables verification"
        )),
        "{message}"
    );
    assert!(message.starts_with(&format!("GET https://{addr}/metrics/resource: ")));
}

#[tokio::test]
async fn a_certificate_without_the_ip_san_says_so() {
    let ca = ca();
    let k = with_cert(&ca, "node-b", CertKind::NoIpSan).await;
    let target = resolver().resolve(&k.node_record()).unwrap();
    let err = client(client_config(&ca))
        .fetch(&target, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NameMismatch { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("for node node-b at 127.0.0.1:")
            && message.contains("has no IP SAN for 127.0.0.1"),
        "{message}"
    );
    assert!(
        message.contains("--kubelet-preferred-address-types=Hostname"),
        "{message}"
    );
    assert!(message.contains("IP SANs"), "{message}");
}

#[tokio::test]
async fn insecure_tls_accepts_untrusted_and_mismatched_certificates() {
    let ca = ca();
    let untrusted = with_cert(&ca, "n1", CertKind::OtherCa).await;
    let no_san = with_cert(&ca, "n2", CertKind::NoIpSan).await;
    let c = client(client::Config {
        verify: Verify::Insecure,
        ..client_config(&ca)
    });
    for k in [&untrusted, &no_san] {
        let body = c.get(&k.url("/metrics/resource")).await.unwrap();
        assert_eq!(&body[..], &fixture(RESOURCE)[..]);
    }
}

#[tokio::test]
async fn a_certificate_swapped_at_runtime_is_refused_on_the_next_connection() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| o).await;
    let url = k.url("/metrics/resource");
    client(client_config(&ca)).get(&url).await.unwrap();
    k.set_fault(Fault::WrongCert);
    let err = client(client_config(&ca)).get(&url).await.unwrap_err();
    assert_eq!(err.reason(), "tls_unknown_authority", "{err}");
}

#[tokio::test]
async fn a_down_kubelet_refuses_connections_and_comes_back() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| o).await;
    let c = client(client_config(&ca));
    let url = k.url("/metrics/resource");
    c.get(&url).await.unwrap();
    k.set_fault(Fault::Down);
    // The kept-alive connection is closed too; give the sim a moment to drop it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let err = c.get(&url).await.unwrap_err();
    assert!(matches!(err, Error::ConnectionRefused { .. }), "{err}");
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(err.to_string().contains("connection refused"), "{err}");
    k.set_fault(Fault::Healthy);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.get(&url).await.unwrap().len(), fixture(RESOURCE).len());
}

#[tokio::test]
async fn the_bearer_token_is_sent_over_https() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| Options {
        bearer_token: Some("s3cr3t".into()),
        ..o
    })
    .await;
    let url = k.url("/metrics/resource");
    let with = client(client::Config {
        bearer_token: Some("s3cr3t".into()),
        ..client_config(&ca)
    });
    with.get(&url).await.unwrap();
    assert_eq!(k.seen()[0].authorization(), Some("Bearer s3cr3t"));
    let without = client(client_config(&ca));
    let err = without.get(&url).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("request failed, status: \"401 Unauthorized\""),
        "{err}"
    );
    assert_eq!(k.seen()[1].authorization(), None);
    assert!(
        !format!("{with:?}").contains("s3cr3t"),
        "Debug leaks the token"
    );
}

#[tokio::test]
async fn the_bearer_token_is_never_sent_over_plain_http() {
    let ca = ca();
    let k = kubelet(&ca, "n1", |o| Options {
        plain_http: true,
        ..o
    })
    .await;
    let url = k.url("/metrics/resource");
    assert!(url.starts_with("http://"));
    // --deprecated-kubelet-completely-insecure: plain HTTP, anonymous.
    let insecure = client(client::Config {
        bearer_token: Some("s3cr3t".into()),
        plain_http: true,
        ..client_config(&ca)
    });
    let body = insecure.get(&url).await.unwrap();
    assert_eq!(body.len(), fixture(RESOURCE).len());
    assert_eq!(k.seen()[0].authorization(), None);
    // A normal client refuses plain HTTP outright: nothing reaches the kubelet.
    let normal = client(client::Config {
        bearer_token: Some("s3cr3t".into()),
        ..client_config(&ca)
    });
    let err = normal.get(&url).await.unwrap_err();
    assert!(matches!(err, Error::PlainHttpRefused { .. }), "{err}");
    assert_eq!(k.requests(), 1);
}

fn resolver() -> Resolver {
    Resolver::new(&[], 10250, true, Source::Resource, false)
}

// ---------------------------------------------------------------------------------------
// The scrape loop
// ---------------------------------------------------------------------------------------

struct Nodes(Mutex<Vec<Arc<NodeRecord>>>);

impl NodeSource for Nodes {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        let mut nodes = self.0.lock().clone();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        nodes
    }
}

struct Loop {
    nodes: Arc<Nodes>,
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    registry: Registry,
    progress: Arc<Progress>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    t0: Instant,
}

impl Loop {
    fn exposition(&self) -> String {
        self.metrics.exposition(&self.registry)
    }

    async fn stop(self) -> Duration {
        let start = Instant::now();
        self.shutdown.cancel();
        self.task.await.unwrap();
        start.elapsed()
    }

    async fn until(&self, offset_ms: u64) {
        tokio::time::sleep_until(self.t0 + Duration::from_millis(offset_ms)).await;
    }
}

fn start_loop(
    ca: &Ca,
    kubelets: &[&SimKubelet],
    resolution_ms: u64,
    timeout_ms: u64,
    max_in_flight: usize,
) -> Loop {
    start_loop_with(
        ca,
        kubelets,
        resolution_ms,
        timeout_ms,
        max_in_flight,
        LoopOptions::default(),
    )
}

/// The loop's settings beside its timing.
#[derive(Default)]
struct LoopOptions {
    /// `Source::Resource` by default.
    source: Source,
    /// `None` holds a request's slot for its whole timeout, so queueing shows.
    slot_hold: Option<Duration>,
    /// `--kubelet-summary-warmup` (off by default here, so the warm-up's pairs show).
    summary_warmup: bool,
}

fn start_loop_with(
    ca: &Ca,
    kubelets: &[&SimKubelet],
    resolution_ms: u64,
    timeout_ms: u64,
    max_in_flight: usize,
    options: LoopOptions,
) -> Loop {
    let LoopOptions {
        source,
        slot_hold,
        summary_warmup,
    } = options;
    let resolution = Duration::from_millis(resolution_ms);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry, resolution));
    let nodes = Arc::new(Nodes(Mutex::new(
        kubelets.iter().map(|k| Arc::new(k.node_record())).collect(),
    )));
    let store = Arc::new(Store::new(scraper::store::Config::new(resolution)));
    let progress = Arc::new(Progress::default());
    let shutdown = CancellationToken::new();
    let config = scrape::Config {
        resolution,
        request_timeout: Duration::from_millis(timeout_ms),
        max_in_flight,
        slot_hold: slot_hold.unwrap_or(Duration::from_millis(timeout_ms)),
        source,
        summary_warmup,
        address_types: vec!["InternalIP".into()],
        kubelet_port: 1,
        use_node_status_port: true,
        node_selector: LabelSelector::default(),
        threads: Vec::new(),
    };
    let t0 = Instant::now();
    let task = tokio::spawn(scrape::run(
        config,
        nodes.clone(),
        store.clone(),
        client(client::Config {
            timeout: Duration::from_millis(timeout_ms),
            max_body_bytes: 4 << 20,
            ..client_config(ca)
        }),
        metrics.clone(),
        progress.clone(),
        shutdown.clone(),
    ));
    Loop {
        nodes,
        store,
        metrics,
        registry,
        progress,
        shutdown,
        task,
        t0,
    }
}

/// Each kubelet's first request came within 200 ms after its slot (ms after `t0`).
fn started_on_schedule(scheduled: &[(&SimKubelet, u64)], t0: Instant) {
    for &(k, expected_ms) in scheduled {
        let offset = first_request_offset(k, t0);
        let expected = Duration::from_millis(expected_ms);
        assert!(
            offset >= expected && offset < expected + Duration::from_millis(200),
            "{} started at {offset:?}, scheduled at {expected:?}",
            k.node_name()
        );
    }
}

fn first_request_offset(k: &SimKubelet, t0: Instant) -> Duration {
    k.seen()
        .first()
        .map(|s| s.at.saturating_duration_since(t0))
        .unwrap_or_else(|| panic!("{} saw no request", k.node_name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_node_does_not_delay_the_others() {
    let ca = ca();
    // The first round, sorted by name over 1 s: a (hangs) at 0, b at 250, c at 500 and d at
    // 750 ms.
    let a = faulty(&ca, "a", Fault::Hang).await;
    let b = kubelet(&ca, "b", |o| o).await;
    let c = kubelet(&ca, "c", |o| o).await;
    let d = kubelet(&ca, "d", |o| o).await;
    let l = start_loop(&ca, &[&a, &b, &c, &d], 2000, 1200, 4);

    // b's, c's and d's results are in while a's request is still hanging.
    l.until(1150).await;
    assert_eq!(l.metrics.requests(true), 3, "b, c and d done by 1150 ms");
    assert_eq!(l.metrics.requests(false), 0, "a still in flight");
    assert!(!l.progress.first_round_complete(), "a has not answered");
    let text = l.exposition();
    assert!(text.contains("metrics_server_kubelet_request_total{success=\"true\"} 3"));
    assert!(text.contains("metrics_server_kubelet_last_request_time_seconds{node=\"d\"}"));
    // a times out at 1200 ms (its deadline), the last of the first round's scrapes.
    l.until(1400).await;
    assert_eq!(l.metrics.requests(false), 1);
    assert_eq!(l.metrics.failures("timeout"), 1);
    assert_eq!(l.metrics.ticks(), 1);
    // The fixtures never refresh their timestamps: b, c and d keep warming up (until
    // the warm-up limit, a period plus a housekeeping interval).
    assert!(!l.progress.first_round_complete());
    started_on_schedule(&[(&a, 0), (&b, 250), (&c, 500), (&d, 750)], l.t0);
    assert!(l.progress.last_tick_start_ns().is_some());
    // The hanging request of the next period is cancelled by shutdown, promptly.
    l.until(2100).await;
    assert!(!l.progress.first_round_complete());
    assert!(l.stop().await < Duration::from_millis(500));
}

/// Kubelets that do not answer (nodes gone dark) hold an in-flight slot only for the slot
/// hold, not for their whole timeout: more of them than there are slots do not keep the
/// healthy nodes waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_that_hang_do_not_starve_the_others_of_slots() {
    let ca = ca();
    // The first round, sorted by name over 1 s: a, b, c and d (hang) at 0, 167, 333 and
    // 500 ms, e and f at 667 and 833 ms; two slots, each held for 100 ms at most.
    let mut hanging = Vec::new();
    for name in ["a", "b", "c", "d"] {
        hanging.push(faulty(&ca, name, Fault::Hang).await);
    }
    let e = kubelet(&ca, "e", |o| o).await;
    let f = kubelet(&ca, "f", |o| o).await;
    let all: Vec<&SimKubelet> = hanging.iter().chain([&e, &f]).collect();
    let hold = Duration::from_millis(100);
    let l = start_loop_with(
        &ca,
        &all,
        2000,
        1500,
        2,
        LoopOptions {
            slot_hold: Some(hold),
            ..LoopOptions::default()
        },
    );
    // e and f answered on time while the four hanging requests are still in flight. Were
    // the slots held for the timeout, e would wait for a's until 1500 ms.
    l.until(1100).await;
    assert_eq!(l.metrics.requests(true), 2, "e and f done by 1100 ms");
    assert_eq!(l.metrics.requests(false), 0, "a to d still in flight");
    started_on_schedule(&[(&e, 667), (&f, 833)], l.t0);
    // The hanging ones time out at their own deadline, slot or no slot.
    l.until(2400).await;
    assert_eq!(l.metrics.failures("timeout"), 4);
    assert!(l.stop().await < Duration::from_millis(500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queueing_for_a_slot_counts_against_the_request_timeout() {
    let ca = ca();
    // Both fail at once in the first round, which ends their warm-up. Then, with one slot,
    // period 1: a hangs from 1000 ms to its 2000 ms deadline; b is scheduled at 1500 ms,
    // waits for the slot until 2000 ms and then needs 700 ms: 2700 ms > its 2500 ms deadline.
    let a = faulty(&ca, "a", Fault::Status(503)).await;
    let b = faulty(&ca, "b", Fault::Status(503)).await;
    let l = start_loop(&ca, &[&a, &b], 1000, 1000, 1);
    l.until(700).await;
    assert_eq!(l.metrics.failures("status"), 2);
    assert!(l.progress.first_round_complete());
    a.set_fault(Fault::Hang);
    b.set_fault(Fault::Slow(Duration::from_millis(700)));
    l.until(1800).await;
    assert_eq!(b.requests(), 1, "b must wait for the only slot");
    l.until(2650).await;
    let offset = b.seen()[1].at.saturating_duration_since(l.t0);
    assert!(
        offset >= Duration::from_millis(1950),
        "b sent at {offset:?}"
    );
    assert_eq!(l.metrics.failures("timeout"), 2, "a and b timed out");
    assert_eq!(l.metrics.requests(true), 0);
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_round_scrape_may_queue_for_its_slot_without_losing_its_timeout() {
    let ca = ca();
    // One slot, the first round: a hangs from 0 to its 1000 ms deadline; b, due at 500 ms,
    // gets the slot at 1000 ms and its own 1000 ms for the request: its 700 ms answer counts.
    // (Every node is due at once in a first round; queueing is the loop's, not the node's.)
    let a = faulty(&ca, "a", Fault::Hang).await;
    let b = faulty(&ca, "b", Fault::Slow(Duration::from_millis(700))).await;
    let l = start_loop(&ca, &[&a, &b], 1000, 1000, 1);
    l.until(1900).await;
    let offset = first_request_offset(&b, l.t0);
    assert!(offset >= Duration::from_millis(950), "b sent at {offset:?}");
    assert_eq!(l.metrics.failures("timeout"), 1, "a only");
    assert!(l.metrics.requests(true) >= 1, "b answered");
    l.stop().await;
}

/// A node whose kubelet serves `stats` as they are (timestamps move only when the test
/// moves them), for watching the warm-up.
async fn frozen(ca: &Ca, name: &str, at_ms: i64) -> (SimKubelet, conformance::kubelet::SimNode) {
    let boot_ms = at_ms - 3_600_000;
    let model = conformance::kubelet::SimNode::generate(name, 3, 2, boot_ms);
    let content = conformance::kubelet::Content::Stats(model.stats_at(at_ms));
    (kubelet(ca, name, |o| Options { content, ..o }).await, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_up_takes_the_second_sample_when_the_kubelet_refreshes_not_a_period_later() {
    let ca = ca();
    // A 60 s resolution, and a kubelet whose last housekeeping was 9 s ago: its stats
    // refresh in about 1 s (10 s housekeeping).
    let now_ms = unix_now_ns() / 1_000_000;
    let (k, model) = frozen(&ca, "n", now_ms - 9_000).await;
    let l = start_loop(&ca, &[&k], 60_000, 5_000, 4);
    // The first scrape at once, the quick retry 1 s later: the same timestamps, no rate.
    while k.requests() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(l.store.node("n", unix_now_ns()).is_none());
    assert!(
        !l.progress.first_round_complete(),
        "n waits for a second sample"
    );
    assert_eq!(l.progress.first_round_pending(), Some(1));
    // The kubelet's housekeeping runs: every timestamp moves on.
    k.update_stats(|s| *s = model.stats_at(now_ms + 1_000));
    // The loop asks again when the refresh was due (last sample + 10.5 s): about 1.5 s
    // after start, far from the next period at 60 s.
    l.until(3_000).await;
    assert_eq!(k.requests(), 3);
    let usage = l
        .store
        .node("n", unix_now_ns())
        .expect("node usage after warm-up");
    assert!(usage.cpu_nanocores > 0);
    assert_eq!(
        usage.window_ns, 10_000_000_000,
        "the window between the two samples"
    );
    assert_eq!(l.store.points().containers, 6, "every container has a rate");
    assert!(l.progress.first_round_complete());
    // Warm: nothing more until the steady schedule.
    l.until(5_000).await;
    assert_eq!(k.requests(), 3);
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_up_retries_with_backoff_while_the_kubelet_has_not_refreshed() {
    let ca = ca();
    // The last sample is 12 s old: the expected refresh is overdue (a kubelet slower than
    // 10 s), so the loop backs off (1 s, 0.5 s, 1 s, 2 s) instead of waiting a period.
    let now_ms = unix_now_ns() / 1_000_000;
    let (k, model) = frozen(&ca, "slow", now_ms - 12_000).await;
    let l = start_loop(&ca, &[&k], 60_000, 5_000, 4);
    l.until(3_000).await;
    let early = k.requests();
    assert!((3..=5).contains(&early), "{early} requests in 3 s");
    assert!(l.store.node("slow", unix_now_ns()).is_none());
    k.update_stats(|s| *s = model.stats_at(now_ms + 3_000));
    l.until(8_000).await;
    assert!(l.store.node("slow", unix_now_ns()).is_some());
    assert!(l.progress.first_round_complete());
    let warm = k.requests();
    l.until(10_000).await;
    assert_eq!(k.requests(), warm, "no more warm-up scrapes once warm");
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_summary_source_the_first_scrape_is_enough() {
    let ca = ca();
    let now_ms = unix_now_ns() / 1_000_000;
    let (k, _) = frozen(&ca, "s", now_ms - 9_000).await;
    let l = start_loop_with(
        &ca,
        &[&k],
        60_000,
        5_000,
        4,
        LoopOptions {
            source: Source::Summary,
            ..LoopOptions::default()
        },
    );
    while !l.progress.first_round_complete() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(k.requests(), 1);
    assert!(k.seen()[0].path.starts_with("/stats/summary"));
    assert!(l.store.node("s", unix_now_ns()).is_some());
    assert_eq!(l.store.points().containers, 6);
    l.until(2_000).await;
    assert_eq!(k.requests(), 1, "no second scrape needed");
    l.stop().await;
}

/// The paths a kubelet was asked, in order, without their queries.
fn paths(k: &SimKubelet) -> Vec<String> {
    k.seen()
        .iter()
        .map(|s| s.path.split('?').next().unwrap_or_default().to_owned())
        .collect()
}

/// One kubelet's loop at a 60 s resolution with `--kubelet-summary-warmup`.
fn start_summary_warmup(ca: &Ca, k: &SimKubelet) -> Loop {
    let options = LoopOptions {
        summary_warmup: true,
        ..LoopOptions::default()
    };
    start_loop_with(ca, &[k], 60_000, 5_000, 4, options)
}

/// Waits for the first round to complete, within a generous bound.
async fn first_round_complete(l: &Loop) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !l.progress.first_round_complete() {
        assert!(Instant::now() < deadline, "the first round never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `--kubelet-summary-warmup`: a kubelet whose stats will not refresh for 1 s. The first
/// scrape (`/metrics/resource`, then `/stats/summary` for the kubelet's own rates) serves
/// the node and every container at once, with the kubelet's rates, and completes the first
/// round; the quick retry brings the same samples and takes nothing away; once the kubelet
/// refreshes, the counters pair and the exact rates over the real window replace the
/// kubelet's, and the warm-up ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_warmup_serves_the_first_scrape_and_pairs_the_next() {
    let ca = ca();
    let now_ms = unix_now_ns() / 1_000_000;
    let (k, model) = frozen(&ca, "n", now_ms - 9_000).await;
    let first = model.stats_at(now_ms - 9_000);
    let l = start_summary_warmup(&ca, &k);
    // Before the kubelet refreshes (it never does on its own).
    first_round_complete(&l).await;
    assert_eq!(paths(&k), ["/metrics/resource", "/stats/summary"]);
    let usage = l
        .store
        .node("n", unix_now_ns())
        .expect("node usage after one scrape");
    assert_eq!(Some(usage.cpu_nanocores), first.cpu_nanocores);
    assert_eq!(usage.timestamp_ns, first.timestamp_ms * 1_000_000);
    assert_eq!(l.store.points().containers, 6, "every container served");
    let pod = &first.pods[0];
    let served = l
        .store
        .pod(&pod.namespace, &pod.name, unix_now_ns())
        .expect("pod usage after one scrape");
    let kubelet_rates: Vec<_> = pod.containers.iter().map(|c| c.cpu_nanocores).collect();
    let served_rates: Vec<_> = served
        .containers
        .iter()
        .map(|c| Some(c.cpu_nanocores))
        .collect();
    assert_eq!(served_rates, kubelet_rates);
    assert_eq!(l.metrics.requests(false), 0);

    // The quick retry, 1 s in: the same samples, still served as they were.
    while k.requests() < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(l.store.node("n", unix_now_ns()), Some(usage));
    // The kubelet's housekeeping runs; the loop asks when it was due (1.5 s in).
    k.update_stats(|s| *s = model.stats_at(now_ms + 1_000));
    l.until(3_000).await;
    assert_eq!(
        paths(&k),
        [
            "/metrics/resource",
            "/stats/summary",
            "/metrics/resource",
            "/metrics/resource"
        ]
    );
    let paired = l.store.node("n", unix_now_ns()).expect("node usage");
    assert_eq!(
        paired.window_ns, 10_000_000_000,
        "the window between the two samples"
    );
    assert_ne!(paired.timestamp_ns, usage.timestamp_ns);
    assert_eq!(l.store.points().containers, 6);
    // Warm: nothing more until the steady schedule.
    l.until(5_000).await;
    assert_eq!(k.requests(), 4);
    l.stop().await;
}

/// The kubelet refreshes its stats between the warm-up's two requests: the summary's rates
/// are of newer samples than the `/metrics/resource` answer read, so none may be lent to
/// it. The node is asked again at once (not at the quick retry, 1 s after its first scrape
/// ended): the newer samples pair with the first ones, and the node and its pods are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_between_the_two_requests_is_read_again_at_once() {
    let ca = ca();
    let now_ms = unix_now_ns() / 1_000_000;
    let (k, model) = frozen(&ca, "n", now_ms - 9_000).await;
    let refreshed = model.stats_at(now_ms + 1_000);
    k.set_content_after(1, conformance::kubelet::Content::Stats(refreshed.clone()));
    let l = start_summary_warmup(&ca, &k);
    first_round_complete(&l).await;
    assert_eq!(
        paths(&k),
        ["/metrics/resource", "/stats/summary", "/metrics/resource"]
    );
    let seen = k.seen();
    assert!(
        seen[2].at < seen[1].at + Duration::from_secs(1),
        "asked again at once, not at the quick retry"
    );
    let usage = l.store.node("n", unix_now_ns()).expect("node usage");
    assert_eq!(usage.timestamp_ns, refreshed.timestamp_ms * 1_000_000);
    assert_eq!(usage.window_ns, 10_000_000_000, "the pair of the two reads");
    assert_eq!(l.store.points().containers, 6, "every container served");
    l.stop().await;
}

/// With metrics-server's RBAC (`nodes/metrics` only) the kubelet answers the summary 403:
/// no scrape fails, the node warms up from its own samples as without the summary, and no
/// later warm-up (of this node or of one that joins) asks for the summary again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_forbids_stats_warms_up_from_its_own_samples() {
    let ca = ca();
    let now_ms = unix_now_ns() / 1_000_000;
    let boot_ms = now_ms - 3_600_000;
    let model = conformance::kubelet::SimNode::generate("a", 3, 2, boot_ms);
    let content = conformance::kubelet::Content::Stats(model.stats_at(now_ms - 9_000));
    let a = kubelet(&ca, "a", |o| Options {
        content,
        stats_forbidden: true,
        ..o
    })
    .await;
    let b = kubelet(&ca, "b", |o| Options {
        content: live("b"),
        ..o
    })
    .await;
    let l = start_loop_with(
        &ca,
        &[&a],
        2_000,
        1_000,
        4,
        LoopOptions {
            summary_warmup: true,
            ..LoopOptions::default()
        },
    );
    while a.requests() < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        paths(&a),
        ["/metrics/resource", "/stats/summary", "/metrics/resource"]
    );
    assert!(l.store.node("a", unix_now_ns()).is_none(), "no rate yet");
    assert!(!l.progress.first_round_complete());
    assert_eq!(l.metrics.requests(false), 0, "the 403 fails no scrape");
    // A node that joins is seen at the next period (2 s) and warmed up without the summary.
    l.nodes.0.lock().push(Arc::new(b.node_record()));
    a.update_stats(|s| *s = model.stats_at(now_ms + 1_000));
    l.until(3_500).await;
    assert!(l.store.node("a", unix_now_ns()).is_some());
    assert!(l.progress.first_round_complete());
    assert!(b.requests() >= 1, "b was scraped");
    assert!(
        paths(&b).iter().all(|p| p == "/metrics/resource"),
        "{:?}",
        paths(&b)
    );
    assert_eq!(
        paths(&a).iter().filter(|p| *p == "/stats/summary").count(),
        1
    );
    assert_eq!(l.metrics.requests(false), 0);
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_fails_only_its_own_node_with_its_own_reason() {
    let ca = ca();
    let healthy = kubelet(&ca, "a-healthy", |o| o).await;
    let status = faulty(&ca, "b-status", Fault::Status(500)).await;
    let down = faulty(&ca, "c-down", Fault::Down).await;
    let untrusted = with_cert(&ca, "d-untrusted", CertKind::OtherCa).await;
    let no_san = with_cert(&ca, "e-no-san", CertKind::NoIpSan).await;
    let oversized = faulty(&ca, "f-oversized", Fault::Oversized { bytes: 8 << 20 }).await;
    let l = start_loop(
        &ca,
        &[&healthy, &status, &down, &untrusted, &no_san, &oversized],
        1200,
        1000,
        8,
    );
    // The first round spreads the six over 1 s; every failure is in by 1150 ms.
    l.until(1150).await;
    assert!(l.metrics.requests(true) >= 1);
    assert_eq!(l.metrics.requests(false), 5);
    for reason in [
        "status",
        "connection_refused",
        "tls_unknown_authority",
        "tls_name_mismatch",
        "body_too_large",
    ] {
        assert_eq!(l.metrics.failures(reason), 1, "{reason}");
    }
    // Recovery: the kubelet comes back and the next period (from 1200 ms) scrapes it.
    down.set_fault(Fault::Healthy);
    l.until(2350).await;
    // (Its first samples wait for a second: a follow-up may ask it once more meanwhile.)
    assert!(
        (1..=2).contains(&down.requests()),
        "c-down scraped at the next period once it is back: {} requests",
        down.requests()
    );
    assert_eq!(l.metrics.failures("connection_refused"), 1);
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_leaves_is_forgotten() {
    let ca = ca();
    let a = kubelet(&ca, "a", |o| o).await;
    let b = kubelet(&ca, "b", |o| o).await;
    // The first round: a at 0, b at 300 ms.
    let l = start_loop(&ca, &[&a, &b], 600, 500, 4);
    l.until(450).await;
    assert!(l.exposition().contains("node=\"b\""));
    l.nodes.0.lock().retain(|n| n.name.as_str() != "b");
    l.until(1350).await;
    let text = l.exposition();
    assert!(!text.contains("node=\"b\""), "{text}");
    assert!(text.contains("node=\"a\""));
    assert_eq!(b.requests(), 1, "b is no longer scraped");
    assert!(a.requests() >= 3);
    l.stop().await;
}

// ---------------------------------------------------------------------------------------
// What reaches the store (needs the real parser and store)
// ---------------------------------------------------------------------------------------

fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn wall_clock_ms() -> Arc<dyn Fn() -> i64 + Send + Sync> {
    Arc::new(|| unix_now_ns() / 1_000_000)
}

/// A live workload (3 pods of 2 containers) on a node booted an hour ago, on the wall clock,
/// refreshed every 300 ms: under the 600 and 900 ms resolutions below, so every scrape sees
/// new samples, as a 10 s housekeeping does for a 15 s resolution.
fn live(node: &str) -> conformance::kubelet::Content {
    let boot_ms = unix_now_ns() / 1_000_000 - 3_600_000;
    conformance::kubelet::Content::Live {
        node: conformance::kubelet::SimNode {
            housekeeping: Duration::from_millis(300),
            ..conformance::kubelet::SimNode::generate(node, 3, 2, boot_ms)
        },
        clock: wall_clock_ms(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_nodes_reach_the_store_while_faulty_ones_do_not() {
    let ca = ca();
    let healthy = kubelet(&ca, "a", |o| Options {
        content: live("a"),
        ..o
    })
    .await;
    let hanging = faulty(&ca, "b", Fault::Hang).await;
    let garbage = faulty(&ca, "c", Fault::Garbage).await;
    // Offsets a 0, b 300, c 600 ms; b's request hangs until its 1000 ms deadline.
    let l = start_loop(&ca, &[&healthy, &hanging, &garbage], 900, 700, 4);
    l.until(2000).await;
    assert_eq!(l.metrics.failures("parse"), 2, "c at 600 and 1500 ms");
    assert_eq!(l.metrics.failures("timeout"), 2, "b at 1000 and 1900 ms");
    let now = unix_now_ns();
    let usage = l
        .store
        .node("a", now)
        .expect("a has usage after two scrapes");
    assert!(usage.cpu_nanocores > 0 && usage.memory_bytes > 0);
    assert!(l.store.node("b", now).is_none());
    assert!(l.store.node("c", now).is_none());
    // Set when period 2 completed (b's timeout at 1900 ms), after a's second scrape.
    let text = l.exposition();
    assert!(
        text.contains("metrics_server_storage_points{type=\"node\"} 1"),
        "{text}"
    );
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_that_hang_trickle_stream_forever_cut_off_or_garble_tls_fail_alone() {
    let ca = ca();
    let healthy = kubelet(&ca, "a", |o| Options {
        content: live("a"),
        ..o
    })
    .await;
    let kubelets = [
        faulty(&ca, "b-hang", Fault::Hang).await,
        faulty(&ca, "c-trickle", Fault::Trickle(Duration::from_millis(100))).await,
        faulty(&ca, "d-endless", Fault::Oversized { bytes: usize::MAX }).await,
        faulty(&ca, "e-cut", Fault::CutMidBody).await,
        faulty(&ca, "f-noise", Fault::HandshakeNoise).await,
    ];
    let mut all = vec![&healthy];
    all.extend(kubelets.iter());
    let l = start_loop(&ca, &all, 1200, 1000, 8);
    // Two periods: every fault has failed at least once by then, twice for most.
    l.until(2600).await;
    for (reason, at_least) in [
        ("timeout", 2),
        ("body_too_large", 1),
        ("body", 1),
        ("tls", 1),
    ] {
        assert!(
            l.metrics.failures(reason) >= at_least,
            "{reason}: {}",
            l.exposition()
        );
    }
    let now = unix_now_ns();
    let usage = l
        .store
        .node("a", now)
        .expect("a has usage after two scrapes");
    assert!(usage.cpu_nanocores > 0 && usage.memory_bytes > 0);
    for k in &kubelets {
        assert!(
            l.store.node(k.node_name(), now).is_none(),
            "{}",
            k.node_name()
        );
        assert!(
            k.requests() >= 1 || k.connections() >= 1,
            "{} was tried",
            k.node_name()
        );
    }
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_while_its_scrape_is_in_flight_leaves_nothing_behind() {
    let ca = ca();
    let a = kubelet(&ca, "a", |o| Options {
        content: live("a"),
        ..o
    })
    .await;
    // b answers 400 ms after it is asked; its first scrape goes out 600 ms in.
    let b = kubelet(&ca, "b", |o| Options {
        content: live("b"),
        fault: Fault::Slow(Duration::from_millis(400)),
        ..o
    })
    .await;
    let l = start_loop(&ca, &[&a, &b], 1200, 1000, 4);
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.requests() == 0 {
        assert!(Instant::now() < deadline, "b was never asked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // b's answer is on its way: the node goes.
    l.nodes.0.lock().retain(|n| n.name.as_str() != "b");
    // Two periods later a has usage; b's late answer has not brought b back.
    l.until(2600).await;
    let now = unix_now_ns();
    assert!(l.store.node("a", now).is_some());
    assert!(l.store.node("b", now).is_none());
    let text = l.exposition();
    assert!(!text.contains("node=\"b\""), "{text}");
    assert_eq!(b.requests(), 1, "b is not asked again");
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_live_workload_gets_usage_and_loses_it_when_removed() {
    let ca = ca();
    let k = kubelet(&ca, "live", |o| o).await;
    k.set_content(live("live"));
    let l = start_loop(&ca, &[&k], 600, 500, 4);
    l.until(1300).await;
    let usage = l
        .store
        .node("live", unix_now_ns())
        .expect("node usage after two scrapes");
    assert!(usage.cpu_nanocores > 0);
    assert!(usage.memory_bytes > 0);
    assert!(l.store.points().containers >= 6);
    l.nodes.0.lock().clear();
    l.until(1900).await;
    assert!(l.store.node("live", unix_now_ns()).is_none());
    l.stop().await;
}
