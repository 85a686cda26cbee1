//! `Impersonate-*` headers, as k8s.io/apiserver's `WithImpersonation` reads them: the
//! authenticated user asks to act as another user (`Impersonate-User`, a service account when
//! it is `system:serviceaccount:<ns>:<name>`), with groups (`Impersonate-Group`), a UID
//! (`Impersonate-Uid`) and extras (`Impersonate-Extra-<key>`). Each is one `impersonate`
//! authorization check for the requester; all must pass, and the request then goes on as the
//! impersonated user, the headers removed.
//!
//! Requests through kube-aggregator never carry these (kube-apiserver impersonates before it
//! proxies and strips them); a client talking to the server directly may.

use std::collections::BTreeMap;

use http::HeaderMap;

use super::attributes::{Attributes, ResourceRequest};
use super::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED, UserInfo};
use crate::api::query::unescape_path;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// What one header asks to be (`v1.ObjectReference` upstream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `Impersonate-User` naming a service account.
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// `Impersonate-User`.
    User(String),
    /// One `Impersonate-Group`.
    Group(String),
    /// One value of `Impersonate-Extra-<key>`.
    Extra {
        /// The key: lower-cased, percent-decoded.
        key: String,
        /// The value.
        value: String,
    },
    /// `Impersonate-Uid`.
    Uid(String),
}

/// Whether a request may ask to impersonate (a cheap look at the header names, no
/// allocation; [`requests`] reads what it asks).
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// The impersonation requests of these headers, in upstream's order (user, groups, extras,
/// UID). `Err` is the 500 upstream answers when groups, extras or a UID come without a user.
pub fn requests(headers: &HeaderMap) -> Result<Vec<Request>, String> {
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut out = Vec::new();
    let user = headers.get(USER).map(text).filter(|u| !u.is_empty());
    if let Some(user) = &user {
        out.push(match service_account(user) {
            Some((namespace, name)) => Request::ServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            None => Request::User(user.clone()),
        });
    }
    out.extend(
        headers
            .get_all(GROUP)
            .iter()
            .map(|g| Request::Group(text(g))),
    );
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            // Header names are lower case already; a key that does not decode stays as is.
            let key = unescape_path(key).map_or_else(|| key.to_owned(), |k| k.into_owned());
            out.push(Request::Extra {
                key,
                value: text(value),
            });
        }
    }
    if let Some(uid) = headers.get(UID).map(text).filter(|u| !u.is_empty()) {
        out.push(Request::Uid(uid));
    }
    if user.is_none() && !out.is_empty() {
        let refs: Vec<String> = out.iter().map(Request::go_struct).collect();
        return Err(format!(
            "requested [{}] without impersonating a user",
            refs.join(" ")
        ));
    }
    Ok(out)
}

/// `serviceaccount.SplitUsername`: `system:serviceaccount:<ns>:<name>` with a valid namespace
/// (an RFC 1123 label) and name (an RFC 1123 subdomain).
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    let label = namespace.len() <= 63
        && !namespace.contains('.')
        && scraper::selector::is_dns1123_subdomain(namespace);
    let subdomain =
        name.len() <= 253 && !name.contains(':') && scraper::selector::is_dns1123_subdomain(name);
    (label && subdomain).then_some((namespace, name))
}

impl Request {
    /// The `impersonate` check for this request.
    pub fn attributes(&self) -> Attributes {
        let (group, version, resource, subresource, namespace, name) = match self {
            Request::ServiceAccount { namespace, name } => (
                "",
                "",
                "serviceaccounts",
                "",
                namespace.as_str(),
                name.as_str(),
            ),
            Request::User(name) => ("", "", "users", "", "", name.as_str()),
            Request::Group(name) => ("", "", "groups", "", "", name.as_str()),
            Request::Extra { key, value } => (
                "authentication.k8s.io",
                "v1",
                "userextras",
                key.as_str(),
                "",
                value.as_str(),
            ),
            Request::Uid(uid) => ("authentication.k8s.io", "v1", "uids", "", "", uid.as_str()),
        };
        Attributes::Resource(ResourceRequest {
            verb: "impersonate".to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ..ResourceRequest::default()
        })
    }

    /// Go's `%v` of the `v1.ObjectReference` upstream builds (Kind, Namespace, Name, UID,
    /// APIVersion, ResourceVersion, FieldPath), for its error message.
    fn go_struct(&self) -> String {
        const AUTHN: &str = "authentication.k8s.io/v1";
        let (kind, namespace, name, api_version, field_path) = match self {
            Request::ServiceAccount { namespace, name } => {
                ("ServiceAccount", namespace.as_str(), name.as_str(), "", "")
            }
            Request::User(name) => ("User", "", name.as_str(), "", ""),
            Request::Group(name) => ("Group", "", name.as_str(), "", ""),
            Request::Extra { key, value } => ("UserExtra", "", value.as_str(), AUTHN, key.as_str()),
            Request::Uid(uid) => ("UID", "", uid.as_str(), AUTHN, ""),
        };
        format!("{{{kind} {namespace} {name}  {api_version}  {field_path}}}")
    }
}

