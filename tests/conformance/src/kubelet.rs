//! A simulated kubelet: an HTTPS server on `127.0.0.1:0` with its own serving certificate,
//! serving `/metrics/resource` and `/stats/summary` from a node model or fixed bodies, with
//! fault modes switchable at runtime (hang, slow, 500, garbage, oversized, down, wrong
//! certificate). It records every request it sees so tests can assert what a client sent.
//! What it accepts as a client's credentials (bearer tokens, client certificates from given
//! CAs, checked at each request as the kubelet's authenticators do) and the serving
//! certificate it presents can be changed while it runs, for credential rotation tests.
//!
//! [`SimNode`] is a workload model driven by a time parameter: CPU counters grow at a
//! configured rate, memory wanders within bounds, containers restart. Like a kubelet's
//! cAdvisor, it refreshes each container's and the node's stats on its own housekeeping timer
//! (10 s by default), so two requests between refreshes get the same values and timestamps.
//!
//! [`SimFleet`] serves many such nodes from one process (one port per node, one shared
//! certificate), for scale harnesses.

mod fleet;
mod model;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use parking_lot::{Mutex, RwLock};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, UnixTime};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use fleet::{Clock, FleetCounts, SimFleet};
pub(crate) use model::DISCOVERY_MS;
pub use model::{DEFAULT_HOUSEKEEPING, SimContainer, SimNode, SimPod};

use crate::payload::{NodeStats, render_resource, render_summary};

/// How the kubelet misbehaves; switch with [`SimKubelet::set_fault`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Answers normally.
    #[default]
    Healthy,
    /// Accepts the connection and the request, never answers.
    Hang,
    /// Answers normally after this delay.
    Slow(Duration),
    /// Answers with this status code and a short text body.
    Status(u16),
    /// Answers 200 with an HTML page followed by binary noise.
    Garbage,
    /// Answers 200 and streams (chunked, no Content-Length) this many bytes of metric-like
    /// text.
    Oversized {
        /// Bytes streamed in total.
        bytes: usize,
    },
    /// The listener is closed and open connections are dropped: connection refused.
    Down,
    /// Sends the real answer's headers (its Content-Length included), then its body 64 bytes
    /// at a time, one piece every this long.
    Trickle(Duration),
    /// Sends the real answer's headers and half its body, then drops the connection.
    CutMidBody,
    /// Accepts the TCP connection and answers the TLS handshake with plain-text noise.
    HandshakeNoise,
    /// Presents a serving certificate issued by another CA.
    WrongCert,
}

/// Which serving certificate the kubelet starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CertKind {
    /// Issued by the given CA with SANs `127.0.0.1` and `localhost`.
    #[default]
    Valid,
    /// Issued by the given CA but only for `localhost` (no IP SAN), like a hostname-only
    /// kubelet serving certificate.
    NoIpSan,
    /// Issued by another, untrusted CA (like a self-signed kubelet certificate).
    OtherCa,
}

/// What the kubelet serves.
#[derive(Clone)]
pub enum Content {
    /// Rendered from this model at each request (mutate with [`SimKubelet::update_stats`]).
    Stats(NodeStats),
    /// These exact bodies.
    Fixed {
        /// The `/metrics/resource` body.
        resource: Bytes,
        /// The `/stats/summary` body.
        summary: Bytes,
    },
    /// Rendered from a workload model at the time `clock` returns (Unix ms), read at each
    /// request (each sample as of its last housekeeping, see [`SimNode::housekeeping`]). The
    /// caller supplies the clock: the wall clock in the sandbox, a shared test time in tests.
    Live {
        /// The workload.
        node: SimNode,
        /// Unix ms "now".
        clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    },
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Stats(s) => f.debug_tuple("Stats").field(&s.name).finish(),
            Content::Fixed { resource, summary } => f
                .debug_struct("Fixed")
                .field("resource_bytes", &resource.len())
                .field("summary_bytes", &summary.len())
                .finish(),
            Content::Live { node, .. } => f.debug_tuple("Live").field(&node.name).finish(),
        }
    }
}

