//! The lock-sharded store of the newest points and the usage computed from them.
//! Owned by the store work; this is the agreed public surface.

use std::sync::Arc;
use std::time::Duration;

use crate::point::{NodeName, NodeScrape, PodUsage, Usage};

/// Store settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// `--metric-resolution`: the scrape period; bounds the fresh-container shortcut.
    pub resolution: Duration,
    /// How long the last good data of a node (and its pods) survives failed scrapes.
    /// Default: 2 x resolution.
    pub staleness: Duration,
}

impl Config {
    /// Defaults for a resolution: staleness = 2 x resolution.
    pub fn new(resolution: Duration) -> Self {
        Config {
            resolution,
            staleness: resolution * 2,
        }
    }
}

/// What one ingest did, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    /// The node has servable usage after this ingest.
    pub node_usage: bool,
    /// Pods in the scrape.
    pub pods: usize,
    /// Pods with servable usage after this ingest.
    pub pods_with_usage: usize,
    /// Container samples ignored (all-zero stubs, missing CPU, invalid).
    pub containers_ignored: usize,
}

/// Whether the store holds usable data, the signal behind `/readyz` `metric-storage-ready`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// At least one node has servable usage.
    pub nodes: bool,
    /// At least one pod has servable usage.
    pub pods: bool,
}

/// Points that have a previous point, for `metrics_server_storage_points{type}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Points {
    /// Nodes with servable usage.
    pub nodes: u64,
    /// Containers with servable usage.
    pub containers: u64,
}

/// The store.
#[derive(Debug)]
pub struct Store {
    config: Config,
}

impl Store {
    /// An empty store.
    pub fn new(config: Config) -> Self {
        Store { config }
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Stores one node's scrape. `now_ns` is when the scrape finished; it marks the data as
    /// fresh for the staleness bound. Pods this node reported before but not now are dropped.
    pub fn ingest(&self, node: &NodeName, scrape: &NodeScrape<'_>, now_ns: i64) -> Ingested {
        let _ = (node, scrape, now_ns);
        Ingested::default()
    }

    /// Records a failed scrape: the node's last good data is kept until it is older than the
    /// staleness bound.
    pub fn scrape_failed(&self, node: &NodeName, now_ns: i64) {
        let _ = (node, now_ns);
    }

    /// Forgets a node and every pod it reported (the node was deleted or deselected).
    pub fn remove_node(&self, node: &str) {
        let _ = node;
    }

    /// Drops every node (and its pods) whose last good scrape is older than the staleness
    /// bound. Reads already ignore such data; this frees the memory.
    pub fn evict_stale(&self, now_ns: i64) {
        let _ = now_ns;
    }

    /// The node's usage, if it has servable, non-stale data.
    pub fn node(&self, name: &str, now_ns: i64) -> Option<Usage> {
        let _ = (name, now_ns);
        None
    }

    /// The pod's usage, if every one of its containers has servable, non-stale data.
    pub fn pod(&self, namespace: &str, name: &str, now_ns: i64) -> Option<Arc<PodUsage>> {
        let _ = (namespace, name, now_ns);
        None
    }

    /// Whether nodes and pods have servable data.
    pub fn readiness(&self, now_ns: i64) -> Readiness {
        let _ = now_ns;
        Readiness::default()
    }

    /// Counts for `metrics_server_storage_points`.
    pub fn points(&self) -> Points {
        Points::default()
    }
}
