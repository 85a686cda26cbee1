//! Client-certificate verification for the two certificate authenticators, as Go's
//! `x509.Certificate.Verify` with `KeyUsages: [ExtKeyUsageClientAuth]` does it in
//! k8s.io/apiserver `pkg/authentication/request/x509/x509.go`: the chain the peer sent is
//! built up to one of the CA bundle's certificates, the leaf must be valid now and, when it
//! lists extended key usages, list clientAuth.

use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm, TrustAnchor, UnixTime};
use webpki::{EndEntityCert, KeyUsage};

/// A CA bundle turned into trust anchors.
#[derive(Clone)]
pub(crate) struct CaBundle {
    anchors: Vec<TrustAnchor<'static>>,
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle")
            .field("anchors", &self.anchors.len())
            .finish()
    }
}

/// The subject fields the authenticators read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subject {
    /// The last CN, as Go's `pkix.Name.CommonName`.
    pub(crate) common_name: String,
    /// Every O, in order.
    pub(crate) organizations: Vec<String>,
}

impl CaBundle {
    /// Every certificate of a PEM bundle; `what` names the source in errors.
    pub(crate) fn from_pem(pem: &[u8], what: &str) -> Result<Self, String> {
        let certs = tls::pem::certs_from_slice(pem, what).map_err(|e| e.to_string())?;
        Self::from_der(&certs).map_err(|e| format!("{what}: {e}"))
    }

    /// Trust anchors from DER certificates.
    pub(crate) fn from_der(certs: &[CertificateDer<'_>]) -> Result<Self, String> {
        let anchors = certs
            .iter()
            .map(|c| {
                webpki::anchor_from_trusted_cert(c)
                    .map(|a| a.to_owned())
                    .map_err(|e| format!("not a usable CA certificate: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CaBundle {
            anchors,
            algorithms: tls::provider::provider()
                .signature_verification_algorithms
                .all,
        })
    }

    /// Verifies `chain` (leaf first, then the intermediates the peer sent) for client
    /// authentication at `now`, and returns the leaf's subject.
    pub(crate) fn verify(
        &self,
        chain: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<Subject, String> {
        let Some((leaf_der, intermediates)) = chain.split_first() else {
            return Err("no client certificate".to_owned());
        };
        let leaf = EndEntityCert::try_from(leaf_der)
            .map_err(|e| format!("x509: malformed certificate: {e}"))?;
        leaf.verify_for_usage(
            self.algorithms,
            &self.anchors,
            intermediates,
            now,
            KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| format!("x509: certificate verification failed: {e}"))?;
        subject(leaf_der)
    }
}

/// The CN and O of a certificate.
pub(crate) fn subject(der: &CertificateDer<'_>) -> Result<Subject, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("x509: malformed certificate: {e}"))?;
    let name = cert.subject();
    let common_name = name
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()
        .unwrap_or_default()
        .to_owned();
    let organizations = name
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_owned)
        .collect();
    Ok(Subject {
        common_name,
        organizations,
    })
}