/// The user the requests (all allowed) make: the named user or service account, its groups
/// (a service account's own two when none are named), `system:authenticated` (or
/// `system:unauthenticated` for `system:anonymous`) unless named, extras and UID.
pub fn user(requests: &[Request]) -> UserInfo {
    let groups_named = requests.iter().any(|r| matches!(r, Request::Group(_)));
    let mut user = UserInfo::default();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in requests {
        match r {
            Request::ServiceAccount { namespace, name } => {
                user.name = format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}");
                if !groups_named {
                    user.groups = vec![
                        "system:serviceaccounts".to_owned(),
                        format!("system:serviceaccounts:{namespace}"),
                    ];
                }
            }
            Request::User(name) => user.name.clone_from(name),
            Request::Group(group) => user.groups.push(group.clone()),
            Request::Extra { key, value } => {
                extra.entry(key.clone()).or_default().push(value.clone())
            }
            Request::Uid(uid) => user.uid.clone_from(uid),
        }
    }
    let has = |g: &str| user.groups.iter().any(|x| x == g);
    if user.name == ANONYMOUS {
        if !has(UNAUTHENTICATED) {
            user.groups.push(UNAUTHENTICATED.to_owned());
        }
    } else if !has(AUTHENTICATED) && !has(UNAUTHENTICATED) {
        user.groups.push(AUTHENTICATED.to_owned());
    }
    user.extra = extra;
    user
}

/// Removes the impersonation headers (user, groups, UID, extras), once the request goes on
/// as the impersonated user.
pub fn strip(headers: &mut HeaderMap) {
    let names: Vec<http::HeaderName> = headers
        .keys()
        .filter(|k| {
            matches!(k.as_str(), USER | GROUP | UID) || k.as_str().starts_with(EXTRA_PREFIX)
        })
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn headers_become_requests_in_upstreams_order() {
        let h = headers(&[
            ("Impersonate-Uid", "1234"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-example.org%2Fteam", "a"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-User", "jane"),
            ("Accept", "application/json"),
        ]);
        assert!(requested(&h));
        let r = requests(&h).unwrap();
        assert_eq!(r[0], Request::User("jane".into()));
        assert_eq!(
            r[1..3],
            [Request::Group("devs".into()), Request::Group("ops".into())]
        );
        assert!(r.contains(&Request::Extra {
            key: "scopes".into(),
            value: "view".into()
        }));
        assert!(r.contains(&Request::Extra {
            key: "example.org/team".into(),
            value: "a".into()
        }));
        assert_eq!(r.last(), Some(&Request::Uid("1234".into())));
        let u = user(&r);
        assert_eq!(u.name, "jane");
        assert_eq!(u.uid, "1234");
        assert_eq!(u.groups, ["devs", "ops", AUTHENTICATED]);
        assert_eq!(u.extra["scopes"], ["view"]);
        assert!(!requested(&headers(&[("Accept", "*/*")])));
    }

    #[test]
    fn a_service_account_gets_its_groups_unless_groups_are_named() {
        let r = requests(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:kube-system:hpa",
        )]))
        .unwrap();
        assert_eq!(
            r,
            [Request::ServiceAccount {
                namespace: "kube-system".into(),
                name: "hpa".into()
            }]
        );
        let u = user(&r);
        assert_eq!(u.name, "system:serviceaccount:kube-system:hpa");
        assert_eq!(
            u.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                AUTHENTICATED
            ]
        );
        let Attributes::Resource(a) = r[0].attributes() else {
            panic!()
        };
        assert_eq!(
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.namespace.as_str(),
                a.name.as_str()
            ),
            ("impersonate", "serviceaccounts", "kube-system", "hpa")
        );
        // Named groups replace them; an invalid namespace is a plain user.
        let r = requests(&headers(&[
            ("Impersonate-User", "system:serviceaccount:ns:sa"),
            ("Impersonate-Group", "system:unauthenticated"),
        ]))
        .unwrap();
        assert_eq!(user(&r).groups, ["system:unauthenticated"]);
        for odd in [
            "system:serviceaccount:Bad:sa",
            "system:serviceaccount:ns",
            "system:serviceaccount:ns:a:b",
        ] {
            assert_eq!(
                requests(&headers(&[("Impersonate-User", odd)])).unwrap(),
                [Request::User(odd.into())]
            );
        }
        // The anonymous user stays unauthenticated.
        let u = user(&[Request::User(ANONYMOUS.into())]);
        assert_eq!(u.groups, [UNAUTHENTICATED]);
    }

    #[test]
    fn groups_extras_or_a_uid_without_a_user_are_an_error() {
        let e = requests(&headers(&[("Impersonate-Group", "system:masters")])).unwrap_err();
        assert_eq!(
            e,
            "requested [{Group  system:masters    }] without impersonating a user"
        );
        let e = requests(&headers(&[
            ("Impersonate-User", ""),
            ("Impersonate-Uid", "1"),
        ]))
        .unwrap_err();
        assert_eq!(
            e,
            "requested [{UID  1  authentication.k8s.io/v1  }] without impersonating a user"
        );
        assert_eq!(requests(&headers(&[("Impersonate-User", "")])).unwrap(), []);
    }

    #[test]
    fn extras_are_checked_as_userextras_subresources() {
        let r = Request::Extra {
            key: "scopes".into(),
            value: "view".into(),
        };
        let Attributes::Resource(a) = r.attributes() else {
            panic!()
        };
        assert_eq!(
            (
                a.group.as_str(),
                a.version.as_str(),
                a.resource.as_str(),
                a.subresource.as_str(),
                a.name.as_str()
            ),
            (
                "authentication.k8s.io",
                "v1",
                "userextras",
                "scopes",
                "view"
            )
        );
        let mut h = headers(&[
            ("Impersonate-User", "a"),
            ("Impersonate-Extra-x", "1"),
            ("Accept", "*/*"),
        ]);
        strip(&mut h);
        assert_eq!(h.len(), 1);
    }
}
