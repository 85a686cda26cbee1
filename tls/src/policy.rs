//! The serving side's protocol choices beyond the certificate, as k8s.io/apiserver's secure
//! serving flags make them: `--tls-min-version`, `--tls-cipher-suites` and
//! `--tls-curve-preferences`.
//!
//! The names are Go's (`crypto/tls` and `k8s.io/component-base/cli/flag/ciphersuites_flag.go`).
//! As in Go, the cipher suite list restricts the TLS 1.2 suites only (TLS 1.3's are not
//! configurable), and neither list's order matters: the server keeps Go's own preference
//! order ([`crate::provider`]). A name Go knows but this server's crypto provider does not
//! implement (the CBC, RSA key exchange, RC4 and 3DES suites; P-521 and X25519MLKEM768) is
//! left out and reported, so that a flag copied from a Go deployment still starts; a name
//! neither knows is an error, as it is for Go.

use rustls::{CipherSuite, NamedGroup};

/// What `--tls-*` asked of the serving config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Offer TLS 1.3 only (`--tls-min-version=VersionTLS13`).
    pub tls13_only: bool,
    /// The TLS 1.2 suites to offer; `None`: every one the provider has.
    pub tls12_suites: Option<Vec<CipherSuite>>,
    /// The key exchange groups to offer; `None`: every one the provider has.
    pub groups: Option<Vec<NamedGroup>>,
}

/// A name Go's flag would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Not a cipher suite Go knows (k8s.io/component-base's wording).
    #[error("Cipher suite {0} not supported or doesn't exist")]
    CipherSuite(String),
    /// Not a curve name or ID.
    #[error(
        "unknown curve {0:?}: expected a Go curve name (X25519, CurveP256, CurveP384, CurveP521, X25519MLKEM768) or a decimal curve ID"
    )]
    Curve(String),
    /// Every curve listed is one this server cannot offer.
    #[error(
        "none of the curves in --tls-curve-preferences ({0}) is supported here (X25519, CurveP256, CurveP384 are)"
    )]
    NoCurve(String),
}

/// Parsed names: what the server offers, and the names it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<T> {
    /// What is offered, in the order given, without repeats.
    pub offered: Vec<T>,
    /// Names Go knows that this server does not implement.
    pub unsupported: Vec<String>,
}

/// Every suite name Go's flag accepts, with its IANA code point; the TLS 1.3 names are
/// accepted and change nothing, as in Go.
const GO_SUITES: &[(&str, u16)] = &[
    // crypto/tls CipherSuites()
    ("TLS_AES_128_GCM_SHA256", 0x1301),
    ("TLS_AES_256_GCM_SHA384", 0x1302),
    ("TLS_CHACHA20_POLY1305_SHA256", 0x1303),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", 0xc009),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xc00a),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xc013),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xc014),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", 0xc02b),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", 0xc02c),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xc02f),
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 0xc030),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", 0xcca9),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0xcca8),
    // crypto/tls InsecureCipherSuites()
    ("TLS_RSA_WITH_RC4_128_SHA", 0x0005),
    ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x000a),
    ("TLS_RSA_WITH_AES_128_CBC_SHA", 0x002f),
    ("TLS_RSA_WITH_AES_256_CBC_SHA", 0x0035),
    ("TLS_RSA_WITH_AES_128_CBC_SHA256", 0x003c),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", 0x009c),
    ("TLS_RSA_WITH_AES_256_GCM_SHA384", 0x009d),
    ("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", 0xc007),
    ("TLS_ECDHE_RSA_WITH_RC4_128_SHA", 0xc011),
    ("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", 0xc012),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", 0xc023),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 0xc027),
    // the legacy names component-base still maps
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", 0xcca8),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", 0xcca9),
];

/// Go's curve names (`crypto/tls.CurveID.String()`, and the `P-256` spelling) with their IDs.
const GO_CURVES: &[(&str, u16)] = &[
    ("CurveP256", 23),
    ("P-256", 23),
    ("CurveP384", 24),
    ("P-384", 24),
    ("CurveP521", 25),
    ("P-521", 25),
    ("X25519", 29),
    ("X25519MLKEM768", 4588),
];

