//! A simulated control plane that behaves like kube-apiserver on the wire for what kubectl and
//! the server use: HTTPS with its own cluster CA, token and client-certificate authentication,
//! discovery (legacy and aggregated v2), `/version` and health, TokenReview and
//! SubjectAccessReview, the `extension-apiserver-authentication` ConfigMap, a pluggable core
//! API for nodes, pods and ConfigMaps, and kube-aggregator in front of APIServices.
//!
//! # Layout
//! - this module: [`ControlPlane`] (start, kubeconfig, handles) and the request router.
//! - [`authn`]: users, tokens and client certificates.
//! - [`reviews`]: TokenReview and SubjectAccessReview with a policy and a record.
//! - [`discovery`]: the discovery documents.
//! - [`core`]: the [`CoreApi`] trait for `/api/v1`, implemented by [`crate::objects::Objects`].
//! - [`serve`]: the HTTPS accept loop, shared with tests' fake backends.

pub mod authn;
pub mod core;
pub mod discovery;
pub mod reviews;
pub mod serve;

mod router;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use self::authn::User;
pub use self::core::CoreApi;
pub use self::reviews::{Access, Decision, Policy, Review, Reviews};
use crate::aggregator::{self, Aggregator};

/// Boxed error of streamed bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body of the control plane: buffered or streamed (watches, proxying).
pub type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A JSON response.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(full(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A `Status` failure body, as kube-apiserver writes errors.
pub fn status_response(status: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        status,
        &serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": status.as_u16(),
        }),
    )
}