/// How to start a simulated kubelet.
#[derive(Clone, Debug)]
pub struct Options {
    /// The node's name.
    pub node_name: String,
    /// The serving certificate.
    pub cert: CertKind,
    /// When set, requests without `Authorization: Bearer <token>` get 401 (unless a client
    /// certificate from [`Options::client_cas`] authenticates them).
    pub bearer_token: Option<String>,
    /// When not empty, a client certificate issued by one of these CAs authenticates a
    /// request, and requests with neither it nor the token get 401.
    pub client_cas: Vec<CertificateDer<'static>>,
    /// Serve plain HTTP instead of HTTPS (`--deprecated-kubelet-completely-insecure`).
    pub plain_http: bool,
    /// What is served.
    pub content: Content,
    /// The fault at start.
    pub fault: Fault,
    /// The client may `get` `nodes/metrics` but not `nodes/stats` (metrics-server's own
    /// ClusterRole): `/stats/*` answers 403 as the kubelet's authorizer does.
    pub stats_forbidden: bool,
}

impl Options {
    /// A healthy HTTPS kubelet for `node_name` with a valid certificate and an empty model.
    pub fn new(node_name: &str) -> Self {
        Options {
            node_name: node_name.to_owned(),
            cert: CertKind::Valid,
            bearer_token: None,
            client_cas: Vec::new(),
            plain_http: false,
            content: Content::Stats(NodeStats {
                name: node_name.to_owned(),
                ..NodeStats::default()
            }),
            fault: Fault::Healthy,
            stats_forbidden: false,
        }
    }

    /// Serves these fixed bodies.
    pub fn fixed(mut self, resource: impl Into<Bytes>, summary: impl Into<Bytes>) -> Self {
        self.content = Content::Fixed {
            resource: resource.into(),
            summary: summary.into(),
        };
        self
    }
}

/// One request as the kubelet saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When it arrived (Tokio clock).
    pub at: Instant,
    /// Path and query.
    pub path: String,
    /// Every request header.
    pub headers: HeaderMap,
}

impl Seen {
    /// The `Authorization` header, if any.
    pub fn authorization(&self) -> Option<&str> {
        self.headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
    }
}

/// Why a simulated kubelet could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Certificates or TLS configuration.
    #[error("simulated kubelet TLS: {0}")]
    Tls(#[from] tls::Error),
    /// Binding the listener.
    #[error("simulated kubelet listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Requests remembered per kubelet (the oldest are dropped beyond this).
const SEEN_LIMIT: usize = 4096;

/// A running simulated kubelet. Dropping it stops it; [`SimKubelet::shutdown`] waits.
#[derive(Debug)]
pub struct SimKubelet {
    inner: Arc<Inner>,
    certs: Arc<SwitchCert>,
    addr: SocketAddr,
    plain_http: bool,
    fault: watch::Sender<Fault>,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

struct Inner {
    node_name: String,
    /// Accepted bearer tokens; empty: no token accepted.
    tokens: RwLock<Vec<String>>,
    /// Verifies client certificates at each request; `None`: none accepted.
    client_cas: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// Bumped to close every open connection gracefully.
    reset: watch::Sender<u64>,
    content: RwLock<Content>,
    fault: RwLock<Fault>,
    requests: AtomicU64,
    connections: AtomicU64,
    /// Bytes of the metrics bodies answered in full, as sent (gzipped when asked).
    body_bytes: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    stats_forbidden: bool,
    /// What is served from the request after the given count on.
    next_content: Mutex<Option<(u64, Content)>>,
    /// Runs when the next request arrives, before it is answered.
    before_next: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("node_name", &self.node_name)
            .field("tokens", &self.tokens.read().len())
            .field("client_cas", &self.client_cas.read().is_some())
            .finish_non_exhaustive()
    }
}

/// A verifier of client certificates issued by `cas`; `None` when there are none.
fn client_verifier(
    cas: &[CertificateDer<'static>],
) -> Result<Option<Arc<dyn ClientCertVerifier>>, Error> {
    if cas.is_empty() {
        return Ok(None);
    }
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(ca.clone()).map_err(tls::Error::from)?;
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), tls::provider::provider())
            .build()
            .map_err(tls::Error::from)?;
    Ok(Some(verifier))
}

#[derive(Debug)]
struct SwitchCert {
    good: RwLock<Arc<CertifiedKey>>,
    wrong: Arc<CertifiedKey>,
    fault: watch::Receiver<Fault>,
}

impl ResolvesServerCert for SwitchCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if *self.fault.borrow() == Fault::WrongCert {
            Some(self.wrong.clone())
        } else {
            Some(self.good.read().clone())
        }
    }
}

