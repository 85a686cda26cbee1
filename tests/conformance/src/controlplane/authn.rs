//! Authentication of the control plane's own clients, as kube-apiserver does it: client
//! certificates issued by the cluster CA (user = CN, groups = O), bearer tokens from a static
//! map, otherwise anonymous.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::{CertificateDer, UnixTime};

/// The anonymous user name.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group every authenticated user gets.
pub const AUTHENTICATED: &str = "system:authenticated";

/// An authenticated identity (kube-apiserver's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID; empty when unknown.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// A user with these groups (`system:authenticated` is added when authenticating).
    pub fn new(name: &str, groups: &[&str]) -> Self {
        User {
            name: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        User::new(ANONYMOUS, &["system:unauthenticated"])
    }

    /// Whether this is the anonymous user.
    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS
    }

    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_owned());
        }
        self
    }
}

/// Why a request could not be authenticated (answered with 401).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bearer token is unknown.
    #[error("invalid bearer token")]
    Token,
    /// The client certificate does not verify against the cluster CA.
    #[error("verifying certificate: {0}")]
    Certificate(String),
}

/// Tokens and the client CA.
pub struct Authenticator {
    tokens: RwLock<HashMap<String, User>>,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Verifies client certificates against `client_ca`.
    pub fn new(client_ca: &CertificateDer<'static>) -> Result<Self, tls::Error> {
        let mut roots = RootCertStore::empty();
        roots.add(client_ca.clone())?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), tls::provider::provider())
                .build()?;
        Ok(Authenticator {
            tokens: RwLock::new(HashMap::new()),
            verifier,
        })
    }

    /// Accepts `token` as `user` from now on.
    pub fn add_token(&self, token: &str, user: User) {
        self.tokens.write().insert(token.to_owned(), user);
    }

    /// Forgets `token`.
    pub fn remove_token(&self, token: &str) {
        self.tokens.write().remove(token);
    }

    /// The user of a token, as a TokenReview would report it.
    pub fn token_user(&self, token: &str) -> Option<User> {
        self.tokens
            .read()
            .get(token)
            .cloned()
            .map(User::authenticated)
    }

    /// Authenticates a request: a verified client certificate or a known bearer token; with
    /// neither, anonymous. A bad certificate or token is an error unless the other succeeds.
    pub fn authenticate(
        &self,
        certs: &[CertificateDer<'static>],
        authorization: Option<&str>,
    ) -> Result<User, Error> {
        let mut failure = None;
        if let Some((leaf, intermediates)) = certs.split_first() {
            match self
                .verifier
                .verify_client_cert(leaf, intermediates, UnixTime::now())
            {
                Ok(_) => match subject(leaf) {
                    Some(user) => return Ok(user.authenticated()),
                    None => failure = Some(Error::Certificate("no subject CN".to_owned())),
                },
                Err(e) => failure = Some(Error::Certificate(e.to_string())),
            }
        }
        if let Some(token) = authorization.and_then(|v| v.strip_prefix("Bearer ")) {
            return self.token_user(token.trim()).ok_or(Error::Token);
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(User::anonymous()),
        }
    }
}

/// User = subject CN, groups = subject O, as kube-apiserver's x509 authenticator.
pub fn subject(cert: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let subject = parsed.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(User {
        name,
        uid: String::new(),
        groups,
        extra: BTreeMap::new(),
    })
}
