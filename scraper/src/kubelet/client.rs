//! The kubelet HTTPS client: a lean HTTP/1.1 `GET` over rustls' unbuffered API, one
//! kept-alive idle connection per kubelet, a deadline over the whole request, a bounded body
//! and errors that say what to do.
//!
//! Its credentials can be replaced while it runs (a rotated service-account token, client
//! certificate or kubelet CA): the token is read at each request; a new TLS identity or CA
//! replaces the connection pool, so every later request makes a new handshake with it.
//!
//! An idle kept-alive connection holds only its socket and its TLS session state: the
//! buffers a request reads and writes through are borrowed from a small shared stock for the
//! time of the request ([`conn::Scratch`]), and a body is read into one buffer, sized from
//! its Content-Length when it has one.
//!
//! # Layout
//! - [`error`]: [`Error`], one variant per failure a user acts on differently.
//! - [`target`]: which URL a node's kubelet is scraped at.
//! - [`conn`]: a connection (TCP + TLS state), the scratch buffers, the idle pool.
//! - [`http1`]: the request, the response head, the body's framing.
//! - [`gzip`]: inflating a body the kubelet gzipped.

mod conn;
mod error;
pub mod gzip;
mod http1;
mod target;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode, Uri};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use conn::{Conn, ConnectFailure, IoFailure, Pool, Read, Scratch, ScratchGuard, Scratches};
use http1::{Chunked, Coding, Framing};

pub use error::{Error, Peer};
pub use target::{DEFAULT_ADDRESS_TYPES, Resolver, Target, TargetError};

/// Default for [`Config::max_bodies_bytes`]: 256 MiB, four bodies of the largest size.
pub const DEFAULT_MAX_BODIES_BYTES: usize = 256 << 20;

/// The budget of [`Config::max_bodies_bytes`] is counted in units of this many bytes.
const BUDGET_UNIT: usize = 1024;

/// Default for [`Config::max_body_bytes`]: 64 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 << 20;

/// How long an idle kept-alive connection is pooled. Longer than any sane resolution, so
/// each node's connection is reused from one period to the next (Go's `IdleConnTimeout`).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Most idle connections pooled at once (one per kubelet).
const POOL_MAX_IDLE: usize = 1 << 16;

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
    /// handshake per scrape, at the price of a socket and its TLS session state per node (no
    /// buffers: those are lent to requests in flight only).
    pub keep_alive: bool,
    /// Ask kubelets to gzip their answers (`Accept-Encoding: gzip`), as metrics-server's Go
    /// client does (`--kubelet-compression`). A gzipped answer is read whatever was asked.
    pub compression: bool,
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
            compression: true,
        }
    }
}

/// The client; cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// The pool and the TLS config of its connections; replaced whole when the TLS
    /// credentials change. A request clones it out, so an in-flight request finishes on the
    /// pool it started on, and the old pool (with its idle connections) goes with the last.
    pool: RwLock<Arc<Pool>>,
    /// What `pool` was built from, to rebuild it when one part changes.
    tls: Mutex<Tls>,
    /// `Bearer <token>`, marked sensitive; never sent over plain HTTP. Read at each request.
    authorization: RwLock<Option<HeaderValue>>,
    /// Buffers lent to requests in flight.
    scratch: Scratches,
    plain_http: bool,
    keep_alive: bool,
    compression: bool,
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

