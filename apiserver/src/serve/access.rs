//! The delegated authentication and authorization steps of the filter chain, in
//! k8s.io/apiserver's `DefaultBuildHandlerChain` order: [`Authentication`] first (401 on a
//! rejected credential), then whatever load shedding sits between, then [`Authorization`]
//! (403 with the upstream wording on a deny), so a shed request costs no SubjectAccessReview.

use std::sync::Arc;

use futures::future::BoxFuture;
use http::request::Parts;

use super::router::{Filter, PeerCertificates, Verdict};
use crate::auth::{self, Authenticator, Authorizer, Decision, UserInfo};
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
            match self
                .authenticator
                .authenticate(&mut parts.headers, chain.as_deref())
                .await
            {
                Ok(user) => {
                    parts.extensions.insert(user);
                    Verdict::Pass(None)
                }
                Err(error) => {
                    tracing::debug!(%error, path = parts.uri.path(), "unable to authenticate the request");
                    Verdict::Reject(Status::unauthorized().into_negotiated(&parts.headers))
                }
            }
        })
    }
}

/// Authorizes every request (`WithAuthorization`) for the [`UserInfo`] that
/// [`Authentication`] left in the extensions (anonymous when there is none): always-allowed
/// groups and paths, else a cached SubjectAccessReview. The request's
/// [`Attributes`](auth::Attributes) go into the extensions too; a deny is a 403 Status.
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
            let attrs = auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
            let anonymous;
            let user = match parts.extensions.get::<UserInfo>() {
                Some(user) => user,
                None => {
                    anonymous = UserInfo::anonymous();
                    &anonymous
                }
            };
            let verdict = match self.authorizer.authorize(user, &attrs).await {
                Decision::Allow => Verdict::Pass(None),
                Decision::Deny(reason) => {
                    tracing::debug!(user = %user.name, path = parts.uri.path(), %reason, "forbidden");
                    Verdict::Reject(
                        auth::forbidden(user, &attrs, &reason).into_negotiated(&parts.headers),
                    )
                }
            };
            parts.extensions.insert(attrs);
            verdict
        })
    }
}
