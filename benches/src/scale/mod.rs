//! The scale harness behind `benches/src/bin/scale.rs`: the real `metrics-server` binary as a
//! child process against a simulated cluster in this process (the in-memory kube-apiserver
//! with every Node and Running Pod, and one HTTPS kubelet per node serving moving counters),
//! measured from outside through `/proc/<pid>` and HTTPS.
//!
//! # Layout
//! - [`cluster`]: the control plane with the objects and the kubelet fleet.
//! - [`hpa`]: HPA-shaped requests at a fixed rate from many connections.
//! - [`kubelets`]: the simulated kubelets, in this process or in child processes.
//! - [`server`]: the child process.
//! - [`client`]: HTTPS requests with front-proxy authentication.
//! - [`procfs`]: resident set and CPU time of a process, busy time of the machine.
//! - [`tcpprobe`]: the server's share of each HPA-shaped exchange, from the kernel's view.

pub mod client;
pub mod cluster;
pub mod hpa;
pub mod kubelets;
pub mod procfs;
pub mod server;
pub mod tcpprobe;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::client::{Client, Fetched};
use self::cluster::{Cluster, KubeletSched, Shape};
use self::procfs::Proc;
use self::server::Server;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster shape.
    pub shape: Shape,
    /// `--metric-resolution`.
    pub resolution: Duration,
    /// The measured window (after set-up and warm-up).
    pub duration: Duration,
    /// Full periods that start after the server's warm-up ends, before the window.
    pub warmup_periods: u32,
    /// Repetitions of each cluster-wide list.
    pub lists: usize,
    /// The `metrics-server` binary.
    pub server_bin: PathBuf,
    /// The longest set-up may take (objects, kubelets, server start, first usage everywhere).
    pub setup_timeout: Duration,
    /// Extra flags for the server.
    pub server_args: Vec<String>,
    /// HPA-shaped request rates to drive after the lists ([`hpa`]), one phase each.
    pub hpa_rates: Vec<u32>,
    /// Clients the HPA-shaped requests are spread over, each with one request in flight.
    pub hpa_connections: usize,
    /// HTTP/1.1 or h2, for the lists and the HPA-shaped requests.
    pub protocol: client::Protocol,
    /// With h2, the connections the HPA-shaped clients' streams share.
    pub hpa_h2_connections: usize,
    /// Ask for the cluster-wide pod list (in this format) over and over during each
    /// HPA-shaped phase.
    pub hpa_list_beside: Option<hpa::ListFormat>,
    /// How long each HPA-shaped phase runs.
    pub hpa_duration: Duration,
    /// How the HPA-shaped requests' due times are kept.
    pub hpa_arrivals: hpa::Arrivals,
    /// Also time each HPA-shaped exchange from the kernel's view ([`tcpprobe`]).
    pub hpa_server_share: bool,
    /// A second server binary, started beside the first against the same kubelets and
    /// measured over the same window (its CPU and resident memory per node, and its CPU as a
    /// ratio of the first's): two builds compared in the same minutes, on a machine whose
    /// speed drifts from one minute to the next. The lists and HPA-shaped phases ask the
    /// first server only.
    pub beside_bin: Option<PathBuf>,
}

/// The second server of [`Options::beside_bin`].
struct Beside {
    bin: PathBuf,
    server: Server,
    proc: Proc,
    client: Client,
}

impl Beside {
    /// Its CPU seconds so far and its scrape counters (ok, failed), read together.
    async fn reading(&mut self) -> anyhow::Result<(f64, (u64, u64))> {
        let cpu = self.proc.cpu_seconds()?;
        Ok((cpu, scrape_counters(&self.client.text("/metrics").await?.1)))
    }
}