impl SimKubelet {
    /// Starts a kubelet on `127.0.0.1:0` whose certificate (unless [`CertKind::OtherCa`])
    /// is issued by `ca`.
    pub async fn start(ca: &tls::issue::Ca, options: Options) -> Result<Self, Error> {
        let other_ca = tls::issue::Ca::new("simulated untrusted CA")?;
        let spec = |sans: &[&str]| tls::issue::LeafSpec {
            common_name: options.node_name.clone(),
            organizations: Vec::new(),
            sans: sans.iter().map(|s| (*s).to_owned()).collect(),
            server: true,
            client: false,
        };
        let good = match options.cert {
            CertKind::Valid => ca.issue(&spec(&["127.0.0.1", "localhost"]))?,
            CertKind::NoIpSan => ca.issue(&spec(&["localhost"]))?,
            CertKind::OtherCa => other_ca.issue(&spec(&["127.0.0.1", "localhost"]))?,
        };
        let wrong = other_ca.issue(&spec(&["127.0.0.1", "localhost"]))?;
        let (fault_tx, fault_rx) = watch::channel(options.fault.clone());
        let plain_http = options.plain_http;
        let certs = Arc::new(SwitchCert {
            good: RwLock::new(Arc::new(tls::server::certified_key(&good.identity)?)),
            wrong: Arc::new(tls::server::certified_key(&wrong.identity)?),
            fault: fault_rx.clone(),
        });
        let acceptor = if plain_http {
            None
        } else {
            // Client certificates are requested, never required: each request is checked
            // against the CAs in force when it arrives.
            let config = tls::server::config(certs.clone(), false)?;
            Some(TlsAcceptor::from(Arc::new(config)))
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            node_name: options.node_name,
            tokens: RwLock::new(options.bearer_token.into_iter().collect()),
            client_cas: RwLock::new(client_verifier(&options.client_cas)?),
            reset: watch::channel(0).0,
            content: RwLock::new(options.content),
            fault: RwLock::new(options.fault),
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            body_bytes: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            stats_forbidden: options.stats_forbidden,
            next_content: Mutex::new(None),
            before_next: Mutex::new(None),
        });
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(supervise(
            inner.clone(),
            listener,
            addr,
            acceptor,
            fault_rx,
            shutdown.clone(),
        ));
        Ok(SimKubelet {
            inner,
            certs,
            addr,
            plain_http,
            fault: fault_tx,
            shutdown,
            task: Some(task),
        })
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.inner.node_name
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of a path on this kubelet (`https://127.0.0.1:PORT/path`, or `http://`).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Switches the fault mode; takes effect for the next connection or request.
    pub fn set_fault(&self, fault: Fault) {
        *self.inner.fault.write() = fault.clone();
        self.fault.send_replace(fault);
    }

    /// The current fault mode.
    pub fn fault(&self) -> Fault {
        self.inner.fault.read().clone()
    }

