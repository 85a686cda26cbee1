//! The delegated authentication and authorization steps of the filter chain, in
//! k8s.io/apiserver's `DefaultBuildHandlerChain` order: [`Authentication`] first (401 on a
//! rejected credential), [`Impersonation`] (403 unless the user may act as whom its
//! `Impersonate-*` headers name), then whatever load shedding sits between, then
//! [`Authorization`] (403 with the upstream wording on a deny), so a shed request costs no
//! SubjectAccessReview.
//! A review over the review budget is a 429 with `Retry-After` (never for a request that is
//! never shed: kube-aggregator's own, and discovery, OpenAPI and health); a review that fails
//! is a 500, as k8s.io/apiserver answers an authorizer's error.

use std::time::Duration;

use std::sync::Arc;

use futures::future::BoxFuture;
use http::request::Parts;

use super::router::{Filter, PeerCertificates, RemoteAddr, Verdict};
use crate::audit::{Authorized, Received};
use crate::auth::{
    self, Authenticator, AuthnError, Authorizer, Budget, Decision, UserInfo, Via, impersonation,
};
use crate::shed::class::{Class, class_of, exempt_path};
use crate::status::Status;

/// Authenticates every request (`WithAuthentication`): front-proxy headers behind a trusted
/// certificate, a client-CA certificate, a bearer token, or anonymous. On success the
/// [`UserInfo`] goes into the request's extensions and every identity header (and
/// `Authorization`) is gone from its headers; a credential that fails is a 401 Status.
#[derive(Debug)]
pub struct Authentication {
    authenticator: Arc<Authenticator>,
}

impl Authentication {
    /// The filter over this authenticator.
    pub fn new(authenticator: Arc<Authenticator>) -> Self {
        Authentication { authenticator }
    }
}

impl Filter for Authentication {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let chain = parts
                .extensions
                .get::<PeerCertificates>()
                .map(|p| p.0.clone());
            let source = parts.extensions.get::<RemoteAddr>().map(|a| a.0.ip());
            match self
                .authenticator
                .authenticate_from(&mut parts.headers, chain.as_deref(), source)
                .await
            {
                Ok(authenticated) => {
                    parts.extensions.insert(authenticated.user);
                    parts.extensions.insert(authenticated.via);
                    Verdict::Pass(None)
                }
                Err(AuthnError::Throttled(wait)) => {
                    Verdict::Reject(too_many_requests(wait).into_negotiated(&parts.headers))
                }
                Err(error) => {
                    tracing::debug!(%error, path = parts.uri.path(), "unable to authenticate the request");
                    Verdict::Reject(Status::unauthorized().into_negotiated(&parts.headers))
                }
            }
        })
    }
}

/// Acts on `Impersonate-*` headers (`WithImpersonation`): each thing asked for is an
/// `impersonate` check for the authenticated user; when all pass, the impersonated user
/// replaces it in the extensions and the headers are removed. A denied check is a 403 (also
/// when the review failed, as upstream), groups, extras or a UID without a user a 500.
#[derive(Debug)]
pub struct Impersonation {
    authorizer: Arc<Authorizer>,
}

impl Impersonation {
    /// The filter over this authorizer.
    pub fn new(authorizer: Arc<Authorizer>) -> Self {
        Impersonation { authorizer }
    }
}

impl Filter for Impersonation {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if !impersonation::requested(&parts.headers) {
                return Verdict::Pass(None);
            }
            let requests = match impersonation::requests(&parts.headers) {
                Ok(r) if r.is_empty() => return Verdict::Pass(None),
                Ok(r) => r,
                Err(error) => {
                    return Verdict::Reject(
                        Status::internal(format!("Internal error occurred: {error}"))
                            .into_negotiated(&parts.headers),
                    );
                }
            };
            let requester = parts
                .extensions
                .get::<UserInfo>()
                .cloned()
                .unwrap_or_else(UserInfo::anonymous);
            let budget = budget(parts, &requester);
            for request in &requests {
                let attrs = request.attributes();
                match self
                    .authorizer
                    .authorize_from(&requester, &attrs, budget)
                    .await
                {
                    Decision::Allow => {}
                    Decision::Throttled(wait) => {
                        return Verdict::Reject(
                            too_many_requests(wait).into_negotiated(&parts.headers),
                        );
                    }
                    Decision::Deny(reason) | Decision::Error(reason) => {
                        tracing::debug!(user = %requester.name, ?request, %reason, "impersonation forbidden");
                        return Verdict::Reject(
                            auth::forbidden(&requester, &attrs, &reason)
                                .into_negotiated(&parts.headers),
                        );
                    }
                }
            }
            let user = impersonation::user(&requests);
            tracing::debug!(user = %requester.name, impersonating = %user.name, "impersonating");
            impersonation::strip(&mut parts.headers);
            parts.extensions.insert(user);
            Verdict::Pass(None)
        })
    }
}

