//! The scrape loop. Owned by the client/scrape work; this is the agreed public surface.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::inventory::Inventory;
use crate::kubelet::Source;
use crate::kubelet::client::Client;
use crate::metrics::Metrics;
use crate::selector::LabelSelector;
use crate::store::Store;

/// Scrape settings (metrics-server flag names in the docs).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--metric-resolution`: one request per node per period.
    pub resolution: Duration,
    /// `--kubelet-request-timeout`: bounds each whole request, any scheduling delay included.
    pub request_timeout: Duration,
    /// Scrapes in flight at most.
    pub max_in_flight: usize,
    /// Which kubelet endpoint.
    pub source: Source,
    /// `--kubelet-preferred-address-types`, in priority order.
    pub address_types: Vec<String>,
    /// `--kubelet-port`.
    pub kubelet_port: u16,
    /// `--kubelet-use-node-status-port`.
    pub use_node_status_port: bool,
    /// `--node-selector`: which nodes are scraped.
    pub node_selector: LabelSelector,
}

/// Progress of the loop, read by the health checks.
#[derive(Debug, Default)]
pub struct Progress {
    /// When the last tick (period) started, Unix ns; 0 before the first.
    pub last_tick_start_ns: AtomicI64,
    /// When a scrape last finished (success or failure), Unix ns; 0 before the first.
    pub last_scrape_done_ns: AtomicI64,
}

impl Progress {
    /// When the last tick started, if any.
    pub fn last_tick_start_ns(&self) -> Option<i64> {
        Some(self.last_tick_start_ns.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }
}

/// Runs the loop until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    inventory: Arc<Inventory>,
    store: Arc<Store>,
    client: Client,
    metrics: Arc<Metrics>,
    progress: Arc<Progress>,
    shutdown: CancellationToken,
) {
    let _ = (config, inventory, store, client, metrics, progress);
    shutdown.cancelled().await;
}
