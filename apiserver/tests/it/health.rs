//! `/livez`, `/readyz`, `/healthz` over the wire, and the start-up timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{serve, stack};
use http::StatusCode;
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord};
use scraper::point::{NodeName, NodeScrape, Sample};
use scraper::store::Store;
use tokio_util::sync::CancellationToken;

use crate::support::{Client, eventually, local_server, start};

const LIVEZ_VERBOSE: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n[+]metric-collection-timely ok\n\
[+]metadata-informer-sync ok\nlivez check passed\n";

const READYZ_VERBOSE: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n[+]metric-storage-ready ok\n\
[+]metric-informer-sync ok\n[+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check passed\n";

const READYZ_COLD: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n\
[-]metric-storage-ready failed: reason withheld\n[+]metric-informer-sync ok\n\
[+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check failed\n";

#[tokio::test]
async fn livez_plain_and_verbose() {
    let server = start(|_| {}).await;
    let c = Client::insecure();
    let plain = c.get(server.addr, "/livez").await;
    assert_eq!((plain.status, plain.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(
        plain.headers[http::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let verbose = c.get(server.addr, "/livez?verbose").await;
    assert_eq!(
        (verbose.status, verbose.body.as_str()),
        (StatusCode::OK, LIVEZ_VERBOSE)
    );
    let healthz = c.get(server.addr, "/healthz").await;
    assert_eq!(
        (healthz.status, healthz.body.as_str()),
        (StatusCode::OK, "ok")
    );
    server.shutdown.cancel();
}

/// A server whose store has one node's usage and no pod's, as a cluster with no running pods
/// has once its kubelets answer, started now with `readiness_timeout`.
struct NodesOnly {
    addr: SocketAddr,
    started: Instant,
    shutdown: CancellationToken,
    _tmp: tempfile::TempDir,
}

impl Drop for NodesOnly {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn nodes_only(readiness_timeout: Option<Duration>) -> NodesOnly {
    const SECOND: i64 = 1_000_000_000;
    tls::provider::install_default();
    let tmp = tempfile::tempdir().unwrap();
    let inventory = Arc::new(Inventory::new());
    inventory.upsert_node(NodeRecord {
        name: NodeName::from("n1"),
        labels: inventory.interner().labels([("kubernetes.io/os", "linux")]),
        addresses: Vec::new(),
        kubelet_port: None,
        metrics_path: None,
    });
    let resolution = Duration::from_secs(15);
    let store = Arc::new(Store::new(scraper::store::Config::new(resolution)));
    let now = serve::router::unix_now_ns();
    for round in 0..2_u64 {
        let timestamp_ns = now - (1 - round as i64) * 15 * SECOND;
        let node = Sample {
            timestamp_ns,
            cpu_usage_ns_total: Some((round + 1) * 30_000_000_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(8 << 30),
            start_time_ns: Some(now - 3600 * SECOND),
            swap_bytes: None,
        };
        let scrape = NodeScrape {
            node: Some(node),
            containers: Vec::new(),
        };
        store.ingest(&NodeName::from("n1"), &scrape, timestamp_ns);
    }
    let mut parts = stack::Parts::filled(inventory, store, resolution);
    parts.health.readiness_timeout = readiness_timeout;
    let started = Instant::now();
    let stack = stack::build_router(parts, Registry::default());
    let server = local_server(tmp.path(), stack.router, serve::Config::default()).await;
    let addr = server.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.run(shutdown.clone()));
    NodesOnly {
        addr,
        started,
        shutdown,
        _tmp: tmp,
    }
}

async fn ready(addr: SocketAddr) -> Option<()> {
    let r = Client::insecure().get(addr, "/readyz").await;
    (r.status == StatusCode::OK).then_some(())
}

#[tokio::test]
async fn readyz_passes_with_node_metrics_alone_once_the_startup_timeout_passes() {
    let server = nodes_only(Some(Duration::from_millis(1500))).await;
    let c = Client::insecure();
    let single = c.get(server.addr, "/readyz/metric-storage-ready").await;
    assert_eq!(
        (single.status, single.body.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error: no metrics to serve: pod metrics are missing, this may \
             indicate a container-runtime or kubelet issue\n"
        )
    );
    let passed_at = eventually(Duration::from_secs(10), || async {
        ready(server.addr).await.map(|()| server.started.elapsed())
    })
    .await
    .expect("/readyz passes after the start-up timeout");
    assert!(passed_at >= Duration::from_millis(1500), "{passed_at:?}");
    let verbose = c.get(server.addr, "/readyz?verbose").await;
    assert_eq!(
        (verbose.status, verbose.body.as_str()),
        (StatusCode::OK, READYZ_VERBOSE)
    );
}

/// Every scrape failing (a wrong kubelet CA, no RBAC on `nodes/metrics`) leaves the store
/// without any node's metrics: such a replica never takes traffic, timeout or not, so a
/// rollout that brings that setting stalls with the old replicas serving, as metrics-server's.
#[tokio::test]
async fn readyz_never_passes_without_any_metrics() {
    let empty = start(|s| s.readiness_timeout = Some(Duration::from_millis(1))).await;
    // A server started after it with node metrics and the same timeout: once that one
    // passes, the timeout has passed for `empty` too.
    let nodes = nodes_only(Some(Duration::from_millis(1))).await;
    eventually(Duration::from_secs(10), || ready(nodes.addr))
        .await
        .expect("the server with node metrics passes");

    let c = Client::insecure();
    let cold = c.get(empty.addr, "/readyz?verbose").await;
    assert_eq!(
        (cold.status, cold.body.as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, READYZ_COLD)
    );
    let single = c.get(empty.addr, "/readyz/metric-storage-ready").await;
    assert_eq!(
        (single.status, single.body.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error: no metrics to serve\n"
        )
    );
    // Excluding the failing check passes.
    let excluded = c
        .get(empty.addr, "/readyz?exclude=metric-storage-ready")
        .await;
    assert_eq!(
        (excluded.status, excluded.body.as_str()),
        (StatusCode::OK, "ok")
    );
    empty.shutdown.cancel();
}

#[tokio::test]
async fn node_metrics_alone_never_pass_when_the_timeout_is_off() {
    let off = nodes_only(None).await;
    let on = nodes_only(Some(Duration::from_millis(1))).await;
    eventually(Duration::from_secs(10), || ready(on.addr))
        .await
        .expect("the server with a timeout passes");
    let r = Client::insecure().get(off.addr, "/readyz").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
}
