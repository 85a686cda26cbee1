//! Encode benchmark: a cluster-wide PodMetricsList of 150,000 pods x 2 containers through the
//! real handler path (`apiserver::api::Handler::handle`, selectors, sorting, the streamed
//! body drained frame by frame), plus the 5,000-node NodeMetricsList.
//!
//! The data comes from an in-memory `Source` (the same trait the live Inventory + Store pair
//! implements), so the numbers are the API layer's alone; `pods_150k_json_store` runs the same
//! list through the real `scraper::inventory::Inventory` and `scraper::store::Store` (every
//! node ingested twice so every pod has usage), i.e. what the server really does per list.
//!
//! `pods_150k_json_store_gzip<level>` run that list through the server's gzip transform
//! (`apiserver::serve::gzip::encode_at`, what kubectl's `Accept-Encoding: gzip` gets) at
//! zlib-rs levels 1, 2 (the server's `gzip::LEVEL`: zlib's level-1 algorithm) and 6 (the
//! default), in the same run as the identity list, so the CPU ratio can be read directly.
//! `pods_150k_protobuf` is the same list in `application/vnd.kubernetes.protobuf` (what
//! kubectl and the HPA ask for), and `pods_150k_protobuf_prost_owned` builds it the other
//! way, as owned prost message structs (`String`s, `BTreeMap`s) encoded with
//! `Message::encode`, to compare with the borrowed writers the server uses.
//!
//! `cargo bench -p benches --bench encode`

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use apiserver::api::{Handler, Live, Source};
use apiserver::body::Body;
use apiserver::serve::gzip::{self, Accepts};
use criterion::{Criterion, Throughput, criterion_group};
use futures::FutureExt as _;
use http_body::Body as _;
use prometheus_client::registry::Registry;
use prost::Message as _;
use scraper::inventory::{Inventory, Labels, NodeRecord, PodRecord};
use scraper::point::{
    ContainerSample, ContainerUsage, NodeName, NodeScrape, PodKey, PodUsage, Sample, Usage,
};
use scraper::selector::LabelSelector;
use scraper::store::Store;

const NOW_NS: i64 = 1_715_611_608_000_000_000;

