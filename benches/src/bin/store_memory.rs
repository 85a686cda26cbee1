//! Memory and ingest time of the store at scale.
//!
//! Fills a `scraper::store::Store` with NODES x PODS x 2 containers (defaults: 5,000 x 30,
//! metrics-server's "Normal 1000" shape at 5x the nodes), scraping every node three times so
//! usage exists and the steady state is visible, and prints the resident-set growth per node
//! (VmRSS from /proc/self/status) and the ingest time per node of each round.
//!
//! Usage: `cargo run --release -p benches --bin store_memory [NODES] [PODS]`

// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use benches::synthetic::{CONTAINERS, Cluster, NAMESPACES, T0};
use scraper::store::{Config, Store};

/// The resident set size of this process, bytes.
fn rss_bytes() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .context("parsing VmRSS")?;
    Ok(kib * 1024)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args
        .next()
        .map_or(Ok(5_000), |a| a.parse())
        .context("NODES")?;
    let pods: usize = args.next().map_or(Ok(30), |a| a.parse()).context("PODS")?;

    let cluster = Cluster::new(nodes, pods);
    let store = Store::new(Config::new(Duration::from_secs(15)));
    // Warm the allocator and the code paths on a throwaway store so the baseline is fair.
    {
        let warm = Store::new(Config::new(Duration::from_secs(15)));
        for round in 0..2 {
            warm.ingest(&cluster.nodes[0], &cluster.scrape(0, round), T0);
        }
    }
    let before = rss_bytes()?;
    println!(
        "nodes={nodes} pods_per_node={pods} containers_per_pod={}",
        CONTAINERS.len()
    );
    println!("rss_before_store_kib={}", before / 1024);
    for round in 0..3 {
        let now = Cluster::time(round);
        let mut ingest = Duration::ZERO;
        let mut with_usage = 0;
        for n in 0..nodes {
            // Build the scrape outside the timed part: the parser's job, not the store's.
            let scrape = cluster.scrape(n, round);
            let started = Instant::now();
            let ingested = store.ingest(&cluster.nodes[n], &scrape, now);
            ingest += started.elapsed();
            with_usage += ingested.pods_with_usage;
        }
        let rss = rss_bytes()?;
        let per_node = rss.saturating_sub(before) as f64 / nodes as f64;
        println!(
            "round={} ingest_us_per_node={:.2} pods_with_usage={} rss_kib={} rss_delta_kib_per_node={:.2}",
            round + 1,
            ingest.as_secs_f64() * 1e6 / nodes as f64,
            with_usage,
            rss / 1024,
            per_node / 1024.0
        );
        if round > 0 && with_usage != nodes * pods {
            bail!("expected every pod to have usage after round {}", round + 1);
        }
    }
    let now = Cluster::time(2);
    let points = store.points();
    println!(
        "points_nodes={} points_containers={}",
        points.nodes, points.containers
    );

    // Read cost over the full store.
    let started = Instant::now();
    let mut found = 0usize;
    for n in 0..nodes {
        for (p, pod) in cluster.pods[n].iter().enumerate() {
            found += usize::from(
                store
                    .pod(&cluster.namespaces[p % NAMESPACES], pod, now)
                    .is_some(),
            );
        }
    }
    let elapsed = started.elapsed();
    println!(
        "pod_lookups={} found={} ns_per_lookup={:.0}",
        nodes * pods,
        found,
        elapsed.as_secs_f64() * 1e9 / (nodes * pods) as f64
    );
    Ok(())
}
