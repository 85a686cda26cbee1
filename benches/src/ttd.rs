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
use conformance::kubelet::{SimContainer, SimPod};
use conformance::objects::ContainerSpec;

use crate::scale::cluster::{Cluster, Shape, node_name};
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
    /// Pods started, once everything is served, on as many nodes (0.5 s apart, each with
    /// the shape's containers, created at their start): the seconds until each is served.
    pub pod_starts: usize,
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
            let starts = if m.done() && options.pod_starts > 0 {
                Some(
                    pod_starts(
                        &cluster,
                        &mut client,
                        options.pod_starts,
                        shape.containers,
                        &format!("{}-{}-{run}", case.source, case.resolution.as_secs()),
                        limit,
                    )
                    .await?,
                )
            } else {
                None
            };
            if let Some(starts) = &starts {
                let served: Vec<f64> = starts.seconds.iter().flatten().copied().collect();
                println!(
                    "    {} pods started: {} served, after {} (median {}, max {}); {} scrapes for them",
                    starts.seconds.len(),
                    served.len(),
                    served
                        .iter()
                        .map(|s| format!("{s:.1}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    show(median(&served)),
                    show(served.iter().copied().reduce(f64::max)),
                    starts
                        .scrapes
                        .map_or_else(|| "?".to_owned(), |n| n.to_string()),
                );
            }
            results.push(json!({
                "nodes": n, "pods": pods_total, "source": case.source,
                "resolution_s": case.resolution.as_secs_f64(), "run": run,
                "first_node_s": m.first_node, "all_nodes_s": m.all_nodes,
                "all_pods_s": m.all_pods, "readyz_s": m.ready, "machine_busy_share": busy,
                "pod_starts": starts.as_ref().map(|s| json!({
                    "served_s": s.seconds, "pod_start_scrapes": s.scrapes,
                })),
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

/// Pods started on a running server's cluster: seconds from each start to its first answer
/// with usage (`None`: not within the limit), and the server's
/// `scraper_pod_start_scrapes_total` growth meanwhile.
struct PodStarts {
    seconds: Vec<Option<f64>>,
    scrapes: Option<u64>,
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// A sample of the server's own `/metrics`.
async fn server_metric(client: &mut Client, name: &str) -> Option<u64> {
    let (_, text) = client.text("/metrics").await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Starts `count` pods, named after `tag`, on as many nodes, 0.5 s apart, and waits until
/// each is served (at most `limit` after its start).
async fn pod_starts(
    cluster: &Cluster,
    client: &mut Client,
    count: usize,
    containers: usize,
    tag: &str,
    limit: Duration,
) -> anyhow::Result<PodStarts> {
    const NAMESPACE: &str = "ttd-starts";
    let nodes = cluster.fleet.len();
    // Pods that start on a node still warming up are served by its warm-up: wait it out
    // (a server without the gauge, an older build, gets 25 s: two housekeeping intervals).
    let warm_by = Instant::now() + limit;
    loop {
        match server_metric(client, "scraper_warming_nodes").await {
            Some(0) => break,
            Some(_) if Instant::now() < warm_by => {}
            Some(_) => bail!("nodes still warming up after {limit:?}"),
            None => {
                tokio::time::sleep(Duration::from_secs(25)).await;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let scrapes_before = server_metric(client, "scraper_pod_start_scrapes_total").await;
    let containers = containers.max(1);
    let specs: Vec<ContainerSpec> = (0..containers)
        .map(|c| ContainerSpec::new(&format!("c{c}")))
        .collect();
    let mut started = Vec::with_capacity(count);
    for k in 0..count {
        let node = (k * 7_919 + 13) % nodes;
        let name = format!("start-{tag}-{k}");
        let now_ms = unix_ms();
        let pod = SimPod {
            namespace: NAMESPACE.to_owned(),
            name: name.clone(),
            uid: format!("00000000-0000-4000-9000-{:012}", k),
            containers: (0..containers)
                .map(|c| SimContainer {
                    name: format!("c{c}"),
                    created_ms: now_ms,
                    cpu_cores: 0.05,
                    memory_min_bytes: 32 << 20,
                    memory_max_bytes: 40 << 20,
                    ..SimContainer::default()
                })
                .collect(),
        };
        if !cluster.fleet.update(node, |m| m.pods.push(pod)) {
            bail!("pod starts need the kubelets in process (--kubelet-processes 0)");
        }
        cluster.objects.add_pod(
            NAMESPACE,
            &name,
            &node_name(node),
            &[("app", "ttd-start")],
            "Running",
            &specs,
        );
        started.push((name, Instant::now()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut seconds: Vec<Option<f64>> = vec![None; count];
    while seconds.iter().any(Option::is_none) && started.iter().any(|(_, at)| at.elapsed() < limit)
    {
        for ((name, at), served) in started.iter().zip(seconds.iter_mut()) {
            if served.is_some() {
                continue;
            }
            let path = format!("/apis/metrics.k8s.io/v1/namespaces/{NAMESPACE}/pods/{name}");
            if let Ok(f) = client.get(&path, b"\"window\":").await
                && f.status.is_success()
                && f.marker_count > 0
            {
                *served = Some(at.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let scrapes = server_metric(client, "scraper_pod_start_scrapes_total")
        .await
        .zip(scrapes_before)
        .map(|(after, before)| after.saturating_sub(before));
    Ok(PodStarts { seconds, scrapes })
}

fn server_log(dir: &std::path::Path) -> PathBuf {
    dir.join("metrics-server.log")
}
