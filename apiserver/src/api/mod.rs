//! The metrics.k8s.io API. Owned by the API work; this is the agreed public surface.

use std::sync::Arc;

use http::request::Parts;
use prometheus_client::registry::Registry;
use scraper::inventory::Inventory;
use scraper::selector::LabelSelector;
use scraper::store::Store;

use crate::Body;

/// Everything the API reads.
#[derive(Debug)]
pub struct Api {
    /// Which nodes and pods exist.
    pub inventory: Arc<Inventory>,
    /// Their usage.
    pub store: Arc<Store>,
    /// `--node-selector`: applied to node lists, not to node GET (as metrics-server).
    pub node_selector: LabelSelector,
}

impl Api {
    /// Creates the API and registers its metric family
    /// (`metrics_server_api_metric_freshness_seconds`) on `registry`.
    pub fn new(
        inventory: Arc<Inventory>,
        store: Arc<Store>,
        node_selector: LabelSelector,
        registry: &mut Registry,
    ) -> Self {
        let _ = registry;
        Api {
            inventory,
            store,
            node_selector,
        }
    }

    /// Answers a request for a path this module owns (`/apis`, `/apis/metrics.k8s.io/**`,
    /// `/openapi/**`, `/version`), or `None` when the path is not the API's.
    /// `now_ns` is the response time (creationTimestamp, staleness).
    pub fn handle(&self, parts: &Parts, now_ns: i64) -> Option<http::Response<Body>> {
        let _ = (parts, now_ns);
        None
    }
}
