//! A synthetic cluster of already-parsed scrapes, shaped like metrics-server's storage
//! benchmark ("Normal 1000": 10 namespaces, 20-character namespace and node names,
//! `deploy-<10>-<5>` pod names, 2 containers per pod), for the store benches and harnesses.

use std::borrow::Cow;
use std::time::Duration;

use scraper::point::{ContainerSample, NodeName, NodeScrape, Sample};
use scraper::store::{Config, Store};

/// One second, in ns.
pub const SECOND: i64 = 1_000_000_000;
/// The first round's scrape time, Unix ns.
pub const T0: i64 = 1_700_000_000 * SECOND;
/// Seconds between rounds (the resolution of the store built here).
pub const PERIOD_S: i64 = 15;
/// Namespaces the pods are spread over.
pub const NAMESPACES: usize = 10;
/// Container names of every pod.
pub const CONTAINERS: [&str; 2] = ["app", "sidecar-proxy"];

/// Random-looking but deterministic lowercase names of a fixed length.
pub fn token(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Node, namespace and pod names of the cluster.
#[derive(Debug)]
pub struct Cluster {
    /// Node names.
    pub nodes: Vec<NodeName>,
    /// Namespace names; pod `p` of a node is in namespace `p % NAMESPACES`.
    pub namespaces: Vec<String>,
    /// Pod names per node.
    pub pods: Vec<Vec<String>>,
}

impl Cluster {
    /// `nodes` nodes of `pods` pods each.
    pub fn new(nodes: usize, pods: usize) -> Cluster {
        Cluster {
            nodes: (0..nodes)
                .map(|n| NodeName::from(format!("node-{}", token(n as u64, 20)).as_str()))
                .collect(),
            namespaces: (0..NAMESPACES)
                .map(|i| token(1_000_000 + i as u64, 20))
                .collect(),
            pods: (0..nodes)
                .map(|n| {
                    (0..pods)
                        .map(|p| {
                            let seed = (n * pods + p) as u64;
                            format!("deploy-{}-{seed:05x}", token(seed % 100, 10))
                        })
                        .collect()
                })
                .collect(),
        }
    }

    /// The scrape time of round `round`, Unix ns.
    pub fn time(round: i64) -> i64 {
        T0 + round * PERIOD_S * SECOND
    }

    /// Round `round` of node `n`'s scrape: every container uses 0.25 cores and 64 MiB.
    pub fn scrape(&self, n: usize, round: i64) -> NodeScrape<'_> {
        let ts = Self::time(round);
        let cpu = (round as u64 + 1) * PERIOD_S as u64 * 250_000_000;
        let sample = |memory: u64| Sample {
            timestamp_ns: ts,
            cpu_usage_ns_total: Some(cpu),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(memory),
            start_time_ns: Some(T0 - 3600 * SECOND),
            swap_bytes: None,
        };
        let containers = self.pods[n]
            .iter()
            .enumerate()
            .flat_map(|(p, pod)| {
                CONTAINERS.map(|c| ContainerSample {
                    namespace: Cow::Borrowed(self.namespaces[p % NAMESPACES].as_str()),
                    pod: Cow::Borrowed(pod.as_str()),
                    container: Cow::Borrowed(c),
                    sample: sample(64 << 20),
                })
            })
            .collect();
        NodeScrape {
            node: Some(Sample {
                cpu_usage_ns_total: Some(cpu * 40),
                ..sample(8 << 30)
            }),
            containers,
        }
    }

    /// A store where every node was scraped twice (usage exists).
    pub fn filled_store(&self) -> Store {
        let store = Store::new(Config::new(Duration::from_secs(PERIOD_S as u64)));
        for round in 0..2 {
            for n in 0..self.nodes.len() {
                store.ingest(&self.nodes[n], &self.scrape(n, round), Self::time(round));
            }
        }
        store
    }
}