/// The connection pool for these TLS settings. A plain-HTTP client never sends credentials;
/// an `https://` URL given to it anyway is fetched without verification, as before.
fn pool(tls: &Tls, plain_http: bool) -> Result<Arc<Pool>, Error> {
    let config = if plain_http {
        tls::client::config(&tls::client::Verify::Insecure, None)
    } else {
        tls::client::config(&tls.verify, tls.identity.as_ref())
    }
    .map_err(Error::Build)?;
    Ok(Arc::new(Pool::new(
        Some(Arc::new(config)),
        POOL_IDLE_TIMEOUT,
        POOL_MAX_IDLE,
    )))
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
        let pool = pool(&tls, config.plain_http)?;
        let authorization = authorization(config.bearer_token.as_deref(), config.plain_http)?;
        Ok(Client {
            inner: Arc::new(Inner {
                pool: RwLock::new(pool),
                tls: Mutex::new(tls),
                authorization: RwLock::new(authorization),
                scratch: Scratches::default(),
                plain_http: config.plain_http,
                keep_alive: config.keep_alive,
                compression: config.compression,
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
            let pool = pool(&next, false)?;
            *self.inner.pool.write() = pool;
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
        self.request(&uri, || peer, deadline, self.inner.timeout)
            .await
    }

    /// GETs a node's kubelet; the whole request must finish by `deadline` (which the scrape
    /// loop sets from the scheduled start, so queueing counts against it). Errors name the
    /// node.
    pub async fn fetch(&self, target: &Target, deadline: Instant) -> Result<Body, Error> {
        self.request(&target.uri, || target.peer(), deadline, self.inner.timeout)
            .await
    }

    /// `peer` names the kubelet in an error; it is only made for one.
    async fn request(
        &self,
        uri: &Uri,
        peer: impl FnOnce() -> Peer,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Body, Error> {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        if !https && !self.inner.plain_http {
            return Err(Error::PlainHttpRefused {
                peer: Box::new(peer()),
            });
        }
        let Some(target) = Endpoint::new(uri, https) else {
            return Err(Error::InvalidUrl {
                url: peer().url,
                reason: "no host".into(),
            });
        };
        // Boxed: the request's state (a few KiB) is allocated while it runs, not kept in
        // every node's scrape task between scrapes.
        let send = Box::pin(self.send(&target, https));
        match tokio::time::timeout_at(deadline, send).await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(kind)) => Err(kind.into_error(peer())),
            Err(_) => Err(Error::Timeout {
                peer: Box::new(peer()),
                timeout,
            }),
        }
    }

    /// The request on a kept-alive connection if there is one, else on a new one; once
    /// more on a new one if the kept-alive one turns out closed by the kubelet before any
    /// byte of the answer (a `GET` is safe to repeat, as Go's client does).
    async fn send(&self, target: &Endpoint<'_>, https: bool) -> Result<Body, Failure> {
        let pool = Arc::clone(&self.inner.pool.read());
        let mut scratch = self.inner.scratch.take();
        let authorization = if https {
            self.inner.authorization.read().clone()
        } else {
            None
        };
        let tls = if https { pool.tls.as_ref() } else { None };
        let mut pooled = if self.inner.keep_alive {
            pool.checkout(target.authority)
        } else {
            None
        };
        loop {
            let reused = pooled.is_some();
            let mut conn = match pooled.take() {
                Some(conn) => conn,
                None => conn::connect(target.host, target.port, tls, &mut scratch)
                    .await
                    .map_err(Failure::from_connect)?,
            };
            match self
                .exchange(&mut conn, target, authorization.as_ref(), &mut scratch)
                .await
            {
                Ok((body, reusable)) => {
                    if reusable && self.inner.keep_alive && !scratch.leftover() {
                        pool.checkin(target.authority, conn);
                    }
                    return Ok(body);
                }
                Err(Exchange::Stale(_)) if reused => {
                    drop(conn);
                    scratch.reset();
                }
                Err(Exchange::Stale(e)) => return Err(Failure::Request(e)),
                Err(Exchange::Failed(failure)) => return Err(failure),
            }
        }
    }

    /// Writes the request and reads the answer; with whether the connection may be reused.
    async fn exchange(
        &self,
        conn: &mut Conn,
        target: &Endpoint<'_>,
        authorization: Option<&HeaderValue>,
        s: &mut ScratchGuard<'_>,
    ) -> Result<(Body, bool), Exchange> {
        let mut request = std::mem::take(&mut s.request);
        request.clear();
        http1::request(
            &mut request,
            target.path,
            &target.host_header,
            authorization,
            self.inner.compression,
            !self.inner.keep_alive,
        );
        let written = conn.write(&request, s).await;
        s.request = request;
        written.map_err(|e| match e {
            IoFailure::Io(e) => Exchange::Stale(e),
            IoFailure::Tls(e) => Exchange::Failed(Failure::from_tls(e)),
        })?;
        // The kubelet is at work: the buffers (the request's with them) serve another
        // request meanwhile.
        s.lend_while(conn.readable())
            .await
            .map_err(Exchange::Stale)?;
        let mut input = std::mem::take(&mut s.plain);
        input.clear();
        let result = self.response(conn, &mut input, s).await;
        input.clear();
        s.plain = input;
        result
    }

    async fn response(
        &self,
        conn: &mut Conn,
        input: &mut Vec<u8>,
        s: &mut Scratch,
    ) -> Result<(Body, bool), Exchange> {
        // The head, skipping informational (1xx) ones.
        let mut received = false;
        let mut scanned = 0;
        let head = loop {
            let parsed = if http1::head_may_be_complete(input, scanned) {
                http1::parse_head(input)
            } else {
                Ok(None)
            };
            scanned = input.len();
            match parsed {
                Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                    input.drain(..head.len);
                    scanned = 0;
                    continue;
                }
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(e) => {
                    return Err(Exchange::Failed(Failure::Request(io::Error::new(
                        io::ErrorKind::InvalidData,
                        e,
                    ))));
                }
            }
            let nothing_yet = !received;
            match conn.read(input, s).await {
                Ok(Read::Data) => received = true,
                Ok(Read::Eof) if nothing_yet => return Err(Exchange::Stale(incomplete())),
                Ok(Read::Eof) => return Err(Exchange::Failed(Failure::Request(incomplete()))),
                Err(IoFailure::Io(e)) if nothing_yet => return Err(Exchange::Stale(e)),
                Err(IoFailure::Io(e)) => return Err(Exchange::Failed(Failure::Request(e))),
                Err(IoFailure::Tls(e)) => return Err(Exchange::Failed(Failure::from_tls(e))),
            }
        };
        let status = StatusCode::from_u16(head.status).map_err(|_| {
            Exchange::Failed(Failure::Request(io::Error::new(
                io::ErrorKind::InvalidData,
                "invalid HTTP status code",
            )))
        })?;
        if status != StatusCode::OK {
            return Err(Exchange::Failed(Failure::Status(status)));
        }
        let gzip = match head.coding {
            Coding::Identity => false,
            Coding::Gzip => true,
            Coding::Other(name) => return Err(Exchange::Failed(Failure::Encoding(name))),
        };
        let limit = self.inner.max_body_bytes;
        let body_start = head.len;
        let result = match head.framing {
            Framing::Length(len) => {
                if len > limit as u64 {
                    return Err(Exchange::Failed(Failure::TooLarge(limit)));
                }
                let len = usize::try_from(len).unwrap_or(limit);
                self.read_sized(conn, input, body_start, len, s).await
            }
            Framing::Chunked => self.read_streamed(conn, input, body_start, true, s).await,
            Framing::Close => self.read_streamed(conn, input, body_start, false, s).await,
        };
        let (body, clean) = result.map_err(Exchange::Failed)?;
        let body = if gzip {
            self.gunzip(body).await.map_err(Exchange::Failed)?
        } else {
            body
        };
        Ok((body, clean && head.reusable))
    }

    /// Inflates a gzipped body ([`gzip::Inflate`]: a buffer sized from its trailer, doubled up
    /// to the body limit), taking each growth's room from the budget first; the compressed
    /// body's room is given back when it is done.
    async fn gunzip(&self, body: Body) -> Result<Body, Failure> {
        let limit = self.inner.max_body_bytes;
        let input = &body.bytes[..];
        let mut inflate = gzip::Inflate::new(input, limit);
        let mut held = take(&self.inner.budget, units(inflate.capacity())).await?;
        loop {
            match inflate.run(input).map_err(|e| Failure::Body(e.into()))? {
                gzip::Need::Nothing => break,
                gzip::Need::OverLimit => return Err(Failure::InflatedTooLarge(limit)),
                gzip::Need::Room(capacity) => {
                    let more = units(capacity).saturating_sub(held.num_permits());
                    if more > 0 {
                        held.merge(take(&self.inner.budget, more).await?);
                    }
                    inflate.grow(capacity);
                }
            }
        }
        Ok(Body {
            bytes: inflate.into_inner(),
            _budget: held,
            inflated: true,
        })
    }

    /// A Content-Length body: its room is taken at once and it is read into one buffer of
    /// exactly its size (the bytes after the head first).
    async fn read_sized(
        &self,
        conn: &mut Conn,
        input: &[u8],
        start: usize,
        len: usize,
        s: &mut Scratch,
    ) -> Result<(Body, bool), Failure> {
        let held = take(&self.inner.budget, units(len)).await?;
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let early = input.get(start..).unwrap_or_default();
        buf.extend_from_slice(&early[..early.len().min(len)]);
        let mut clean = early.len() <= len;
        while buf.len() < len {
            match conn.read(&mut buf, s).await {
                Ok(Read::Data) => {}
                Ok(Read::Eof) => return Err(Failure::Body(incomplete().into())),
                Err(IoFailure::Io(e)) => return Err(Failure::Body(e.into())),
                Err(IoFailure::Tls(e)) => return Err(Failure::Body(e.into())),
            }
        }
        if buf.len() > len {
            // More than announced: the rest is not ours, nor is the connection reusable.
            buf.truncate(len);
            clean = false;
        }
        Ok((
            Body {
                bytes: buf,
                _budget: held,
                inflated: false,
            },
            clean,
        ))
    }

    /// A chunked body (or one until the connection closes): read into one buffer that
    /// doubles as needed, room taken from the budget before each growth, so the total of
    /// bodies in flight stays bounded and a body over the limit fails as soon as it passes
    /// it.
    async fn read_streamed(
        &self,
        conn: &mut Conn,
        input: &mut Vec<u8>,
        start: usize,
        chunked: bool,
        s: &mut Scratch,
    ) -> Result<(Body, bool), Failure> {
        let limit = self.inner.max_body_bytes;
        let mut held = take(&self.inner.budget, units(INITIAL_BODY_BYTES.min(limit))).await?;
        let mut buf: Vec<u8> = Vec::new();
        buf.reserve_exact(held.num_permits() * BUDGET_UNIT);
        let mut decoder = Chunked::default();
        input.drain(..start.min(input.len()));
        loop {
            let mut rest = &input[..];
            loop {
                let data = if chunked {
                    match decoder.next(&mut rest) {
                        Ok(Some(data)) => data,
                        Ok(None) => break,
                        Err(e) => return Err(Failure::Body(e.into())),
                    }
                } else if rest.is_empty() {
                    break;
                } else {
                    std::mem::take(&mut rest)
                };
                let needed = buf.len() + data.len();
                if needed > limit {
                    return Err(Failure::TooLarge(limit));
                }
                if needed > buf.capacity() {
                    let grown = needed.max(buf.capacity() * 2).min(limit);
                    let more = units(grown).saturating_sub(held.num_permits());
                    if more > 0 {
                        held.merge(take(&self.inner.budget, more).await?);
                    }
                    buf.reserve_exact(grown - buf.len());
                }
                buf.extend_from_slice(data);
            }
            if chunked && decoder.done() {
                let clean = rest.is_empty();
                return Ok((
                    Body {
                        bytes: buf,
                        _budget: held,
                        inflated: false,
                    },
                    clean,
                ));
            }
            input.clear();
            match conn.read(input, s).await {
                Ok(Read::Data) => {}
                Ok(Read::Eof) if !chunked => {
                    return Ok((
                        Body {
                            bytes: buf,
                            _budget: held,
                            inflated: false,
                        },
                        false,
                    ));
                }
                Ok(Read::Eof) => return Err(Failure::Body(incomplete().into())),
                Err(IoFailure::Io(e)) => return Err(Failure::Body(e.into())),
                Err(IoFailure::Tls(e)) => return Err(Failure::Body(e.into())),
            }
        }
    }
}

/// Where a URL points, as the connection and the request need it.
struct Endpoint<'a> {
    /// `host:port` as in the URL: the pool key.
    authority: &'a str,
    /// The host without brackets: what is connected to and verified.
    host: &'a str,
    port: u16,
    /// The `Host` header: the host, and the port unless it is the scheme's default.
    host_header: String,
    path: &'a str,
}