/// Which review budget a request's reviews are held to: none for requests that are never
/// shed; the global one for the front proxy's (they carry every user's); else the source
/// address's.
fn budget(parts: &Parts, user: &UserInfo) -> Budget {
    if class_of(Some(user)) == Class::Exempt || exempt_path(parts.uri.path()) {
        return Budget::Exempt;
    }
    match (
        parts.extensions.get::<Via>(),
        parts.extensions.get::<RemoteAddr>(),
    ) {
        (Some(Via::FrontProxy), _) | (_, None) => Budget::Global,
        (_, Some(remote)) => Budget::Source(remote.0.ip()),
    }
}

/// Authorizes every request (`WithAuthorization`) for the [`UserInfo`] that
/// [`Authentication`] left in the extensions (anonymous when there is none): always-allowed
/// groups and paths, else a cached SubjectAccessReview. The request's
/// [`Attributes`](auth::Attributes) go into the extensions too, unless the user's group is
/// allowed everything (then they are never derived); a deny is a 403 Status.
#[derive(Debug)]
pub struct Authorization {
    authorizer: Arc<Authorizer>,
}

impl Authorization {
    /// The filter over this authorizer.
    pub fn new(authorizer: Arc<Authorizer>) -> Self {
        Authorization { authorizer }
    }
}

impl Filter for Authorization {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let anonymous;
            let user = match parts.extensions.get::<UserInfo>() {
                Some(user) => user,
                None => {
                    anonymous = UserInfo::anonymous();
                    &anonymous
                }
            };
            // A group allowed everything needs no attributes: not deriving them (a dozen
            // strings and the selectors parsed) is ~6 % of an HPA-shaped request's CPU.
            // The decision goes to the audit log's annotations, when there is an audit log.
            let auditing = parts.extensions.get::<Received>().is_some();
            if self.authorizer.allows_every_request(user) {
                if auditing {
                    parts.extensions.insert(Authorized::Allow(String::new()));
                }
                return Verdict::Pass(None);
            }
            let attrs = auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
            let budget = budget(parts, user);
            let (verdict, authorized) = match self
                .authorizer
                .authorize_from(user, &attrs, budget)
                .await
            {
                Decision::Allow => (Verdict::Pass(None), Some(Authorized::Allow(String::new()))),
                Decision::Throttled(wait) => (
                    Verdict::Reject(too_many_requests(wait).into_negotiated(&parts.headers)),
                    None,
                ),
                Decision::Error(error) => (
                    Verdict::Reject(
                        Status::internal(format!("Internal error occurred: {error}"))
                            .into_negotiated(&parts.headers),
                    ),
                    Some(Authorized::Error),
                ),
                Decision::Deny(reason) => {
                    tracing::debug!(user = %user.name, path = parts.uri.path(), %reason, "forbidden");
                    let verdict = Verdict::Reject(
                        auth::forbidden(user, &attrs, &reason).into_negotiated(&parts.headers),
                    );
                    (verdict, Some(Authorized::Forbid(reason)))
                }
            };
            if let Some(authorized) = authorized.filter(|_| auditing) {
                parts.extensions.insert(authorized);
            }
            parts.extensions.insert(attrs);
            verdict
        })
    }
}

/// The 429 for a request whose review is over the review budget, `Retry-After` rounded up to
/// whole seconds.
fn too_many_requests(wait: Duration) -> Status {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Status::too_many_requests(
        "Too many requests, please try again later.",
        u32::try_from(seconds.max(1)).unwrap_or(u32::MAX),
    )
}
