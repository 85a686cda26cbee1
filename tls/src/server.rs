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
    // A Go server picks the suite from its own order (see `provider`), not the client's.
    config.ignore_client_order = true;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rustls::{CipherSuite, ClientConfig, ClientConnection, ServerConnection};

    use super::*;

    /// The suite a handshake between `client` and this crate's serving config settles on.
    fn negotiated(client: ClientConfig) -> CipherSuite {
        let issued = crate::issue::self_signed("localhost", &["localhost".to_string()]).unwrap();
        let key = Arc::new(rustls::sign::SingleCertAndKey::from(
            certified_key(&issued.identity).unwrap(),
        ));
        let server = Arc::new(config(key, false).unwrap());
        let mut s = ServerConnection::new(server).unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
        while c.is_handshaking() || s.is_handshaking() {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            s.read_tls(&mut wire.as_slice()).unwrap();
            s.process_new_packets().unwrap();
            wire.clear();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            c.read_tls(&mut wire.as_slice()).unwrap();
            c.process_new_packets().unwrap();
        }
        s.negotiated_cipher_suite().unwrap().suite()
    }

    /// As a Go server: its own order decides, so a client that lists AES-256-GCM first
    /// (rustls' and ring's default) still gets AES-128-GCM on a CPU with AES instructions,
    /// and this crate's own client (Go's order) gets it too.
    #[test]
    fn the_server_picks_the_suite_as_go_does() {
        let want = if super::provider::aes_gcm_hardware() {
            CipherSuite::TLS13_AES_128_GCM_SHA256
        } else {
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        };
        let ring_default =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(crate::client::NoVerify::new()))
                .with_no_client_auth();
        assert_eq!(
            ring_default.crypto_provider().cipher_suites[0].suite(),
            CipherSuite::TLS13_AES_256_GCM_SHA384
        );
        assert_eq!(negotiated(ring_default), want);
        let ours = crate::client::config(&crate::client::Verify::Insecure, None).unwrap();
        assert_eq!(negotiated(ours), want);
    }
}