impl<'a> Endpoint<'a> {
    fn new(uri: &'a Uri, https: bool) -> Option<Self> {
        let authority = uri.authority()?;
        let host = authority.host();
        let default_port = if https { 443 } else { 80 };
        let port = authority.port_u16().unwrap_or(default_port);
        let host_header = match authority.port_u16() {
            Some(port) if port != default_port => format!("{host}:{port}"),
            _ => host.to_owned(),
        };
        Some(Endpoint {
            authority: authority.as_str(),
            host: host.trim_start_matches('[').trim_end_matches(']'),
            port,
            host_header,
            path: uri.path_and_query().map_or("/", |p| p.as_str()),
        })
    }
}

/// How an exchange on one connection ended badly.
enum Exchange {
    /// The connection was closed (or failed) before any byte of the answer: on a reused
    /// connection, the kubelet closed it while it was idle.
    Stale(io::Error),
    /// Anything else.
    Failed(Failure),
}

/// hyper's words for a connection that closed before the answer was complete.
fn incomplete() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before message completed",
    )
}

/// A kubelet response body, holding its share of [`Config::max_bodies_bytes`] until dropped
/// (after it was parsed and stored).
#[derive(Debug)]
pub struct Body {
    bytes: Vec<u8>,
    _budget: OwnedSemaphorePermit,
    /// Inflated here ([`gzip::Inflate`]): its buffer is kept for the next gzipped body on the
    /// thread that drops it ([`gzip::keep`]).
    inflated: bool,
}