    /// Accepts exactly these bearer tokens from the next request on (none: a token
    /// authenticates nobody).
    pub fn set_bearer_tokens(&self, tokens: &[&str]) {
        *self.inner.tokens.write() = tokens.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Accepts client certificates issued by exactly these CAs from the next request on,
    /// on new and open connections alike.
    pub fn set_client_cas(&self, cas: &[&tls::issue::Ca]) -> Result<(), Error> {
        let cas: Vec<CertificateDer<'static>> = cas.iter().map(|ca| ca.cert().clone()).collect();
        *self.inner.client_cas.write() = client_verifier(&cas)?;
        Ok(())
    }

    /// Presents a new serving certificate (SANs `127.0.0.1` and `localhost`) issued by `ca`
    /// from the next handshake on; open connections keep theirs (see
    /// [`SimKubelet::close_connections`]).
    pub fn reissue_serving_cert(&self, ca: &tls::issue::Ca) -> Result<(), Error> {
        let issued = ca.issue(&tls::issue::LeafSpec {
            common_name: self.inner.node_name.clone(),
            sans: vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            server: true,
            ..tls::issue::LeafSpec::default()
        })?;
        *self.certs.good.write() = Arc::new(tls::server::certified_key(&issued.identity)?);
        Ok(())
    }

    /// Closes every open connection gracefully (an idle one at once, a busy one after its
    /// response), as a restarted kubelet does; clients reconnect.
    pub fn close_connections(&self) {
        self.inner.reset.send_modify(|n| *n += 1);
    }

    /// Replaces what is served.
    pub fn set_content(&self, content: Content) {
        *self.inner.content.write() = content;
    }

    /// Serves `content` from the request after the `requests`-th on (counted since start):
    /// a kubelet whose stats refresh at that exact moment, between two requests.
    pub fn set_content_after(&self, requests: u64, content: Content) {
        *self.inner.next_content.lock() = Some((requests, content));
    }

    /// Runs `f` once, when the next request arrives and before it is answered (`f` may
    /// replace the content, which that request then gets).
    pub fn before_next_request(&self, f: impl FnOnce() + Send + 'static) {
        *self.inner.before_next.lock() = Some(Box::new(f));
    }

    /// Mutates the served model (switching to [`Content::Stats`] if another content was set).
    pub fn update_stats(&self, f: impl FnOnce(&mut NodeStats)) {
        let mut content = self.inner.content.write();
        if !matches!(*content, Content::Stats(_)) {
            *content = Content::Stats(NodeStats {
                name: self.inner.node_name.clone(),
                ..NodeStats::default()
            });
        }
        if let Content::Stats(stats) = &mut *content {
            f(stats);
        }
    }

    /// Requests received so far (any path, any outcome).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// TCP connections accepted so far (kept-alive clients reuse one).
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::Relaxed)
    }

    /// Bytes of the metrics bodies answered in full so far, as sent: gzipped ones count their
    /// compressed bytes (faults' bodies are not counted).
    pub fn body_bytes(&self) -> u64 {
        self.inner.body_bytes.load(Ordering::Relaxed)
    }

    /// The requests seen so far, oldest first (at most the last 4096).
    pub fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().clone()
    }

    /// A node record pointing at this kubelet: InternalIP 127.0.0.1 and the kubelet port in
    /// the node status (scrape with `use_node_status_port`).
    pub fn node_record(&self) -> scraper::inventory::NodeRecord {
        scraper::inventory::NodeRecord {
            name: scraper::point::NodeName::from(self.inner.node_name.as_str()),
            labels: scraper::inventory::Labels::default(),
            addresses: vec![scraper::inventory::NodeAddress {
                kind: "InternalIP".into(),
                address: "127.0.0.1".into(),
            }],
            kubelet_port: Some(self.addr.port()),
            metrics_path: None,
        }
    }

    /// Stops serving and waits until every connection is closed.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimKubelet {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Owns the listener: serves while the fault is not [`Fault::Down`], closes the listener and
/// every connection while it is, and rebinds the same address when it is lifted.
async fn supervise(
    inner: Arc<Inner>,
    listener: TcpListener,
    addr: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    mut fault: watch::Receiver<Fault>,
    shutdown: CancellationToken,
) {
    let mut listener = Some(listener);
    loop {
        let down = *fault.borrow_and_update() == Fault::Down;
        if down {
            listener = None;
        } else if listener.is_none() {
            match TcpListener::bind(addr).await {
                Ok(l) => listener = Some(l),
                Err(e) => tracing::warn!(%addr, error = %e, "simulated kubelet cannot rebind"),
            }
        }
        let stop = CancellationToken::new();
        let serving = listener
            .take()
            .map(|l| tokio::spawn(accept(inner.clone(), l, acceptor.clone(), stop.clone())));
        // Serve until the fault moves in or out of Down, or shutdown.
        let ended = loop {
            tokio::select! {
                () = shutdown.cancelled() => break true,
                changed = fault.changed() => {
                    if changed.is_err() {
                        break true;
                    }
                    if (*fault.borrow() == Fault::Down) != down {
                        break false;
                    }
                }
            }
        };
        stop.cancel();
        if let Some(serving) = serving
            && let Ok(l) = serving.await
            && *fault.borrow() != Fault::Down
        {
            listener = Some(l);
        }
        if ended {
            return;
        }
    }
}

