//! The soak harness behind `benches/src/bin/soak.rs`: the server's memory across many scrape
//! periods of a simulated cluster whose pods keep being replaced, the way a cluster with
//! rollouts and jobs churns. Time is compressed with a short resolution (1 s by default,
//! below `--metric-resolution`'s 10 s floor): the harness runs the server as a child process
//! of its own binary (`soak serve`), the production [`apiserver::run()`] with the flags a
//! deployment would pass, then [`Settings::set_resolution`](apiserver::config::Settings::set_resolution).
//!
//! Every period the harness replaces `churn` Running pods (delete the Pod object, create one
//! with a new name, a new `pod-template-hash` label value and fresh containers on the same
//! node, and the node's kubelet reports the new pod instead of the old one), asks one
//! HPA-shaped list, and every `sample_every` periods samples the server's VmRSS and VmHWM,
//! its scrape counters and `metrics_server_storage_points`, and the cluster-wide pod list.
//!
//! The run fails (so a CI smoke run catches a broken harness or server) when a scrape fails,
//! when the cluster-wide list misses more pods than the churn explains or lists more pods
//! than run, when the store holds more points than running nodes and containers, or when a
//! resident-set sample after the baseline exceeds the stated bound.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use conformance::objects::ContainerSpec;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::scale::client::Client;
use crate::scale::cluster::{Cluster, Shape, node_name};
use crate::scale::procfs::{self, Proc};
use crate::scale::server::Server;
use crate::scale::{mib, scrape_counters, unix_ms, wait_for_every_node};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster shape (its `housekeeping` is derived from `resolution` when zero).
    pub shape: Shape,
    /// The scrape period.
    pub resolution: Duration,
    /// Scrape periods to run after every node has usage.
    pub periods: u32,
    /// Pods replaced per period.
    pub churn: usize,
    /// Periods between samples.
    pub sample_every: u32,
    /// The baseline is the largest resident set sampled over periods
    /// `[baseline_from, 2 x baseline_from)`; later samples must stay under
    /// `baseline x bound_factor`.
    pub baseline_from: u32,
    /// The stated bound, relative to the baseline.
    pub bound_factor: f64,
    /// This binary (the server runs as `soak serve`).
    pub self_bin: PathBuf,
    /// The longest set-up may take.
    pub setup_timeout: Duration,
    /// Extra flags for the server.
    pub server_args: Vec<String>,
}

/// One sample of the server.
#[derive(Clone, Copy, Debug)]
struct Sample {
    period: u32,
    rss: u64,
    hwm: u64,
    points: u64,
    listed: usize,
}

/// The pods of the cluster as the harness last made them: `names[node][pod]`.
struct Pods {
    names: Vec<Vec<String>>,
    generation: usize,
}

