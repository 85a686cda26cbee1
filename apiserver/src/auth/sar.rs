//! Delegated authorization (k8s.io/apiserver `pkg/authorization/authorizerfactory/delegating.go`
//! and `plugin/pkg/authorizer/webhook`): `system:masters` always, the always-allowed paths,
//! then a SubjectAccessReview whose answer is cached, one review in flight per question and
//! the reviews made held to the budget of [`super::review`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, NonResourceAttributes, ResourceAttributes,
    SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldSelectorRequirement, LabelSelectorRequirement,
};
use kube::Api;
use kube::api::PostParams;

use super::UserInfo;
use super::attributes::{Attributes, Requirement};
use super::review::{self, Attempt, Budget, CAPACITY, Failure, Limiter, ReviewLimits, Reviews};
use crate::status::{Details, Status};

/// The delegated authorization flags.
#[derive(Debug, Clone)]
pub struct AuthzConfig {
    /// `--authorization-always-allow-paths`: exact paths, or prefixes ending in `*`.
    pub always_allow_paths: Vec<String>,
    /// Groups allowed everything (k8s.io/apiserver's library default `system:masters`).
    pub always_allow_groups: Vec<String>,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
    /// Bound on one SubjectAccessReview call.
    pub timeout: Duration,
    /// The SubjectAccessReview budget.
    pub review_limits: ReviewLimits,
}

impl Default for AuthzConfig {
    fn default() -> Self {
        AuthzConfig {
            always_allow_paths: ["/healthz", "/readyz", "/livez"]
                .map(str::to_owned)
                .to_vec(),
            always_allow_groups: vec!["system:masters".to_owned()],
            authorized_ttl: Duration::from_secs(10),
            unauthorized_ttl: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
            review_limits: ReviewLimits::default(),
        }
    }
}

/// Errors building the authorizer.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// An always-allow path with `*` anywhere but at the end.
    #[error("only trailing * allowed in {0:?}")]
    Path(String),
}

/// The answer for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// 403, with the authorizer's reason (often empty).
    Deny(String),
    /// 429: the review this needs is over the review budget; try again after this long.
    Throttled(Duration),
    /// 500: the review failed (after its retry); k8s.io/apiserver answers an authorizer's
    /// error as an internal error, so a client retries instead of taking it for a "no".
    Error(String),
}

/// Authorizes requests; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Authorizer {
    groups: Vec<String>,
    exact_paths: Vec<String>,
    prefix_paths: Vec<String>,
    reviews_api: Option<Api<SubjectAccessReview>>,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    timeout: Duration,
    /// Keyed by the JSON of the review spec, as upstream.
    reviews: Reviews<String, Decision>,
    limiter: Limiter,
}

impl Authorizer {
    /// Builds the chain; without a client, everything the first two steps do not allow is
    /// denied.
    pub fn new(config: AuthzConfig, client: Option<kube::Client>) -> Result<Self, AuthzError> {
        let mut exact_paths = Vec::new();
        let mut prefix_paths = Vec::new();
        for path in &config.always_allow_paths {
            let trimmed = path.trim_start_matches('/');
            match trimmed.strip_suffix('*') {
                _ if trimmed.trim_end_matches('*').contains('*') => {
                    return Err(AuthzError::Path(path.clone()));
                }
                Some(prefix) => prefix_paths.push(prefix.to_owned()),
                None => exact_paths.push(trimmed.to_owned()),
            }
        }
        Ok(Authorizer {
            groups: config.always_allow_groups,
            exact_paths,
            prefix_paths,
            reviews_api: client.map(Api::all),
            authorized_ttl: config.authorized_ttl,
            unauthorized_ttl: config.unauthorized_ttl,
            timeout: config.timeout,
            reviews: Reviews::new(CAPACITY),
            limiter: Limiter::new(config.review_limits),
        })
    }

    /// Whether `user` is in a group allowed everything (`system:masters`): then no request of
    /// theirs needs its attributes looked at.
    pub fn allows_every_request(&self, user: &UserInfo) -> bool {
        user.groups.iter().any(|g| self.groups.contains(g))
    }

