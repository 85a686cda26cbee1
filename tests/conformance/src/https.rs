//! An HTTP/1.1-over-TLS client for tests and tools talking to the servers of this crate.

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A client that speaks HTTP/1.1 only, over HTTPS only, verifying servers as `verify` says
/// and presenting `identity` when given.
pub fn client<B>(
    verify: &tls::client::Verify,
    identity: Option<&tls::Identity>,
) -> Result<Client<HttpsConnector<HttpConnector>, B>, tls::Error>
where
    B: http_body::Body + Send,
    B::Data: Send,
{
    Ok(Client::builder(TokioExecutor::new()).build(connector(verify, identity)?))
}

/// The HTTP/1.1-only HTTPS connector of [`client`], for a client built with other settings.
pub fn connector(
    verify: &tls::client::Verify,
    identity: Option<&tls::Identity>,
) -> Result<HttpsConnector<HttpConnector>, tls::Error> {
    let mut config = tls::client::config(verify, identity)?;
    config.alpn_protocols.clear();
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build())
}
