//! A simulated cluster for tests, benchmarks and the `sandbox`: kubelets that serve the real
//! payload shapes and a control plane that behaves like kube-apiserver on the wire.
//!
//! # Layout
//! - [`kubelet`]: simulated kubelets (HTTPS, fault modes) and a time-driven workload model.
//! - [`objects`]: an in-memory kube-apiserver for Nodes, Pods and ConfigMaps (list, get, watch).
//! - [`payload`]: renders `/metrics/resource` and `/stats/summary` bodies from a node model.
//! - [`controlplane`]: a kube-apiserver on the wire (discovery, reviews, core API, health).
//! - [`cluster`]: a whole cluster in one process (control plane, kubelets, workloads, the
//!   server's replicas behind the APIServices, rolling restarts) and the real kubectl.
//! - [`aggregator`]: kube-aggregator: APIServices, Service endpoints with readiness probes,
//!   availability, proxying with front-proxy auth.
//! - [`https`]: an HTTPS client for talking to these servers.

// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

pub mod aggregator;
pub mod cluster;
pub mod controlplane;
pub mod https;
pub mod kubelet;
pub mod objects;
pub mod payload;