    /// Decides, with the global review budget only (see [`Authorizer::authorize_from`]).
    pub async fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        self.authorize_from(user, attrs, Budget::Global).await
    }

    /// Decides. A review this needs is made within `budget`, once per question however many
    /// ask it at once; a review that fails is an [`Decision::Error`], never an allow or a
    /// deny.
    pub async fn authorize_from(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
        budget: Budget,
    ) -> Decision {
        if self.allows_every_request(user) {
            return Decision::Allow;
        }
        if let Attributes::NonResource { path, .. } = attrs {
            let path = path.trim_start_matches('/');
            if self.exact_paths.iter().any(|p| p == path)
                || self
                    .prefix_paths
                    .iter()
                    .any(|p| path.starts_with(p.as_str()))
            {
                return Decision::Allow;
            }
        }
        let Some(api) = &self.reviews_api else {
            return Decision::Deny(String::new());
        };
        let spec = review_spec(user, attrs);
        let key = serde_json::to_string(&spec).unwrap_or_default();
        let answer = self
            .reviews
            .get_or_review(&key, || async {
                self.limiter.check(budget).map_err(Failure::Throttled)?;
                let status = review::call_with_retry(|| self.call(api, &spec)).await?;
                Ok(if status.allowed {
                    (Decision::Allow, self.authorized_ttl)
                } else {
                    (
                        Decision::Deny(status.reason.unwrap_or_default()),
                        self.unauthorized_ttl,
                    )
                })
            })
            .await;
        match answer {
            Ok(decision) => decision,
            Err(Failure::Throttled(wait)) => {
                tracing::debug!(user = %user.name, ?wait, "SubjectAccessReview over the review budget");
                Decision::Throttled(wait)
            }
            Err(Failure::Call(error)) => {
                tracing::warn!(%error, user = %user.name, "SubjectAccessReview failed");
                Decision::Error(error)
            }
        }
    }

    /// Callers waiting on the review in flight for the question keyed `key`.
    #[cfg(test)]
    pub(crate) fn waiting(&self, key: &str) -> usize {
        self.reviews.waiting(&key.to_owned())
    }

    async fn call(
        &self,
        api: &Api<SubjectAccessReview>,
        spec: &SubjectAccessReviewSpec,
    ) -> Result<SubjectAccessReviewStatus, Attempt> {
        let review = SubjectAccessReview {
            spec: spec.clone(),
            ..SubjectAccessReview::default()
        };
        let params = PostParams::default();
        match tokio::time::timeout(self.timeout, api.create(&params, &review)).await {
            Ok(Ok(answer)) => Ok(answer.status.unwrap_or_default()),
            Ok(Err(error)) => Err(Attempt::from_kube("SubjectAccessReview", &error)),
            Err(_) => Err(Attempt::timed_out("SubjectAccessReview", self.timeout)),
        }
    }
}

/// The SubjectAccessReview spec for a user and request (aggregation-contract §1.4).
pub fn review_spec(user: &UserInfo, attrs: &Attributes) -> SubjectAccessReviewSpec {
    let mut spec = SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
        groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
        extra: Some(user.extra.clone()).filter(|e: &BTreeMap<_, _>| !e.is_empty()),
        ..SubjectAccessReviewSpec::default()
    };
    match attrs {
        Attributes::NonResource { path, verb } => {
            spec.non_resource_attributes = Some(NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some(verb.clone()),
            });
        }
        Attributes::Resource(r) => {
            spec.resource_attributes = Some(ResourceAttributes {
                namespace: Some(r.namespace.clone()),
                verb: Some(r.verb.clone()),
                group: Some(r.group.clone()),
                version: Some(r.version.clone()),
                resource: Some(r.resource.clone()),
                subresource: Some(r.subresource.clone()),
                name: Some(r.name.clone()),
                label_selector: (!r.label_requirements.is_empty()).then(|| {
                    LabelSelectorAttributes {
                        raw_selector: None,
                        requirements: Some(
                            r.label_requirements.iter().map(label_requirement).collect(),
                        ),
                    }
                }),
                field_selector: (!r.field_requirements.is_empty()).then(|| {
                    FieldSelectorAttributes {
                        raw_selector: None,
                        requirements: Some(
                            r.field_requirements.iter().map(field_requirement).collect(),
                        ),
                    }
                }),
            });
        }
    }
    spec
}

fn label_requirement(r: &Requirement) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: r.key.clone(),
        operator: r.operator.to_owned(),
        values: Some(r.values.clone()).filter(|v| !v.is_empty()),
    }
}

fn field_requirement(r: &Requirement) -> FieldSelectorRequirement {
    FieldSelectorRequirement {
        key: r.key.clone(),
        operator: r.operator.to_owned(),
        values: Some(r.values.clone()).filter(|v| !v.is_empty()),
    }
}

/// The 403 Status for a denied request, worded as k8s.io/apiserver's
/// `responsewriters.Forbidden`: `pods.metrics.k8s.io is forbidden: User "alice" cannot list
/// resource "pods" in API group "metrics.k8s.io" in the namespace "default"`.
pub fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> Status {
    let username = &user.name;
    let (message, details) = match attrs {
        Attributes::NonResource { path, verb } => (
            format!("User {username:?} cannot {verb} path {path:?}"),
            Details::default(),
        ),
        Attributes::Resource(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            (
                format!(
                    "User {username:?} cannot {} resource {resource:?} in API group {:?} {scope}",
                    r.verb, r.group
                ),
                Details {
                    name: Some(r.name.clone()).filter(|n| !n.is_empty()),
                    group: Some(r.group.clone()).filter(|g| !g.is_empty()),
                    kind: Some(r.resource.clone()).filter(|k| !k.is_empty()),
                    ..Details::default()
                },
            )
        }
    };
    let message = sanitize(&message);
    let message = if reason.is_empty() {
        message
    } else {
        format!("{message}: {reason}")
    };
    let qualified = match (&details.kind, &details.group) {
        (None, _) => None,
        (Some(kind), None) => Some(kind.clone()),
        (Some(kind), Some(group)) => Some(format!("{kind}.{group}")),
    };
    let message = match (qualified, &details.name) {
        (None, _) => format!("forbidden: {message}"),
        (Some(q), None) => format!("{q} is forbidden: {message}"),
        (Some(q), Some(name)) => format!("{q} {name:?} is forbidden: {message}"),
    };
    Status::forbidden(message, Some(details))
}

/// The HTML escaping upstream applies to the message.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
