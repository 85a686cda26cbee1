//! The kubelet HTTPS client: hyper 1 over rustls, HTTP/1.1 with kept-alive pooled
//! connections, a deadline over the whole request, a bounded body and errors that say what
//! to do.
//!
//! Its credentials can be replaced while it runs (a rotated service-account token, client
//! certificate or kubelet CA): the token is read at each request; a new TLS identity or CA
//! replaces the connection pool, so every later request makes a new handshake with it.
//!
//! # Layout
//! - [`error`]: [`Error`], one variant per failure a user acts on differently.
//! - [`target`]: which URL a node's kubelet is scraped at.

mod error;
mod target;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH};
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use error::{Error, Peer};
pub use target::{DEFAULT_ADDRESS_TYPES, Resolver, Target, TargetError};

/// Default for [`Config::max_bodies_bytes`]: 256 MiB, four bodies of the largest size.
pub const DEFAULT_MAX_BODIES_BYTES: usize = 256 << 20;

/// The budget of [`Config::max_bodies_bytes`] is counted in units of this many bytes.
const BUDGET_UNIT: usize = 1024;

/// Default for [`Config::max_body_bytes`]: 64 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 << 20;

/// Fixed size of each read from a kubelet connection.
const READ_BUF_BYTES: usize = 16 * 1024;

/// How long an idle kept-alive connection is pooled. Longer than any sane resolution, so
/// each node's connection is reused from one period to the next (Go's `IdleConnTimeout`).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How to reach and authenticate to kubelets.
#[derive(Debug, Clone)]
pub struct Config {
    /// How kubelet serving certificates are verified (`--kubelet-certificate-authority`, the
    /// cluster CA, or `--kubelet-insecure-tls`).
    pub verify: tls::client::Verify,
    /// `--kubelet-client-certificate` / `--kubelet-client-key`.
    pub identity: Option<tls::Identity>,
    /// Bearer token (the service-account token), sent only over HTTPS.
    pub bearer_token: Option<String>,
    /// `--deprecated-kubelet-completely-insecure`: plain HTTP, no credentials.
    pub plain_http: bool,
    /// `--kubelet-request-timeout`.
    pub timeout: Duration,
    /// Largest response body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Most bytes of response bodies held at once, over every request in flight (bodies wait
    /// for room as they stream in); raised to `max_body_bytes` if below it.
    pub max_bodies_bytes: usize,
    /// Keep one idle connection per kubelet between scrapes (`--kubelet-keep-alive`): no TLS
    /// handshake per scrape, at the price of the connection's buffers per node.
    pub keep_alive: bool,
}

impl Default for Config {
    /// Verify against no CA (set `verify`), no credentials, HTTPS, 10 s, 64 MiB.
    fn default() -> Self {
        Config {
            verify: tls::client::Verify::Roots(Vec::new()),
            identity: None,
            bearer_token: None,
            plain_http: false,
            timeout: Duration::from_secs(10),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_bodies_bytes: DEFAULT_MAX_BODIES_BYTES,
            keep_alive: true,
        }
    }
}

/// The client; cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

type Http = HttpClient<HttpsConnector<HttpConnector>, Empty<Bytes>>;

struct Inner {
    /// The pool and the TLS config of its connections; replaced whole when the TLS
    /// credentials change. A request clones it out, so an in-flight request finishes on the
    /// pool it started on, and the old pool (with its idle connections) goes with the last.
    http: RwLock<Http>,
    /// What `http` was built from, to rebuild it when one part changes.
    tls: Mutex<Tls>,
    /// `Bearer <token>`, marked sensitive; never sent over plain HTTP. Read at each request.
    authorization: RwLock<Option<HeaderValue>>,
    plain_http: bool,
    keep_alive: bool,
    timeout: Duration,
    max_body_bytes: usize,
    /// Room for bodies in flight, in [`BUDGET_UNIT`]s.
    budget: Arc<Semaphore>,
}

