//! The client side: kubelets and the Kubernetes API.

use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::{Error, Identity, provider};

/// How a client verifies the server it talks to.
#[derive(Debug, Clone)]
pub enum Verify {
    /// Against these CA certificates.
    Roots(Vec<CertificateDer<'static>>),
    /// Not at all (`--kubelet-insecure-tls`). The handshake signature is still checked.
    Insecure,
}

/// Builds a client config with ALPN `http/1.1` (kubelets speak HTTP/1.1 to metrics-server).
pub fn config(verify: &Verify, identity: Option<&Identity>) -> Result<ClientConfig, Error> {
    let provider = provider::provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match verify {
        Verify::Roots(cas) => {
            let mut roots = RootCertStore::empty();
            for ca in cas {
                roots.add(ca.clone())?;
            }
            builder.with_root_certificates(roots)
        }
        Verify::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify {
                signatures: provider::Signatures::new(),
            })),
    };
    let mut config = match identity {
        Some(id) => builder.with_client_auth_cert(id.chain.clone(), id.key.clone_key())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[derive(Debug)]
pub(crate) struct NoVerify {
    signatures: provider::Signatures,
}

impl NoVerify {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        NoVerify {
            signatures: provider::Signatures::new(),
        }
    }
}

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    provider::delegate_signature_checks!();
}
