//! Scraper self-metrics. Owned by the client/scrape work; this is the agreed public surface.

use prometheus_client::registry::Registry;
use std::time::Duration;

/// The scraper's metric families.
#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    /// Creates and registers the families on `registry`. `resolution` shapes the tick
    /// histogram buckets.
    pub fn new(registry: &mut Registry, resolution: Duration) -> Self {
        let _ = (registry, resolution);
        Metrics {}
    }

    /// Removes every per-node series of a node that is gone (metrics-server #1876).
    pub fn forget_node(&self, node: &str) {
        let _ = node;
    }
}
