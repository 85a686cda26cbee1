//! The serving side.
//!
//! kube-apiserver's generic server uses `tls.RequestClientCert`: a client certificate is
//! requested but neither required nor verified in the handshake; each authenticator verifies
//! it against its own CA at the HTTP layer. [`AcceptAnyClientCert`] does the same, so an
//! untrusted certificate falls back to a token or to anonymous instead of killing the
//! connection.

use std::sync::Arc;

use rustls::server::ResolvesServerCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DistinguishedName, ServerConfig};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::{Error, provider};

/// Builds the serving config: TLS 1.2 and 1.3, ALPN h2 then http/1.1 (h2 left out when
/// `http2` is false), client certificates requested and handed to the application.
pub fn config(certs: Arc<dyn ResolvesServerCert>, http2: bool) -> Result<ServerConfig, Error> {
    config_with_min_version(certs, http2, false)
}

/// As [`config`]; with `tls13_only` (`--tls-min-version=VersionTLS13`) only TLS 1.3 is
/// offered.
pub fn config_with_min_version(
    certs: Arc<dyn ResolvesServerCert>,
    http2: bool,
    tls13_only: bool,
) -> Result<ServerConfig, Error> {
    let provider = provider::provider();
    let versions: &[&'static rustls::SupportedProtocolVersion] = if tls13_only {
        &[&rustls::version::TLS13]
    } else {
        rustls::DEFAULT_VERSIONS
    };
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)?
        .with_client_cert_verifier(Arc::new(AcceptAnyClientCert {
            signatures: provider::Signatures::new(),
        }))
        .with_cert_resolver(certs);
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// Requests a client certificate, accepts whatever is presented (after checking the
/// handshake signature proves possession of its key), and leaves trust to the application.
#[derive(Debug)]
pub struct AcceptAnyClientCert {
    signatures: provider::Signatures,
}

impl ClientCertVerifier for AcceptAnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    provider::delegate_signature_checks!();
}

/// A resolver that always serves one certified key; swap it behind an `ArcSwap`-like holder
/// for reloads (see the apiserver's `serve` module).
pub fn certified_key(identity: &crate::Identity) -> Result<rustls::sign::CertifiedKey, Error> {
    let provider = provider::provider();
    let key = provider
        .key_provider
        .load_private_key(identity.key.clone_key())?;
    Ok(rustls::sign::CertifiedKey::new(identity.chain.clone(), key))
}
