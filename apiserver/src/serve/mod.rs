//! HTTPS serving: a tokio listener, tokio-rustls with ALPN `h2` and `http/1.1`, hyper-util's
//! automatic HTTP/1.1-or-h2 connections, and graceful shutdown.
//!
//! # Layout
//! - [`access`]: the authentication and authorization filters (delegated to the cluster).
//! - [`cert`]: the serving certificate (files reloaded on change, or self-signed in
//!   `--cert-dir`).
//! - [`gzip`]: gzip responses larger than 128 KiB when `Accept-Encoding` allows it.
//! - [`router`]: the filter chain (the hook for authentication, authorization and load
//!   shedding) and the routes.

pub mod access;
pub mod cert;
pub mod gzip;
pub mod httplog;
pub mod router;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::server::ResolvesServerCert;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use router::{Filter, Guard, PeerCertificates, RemoteAddr, Router, Verdict};

/// Connection settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Offer h2 in ALPN (off with `--disable-http2-serving`).
    pub http2: bool,
    /// `--http2-max-streams-per-connection`; 0 means Go's default (250).
    pub http2_max_streams: u32,
    /// Only TLS 1.3 (`--tls-min-version=VersionTLS13`).
    pub tls13_only: bool,
    /// A TLS handshake that takes longer is dropped.
    pub handshake_timeout: Duration,
    /// An HTTP/1.1 request whose headers take longer is dropped.
    pub header_read_timeout: Duration,
    /// On shutdown, in-flight requests get this long to finish.
    pub drain_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            http2: true,
            http2_max_streams: 0,
            tls13_only: false,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
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

/// Binds the listening socket.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// The HTTPS server.
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Arc<Router>,
    config: Config,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("config", &self.config)
            .finish_non_exhaustive()
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
        let tls = tls::server::config_with_min_version(certs, config.http2, config.tls13_only)?;
        Ok(Server {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(tls)),
            router,
            config,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown`; then stops accepting, lets in-flight requests finish (at
    /// most `drain_timeout`) and closes every connection.
    pub async fn run(self, shutdown: CancellationToken) {
        let Server {
            listener,
            acceptor,
            router,
            config,
        } = self;
        let config = Arc::new(config);
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, remote)) => {
                        connections.spawn(connection(
                            stream,
                            remote,
                            acceptor.clone(),
                            router.clone(),
                            config.clone(),
                            shutdown.clone(),
                        ));
                    }
                    Err(error) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(listener);
        let open = connections.len();
        if open > 0 {
            tracing::info!(connections = open, "draining connections");
        }
        let drained = tokio::time::timeout(config.drain_timeout, async {
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

/// One TCP connection: TLS handshake (bounded), then HTTP/1.1 or h2 per ALPN.
async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: TlsAcceptor,
    router: Arc<Router>,
    config: Arc<Config>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let tls = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = tokio::time::timeout(config.handshake_timeout, acceptor.accept(stream)) => {
            match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%remote, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let peer = session
        .peer_certificates()
        .filter(|chain| !chain.is_empty())
        .map(|chain| PeerCertificates(Arc::from(chain.to_vec())));

    let service = service_fn(move |mut request: hyper::Request<Incoming>| {
        let router = router.clone();
        let extensions = request.extensions_mut();
        extensions.insert(RemoteAddr(remote));
        if let Some(peer) = &peer {
            extensions.insert(peer.clone());
        }
        async move { Ok::<_, Infallible>(router.handle(request).await) }
    });

    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    let max_streams = if config.http2_max_streams == 0 {
        250
    } else {
        config.http2_max_streams
    };
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(max_streams)
        .keep_alive_interval(Duration::from_secs(30));
    let builder = match alpn.as_deref() {
        Some(b"h2") => builder.http2_only(),
        Some(_) => builder.http1_only(),
        None if !config.http2 => builder.http1_only(),
        None => builder,
    };
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%remote, %error, "connection ended with an error");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(error) = conn.await {
                tracing::debug!(%remote, %error, "connection ended with an error while draining");
            }
        }
    }
}
