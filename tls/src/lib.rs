//! The one place that owns TLS (as linkerd's `linkerd/rustls` does).
//!
//! # Layout
//! - [`provider`]: picks the rustls `CryptoProvider` (ring); nobody else names it.
//! - [`pem`]: reads certificates and keys from PEM files or bytes.
//! - [`server`]: the serving `ServerConfig`, which requests (never requires) client certificates.
//! - [`client`]: `ClientConfig`s for kubelets and the Kubernetes API, verified or, when asked,
//!   insecure.
//! - [`issue`]: certificate generation: the self-signed serving fallback and a small CA for
//!   tests and the sandbox.

#![warn(missing_docs)]

pub mod client;
pub mod issue;
pub mod pem;
pub mod policy;
pub mod provider;
pub mod server;

pub use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Errors from building TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// PEM input held nothing usable.
    #[error("{what}: {reason}")]
    Pem {
        /// What was being read (a path or a description).
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// Certificate generation failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A client verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// A certificate chain and its private key.
#[derive(Debug)]
pub struct Identity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}