/// Accepts and serves connections until `stop`; then drops every connection and hands the
/// listener back.
async fn accept(
    inner: Arc<Inner>,
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    stop: CancellationToken,
) -> TcpListener {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                inner.connections.fetch_add(1, Ordering::Relaxed);
                let inner = inner.clone();
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    if *inner.fault.read() == Fault::HandshakeNoise {
                        let mut stream = stream;
                        let _ = tokio::io::AsyncWriteExt::write_all(
                            &mut stream,
                            b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                        return;
                    }
                    match acceptor {
                        Some(acceptor) => {
                            // Handshake failures (a client refusing our certificate) are the
                            // point of some tests; nothing to do about them here.
                            if let Ok(tls) = acceptor.accept(stream).await {
                                let peer = tls
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .map(|chain| Arc::<[CertificateDer<'static>]>::from(chain.to_vec()));
                                serve(inner, TokioIo::new(tls), peer).await;
                            }
                        }
                        None => serve(inner, TokioIo::new(stream), None).await,
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    listener
}

/// Serves one connection until it ends or [`SimKubelet::close_connections`] closes it.
async fn serve<I>(inner: Arc<Inner>, io: I, peer: Option<Arc<[CertificateDer<'static>]>>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut reset = inner.reset.subscribe();
    let service = hyper::service::service_fn(move |req| {
        let inner = inner.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(handle(&inner, peer.as_deref(), req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = reset.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Whether the request carries credentials the kubelet accepts right now: one of the
/// tokens, or a client certificate from one of the CAs. `true` when neither is configured.
fn authenticated(
    inner: &Inner,
    peer: Option<&[CertificateDer<'static>]>,
    headers: &HeaderMap,
) -> bool {
    let tokens = inner.tokens.read();
    let verifier = inner.client_cas.read().clone();
    if tokens.is_empty() && verifier.is_none() {
        return true;
    }
    let given = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|given| tokens.iter().any(|t| t == given)) {
        return true;
    }
    match (verifier, peer.and_then(<[_]>::split_first)) {
        (Some(verifier), Some((leaf, intermediates))) => verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .is_ok(),
        _ => false,
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    response
}

async fn handle(
    inner: &Inner,
    peer: Option<&[CertificateDer<'static>]>,
    req: Request<Incoming>,
) -> Response<Body> {
    let n = inner.requests.fetch_add(1, Ordering::Relaxed);
    let before = inner.before_next.lock().take();
    if let Some(f) = before {
        f();
    }
    {
        let mut next = inner.next_content.lock();
        if next.as_ref().is_some_and(|(after, _)| n >= *after)
            && let Some((_, content)) = next.take()
        {
            *inner.content.write() = content;
        }
    }
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    {
        let mut seen = inner.seen.lock();
        if seen.len() >= SEEN_LIMIT {
            seen.remove(0);
        }
        seen.push(Seen {
            at: Instant::now(),
            path: path.clone(),
            headers: req.headers().clone(),
        });
    }
    let fault = inner.fault.read().clone();
    match fault {
        Fault::Hang => std::future::pending::<()>().await,
        Fault::Slow(delay) => tokio::time::sleep(delay).await,
        Fault::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return full(status, "text/plain", "simulated kubelet failure\n");
        }
        Fault::Garbage => return full(StatusCode::OK, "text/html", garbage(n)),
        Fault::Oversized { bytes } => return oversized(bytes),
        Fault::Healthy
        | Fault::Down
        | Fault::WrongCert
        | Fault::Trickle(_)
        | Fault::CutMidBody
        | Fault::HandshakeNoise => {}
    }
    if !authenticated(inner, peer, req.headers()) {
        return full(StatusCode::UNAUTHORIZED, "text/plain", "Unauthorized\n");
    }
    if inner.stats_forbidden && path.starts_with("/stats/") {
        // The kubelet's authorizer (`server.go` `InstallAuthFilter`), the user as the
        // TokenReview named it.
        let message = "Forbidden (user=system:serviceaccount:kube-system:metrics-server, verb=get, resource=nodes, subresource=stats)";
        return full(StatusCode::FORBIDDEN, "text/plain", message);
    }
    let summary = if path.starts_with("/stats/summary") {
        true
    } else if path.ends_with("/metrics/resource") {
        false
    } else {
        return full(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n");
    };
    let body: Bytes = match &*inner.content.read() {
        Content::Fixed {
            resource,
            summary: s,
        } => {
            if summary {
                s.clone()
            } else {
                resource.clone()
            }
        }
        Content::Stats(stats) => render(stats, summary),
        Content::Live { node, clock } => render(&node.stats_at(clock()), summary),
    };
    match fault {
        Fault::Trickle(every) => partial(content_type(summary), body, Some(every)),
        Fault::CutMidBody => partial(content_type(summary), body, None),
        _ => {
            let (response, len) = metrics_answer(req.headers(), summary, body);
            inner
                .body_bytes
                .fetch_add(u64::try_from(len).unwrap_or(u64::MAX), Ordering::Relaxed);
            response
        }
    }
}

fn content_type(summary: bool) -> &'static str {
    if summary {
        "application/json"
    } else {
        "text/plain; version=0.0.4"
    }
}

/// How much of an answer Go's HTTP server buffers before it gives up on a Content-Length and
/// sends the answer chunked (`bufferBeforeChunkingSize`); the chunks are as large.
const GO_CHUNKING_BYTES: usize = 2048;

/// A metrics body answered as a kubelet answers it: `/metrics/resource` through Prometheus'
/// handler, which gzips (Go's default level) when the request's `Accept-Encoding` allows
/// gzip; `/stats/summary` through go-restful, which the kubelet does not let compress; both
/// from Go's HTTP server, chunked in 2 KiB pieces when longer than 2 KiB. With the length of
/// the body as sent.
fn metrics_answer(request: &HeaderMap, summary: bool, body: Bytes) -> (Response<Body>, usize) {
    let gzip = !summary && accepts_gzip(request);
    let body = if gzip { gzipped(&body) } else { body };
    let len = body.len();
    let mut response = if body.len() <= GO_CHUNKING_BYTES {
        full(StatusCode::OK, content_type(summary), body)
    } else {
        let frames = (0..body.len().div_ceil(GO_CHUNKING_BYTES)).map(move |i| {
            let end = ((i + 1) * GO_CHUNKING_BYTES).min(body.len());
            Ok::<_, Infallible>(Frame::data(body.slice(i * GO_CHUNKING_BYTES..end)))
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(futures::stream::iter(
            frames,
        ))));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type(summary)),
        );
        response
    };
    if gzip {
        response.headers_mut().insert(
            http::header::CONTENT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
    }
    (response, len)
}

/// Whether `Accept-Encoding` offers gzip (or `*`) with a weight above zero.
fn accepts_gzip(request: &HeaderMap) -> bool {
    request
        .get_all(http::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|offer| {
            let mut parts = offer.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let weight = parts
                .find_map(|p| p.strip_prefix("q="))
                .map_or(1.0, |q| q.parse::<f32>().unwrap_or(0.0));
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && weight > 0.0
        })
}

/// `body` gzipped at Go's default level, as `compress/gzip` writes it.
fn gzipped(body: &[u8]) -> Bytes {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(body);
    encoder.finish().unwrap_or_default().into()
}

/// `body`'s headers with its whole length, then the body in 64-byte pieces one per `every`,
/// or (without `every`) half of it at once and the end, which breaks the connection.
fn partial(content_type: &str, body: Bytes, every: Option<Duration>) -> Response<Body> {
    const PIECE: usize = 64;
    let len = body.len();
    let sent = match every {
        Some(_) => len,
        None => len / 2,
    };
    let stream = futures::stream::unfold(0, move |at| {
        let body = body.clone();
        async move {
            if at >= sent {
                if every.is_none() {
                    // Let the head and the half go out before the connection breaks.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                return None;
            }
            if let Some(every) = every {
                tokio::time::sleep(every).await;
            }
            let end = match every {
                Some(_) => (at + PIECE).min(sent),
                None => sent,
            };
            Some((Ok::<_, Infallible>(Frame::data(body.slice(at..end))), end))
        }
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let headers = response.headers_mut();
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        headers.insert(http::header::CONTENT_TYPE, v);
    }
    headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    response
}

fn render(stats: &NodeStats, summary: bool) -> Bytes {
    if summary {
        render_summary(stats).into()
    } else {
        render_resource(stats).into()
    }
}

/// An HTML error page followed by pseudo-random bytes (xorshift, seeded per request).
fn garbage(seed: u64) -> Bytes {
    let mut out =
        b"<html><head><title>502 Bad Gateway</title></head><body>oops</body></html>\n".to_vec();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x.to_le_bytes()[0]);
    }
    out.into()
}

/// Streams `bytes` of plausible metric lines in 64 KiB chunks, without Content-Length.
fn oversized(bytes: usize) -> Response<Body> {
    const CHUNK: usize = 64 << 10;
    let line =
        b"container_memory_working_set_bytes{container=\"c\",namespace=\"n\",pod=\"p\"} 1 1\n";
    let chunk: Bytes = line
        .iter()
        .copied()
        .cycle()
        .take(CHUNK)
        .collect::<Vec<u8>>()
        .into();
    let stream = futures::stream::unfold(bytes, move |left| {
        let chunk = chunk.clone();
        async move {
            if left == 0 {
                return None;
            }
            let n = left.min(CHUNK);
            Some((Ok::<_, Infallible>(Frame::data(chunk.slice(..n))), left - n))
        }
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
