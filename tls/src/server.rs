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

use crate::policy::Policy;
use crate::{Error, provider};

/// Builds the serving config: TLS 1.2 and 1.3, ALPN h2 then http/1.1 (h2 left out when
/// `http2` is false), client certificates requested and handed to the application.
pub fn config(certs: Arc<dyn ResolvesServerCert>, http2: bool) -> Result<ServerConfig, Error> {
    config_with(certs, http2, &Policy::default())
}

/// As [`config`], restricted by `policy` (`--tls-min-version`, `--tls-cipher-suites`,
/// `--tls-curve-preferences`): TLS 1.3 only when asked, or when no TLS 1.2 suite is left.
pub fn config_with(
    certs: Arc<dyn ResolvesServerCert>,
    http2: bool,
    policy: &Policy,
) -> Result<ServerConfig, Error> {
    let provider = Arc::new(policy.apply(Arc::unwrap_or_clone(provider::provider())));
    let versions: &[&'static rustls::SupportedProtocolVersion] = if policy.offers_tls12() {
        rustls::DEFAULT_VERSIONS
    } else {
        &[&rustls::version::TLS13]
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
    use rustls::{
        CipherSuite, ClientConfig, ClientConnection, NamedGroup, ProtocolVersion, ServerConnection,
    };

    use super::*;

    /// The suite a handshake between `client` and this crate's serving config settles on.
    fn negotiated(client: ClientConfig) -> CipherSuite {
        handshake(client, &Policy::default()).unwrap().0
    }

    /// A handshake between `client` and the serving config under `policy`: the suite and
    /// key exchange group it settled on, or the server's error.
    fn handshake(
        client: ClientConfig,
        policy: &Policy,
    ) -> Result<(CipherSuite, NamedGroup, ProtocolVersion), rustls::Error> {
        let issued = crate::issue::self_signed("localhost", &["localhost".to_string()]).unwrap();
        let key = Arc::new(rustls::sign::SingleCertAndKey::from(
            certified_key(&issued.identity).unwrap(),
        ));
        let server = Arc::new(config_with(key, false, policy).unwrap());
        let mut s = ServerConnection::new(server).unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
        while c.is_handshaking() || s.is_handshaking() {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            s.read_tls(&mut wire.as_slice()).unwrap();
            s.process_new_packets()?;
            wire.clear();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            c.read_tls(&mut wire.as_slice()).unwrap();
            c.process_new_packets()?;
        }
        Ok((
            s.negotiated_cipher_suite().unwrap().suite(),
            s.negotiated_key_exchange_group().unwrap().name(),
            s.protocol_version().unwrap(),
        ))
    }

    /// A ring client offering only `versions`, and only `suites` and `groups` when given.
    fn client(
        versions: &[&'static rustls::SupportedProtocolVersion],
        suites: &[CipherSuite],
        groups: &[NamedGroup],
    ) -> ClientConfig {
        let mut provider = rustls::crypto::ring::default_provider();
        if !suites.is_empty() {
            provider
                .cipher_suites
                .retain(|s| suites.contains(&s.suite()));
        }
        if !groups.is_empty() {
            provider.kx_groups.retain(|g| groups.contains(&g.name()));
        }
        ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::client::NoVerify::new()))
            .with_no_client_auth()
    }

    const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

    /// `--tls-cipher-suites` restricts TLS 1.2 to the suites listed and leaves TLS 1.3 as it
    /// is; with none of its suites left, TLS 1.2 is not offered at all.
    #[test]
    fn the_cipher_suite_list_restricts_tls12_only() {
        use CipherSuite::*;
        let policy = Policy {
            tls12_suites: Some(vec![TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]),
            ..Policy::default()
        };
        let only_256 = client(TLS12, &[TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384], &[]);
        assert!(handshake(only_256.clone(), &policy).is_err());
        assert_eq!(
            handshake(only_256, &Policy::default()).unwrap().0,
            TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            "offered without the list"
        );
        let both = client(
            TLS12,
            &[
                TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            ],
            &[],
        );
        assert_eq!(
            handshake(both, &policy).unwrap().0,
            TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        );
        let tls13 = client(rustls::ALL_VERSIONS, &[TLS13_AES_256_GCM_SHA384], &[]);
        let (suite, _, version) = handshake(tls13, &policy).unwrap();
        assert_eq!(
            (suite, version),
            (TLS13_AES_256_GCM_SHA384, ProtocolVersion::TLSv1_3)
        );
        let none = Policy {
            tls12_suites: Some(Vec::new()),
            ..Policy::default()
        };
        assert!(handshake(client(TLS12, &[], &[]), &none).is_err());
        let (_, _, version) = handshake(client(rustls::ALL_VERSIONS, &[], &[]), &none).unwrap();
        assert_eq!(version, ProtocolVersion::TLSv1_3);
    }

    /// `--tls-curve-preferences` limits the key exchange groups, in TLS 1.3 (a client whose
    /// first key share is another group is asked to retry) and in TLS 1.2 alike.
    #[test]
    fn the_curve_list_limits_key_exchange() {
        let policy = Policy {
            groups: Some(vec![NamedGroup::secp384r1]),
            ..Policy::default()
        };
        let x25519 = client(rustls::ALL_VERSIONS, &[], &[NamedGroup::X25519]);
        assert!(handshake(x25519.clone(), &policy).is_err());
        assert_eq!(
            handshake(x25519, &Policy::default()).unwrap().1,
            NamedGroup::X25519
        );
        let every = client(rustls::ALL_VERSIONS, &[], &[]);
        assert_eq!(handshake(every, &policy).unwrap().1, NamedGroup::secp384r1);
        let tls12 = client(TLS12, &[], &[]);
        assert_eq!(handshake(tls12, &policy).unwrap().1, NamedGroup::secp384r1);
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
