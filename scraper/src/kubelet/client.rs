//! The kubelet HTTPS client. Owned by the client/scrape work; this is the agreed public surface.

use std::time::Duration;

use bytes::Bytes;

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
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not yet implemented.
    #[error("kubelet client not built")]
    Unbuilt,
}

/// The client; cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {}

impl Client {
    /// Builds a client.
    pub fn new(config: Config) -> Result<Self, Error> {
        let _ = config;
        Ok(Client {})
    }

    /// GETs `url` (e.g. `https://10.0.0.1:10250/metrics/resource`), returning the body.
    pub async fn get(&self, url: &str) -> Result<Bytes, Error> {
        let _ = url;
        Err(Error::Unbuilt)
    }
}
