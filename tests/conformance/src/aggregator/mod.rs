//! kube-aggregator on the wire: a registry of APIServices, the availability controller that
//! probes each backend as `system:kube-aggregator` with the front-proxy client certificate,
//! the discovery it builds from them, the proxy of `/apis/<group>/<version>/**`
//! (aggregation-contract.md §1.2, §1.6, §2.4), and the backends' OpenAPI v3 documents
//! (§2.5).
//!
//! An APIService's backend is either one fixed URL ([`ApiService::new`]: always tried, no
//! readiness) or the endpoints of its Service ([`ApiService::for_service`]): backend pods
//! added and removed at runtime, each probed for readiness as the kubelet does, one ready
//! endpoint chosen per request as with `--enable-aggregator-routing`.
//!
//! # Layout
//! - this module: [`Aggregator`], [`ApiService`], registration, discovery and routing.
//! - `available`: the availability controller and the discovery refresh.
//! - [`endpoints`]: Service endpoints, their readiness probes and the choice per request.
//! - [`proxy`]: forwarding one request with the caller's identity in `X-Remote-*` headers.
//! - [`query`]: Go's query parsing and re-encoding.

mod available;
pub mod endpoints;
pub mod proxy;
pub mod query;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::{Mutex, RwLock};
use rustls_pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use self::endpoints::Endpoints;
pub use self::endpoints::{EndpointStatus, ReadinessProbe};
use crate::controlplane::discovery::{self, Group, Version};
use crate::controlplane::{BoxError, User};

/// The user kube-aggregator's OpenAPI controllers download and proxy documents as.
const OPENAPI_USER: &str = "system:aggregator";

/// The body type the aggregator sends upstream.
pub type UpstreamBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;
type HttpClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;

/// Errors from registering an APIService.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The backend TLS client could not be built.
    #[error("backend TLS: {0}")]
    Tls(#[from] tls::Error),
    /// The caBundle server name is not a DNS name or IP address.
    #[error("invalid server name {0:?}")]
    ServerName(String),
    /// The backend URL is not an `https://host:port` URL.
    #[error("backend URL {0:?} is not https://host:port")]
    Url(String),
}

/// How the aggregator verifies a backend's serving certificate.
#[derive(Clone, Debug)]
pub enum BackendTls {
    /// `insecureSkipTLSVerify: true`.
    InsecureSkipVerify,
    /// `caBundle`, verified for `server_name` (`<service>.<namespace>.svc`).
    CaBundle {
        /// The CA certificates.
        cas: Vec<CertificateDer<'static>>,
        /// The name the certificate must carry.
        server_name: String,
    },
}

/// Where an APIService's requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One fixed `https://host:port` (a Service's ClusterIP): always tried, no readiness.
    Url(String),
    /// The ready endpoints of [`ApiService::service`] (see [`Aggregator::add_endpoint`]):
    /// each request goes to one of them, round robin.
    Endpoints,
}

/// One APIService object (apiregistration.k8s.io/v1) and where its Service resolves.
#[derive(Clone, Debug)]
pub struct ApiService {
    /// `<version>.<group>`.
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
    /// `spec.service` as `namespace/name`: the Service whose endpoints serve
    /// [`Backend::Endpoints`].
    pub service: String,
    /// Where requests go.
    pub backend: Backend,
    /// How the backend is verified.
    pub tls: BackendTls,
}

impl ApiService {
    /// `<version>.<group>` on `kube-system/metrics-server` at `backend_url`, priorities 100/100,
    /// insecureSkipTLSVerify, as metrics-server's manifest.
    pub fn new(group: &str, version: &str, backend_url: &str) -> Self {
        ApiService {
            name: format!("{version}.{group}"),
            group: group.to_owned(),
            version: version.to_owned(),
            group_priority_minimum: 100,
            version_priority: 100,
            service: METRICS_SERVER_SERVICE.to_owned(),
            backend: Backend::Url(backend_url.trim_end_matches('/').to_owned()),
            tls: BackendTls::InsecureSkipVerify,
        }
    }

    /// [`ApiService::new`] served by the ready endpoints of `service` (`namespace/name`).
    pub fn for_service(group: &str, version: &str, service: &str) -> Self {
        ApiService {
            service: service.to_owned(),
            backend: Backend::Endpoints,
            ..ApiService::new(group, version, "https://unused")
        }
    }
}

/// The Service of metrics-server's manifest.
pub const METRICS_SERVER_SERVICE: &str = "kube-system/metrics-server";

/// The `Available` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    /// `status == "True"`.
    pub available: bool,
    /// `Passed`, `FailedDiscoveryCheck`, or `Pending` before the first check.
    pub reason: String,
    /// The message (`all checks passed` or the last error).
    pub message: String,
}

