//! Delegated authentication and authorization, as k8s.io/apiserver does it for every aggregated
//! API server (aggregation-contract §1.3-1.5).
//!
//! The server calls [`Authenticator::authenticate`] with the request headers and the client
//! certificate chain of the connection (requested, never required, by `tls::server`), then
//! [`attributes`] and [`Authorizer::authorize`]; [`AuthnError`] becomes
//! [`Status::unauthorized`](crate::status::Status::unauthorized) and a deny [`forbidden`].
//!
//! # Layout
//! - [`requestheader`]: the front-proxy authenticator (`X-Remote-*` behind a trusted certificate).
//! - `x509`: certificate-chain verification with the clientAuth usage; client-CA users (CN/O).
//! - `token`: bearer tokens checked by TokenReview, cached.
//! - [`configmap`]: `kube-system/extension-apiserver-authentication`, parsed and watched.
//!   `--client-ca-file` and `--requestheader-client-ca-file` each replace their half of it, as
//!   in k8s.io/apiserver (a flag's CA file, reloaded when it changes, or else the ConfigMap's,
//!   never a union of both), and are reloaded by [`Authenticator::ca_file_reloaders`].
//! - [`attributes`]: the authorization attributes of a request (`RequestInfoFactory`).
//! - [`impersonation`]: `Impersonate-*` headers (`WithImpersonation`).
//! - `sar`: the authorizer (groups, paths, SubjectAccessReview) and the 403 wording.
//! - `review`: what every review call goes through: the bounded LRU cache of answers, one
//!   call in flight per question, the review budget (429 past it), one retry of a transient
//!   failure.

pub mod attributes;
pub mod configmap;
pub mod impersonation;
pub mod requestheader;
mod review;
mod sar;
mod token;
mod x509;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http::HeaderMap;
use parking_lot::RwLock;
use rustls_pki_types::{CertificateDer, UnixTime};
use tokio_util::sync::CancellationToken;

use crate::credentials::{self, Reloader, Reloads};

pub use attributes::{Attributes, ResourceRequest, attributes};
pub use review::{Budget, ReviewLimits};
pub use sar::{Authorizer, AuthzConfig, AuthzError, Decision, forbidden, review_spec};

use requestheader::{HeaderNames, RequestHeader};
use token::{Review, TokenReviewer};
use x509::CaBundle;

/// Who is making a request (`k8s.io/apiserver/pkg/authentication/user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// UID, often empty.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (keys lower-case for front-proxy users).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The anonymous user name.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of anonymous requests.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group added to every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";

impl UserInfo {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS.to_owned(),
            groups: vec![UNAUTHENTICATED.to_owned()],
            ..UserInfo::default()
        }
    }

    /// `group.NewAuthenticatedGroupAdder`: adds `system:authenticated` unless the user is
    /// anonymous or already in it or in `system:unauthenticated`.
    fn with_authenticated_group(mut self) -> Self {
        if self.name != ANONYMOUS
            && !self
                .groups
                .iter()
                .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            self.groups.push(AUTHENTICATED.to_owned());
        }
        self
    }
}