/// The TLS half of [`Config`].
struct Tls {
    verify: tls::client::Verify,
    identity: Option<tls::Identity>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("plain_http", &self.inner.plain_http)
            .field("bearer_token", &self.inner.authorization.read().is_some())
            .field("timeout", &self.inner.timeout)
            .field("max_body_bytes", &self.inner.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// The hyper client and its connector for these TLS settings.
fn http(tls: &Tls, plain_http: bool, keep_alive: bool) -> Result<Http, Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(Duration::from_secs(30)));
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let connector = if plain_http {
        // No TLS at all: the TLS config is never used, but the builder wants one.
        let mut config =
            tls::client::config(&tls::client::Verify::Insecure, None).map_err(Error::Build)?;
        // hyper-rustls sets ALPN itself (from `enable_http1`) and panics if it is preset.
        config.alpn_protocols.clear();
        builder
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http)
    } else {
        let mut config =
            tls::client::config(&tls.verify, tls.identity.as_ref()).map_err(Error::Build)?;
        config.alpn_protocols.clear();
        builder
            .with_tls_config(config)
            .https_only()
            .enable_http1()
            .wrap_connector(http)
    };
    Ok(HttpClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(usize::from(keep_alive))
        // Each kept-alive connection keeps its read buffer between scrapes: read in
        // fixed 16 KiB steps instead of letting it grow to the body size (a 110-pod
        // payload is ~120 KB), which measured as most of the per-node memory.
        .http1_read_buf_exact_size(READ_BUF_BYTES)
        .build(connector))
}

/// `Bearer <token>` as a sensitive header; `None` for no token, an empty one, or plain HTTP.
fn authorization(token: Option<&str>, plain_http: bool) -> Result<Option<HeaderValue>, Error> {
    match token {
        Some(token) if !token.is_empty() && !plain_http => {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::InvalidToken)?;
            value.set_sensitive(true);
            Ok(Some(value))
        }
        _ => Ok(None),
    }
}

impl Client {
    /// Builds a client. Must be called inside a Tokio runtime only when requests are made.
    pub fn new(config: Config) -> Result<Self, Error> {
        let tls = Tls {
            verify: config.verify,
            identity: config.identity,
        };
        let http = http(&tls, config.plain_http, config.keep_alive)?;
        let authorization = authorization(config.bearer_token.as_deref(), config.plain_http)?;
        Ok(Client {
            inner: Arc::new(Inner {
                http: RwLock::new(http),
                tls: Mutex::new(tls),
                authorization: RwLock::new(authorization),
                plain_http: config.plain_http,
                keep_alive: config.keep_alive,
                timeout: config.timeout,
                max_body_bytes: config.max_body_bytes,
                budget: Arc::new(Semaphore::new(
                    units(config.max_bodies_bytes.max(config.max_body_bytes))
                        .min(Semaphore::MAX_PERMITS),
                )),
            }),
        })
    }

    /// Sends `token` (none when `None` or empty) from the next request on, as client-go
    /// re-reads `BearerTokenFile`. Never sent over plain HTTP. On error the old token stays.
    pub fn set_bearer_token(&self, token: Option<&str>) -> Result<(), Error> {
        let value = authorization(token, self.inner.plain_http)?;
        *self.inner.authorization.write() = value;
        Ok(())
    }

    /// Verifies kubelet serving certificates against `verify` from now on. On error the old
    /// verification stays. See [`Client::set_identity`] for what happens to connections.
    pub fn set_verify(&self, verify: tls::client::Verify) -> Result<(), Error> {
        self.set_tls(|tls| tls.verify = verify)
    }

    /// Presents `identity` (none when `None`) to kubelets from now on. On error (a key that
    /// does not match the certificate, say) the old identity stays.
    ///
    /// Either change replaces the connection pool: idle kept-alive connections are closed
    /// and every later request makes a new handshake with the new settings, so a CA taken
    /// out of the bundle stops being trusted at once, and an old client certificate about
    /// to expire is not kept presented on a connection (client-go closes its connections
    /// on a certificate rotation too). Requests in flight finish on their connection.
    pub fn set_identity(&self, identity: Option<tls::Identity>) -> Result<(), Error> {
        self.set_tls(|tls| tls.identity = identity)
    }