/// Timing of the availability controller and the proxy.
#[derive(Clone, Debug)]
pub struct Config {
    /// Period between checks after success (kube-aggregator: 30 s resync).
    pub check_interval: Duration,
    /// First retry delay after a failure, doubled up to `check_interval`.
    pub retry_initial: Duration,
    /// Per-attempt probe timeout and the proxied-discovery timeout (5 s).
    pub probe_timeout: Duration,
    /// Time to response headers for other proxied requests (kube-apiserver's 60 s).
    pub request_timeout: Duration,
    /// How Service endpoints are probed for readiness.
    pub readiness: ReadinessProbe,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            check_interval: Duration::from_secs(30),
            retry_initial: Duration::from_millis(100),
            probe_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            readiness: ReadinessProbe::default(),
        }
    }
}

struct Entry {
    spec: ApiService,
    client: HttpClient,
    status: Availability,
    /// Aggregated-discovery resources last fetched, and whether that fetch succeeded.
    resources: Vec<Value>,
    discovery_ok: bool,
}

struct Inner {
    config: Config,
    front_proxy: tls::Identity,
    entries: RwLock<BTreeMap<String, Entry>>,
    wake: Notify,
    /// Set by [`Aggregator::check_now`], cleared when a round of checks starts.
    dirty: AtomicBool,
    /// Bumped after every round of checks and every endpoint change.
    changed: watch::Sender<u64>,
    endpoints: Mutex<Endpoints>,
    /// Wakes the prober supervisor when endpoints were added.
    probe_wake: Notify,
    /// The last [`PROXIED_KEPT`] proxied answers.
    proxied: Mutex<VecDeque<Proxied>>,
}

