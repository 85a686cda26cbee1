//! Overload harness: the real HTTPS server in-process (loopback only) over a synthetic store,
//! driven by two classes of clients, once without load shedding and once with it.
//!
//! - **flood**: `FLOOD` clients (spread over 4 users, as dashboards or `kubectl top pods -A`)
//!   looping on cluster-wide pod lists of the whole synthetic cluster;
//! - **hpa**: 5 clients (the HPA's 5 workers) as the HPA's service account, looping on
//!   namespaced, label-selected pod lists.
//!
//! Clients keep one HTTP/1.1 connection each and, like client-go, sleep `Retry-After` after a
//! 429. Each mode runs for `SECONDS` and at most 1,000,000 requests, then stops. Reports
//! p50/p99 latency, the 429 rate and per-class throughput. The shedding mode uses
//! `--max-requests-inflight=8` (2 autoscaler seats, 6 for the rest), 1 s queue wait.
//!
//! Usage: `cargo run --release -p benches --bin load [SECONDS] [FLOOD] [NODES] [QUERY]`
//! (defaults 10, 32, 200, none; each node has 30 pods in 20 namespaces; QUERY is added to the
//! flood's list, e.g. `labelSelector=app%3Ddeploy-7` for a selective cluster-wide list).

// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use apiserver::auth::UserInfo;
use apiserver::config::Listen;
use apiserver::credentials::Reloads;
use apiserver::serve::{self, Filter, Verdict};
use apiserver::shed;
use apiserver::stack;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::request::Parts;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord};
use scraper::point::{ContainerSample, NodeName, NodeScrape, PodKey, Sample};
use scraper::store::Store;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

const SECOND: i64 = 1_000_000_000;
const PODS_PER_NODE: usize = 30;
const NAMESPACES: usize = 20;
const HPA_CLIENTS: usize = 5;
const MAX_REQUESTS: u64 = 1_000_000;
const HPA_USER: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";

/// The user named by `x-load-user` (the harness's stand-in for authentication).
struct Identify;

impl Filter for Identify {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Some(name) = parts
                .headers
                .get("x-load-user")
                .and_then(|v| v.to_str().ok())
            {
                let user = UserInfo {
                    name: name.to_owned(),
                    uid: String::new(),
                    groups: vec!["system:authenticated".to_owned()],
                    extra: BTreeMap::new(),
                };
                parts.extensions.insert(user);
            }
            Verdict::Pass(None)
        })
    }
}

fn pod_name(node: usize, pod: usize) -> String {
    format!("deploy-{}-{node:04}-{pod:02}", pod % NAMESPACES)
}

/// `nodes` nodes with 30 pods each, spread over 20 namespaces, labelled `app=deploy-<i>`, and
/// two scrapes ending now so every node and pod has usage.
fn synthetic(nodes: usize) -> (Arc<Inventory>, Arc<Store>) {
    let inventory = Arc::new(Inventory::new());
    let store = Arc::new(Store::new(scraper::store::Config::new(
        Duration::from_secs(15),
    )));
    let now = serve::router::unix_now_ns();
    for n in 0..nodes {
        let node = NodeName::from(format!("node-{n:04}").as_str());
        inventory.upsert_node(NodeRecord {
            name: node.clone(),
            labels: inventory.interner().labels([("pool", "default")]),
            addresses: Vec::new(),
            kubelet_port: None,
            metrics_path: None,
        });
        let pods: Vec<(String, String)> = (0..PODS_PER_NODE)
            .map(|p| (format!("ns-{}", p % NAMESPACES), pod_name(n, p)))
            .collect();
        for (p, (ns, name)) in pods.iter().enumerate() {
            let app = format!("deploy-{}", p % NAMESPACES);
            inventory.upsert_pod(PodRecord {
                usage: scraper::store::UsageLink::new(),
                key: PodKey::new(ns, name),
                labels: inventory.interner().labels([("app", app.as_str())]),
                node_name: Some(node.clone()),
            });
        }
        for round in 0..2_i64 {
            let ts = now - (1 - round) * 15 * SECOND;
            let cpu = u64::try_from(round + 1).unwrap_or(1) * 3_000_000_000;
            let sample = Sample {
                timestamp_ns: ts,
                cpu_usage_ns_total: Some(cpu),
                cpu_nanocores: None,
                memory_working_set_bytes: Some(64 << 20),
                start_time_ns: Some(now - 3600 * SECOND),
                swap_bytes: None,
            };
            let scrape = NodeScrape {
                node: Some(sample),
                containers: pods
                    .iter()
                    .map(|(ns, name)| ContainerSample {
                        namespace: Cow::Borrowed(ns.as_str()),
                        pod: Cow::Borrowed(name.as_str()),
                        container: Cow::Borrowed("app"),
                        sample,
                    })
                    .collect(),
            };
            store.ingest(&node, &scrape, ts);
        }
    }
    (inventory, store)
}

