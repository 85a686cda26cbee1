//! The bearer-token authenticator: a TokenReview (authentication.k8s.io/v1) per unseen token,
//! results cached for `--authentication-token-webhook-cache-ttl` (k8s.io/apiserver
//! `request/bearertoken`, `token/cache`, `plugin/pkg/authenticator/token/webhook`), one review
//! in flight per token and the reviews made held to the budget of [`super::review`].

use std::net::IpAddr;
use std::time::Duration;

use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

use super::UserInfo;
use super::review::{self, Attempt, Budget, CAPACITY, Failure, Limiter, ReviewLimits, Reviews};

/// Upstream's error when a token is neither accepted nor rejected with a reason.
const INVALID_TOKEN: &str = "invalid bearer token";

/// What a review said about a token.
#[derive(Debug, Clone)]
pub(crate) enum Review {
    /// Authenticated as this user.
    User(UserInfo),
    /// Not authenticated; the reason.
    Rejected(String),
}

/// Reviews tokens through the Kubernetes API.
#[derive(Debug)]
pub(crate) struct TokenReviewer {
    api: Api<TokenReview>,
    ttl: Duration,
    timeout: Duration,
    /// Keyed by the SHA-256 of the token, never the token.
    reviews: Reviews<[u8; 32], Review>,
    limiter: Limiter,
}

impl TokenReviewer {
    pub(crate) fn new(
        client: kube::Client,
        ttl: Duration,
        timeout: Duration,
        limits: ReviewLimits,
    ) -> Self {
        TokenReviewer {
            api: Api::all(client),
            ttl,
            timeout,
            reviews: Reviews::new(CAPACITY),
            limiter: Limiter::new(limits),
        }
    }

    /// Reviews `token`, from the cache when a review of it is younger than the TTL, else
    /// with the review in flight for it, else with a call of its own if `source` (none: the
    /// front proxy's) and everyone together are within the review budget. A failed call is
    /// not cached.
    pub(crate) async fn review(
        &self,
        token: &str,
        source: Option<IpAddr>,
    ) -> Result<Review, Failure> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.reviews
            .get_or_review(&key, || async {
                self.limiter
                    .check(Budget::of(source))
                    .map_err(Failure::Throttled)?;
                let review = review::call_with_retry(|| self.call(token)).await?;
                Ok((review, self.ttl))
            })
            .await
    }

    async fn call(&self, token: &str) -> Result<Review, Attempt> {
        let request = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let params = PostParams::default();
        let call = self.api.create(&params, &request);
        let response = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(Attempt::from_kube("TokenReview", &error)),
            Err(_) => return Err(Attempt::timed_out("TokenReview", self.timeout)),
        };
        let status = response.status.unwrap_or_default();
        Ok(if status.authenticated == Some(true) {
            let user = status.user.unwrap_or_default();
            Review::User(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            })
        } else {
            Review::Rejected(
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| INVALID_TOKEN.to_owned()),
            )
        })
    }

    /// Callers waiting on the review in flight for `token`.
    #[cfg(test)]
    pub(crate) fn waiting(&self, token: &str) -> usize {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.reviews.waiting(&key)
    }
}

/// The bearer token of an `Authorization` header, parsed as upstream's `bearertoken.go`:
/// `Bearer <token>` (scheme case-insensitive); an empty token is no token.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return None;
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn with(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn bearer_parsing_follows_upstream() {
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer abc extra")), Some("abc"));
        assert_eq!(bearer(&with("  Bearer abc  ")), Some("abc"));
        assert_eq!(
            bearer(&with("Bearer  abc")),
            None,
            "empty token before a second space"
        );
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
