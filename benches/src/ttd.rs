//! The time-to-data harness behind `benches/src/bin/ttd.rs`: how long after its process
//! starts the release `metrics-server` serves the first node, every node, every pod, and
//! answers `/readyz` 200, against the scale harness's simulated cluster (the in-memory
//! control plane and one HTTPS kubelet per node whose stats refresh on a housekeeping
//! interval, as a real kubelet's do).
//!
//! The server is polled from outside over HTTPS with front-proxy authentication every
//! [`Options::poll`]; a figure is the time of the first poll that saw it, so it is late by at
//! most one poll interval plus the poll itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::scale::client::Client;
use crate::scale::cluster::{Cluster, Shape};
use crate::scale::procfs;
use crate::scale::server::Server;

/// One server start to time.
#[derive(Clone, Debug)]
pub struct Case {
    /// `--metric-resolution`.
    pub resolution: Duration,
    /// `--kubelet-source` (`resource` or `summary`).
    pub source: String,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster shape.
    pub shape: Shape,
    /// The server starts to time, one after the other against the same cluster.
    pub cases: Vec<Case>,
    /// Starts of each case.
    pub repeat: usize,
    /// The `metrics-server` binary.
    pub server_bin: PathBuf,
    /// How often the server is asked.
    pub poll: Duration,
    /// Extra flags for the server.
    pub server_args: Vec<String>,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Seconds from the server's start to each milestone; `None`: not reached in time.
#[derive(Clone, Copy, Debug, Default)]
struct Milestones {
    first_node: Option<f64>,
    all_nodes: Option<f64>,
    all_pods: Option<f64>,
    ready: Option<f64>,
}

impl Milestones {
    fn done(&self) -> bool {
        self.first_node.is_some()
            && self.all_nodes.is_some()
            && self.all_pods.is_some()
            && self.ready.is_some()
    }
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "never".to_owned(), |s| format!("{s:.1} s"))
}

/// Runs every case against one cluster and prints a line per start; returns them as JSON.
pub async fn run(options: Options) -> anyhow::Result<serde_json::Value> {
    let shape = options.shape;
    let (n, pods_total) = (shape.nodes, shape.nodes * shape.pods_per_node);
    println!(
        "ttd: {n} nodes x {} pods x {} containers ({pods_total} pods), poll {:?}",
        shape.pods_per_node, shape.containers, options.poll
    );
    let shutdown = CancellationToken::new();
    let clock: conformance::kubelet::Clock = Arc::new(unix_ms);
    let cluster = Cluster::start(shape, clock, shutdown.clone()).await?;
    let work = cluster.workdir(&format!("ttd-{n}-"))?;
    let (dir, kubeconfig, front_proxy) = (&work.dir, &work.kubeconfig, &work.front_proxy);

    let mut results = Vec::new();
    for case in &options.cases {
        for run in 0..options.repeat {
            let case_dir = dir.join(format!(
                "{}-{}ms-{run}",
                case.source,
                case.resolution.as_millis()
            ));
            std::fs::create_dir_all(&case_dir)
                .with_context(|| format!("creating {}", case_dir.display()))?;
            let mut args = vec![format!("--kubelet-source={}", case.source)];
            args.extend(options.server_args.iter().cloned());
            let machine_before = procfs::machine_ticks()?;
            let started = Instant::now();
            let mut server = Server::start(
                &options.server_bin,
                kubeconfig,
                &case_dir,
                &format!("{}ms", case.resolution.as_millis()),
                &args,
            )?;
            let mut client = Client::new(server.addr, &front_proxy.identity)?;
            let limit = case.resolution * 3 + Duration::from_secs(30);
            let mut m = Milestones::default();
            while !m.done() && started.elapsed() < limit {
                if !server.running() {
                    bail!("the server exited; see {}", server.log.display());
                }
                let at = || Some(started.elapsed().as_secs_f64());
                if m.all_nodes.is_none()
                    && let Ok(f) = client
                        .get("/apis/metrics.k8s.io/v1/nodes", b"\"window\":")
                        .await
                    && f.status.is_success()
                {
                    if f.marker_count > 0 && m.first_node.is_none() {
                        m.first_node = at();
                    }
                    if f.marker_count >= n {
                        m.all_nodes = at();
                    }
                }
                if m.all_pods.is_none()
                    && let Ok(f) = client
                        .get("/apis/metrics.k8s.io/v1/pods", b"\"window\":")
                        .await
                    && f.status.is_success()
                    && f.marker_count >= pods_total
                {
                    m.all_pods = at();
                }
                if m.ready.is_none()
                    && let Ok((status, _)) = client.text("/readyz").await
                    && status.is_success()
                {
                    m.ready = at();
                }
                tokio::time::sleep(options.poll).await;
            }
            let machine_after = procfs::machine_ticks()?;
            let busy = (machine_after.0 - machine_before.0) as f64
                / (machine_after.1 - machine_before.1).max(1) as f64;
            println!(
                "  {} resolution {:?} run {run}: first node {}, every node {}, every pod {}, /readyz 200 {} (machine busy {:.0}% of 2 cores)",
                case.source,
                case.resolution,
                show(m.first_node),
                show(m.all_nodes),
                show(m.all_pods),
                show(m.ready),
                busy * 100.0,
            );
            results.push(json!({
                "nodes": n, "pods": pods_total, "source": case.source,
                "resolution_s": case.resolution.as_secs_f64(), "run": run,
                "first_node_s": m.first_node, "all_nodes_s": m.all_nodes,
                "all_pods_s": m.all_pods, "readyz_s": m.ready, "machine_busy_share": busy,
            }));
            let status = server.stop(Duration::from_secs(10));
            if !m.done() {
                eprintln!(
                    "  not every milestone within {limit:?}; server {status}, log {}",
                    server_log(&case_dir).display()
                );
            }
        }
    }
    shutdown.cancel();
    cluster.fleet.shutdown().await;
    Ok(serde_json::Value::Array(results))
}

fn server_log(dir: &std::path::Path) -> PathBuf {
    dir.join("metrics-server.log")
}