/// The Kubernetes version the control plane reports.
pub const GIT_VERSION: &str = "v1.37.0";
/// The name of the ConfigMap that carries the front-proxy trust (in `kube-system`).
pub const AUTHENTICATION_CONFIGMAP: &str = "extension-apiserver-authentication";
/// The front-proxy client certificate's CN, as kubeadm issues it.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Errors from starting the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Certificates or TLS configuration.
    #[error("TLS: {0}")]
    Tls(#[from] tls::Error),
    /// Binding the listener.
    #[error("binding 127.0.0.1:0: {0}")]
    Bind(#[source] std::io::Error),
    /// Registering an APIService.
    #[error("APIService: {0}")]
    ApiService(#[from] aggregator::Error),
    /// Writing a kubeconfig.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// How to start a control plane.
pub struct Config {
    /// Serves `/api/v1/...` (by default an empty [`crate::objects::Objects`], which then
    /// holds only the authentication ConfigMap).
    pub core: Arc<dyn CoreApi>,
    /// Decides SubjectAccessReviews.
    pub policy: Policy,
    /// Availability controller and proxy timing.
    pub aggregator: aggregator::Config,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            core: Arc::new(crate::objects::Objects::new()),
            policy: reviews::default_policy(),
            aggregator: aggregator::Config::default(),
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("aggregator", &self.aggregator)
            .finish_non_exhaustive()
    }
}

/// What the router needs, shared by every connection.
pub(crate) struct Shared {
    pub(crate) authn: authn::Authenticator,
    pub(crate) reviews: Reviews,
    pub(crate) core: Arc<dyn CoreApi>,
    pub(crate) aggregator: Aggregator,
    pub(crate) address: String,
}

/// A running control plane. Its tasks stop when the shutdown token given to
/// [`ControlPlane::start`] is cancelled; [`ControlPlane::stopped`] waits for them.
pub struct ControlPlane {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cluster_ca: tls::issue::Ca,
    front_proxy_ca: tls::issue::Ca,
    admin_token: String,
    tasks: JoinSet<()>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// A random hex token.
fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for i in 0..2u8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl ControlPlane {
    /// Starts serving on 127.0.0.1 (an OS-assigned port) with fresh CAs, an admin token and
    /// the populated `kube-system/extension-apiserver-authentication` ConfigMap.
    pub async fn start(config: Config, shutdown: CancellationToken) -> Result<Self, Error> {
        let cluster_ca = tls::issue::Ca::new("kubernetes-ca")?;
        let front_proxy_ca = tls::issue::Ca::new("front-proxy-ca")?;
        let serving = cluster_ca.issue(&tls::issue::LeafSpec {
            common_name: "kube-apiserver".to_owned(),
            sans: [
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ]
            .map(str::to_owned)
            .to_vec(),
            server: true,
            ..Default::default()
        })?;
        let proxy_client = front_proxy_ca.issue(&tls::issue::LeafSpec {
            common_name: FRONT_PROXY_CLIENT.to_owned(),
            client: true,
            ..Default::default()
        })?;
        let key = tls::server::certified_key(&serving.identity)?;
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(key));
        let server_config = Arc::new(tls::server::config(resolver, true)?);

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;

        let authn = authn::Authenticator::new(cluster_ca.cert())?;
        let admin_token = random_token();
        authn.add_token(
            &admin_token,
            User::new("kubernetes-admin", &["system:masters"]),
        );
        let aggregator = Aggregator::new(config.aggregator, proxy_client.identity);

        config.core.upsert_configmap(
            "kube-system",
            AUTHENTICATION_CONFIGMAP,
            authentication_configmap(cluster_ca.cert_pem(), front_proxy_ca.cert_pem()),
        );
        let shared = Arc::new(Shared {
            authn,
            reviews: Reviews::new(config.policy),
            core: config.core,
            aggregator: aggregator.clone(),
            address: addr.to_string(),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(aggregator.run(shutdown.clone()));
        let handler = router::handler(shared.clone());
        tasks.spawn(serve::serve(listener, server_config, handler, shutdown));
        Ok(ControlPlane {
            addr,
            shared,
            cluster_ca,
            front_proxy_ca,
            admin_token,
            tasks,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cluster CA (`kubernetes-ca`): signs the serving and client certificates.
    pub fn cluster_ca(&self) -> &tls::issue::Ca {
        &self.cluster_ca
    }

    /// The front-proxy CA (`front-proxy-ca`): signs the aggregator's client certificate.
    pub fn front_proxy_ca(&self) -> &tls::issue::Ca {
        &self.front_proxy_ca
    }

    /// The admin token (`kubernetes-admin`, `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Accepts `token` as `user` (for TokenReview and for requests to the control plane).
    pub fn add_token(&self, token: &str, user: User) {
        self.shared.authn.add_token(token, user);
    }

    /// Forgets a token.
    pub fn remove_token(&self, token: &str) {
        self.shared.authn.remove_token(token);
    }

    /// Issues a client certificate (CN = user, O = groups) from the cluster CA.
    pub fn issue_client_cert(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<tls::issue::Issued, Error> {
        Ok(self.cluster_ca.issue(&tls::issue::LeafSpec {
            common_name: user.to_owned(),
            organizations: groups.iter().map(|g| (*g).to_owned()).collect(),
            client: true,
            ..Default::default()
        })?)
    }

    /// The reviews answered so far and the SubjectAccessReview policy.
    pub fn reviews(&self) -> &Reviews {
        &self.shared.reviews
    }

    /// The aggregator (APIServices, availability).
    pub fn aggregator(&self) -> &Aggregator {
        &self.shared.aggregator
    }

    /// The core API behind `/api/v1`.
    pub fn core(&self) -> &Arc<dyn CoreApi> {
        &self.shared.core
    }

    /// Writes a kubeconfig for the admin token.
    pub fn kubeconfig(&self, path: &Path) -> Result<(), Error> {
        self.kubeconfig_with_token(path, &self.admin_token)
    }

    /// Writes a kubeconfig (cluster `sim`, context `sim`) that authenticates with `token`.
    pub fn kubeconfig_with_token(&self, path: &Path, token: &str) -> Result<(), Error> {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.cluster_ca.cert_pem());
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: sim-user\n  user:\n    token: {token}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim-user\n    namespace: default\ncurrent-context: sim\n",
            url = self.url(),
        );
        std::fs::write(path, text).map_err(|source| Error::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// Waits for the control plane's tasks after shutdown was cancelled.
    pub async fn stopped(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The data kube-apiserver publishes in `kube-system/extension-apiserver-authentication`.
pub fn authentication_configmap(
    client_ca_pem: &str,
    front_proxy_ca_pem: &str,
) -> BTreeMap<String, String> {
    [
        ("client-ca-file", client_ca_pem.to_owned()),
        (
            "requestheader-client-ca-file",
            front_proxy_ca_pem.to_owned(),
        ),
        (
            "requestheader-allowed-names",
            format!("[\"{FRONT_PROXY_CLIENT}\"]"),
        ),
        (
            "requestheader-username-headers",
            "[\"X-Remote-User\"]".to_owned(),
        ),
        ("requestheader-uid-headers", "[\"X-Remote-Uid\"]".to_owned()),
        (
            "requestheader-group-headers",
            "[\"X-Remote-Group\"]".to_owned(),
        ),
        (
            "requestheader-extra-headers-prefix",
            "[\"X-Remote-Extra-\"]".to_owned(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}