/// kubectl's and the HPA's `Accept`.
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf, */*";

#[path = "../../apiserver/tests/it/k8s_proto.rs"]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod k8s_proto;

/// FNV-1a: a cheap hash so the fake's lookups do not dominate the profile.
#[derive(Clone, Copy, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

struct Memory {
    nodes: Vec<Arc<NodeRecord>>,
    node_usage: FastMap<String, Usage>,
    pods: Vec<Arc<PodRecord>>,
    /// Keyed by the address of the pod name's `Arc<str>` (the handler passes the record's own
    /// string back), so the fake's lookup costs next to nothing and the numbers are the API
    /// layer's; the store's own lookup cost belongs to the store benches.
    pod_usage: FastMap<usize, Arc<PodUsage>>,
}

fn labels(pairs: &[(&str, String)]) -> Labels {
    let mut v: Vec<(Arc<str>, Arc<str>)> = pairs
        .iter()
        .map(|(k, v)| (Arc::from(*k), Arc::from(v.as_str())))
        .collect();
    v.sort();
    Labels::from(v)
}

impl Memory {
    fn new(nodes: usize, pods_per_node: usize) -> Self {
        let mut m = Memory {
            nodes: Vec::new(),
            node_usage: FastMap::default(),
            pods: Vec::new(),
            pod_usage: FastMap::default(),
        };
        for n in 0..nodes {
            let name = format!("node-{n:05}");
            m.nodes.push(Arc::new(NodeRecord {
                name: NodeName::from(name.as_str()),
                labels: labels(&[
                    ("kubernetes.io/hostname", name.clone()),
                    ("kubernetes.io/os", "linux".to_owned()),
                    ("node.kubernetes.io/instance-type", "m5.xlarge".to_owned()),
                ]),
                addresses: Vec::new(),
                kubelet_port: None,
                metrics_path: None,
            }));
            m.node_usage.insert(
                name.clone(),
                Usage {
                    timestamp_ns: NOW_NS - 7_000_000_000,
                    window_ns: 15_012_000_000,
                    cpu_nanocores: 167_390_565 + n as u64,
                    memory_bytes: 1_731_416_064,
                    swap_bytes: None,
                },
            );
            for p in 0..pods_per_node {
                let i = n * pods_per_node + p;
                let ns = format!("team-{:03}", i % 500);
                let app = format!("app-{:04}", i / 30);
                let pod = format!("{app}-5d8f9c7b6-{i:06}");
                let key = PodKey::new(&ns, &pod);
                let containers: scraper::point::Containers = vec![
                    ContainerUsage::new(Arc::from("app"), 4_710_169 + i as u64, 12_533_760, None),
                    ContainerUsage::new(
                        Arc::from("istio-proxy"),
                        12_345_000,
                        50_331_648 + (i as u64 % 7),
                        None,
                    ),
                ]
                .into();
                m.pod_usage.insert(
                    key.name.as_ptr() as usize,
                    Arc::new(PodUsage {
                        timestamp_ns: NOW_NS - 7_000_000_000,
                        window_ns: 15_012_000_000,
                        containers_len: apiserver::api::proto::containers_len(&containers),
                        containers,
                    }),
                );
                m.pods.push(Arc::new(PodRecord {
                    usage: scraper::store::UsageLink::new(),
                    key,
                    labels: labels(&[("app", app), ("pod-template-hash", "5d8f9c7b6".to_owned())]),
                    node_name: Some(NodeName::from(name.as_str())),
                }));
            }
        }
        m.pods.sort_by(|a, b| a.key.cmp(&b.key));
        m
    }
}

impl Source for Memory {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.nodes.clone()
    }
    fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        self.nodes.iter().find(|n| n.name.as_str() == name).cloned()
    }
    fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        match namespace {
            None => self.pods.clone(),
            Some(ns) => self
                .pods
                .iter()
                .filter(|p| &*p.key.namespace == ns)
                .cloned()
                .collect(),
        }
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.pods
            .iter()
            .find(|p| &*p.key.namespace == namespace && &*p.key.name == name)
            .cloned()
    }
    fn node_usage(&self, name: &str, _now_ns: i64) -> Option<Usage> {
        self.node_usage.get(name).copied()
    }
    fn pod_usage(&self, _namespace: &str, name: &str, _now_ns: i64) -> Option<Arc<PodUsage>> {
        self.pod_usage.get(&(name.as_ptr() as usize)).cloned()
    }
    /// From the sorted vector, without a copy per step (the default copies every pod).
    fn visit_pods_after(
        &self,
        namespace: Option<&str>,
        after: Option<&PodKey>,
        max: usize,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) -> Option<PodKey> {
        apiserver::api::visit_sorted_pods_after(&self.pods, namespace, after, max, visit)
    }
}

/// The real Inventory and Store with the same nodes, pods and labels as [`Memory::new`], every
/// node ingested twice (15 s apart, ending 7 s before `NOW_NS`) so every pod has usage.
fn live(nodes: usize, pods_per_node: usize) -> Live {
    const SECOND: i64 = 1_000_000_000;
    let inventory = Arc::new(Inventory::new());
    // Measured as the server's store is (`run.rs`).
    let store = Arc::new(Store::new(
        scraper::store::Config::new(std::time::Duration::from_secs(15))
            .measured_by(apiserver::api::proto::containers_len),
    ));
    let interner = inventory.interner();
    let mut node_records = Vec::new();
    let mut pod_records = Vec::new();
    let mut node_pods: Vec<Vec<(String, String)>> = Vec::new();
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        node_records.push(NodeRecord {
            name: NodeName::from(name.as_str()),
            labels: interner.labels([
                ("kubernetes.io/hostname", name.as_str()),
                ("kubernetes.io/os", "linux"),
                ("node.kubernetes.io/instance-type", "m5.xlarge"),
            ]),
            addresses: Vec::new(),
            kubelet_port: None,
            metrics_path: None,
        });
        let mut pods = Vec::new();
        for p in 0..pods_per_node {
            let i = n * pods_per_node + p;
            let ns = format!("team-{:03}", i % 500);
            let app = format!("app-{:04}", i / 30);
            let pod = format!("{app}-5d8f9c7b6-{i:06}");
            pod_records.push(PodRecord {
                usage: scraper::store::UsageLink::new(),
                // The namespace shared through the interner, as the inventory's watch keeps it.
                key: PodKey {
                    namespace: interner.string(&ns),
                    name: Arc::from(pod.as_str()),
                },
                labels: interner
                    .labels([("app", app.as_str()), ("pod-template-hash", "5d8f9c7b6")]),
                node_name: Some(NodeName::from(name.as_str())),
            });
            pods.push((ns, pod));
        }
        node_pods.push(pods);
    }
    inventory.replace_nodes(node_records);
    inventory.replace_pods(pod_records);
    for (round, ts) in [NOW_NS - 22 * SECOND, NOW_NS - 7 * SECOND]
        .into_iter()
        .enumerate()
    {
        let cpu = (round as u64 + 1) * 15 * 250_000_000;
        let sample = |memory: u64| Sample {
            timestamp_ns: ts,
            cpu_usage_ns_total: Some(cpu),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(memory),
            start_time_ns: Some(NOW_NS - 3600 * SECOND),
            swap_bytes: None,
        };
        for (n, pods) in node_pods.iter().enumerate() {
            let containers = pods
                .iter()
                .flat_map(|(ns, pod)| {
                    ["app", "istio-proxy"].map(|c| ContainerSample {
                        namespace: ns.as_str().into(),
                        pod: pod.as_str().into(),
                        container: c.into(),
                        sample: sample(12_533_760),
                    })
                })
                .collect();
            let scrape = NodeScrape {
                node: Some(Sample {
                    cpu_usage_ns_total: Some(cpu * 40),
                    ..sample(1_731_416_064)
                }),
                containers,
            };
            store.ingest(
                &NodeName::from(format!("node-{n:05}").as_str()),
                &scrape,
                ts,
            );
        }
    }
    Live { inventory, store }
}

/// Drains a body frame by frame; returns (bytes, frames, largest frame).
fn drain(mut body: Body) -> (usize, usize, usize) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let (mut total, mut frames, mut largest) = (0, 0, 0);
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    total += data.len();
                    frames += 1;
                    largest = largest.max(data.len());
                }
            }
            Poll::Ready(Some(Err(e))) => match e {},
            Poll::Ready(None) | Poll::Pending => return (total, frames, largest),
        }
    }
}

/// A whole body.
fn collect(response: Option<http::Response<Body>>) -> Vec<u8> {
    let Some(response) = response else {
        return Vec::new();
    };
    let mut body = response.into_body();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut out = Vec::new();
    while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) {
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
        }
    }
    out
}

fn request(path: &str, accept: &str) -> http::request::Parts {
    let (parts, ()) = http::Request::get(path)
        .header("accept", accept)
        .body(())
        .unwrap_or_default()
        .into_parts();
    parts
}

fn run<S: Source>(h: &Handler<S>, parts: &http::request::Parts) -> (usize, usize, usize) {
    match h.handle(parts, NOW_NS) {
        Some(r) => drain(r.into_body()),
        None => (0, 0, 0),
    }
}

/// [`run`], then gzip at `level` as the router does for `Accept-Encoding: gzip`.
fn run_gzip<S: Source>(
    h: &Handler<S>,
    parts: &http::request::Parts,
    level: u32,
) -> (usize, usize, usize) {
    let Some(response) = h.handle(parts, NOW_NS) else {
        return (0, 0, 0);
    };
    // The list body is always ready, so the transform completes in one poll.
    match gzip::encode_at(Accepts::GzipWhenLarge, level, response).now_or_never() {
        Some(r) => drain(r.into_body()),
        None => (0, 0, 0),
    }
}

fn bench(c: &mut Criterion) {
    let mut registry = Registry::default();
    let h = Handler::new(
        Memory::new(5_000, 30),
        LabelSelector::default(),
        &mut registry,
    );
    let cases = [
        (
            "pods_150k_json",
            "/apis/metrics.k8s.io/v1beta1/pods",
            "application/json",
        ),
        (
            "pods_150k_protobuf",
            "/apis/metrics.k8s.io/v1beta1/pods",
            CLIENT_GO,
        ),
        (
            "pods_150k_table",
            "/apis/metrics.k8s.io/v1beta1/pods",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        ),
        (
            "nodes_5k_json",
            "/apis/metrics.k8s.io/v1/nodes",
            "application/json",
        ),
        (
            "nodes_5k_protobuf",
            "/apis/metrics.k8s.io/v1/nodes",
            CLIENT_GO,
        ),
        (
            "pods_30_namespace_selector",
            "/apis/metrics.k8s.io/v1/namespaces/team-007/pods?labelSelector=app%3Dapp-0233",
            "application/json",
        ),
    ];
    let mut group = c.benchmark_group("encode");
    group.sample_size(10);
    for (name, path, accept) in cases {
        let parts = request(path, accept);
        let (bytes, frames, largest) = run(&h, &parts);
        eprintln!("{name}: {bytes} bytes in {frames} frames (largest {largest} bytes)");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| b.iter(|| run(&h, &parts)));
    }
    // The borrowed writers and prost's own encoder must produce the same bytes.
    let served = collect(h.handle(
        &request("/apis/metrics.k8s.io/v1beta1/pods", CLIENT_GO),
        NOW_NS,
    ));
    drop(h);
    let memory = Memory::new(5_000, 30);
    let owned = owned_prost_list(&memory);
    assert!(owned == served, "prost-owned and served protobuf differ");
    let bytes = owned.len();
    drop((owned, served));
    eprintln!("pods_150k_protobuf_prost_owned: {bytes} bytes (identical to the served body)");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("pods_150k_protobuf_prost_owned", |b| {
        b.iter(|| owned_prost_list(&memory).len())
    });
    drop(memory);
    // The same 150k-pod list through the real Inventory + Store.
    let h = Handler::new(
        live(5_000, 30),
        LabelSelector::default(),
        &mut Registry::default(),
    );
    for (name, accept) in [
        ("pods_150k_json_store", "application/json"),
        ("pods_150k_protobuf_store", CLIENT_GO),
    ] {
        let parts = request("/apis/metrics.k8s.io/v1beta1/pods", accept);
        let (bytes, frames, largest) = run(&h, &parts);
        eprintln!("{name}: {bytes} bytes in {frames} frames (largest {largest} bytes)");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| b.iter(|| run(&h, &parts)));
    }
    // The JSON list gzip-encoded; throughput counts the identity bytes, as the CPU does.
    let parts = request("/apis/metrics.k8s.io/v1beta1/pods", "application/json");
    let bytes = run(&h, &parts).0;
    for level in [1, gzip::LEVEL, 6] {
        let (gz, frames, largest) = run_gzip(&h, &parts, level);
        eprintln!(
            "pods_150k_json_store_gzip{level}: {gz} bytes ({:.2}% of {bytes}) in {frames} frames (largest {largest} bytes)",
            gz as f64 * 100.0 / bytes as f64
        );
        group.bench_function(format!("pods_150k_json_store_gzip{level}"), |b| {
            b.iter(|| run_gzip(&h, &parts, level))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

/// `ENCODE_FILE=<file>`: the file's bytes, streamed in 64 KiB frames like a list, through
/// the gzip transform at `level`, `ENCODE_ITERS` times (default 1); prints the gzip size.
fn gzip_file(path: &str, level: u32) {
    let data = match std::fs::read(path) {
        Ok(d) => bytes::Bytes::from(d),
        Err(e) => {
            eprintln!("reading {path}: {e}");
            return;
        }
    };
    let iters = std::env::var("ENCODE_ITERS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    let mut gz = 0;
    for _ in 0..iters {
        let frames: Vec<_> = (0..data.len())
            .step_by(64 * 1024)
            .map(|at| {
                let end = (at + 64 * 1024).min(data.len());
                Ok::<_, std::convert::Infallible>(http_body::Frame::data(data.slice(at..end)))
            })
            .collect();
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        let response = http::Response::new(http_body_util::BodyExt::boxed(body));
        gz = match gzip::encode_at(Accepts::GzipWhenLarge, level, response).now_or_never() {
            Some(r) => drain(r.into_body()).0,
            None => 0,
        };
    }
    eprintln!(
        "{path}: {} bytes, gzip level {level}: {gz} bytes ({:.2}%), {iters} times",
        data.len(),
        gz as f64 * 100.0 / data.len() as f64
    );
}

/// The list `iters` times, gzip-encoded at `level` when given; the bytes sent in all.
/// A benchmark measures real time: the wall clock is what it reports.
#[allow(clippy::disallowed_methods)]
fn repeat<S: Source>(
    h: &Handler<S>,
    parts: &http::request::Parts,
    iters: u32,
    level: Option<u32>,
) -> usize {
    let mut per_list = Vec::new();
    let total = (0..iters)
        .map(|_| {
            let (before, started) = (thread_cpu_ns(), std::time::Instant::now());
            let bytes = match level {
                Some(level) => run_gzip(h, parts, level).0,
                None => run(h, parts).0,
            };
            let wall = started.elapsed().as_secs_f64() * 1e3;
            if let (Some(a), Some(b)) = (before, thread_cpu_ns()) {
                per_list.push(((b - a) as f64 / 1e6, wall));
            }
            bytes
        })
        .sum();
    if !per_list.is_empty() {
        let all = per_list
            .iter()
            .map(|(cpu, wall)| format!("{cpu:.0}/{wall:.1}"))
            .collect::<Vec<_>>()
            .join(" ");
        let mut walls: Vec<f64> = per_list.iter().map(|(_, wall)| *wall).collect();
        walls.sort_by(f64::total_cmp);
        let cpu: f64 = per_list.iter().map(|(cpu, _)| cpu).sum::<f64>() / per_list.len() as f64;
        eprintln!(
            "per list: wall min {:.1} ms, median {:.1} ms; CPU mean {cpu:.1} ms (this thread); cpu/wall each: {all}",
            walls[0],
            walls[walls.len() / 2]
        );
    }
    total
}

/// `ENCODE_FORMAT=hpa` (with `ENCODE_SOURCE=store`): `iters` HPA-shaped requests (one
/// namespace's pods of one label value through the label index, in protobuf, as the HPA
/// asks) one after the other: 300 pods of 150,000 at the default size (120 with
/// `ENCODE_NODES=2000`, a list short enough to be one buffer). For callgrind
/// (`--toggle-collect='encode::run*'`: instructions per request are the total over `iters`);
/// the wall clock it prints is noisy. `ENCODE_HPA_NAMESPACES=<n>` (at most 500) asks of
/// `n` namespaces in turn instead of one, so a request finds its pods' memory cold, as a
/// server answering many HPAs does.
#[allow(clippy::disallowed_methods)]
fn hpa<S: Source>(h: &Handler<S>, iters: u32) {
    let namespaces = hpa_namespaces();
    let requests: Vec<_> = (0..namespaces)
        .map(|n| {
            request(
                &format!(
                    "/apis/metrics.k8s.io/v1beta1/namespaces/team-{:03}/pods?labelSelector=pod-template-hash%3D5d8f9c7b6",
                    (n + 7) % 500
                ),
                CLIENT_GO,
            )
        })
        .collect();
    let started = std::time::Instant::now();
    let mut bytes = 0;
    for (_, parts) in (0..iters).zip(requests.iter().cycle()) {
        bytes = run(h, parts).0;
    }
    let each = started.elapsed().as_secs_f64() * 1e6 / f64::from(iters.max(1));
    eprintln!("hpa: {iters} requests of {bytes} bytes, {each:.1} us each (wall)");
}

/// `ENCODE_HPA_NAMESPACES`: how many namespaces the HPA-shaped requests ask of in turn (1 to
/// 500; 1 unless set).
fn hpa_namespaces() -> u32 {
    std::env::var("ENCODE_HPA_NAMESPACES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(1)
        .clamp(1, 500)
}

/// `ENCODE_FORMAT=hpa-router` (with `ENCODE_SOURCE=store`): the requests of [`hpa`] through
/// the whole in-process router (`stack::build_router` over the same store: load shedding,
/// the cold-store check, routing, the handler, the headers every answer gets, the pretty and
/// gzip decisions), without TLS and hyper. Each request carries what kube-apiserver's
/// aggregator sends for the HPA: an `Audit-Id`, client-go's `Accept`, `User-Agent` and
/// `Accept-Encoding: gzip`. For callgrind, as [`hpa`]: `--toggle-collect='encode::run*'`
/// collects [`run_router`] only.
#[allow(clippy::disallowed_methods)]
fn hpa_router(live: Live, iters: u32) {
    let mut parts = apiserver::stack::Parts::filled(
        live.inventory,
        live.store,
        std::time::Duration::from_secs(15),
    );
    parts.clock = Some(|| NOW_NS);
    let stack = apiserver::stack::build_router(parts, Registry::default());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hpa-router: no runtime: {e}");
            return;
        }
    };
    let namespaces = hpa_namespaces();
    let started = std::time::Instant::now();
    let (mut bytes, mut failed) = (0, 0);
    for (i, n) in (0..iters).zip((0..namespaces).cycle()) {
        let request = http::Request::get(format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/team-{:03}/pods?labelSelector=pod-template-hash%3D5d8f9c7b6",
            (n + 7) % 500
        ))
        .header(http::header::ACCEPT, CLIENT_GO)
        .header(http::header::ACCEPT_ENCODING, "gzip")
        .header(
            http::header::USER_AGENT,
            "kube-controller-manager/v1.37.0 (linux/amd64) kubernetes/4f1c2b3/system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        )
        .header("audit-id", format!("0f5c3a1e-7b2d-4c8e-9a6f-{i:012}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new());
        let Ok(request) = request else {
            failed += 1;
            continue;
        };
        let _inside = runtime.enter();
        match run_router(&stack.router, request) {
            Some((200, size)) => bytes = size,
            _ => failed += 1,
        }
    }
    let each = started.elapsed().as_secs_f64() * 1e6 / f64::from(iters.max(1));
    eprintln!(
        "hpa-router: {iters} requests of {bytes} bytes ({failed} not 200), {each:.1} us each (wall)"
    );
}

/// One request through the router, its body drained: (status, bytes); `None` if the router
/// had to wait (nothing here should: no review, no contention). Polled in place, inside the
/// runtime's context, so that callgrind sees this function and nothing of a scheduler.
#[inline(never)]
fn run_router(
    router: &apiserver::serve::Router,
    request: http::Request<http_body_util::Empty<bytes::Bytes>>,
) -> Option<(u16, usize)> {
    let response = router.handle(request).now_or_never()?;
    let status = response.status().as_u16();
    Some((status, drain(response.into_body()).0))
}

/// `ENCODE_FORMAT=walk` (with `ENCODE_SOURCE=store`): what a streamed list reads of each
/// pod (record, name, usage slot, usage) in the same batches, without writing anything:
/// the list's memory cost alone. A benchmark measures real time: the wall clock is what it
/// reports.
#[allow(clippy::disallowed_methods)]
fn walk(live: &Live, iters: u32) {
    for _ in 0..iters {
        let started = std::time::Instant::now();
        let (mut after, mut pods, mut sum) = (None, 0usize, 0u64);
        loop {
            let next = live
                .inventory
                .visit_pods_after(None, after.as_ref(), 64, |records| {
                    records
                        .iter()
                        .for_each(|r| apiserver::api::encode::warm_name(r));
                    for record in records {
                        record.usage.warm();
                    }
                    let pairs: Vec<_> = records.iter().map(|r| (&r.usage, &r.key)).collect();
                    let mut out = vec![None; pairs.len()];
                    live.store.pods_linked(&pairs, NOW_NS, &mut out);
                    for (record, usage) in records.iter().zip(&out) {
                        pods += 1;
                        sum += record.key.name.len() as u64;
                        if let Some(u) = usage {
                            sum += u.containers.iter().map(|c| c.memory_bytes).sum::<u64>();
                        }
                    }
                });
            match next {
                Some(key) => after = Some(key),
                None => break,
            }
        }
        eprintln!(
            "walk: {pods} pods in {:.1} ms ({sum})",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// This thread's CPU time so far in ns (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The 150,000-pod list as owned prost structs (what a generated-code encoder needs: every
/// string copied, every quantity formatted into a `String`), then `Message::encode`, then
/// the envelope. Same objects as the handler's `pods_150k_protobuf`.
fn owned_prost_list(m: &Memory) -> Vec<u8> {
    use k8s_proto::{
        ContainerMetrics, Duration, ListMeta, ObjectMeta, PodMetrics, PodMetricsList, Quantity,
        Time, TypeMeta, Unknown,
    };
    let quantity = |write: fn(&mut Vec<u8>, u64), v: u64| {
        let mut out = Vec::with_capacity(24);
        write(&mut out, v);
        Quantity {
            string: Some(String::from_utf8(out).unwrap_or_default()),
        }
    };
    let time = |ns: i64| {
        Some(Time {
            seconds: Some(ns.div_euclid(1_000_000_000)),
            nanos: Some(0),
        })
    };
    let empty = || Some(String::new());
    let items = m
        .pods
        .iter()
        .filter_map(|record| {
            let usage = m.pod_usage("", &record.key.name, NOW_NS)?;
            Some(PodMetrics {
                metadata: Some(ObjectMeta {
                    name: Some(record.key.name.to_string()),
                    generate_name: empty(),
                    namespace: Some(record.key.namespace.to_string()),
                    self_link: empty(),
                    uid: empty(),
                    resource_version: empty(),
                    generation: Some(0),
                    creation_timestamp: time(NOW_NS),
                    labels: record
                        .labels
                        .iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    ..ObjectMeta::default()
                }),
                timestamp: time(usage.timestamp_ns),
                window: Some(Duration {
                    duration: Some(usage.window_ns),
                }),
                containers: usage
                    .containers
                    .iter()
                    .map(|c| {
                        let mut u = BTreeMap::new();
                        u.insert(
                            "cpu".to_owned(),
                            quantity(apiserver::api::quantity::write_cpu, c.cpu_nanocores),
                        );
                        u.insert(
                            "memory".to_owned(),
                            quantity(apiserver::api::quantity::write_memory, c.memory_bytes),
                        );
                        ContainerMetrics {
                            name: Some(c.name.to_string()),
                            usage: u,
                        }
                    })
                    .collect(),
            })
        })
        .collect();
    let list = PodMetricsList {
        metadata: Some(ListMeta {
            self_link: empty(),
            resource_version: empty(),
            r#continue: empty(),
            remaining_item_count: None,
        }),
        items,
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("metrics.k8s.io/v1beta1".to_owned()),
            kind: Some("PodMetricsList".to_owned()),
        }),
        raw: Some(list.encode_to_vec()),
        content_encoding: empty(),
        content_type: empty(),
    };
    let mut out = b"k8s\0".to_vec();
    out.reserve(unknown.encoded_len());
    unknown.encode(&mut out).unwrap_or_default();
    out
}

/// `ENCODE_ITERS=N` runs the 150,000-pod list N times without criterion, for `perf stat`
/// (instructions and CPU time are steadier than wall time on a shared machine), and prints
/// each list's wall time and this thread's CPU time (`/proc/thread-self/schedstat`, which
/// some kernels count in scheduler ticks: wall is the finer figure on an idle core); as JSON, or
/// as protobuf with `ENCODE_FORMAT=protobuf` (`ENCODE_FORMAT=prost-owned`: the owned-struct
/// encoder), as YAML with `ENCODE_FORMAT=yaml`; with `ENCODE_SOURCE=store` through the real Inventory + Store instead of the
/// fake, and with `ENCODE_GZIP=<level>` gzip-encoded at that level. `ENCODE_NODES=<n>` sizes
/// the cluster (30 pods per node; 5,000 unless set): a small one stays in the caches, so the
/// per-pod time of the two sizes tells the list's compute from its memory misses.
/// `ENCODE_DUMP=<file>` writes the store list's identity JSON there (to compare the gzip
/// bytes with other compressors) and exits. `ENCODE_FORMAT=hpa`: see [`hpa`];
/// `ENCODE_FORMAT=hpa-router`: see [`hpa_router`].
fn main() {
    if let Ok(path) = std::env::var("ENCODE_DUMP") {
        let h = Handler::new(
            live(5_000, 30),
            LabelSelector::default(),
            &mut Registry::default(),
        );
        let parts = request("/apis/metrics.k8s.io/v1beta1/pods", "application/json");
        let body = collect(h.handle(&parts, NOW_NS));
        if let Err(e) = std::fs::write(&path, body) {
            eprintln!("writing {path}: {e}");
        }
        return;
    }
    let gzip_level = std::env::var("ENCODE_GZIP")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    if let Ok(path) = std::env::var("ENCODE_FILE") {
        gzip_file(&path, gzip_level.unwrap_or(gzip::LEVEL));
        return;
    }
    if let Some(iters) = std::env::var("ENCODE_ITERS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        let mut registry = Registry::default();
        let format = std::env::var("ENCODE_FORMAT").unwrap_or_default();
        let accept = match format.as_str() {
            "protobuf" => CLIENT_GO,
            "yaml" => "application/yaml",
            _ => "application/json",
        };
        if format == "prost-owned" {
            let memory = Memory::new(5_000, 30);
            let total: usize = (0..iters).map(|_| owned_prost_list(&memory).len()).sum();
            eprintln!("{iters} lists, {total} bytes (prost owned structs)");
            return;
        }
        let parts = request("/apis/metrics.k8s.io/v1beta1/pods", accept);
        let store = std::env::var("ENCODE_SOURCE").is_ok_and(|s| s == "store");
        let nodes = std::env::var("ENCODE_NODES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(5_000);
        if store && format == "walk" {
            walk(&live(nodes, 30), iters);
            return;
        }
        if store && format == "hpa-router" {
            hpa_router(live(nodes, 30), iters);
            return;
        }
        if store && format == "hpa" {
            let h = Handler::new(live(nodes, 30), LabelSelector::default(), &mut registry);
            hpa(&h, iters);
            return;
        }
        let total = if store {
            let h = Handler::new(live(nodes, 30), LabelSelector::default(), &mut registry);
            repeat(&h, &parts, iters, gzip_level)
        } else {
            let h = Handler::new(
                Memory::new(nodes, 30),
                LabelSelector::default(),
                &mut registry,
            );
            repeat(&h, &parts, iters, gzip_level)
        };
        eprintln!(
            "{iters} lists, {total} bytes (source: {}, accept: {accept}, gzip level: {gzip_level:?})",
            if store { "store" } else { "memory" }
        );
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
