//! The crypto provider: ring, chosen once for the process, with its cipher suites in the
//! order Go's `crypto/tls` prefers them.
//!
//! Every peer of metrics-server is Go: kube-apiserver and kubectl as clients, the kubelet as
//! a server. Go's order (`defaultCipherSuitesTLS13`, `cipherSuitesPreferenceOrder` in
//! `crypto/tls/cipher_suites.go`) puts AES-128-GCM first where the CPU has AES and carry-less
//! multiply instructions, and ChaCha20-Poly1305 first where it has not; a Go server picks
//! from its own order, not the client's. ring's default order puts AES-256-GCM first, so a
//! rustls client and a rustls server would settle on it where any Go pair settles on
//! AES-128-GCM (four rounds fewer per block: ~25 % less AES work on every body). Ordering
//! the suites as Go does makes this server choose as metrics-server does, and the stand-ins
//! of the tests and benchmarks (kubelets, control plane, clients), built from the same
//! configs, negotiate what their real counterparts would.
//!
//! One difference is left: a Go server with AES hardware still gives ChaCha20-Poly1305 to a
//! client that lists it before AES-GCM (`aesgcmPreferred`, a client without AES hardware),
//! where rustls has no hook to read the client's order and this server gives AES-128-GCM.
//! This server's clients (kube-apiserver, Prometheus, probes) run on server hardware.

use std::sync::Arc;

use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;

/// The provider every config in this workspace is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring_go_ordered())
}

/// Installs the same provider as the process default, for libraries (kube) that build their
/// own configs. Calling it twice is harmless.
pub fn install_default() {
    let _ = ring_go_ordered().install_default();
}

/// ring, its suites in Go's order for this CPU.
fn ring_go_ordered() -> CryptoProvider {
    go_ordered(rustls::crypto::ring::default_provider(), aes_gcm_hardware())
}

/// `provider` with its cipher suites in Go's order of preference, with or without AES-GCM
/// hardware.
fn go_ordered(mut provider: CryptoProvider, aes: bool) -> CryptoProvider {
    provider
        .cipher_suites
        .sort_by_key(|suite| go_rank(suite.suite(), aes));
    provider
}

/// Where `suite` stands in Go's preference (lower first): TLS 1.3 before TLS 1.2, ECDSA
/// before RSA, and AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 in that order with AES-GCM
/// hardware, ChaCha20-Poly1305 first without. Suites Go does not know go last, in the
/// provider's order (the sort is stable).
fn go_rank(suite: CipherSuite, aes: bool) -> u8 {
    use CipherSuite::*;
    let [a128, a256, chacha] = if aes { [0, 1, 2] } else { [1, 2, 0] };
    match suite {
        TLS13_AES_128_GCM_SHA256 => a128,
        TLS13_AES_256_GCM_SHA384 => a256,
        TLS13_CHACHA20_POLY1305_SHA256 => chacha,
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => 10 + 2 * a128,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 11 + 2 * a128,
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => 10 + 2 * a256,
        TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 11 + 2 * a256,
        TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => 10 + 2 * chacha,
        TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => 11 + 2 * chacha,
        _ => u8::MAX,
    }
}

/// Go's `hasAESGCMHardwareSupport`: AES and carry-less multiply instructions.
pub(crate) fn aes_gcm_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(aes: bool) -> Vec<CipherSuite> {
        go_ordered(rustls::crypto::ring::default_provider(), aes)
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect()
    }

    /// Go's `defaultCipherSuitesTLS13` then `cipherSuitesPreferenceOrder` (AES hardware),
    /// and their `NoAES` forms: every suite ring offers, none lost.
    #[test]
    fn suites_follow_go_preference() {
        use CipherSuite::*;
        assert_eq!(
            order(true),
            [
                TLS13_AES_128_GCM_SHA256,
                TLS13_AES_256_GCM_SHA384,
                TLS13_CHACHA20_POLY1305_SHA256,
                TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
        assert_eq!(
            order(false),
            [
                TLS13_CHACHA20_POLY1305_SHA256,
                TLS13_AES_128_GCM_SHA256,
                TLS13_AES_256_GCM_SHA384,
                TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            ]
        );
    }
}

/// Handshake-signature checks with the provider's algorithms: what every verifier must still
/// do even when it accepts any certificate (the signature proves possession of the key).
#[derive(Debug)]
pub(crate) struct Signatures(Arc<CryptoProvider>);

/// The three handshake-signature methods every rustls certificate verifier implements
/// (`ServerCertVerifier`, `ClientCertVerifier`), delegated to the verifier's `signatures`
/// field ([`Signatures`]): one body for both traits.
macro_rules! delegate_signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls_pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            self.signatures.tls12(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls_pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            self.signatures.tls13(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.signatures.schemes()
        }
    };
}
pub(crate) use delegate_signature_checks;

impl Signatures {
    pub(crate) fn new() -> Self {
        Signatures(provider())
    }

    pub(crate) fn tls12(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    pub(crate) fn tls13(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    pub(crate) fn schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
