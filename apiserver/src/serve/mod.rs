//! HTTPS serving: a tokio listener, tokio-rustls with ALPN `h2` and `http/1.1`, hyper-util's
//! automatic HTTP/1.1-or-h2 connections, and graceful shutdown.
//!
//! Every peer is bounded ([`Config`]): connections open at once (more wait in the listen
//! backlog: the accept loop takes a permit before it accepts, as mini-redis's
//! `MAX_CONNECTIONS`), the TLS handshake's time, the request head's time and size, h2 streams
//! and resets, idle time, and each request's time, response body included
//! (`--request-timeout`, after which k8s.io/apiserver's timeout filter answers 504 or aborts
//! the response).
//!
//! # Layout
//! - [`access`]: the authentication and authorization filters (delegated to the cluster).
//! - [`activity`]: a connection's requests in flight, idle periods and request deadlines.
//! - [`cert`]: the serving certificate (files reloaded on change, or self-signed in
//!   `--cert-dir`).
//! - [`conn`]: one connection: bounded handshake, hyper's HTTP/1.1 and h2 with pinned limits.
//! - [`gzip`]: gzip responses larger than 128 KiB when `Accept-Encoding` allows it.
//! - [`pretty`]: indented JSON for `?pretty=true`, curl, Wget and browsers.
//! - [`router`]: the filter chain (the hook for authentication, authorization and load
//!   shedding) and the routes.

pub mod access;
mod activity;
pub mod cert;
pub mod conn;
pub mod debugflags;
pub mod gzip;
pub mod httplog;
pub mod pretty;
pub mod router;
#[cfg(test)]
mod testing;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustls::server::ResolvesServerCert;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use router::{Filter, Guard, PeerCertificates, RemoteAddr, Router, Verdict};

/// `--max-connections` (ours) by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Connection settings: what one peer, and all of them together, can hold.
#[derive(Clone, Debug)]
pub struct Config {
    /// Offer h2 in ALPN (off with `--disable-http2-serving`).
    pub http2: bool,
    /// `--http2-max-streams-per-connection`; 0 means k8s.io/apiserver's default
    /// ([`conn::HTTP2_DEFAULT_MAX_STREAMS`]). More streams at once are refused
    /// (`RST_STREAM REFUSED_STREAM`).
    pub http2_max_streams: u32,
    /// The protocol versions, TLS 1.2 suites and key exchange groups offered
    /// (`--tls-min-version`, `--tls-cipher-suites`, `--tls-curve-preferences`).
    pub tls: tls::policy::Policy,
    /// `--max-connections` (ours): connections open at once, in any state; the next one waits
    /// in the listen backlog until one closes.
    pub max_connections: usize,
    /// A TLS handshake that takes longer is dropped, 10 s by default. (Go's server bounds
    /// it by the smallest of its read and write timeouts, for k8s.io/apiserver its
    /// `ReadHeaderTimeout` of 32 s; a real handshake takes milliseconds, and 10 s is Go's
    /// client-side `TLSHandshakeTimeout`.)
    pub handshake_timeout: Duration,
    /// An HTTP/1.1 request head that takes longer ends the connection without an answer, as
    /// Go's server does at k8s.io/apiserver's `ReadHeaderTimeout` (32 s): a timeout is a
    /// "common net read error" it does not reply to. As in Go, it counts the first head
    /// from the connection's start and each next one from its first bytes: a keep-alive
    /// connection waits for those under [`Config::idle_timeout`].
    pub header_read_timeout: Duration,
    /// An h2 connection whose client has sent nothing (not even the connection preface) this
    /// long after the TLS handshake is dropped: 10 s, Go's `http2` server's `prefaceTimeout`.
    /// An HTTP/1.1 connection has [`Config::header_read_timeout`] for its first bytes, as part
    /// of its first head, as in Go.
    pub preface_timeout: Duration,
    /// The request head limit, k8s.io/apiserver's `MaxHeaderBytes` (1 MiB), counted as Go
    /// counts it: an HTTP/1.1 head (request line, header lines) larger than this plus
    /// [`conn::HTTP1_HEAD_SLACK_BYTES`] gets `431` and the connection closed; h2 advertises
    /// it plus [`conn::HTTP2_HEADER_LIST_SLACK_BYTES`] as `SETTINGS_MAX_HEADER_LIST_SIZE`
    /// and answers a larger header list `431`.
    pub max_header_bytes: usize,
    /// A connection with no request in flight for this long is closed (h2 with GOAWAY);
    /// k8s.io/apiserver's `IdleTimeout` (90 s).
    pub idle_timeout: Duration,
    /// `--request-timeout`: a request that has no answer by then gets a 504 `Timeout` Status;
    /// one whose response is still being written then is cut (the HTTP/1.1 connection reset,
    /// the h2 stream reset), releasing what it held.
    pub request_timeout: Duration,
    /// On shutdown, in-flight requests get this long to finish.
    pub drain_timeout: Duration,
    /// `--strict-transport-security-directives`, joined: the `Strict-Transport-Security`
    /// header of every response (k8s.io/apiserver's `WithHSTS`); `None`: no header.
    pub hsts: Option<http::HeaderValue>,
    /// `--shutdown-send-retry-after`: on shutdown, keep listening until the requests in
    /// flight have finished (at most `drain_timeout`), answering every new request 429 with
    /// `Retry-After` and closing its connection, as k8s.io/apiserver's `WithRetryAfter`; a
    /// client retries instead of finding the port closed while the endpoints still list it.
    pub shutdown_send_retry_after: bool,
    /// `--goaway-chance`: the fraction of h2 requests after which the connection is closed
    /// gracefully (GOAWAY; the requests in flight finish), so that a client behind a load
    /// balancer reconnects, likely to another replica (k8s.io/apiserver's
    /// `WithProbabilisticGoaway`). 0: never.
    pub goaway_chance: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            http2: true,
            http2_max_streams: 0,
            tls: tls::policy::Policy::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            preface_timeout: Duration::from_secs(10),
            max_header_bytes: 1 << 20,
            idle_timeout: Duration::from_secs(90),
            request_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            hsts: None,
            shutdown_send_retry_after: false,
            goaway_chance: 0.0,
        }
    }
}