/// The delegated authentication flags (metrics-server §1.5).
#[derive(Debug, Clone)]
pub struct AuthnConfig {
    /// `--client-ca-file`.
    pub client_ca_file: Option<PathBuf>,
    /// `--requestheader-client-ca-file`; when set, every `--requestheader-*` flag is used as
    /// is and the ConfigMap's request-header keys are ignored.
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// `--requestheader-allowed-names`.
    pub requestheader_allowed_names: Vec<String>,
    /// `--requestheader-username-headers` (default `x-remote-user`).
    pub requestheader_username_headers: Vec<String>,
    /// `--requestheader-uid-headers` (no default).
    pub requestheader_uid_headers: Vec<String>,
    /// `--requestheader-group-headers` (default `x-remote-group`).
    pub requestheader_group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix` (default `x-remote-extra-`).
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// `--authentication-token-webhook-cache-ttl`.
    pub token_webhook_cache_ttl: Duration,
    /// `--authentication-skip-lookup`.
    pub skip_lookup: bool,
    /// `--authentication-tolerate-lookup-failure`.
    pub tolerate_lookup_failure: bool,
    /// Bound on one TokenReview call.
    pub token_review_timeout: Duration,
    /// The TokenReview budget.
    pub review_limits: ReviewLimits,
}

impl Default for AuthnConfig {
    fn default() -> Self {
        let owned = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect();
        AuthnConfig {
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: owned(requestheader::DEFAULT_USERNAME_HEADERS),
            requestheader_uid_headers: Vec::new(),
            requestheader_group_headers: owned(requestheader::DEFAULT_GROUP_HEADERS),
            requestheader_extra_headers_prefix: owned(requestheader::DEFAULT_EXTRA_PREFIXES),
            token_webhook_cache_ttl: Duration::from_secs(10),
            skip_lookup: false,
            tolerate_lookup_failure: false,
            token_review_timeout: Duration::from_secs(10),
            review_limits: ReviewLimits::default(),
        }
    }
}

/// Authentication errors: configuration problems at start, and rejected requests (401).
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// A CA file or ConfigMap value is unusable.
    #[error("{0}")]
    Config(String),
    /// The ConfigMap lookup failed (and failures are not tolerated).
    #[error(
        "unable to get configmap/{name} in {namespace}: {source}",
        name = configmap::NAME,
        namespace = configmap::NAMESPACE
    )]
    Lookup {
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The lookup is wanted but there is no Kubernetes client to do it.
    #[error("looking up configmap/{} needs a Kubernetes client", configmap::NAME)]
    NoClient,
    /// An authenticator rejected the request and none accepted it: 401.
    #[error("authentication failed: {}", .0.join("; "))]
    Rejected(Vec<String>),
    /// The bearer token needs a TokenReview and the review budget is spent: 429, try again
    /// after this long.
    #[error("TokenReview budget spent; retry after {0:?}")]
    Throttled(Duration),
}

/// How a request was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Request headers behind a front-proxy client certificate (the aggregator).
    FrontProxy,
    /// A client certificate of the client CA.
    ClientCertificate,
    /// A bearer token, by TokenReview.
    Token,
    /// No credential.
    Anonymous,
}

/// An authenticated request's user and how it was authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// Who.
    pub user: UserInfo,
    /// How.
    pub via: Via,
}

/// kube-apiserver's identity headers, stripped from every request whatever is configured.
static STANDARD_HEADERS: LazyLock<HeaderNames> = LazyLock::new(HeaderNames::standard);

/// The trust currently in force.
#[derive(Debug, Default)]
struct Trust {
    request_header: Option<RequestHeader>,
    client_ca: Option<CaBundle>,
}

/// The CA files as read at start, until [`Authenticator::ca_file_reloaders`] takes them.
#[derive(Debug, Default)]
struct CaFiles {
    client_ca: Option<credentials::Read>,
    request_header: Option<credentials::Read>,
}

/// The authenticator chain: request header, client certificate, bearer token, anonymous.
pub struct Authenticator {
    /// `client_ca_file` and `requestheader_client_ca_file`, when set, win over the ConfigMap.
    config: AuthnConfig,
    trust: RwLock<Arc<Trust>>,
    ca_files: parking_lot::Mutex<CaFiles>,
    tokens: Option<TokenReviewer>,
    client: Option<kube::Client>,
    /// The client of the ConfigMap watch; `client` unless [`Authenticator::with_watch_client`].
    watch_client: Option<kube::Client>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("trust", &*self.trust.read())
            .field("tokens", &self.tokens.is_some())
            .finish_non_exhaustive()
    }
}

/// A client for TokenReview, SubjectAccessReview and the ConfigMap: kube's default retries
/// (many, with long backoff) off, and short timeouts, so a slow API server fails a request
/// quickly instead of holding it.
pub fn review_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(10));
    config.write_timeout = Some(Duration::from_secs(10));
    kube::Client::try_from(config)
}

impl Authenticator {
    /// Reads the CA files, then (unless `skip_lookup`, or both CAs come from flags) loads the
    /// ConfigMap once. A ConfigMap that does not exist is not an error (as upstream); any
    /// other lookup failure is, unless `tolerate_lookup_failure`. `client` (see
    /// [`review_client`]) also enables bearer tokens.
    pub async fn new(
        config: AuthnConfig,
        client: Option<kube::Client>,
    ) -> Result<Self, AuthnError> {
        let mut ca_files = CaFiles::default();
        let flag_client_ca = match &config.client_ca_file {
            Some(path) => {
                let (ca, read) = ca_file(path)?;
                ca_files.client_ca = Some(read);
                Some(ca)
            }
            None => None,
        };
        let flag_request_header = match &config.requestheader_client_ca_file {
            Some(path) => Some(RequestHeader {
                ca: {
                    let (ca, read) = ca_file(path)?;
                    ca_files.request_header = Some(read);
                    ca
                },
                allowed_names: config.requestheader_allowed_names.clone(),
                headers: HeaderNames::new(
                    &config.requestheader_username_headers,
                    &config.requestheader_uid_headers,
                    &config.requestheader_group_headers,
                    &config.requestheader_extra_headers_prefix,
                ),
            }),
            None => None,
        };
        let tokens = client.clone().map(|c| {
            TokenReviewer::new(
                c,
                config.token_webhook_cache_ttl,
                config.token_review_timeout,
                config.review_limits,
            )
        });
        let auth = Authenticator {
            trust: RwLock::new(Arc::new(Trust {
                request_header: flag_request_header,
                client_ca: flag_client_ca,
            })),
            ca_files: parking_lot::Mutex::new(ca_files),
            tokens,
            watch_client: client.clone(),
            client,
            config,
        };
        if auth.lookup_wanted() {
            auth.lookup().await?;
        }
        Ok(auth)
    }

    fn lookup_wanted(&self) -> bool {
        !self.config.skip_lookup
            && (self.config.client_ca_file.is_none()
                || self.config.requestheader_client_ca_file.is_none())
    }

    async fn lookup(&self) -> Result<(), AuthnError> {
        let result = match &self.client {
            None => Err(AuthnError::NoClient),
            Some(client) => match configmap::get(client.clone()).await {
                Ok(Some(data)) => self.update_from_configmap(&data),
                Ok(None) => {
                    tracing::warn!(
                        configmap = configmap::NAME,
                        "authentication configmap not found; going on without it"
                    );
                    Ok(())
                }
                Err(error) => Err(AuthnError::Lookup {
                    source: Box::new(error),
                }),
            },
        };
        match result {
            Err(error) if self.config.tolerate_lookup_failure => {
                tracing::warn!(%error, "continuing without the in-cluster authentication configuration; requests may be treated as anonymous");
                Ok(())
            }
            other => other,
        }
    }

    /// Uses `client` for the ConfigMap watch. A watch is a long poll that is quiet for
    /// minutes, so it needs kube's default read timeout (295 s), not the short one of
    /// [`review_client`], which would end the watch (and relist) every few seconds.
    pub fn with_watch_client(mut self, client: kube::Client) -> Self {
        self.watch_client = Some(client);
        self
    }

    /// Whether [`Authenticator::run_watch`] has anything to watch: the lookup is wanted (not
    /// skipped, and a CA is left to the ConfigMap) and there is a client.
    pub fn watches_configmap(&self) -> bool {
        self.watch_client.is_some() && self.lookup_wanted()
    }

    /// Watches the ConfigMap until `shutdown` and applies every change (rotated CAs, new
    /// allowed names or header names take effect at once). Returns at once when there is
    /// nothing to watch ([`Authenticator::watches_configmap`] is false). The caller owns
    /// the task that runs it.
    pub async fn run_watch(&self, shutdown: CancellationToken) {
        let Some(client) = self.watch_client.clone().filter(|_| self.lookup_wanted()) else {
            return;
        };
        configmap::watch(self, client, shutdown).await;
    }

    /// Applies the ConfigMap's `data` to whatever the flags leave unset. Each half (client CA,
    /// request-header settings) that parses is applied; one that does not keeps its previous
    /// value and is reported.
    pub fn update_from_configmap(&self, data: &BTreeMap<String, String>) -> Result<(), AuthnError> {
        let parsed = configmap::parse(data);
        let mut errors = Vec::new();
        let mut trust = self.trust.write();
        let mut next = Trust {
            request_header: trust.request_header.clone(),
            client_ca: trust.client_ca.clone(),
        };
        if self.config.client_ca_file.is_none() {
            match parsed.client_ca {
                Ok(ca) => next.client_ca = ca,
                Err(e) => errors.push(e),
            }
        }
        if self.config.requestheader_client_ca_file.is_none() {
            match parsed.request_header {
                Ok(keys) => {
                    let or_flag = |from_map: Vec<String>, flag: &Vec<String>| {
                        if from_map.is_empty() {
                            flag.clone()
                        } else {
                            from_map
                        }
                    };
                    let c = &self.config;
                    next.request_header = keys.ca.map(|ca| RequestHeader {
                        ca,
                        allowed_names: keys.allowed_names,
                        headers: HeaderNames::new(
                            &or_flag(keys.username, &c.requestheader_username_headers),
                            &or_flag(keys.uid, &c.requestheader_uid_headers),
                            &or_flag(keys.group, &c.requestheader_group_headers),
                            &or_flag(keys.extra_prefixes, &c.requestheader_extra_headers_prefix),
                        ),
                    });
                }
                Err(e) => errors.push(e),
            }
        }
        *trust = Arc::new(next);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(AuthnError::Config(errors.join("; ")))
        }
    }

    /// A reloader for each CA file flag (`--client-ca-file`, `--requestheader-client-ca-file`):
    /// a changed file takes effect from the next request on, for every connection (the chain
    /// is verified per request); a bad one is logged and the last good CA kept. The ConfigMap
    /// keeps updating whatever the flags leave to it. Only the first call returns them.
    pub fn ca_file_reloaders(self: &Arc<Self>, reloads: &Reloads) -> Vec<Reloader> {
        let files = std::mem::take(&mut *self.ca_files.lock());
        let mut reloaders = Vec::new();
        if let Some(read) = files.client_ca {
            let auth = Arc::clone(self);
            reloaders.push(Reloader::new(
                "client CA file",
                &read,
                reloads.clone(),
                move |read| {
                    let ca = ca_bundle(read)?;
                    let mut trust = auth.trust.write();
                    *trust = Arc::new(Trust {
                        request_header: trust.request_header.clone(),
                        client_ca: Some(ca),
                    });
                    Ok(())
                },
            ));
        }
        if let Some(read) = files.request_header {
            let auth = Arc::clone(self);
            reloaders.push(Reloader::new(
                "request-header client CA file",
                &read,
                reloads.clone(),
                move |read| {
                    let ca = ca_bundle(read)?;
                    let mut trust = auth.trust.write();
                    *trust = Arc::new(Trust {
                        request_header: trust
                            .request_header
                            .clone()
                            .map(|rh| RequestHeader { ca, ..rh }),
                        client_ca: trust.client_ca.clone(),
                    });
                    Ok(())
                },
            ));
        }
        reloaders
    }

    /// Authenticates a request. `peer_chain` is the client certificate chain of the TLS
    /// connection, leaf first. Every identity header (`X-Remote-*` and the configured ones) is
    /// removed whatever the outcome, and `Authorization` once authenticated. `Err` means 401.
    pub async fn authenticate(
        &self,
        headers: &mut HeaderMap,
        peer_chain: Option<&[CertificateDer<'static>]>,
    ) -> Result<UserInfo, AuthnError> {
        self.authenticate_from(headers, peer_chain, None)
            .await
            .map(|a| a.user)
    }

    /// [`Authenticator::authenticate`] for a request from `source`, whose TokenReview (if it
    /// needs one) counts against that address's review budget as well as the global one.
    pub async fn authenticate_from(
        &self,
        headers: &mut HeaderMap,
        peer_chain: Option<&[CertificateDer<'static>]>,
        source: Option<IpAddr>,
    ) -> Result<Authenticated, AuthnError> {
        let authenticated = self
            .chain(headers, peer_chain, source, UnixTime::now())
            .await;
        if authenticated.is_ok() {
            headers.remove(http::header::AUTHORIZATION);
        }
        authenticated
    }

    async fn chain(
        &self,
        headers: &mut HeaderMap,
        peer_chain: Option<&[CertificateDer<'static>]>,
        source: Option<IpAddr>,
        now: UnixTime,
    ) -> Result<Authenticated, AuthnError> {
        let trust = Arc::clone(&self.trust.read());
        let chain = peer_chain.filter(|c| !c.is_empty());
        let mut errors = Vec::new();
        let mut user = None;

        if let (Some(rh), Some(chain)) = (&trust.request_header, chain) {
            match rh.authenticate(headers, chain, now) {
                Ok(found) => user = found.map(|u| (u, Via::FrontProxy)),
                Err(e) => errors.push(e),
            }
        }
        if let Some(rh) = &trust.request_header {
            requestheader::clear(headers, &rh.headers);
        }
        requestheader::clear(headers, &STANDARD_HEADERS);

        if user.is_none()
            && let (Some(ca), Some(chain)) = (&trust.client_ca, chain)
        {
            match ca.verify(chain, now) {
                Ok(subject) if !subject.common_name.is_empty() => {
                    let found = UserInfo {
                        name: subject.common_name,
                        groups: subject.organizations,
                        ..UserInfo::default()
                    };
                    user = Some((found, Via::ClientCertificate));
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("verifying client certificate: {e}")),
            }
        }

        if user.is_none()
            && let (Some(tokens), Some(token)) = (&self.tokens, token::bearer(headers))
        {
            match tokens.review(token, source).await {
                Ok(Review::User(u)) => user = Some((u, Via::Token)),
                Ok(Review::Rejected(reason)) => errors.push(reason),
                Err(review::Failure::Throttled(wait)) => return Err(AuthnError::Throttled(wait)),
                // As upstream: a review that cannot be made is a failed authentication.
                Err(review::Failure::Call(e)) => errors.push(e),
            }
        }

        match user {
            Some((user, via)) => Ok(Authenticated {
                user: user.with_authenticated_group(),
                via,
            }),
            None if errors.is_empty() => Ok(Authenticated {
                user: UserInfo::anonymous(),
                via: Via::Anonymous,
            }),
            None => {
                tracing::debug!(errors = ?errors, "request rejected by authentication");
                Err(AuthnError::Rejected(errors))
            }
        }
    }
}

/// A CA file flag, read and parsed at start.
fn ca_file(path: &std::path::Path) -> Result<(CaBundle, credentials::Read), AuthnError> {
    let read = credentials::read(vec![path.to_path_buf()])
        .map_err(|e| AuthnError::Config(e.to_string()))?;
    let ca =
        ca_bundle(&read).map_err(|reason| AuthnError::Config(read.invalid(reason).to_string()))?;
    Ok((ca, read))
}

/// The CA bundle of a CA file (errors without the path: the caller names it).
fn ca_bundle(read: &credentials::Read) -> Result<CaBundle, String> {
    let pem = read.contents.first().map_or(&[][..], Vec::as_slice);
    CaBundle::from_pem(pem, "CA bundle")
}
