//! Shared inputs for the micro benchmarks (`benches/benches/*.rs`) and the scale and load
//! harnesses: the real kubelet fixtures and synthetic node payloads.
//!
//! # Layout
//! - [`fixture`]: reads a file of the repository's `testdata/kubelet/`.
//! - [`Payload`]: a named kubelet body with its source, ready to parse.
//! - [`scale`]: the scale harness (the server binary against a simulated cluster).
//! - [`idle`]: held idle TLS connections against the server beside an HPA-shaped client.
//! - [`soak`]: the server's memory across many periods of a churning cluster.
//! - [`synthetic`]: a synthetic cluster of parsed scrapes for the store benches.
//! - [`ttd`]: the time-to-data harness (seconds from a server start to data and readiness).

// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

pub mod idle;
pub mod scale;
pub mod soak;
pub mod synthetic;
pub mod ttd;

use std::path::PathBuf;

use conformance::payload::{generated_node, render_resource, render_summary};
use scraper::kubelet::Source;

/// The 70-pod `/metrics/resource` capture from metrics-server's `client_test.go`.
pub const RESOURCE_70_PODS: &str = "metrics-resource-metrics-server-kind-v1.21-70pods.txt";
/// The kubelet-1.36-shape body of the scale comparison (30 pods x 2 containers, with the
/// `pod_*` and `*_swap_usage_bytes` families).
pub const RESOURCE_V1_36_SHAPE: &str = "metrics-resource-kubelet-v1.36-shape-30pods-generated.txt";
/// The largest `/stats/summary` capture (v1.35, 17 pods, with psi and io objects).
pub const SUMMARY_V1_35: &str = "stats-summary-nri-kubernetes-minikube-v1.35.json";
/// A multi-container `/stats/summary` capture (v1.28, 18 pods, 23 containers).
pub const SUMMARY_V1_28: &str = "stats-summary-nri-kubernetes-minikube-v1.28.json";

/// Path of a file in the repository's `testdata/kubelet/`.
pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/kubelet")
        .join(name)
}

/// Reads a file of the repository's `testdata/kubelet/`.
pub fn fixture(name: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(fixture_path(name))
}

/// A kubelet response body and the endpoint it came from.
#[derive(Clone, Debug)]
pub struct Payload {
    /// Short name for reports, e.g. `resource/70-pods-fixture`.
    pub name: String,
    /// Which parser reads it.
    pub source: Source,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl Payload {
    /// A synthetic node (see [`generated_node`]) rendered for `source`.
    pub fn generated(source: Source, pods: usize, containers_per_pod: usize) -> Payload {
        let node = generated_node(pods, containers_per_pod);
        let (kind, body) = match source {
            Source::Resource => ("resource", render_resource(&node)),
            Source::Summary => ("summary", render_summary(&node)),
        };
        Payload {
            name: format!("{kind}/generated-{pods}x{containers_per_pod}"),
            source,
            body: body.into_bytes(),
        }
    }

    /// A fixture file of `testdata/kubelet/`.
    pub fn fixture(source: Source, label: &str, file: &str) -> std::io::Result<Payload> {
        let kind = match source {
            Source::Resource => "resource",
            Source::Summary => "summary",
        };
        Ok(Payload {
            name: format!("{kind}/{label}"),
            source,
            body: fixture(file)?,
        })
    }

    /// The payloads the parse benchmark measures: the 70-pod resource capture, the
    /// kubelet-1.36-shape body of the scale comparison, the two
    /// largest summary captures, and a generated 110-pod x 2-container node in both formats.
    pub fn parse_set() -> std::io::Result<Vec<Payload>> {
        Ok(vec![
            Payload::fixture(Source::Resource, "70-pods-fixture", RESOURCE_70_PODS)?,
            Payload::fixture(Source::Resource, "v1.36-shape-30x2", RESOURCE_V1_36_SHAPE)?,
            Payload::generated(Source::Resource, 110, 2),
            Payload::fixture(Source::Summary, "v1.28-fixture", SUMMARY_V1_28)?,
            Payload::fixture(Source::Summary, "v1.35-fixture", SUMMARY_V1_35)?,
            Payload::generated(Source::Summary, 110, 2),
        ])
    }

    /// Parses the body once and returns the number of containers (so the work is used).
    pub fn parse_containers(&self) -> usize {
        self.source
            .parse(&self.body, 0)
            .map_or(0, |scrape| scrape.containers.len())
    }
}
