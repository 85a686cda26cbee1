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
    /// Containers restarted, once everything is served (after the pod starts), one each on
    /// as many nodes, spread over one resolution period: how long each pod is not served,
    /// and the seconds until it is served with a sample of the new container.
    pub restarts: usize,
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
            let restarted = if m.done() && options.restarts > 0 {
                let r = restarts(
                    &cluster,
                    &mut client,
                    options.restarts,
                    case.resolution,
                    limit,
                )
                .await?;
                let hidden: Vec<f64> = r.hidden.clone();
                let served: Vec<f64> = r.served.iter().flatten().copied().collect();
                println!(
                    "    {} containers restarted: {} served again, after median {}, max {}; hidden {} of them, for median {}, max {}; {} follow-up scrapes",
                    r.served.len(),
                    served.len(),
                    show(median(&served)),
                    show(served.iter().copied().reduce(f64::max)),
                    hidden.iter().filter(|&&h| h > 0.0).count(),
                    show(median(&hidden)),
                    show(hidden.iter().copied().reduce(f64::max)),
                    r.scrapes.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                );
                Some(r)
            } else {
                None
            };
            results.push(json!({
                "nodes": n, "pods": pods_total, "source": case.source,
                "resolution_s": case.resolution.as_secs_f64(), "run": run,
                "first_node_s": m.first_node, "all_nodes_s": m.all_nodes,
                "all_pods_s": m.all_pods, "readyz_s": m.ready, "machine_busy_share": busy,
                "pod_starts": starts.as_ref().map(|s| json!({
                    "served_s": s.seconds, "follow_up_scrapes": s.scrapes,
                })),
                "restarts": restarted.as_ref().map(|r| json!({
                    "served_again_s": r.served, "hidden_s": r.hidden,
                    "follow_up_scrapes": r.scrapes,
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
/// follow-up scrapes meanwhile ([`follow_up_scrapes`]).
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
    sample(&text, name)
}

/// The value of the sample named `name` (with its labels, if any) in an exposition.
fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The server's follow-up scrapes so far, of both reasons (an older build counted only
/// pod starts, as `scraper_pod_start_scrapes_total`).
async fn follow_up_scrapes(client: &mut Client) -> Option<u64> {
    let (_, text) = client.text("/metrics").await.ok()?;
    if text.contains("scraper_follow_up_scrapes_total{") {
        Some(crate::scale::follow_up_scrapes(&text))
    } else {
        sample(&text, "scraper_pod_start_scrapes_total")
    }
}

/// Waits until no node warms up (a server without the gauge, an older build, gets 25 s: two
/// housekeeping intervals), so that every node's next scrape is its period's.
async fn wait_warm(client: &mut Client, limit: Duration) -> anyhow::Result<()> {
    let warm_by = Instant::now() + limit;
    loop {
        match server_metric(client, "scraper_warming_nodes").await {
            Some(0) => return Ok(()),
            Some(_) if Instant::now() < warm_by => {}
            Some(_) => bail!("nodes still warming up after {limit:?}"),
            None => {
                tokio::time::sleep(Duration::from_secs(25)).await;
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    // Pods that start on a node still warming up are served by its warm-up.
    wait_warm(client, limit).await?;
    let scrapes_before = follow_up_scrapes(client).await;
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
    let scrapes = follow_up_scrapes(client)
        .await
        .zip(scrapes_before)
        .map(|(after, before)| after.saturating_sub(before));
    Ok(PodStarts { seconds, scrapes })
}

fn server_log(dir: &std::path::Path) -> PathBuf {
    dir.join("metrics-server.log")
}

/// Containers restarted on a running server's cluster: per restart, the seconds until the
/// pod is served with a sample taken after it (`None`: not within the limit) and how long
/// the pod was not served in between (0 when it never was hidden), and the server's
/// follow-up scrapes meanwhile.
struct Restarts {
    served: Vec<Option<f64>>,
    hidden: Vec<f64>,
    scrapes: Option<u64>,
}

/// Restarts the first container of one pod on each of `count` nodes, spread evenly over one
/// `resolution` (so the restarts fall at every phase of their nodes' periods), and follows
/// each pod until it is served with a sample of the new container (at most `limit`).
async fn restarts(
    cluster: &Cluster,
    client: &mut Client,
    count: usize,
    resolution: Duration,
    limit: Duration,
) -> anyhow::Result<Restarts> {
    struct Restart {
        path: String,
        at: Instant,
        /// RFC 3339 second of the restart: a sample of the new container is at or after it.
        since: String,
        hidden_at: Option<Instant>,
        hidden: f64,
        served: Option<f64>,
    }
    // A container that restarts on a node still warming up is served by its warm-up.
    wait_warm(client, limit).await?;
    let scrapes_before = follow_up_scrapes(client).await;
    let nodes = cluster.fleet.len();
    let step = resolution / u32::try_from(count.max(1)).unwrap_or(u32::MAX);
    let mut pending: Vec<(usize, Instant)> = (0..count)
        .map(|k| ((k * 7_919 + 101) % nodes, Instant::now() + step * k as u32))
        .collect();
    pending.reverse();
    let mut restarted: Vec<Restart> = Vec::with_capacity(count);
    let deadline = Instant::now() + resolution + limit;
    loop {
        while let Some(&(node, due)) = pending.last()
            && due <= Instant::now()
        {
            pending.pop();
            let now_ms = unix_ms();
            let mut pod = None;
            cluster.fleet.update(node, |m| {
                // The second pod (the first is the node's kube-proxy), if any.
                let i = usize::from(m.pods.len() > 1);
                if let Some(p) = m.pods.get_mut(i)
                    && let Some(c) = p.containers.first_mut()
                {
                    c.restart_at(now_ms);
                    pod = Some((p.namespace.clone(), p.name.clone()));
                }
            });
            let Some((namespace, name)) = pod else {
                bail!("restarts need the kubelets in process (--kubelet-processes 0) and pods");
            };
            restarted.push(Restart {
                path: format!("/apis/metrics.k8s.io/v1/namespaces/{namespace}/pods/{name}"),
                at: Instant::now(),
                since: conformance::objects::build::rfc3339(now_ms / 1000),
                hidden_at: None,
                hidden: 0.0,
                served: None,
            });
        }
        if pending.is_empty() && restarted.iter().all(|r| r.served.is_some()) {
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        for r in restarted.iter_mut().filter(|r| r.served.is_none()) {
            let Ok((status, body)) = client.text(&r.path).await else {
                continue;
            };
            if status == http::StatusCode::NOT_FOUND {
                r.hidden_at.get_or_insert_with(Instant::now);
                continue;
            }
            let sampled_since = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| Some(*v["timestamp"].as_str()? >= *r.since))
                .unwrap_or(false);
            if status.is_success() && sampled_since {
                r.served = Some(r.at.elapsed().as_secs_f64());
                if let Some(hidden_at) = r.hidden_at {
                    r.hidden = hidden_at.elapsed().as_secs_f64();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let scrapes = follow_up_scrapes(client)
        .await
        .zip(scrapes_before)
        .map(|(after, before)| after.saturating_sub(before));
    Ok(Restarts {
        served: restarted.iter().map(|r| r.served).collect(),
        hidden: restarted.iter().map(|r| r.hidden).collect(),
        scrapes,
    })
}