    fn set_tls(&self, change: impl FnOnce(&mut Tls)) -> Result<(), Error> {
        let mut tls = self.inner.tls.lock();
        let mut next = Tls {
            verify: tls.verify.clone(),
            identity: tls.identity.clone(),
        };
        change(&mut next);
        if !self.inner.plain_http {
            let http = http(&next, false, self.inner.keep_alive)?;
            *self.inner.http.write() = http;
        }
        *tls = next;
        Ok(())
    }

    /// Whether kubelets are reached over plain HTTP (`--deprecated-kubelet-completely-insecure`).
    pub fn plain_http(&self) -> bool {
        self.inner.plain_http
    }

    /// The configured request timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// GETs `url` (e.g. `https://10.0.0.1:10250/metrics/resource`), returning the body. The
    /// whole request is bounded by the configured timeout.
    pub async fn get(&self, url: &str) -> Result<Body, Error> {
        let uri = url.parse::<Uri>().map_err(|e| Error::InvalidUrl {
            url: url.into(),
            reason: e.to_string().into(),
        })?;
        let (Some(authority), Some(host)) = (uri.authority(), uri.host()) else {
            return Err(Error::InvalidUrl {
                url: url.into(),
                reason: "no host".into(),
            });
        };
        let peer = Peer {
            node: None,
            authority: authority.as_str().into(),
            host: host.trim_start_matches('[').trim_end_matches(']').into(),
            url: url.into(),
        };
        let deadline = Instant::now() + self.inner.timeout;
        self.request(uri, peer, deadline, self.inner.timeout).await
    }

    /// GETs a node's kubelet; the whole request must finish by `deadline` (which the scrape
    /// loop sets from the scheduled start, so queueing counts against it). Errors name the
    /// node.
    pub async fn fetch(&self, target: &Target, deadline: Instant) -> Result<Body, Error> {
        self.request(
            target.uri.clone(),
            target.peer(),
            deadline,
            self.inner.timeout,
        )
        .await
    }

    async fn request(
        &self,
        uri: Uri,
        peer: Peer,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Body, Error> {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        if !https && !self.inner.plain_http {
            return Err(Error::PlainHttpRefused {
                peer: Box::new(peer),
            });
        }
        let mut request = Request::new(Empty::new());
        *request.method_mut() = Method::GET;
        *request.uri_mut() = uri;
        if https && let Some(value) = self.inner.authorization.read().clone() {
            request.headers_mut().insert(AUTHORIZATION, value);
        }
        match tokio::time::timeout_at(deadline, self.send(request)).await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(kind)) => Err(kind.into_error(peer)),
            Err(_) => Err(Error::Timeout {
                peer: Box::new(peer),
                timeout,
            }),
        }
    }

    async fn send(&self, request: Request<Empty<Bytes>>) -> Result<Body, Failure> {
        let http = self.inner.http.read().clone();
        let response = http.request(request).await.map_err(classify)?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(Failure::Status(status));
        }
        let limit = self.inner.max_body_bytes;
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(Failure::TooLarge(limit));
        }
        read_body(response.into_body(), limit, declared, &self.inner.budget).await
    }
}

/// A kubelet response body, holding its share of [`Config::max_bodies_bytes`] until dropped
/// (after it was parsed and stored).
#[derive(Debug)]
pub struct Body {
    bytes: Bytes,
    _budget: OwnedSemaphorePermit,
}

impl Body {
    /// The bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(BUDGET_UNIT)
}

