//! The request-header (front-proxy) authenticator: k8s.io/apiserver
//! `pkg/authentication/request/headerrequest/requestheader.go` behind the CA check of
//! `x509.NewDynamicCAVerifier`.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName};
use rustls_pki_types::{CertificateDer, UnixTime};

use super::UserInfo;
use super::x509::CaBundle;

/// `--requestheader-username-headers` default.
pub const DEFAULT_USERNAME_HEADERS: &[&str] = &["x-remote-user"];
/// `--requestheader-group-headers` default.
pub const DEFAULT_GROUP_HEADERS: &[&str] = &["x-remote-group"];
/// `--requestheader-extra-headers-prefix` default.
pub const DEFAULT_EXTRA_PREFIXES: &[&str] = &["x-remote-extra-"];
/// The UID header kube-apiserver sends; never a default for reading (as upstream), but always
/// stripped.
const STANDARD_UID_HEADER: &str = "x-remote-uid";

/// The header names the authenticator reads, lower-cased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderNames {
    pub(crate) username: Vec<HeaderName>,
    pub(crate) uid: Vec<HeaderName>,
    pub(crate) group: Vec<HeaderName>,
    /// Lower-cased prefixes.
    pub(crate) extra_prefixes: Vec<String>,
}

impl HeaderNames {
    /// From flag or ConfigMap strings; names that are not valid header names can never
    /// match a request and are dropped.
    pub fn new(
        username: &[String],
        uid: &[String],
        group: &[String],
        extra_prefixes: &[String],
    ) -> Self {
        HeaderNames {
            username: names(username),
            uid: names(uid),
            group: names(group),
            extra_prefixes: extra_prefixes
                .iter()
                .map(|p| p.trim().to_ascii_lowercase())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    /// kube-apiserver's standard names, stripped from every request whatever is configured.
    pub fn standard() -> Self {
        let owned = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        HeaderNames::new(
            &owned(DEFAULT_USERNAME_HEADERS),
            &owned(&[STANDARD_UID_HEADER]),
            &owned(DEFAULT_GROUP_HEADERS),
            &owned(DEFAULT_EXTRA_PREFIXES),
        )
    }
}

fn names(list: &[String]) -> Vec<HeaderName> {
    list.iter()
        .filter_map(|n| {
            let name = HeaderName::from_bytes(n.trim().as_bytes());
            if name.is_err() {
                tracing::warn!(header = %n, "ignoring an invalid request-header name");
            }
            name.ok()
        })
        .collect()
}

/// The effective request-header configuration.
#[derive(Debug, Clone)]
pub(crate) struct RequestHeader {
    pub(crate) ca: CaBundle,
    /// `requestheader-allowed-names`; empty allows any CN.
    pub(crate) allowed_names: Vec<String>,
    pub(crate) headers: HeaderNames,
}

impl RequestHeader {
    /// `Ok(None)`: abstains (the chain verified but no username header). `Err`: the chain
    /// does not verify or its CN is not allowed, so the headers are not believed.
    pub(crate) fn authenticate(
        &self,
        headers: &HeaderMap,
        chain: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<Option<UserInfo>, String> {
        let subject = self.ca.verify(chain, now)?;
        if !self.allowed_names.is_empty() && !self.allowed_names.contains(&subject.common_name) {
            return Err(format!(
                "x509: subject with cn={} is not in the allowed list",
                subject.common_name
            ));
        }
        Ok(read_user(headers, &self.headers))
    }
}

/// The user the headers name, or `None` when no username header has a value.
pub fn read_user(headers: &HeaderMap, names: &HeaderNames) -> Option<UserInfo> {
    let name = first_value(headers, &names.username)?;
    let uid = first_value(headers, &names.uid).unwrap_or_default();
    let groups = names
        .group
        .iter()
        .flat_map(|n| headers.get_all(n))
        .map(|v| lossy(v.as_bytes()))
        .filter(|v| !v.is_empty())
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for prefix in &names.extra_prefixes {
        for header in headers.keys() {
            let Some(rest) = header.as_str().strip_prefix(prefix.as_str()) else {
                continue;
            };
            let key = unescape_extra_key(rest);
            let values = extra.entry(key).or_default();
            values.extend(headers.get_all(header).iter().map(|v| lossy(v.as_bytes())));
        }
    }
    Some(UserInfo {
        name,
        uid,
        groups,
        extra,
    })
}

/// Deletes every header the authenticator reads, so nothing downstream sees them.
pub fn clear(headers: &mut HeaderMap, names: &HeaderNames) {
    for name in names.username.iter().chain(&names.uid).chain(&names.group) {
        headers.remove(name);
    }
    let extras: Vec<HeaderName> = headers
        .keys()
        .filter(|h| {
            names
                .extra_prefixes
                .iter()
                .any(|p| h.as_str().starts_with(p.as_str()))
        })
        .cloned()
        .collect();
    for name in extras {
        headers.remove(name);
    }
}

/// The first non-empty value among these headers, in order (Go `Header.Get` per name).
fn first_value(headers: &HeaderMap, names: &[HeaderName]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| headers.get(n))
        .map(|v| lossy(v.as_bytes()))
        .find(|v| !v.is_empty())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `url.PathUnescape` of the lower-cased key; a malformed escape keeps the key as is.
fn unescape_extra_key(lowercase_key: &str) -> String {
    let bytes = lowercase_key.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let valid = bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            if !valid {
                return lowercase_key.to_owned();
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    percent_encoding::percent_decode_str(lowercase_key)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn defaults() -> HeaderNames {
        let owned = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        HeaderNames::new(
            &owned(&["X-Remote-User", "X-Other-User"]),
            &owned(&["X-Remote-Uid"]),
            &owned(DEFAULT_GROUP_HEADERS),
            &owned(&["X-Remote-Extra-"]),
        )
    }

    #[test]
    fn reads_first_nonempty_username_all_groups_and_decoded_extras() {
        let mut h = HeaderMap::new();
        h.append("x-remote-user", HeaderValue::from_static(""));
        h.append("X-Other-User", HeaderValue::from_static("alice"));
        h.append("x-remote-uid", HeaderValue::from_static("u-1"));
        h.append("x-remote-group", HeaderValue::from_static("dev"));
        h.append("x-remote-group", HeaderValue::from_static(""));
        h.append("x-remote-group", HeaderValue::from_static("ops,qa"));
        h.append("X-Remote-Extra-Foo%2fbar", HeaderValue::from_static("a"));
        h.append("X-Remote-Extra-Foo%2Fbar", HeaderValue::from_static("b"));
        h.append("X-Remote-Extra-Bad%zz", HeaderValue::from_static("c"));
        let user = read_user(&h, &defaults()).expect("a user");
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, ["dev", "ops,qa"]);
        assert_eq!(user.extra["foo/bar"], ["a", "b"]);
        assert_eq!(user.extra["bad%zz"], ["c"]);
        assert_eq!(user.extra.len(), 2);
    }

    #[test]
    fn no_username_value_abstains() {
        let mut h = HeaderMap::new();
        h.append("x-remote-group", HeaderValue::from_static("system:masters"));
        assert_eq!(read_user(&h, &defaults()), None);
    }

    #[test]
    fn clear_removes_every_identity_header_and_keeps_the_rest() {
        let mut h = HeaderMap::new();
        h.append("x-remote-user", HeaderValue::from_static("a"));
        h.append("x-other-user", HeaderValue::from_static("a"));
        h.append("x-remote-uid", HeaderValue::from_static("a"));
        h.append("x-remote-group", HeaderValue::from_static("a"));
        h.append("x-remote-group", HeaderValue::from_static("b"));
        h.append("x-remote-extra-k", HeaderValue::from_static("a"));
        h.append("accept", HeaderValue::from_static("*/*"));
        clear(&mut h, &defaults());
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }
}