/// Starts the server as `run` assembles it ([`stack`]); `shedding: None` leaves out the
/// admission and cold-store filters. The store is filled by the harness: no scrape loop,
/// nothing to warm up.
async fn serve(
    inventory: Arc<Inventory>,
    store: Arc<Store>,
    shedding: Option<shed::Config>,
    dir: &std::path::Path,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, Arc<Registry>)> {
    let stack = stack::build_router(
        stack::Parts {
            shed: shedding,
            authentication: vec![Arc::new(Identify)],
            ..stack::Parts::filled(inventory, store, Duration::from_secs(15))
        },
        Registry::default(),
    );
    let (server, _) = stack::serve(
        &Listen::local(dir),
        None,
        stack.router,
        serve::Config::default(),
        &Reloads::default(),
    )
    .await?;
    let addr = server.local_addr()?;
    tokio::spawn(server.run(shutdown));
    Ok((addr, stack.registry))
}

/// What one client saw.
#[derive(Default)]
struct Tally {
    ok_latencies: Vec<Duration>,
    all_latencies: Vec<Duration>,
    ok: u64,
    rejected: u64,
    other: u64,
    bytes: u64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.ok_latencies.extend(other.ok_latencies);
        self.all_latencies.extend(other.all_latencies);
        self.ok += other.ok;
        self.rejected += other.rejected;
        self.other += other.other;
        self.bytes += other.bytes;
    }
}

