//! A simulated cluster for tests, benchmarks and the `sandbox`: kubelets that serve the real
//! payload shapes and a control plane that behaves like kube-apiserver on the wire.
//!
//! # Layout
//! - [`objects`]: an in-memory kube-apiserver for Nodes, Pods and ConfigMaps (list, get, watch).
//! - [`payload`]: renders `/metrics/resource` and `/stats/summary` bodies from a node model.

pub mod objects;
pub mod payload;
