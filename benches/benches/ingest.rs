//! Store ingest and read cost.
//!
//! - `ingest/30x2/1000_nodes`, `ingest/110x2/300_nodes`, `ingest/30x2/5000_nodes`: one node's
//!   scrape (30 or 110 pods, 2 containers each) into a store holding that many such nodes
//!   (5,000 nodes: the 150,000 pods of the scale comparison, whose entries do not fit in the
//!   caches), round-robin over the nodes with timestamps
//!   advancing every round, so every ingest is the steady state (usage computed, pod usage
//!   rebuilt). Building the scrape is excluded (the parser's cost).
//! - `read/pod`, `read/node`: one lookup in a store of 1,000 nodes x 30 pods (30,000 pods).
//!
//! Run: `cargo bench -p benches --bench ingest`

use std::hint::black_box;
use std::time::Duration;

use benches::synthetic::{Cluster, NAMESPACES};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");
    for (nodes, pods) in [(1_000, 30), (300, 110), (5_000, 30)] {
        let cluster = Cluster::new(nodes, pods);
        let store = cluster.filled_store();
        // Ingest number `i` (counting on from the two fill rounds) goes to node i % nodes.
        let mut i = 2 * nodes;
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_function(format!("{pods}x2/{nodes}_nodes"), |b| {
            b.iter_batched_ref(
                || {
                    let n = i % nodes;
                    let round = (i / nodes) as i64;
                    i += 1;
                    (n, round, cluster.scrape(n, round))
                },
                |(n, round, scrape)| {
                    let now = Cluster::time(*round);
                    black_box(store.ingest(&cluster.nodes[*n], scrape, now))
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("read");
    let cluster = Cluster::new(1_000, 30);
    let store = cluster.filled_store();
    let now = Cluster::time(1);
    let keys: Vec<(&str, &str)> = cluster
        .pods
        .iter()
        .flat_map(|pods| {
            pods.iter()
                .enumerate()
                .map(|(p, pod)| (cluster.namespaces[p % NAMESPACES].as_str(), pod.as_str()))
        })
        .collect();
    let mut i = 0usize;
    group.bench_function("pod", |b| {
        b.iter(|| {
            let (namespace, name) = keys[i % keys.len()];
            i = i.wrapping_add(7919);
            black_box(store.pod(namespace, name, now))
        });
    });
    let mut i = 0usize;
    group.bench_function("node", |b| {
        b.iter(|| {
            let node = &cluster.nodes[i % cluster.nodes.len()];
            i = i.wrapping_add(7);
            black_box(store.node(node.as_str(), now))
        });
    });
    group.bench_function("readiness", |b| b.iter(|| black_box(store.readiness(now))));
    group.bench_function("points_1000_nodes", |b| {
        b.iter(|| black_box(store.points()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = ingest, read
}
criterion_main!(benches);
