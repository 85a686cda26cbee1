//! Everything that gets data in: which nodes and pods exist, what each kubelet says about
//! them, and the newest usage of every node, pod and container.
//!
//! # Layout
//! - [`point`]: names, raw kubelet samples and computed usage: the vocabulary of every stage.
//! - [`inventory`]: which nodes and Running pods exist (kube-rs watchers, slim records).
//! - [`selector`]: Kubernetes label and field selectors (parse and match).
//! - [`kubelet`]: the HTTPS client and the `/metrics/resource` and `/stats/summary` parsers.
//! - [`store`]: lock-sharded newest points and the usage computed from them at ingest.
//! - [`scrape`]: the loop: schedule, bounded concurrency, timeouts, per-node results.
//! - [`metrics`]: the scraper's self-metrics (`metrics_server_kubelet_*`, tick, storage points).
//! - [`go`]: Go's `strconv.Quote` and `Duration.String()`, for text that must match Go's.

#![warn(missing_docs)]

pub mod clock;
pub mod go;
pub mod inventory;
pub mod kubelet;
pub mod metrics;
pub mod point;
pub mod scrape;
pub mod selector;
pub mod store;
