//! The crypto provider: ring, chosen once for the process.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The provider every config in this workspace is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process default, for libraries (kube) that build their own configs.
/// Calling it twice is harmless.
pub fn install_default() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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