/// The `main` of a harness binary: exits 64 when the flags did not parse, else runs
/// `run(options, nodes)` for each size on one multi-threaded runtime, printing
/// `RESULT {json}` per size; fails if any size failed.
pub fn run_sizes<O, F, Fut>(
    what: &str,
    parsed: anyhow::Result<(Vec<usize>, O)>,
    run: F,
) -> std::process::ExitCode
where
    O: Clone,
    F: Fn(O, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    let (sizes, options) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{e:#}");
            return std::process::ExitCode::from(64);
        }
    };
    tls::provider::install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("starting the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for nodes in sizes {
        match runtime.block_on(run(options.clone(), nodes)) {
            Ok(report) => println!("RESULT {report}"),
            Err(e) => {
                eprintln!("{what} run with {nodes} nodes failed: {e:#}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// Parses a harness's command line: `--flag value` or `--flag=value`; `on(flag, value)`
/// handles one flag (`value()` takes its value), `-h`/`--help` prints `usage`.
pub fn parse_flags(
    args: Vec<String>,
    usage: &str,
    mut on: impl FnMut(&str, &mut dyn FnMut() -> anyhow::Result<String>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (flag, None),
        };
        if flag == "-h" || flag == "--help" {
            bail!("{usage}");
        }
        let mut value = || -> anyhow::Result<String> {
            inline
                .clone()
                .or_else(|| it.next())
                .with_context(|| format!("{flag} needs a value\n{usage}"))
        };
        on(&flag, &mut value)?;
    }
    Ok(())
}

/// A harness flag that names one of a few choices (`--kubelet-sched`, `--hpa-arrivals`): the
/// choice's `clap::ValueEnum` names are what the flag takes and what the report says
/// ([`choice_name`]); anything else is refused with the names.
pub fn parse_choice<T: clap::ValueEnum>(flag: &str, value: &str) -> anyhow::Result<T> {
    T::from_str(value, false).map_err(|_| {
        let names: Vec<String> = T::value_variants().iter().map(choice_name).collect();
        anyhow::anyhow!("{flag} is {}, not {value:?}", names.join(" or "))
    })
}

/// The name of a [`parse_choice`] value, as the flag and the report spell it.
pub fn choice_name<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// A harness flag's duration: `15s`, `500ms`, `2m`, or plain seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let (num, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = num
        .parse()
        .with_context(|| format!("bad duration {text:?}"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => bail!("bad duration unit in {text:?}"),
    })
}

/// Wall-clock Unix milliseconds: the simulated kubelets' "now".
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `metrics_server_kubelet_request_total{success="..."}` from the server's `/metrics`.
pub fn scrape_counters(text: &str) -> (u64, u64) {
    let value = |success: &str| {
        let series = format!("metrics_server_kubelet_request_total{{success=\"{success}\"}}");
        sample(text, &series).map_or(0, |v| v as u64)
    };
    (value("true"), value("false"))
}

/// The server's follow-up scrapes (outside the periods, after pod and container starts) so
/// far, every reason together; 0 for a build without them.
pub fn follow_up_scrapes(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.strip_prefix("scraper_follow_up_scrapes_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Polls `GET /apis/metrics.k8s.io/v1/nodes` every `poll` until it lists `n` nodes with usage;
/// fails when the server exits or `timeout` passes (saying what the last poll saw).
pub async fn wait_for_every_node(
    client: &mut Client,
    server: &mut Server,
    n: usize,
    timeout: Duration,
    poll: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        if !server.running() {
            bail!(
                "the server exited during set-up; see {}",
                server.log.display()
            );
        }
        if Instant::now() > deadline {
            bail!("set-up did not finish within {timeout:?} (last: {last})");
        }
        match client
            .get("/apis/metrics.k8s.io/v1/nodes", b"\"window\":")
            .await
        {
            Ok(f) if f.status.is_success() && f.marker_count >= n => return Ok(()),
            Ok(f) => last = format!("{} with {} nodes", f.status, f.marker_count),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(poll).await;
    }
}

/// Waits until the server's warm-up is over (`scraper_warming_nodes` 0) and then until
/// `periods` periods that started after it have completed, so the window sees only steady
/// periods: the period in flight when the warm-up ended has none of the nodes whose warm-up
/// scrape came before their slot, and a window over its tail would count too few scrapes and
/// too little CPU. A server without the gauge (another implementation) waits `periods`
/// resolutions instead.
pub async fn wait_for_steady_periods(
    client: &mut Client,
    periods: u32,
    resolution: Duration,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let poll = Duration::from_millis(250);
    let mut since: Option<u64> = None;
    loop {
        if Instant::now() > deadline {
            bail!("the server did not reach {periods} steady period(s) within {timeout:?}");
        }
        let (_, text) = client.text("/metrics").await?;
        let Some(warming) = sample(&text, "scraper_warming_nodes") else {
            tokio::time::sleep(resolution * periods).await;
            return Ok(());
        };
        let (done, _) = periods_completed(&text, resolution);
        match since {
            // The period in flight when the warm-up ended completes first.
            Some(at) if done > at + u64::from(periods) => return Ok(()),
            Some(_) => {}
            None if warming == 0.0 => since = Some(done),
            None => {}
        }
        tokio::time::sleep(poll).await;
    }
}

/// The value of one series in a Prometheus text exposition, named as it is written there
/// (`name` or `name{label="value"}`): the series, a blank, its value.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `metrics_server_manager_tick_duration_seconds`: periods observed, and of those the ones
/// that completed within `resolution` (its bucket `le` equal to the resolution).
pub fn periods_completed(text: &str, resolution: Duration) -> (u64, u64) {
    let value = |line: &str| line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
    let name = "metrics_server_manager_tick_duration_seconds";
    let count = sample(text, &format!("{name}_count")).map_or(0, |v| v as u64);
    // The bucket whose bound equals the resolution, however the bound is printed (`15`, `15.0`).
    let r = resolution.as_secs_f64();
    let within = text
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{name}_bucket{{le=\"")))
        .find_map(|rest| {
            let (le, _) = rest.split_once('"')?;
            (le.parse::<f64>().ok()? == r).then(|| value(rest))?
        })
        .map_or(0, |v| v as u64);
    (count, within)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes in MiB, for reports.
pub fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Runs one size and prints the report; returns it as JSON.
pub async fn run(options: Options) -> anyhow::Result<serde_json::Value> {
    let shape = options.shape;
    let n = shape.nodes;
    let pods_total = shape.nodes * shape.pods_per_node;
    let resolution_arg = format!("{}ms", options.resolution.as_millis());
    let me = Proc::current();
    let shutdown = CancellationToken::new();
    let deadline = Instant::now() + options.setup_timeout;

    println!(
        "scale: {n} nodes x {} pods x {} containers ({pods_total} pods), resolution {resolution_arg}, window {:?}{}",
        shape.pods_per_node,
        shape.containers,
        options.duration,
        match shape.kubelet_sched {
            KubeletSched::Normal => "",
            KubeletSched::Idle => ", kubelets under SCHED_IDLE",
        }
    );
    let t = Instant::now();
    let clock: conformance::kubelet::Clock = Arc::new(unix_ms);
    let mut cluster = Cluster::start(shape, clock, shutdown.clone()).await?;
    let setup_cluster = t.elapsed();
    println!(
        "  simulated cluster up in {:.1} s: control plane {}, {} kubelets, harness RSS {:.0} MiB",
        setup_cluster.as_secs_f64(),
        cluster.control_plane.url(),
        cluster.fleet.len(),
        mib(me.rss_bytes()?)
    );

    // Kept after the run: the server's log, kubeconfig and serving certificate.
    let work = cluster.workdir(&format!("scale-{n}-"))?;
    let (dir, kubeconfig, front_proxy) = (&work.dir, &work.kubeconfig, &work.front_proxy);

    let t_server = Instant::now();
    let mut server = Server::start(
        &options.server_bin,
        kubeconfig,
        dir,
        &resolution_arg,
        &options.server_args,
    )?;
    let server_proc = Proc::pid(server.pid());
    println!(
        "  server pid {} on {}: {} {}",
        server.pid(),
        server.addr,
        options.server_bin.display(),
        server.args.join(" ")
    );
    let mut client = Client::speaking(server.addr, &front_proxy.identity, options.protocol)?;
    let mut beside = match &options.beside_bin {
        Some(bin) => {
            let work = cluster.workdir(&format!("scale-{n}-beside-"))?;
            let server = Server::start(
                bin,
                &work.kubeconfig,
                &work.dir,
                &resolution_arg,
                &options.server_args,
            )?;
            println!(
                "  beside it, server pid {} on {}: {}",
                server.pid(),
                server.addr,
                bin.display()
            );
            let client =
                Client::speaking(server.addr, &work.front_proxy.identity, options.protocol)?;
            Some(Beside {
                bin: bin.clone(),
                proc: Proc::pid(server.pid()),
                server,
                client,
            })
        }
        None => None,
    };

    // Set-up ends when every node has usage (two scrapes each).
    let nodes_path = "/apis/metrics.k8s.io/v1/nodes";
    let pods_path = "/apis/metrics.k8s.io/v1/pods";
    wait_for_every_node(
        &mut client,
        &mut server,
        n,
        deadline.saturating_duration_since(Instant::now()),
        Duration::from_secs(1),
    )
    .await?;
    let setup_server = t_server.elapsed();
    println!(
        "  every node has usage {:.1} s after the server started (server RSS {:.1} MiB)",
        setup_server.as_secs_f64(),
        mib(server_proc.rss_bytes()?)
    );
    if let Some(b) = &mut beside {
        wait_for_every_node(
            &mut b.client,
            &mut b.server,
            n,
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_secs(1),
        )
        .await?;
        println!(
            "  beside: every node has usage {:.1} s after the servers started",
            t_server.elapsed().as_secs_f64()
        );
    }
    wait_for_steady_periods(
        &mut client,
        options.warmup_periods,
        options.resolution,
        deadline.saturating_duration_since(Instant::now()),
    )
    .await?;
    if let Some(b) = &mut beside {
        wait_for_steady_periods(
            &mut b.client,
            options.warmup_periods,
            options.resolution,
            deadline.saturating_duration_since(Instant::now()),
        )
        .await?;
    }
    println!(
        "  steady: {} full period(s) done since the warm-up ended, {:.1} s after the server started",
        options.warmup_periods,
        t_server.elapsed().as_secs_f64()
    );

    // The measured window.
    let metrics_before = client.text("/metrics").await?;
    let (ok_before, failed_before) = scrape_counters(&metrics_before.1);
    let periods_before = periods_completed(&metrics_before.1, options.resolution);
    let fleet_before = cluster.fleet.counts()?;
    let server_cpu_before = server_proc.cpu_seconds()?;
    let beside_before = match &mut beside {
        Some(b) => Some(b.reading().await?),
        None => None,
    };
    // The harness's CPU: this process and the kubelet processes, if any.
    let harness_procs: Vec<Proc> = std::iter::once(me.clone())
        .chain(cluster.fleet.pids().into_iter().map(Proc::pid))
        .collect();
    let harness_cpu_of =
        || -> anyhow::Result<f64> { harness_procs.iter().map(Proc::cpu_seconds).sum() };
    let harness_cpu_before = harness_cpu_of()?;
    let machine_before = procfs::machine_ticks()?;
    let rss_start = server_proc.rss_bytes()?;
    let window_start = Instant::now();
    let mut rss_max = rss_start;
    let mut rss_samples = Vec::new();
    while window_start.elapsed() < options.duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = server_proc.rss_bytes()?;
        rss_max = rss_max.max(rss);
        rss_samples.push(rss);
    }
    let window = window_start.elapsed();
    let server_cpu = server_proc.cpu_seconds()? - server_cpu_before;
    // The second server's CPU and scrapes, read together right after the first's CPU.
    let beside_after = match &mut beside {
        Some(b) => Some(b.reading().await?),
        None => None,
    };
    let harness_cpu = harness_cpu_of()? - harness_cpu_before;
    let machine_after = procfs::machine_ticks()?;
    let fleet_after = cluster.fleet.counts()?;
    let rss_end = server_proc.rss_bytes()?;
    let metrics_after = client.text("/metrics").await?;
    let (ok_after, failed_after) = scrape_counters(&metrics_after.1);
    let follow_ups =
        follow_up_scrapes(&metrics_after.1).saturating_sub(follow_up_scrapes(&metrics_before.1));
    let periods_after = periods_completed(&metrics_after.1, options.resolution);
    let periods = periods_after.0.saturating_sub(periods_before.0);
    let periods_in_time = periods_after.1.saturating_sub(periods_before.1);
    let periods_expected = (window.as_secs_f64() / options.resolution.as_secs_f64()).floor() as u64;
    let rss_mean = rss_samples.iter().sum::<u64>() / rss_samples.len().max(1) as u64;

    let secs = window.as_secs_f64();
    let server_millicores = server_cpu / secs * 1000.0;
    let harness_millicores = harness_cpu / secs * 1000.0;
    let machine_busy = procfs::busy_share(machine_before, machine_after);
    let scrapes_ok = ok_after.saturating_sub(ok_before);
    let scrapes_failed = failed_after.saturating_sub(failed_before);
    let expected = n as f64 * secs / options.resolution.as_secs_f64();
    let served = fleet_after.served - fleet_before.served;
    let body_bytes_per_scrape =
        (fleet_after.body_bytes - fleet_before.body_bytes) as f64 / served.max(1) as f64;

    println!("  measured window {secs:.1} s:");
    println!(
        "    server RSS {:.1} MiB at start, {:.1} MiB at end, {:.1} MiB max: {:.1} KiB per node (end)",
        mib(rss_start),
        mib(rss_end),
        mib(rss_max),
        rss_end as f64 / 1024.0 / n as f64
    );
    println!(
        "    server CPU {server_cpu:.2} s = {server_millicores:.1} millicores = {:.5} millicores per node",
        server_millicores / n as f64
    );
    println!(
        "    scrapes: {scrapes_ok} ok, {scrapes_failed} failed (server counters; {follow_ups} of them follow-ups); kubelets served {served} ({body_bytes_per_scrape:.0} body bytes each as sent); expected {expected:.0} ({:.2}% of expected succeeded)",
        100.0 * scrapes_ok as f64 / expected
    );
    println!(
        "    harness (control plane + {n} kubelets) CPU {harness_cpu:.2} s = {harness_millicores:.0} millicores; machine busy {:.0}% of 2 cores; kubelet connections accepted {}",
        machine_busy * 100.0,
        fleet_after.connections
    );

    println!(
        "    periods: {periods} completed in the window ({periods_expected} due), {periods_in_time} of them within the resolution, {} late",
        periods - periods_in_time
    );

    let beside_json = match (&beside, beside_before, beside_after) {
        (Some(b), Some((cpu_before, before)), Some((cpu_after, after))) => {
            let cpu = cpu_after - cpu_before;
            let (ok, failed) = (
                after.0.saturating_sub(before.0),
                after.1.saturating_sub(before.1),
            );
            let per_node = cpu / secs * 1000.0 / n as f64;
            // Per scrape: the two windows may hold a slice's scrapes more or less.
            let per_scrape = |cpu: f64, scrapes: u64| cpu / scrapes.max(1) as f64 * 1e6;
            let (us, first_us) = (per_scrape(cpu, ok), per_scrape(server_cpu, scrapes_ok));
            let ratio = us / first_us.max(f64::MIN_POSITIVE);
            let kib = b.proc.rss_bytes()? as f64 / 1024.0 / n as f64;
            println!(
                "    beside ({}): server CPU {cpu:.2} s = {per_node:.5} millicores per node; {us:.1} us a scrape against the first's {first_us:.1}: {ratio:.3}x; RSS {kib:.1} KiB per node (end); scrapes: {ok} ok, {failed} failed",
                b.bin.display()
            );
            if ok == 0 || failed > 0 {
                bail!("the server beside: scrapes in the window: {ok} ok, {failed} failed");
            }
            json!({
                "server_bin": b.bin.display().to_string(), "server_cpu_s": cpu,
                "server_millicores_per_node": per_node, "server_cpu_us_per_scrape": us,
                "first_server_cpu_us_per_scrape": first_us, "cpu_per_scrape_ratio_to_first": ratio,
                "server_kib_per_node": kib, "scrapes": {"ok": ok, "failed": failed},
            })
        }
        _ => serde_json::Value::Null,
    };

    // What a working harness shows whatever the machine's speed: scrapes succeed and none
    // fail on a cluster of healthy kubelets (so a smoke run fails when something broke).
    if scrapes_ok == 0 || scrapes_failed > 0 {
        bail!("scrapes in the window: {scrapes_ok} ok, {scrapes_failed} failed");
    }

    // Cluster-wide lists.
    let load_start = Instant::now();
    let mut lists = serde_json::Map::new();
    // `pods_gzip`: the pod list as kubectl and client-go ask for it (`Accept-Encoding: gzip`);
    // `pods_protobuf`: as client-go's protobuf clients (the HPA's `Accept`), identity.
    for (name, path, gzip, accept) in [
        ("pods", pods_path, false, "application/json"),
        ("pods_gzip", pods_path, true, "application/json"),
        ("pods_protobuf", pods_path, false, hpa::HPA_ACCEPT),
        ("nodes", nodes_path, false, "application/json"),
    ] {
        let cpu_before = server_proc.cpu_seconds()?;
        let client_cpu_before = me.cpu_seconds()?;
        let phase_start = Instant::now();
        let mut fetched: Vec<Fetched> = Vec::new();
        // One unmeasured request first: the connection and the SubjectAccessReview cache.
        client.get("/apis/metrics.k8s.io/v1", b"").await?;
        for _ in 0..options.lists {
            let f = client
                .get_accepting(path, accept, b"\"window\":", gzip)
                .await?;
            if !f.status.is_success() {
                bail!("GET {path}: {}", f.status);
            }
            let want = if path == pods_path { pods_total } else { n };
            if f.marker_count != want {
                bail!("GET {path}: {} items, not {want}", f.marker_count);
            }
            fetched.push(f);
        }
        let lists_done = options.lists.max(1) as f64;
        let cpu = (server_proc.cpu_seconds()? - cpu_before) / lists_done;
        // What the server spent on the lists alone: its CPU in the phase less what it spends
        // scraping meanwhile, at the measured window's rate.
        let cpu_net =
            (cpu - server_cpu / secs * phase_start.elapsed().as_secs_f64() / lists_done).max(0.0);
        // The reading side's CPU: this process (the client, and the control plane stand-in,
        // idle meanwhile; the kubelets too unless they run in their own processes).
        let client_cpu = (me.cpu_seconds()? - client_cpu_before) / lists_done;
        let totals: Vec<Duration> = fetched.iter().map(|f| f.total).collect();
        let first: Vec<Duration> = fetched.iter().map(|f| f.first_byte).collect();
        let med = median(totals.clone());
        let min = totals.iter().min().copied().unwrap_or_default();
        let max = totals.iter().max().copied().unwrap_or_default();
        let bytes = fetched.first().map_or(0, |f| f.bytes);
        let decoded = fetched.first().map_or(0, |f| f.decoded_bytes);
        let encoding = if fetched.first().is_some_and(|f| f.gzip) {
            "gzip"
        } else if accept == hpa::HPA_ACCEPT {
            "protobuf"
        } else {
            "identity"
        };
        let items = fetched.first().map_or(0, |f| f.marker_count);
        println!(
            "    GET {path} ({encoding}, {}): {items} items, {bytes} bytes ({decoded} decoded); median {:.0} ms (min {:.0}, max {:.0}, first byte median {:.1} ms) over {} lists; server CPU {:.0} ms per list ({:.0} ms less the scrapes meanwhile); client CPU {:.0} ms per list",
            choice_name(&options.protocol),
            ms(med),
            ms(min),
            ms(max),
            ms(median(first)),
            options.lists,
            cpu * 1000.0,
            cpu_net * 1000.0,
            client_cpu * 1000.0
        );
        lists.insert(
            name.to_owned(),
            json!({
                "path": path, "encoding": encoding, "protocol": choice_name(&options.protocol), "items": items, "bytes": bytes,
                "decoded_bytes": decoded, "median_ms": ms(med),
                "min_ms": ms(min), "max_ms": ms(max), "server_cpu_ms_per_list": cpu * 1000.0,
                "server_cpu_ms_per_list_net": cpu_net * 1000.0, "client_cpu_ms_per_list": client_cpu * 1000.0,
                "all_ms": totals.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            }),
        );
    }
    let mut hpa_runs = Vec::new();
    if !options.hpa_rates.is_empty() {
        let per_target = hpa::check_targets(&mut client, n).await?;
        for &rate in &options.hpa_rates {
            let cpu_before = server_proc.cpu_seconds()?;
            let machine_before = procfs::machine_ticks()?;
            let recording = options
                .hpa_server_share
                .then(|| tcpprobe::record(dir, options.hpa_duration))
                .transpose()?;
            let transport = hpa::Transport {
                clients: options.hpa_connections,
                protocol: options.protocol,
                h2_connections: options.hpa_h2_connections,
                list_beside: options.hpa_list_beside.map(|format| (pods_path, format)),
            };
            let r = hpa::run_rate(
                server.addr,
                &front_proxy.identity,
                n,
                rate,
                transport,
                options.hpa_duration,
                options.hpa_arrivals,
            )
            .await?;
            let cpu = server_proc.cpu_seconds()? - cpu_before;
            let busy = procfs::busy_share(machine_before, procfs::machine_ticks()?);
            let cpu_us = cpu * 1e6 / r.ok.max(1) as f64;
            println!(
                "    HPA-shaped ({per_target} pods, protobuf {} bytes) at {rate}/s from {} clients over {} {} connections, {} arrivals: {} ok ({:.0}/s), {} failed, {} unsent (behind); p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms (from the send: p50 {:.2}, p99 {:.2}, p99.9 {:.2} ms); server CPU {cpu_us:.0} us per request; machine busy {:.0} %",
                r.bytes,
                r.clients,
                transport.connections(),
                choice_name(&options.protocol),
                choice_name(&options.hpa_arrivals),
                r.ok,
                r.achieved_per_s,
                r.failed,
                r.unsent,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.max_ms,
                r.from_send_ms[0],
                r.from_send_ms[1],
                r.from_send_ms[2],
                busy * 100.0
            );
            if let Some(format) = &options.hpa_list_beside {
                println!(
                    "      beside them: {} cluster-wide {} lists of {pods_total} pods, median {:.0} ms (their CPU is in the server CPU per request above)",
                    r.lists_beside.0,
                    choice_name(format),
                    r.lists_beside.1
                );
            }
            let mut server_share = serde_json::Value::Null;
            if let Some(recording) = recording {
                let exchanges = recording.finish(server.addr.port())?;
                let [p50, p99, p999] = [0.50, 0.99, 0.999].map(|q| hpa::percentile(&exchanges, q));
                println!(
                    "      the server's share as the kernel saw it (request in to answer out, tcp_probe): p50 {p50:.2} ms, p99 {p99:.2} ms, p99.9 {p999:.2} ms over {} exchanges",
                    exchanges.len()
                );
                server_share =
                    json!({"p50": p50, "p99": p99, "p999": p999, "exchanges": exchanges.len()});
            }
            if r.failed > 0 {
                bail!("{} HPA-shaped requests failed at {rate}/s", r.failed);
            }
            hpa_runs.push(json!({
                "rate": rate, "clients": r.clients, "protocol": choice_name(&options.protocol),
                "transport_connections": transport.connections(), "arrivals": choice_name(&options.hpa_arrivals), "pods": per_target, "bytes": r.bytes,
                "ok": r.ok, "unsent": r.unsent, "achieved_per_s": r.achieved_per_s, "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms, "p999_ms": r.p999_ms, "max_ms": r.max_ms,
                "from_send_ms": {"p50": r.from_send_ms[0], "p99": r.from_send_ms[1], "p999": r.from_send_ms[2]},
                "server_cpu_us_per_request": cpu_us, "machine_busy_share": busy,
                "server_share_ms": server_share,
                "lists_beside": {"count": r.lists_beside.0, "median_ms": r.lists_beside.1,
                                 "format": options.hpa_list_beside.as_ref().map(choice_name)},
            }));
        }
    }
    // Scraping while the server answered the lists and the HPA-shaped phases: the scrape
    // threads run below the serving threads' priority, and must still keep up.
    let load_secs = load_start.elapsed().as_secs_f64();
    let metrics_load = client.text("/metrics").await?;
    let (ok_load, failed_load) = scrape_counters(&metrics_load.1);
    let periods_load = periods_completed(&metrics_load.1, options.resolution);
    let load_ok = ok_load.saturating_sub(ok_after);
    let load_failed = failed_load.saturating_sub(failed_after);
    let load_expected = n as f64 * load_secs / options.resolution.as_secs_f64();
    let load_periods = periods_load.0.saturating_sub(periods_after.0);
    let load_in_time = periods_load.1.saturating_sub(periods_after.1);
    println!(
        "    scraping meanwhile ({load_secs:.0} s of lists and HPA-shaped requests): {load_ok} ok, {load_failed} failed (~{load_expected:.0} expected); periods: {load_periods} completed, {load_in_time} within the resolution"
    );
    let rss_after_lists = server_proc.rss_bytes()?;
    let peak = server_proc.peak_rss_bytes()?;
    println!(
        "    server RSS after the lists {:.1} MiB; peak (VmHWM, whole run incl. the initial pod list) {:.1} MiB",
        mib(rss_after_lists),
        mib(peak)
    );

    let server_log = server.log.clone();
    let status = server.stop(Duration::from_secs(10));
    println!("  server stopped: {status}; log {}", server_log.display());
    shutdown.cancel();
    cluster.fleet.shutdown().await;

    Ok(json!({
        "nodes": n, "pods_per_node": shape.pods_per_node, "containers": shape.containers,
        "kubelet_processes": shape.kubelet_processes,
        "kubelet_sched": choice_name(&shape.kubelet_sched),
        "resolution_s": options.resolution.as_secs_f64(), "window_s": secs,
        "setup_cluster_s": setup_cluster.as_secs_f64(), "setup_server_s": setup_server.as_secs_f64(),
        "server_rss_bytes": {"start": rss_start, "end": rss_end, "mean": rss_mean, "max": rss_max,
                             "after_lists": rss_after_lists, "peak_hwm": peak},
        "server_kib_per_node": rss_end as f64 / 1024.0 / n as f64,
        "server_cpu_s": server_cpu, "server_millicores": server_millicores,
        "server_millicores_per_node": server_millicores / n as f64,
        "scrapes": {"ok": scrapes_ok, "failed": scrapes_failed, "follow_ups": follow_ups, "served": served, "expected": expected, "body_bytes_each": body_bytes_per_scrape},
        "harness_millicores": harness_millicores, "machine_busy_share": machine_busy,
        "beside": beside_json,
        "periods": {"completed": periods, "within_resolution": periods_in_time, "due": periods_expected},
        "lists": lists,
        "hpa": hpa_runs,
        "under_load": {"seconds": load_secs, "scrapes_ok": load_ok, "scrapes_failed": load_failed,
                       "scrapes_expected": load_expected, "periods": load_periods,
                       "periods_within_resolution": load_in_time},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_flags_take_and_report_their_names_and_refuse_others() {
        for sched in [KubeletSched::Normal, KubeletSched::Idle] {
            let name = choice_name(&sched);
            assert_eq!(
                parse_choice::<KubeletSched>("--kubelet-sched", &name).unwrap(),
                sched
            );
        }
        assert_eq!(choice_name(&KubeletSched::Idle), "idle");
        for arrivals in [hpa::Arrivals::Ticks, hpa::Arrivals::Even] {
            let name = choice_name(&arrivals);
            assert_eq!(
                parse_choice::<hpa::Arrivals>("--hpa-arrivals", &name).unwrap(),
                arrivals
            );
        }
        assert_eq!(choice_name(&hpa::Arrivals::Even), "even");
        let err = parse_choice::<KubeletSched>("--kubelet-sched", "batch").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--kubelet-sched is normal or idle, not \"batch\""
        );
        let err = parse_choice::<hpa::Arrivals>("--hpa-arrivals", "Even").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--hpa-arrivals is ticks or even, not \"Even\""
        );
    }

    #[test]
    fn a_series_is_read_by_its_exact_name_and_labels() {
        let text = "\
# HELP scraper_warming_nodes Nodes in warm-up.
# TYPE scraper_warming_nodes gauge
scraper_warming_nodes_total 9
scraper_warming_nodes 3
metrics_server_kubelet_request_total{success=\"false\"} 2
metrics_server_kubelet_request_total{success=\"true\"} 4075
";
        assert_eq!(sample(text, "scraper_warming_nodes"), Some(3.0));
        assert_eq!(sample(text, "scraper_warming"), None);
        assert_eq!(sample("", "scraper_warming_nodes"), None);
        assert_eq!(scrape_counters(text), (4075, 2));
        assert_eq!(scrape_counters(""), (0, 0));
    }

    #[test]
    fn periods_are_read_from_the_tick_histogram_at_the_resolution_bucket() {
        let text = "\
# TYPE metrics_server_manager_tick_duration_seconds histogram
metrics_server_manager_tick_duration_seconds_sum 140.5
metrics_server_manager_tick_duration_seconds_count 12
metrics_server_manager_tick_duration_seconds_bucket{le=\"12.5\"} 9
metrics_server_manager_tick_duration_seconds_bucket{le=\"15.0\"} 11
metrics_server_manager_tick_duration_seconds_bucket{le=\"22.5\"} 12
metrics_server_kubelet_request_total{success=\"true\"} 40
";
        assert_eq!(periods_completed(text, Duration::from_secs(15)), (12, 11));
        assert_eq!(periods_completed(text, Duration::from_secs(60)), (12, 0));
        assert_eq!(periods_completed("", Duration::from_secs(15)), (0, 0));
        assert_eq!(scrape_counters(text), (40, 0));
    }
}