/// `metrics_server_storage_points{type}` from the server's `/metrics`, summed over node and
/// container.
fn storage_points(text: &str) -> Option<u64> {
    let of = |kind: &str| {
        let prefix = format!("metrics_server_storage_points{{type=\"{kind}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    };
    Some(of("node")? + of("container")?)
}

impl Pods {
    /// The pod names [`Cluster::start`] created (`SimNode::generate`'s).
    fn new(shape: &Shape) -> Pods {
        let names = (0..shape.nodes)
            .map(|i| {
                (0..shape.pods_per_node)
                    .map(|p| format!("{}-pod-{p}", node_name(i)))
                    .collect()
            })
            .collect();
        Pods {
            names,
            generation: 0,
        }
    }

    /// Replaces the next pod in turn (node by node, then pod by pod) with a new one: the Pod
    /// object first goes away, then the new one is created, then the kubelet reports it.
    fn replace_one(&mut self, cluster: &Cluster, shape: &Shape, containers: &[ContainerSpec]) {
        let g = self.generation;
        self.generation += 1;
        let (i, p) = (g % shape.nodes, (g / shape.nodes) % shape.pods_per_node);
        let node = node_name(i);
        let namespace = format!("ns-{}", p % 7);
        let new = format!("{node}-pod-{p}-g{g}");
        let old = std::mem::replace(&mut self.names[i][p], new.clone());
        cluster.objects.delete_pod(&namespace, &old);
        let app = format!("app-{}", p % 10);
        let hash = format!("{g:09x}");
        cluster.objects.add_pod(
            &namespace,
            &new,
            &node,
            &[("app", &app), ("pod-template-hash", &hash)],
            "Running",
            containers,
        );
        let now = unix_ms();
        cluster.fleet.update(i, |model| {
            if let Some(pod) = model.pods.get_mut(p) {
                pod.name = new;
                pod.uid = format!("00000000-0000-4000-9000-{g:012}");
                for c in &mut pod.containers {
                    c.created_ms = now;
                }
            }
        });
    }
}

/// Runs the soak and prints the report; returns it as JSON.
pub async fn run(options: Options) -> anyhow::Result<serde_json::Value> {
    let mut shape = options.shape;
    if shape.housekeeping.is_zero() {
        // Two refreshes per period, so every scrape sees a new sample (the 10 s housekeeping
        // against a 15 s resolution of a real cluster, compressed).
        shape.housekeeping = options.resolution / 2;
    }
    let n = shape.nodes;
    let pods_total = n * shape.pods_per_node;
    let points_max = (n + pods_total * shape.containers) as u64;
    let shutdown = CancellationToken::new();
    let resolution_ms = options.resolution.as_millis();
    println!(
        "soak: {n} nodes x {} pods x {} containers ({pods_total} pods), resolution {resolution_ms} ms, {} periods, {} pods replaced per period",
        shape.pods_per_node, shape.containers, options.periods, options.churn
    );
    let clock: conformance::kubelet::Clock = Arc::new(unix_ms);
    let cluster = Cluster::start(shape, clock, shutdown.clone()).await?;
    let work = cluster.workdir(&format!("soak-{n}-"))?;
    let leading = [
        "serve".to_owned(),
        format!("--resolution={resolution_ms}ms"),
        "--".to_owned(),
    ];
    // `--metric-resolution` passes the flag rules; `soak serve` then sets the real one.
    let mut server = Server::start_with(
        &options.self_bin,
        &leading,
        &work.kubeconfig,
        &work.dir,
        "60s",
        &options.server_args,
    )?;
    let server_proc = Proc::pid(server.pid());
    println!(
        "  server pid {} on {}, log {}",
        server.pid(),
        server.addr,
        server.log.display()
    );
    let mut client = Client::new(server.addr, &work.front_proxy.identity)?;

    let pods_path = "/apis/metrics.k8s.io/v1/pods";
    let t_setup = Instant::now();
    wait_for_every_node(
        &mut client,
        &mut server,
        n,
        options.setup_timeout,
        options.resolution / 4,
    )
    .await?;
    println!(
        "  every node has usage {:.1} s after the server started (server RSS {:.1} MiB)",
        t_setup.elapsed().as_secs_f64(),
        mib(server_proc.rss_bytes()?)
    );

    let containers: Vec<ContainerSpec> = (0..shape.containers)
        .map(|c| ContainerSpec::new(&format!("c{c}")))
        .collect();
    let mut pods = Pods::new(&shape);
    let (ok_before, failed_before) = scrape_counters(&client.text("/metrics").await?.1);
    let cpu_before = server_proc.cpu_seconds()?;
    let machine_before = procfs::machine_ticks()?;
    let started = Instant::now();
    let hpa_path = "/apis/metrics.k8s.io/v1beta1/namespaces/ns-3/pods?labelSelector=app%3Dapp-3";
    let mut samples: Vec<Sample> = Vec::new();
    let mut tick = tokio::time::interval(options.resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    for period in 1..=options.periods {
        tick.tick().await;
        if !server.running() {
            bail!(
                "the server exited at period {period}; see {}",
                server.log.display()
            );
        }
        for _ in 0..options.churn {
            pods.replace_one(&cluster, &shape, &containers);
        }
        let hpa = client.get(hpa_path, b"\"window\":").await?;
        if !hpa.status.is_success() {
            bail!(
                "period {period}: the HPA-shaped list answered {}",
                hpa.status
            );
        }
        if period % options.sample_every == 0 || period == options.periods {
            let list = client.get(pods_path, b"\"window\":").await?;
            if !list.status.is_success() {
                bail!("period {period}: the pod list answered {}", list.status);
            }
            let metrics = client.text("/metrics").await?.1;
            let sample = Sample {
                period,
                rss: server_proc.rss_bytes()?,
                hwm: server_proc.peak_rss_bytes()?,
                points: storage_points(&metrics).context("no metrics_server_storage_points")?,
                listed: list.marker_count,
            };
            // A replaced pod is listed once the server has its usage: after at most three
            // periods (the watch event, then two scrapes, or one with a start time).
            let missing_allowed = 3 * options.churn;
            if sample.listed > pods_total || sample.listed + missing_allowed < pods_total {
                bail!(
                    "period {period}: {} pods listed, {pods_total} running (at most {missing_allowed} may lack usage)",
                    sample.listed
                );
            }
            if sample.points > points_max {
                bail!(
                    "period {period}: the store holds {} points, at most {points_max} can be running",
                    sample.points
                );
            }
            samples.push(sample);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let server_cpu = server_proc.cpu_seconds()? - cpu_before;
    let busy = procfs::busy_share(machine_before, procfs::machine_ticks()?);
    let (ok_after, failed_after) = scrape_counters(&client.text("/metrics").await?.1);
    let (scrapes_ok, scrapes_failed) = (
        ok_after.saturating_sub(ok_before),
        failed_after.saturating_sub(failed_before),
    );
    let status = server.stop(Duration::from_secs(10));

    let baseline = samples
        .iter()
        .filter(|s| s.period >= options.baseline_from && s.period < 2 * options.baseline_from)
        .map(|s| s.rss)
        .max()
        .context("no sample in the baseline window: run more periods")?;
    let bound = (baseline as f64 * options.bound_factor) as u64;
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.period >= 2 * options.baseline_from)
        .collect();
    let max_after = after.iter().map(|s| s.rss).max().unwrap_or(baseline);
    let last = samples.last().copied().context("no sample")?;
    let tenth = (after.len() / 10).max(1);
    let mean = |v: &[&Sample]| v.iter().map(|s| s.rss).sum::<u64>() / v.len().max(1) as u64;
    let early = mean(&after[..tenth.min(after.len())]);
    let late = mean(&after[after.len().saturating_sub(tenth)..]);

    println!(
        "  {} periods in {secs:.0} s, {} pods replaced:",
        options.periods, pods.generation
    );
    println!("    RSS per period sample (MiB):");
    for row in samples.chunks(10) {
        let line: Vec<String> = row
            .iter()
            .map(|s| format!("{}:{:.1}", s.period, mib(s.rss)))
            .collect();
        println!("      {}", line.join(" "));
    }
    println!(
        "    baseline (largest RSS over periods {}-{}) {:.1} MiB; bound {:.2} x = {:.1} MiB",
        options.baseline_from,
        2 * options.baseline_from - 1,
        mib(baseline),
        options.bound_factor,
        mib(bound)
    );
    println!(
        "    after the baseline: max {:.1} MiB, first tenth mean {:.1} MiB, last tenth mean {:.1} MiB ({:+.1} %), end {:.1} MiB, VmHWM {:.1} MiB",
        mib(max_after),
        mib(early),
        mib(late),
        100.0 * (late as f64 - early as f64) / early.max(1) as f64,
        mib(last.rss),
        mib(last.hwm)
    );
    println!(
        "    store points at the end {} (at most {points_max} running); last list {} of {pods_total} pods",
        last.points, last.listed
    );
    println!(
        "    scrapes {scrapes_ok} ok, {scrapes_failed} failed; server CPU {server_cpu:.1} s ({:.1} millicores); machine busy {:.0} % of 2 cores; server stopped: {status}",
        server_cpu / secs * 1000.0,
        busy * 100.0
    );
    let report = json!({
        "nodes": n,
        "pods": pods_total,
        "resolution_ms": resolution_ms,
        "periods": options.periods,
        "pods_replaced": pods.generation,
        "seconds": secs,
        "rss_baseline_bytes": baseline,
        "rss_bound_bytes": bound,
        "rss_max_after_baseline_bytes": max_after,
        "rss_early_mean_bytes": early,
        "rss_late_mean_bytes": late,
        "rss_end_bytes": last.rss,
        "hwm_end_bytes": last.hwm,
        "store_points_end": last.points,
        "scrapes_ok": scrapes_ok,
        "scrapes_failed": scrapes_failed,
        "server_cpu_seconds": server_cpu,
        "machine_busy": busy,
        "samples": samples.iter().map(|s| json!([s.period, s.rss, s.hwm, s.points, s.listed])).collect::<Vec<_>>(),
    });
    shutdown.cancel();
    if scrapes_failed > 0 || scrapes_ok == 0 {
        bail!("scrapes: {scrapes_ok} ok, {scrapes_failed} failed");
    }
    if max_after > bound {
        bail!(
            "RSS {:.1} MiB exceeded the bound {:.1} MiB ({:.2} x the baseline {:.1} MiB)",
            mib(max_after),
            mib(bound),
            options.bound_factor,
            mib(baseline)
        );
    }
    Ok(report)
}