/// `--tls-cipher-suites`: the TLS 1.2 suites to offer (TLS 1.3 names are accepted and
/// ignored, as in Go). Empty names (`--tls-cipher-suites=`) are skipped.
pub fn cipher_suites(names: &[String]) -> Result<Parsed<CipherSuite>, PolicyError> {
    let provider = crate::provider::provider();
    let mut parsed = Parsed {
        offered: Vec::new(),
        unsupported: Vec::new(),
    };
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let Some(&(_, code)) = GO_SUITES.iter().find(|(go, _)| *go == name) else {
            return Err(PolicyError::CipherSuite(name.to_owned()));
        };
        let suite = CipherSuite::from(code);
        if (0x1301..=0x1303).contains(&code) {
            continue;
        }
        if provider.cipher_suites.iter().any(|s| s.suite() == suite) {
            if !parsed.offered.contains(&suite) {
                parsed.offered.push(suite);
            }
        } else {
            parsed.unsupported.push(name.to_owned());
        }
    }
    Ok(parsed)
}

/// `--tls-curve-preferences`: Go curve names or decimal IDs. At least one must be one this
/// server offers.
pub fn curves(values: &[String]) -> Result<Parsed<NamedGroup>, PolicyError> {
    let provider = crate::provider::provider();
    let mut parsed = Parsed {
        offered: Vec::new(),
        unsupported: Vec::new(),
    };
    let values: Vec<&str> = values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .collect();
    for value in &values {
        let id = match GO_CURVES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(value))
        {
            Some(&(_, id)) => id,
            None => value
                .parse::<u16>()
                .map_err(|_| PolicyError::Curve((*value).to_owned()))?,
        };
        let group = NamedGroup::from(id);
        if provider.kx_groups.iter().any(|g| g.name() == group) {
            if !parsed.offered.contains(&group) {
                parsed.offered.push(group);
            }
        } else {
            parsed.unsupported.push((*value).to_owned());
        }
    }
    if !values.is_empty() && parsed.offered.is_empty() {
        return Err(PolicyError::NoCurve(values.join(",")));
    }
    Ok(parsed)
}

impl Policy {
    /// The provider restricted to this policy: TLS 1.3's suites always, TLS 1.2's as
    /// listed, the groups as listed; Go's order kept.
    pub(crate) fn apply(
        &self,
        mut provider: rustls::crypto::CryptoProvider,
    ) -> rustls::crypto::CryptoProvider {
        if let Some(tls12) = &self.tls12_suites {
            provider
                .cipher_suites
                .retain(|s| s.version() == &rustls::version::TLS13 || tls12.contains(&s.suite()));
        }
        if let Some(groups) = &self.groups {
            provider.kx_groups.retain(|g| groups.contains(&g.name()));
        }
        provider
    }

    /// Whether TLS 1.2 is offered: not with `tls13_only`, nor when no TLS 1.2 suite is left.
    pub(crate) fn offers_tls12(&self) -> bool {
        !self.tls13_only && self.tls12_suites.as_ref().is_none_or(|s| !s.is_empty())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn suites_keep_what_ring_has_and_report_the_rest() {
        let parsed = cipher_suites(&strings(&[
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "",
        ]))
        .unwrap();
        assert_eq!(
            parsed.offered,
            [
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
        assert_eq!(parsed.unsupported, ["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"]);
        assert_eq!(
            cipher_suites(&strings(&["TLS_FOO"]))
                .unwrap_err()
                .to_string(),
            "Cipher suite TLS_FOO not supported or doesn't exist"
        );
    }

    #[test]
    fn curves_by_name_or_id() {
        let parsed = curves(&strings(&["X25519", "23", "CurveP521", "p-384"])).unwrap();
        assert_eq!(
            parsed.offered,
            [
                NamedGroup::X25519,
                NamedGroup::secp256r1,
                NamedGroup::secp384r1
            ]
        );
        assert_eq!(parsed.unsupported, ["CurveP521"]);
        assert!(matches!(
            curves(&strings(&["CurveP521", "4588"])),
            Err(PolicyError::NoCurve(_))
        ));
        assert!(matches!(
            curves(&strings(&["Curve9"])),
            Err(PolicyError::Curve(_))
        ));
        assert!(curves(&[]).unwrap().offered.is_empty());
    }
}