/// One client: a connection, then GETs of `path` as `user` until `deadline`.
async fn client(
    addr: SocketAddr,
    path: String,
    user: &'static str,
    deadline: Instant,
    budget: Arc<AtomicU64>,
) -> anyhow::Result<Tally> {
    let config = tls::client::config(&tls::client::Verify::Insecure, None)?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = rustls_pki_types::ServerName::try_from("localhost")?;
    let stream = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut tally = Tally::default();
    while Instant::now() < deadline && budget.fetch_sub(1, Ordering::Relaxed) > 0 {
        let request = http::Request::get(path.as_str())
            .header(http::header::HOST, "localhost")
            .header("x-load-user", user)
            .body(Empty::<Bytes>::new())?;
        let started = Instant::now();
        let Ok(response) = sender.send_request(request).await else {
            break;
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let body = response.into_body().collect().await?.to_bytes();
        let took = started.elapsed();
        tally.all_latencies.push(took);
        tally.bytes += body.len() as u64;
        match status.as_u16() {
            200 => {
                tally.ok += 1;
                tally.ok_latencies.push(took);
            }
            429 => {
                tally.rejected += 1;
                // client-go sleeps Retry-After before retrying.
                let pause = Duration::from_secs(retry_after.unwrap_or(1));
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(pause.min(left)).await;
            }
            _ => tally.other += 1,
        }
        sender.ready().await?;
    }
    Ok(tally)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn report(mode: &str, class: &str, mut t: Tally, seconds: f64) {
    t.ok_latencies.sort();
    t.all_latencies.sort();
    let total = t.ok + t.rejected + t.other;
    println!(
        "mode={mode:<5} class={class:<5} requests={total:>6} ok={:>6} 429={:>5} other={} \
         429_rate={:>5.1}% ok_per_s={:>7.1} ok_p50_ms={:>7.1} ok_p99_ms={:>7.1} \
         all_p50_ms={:>7.1} all_p99_ms={:>7.1} mib_per_s={:.1}",
        t.ok,
        t.rejected,
        t.other,
        if total == 0 {
            0.0
        } else {
            t.rejected as f64 * 100.0 / total as f64
        },
        t.ok as f64 / seconds,
        percentile(&t.ok_latencies, 0.5),
        percentile(&t.ok_latencies, 0.99),
        percentile(&t.all_latencies, 0.5),
        percentile(&t.all_latencies, 0.99),
        t.bytes as f64 / seconds / (1 << 20) as f64,
    );
}

async fn run_mode(
    mode: &str,
    shedding: Option<shed::Config>,
    seconds: u64,
    flood: usize,
    nodes: usize,
    flood_query: String,
) -> anyhow::Result<()> {
    let (inventory, store) = synthetic(nodes);
    let dir = tempfile::tempdir()?;
    let shutdown = CancellationToken::new();
    let (addr, registry) = serve(inventory, store, shedding, dir.path(), shutdown.clone()).await?;
    let duration = Duration::from_secs(seconds);
    let deadline = Instant::now() + duration;
    let budget = Arc::new(AtomicU64::new(MAX_REQUESTS));
    let flood_users: [&'static str; 4] = ["dashboard", "jane", "joe", "ci"];
    let mut tasks: JoinSet<(&'static str, anyhow::Result<Tally>)> = JoinSet::new();
    for i in 0..flood {
        let budget = budget.clone();
        let flood_query = flood_query.clone();
        let user = flood_users[i % flood_users.len()];
        tasks.spawn(async move {
            let path = format!("/apis/metrics.k8s.io/v1/pods{flood_query}");
            ("flood", client(addr, path, user, deadline, budget).await)
        });
    }
    for i in 0..HPA_CLIENTS {
        let budget = budget.clone();
        tasks.spawn(async move {
            let ns = i * 3 % NAMESPACES;
            let path = format!(
                "/apis/metrics.k8s.io/v1/namespaces/ns-{ns}/pods?labelSelector=app%3Ddeploy-{ns}"
            );
            ("hpa", client(addr, path, HPA_USER, deadline, budget).await)
        });
    }
    let mut by_class: BTreeMap<&str, Tally> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (class, tally) = joined.context("client task")?;
        by_class.entry(class).or_default().merge(tally?);
    }
    let seconds = duration.as_secs_f64();
    for (class, tally) in by_class {
        report(mode, class, tally, seconds);
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_"))
    {
        println!("  {line}");
    }
    shutdown.cancel();
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tls::provider::install_default();
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(10), |a| a.parse())?;
    let flood: usize = args.next().map_or(Ok(32), |a| a.parse())?;
    let nodes: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let flood_query = args.next().map_or_else(String::new, |q| format!("?{q}"));
    anyhow::ensure!((1..=120).contains(&seconds), "SECONDS must be in 1..=120");
    anyhow::ensure!((1..=512).contains(&flood), "FLOOD must be in 1..=512");
    println!(
        "nodes={nodes} pods={} flood_clients={flood} hpa_clients={HPA_CLIENTS} seconds={seconds}",
        nodes * PODS_PER_NODE
    );
    run_mode("none", None, seconds, flood, nodes, flood_query.clone()).await?;
    let config = shed::Config {
        max_in_flight: 8,
        autoscaler_percent: 25,
        queue_length_per_user: 10,
        queue_wait: Duration::from_secs(1),
        cold_store_window: Duration::ZERO,
        ..shed::Config::default()
    };
    run_mode("shed", Some(config), seconds, flood, nodes, flood_query).await?;
    Ok(())
}
