//! `TokenReview` (authentication.k8s.io/v1) and `SubjectAccessReview` (authorization.k8s.io/v1),
//! answered from the control plane's token map and a configurable policy, with a record of
//! every review received (what the server under test asked, and as whom).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use super::authn::{Authenticator, User};

/// The attributes of one access request, read from a SubjectAccessReview spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// `spec.user`.
    pub user: String,
    /// `spec.uid`.
    pub uid: String,
    /// `spec.groups`.
    pub groups: Vec<String>,
    /// `spec.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
    /// The verb (`get`, `list`, `watch`, ...), resource or non-resource.
    pub verb: String,
    /// `resourceAttributes.namespace`.
    pub namespace: String,
    /// `resourceAttributes.group`.
    pub group: String,
    /// `resourceAttributes.version`.
    pub version: String,
    /// `resourceAttributes.resource`.
    pub resource: String,
    /// `resourceAttributes.subresource`.
    pub subresource: String,
    /// `resourceAttributes.name`.
    pub name: String,
    /// `nonResourceAttributes.path`, for non-resource requests.
    pub path: Option<String>,
}

impl Access {
    /// Reads the attributes of a SubjectAccessReview `spec`.
    pub fn from_spec(spec: &Value) -> Self {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let groups = spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let extra = spec
            .get("extra")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let vals = v
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| x.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (k.clone(), vals)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut access = Access {
            user: s(spec, "user"),
            uid: s(spec, "uid"),
            groups,
            extra,
            ..Access::default()
        };
        if let Some(r) = spec.get("resourceAttributes") {
            access.verb = s(r, "verb");
            access.namespace = s(r, "namespace");
            access.group = s(r, "group");
            access.version = s(r, "version");
            access.resource = s(r, "resource");
            access.subresource = s(r, "subresource");
            access.name = s(r, "name");
        } else if let Some(n) = spec.get("nonResourceAttributes") {
            access.verb = s(n, "verb");
            access.path = Some(s(n, "path"));
        }
        access
    }
}

/// The answer to one SubjectAccessReview.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// `status.allowed`.
    pub allowed: bool,
    /// `status.reason`.
    pub reason: String,
}

impl Decision {
    /// Allowed, with a reason.
    pub fn allow(reason: &str) -> Self {
        Decision {
            allowed: true,
            reason: reason.to_owned(),
        }
    }

    /// Not allowed (no opinion), with a reason.
    pub fn deny(reason: &str) -> Self {
        Decision {
            allowed: false,
            reason: reason.to_owned(),
        }
    }
}

/// Decides SubjectAccessReviews.
pub type Policy = Arc<dyn Fn(&Access) -> Decision + Send + Sync>;

/// The default policy: like a cluster where every authenticated user may read metrics and
/// discovery (`system:aggregated-metrics-reader` bound broadly, `system:discovery`), and
/// anonymous users may read only the health paths.
pub fn default_policy() -> Policy {
    Arc::new(|a: &Access| {
        if a.groups.iter().any(|g| g == "system:masters") {
            return Decision::allow("system:masters");
        }
        let authenticated = a.groups.iter().any(|g| g == super::authn::AUTHENTICATED);
        let read = matches!(a.verb.as_str(), "get" | "list" | "watch");
        if authenticated && read {
            return Decision::allow("RBAC: allowed by ClusterRoleBinding of system:authenticated");
        }
        if let Some(path) = &a.path
            && read
            && matches!(
                path.as_str(),
                "/healthz" | "/livez" | "/readyz" | "/version"
            )
        {
            return Decision::allow("RBAC: system:public-info-viewer");
        }
        Decision::deny("")
    })
}

/// One review the control plane answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Review {
    /// A TokenReview.
    Token {
        /// Who sent it.
        caller: String,
        /// `spec.token`.
        token: String,
        /// `spec.audiences`.
        audiences: Vec<String>,
        /// The answer.
        authenticated: bool,
    },
    /// A SubjectAccessReview.
    Access {
        /// Who sent it.
        caller: String,
        /// The attributes asked about.
        access: Box<Access>,
        /// The raw spec, as sent.
        spec: Value,
        /// The answer.
        decision: Decision,
    },
}

/// Answers reviews and records them.
pub struct Reviews {
    policy: RwLock<Policy>,
    record: Mutex<Vec<Review>>,
}

impl std::fmt::Debug for Reviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviews").finish_non_exhaustive()
    }
}

impl Reviews {
    /// With this policy.
    pub fn new(policy: Policy) -> Self {
        Reviews {
            policy: RwLock::new(policy),
            record: Mutex::new(Vec::new()),
        }
    }

    /// Replaces the SubjectAccessReview policy.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write() = policy;
    }

    /// Every review received so far, oldest first.
    pub fn recorded(&self) -> Vec<Review> {
        self.record.lock().clone()
    }

    /// The SubjectAccessReviews received so far.
    pub fn access_reviews(&self) -> Vec<Access> {
        self.recorded()
            .into_iter()
            .filter_map(|r| match r {
                Review::Access { access, .. } => Some(*access),
                Review::Token { .. } => None,
            })
            .collect()
    }

    /// The TokenReviews received so far, as (token, authenticated).
    pub fn token_reviews(&self) -> Vec<(String, bool)> {
        self.recorded()
            .into_iter()
            .filter_map(|r| match r {
                Review::Token {
                    token,
                    authenticated,
                    ..
                } => Some((token, authenticated)),
                Review::Access { .. } => None,
            })
            .collect()
    }

    /// Forgets what was recorded.
    pub fn clear(&self) {
        self.record.lock().clear();
    }

    /// Answers a TokenReview body; `None` when it is not one.
    pub fn token_review(
        &self,
        caller: &User,
        authn: &Authenticator,
        body: &Value,
    ) -> Option<Value> {
        let spec = body.get("spec")?;
        let token = spec.get("token")?.as_str()?.to_owned();
        let audiences: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let user = authn.token_user(&token);
        self.record.lock().push(Review::Token {
            caller: caller.name.clone(),
            token,
            audiences: audiences.clone(),
            authenticated: user.is_some(),
        });
        let status = match user {
            Some(u) => json!({
                "authenticated": true,
                "user": {"username": u.name, "uid": u.uid, "groups": u.groups, "extra": u.extra},
                "audiences": audiences,
            }),
            None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
        };
        Some(json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status,
        }))
    }

    /// Answers a SubjectAccessReview body; `None` when it is not one.
    pub fn access_review(&self, caller: &User, body: &Value) -> Option<Value> {
        let spec = body.get("spec")?;
        let access = Access::from_spec(spec);
        let policy = self.policy.read().clone();
        let decision = policy(&access);
        self.record.lock().push(Review::Access {
            caller: caller.name.clone(),
            access: Box::new(access),
            spec: spec.clone(),
            decision: decision.clone(),
        });
        let mut status = json!({"allowed": decision.allowed});
        if !decision.reason.is_empty() {
            status["reason"] = Value::from(decision.reason);
        }
        Some(json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status,
        }))
    }
}
