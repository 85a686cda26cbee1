//! Why a kubelet request failed, in words that say what to do about it.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::point::NodeName;

/// Which kubelet a request went to, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The node, when the request was made for one.
    pub node: Option<NodeName>,
    /// `host:port` as in the URL (IPv6 bracketed).
    pub authority: Box<str>,
    /// The host alone (the address the certificate must name), without brackets.
    pub host: Box<str>,
    /// The whole URL.
    pub url: Box<str>,
}

impl Peer {
    /// Whether the host is an IP address (so a certificate needs an IP SAN for it).
    pub fn host_is_ip(&self) -> bool {
        self.host.parse::<std::net::IpAddr>().is_ok()
    }
}

impl fmt::Display for Peer {
    /// `for node NAME at HOST:PORT`, or `at HOST:PORT` when no node is known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(node) => write!(f, "for node {node} at {}", self.authority),
            None => write!(f, "at {}", self.authority),
        }
    }
}

/// Why a request failed. Every variant names the URL; [`Error::reason`] is a short label for
/// metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TLS client could not be built from the configuration.
    #[error("building the kubelet client: {0}")]
    Build(#[source] tls::Error),
    /// The bearer token cannot be sent as an HTTP header.
    #[error(
        "building the kubelet client: the bearer token contains characters not allowed in an HTTP header"
    )]
    InvalidToken,
    /// The URL did not parse.
    #[error("invalid kubelet URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: Box<str>,
        /// What was wrong.
        reason: Box<str>,
    },
    /// A plain `http://` URL while plain HTTP is not enabled (credentials would leak).
    #[error(
        "GET {}: plain HTTP to kubelets is refused unless --deprecated-kubelet-completely-insecure is set",
        .peer.url
    )]
    PlainHttpRefused {
        /// The kubelet.
        peer: Box<Peer>,
    },
    /// No complete answer within the timeout (connect, TLS, headers and body together).
    #[error(
        "GET {}: kubelet {peer} did not answer within {timeout:?} (--kubelet-request-timeout)",
        .peer.url
    )]
    Timeout {
        /// The kubelet.
        peer: Box<Peer>,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The TCP connection was refused.
    #[error(
        "GET {}: connection refused by kubelet {peer}: is the kubelet running, and is the port right (--kubelet-port, --kubelet-use-node-status-port)?",
        .peer.url
    )]
    ConnectionRefused {
        /// The kubelet.
        peer: Box<Peer>,
    },
    /// Any other failure to open the TCP connection (DNS, unreachable network, reset).
    #[error("GET {}: cannot connect to kubelet {peer}: {source}", .peer.url)]
    Connect {
        /// The kubelet.
        peer: Box<Peer>,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The kubelet's serving certificate is not signed by a CA we trust.
    #[error(
        "GET {}: kubelet serving certificate {peer} is not signed by a trusted CA: pass --kubelet-certificate-authority or use signed kubelet serving certificates (serverTLSBootstrap); --kubelet-insecure-tls disables verification",
        .peer.url
    )]
    UnknownAuthority {
        /// The kubelet.
        peer: Box<Peer>,
    },
    /// The kubelet's serving certificate does not name the address we connected to.
    #[error("GET {}: kubelet serving certificate {peer} {}", .peer.url, name_mismatch_hint(.peer))]
    NameMismatch {
        /// The kubelet.
        peer: Box<Peer>,
    },
    /// The certificate was rejected for another reason (expired, not yet valid, wrong usage).
    #[error(
        "GET {}: kubelet serving certificate {peer} was rejected: {reason}; --kubelet-insecure-tls disables verification",
        .peer.url
    )]
    BadCertificate {
        /// The kubelet.
        peer: Box<Peer>,
        /// What rustls said about it.
        reason: Box<str>,
    },
    /// The TLS handshake failed for a reason other than the certificate.
    #[error("GET {}: TLS handshake with kubelet {peer} failed: {source}", .peer.url)]
    Tls {
        /// The kubelet.
        peer: Box<Peer>,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
    /// The kubelet answered with a status other than 200.
    #[error("GET {}: request failed, status: \"{}\"{}", .peer.url, status_text(*.status), status_hint(*.status, &.peer.url))]
    Status {
        /// The kubelet.
        peer: Box<Peer>,
        /// The status received.
        status: StatusCode,
    },
    /// The body exceeded the configured limit; it was refused while reading.
    #[error("GET {}: kubelet response body is larger than {limit_bytes} bytes, refused", .peer.url)]
    BodyTooLarge {
        /// The kubelet.
        peer: Box<Peer>,
        /// The limit.
        limit_bytes: usize,
    },
    /// The gzipped body inflated past the configured limit; inflating stopped there.
    #[error(
        "GET {}: kubelet response body inflates (gzip) to more than {limit_bytes} bytes, refused (--kubelet-max-body-bytes)",
        .peer.url
    )]
    InflatedTooLarge {
        /// The kubelet.
        peer: Box<Peer>,
        /// The limit.
        limit_bytes: usize,
    },
    /// The body is in a `Content-Encoding` we cannot read (we read gzip).
    #[error(
        "GET {}: kubelet response body is in Content-Encoding {encoding:?}, which this server cannot read (it reads gzip)",
        .peer.url
    )]
    Encoding {
        /// The kubelet.
        peer: Box<Peer>,
        /// The coding, as sent (at most 64 characters).
        encoding: Box<str>,
    },
    /// The body could not be read completely, or its gzip did not inflate.
    #[error("GET {}: reading the kubelet response body: {source}", .peer.url)]
    Body {
        /// The kubelet.
        peer: Box<Peer>,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Any other HTTP failure (the connection closed before a response, a malformed response).
    #[error("GET {}: request to kubelet {peer} failed: {source}", .peer.url)]
    Request {
        /// The kubelet.
        peer: Box<Peer>,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A short, stable label for metrics and logs (`timeout`, `connection_refused`,
    /// `tls_unknown_authority`, `status`, `body_too_large`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Build(_) | Error::InvalidToken => "build",
            Error::InvalidUrl { .. } => "invalid_url",
            Error::PlainHttpRefused { .. } => "plain_http_refused",
            Error::Timeout { .. } => "timeout",
            Error::ConnectionRefused { .. } => "connection_refused",
            Error::Connect { .. } => "connect",
            Error::UnknownAuthority { .. } => "tls_unknown_authority",
            Error::NameMismatch { .. } => "tls_name_mismatch",
            Error::BadCertificate { .. } => "tls_bad_certificate",
            Error::Tls { .. } => "tls",
            Error::Status { .. } => "status",
            Error::BodyTooLarge { .. } | Error::InflatedTooLarge { .. } => "body_too_large",
            Error::Encoding { .. } => "content_encoding",
            Error::Body { .. } => "body",
            Error::Request { .. } => "request",
        }
    }

    /// The kubelet the failed request went to, when it got that far.
    pub fn peer(&self) -> Option<&Peer> {
        match self {
            Error::Build(_) | Error::InvalidToken | Error::InvalidUrl { .. } => None,
            Error::PlainHttpRefused { peer }
            | Error::Timeout { peer, .. }
            | Error::ConnectionRefused { peer }
            | Error::Connect { peer, .. }
            | Error::UnknownAuthority { peer }
            | Error::NameMismatch { peer }
            | Error::BadCertificate { peer, .. }
            | Error::Tls { peer, .. }
            | Error::Status { peer, .. }
            | Error::BodyTooLarge { peer, .. }
            | Error::InflatedTooLarge { peer, .. }
            | Error::Encoding { peer, .. }
            | Error::Body { peer, .. }
            | Error::Request { peer, .. } => Some(peer),
        }
    }
}

