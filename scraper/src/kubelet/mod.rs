//! Talking to kubelets: the HTTPS client and the two payload parsers.
//!
//! # Layout
//! - [`client`]: HTTP/1.1 GET over unbuffered rustls, kept-alive connections without idle
//!   buffers, bounded bodies, actionable errors.
//! - [`resource`]: `/metrics/resource` (Prometheus text), the default source.
//! - [`summary`]: `/stats/summary?only_cpu_and_memory=true` (JSON), chosen with a flag.

pub mod client;
pub mod resource;
pub mod summary;

use crate::point::NodeScrape;

/// Which kubelet endpoint is scraped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Source {
    /// `GET /metrics/resource` (or the node's `metrics.k8s.io/resource-metrics-path`).
    #[default]
    Resource,
    /// `GET /stats/summary?only_cpu_and_memory=true`.
    Summary,
}

impl Source {
    /// The default request path (and query) for this source.
    pub fn default_path(self) -> &'static str {
        match self {
            Source::Resource => "/metrics/resource",
            Source::Summary => "/stats/summary?only_cpu_and_memory=true",
        }
    }

    /// Parses a response body of this source. `request_time_ns` is used for samples that
    /// carry no timestamp of their own.
    pub fn parse(self, body: &[u8], request_time_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
        match self {
            Source::Resource => resource::parse(body, request_time_ns),
            Source::Summary => summary::parse(body, request_time_ns),
        }
    }
}

/// Why a payload could not be used. Small and `Copy`: it is made on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct ParseError {
    /// What was wrong.
    pub kind: ParseErrorKind,
    /// Where in the body, in bytes from the start.
    pub offset: usize,
}

/// The kinds of [`ParseError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// The body is not valid UTF-8 text.
    #[error("invalid UTF-8")]
    Utf8,
    /// A metric line could not be split into name, labels, value and timestamp.
    #[error("malformed sample line")]
    Syntax,
    /// A label set was not closed or a label value was not a quoted string.
    #[error("malformed label set")]
    Labels,
    /// A container series lacks its `namespace`, `pod` or `container` label.
    #[error("container series without namespace, pod or container label")]
    MissingLabel,
    /// A value was not a number.
    #[error("invalid sample value")]
    Value,
    /// A value was NaN, infinite or negative where that cannot be.
    #[error("sample value out of range (NaN, infinite or negative)")]
    ValueRange,
    /// A timestamp was not an integer or was negative.
    #[error("invalid or negative timestamp")]
    Timestamp,
    /// The JSON document did not match the kubelet summary schema.
    #[error("invalid summary JSON")]
    Json,
}
