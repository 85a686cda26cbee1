//! Client-certificate verification for the two certificate authenticators, as Go's
//! `x509.Certificate.Verify` with `KeyUsages: [ExtKeyUsageClientAuth]` does it in
//! k8s.io/apiserver `pkg/authentication/request/x509/x509.go`: the chain the peer sent is
//! built up to one of the CA bundle's certificates, the leaf must be valid now and, when it
//! lists extended key usages, list clientAuth.
//!
//! A chain that verified is remembered, by the SHA-256 of its certificates, until its leaf
//! expires: a kept-alive connection (the aggregator's, an HPA's) presents the same chain on
//! every request, and checking its signature again each time (an ECDSA P-256 verification,
//! ~50 us here) was a quarter of the server's CPU per HPA-shaped request. The memo belongs to
//! the bundle, so a rotated CA (a new bundle) starts with none.

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm, TrustAnchor, UnixTime};
use sha2::{Digest as _, Sha256};
use webpki::{EndEntityCert, KeyUsage};

/// How many verified chains a bundle remembers.
const VERIFIED_CHAINS: usize = 1024;

/// Verified chains by digest: the leaf's subject and notAfter (Unix seconds).
type Verified = LruCache<[u8; 32], (Subject, u64)>;

/// A CA bundle turned into trust anchors.
#[derive(Clone)]
pub(crate) struct CaBundle {
    anchors: Vec<TrustAnchor<'static>>,
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
    /// Chains that verified, shared by the bundle's clones.
    verified: Arc<Mutex<Verified>>,
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
            verified: Arc::new(Mutex::new(LruCache::new(
                NonZeroUsize::new(VERIFIED_CHAINS).unwrap_or(NonZeroUsize::MIN),
            ))),
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
        let digest = chain_digest(chain);
        if let Some((subject, not_after)) = self.verified.lock().get(&digest)
            && now.as_secs() <= *not_after
        {
            return Ok(subject.clone());
        }
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
        let (subject, not_after) = subject_and_expiry(leaf_der)?;
        self.verified
            .lock()
            .put(digest, (subject.clone(), not_after));
        Ok(subject)
    }
}

/// SHA-256 over each certificate's length and bytes, leaf first.
fn chain_digest(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for cert in chain {
        hash.update((cert.len() as u64).to_be_bytes());
        hash.update(cert.as_ref());
    }
    hash.finalize().into()
}

/// The CN and O of a certificate, and its notAfter in Unix seconds (0 before 1970).
fn subject_and_expiry(der: &CertificateDer<'_>) -> Result<(Subject, u64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("x509: malformed certificate: {e}"))?;
    let not_after = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0);
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
    Ok((
        Subject {
            common_name,
            organizations,
        },
        not_after,
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn client(ca: &tls::issue::Ca, cn: &str) -> Vec<CertificateDer<'static>> {
        ca.issue(&tls::issue::LeafSpec {
            common_name: cn.to_owned(),
            organizations: vec!["system:masters".to_owned()],
            client: true,
            ..Default::default()
        })
        .unwrap()
        .identity
        .chain
    }

    #[test]
    fn a_remembered_chain_still_expires_and_does_not_outlive_its_bundle() {
        tls::provider::install_default();
        let ca = tls::issue::Ca::new("front-proxy-ca").unwrap();
        let bundle = CaBundle::from_der(std::slice::from_ref(ca.cert())).unwrap();
        let chain = client(&ca, "aggregator");
        let now = UnixTime::now();
        for _ in 0..3 {
            let subject = bundle.verify(&chain, now).unwrap();
            assert_eq!(subject.common_name, "aggregator");
            assert_eq!(subject.organizations, ["system:masters"]);
        }
        assert_eq!(bundle.verified.lock().len(), 1);

        // Past the leaf's notAfter the memo does not answer: verification runs, and fails.
        let (_, not_after) = subject_and_expiry(&chain[0]).unwrap();
        let later = UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_after + 1));
        let expired = bundle.verify(&chain, later).unwrap_err();
        assert!(expired.contains("verification failed"), "{expired}");

        // A rotated CA is a new bundle: the chain its predecessor trusted is not trusted.
        let rotated = tls::issue::Ca::new("front-proxy-ca-2").unwrap();
        let new_bundle = CaBundle::from_der(std::slice::from_ref(rotated.cert())).unwrap();
        assert!(new_bundle.verify(&chain, now).is_err());
        // And a chain from another CA is not taken for the remembered one.
        assert!(bundle.verify(&client(&rotated, "aggregator"), now).is_err());
    }
}
