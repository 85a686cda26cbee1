//! Everything that gets data out: the `metrics.k8s.io` aggregated API (v1 and v1beta1) over
//! HTTPS, health endpoints and self-metrics, and the `run` function behind the binary.
//!
//! # Layout
//! - [`config`]: the typed [`Settings`](config::Settings) [`run()`] takes, one plain value per
//!   part.
//! - [`cli`]: the binary's flags, with metrics-server's names, defaults and validation rules,
//!   and their translation into `Settings`; nothing else here depends on it.
//! - [`serve`]: hyper + tokio-rustls, HTTP/1.1 and h2, certificate reload, the router.
//! - [`audit`]: the audit log (`--audit-policy-file`, `--audit-log-*`), as k8s.io/apiserver
//!   writes it.
//! - [`auth`]: delegated authentication (front-proxy, client CA, TokenReview) and authorization
//!   (SubjectAccessReview), with the ConfigMap watch.
//! - [`credentials`]: credentials read from files (serving and kubelet certificates, CAs, the
//!   kubelet token), reloaded when the files change.
//! - [`api`]: discovery, OpenAPI, NodeMetrics/PodMetrics, selectors, Table.
//! - [`health`]: `/livez`, `/readyz`, `/healthz` with metrics-server's check names.
//! - [`selfmetrics`]: `/metrics` in Prometheus text.
//! - [`shed`]: load shedding (exempt paths and users, per-class seats, per-user fair queues,
//!   cold-store 429s), between authentication and authorization.
//! - [`status`]: the Kubernetes `Status` body of every error response.
//! - [`body`]: the one response body type, buffered or streamed.
//! - [`kubeconfig`]: client configurations for the Kubernetes API (a kubeconfig file or
//!   in-cluster), and which one each delegated review uses.
//! - [`stack`]: the router with its filter chain, and the HTTPS server over it, assembled
//!   one way for the binary, the tests and the load benchmark.
//! - [`run`](mod@run): wiring every part together; [`run()`] is what the binary calls.

#![warn(missing_docs)]

pub mod api;
pub mod audit;
pub mod auth;
pub mod body;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod health;
pub mod kubeconfig;
pub mod run;
pub mod selfmetrics;
pub mod serve;
pub mod shed;
pub mod stack;
pub mod status;

pub use run::run;

// Lets the shared test decoder (`tests/it/k8s_proto.rs`) name this crate the same way from
// the unit tests and the integration tests.
#[cfg(test)]
extern crate self as apiserver;