impl Drop for Body {
    fn drop(&mut self) {
        if self.inflated {
            gzip::keep(std::mem::take(&mut self.bytes));
        }
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
    Connect(io::Error),
    UnknownAuthority,
    NameMismatch,
    BadCertificate(String),
    Tls(rustls::Error),
    Request(io::Error),
    Status(StatusCode),
    TooLarge(usize),
    InflatedTooLarge(usize),
    Encoding(Box<str>),
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
            Failure::InflatedTooLarge(limit_bytes) => Error::InflatedTooLarge { peer, limit_bytes },
            Failure::Encoding(encoding) => Error::Encoding { peer, encoding },
            Failure::Body(source) => Error::Body { peer, source },
        }
    }

    /// A certificate problem gets its own reason; any other TLS failure is `tls`.
    fn from_tls(error: rustls::Error) -> Failure {
        match &error {
            rustls::Error::InvalidCertificate(cert) => match cert {
                rustls::CertificateError::UnknownIssuer => Failure::UnknownAuthority,
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => Failure::NameMismatch,
                _ => Failure::BadCertificate(error.to_string()),
            },
            _ => Failure::Tls(error),
        }
    }

    fn from_connect(error: ConnectFailure) -> Failure {
        match error {
            ConnectFailure::Tls(e) => Failure::from_tls(e),
            ConnectFailure::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Failure::Refused
            }
            ConnectFailure::Io(e) => Failure::Connect(e),
        }
    }
}

#[cfg(test)]
mod tests;