/// Why serving could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The port could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration was refused.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// The serving certificate.
    #[error(transparent)]
    Cert(#[from] cert::Error),
}

/// Connections waiting to be accepted at most (`listen(2)`'s backlog; the kernel caps it at
/// `net.core.somaxconn`). Tokio's `TcpListener::bind` uses the same.
const LISTEN_BACKLOG: i32 = 1024;

/// Binds the listening socket as k8s.io/apiserver binds it (Go's `net.Listen("tcp", addr)`).
/// An unspecified address, IPv4's `0.0.0.0` (the default `--bind-address`) as well as `::`,
/// listens on every address of both families: one dual-stack IPv6 socket, so that the server
/// answers on the pod IP of an IPv6-only or dual-stack cluster, as metrics-server does. On a
/// host without IPv6 it falls back to `0.0.0.0`. A specific address listens on that address
/// only. `SO_REUSEADDR` is set, as Go and the standard library set it on every listener;
/// `SO_REUSEPORT` when `reuse_port` (`--permit-port-sharing`).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> Result<TcpListener, Error> {
    let bound = if addr.ip().is_unspecified() {
        let any = SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), addr.port());
        listen(any, reuse_port).or_else(|error| match error.kind() {
            // The port itself is the problem: IPv4 would say the same.
            std::io::ErrorKind::AddrInUse | std::io::ErrorKind::PermissionDenied => Err(error),
            // No IPv6 here (no protocol support, or no address): every IPv4 address, then.
            _ => listen(
                SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), addr.port()),
                reuse_port,
            ),
        })
    } else {
        listen(addr, reuse_port)
    };
    bound
        .and_then(TcpListener::from_std)
        .map_err(|source| Error::Bind { addr, source })
}

