//! The idle-connections harness behind `benches/src/bin/idle.rs`: the release
//! `metrics-server` against the scale harness's simulated cluster, an HPA-shaped client
//! looping on a namespaced, label-selected pod list (one kept-alive connection, as an HPA
//! worker through the aggregator), first alone, then while `idle` TLS connections that
//! completed their handshake and never send a request are held open against the server.
//!
//! It reports the HPA-shaped list's p50/p99/max latency in both phases, the server's RSS and
//! open connections with the idle ones held, and how many idle connections the server had
//! closed by the end of the window. A request that fails, or a list of the wrong size, fails
//! the run; the latency is reported, never asserted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use serde_json::json;
use tokio::io::AsyncReadExt as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::scale::client::Client;
use crate::scale::cluster::{Cluster, Shape};
use crate::scale::procfs::{self, Proc};
use crate::scale::server::Server;
use crate::scale::wait_for_every_node;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster shape.
    pub shape: Shape,
    /// Idle TLS connections to hold open.
    pub idle: usize,
    /// How long the HPA-shaped client loops in each phase.
    pub window: Duration,
    /// The `metrics-server` binary.
    pub server_bin: PathBuf,
    /// Extra flags for the server.
    pub server_args: Vec<String>,
}

/// The HPA's question: one namespace, one label (the simulated cluster puts pods of
/// `app-3` in `ns-3` on every node, so ~one pod per node).
const HPA_PATH: &str =
    "/apis/metrics.k8s.io/v1beta1/namespaces/ns-3/pods?labelSelector=app%3Dapp-3";
/// Handshakes in flight while the idle connections are opened.
const OPENING: usize = 64;

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Latency figures of one phase, in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
struct Latency {
    requests: usize,
    items: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// Loops on the HPA-shaped list for `window`; every answer must be a 200 with `items` pods.
async fn hpa_phase(client: &mut Client, window: Duration, items: usize) -> anyhow::Result<Latency> {
    let end = Instant::now() + window;
    let mut latencies = Vec::new();
    while Instant::now() < end {
        let f = client.get(HPA_PATH, b"\"window\":").await?;
        if !f.status.is_success() || f.marker_count != items {
            bail!(
                "GET {HPA_PATH}: {} with {} items, not 200 with {items}",
                f.status,
                f.marker_count
            );
        }
        latencies.push(f.total);
    }
    latencies.sort();
    Ok(Latency {
        requests: latencies.len(),
        items,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    })
}

/// One TLS connection that completes its handshake and then only waits: returns when the
/// server closes it (or `stop`).
async fn idle_connection(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    opened: tokio::sync::mpsc::Sender<bool>,
    stop: CancellationToken,
) -> bool {
    let connect = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").ok()?;
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .ok()
    };
    let Some(mut tls) = connect.await else {
        let _ = opened.send(false).await;
        return false;
    };
    let _ = opened.send(true).await;
    drop(opened);
    let mut byte = [0u8; 1];
    tokio::select! {
        // Closed by the server (its idle or header-read timeout).
        _ = tls.read(&mut byte) => true,
        () = stop.cancelled() => false,
    }
}

/// Runs the harness and prints the report; returns it as JSON.
pub async fn run(options: Options) -> anyhow::Result<serde_json::Value> {
    let shape = options.shape;
    let n = shape.nodes;
    let shutdown = CancellationToken::new();
    println!(
        "idle: {n} nodes x {} pods x {} containers, {} idle TLS connections, HPA window {:?}",
        shape.pods_per_node, shape.containers, options.idle, options.window
    );
    let clock: conformance::kubelet::Clock = Arc::new(unix_ms);
    let cluster = Cluster::start(shape, clock, shutdown.clone()).await?;
    let work = cluster.workdir(&format!("idle-{n}-"))?;
    let mut server = Server::start(
        &options.server_bin,
        &work.kubeconfig,
        &work.dir,
        "15s",
        &options.server_args,
    )?;
    let server_proc = Proc::pid(server.pid());
    let mut client = Client::new(server.addr, &work.front_proxy.identity)?;

    // Every node served, and the HPA-shaped list's size known.
    wait_for_every_node(
        &mut client,
        &mut server,
        n,
        Duration::from_secs(300),
        Duration::from_millis(500),
    )
    .await?;
    let items = client.get(HPA_PATH, b"\"window\":").await?.marker_count;
    if items == 0 {
        bail!("GET {HPA_PATH}: no pods");
    }

    let rss_before = server_proc.rss_bytes()?;
    let busy_before = procfs::machine_ticks()?;
    let alone = hpa_phase(&mut client, options.window, items).await?;

    // The idle connections: handshakes done, never a request.
    let mut config = tls::client::config(&tls::client::Verify::Insecure, None)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel(OPENING);
    let stop = CancellationToken::new();
    let mut idle = JoinSet::new();
    let t_open = Instant::now();
    let mut open = 0usize;
    let mut refused = 0usize;
    for _ in 0..options.idle {
        if idle.len() >= open + refused + OPENING
            && let Some(ok) = opened_rx.recv().await
        {
            if ok { open += 1 } else { refused += 1 }
        }
        idle.spawn(idle_connection(
            server.addr,
            config.clone(),
            opened_tx.clone(),
            stop.clone(),
        ));
    }
    drop(opened_tx);
    while let Some(ok) = opened_rx.recv().await {
        if ok { open += 1 } else { refused += 1 }
    }
    let opening = t_open.elapsed();
    let rss_idle = server_proc.rss_bytes()?;
    println!(
        "  {open} idle TLS connections open in {:.1} s ({refused} failed); server RSS {:.1} -> {:.1} MiB ({:.1} KiB per idle connection)",
        opening.as_secs_f64(),
        rss_before as f64 / 1048576.0,
        rss_idle as f64 / 1048576.0,
        (rss_idle.saturating_sub(rss_before)) as f64 / 1024.0 / open.max(1) as f64
    );

    let loaded = hpa_phase(&mut client, options.window, items).await?;
    let busy_after = procfs::machine_ticks()?;
    let machine_busy = procfs::busy_share(busy_before, busy_after);
    stop.cancel();
    let mut closed_by_server = 0usize;
    while let Some(joined) = idle.join_next().await {
        if joined.unwrap_or(false) {
            closed_by_server += 1;
        }
    }
    for (what, l) in [("alone", alone), ("with idle connections", loaded)] {
        println!(
            "  HPA-shaped list ({} pods) {what}: {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.items, l.requests, l.p50, l.p99, l.max
        );
    }
    println!(
        "  idle connections the server closed within the window: {closed_by_server}; machine busy {:.0}% of 2 cores",
        machine_busy * 100.0
    );
    let log = server.stop(Duration::from_secs(10));
    shutdown.cancel();
    let latency = |l: Latency| json!({"requests": l.requests, "p50_ms": l.p50, "p99_ms": l.p99, "max_ms": l.max});
    Ok(json!({
        "nodes": n, "idle_requested": options.idle, "idle_open": open, "idle_failed": refused,
        "opening_s": opening.as_secs_f64(), "hpa_items": items,
        "alone": latency(alone), "with_idle": latency(loaded),
        "server_rss_bytes": {"before": rss_before, "with_idle": rss_idle},
        "closed_by_server": closed_by_server, "machine_busy_share": machine_busy,
        "server": log,
    }))
}
