//! Authentication and authorization end to end: real certificates from `tls::issue::Ca`, a
//! fake Kubernetes API over HTTPS for TokenReview, SubjectAccessReview and the ConfigMap.

mod authn;
mod authz;
mod fake;

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use rustls_pki_types::CertificateDer;
use tls::issue::{Ca, LeafSpec};

use super::{Authenticator, AuthnConfig};

/// The CAs of a test cluster.
pub(super) struct Pki {
    /// kube-apiserver's `--requestheader-client-ca-file`.
    pub(super) front_proxy: Ca,
    /// kube-apiserver's `--client-ca-file`.
    pub(super) client: Ca,
    /// Trusted by nobody.
    pub(super) other: Ca,
}

impl Pki {
    pub(super) fn new() -> Self {
        Pki {
            front_proxy: Ca::new("front-proxy-ca").expect("CA"),
            client: Ca::new("kubernetes").expect("CA"),
            other: Ca::new("attacker-ca").expect("CA"),
        }
    }

    /// The ConfigMap kube-apiserver writes, with `front-proxy-client` as the allowed name.
    pub(super) fn configmap(&self) -> BTreeMap<String, String> {
        trust_data(
            self.front_proxy.cert_pem(),
            self.client.cert_pem(),
            r#"["front-proxy-client"]"#,
        )
    }
}

pub(super) fn trust_data(
    front_proxy_pem: &str,
    client_pem: &str,
    allowed_names: &str,
) -> BTreeMap<String, String> {
    [
        ("client-ca-file", client_pem),
        ("requestheader-client-ca-file", front_proxy_pem),
        ("requestheader-allowed-names", allowed_names),
        ("requestheader-username-headers", r#"["X-Remote-User"]"#),
        ("requestheader-uid-headers", r#"["X-Remote-Uid"]"#),
        ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
        (
            "requestheader-extra-headers-prefix",
            r#"["X-Remote-Extra-"]"#,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// A client certificate chain (leaf only) issued by `ca`.
pub(super) fn client_cert(ca: &Ca, cn: &str, orgs: &[&str]) -> Vec<CertificateDer<'static>> {
    leaf(ca, cn, orgs, true, false)
}

pub(super) fn leaf(
    ca: &Ca,
    cn: &str,
    orgs: &[&str],
    client: bool,
    server: bool,
) -> Vec<CertificateDer<'static>> {
    ca.issue(&LeafSpec {
        common_name: cn.to_owned(),
        organizations: orgs.iter().map(|o| (*o).to_owned()).collect(),
        sans: Vec::new(),
        server,
        client,
    })
    .expect("leaf")
    .identity
    .chain
}

/// An authenticator fed by `update_from_configmap` only (no cluster).
pub(super) async fn offline(data: &BTreeMap<String, String>) -> Authenticator {
    let config = AuthnConfig {
        skip_lookup: true,
        ..AuthnConfig::default()
    };
    let auth = Authenticator::new(config, None)
        .await
        .expect("authenticator");
    auth.update_from_configmap(data).expect("configmap applies");
    auth
}

pub(super) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

/// Whether any identity header is left.
pub(super) fn has_identity_headers(h: &HeaderMap) -> bool {
    h.keys().any(|k| k.as_str().starts_with("x-remote-"))
}

/// Moves Tokio's clock (which the review caches read) `by` forward at once, instead of
/// sleeping through a TTL: the clock is paused only for the jump, so the fake API's real
/// I/O before and after runs on a running clock (a paused one would auto-advance into the
/// review timeouts while a request waits on the socket).
pub(super) async fn jump(by: std::time::Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}