/// Reads a body into one buffer (sized from Content-Length when there is one, doubling
/// otherwise), taking room from `budget` before each growth: the total of bodies in flight
/// stays bounded, and a body over `limit` fails as soon as it passes it.
async fn read_body(
    mut body: hyper::body::Incoming,
    limit: usize,
    declared: Option<u64>,
    budget: &Arc<Semaphore>,
) -> Result<Body, Failure> {
    let initial = declared.map_or(INITIAL_BODY_BYTES, |len| {
        usize::try_from(len).unwrap_or(limit)
    });
    let mut buf: Vec<u8> = Vec::new();
    let mut held = take(budget, units(initial.min(limit))).await?;
    buf.reserve_exact(held.num_permits() * BUDGET_UNIT);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Body(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let needed = buf.len() + data.len();
        if needed > limit {
            return Err(Failure::TooLarge(limit));
        }
        if needed > buf.capacity() {
            let grown = needed.max(buf.capacity() * 2).min(limit);
            let more = units(grown).saturating_sub(held.num_permits());
            if more > 0 {
                held.merge(take(budget, more).await?);
            }
            buf.reserve_exact(grown - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    Ok(Body {
        bytes: Bytes::from(buf),
        _budget: held,
    })
}

/// `units` of room, waiting while other bodies hold it (the request's deadline bounds the
/// wait).
async fn take(budget: &Arc<Semaphore>, units: usize) -> Result<OwnedSemaphorePermit, Failure> {
    let units = u32::try_from(units).unwrap_or(u32::MAX);
    Arc::clone(budget)
        .acquire_many_owned(units)
        .await
        .map_err(|_| Failure::TooLarge(0))
}

/// The first buffer of a body without a Content-Length (chunked).
const INITIAL_BODY_BYTES: usize = 64 * 1024;

/// A failure before the peer is attached.
enum Failure {
    Refused,
    Connect(std::io::Error),
    UnknownAuthority,
    NameMismatch,
    BadCertificate(String),
    Tls(rustls::Error),
    Request(hyper_util::client::legacy::Error),
    Status(StatusCode),
    TooLarge(usize),
    Body(Box<dyn std::error::Error + Send + Sync>),
}

impl Failure {
    fn into_error(self, peer: Peer) -> Error {
        let peer = Box::new(peer);
        match self {
            Failure::Refused => Error::ConnectionRefused { peer },
            Failure::Connect(source) => Error::Connect { peer, source },
            Failure::UnknownAuthority => Error::UnknownAuthority { peer },
            Failure::NameMismatch => Error::NameMismatch { peer },
            Failure::BadCertificate(reason) => Error::BadCertificate {
                peer,
                reason: reason.into(),
            },
            Failure::Tls(source) => Error::Tls { peer, source },
            Failure::Request(source) => Error::Request { peer, source },
            Failure::Status(status) => Error::Status { peer, status },
            Failure::TooLarge(limit_bytes) => Error::BodyTooLarge { peer, limit_bytes },
            Failure::Body(source) => Error::Body { peer, source },
        }
    }
}

/// Finds the real cause in hyper's error chain: a rustls error (certificate problems) or the
/// TCP connect `io::Error`. `io::Error::source` skips its own payload, so payloads are
/// unwrapped explicitly.
fn classify(error: hyper_util::client::legacy::Error) -> Failure {
    let mut tls: Option<rustls::Error> = None;
    let mut io: Option<(std::io::ErrorKind, String)> = None;
    let mut stack: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    if let Some(source) = std::error::Error::source(&error) {
        stack.push(source);
    }
    while let Some(e) = stack.pop() {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            tls = Some(r.clone());
            break;
        }
        if let Some(ioe) = e.downcast_ref::<std::io::Error>() {
            if io.is_none() || ioe.kind() != std::io::ErrorKind::Other {
                io = Some((ioe.kind(), ioe.to_string()));
            }
            if let Some(inner) = ioe.get_ref() {
                stack.push(inner);
                continue;
            }
        }
        if let Some(next) = e.source() {
            stack.push(next);
        }
    }
    if let Some(tls) = tls {
        return match &tls {
            rustls::Error::InvalidCertificate(cert) => match cert {
                rustls::CertificateError::UnknownIssuer => Failure::UnknownAuthority,
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => Failure::NameMismatch,
                _ => Failure::BadCertificate(tls.to_string()),
            },
            _ => Failure::Tls(tls),
        };
    }
    if error.is_connect()
        && let Some((kind, message)) = io
    {
        return if kind == std::io::ErrorKind::ConnectionRefused {
            Failure::Refused
        } else {
            Failure::Connect(std::io::Error::new(kind, message))
        };
    }
    Failure::Request(error)
}
