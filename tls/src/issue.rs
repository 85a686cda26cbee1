//! Certificate generation: the self-signed serving fallback and a CA for tests and the sandbox.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::{Error, Identity};

/// A certificate with its key, in both PEM and DER.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Certificate PEM.
    pub cert_pem: String,
    /// PKCS#8 key PEM.
    pub key_pem: String,
    /// The same as a rustls identity.
    pub identity: Identity,
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Default)]
pub struct LeafSpec {
    /// Subject common name.
    pub common_name: String,
    /// Subject organizations (Kubernetes groups for client certificates).
    pub organizations: Vec<String>,
    /// DNS names and IP addresses; strings that parse as IPs become IP SANs.
    pub sans: Vec<String>,
    /// serverAuth usage.
    pub server: bool,
    /// clientAuth usage.
    pub client: bool,
}

fn leaf_params(spec: &LeafSpec) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, spec.common_name.as_str());
    for org in &spec.organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org.as_str());
    }
    for san in &spec.sans {
        let san = match san.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(san.as_str().try_into()?),
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    if spec.server {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    if spec.client {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
    }
    Ok(params)
}

fn issued(cert: rcgen::Certificate, key: &KeyPair) -> Issued {
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        identity: Identity {
            chain: vec![cert.der().clone()],
            key: key_der,
        },
    }
}

/// A self-signed serving certificate for the given names, as metrics-server's
/// `MaybeDefaultWithSelfSignedCerts` makes when no certificate file is given.
pub fn self_signed(common_name: &str, sans: &[String]) -> Result<Issued, Error> {
    let key = KeyPair::generate()?;
    let params = leaf_params(&LeafSpec {
        common_name: common_name.to_owned(),
        organizations: Vec::new(),
        sans: sans.to_vec(),
        server: true,
        client: false,
    })?;
    let cert = params.self_signed(&key)?;
    Ok(issued(cert, &key))
}

/// A certificate authority that issues leaves: for the sandbox, the simulated cluster and tests.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert: CertificateDer<'static>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA with this common name.
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            cert: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, DER.
    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a leaf certificate signed by this CA.
    pub fn issue(&self, spec: &LeafSpec) -> Result<Issued, Error> {
        let key = KeyPair::generate()?;
        let cert = leaf_params(spec)?.signed_by(&key, &self.issuer)?;
        Ok(issued(cert, &key))
    }
}