/// The APIService registry, availability controller and proxy. Cheap to clone.
#[derive(Clone)]
pub struct Aggregator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    /// An aggregator that presents `front_proxy` (CN `front-proxy-client`) to backends.
    pub fn new(config: Config, front_proxy: tls::Identity) -> Self {
        Aggregator {
            inner: Arc::new(Inner {
                config,
                front_proxy,
                entries: RwLock::new(BTreeMap::new()),
                wake: Notify::new(),
                dirty: AtomicBool::new(false),
                changed: watch::channel(0).0,
                endpoints: Mutex::new(Endpoints::default()),
                probe_wake: Notify::new(),
                proxied: Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// The timing in use.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Creates or replaces an APIService; it is unavailable until its first check passes,
    /// which starts at once.
    pub fn register(&self, spec: ApiService) -> Result<(), Error> {
        let client = self.client(&spec)?;
        let entry = Entry {
            spec: spec.clone(),
            client,
            status: Availability {
                available: false,
                reason: "Pending".to_owned(),
                message: "not checked yet".to_owned(),
            },
            resources: Vec::new(),
            discovery_ok: false,
        };
        self.inner.entries.write().insert(spec.name.clone(), entry);
        self.check_now();
        Ok(())
    }

    /// Deletes an APIService; its group version disappears from discovery and routing.
    pub fn remove(&self, name: &str) {
        self.inner.entries.write().remove(name);
        self.inner.changed.send_modify(|g| *g += 1);
    }

    /// The `Available` condition of an APIService.
    pub fn availability(&self, name: &str) -> Option<Availability> {
        self.inner
            .entries
            .read()
            .get(name)
            .map(|e| e.status.clone())
    }

    /// Wakes the availability controller now.
    pub fn check_now(&self) {
        self.inner.dirty.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
    }

    /// Waits until the APIService is Available (true) or `timeout` passes (false).
    pub async fn wait_available(&self, name: &str, timeout: Duration) -> bool {
        let mut changed = self.inner.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.availability(name).is_some_and(|a| a.available) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// Adds a backend pod at `url` (`https://host:port`) to the endpoints of `service`
    /// (`namespace/name`), not ready until its readiness probe passes. Adding a URL that is
    /// there already changes nothing.
    pub fn add_endpoint(&self, service: &str, url: &str) -> Result<(), Error> {
        let url = https_url(url)?;
        if self.inner.endpoints.lock().add(service, &url) {
            self.inner.probe_wake.notify_one();
            self.endpoints_changed();
        }
        Ok(())
    }

    /// Removes an endpoint at once, as the endpoints controller does when a pod starts
    /// terminating: no request is routed to it from now on. False when unknown.
    pub fn remove_endpoint(&self, service: &str, url: &str) -> bool {
        let removed = self
            .inner
            .endpoints
            .lock()
            .remove(service, url.trim_end_matches('/'));
        if removed.is_some() {
            self.endpoints_changed();
        }
        removed.is_some()
    }

    /// The endpoints of `service` and their readiness, in the order they were added.
    pub fn endpoints(&self, service: &str) -> Vec<EndpointStatus> {
        self.inner.endpoints.lock().list(service)
    }

    /// Waits until the endpoint `url` of `service` is ready (true), or `timeout` passes or it
    /// is removed (false).
    pub async fn wait_endpoint_ready(&self, service: &str, url: &str, timeout: Duration) -> bool {
        let url = url.trim_end_matches('/');
        let mut changed = self.inner.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.endpoints(service).iter().find(|e| e.url == url) {
                Some(e) if e.ready => return true,
                Some(_) => {}
                None => return false,
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// Endpoints changed (added, removed, readiness): the availability controller runs now,
    /// as kube-aggregator's does on EndpointSlice events, and waiters look again.
    fn endpoints_changed(&self) {
        self.inner.changed.send_modify(|g| *g += 1);
        self.check_now();
    }

    fn client(&self, spec: &ApiService) -> Result<HttpClient, Error> {
        if let Backend::Url(url) = &spec.backend {
            https_url(url)?;
        }
        let verify = match &spec.tls {
            BackendTls::InsecureSkipVerify => tls::client::Verify::Insecure,
            BackendTls::CaBundle { cas, .. } => tls::client::Verify::Roots(cas.clone()),
        };
        let mut config = tls::client::config(&verify, Some(&self.inner.front_proxy))?;
        config.alpn_protocols.clear();
        let mut builder = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only();
        if let BackendTls::CaBundle { server_name, .. } = &spec.tls {
            let name = rustls_pki_types::ServerName::try_from(server_name.clone())
                .map_err(|_| Error::ServerName(server_name.clone()))?;
            builder =
                builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
        }
        let connector = builder.enable_http1().build();
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// The aggregated groups for discovery: versions by versionPriority, then Kubernetes
    /// version order; a version is stale unless its last check and discovery fetch passed.
    pub fn groups(&self) -> Vec<Group> {
        let entries = self.inner.entries.read();
        let mut by_group: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
        for e in entries.values() {
            by_group.entry(e.spec.group.as_str()).or_default().push(e);
        }
        by_group
            .into_iter()
            .map(|(name, mut es)| {
                es.sort_by(|a, b| {
                    b.spec
                        .version_priority
                        .cmp(&a.spec.version_priority)
                        .then_with(|| discovery::version_order(&a.spec.version, &b.spec.version))
                });
                Group {
                    name: name.to_owned(),
                    priority: es
                        .iter()
                        .map(|e| e.spec.group_priority_minimum)
                        .max()
                        .unwrap_or(0),
                    versions: es
                        .iter()
                        .map(|e| Version {
                            version: e.spec.version.clone(),
                            resources: e.resources.clone(),
                            fresh: e.status.available && e.discovery_ok,
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// The APIService objects, as `GET /apis/apiregistration.k8s.io/v1/apiservices` items.
    pub fn objects(&self) -> Vec<Value> {
        self.inner
            .entries
            .read()
            .values()
            .map(|e| {
                let (ns, name) = e
                    .spec
                    .service
                    .split_once('/')
                    .unwrap_or(("", &e.spec.service));
                let mut spec = json!({
                    "service": {"namespace": ns, "name": name, "port": 443},
                    "group": e.spec.group, "version": e.spec.version,
                    "groupPriorityMinimum": e.spec.group_priority_minimum,
                    "versionPriority": e.spec.version_priority,
                });
                if matches!(e.spec.tls, BackendTls::InsecureSkipVerify) {
                    spec["insecureSkipTLSVerify"] = json!(true);
                }
                json!({
                    "kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
                    "metadata": {"name": e.spec.name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "spec": spec,
                    "status": {"conditions": [{
                        "type": "Available",
                        "status": if e.status.available { "True" } else { "False" },
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "reason": e.status.reason, "message": e.status.message,
                    }]},
                })
            })
            .collect()
    }

    /// Runs the availability controller and the endpoints' readiness probes until
    /// `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        tokio::join!(self.run_checks(&shutdown), self.run_probes(&shutdown));
    }

    /// Forwards a request for `/apis/<group>/<version>[/...]` to its backend as `user`, or
    /// `None` when no APIService serves that group version.
    pub async fn proxy(
        &self,
        req: Request<UpstreamBody>,
        user: &User,
    ) -> Option<http::Response<crate::controlplane::Body>> {
        let mut segments = req.uri().path().trim_start_matches('/').split('/');
        let (Some("apis"), Some(group), Some(version)) =
            (segments.next(), segments.next(), segments.next())
        else {
            return None;
        };
        let timeout = if segments.all(str::is_empty) {
            proxy::Timeout::Discovery(self.inner.config.probe_timeout)
        } else {
            proxy::Timeout::Request(self.inner.config.request_timeout)
        };
        let (group, version) = (group.to_owned(), version.to_owned());
        self.forward(&group, &version, req, user, timeout).await
    }

    /// `/openapi/v3` as kube-aggregator's OpenAPI v3 controller serves the APIServices' part
    /// of it: each backend's index, downloaded as `system:aggregator`, with only the path of
    /// the APIService's own group version kept. An unavailable backend or one without a v3
    /// index (404) contributes nothing. (The control plane's own groups have no documents
    /// here.)
    pub async fn openapi_v3_index(&self) -> Value {
        let services: Vec<(String, String)> = self
            .inner
            .entries
            .read()
            .values()
            .filter(|e| e.status.available)
            .map(|e| (e.spec.group.clone(), e.spec.version.clone()))
            .collect();
        let mut paths = serde_json::Map::new();
        for (group, version) in services {
            let Some(Ok((url, client))) = self.backend(&group, &version) else {
                continue;
            };
            let fetched = available::get(
                &client,
                &format!("{url}/openapi/v3"),
                "application/json",
                (OPENAPI_USER, &[]),
                self.inner.config.probe_timeout,
            )
            .await;
            let Ok((StatusCode::OK, _, body)) = fetched else {
                continue;
            };
            let key = format!("apis/{group}/{version}");
            let entry = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|index| index["paths"].get(&key).cloned());
            if let Some(entry) = entry {
                paths.insert(key, entry);
            }
        }
        json!({ "paths": paths })
    }

    /// `/openapi/v3/apis/<group>/<version>` (`req`): proxied to the APIService's backend as
    /// `system:aggregator`, or `None` when no APIService serves that group version.
    pub async fn openapi_v3(
        &self,
        group: &str,
        version: &str,
        req: Request<UpstreamBody>,
    ) -> Option<http::Response<crate::controlplane::Body>> {
        let user = User::new(OPENAPI_USER, &[]);
        let timeout = proxy::Timeout::Request(self.inner.config.request_timeout);
        self.forward(group, version, req, &user, timeout).await
    }

    /// Where a request for `group`/`version` goes: the backend's URL and client, `Err` with
    /// kube-aggregator's 503 when the APIService is unavailable or no endpoint is ready, and
    /// `None` when no APIService serves that group version.
    fn backend(
        &self,
        group: &str,
        version: &str,
    ) -> Option<Result<(String, HttpClient), http::Response<crate::controlplane::Body>>> {
        let (url, client, available) = {
            let entries = self.inner.entries.read();
            let e = entries
                .values()
                .find(|e| e.spec.group == group && e.spec.version == version)?;
            let url = match &e.spec.backend {
                Backend::Url(url) => Some(url.clone()),
                Backend::Endpoints => self.inner.endpoints.lock().pick(&e.spec.service),
            };
            (url, e.client.clone(), e.status.available)
        };
        // Unavailable, or no ready endpoint to resolve to (kube-aggregator's
        // `ResolveEndpoint` error): the same 503.
        Some(match url.filter(|_| available) {
            Some(url) => Ok((url, client)),
            None => Err(proxy::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable",
            )),
        })
    }

    /// Sends `req` to the backend of `group`/`version` as `user` and records the answer.
    async fn forward(
        &self,
        group: &str,
        version: &str,
        req: Request<UpstreamBody>,
        user: &User,
        timeout: proxy::Timeout,
    ) -> Option<http::Response<crate::controlplane::Body>> {
        let (url, client) = match self.backend(group, version)? {
            Ok(backend) => backend,
            Err(unavailable) => return Some(unavailable),
        };
        let path = req.uri().path().to_owned();
        let response = proxy::forward(&client, &url, req, user, timeout).await;
        let mut proxied = self.inner.proxied.lock();
        if proxied.len() == PROXIED_KEPT {
            proxied.pop_front();
        }
        proxied.push_back(Proxied {
            path,
            status: response.status(),
            content_encoding: response
                .headers()
                .get(http::header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
        drop(proxied);
        Some(response)
    }

    /// The last proxied answers, oldest first (a test's view of what went back to clients).
    pub fn proxied(&self) -> Vec<Proxied> {
        self.inner.proxied.lock().iter().cloned().collect()
    }
}

/// One answer the proxy passed back, as the simulator records it for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxied {
    /// The request path.
    pub path: String,
    /// The backend's status (or the proxy's own error).
    pub status: StatusCode,
    /// The `Content-Encoding` the client got, as the backend sent it.
    pub content_encoding: Option<String>,
}

/// How many proxied answers [`Aggregator::proxied`] keeps.
const PROXIED_KEPT: usize = 256;

/// `url` without a trailing slash when it is `https://...`.
fn https_url(url: &str) -> Result<String, Error> {
    if url.starts_with("https://") {
        Ok(url.trim_end_matches('/').to_owned())
    } else {
        Err(Error::Url(url.to_owned()))
    }
}