fn listen(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// The HTTPS server.
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Arc<Router>,
    config: Config,
    connections: Connections,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How many connections a [`Server`] has open, under its cap.
#[derive(Clone, Debug)]
pub struct Connections {
    permits: Arc<Semaphore>,
    /// Accepted and not yet closed. Not the permits taken: the accept loop holds one while it
    /// waits for the next connection.
    open: Arc<AtomicUsize>,
    max: usize,
}

impl Connections {
    /// Connections open now (accepted and not yet closed, in any state).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The cap (`--max-connections`).
    pub fn max(&self) -> usize {
        self.max
    }
}

/// One accepted connection's place under the cap, counted in [`Connections::open`] until it
/// is dropped with its connection.
#[derive(Debug)]
pub(crate) struct Seat {
    _permit: OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl Seat {
    fn new(permit: OwnedSemaphorePermit, open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::SeqCst);
        Seat {
            _permit: permit,
            open,
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    /// A server on `listener` presenting the certificates `certs` resolves.
    pub fn new(
        listener: TcpListener,
        certs: Arc<dyn ResolvesServerCert>,
        router: Arc<Router>,
        config: Config,
    ) -> Result<Self, Error> {
        let tls = tls::server::config_with(certs, config.http2, &config.tls)?;
        let max = config.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        Ok(Server {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(tls)),
            router,
            config,
            connections: Connections {
                permits: Arc::new(Semaphore::new(max)),
                open: Arc::default(),
                max,
            },
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The open-connection count, for tests and harnesses.
    pub fn connections(&self) -> Connections {
        self.connections.clone()
    }

    /// Serves until `shutdown`; then stops accepting, lets in-flight requests finish (at
    /// most `drain_timeout`) and closes every connection. At the connection cap it accepts
    /// nothing until a connection closes: new ones wait in the kernel's listen backlog.
    pub async fn run(self, shutdown: CancellationToken) {
        let Server {
            listener,
            acceptor,
            router,
            config,
            connections: Connections { permits, open, max },
        } = self;
        let config = Arc::new(config);
        let mut connections = JoinSet::new();
        let mut permit = None;
        let mut at_cap = false;
        loop {
            if permit.is_none() && permits.available_permits() == 0 && !at_cap {
                at_cap = true;
                tracing::warn!(
                    max_connections = max,
                    "at the connection cap; new connections wait"
                );
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                acquired = permits.clone().acquire_owned(), if permit.is_none() => match acquired {
                    Ok(p) => {
                        permit = Some(p);
                        if at_cap {
                            at_cap = false;
                            tracing::info!(max_connections = max, "below the connection cap again");
                        }
                    }
                    Err(_) => break,
                },
                accepted = listener.accept(), if permit.is_some() => match accepted {
                    Ok((stream, remote)) => {
                        if let Some(permit) = permit.take() {
                            let seat = Seat::new(permit, open.clone());
                            connections.spawn(conn::serve(
                                stream,
                                remote,
                                acceptor.clone(),
                                router.clone(),
                                config.clone(),
                                shutdown.clone(),
                                seat,
                                conn::Mode::Serving,
                            ));
                        }
                    }
                    Err(error) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        let draining = connections.len();
        if draining > 0 {
            tracing::info!(connections = draining, "draining connections");
        }
        let drain_by = tokio::time::Instant::now() + config.drain_timeout;
        if config.shutdown_send_retry_after {
            // Listening on: whoever comes now is told to come back, on a connection of its
            // own that closes after the answer, until the requests in flight are done.
            let refusing = CancellationToken::new();
            let mut refused = JoinSet::new();
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(drain_by) => break,
                    next = connections.join_next() => if next.is_none() { break },
                    accepted = listener.accept() => match accepted {
                        // At the cap, the connection is closed unanswered.
                        Ok((stream, remote)) => if let Ok(permit) = permits.clone().try_acquire_owned() {
                            refused.spawn(conn::serve(
                                stream,
                                remote,
                                acceptor.clone(),
                                router.clone(),
                                config.clone(),
                                refusing.clone(),
                                Seat::new(permit, open.clone()),
                                conn::Mode::ShuttingDown,
                            ));
                        },
                        // As in the accept loop: back off instead of spinning.
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    },
                }
            }
            drop(listener);
            refusing.cancel();
            connections.spawn(async move { while refused.join_next().await.is_some() {} });
        } else {
            drop(listener);
        }
        let drained = tokio::time::timeout_at(drain_by, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = connections.len(),
                "requests still running after the drain timeout; closing their connections"
            );
            connections.shutdown().await;
        }
    }
}
