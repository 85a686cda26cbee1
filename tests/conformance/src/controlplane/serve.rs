//! A small HTTPS server (HTTP/1.1 and h2) shared by the control plane and the tests' fake
//! backends: it accepts on a listener until shutdown and hands each request, with the peer's
//! client certificates, to a handler.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::Body;

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// The client certificate chain presented in the handshake (leaf first), unverified.
    pub certs: Arc<Vec<CertificateDer<'static>>>,
}

/// Answers one request.
pub type Handler =
    Arc<dyn Fn(Request<Incoming>, Peer) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// Accepts TLS connections on `listener` until `shutdown` is cancelled; every connection is a
/// task owned by this function and is dropped when it returns.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    handler: Handler,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((tcp, addr)) = accepted else {
            continue;
        };
        let acceptor = acceptor.clone();
        let handler = handler.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let certs = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                .unwrap_or_default();
            let peer = Peer {
                addr,
                certs: Arc::new(certs),
            };
            let service = service_fn(move |req| {
                let fut = handler(req, peer.clone());
                async move { Ok::<_, Infallible>(fut.await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = conn => {}
            }
        });
    }
    connections.shutdown().await;
}