fn name_mismatch_hint(peer: &Peer) -> String {
    if peer.host_is_ip() {
        format!(
            "has no IP SAN for {}: use --kubelet-preferred-address-types=Hostname (when node hostnames resolve), or kubelet serving certificates with IP SANs (serverTLSBootstrap); --kubelet-insecure-tls disables verification",
            peer.host
        )
    } else {
        format!(
            "has no SAN for {}: list another address type first in --kubelet-preferred-address-types (e.g. InternalIP), or give the kubelet a serving certificate that names it; --kubelet-insecure-tls disables verification",
            peer.host
        )
    }
}

/// `"500 Internal Server Error"`, as Go's `resp.Status`.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

fn status_hint(status: StatusCode, url: &str) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => {
            "; the kubelet did not accept our credentials (kubelet webhook authentication, or --kubelet-client-certificate)"
        }
        // The kubelet authorizes `/stats/*` as `nodes/stats` and `/metrics/*` as `nodes/metrics`.
        StatusCode::FORBIDDEN if url.contains("/stats/") => {
            "; the kubelet refused access: grant get on nodes/stats (ClusterRole system:metrics-server)"
        }
        StatusCode::FORBIDDEN => {
            "; the kubelet refused access: grant get on nodes/metrics (ClusterRole system:metrics-server)"
        }
        _ => "",
    }
}
