//! Certificate generation: the self-signed serving fallback and a CA for tests and the sandbox.

use std::net::IpAddr;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SigningKey,
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
    /// Subject organizations (Kubernetes groups for client certificates), each its own `O`
    /// attribute, in order.
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
    // rcgen keeps one value per attribute type: several organizations are written by
    // `with_subject` after signing.
    if let Some(org) = spec.organizations.first() {
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
        let mut issued = issued(cert, &key);
        if spec.organizations.len() > 1 {
            let subject = subject_der(&spec.common_name, &spec.organizations);
            let der = with_subject(&issued.identity.chain[0], &subject, self.issuer.key())?;
            issued.cert_pem = pem_certificate(&der);
            issued.identity.chain = vec![der];
        }
        Ok(issued)
    }
}

/// One DER tag-length-value.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The first DER element of some input.
struct Element<'a> {
    tag: u8,
    content: &'a [u8],
    /// Tag, length and content.
    whole: &'a [u8],
    /// The input after the element.
    rest: &'a [u8],
}

/// Splits the first DER element off `input`.
fn read_tlv(input: &[u8]) -> Option<Element<'_>> {
    let (&tag, after_tag) = input.split_first()?;
    let (&first, after_len) = after_tag.split_first()?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > std::mem::size_of::<usize>() {
            return None;
        }
        let len = after_len
            .get(..n)?
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    let whole = input.get(..end)?;
    Some(Element {
        tag,
        content: &whole[header..],
        whole,
        rest: &input[end..],
    })
}

/// A subject Name: the CN, then one `O` attribute per organization (UTF8String values).
fn subject_der(common_name: &str, organizations: &[String]) -> Vec<u8> {
    const CN: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
    const O: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x0a];
    let rdn = |oid: &[u8], value: &str| {
        let mut attribute = oid.to_vec();
        attribute.extend(tlv(0x0c, value.as_bytes()));
        tlv(0x31, &tlv(0x30, &attribute))
    };
    let mut rdns = rdn(CN, common_name);
    for org in organizations {
        rdns.extend(rdn(O, org));
    }
    tlv(0x30, &rdns)
}

/// `cert` with its subject replaced by `subject` (DER) and signed again by `signer`, the key
/// that signed it (so the signature algorithm stays the same).
fn with_subject(
    cert: &CertificateDer<'_>,
    subject: &[u8],
    signer: &impl SigningKey,
) -> Result<CertificateDer<'static>, Error> {
    let malformed = || Error::Generate(rcgen::Error::CouldNotParseCertificate);
    let body = read_tlv(cert).ok_or_else(malformed)?.content;
    let tbs = read_tlv(body).ok_or_else(malformed)?;
    let algorithm = read_tlv(tbs.rest).ok_or_else(malformed)?.whole;
    // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, ...
    let mut fields = Vec::new();
    let mut input = tbs.content;
    while !input.is_empty() {
        let field = read_tlv(input).ok_or_else(malformed)?;
        fields.push((field.tag, field.whole));
        input = field.rest;
    }
    let subject_at = if fields.first().is_some_and(|(tag, _)| *tag == 0xa0) {
        5
    } else {
        4
    };
    if fields.len() <= subject_at {
        return Err(malformed());
    }
    let mut new_tbs = Vec::with_capacity(tbs.content.len() + subject.len());
    for (i, (_, whole)) in fields.iter().enumerate() {
        new_tbs.extend_from_slice(if i == subject_at { subject } else { whole });
    }
    let new_tbs = tlv(0x30, &new_tbs);
    let mut signature = vec![0u8];
    signature.extend(signer.sign(&new_tbs)?);
    let mut content = new_tbs;
    content.extend_from_slice(algorithm);
    content.extend(tlv(0x03, &signature));
    Ok(CertificateDer::from(tlv(0x30, &content)))
}

/// PEM text of a DER certificate.
fn pem_certificate(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn subject_of(der: &[u8]) -> (Vec<String>, Vec<String>) {
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        let name = cert.subject();
        let all = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
            it.map(|a| a.as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        (
            all(&mut name.iter_common_name()),
            all(&mut name.iter_organization()),
        )
    }

    /// Verifies `der` for client authentication against `ca` alone, now.
    fn verify_client_cert(ca: &Ca, der: &CertificateDer<'_>) -> Result<(), webpki::Error> {
        let anchor = webpki::anchor_from_trusted_cert(ca.cert()).unwrap();
        let leaf = webpki::EndEntityCert::try_from(der).unwrap();
        leaf.verify_for_usage(
            crate::provider::provider()
                .signature_verification_algorithms
                .all,
            &[anchor],
            &[],
            rustls_pki_types::UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map(|_| ())
    }

    #[test]
    fn several_organizations_are_all_written_and_the_certificate_still_verifies() {
        let ca = Ca::new("cluster-ca").unwrap();
        let spec = LeafSpec {
            common_name: "alice".to_owned(),
            organizations: ["system:masters", "dev", "ops"].map(str::to_owned).to_vec(),
            client: true,
            ..LeafSpec::default()
        };
        let issued = ca.issue(&spec).unwrap();
        let der = &issued.identity.chain[0];
        assert_eq!(
            subject_of(der),
            (
                vec!["alice".to_owned()],
                vec![
                    "system:masters".to_owned(),
                    "dev".to_owned(),
                    "ops".to_owned()
                ]
            )
        );
        // The PEM is the same certificate.
        let from_pem = crate::pem::certs_from_slice(issued.cert_pem.as_bytes(), "pem").unwrap();
        assert_eq!(from_pem, vec![der.clone()]);
        // The new signature is the CA's: the chain verifies for client authentication.
        verify_client_cert(&ca, der).unwrap();
        // And the key still matches it (a TLS identity).
        crate::server::certified_key(&issued.identity).unwrap();
    }

    #[test]
    fn a_certificate_resigned_by_another_key_does_not_verify() {
        let ca = Ca::new("cluster-ca").unwrap();
        let other = Ca::new("other").unwrap();
        let issued = ca
            .issue(&LeafSpec {
                common_name: "bob".to_owned(),
                client: true,
                ..LeafSpec::default()
            })
            .unwrap();
        let subject = subject_der("bob", &["a".to_owned(), "b".to_owned()]);
        let forged = with_subject(&issued.identity.chain[0], &subject, other.issuer.key()).unwrap();
        assert_eq!(subject_of(&forged).1, ["a", "b"]);
        assert!(verify_client_cert(&ca, &forged).is_err());
    }

    #[test]
    fn one_organization_is_written_by_rcgen_as_before() {
        let ca = Ca::new("cluster-ca").unwrap();
        let issued = ca
            .issue(&LeafSpec {
                common_name: "carol".to_owned(),
                organizations: vec!["readers".to_owned()],
                client: true,
                ..LeafSpec::default()
            })
            .unwrap();
        assert_eq!(
            subject_of(&issued.identity.chain[0]),
            (vec!["carol".to_owned()], vec!["readers".to_owned()])
        );
    }

    #[test]
    fn long_der_lengths_round_trip() {
        let content = vec![7u8; 300];
        let encoded = tlv(0x04, &content);
        assert_eq!(&encoded[..4], &[0x04, 0x82, 0x01, 0x2c]);
        let e = read_tlv(&encoded).unwrap();
        assert_eq!(
            (e.tag, e.content, e.whole.len(), e.rest.len()),
            (0x04, &content[..], 304, 0)
        );
        assert!(read_tlv(&encoded[..100]).is_none(), "truncated");
    }
}
