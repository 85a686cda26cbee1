//! kube-aggregator on the wire: a registry of APIServices, the availability controller that
//! probes each backend as `system:kube-aggregator` with the front-proxy client certificate,
//! the discovery it builds from them, and the proxy of `/apis/<group>/<version>/**`
//! (aggregation-contract.md §1.2, §1.6, §2.4).
//!
//! # Layout
//! - this module: [`Aggregator`], [`ApiService`], availability and discovery refresh.
//! - [`proxy`]: forwarding one request with the caller's identity in `X-Remote-*` headers.
//! - [`query`]: Go's query parsing and re-encoding.

pub mod proxy;
pub mod query;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::{Mutex, RwLock};
use rustls_pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::controlplane::discovery::{self, Group, Version};
use crate::controlplane::{BoxError, User};

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

/// One APIService object (apiregistration.k8s.io/v1), resolved to a backend URL.
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
    /// `spec.service` as `namespace/name` (display only).
    pub service: String,
    /// `https://host:port` of the resolved endpoint.
    pub backend_url: String,
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
            service: "kube-system/metrics-server".to_owned(),
            backend_url: backend_url.trim_end_matches('/').to_owned(),
            tls: BackendTls::InsecureSkipVerify,
        }
    }
}

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            check_interval: Duration::from_secs(30),
            retry_initial: Duration::from_millis(100),
            probe_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
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
    changed: watch::Sender<u64>,
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

const PROBE_ATTEMPTS: usize = 5;
const MAX_DISCOVERY_BYTES: usize = 8 << 20;

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

    fn client(&self, spec: &ApiService) -> Result<HttpClient, Error> {
        if !spec.backend_url.starts_with("https://") {
            return Err(Error::Url(spec.backend_url.clone()));
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

    /// Runs the availability controller until `shutdown`: checks every APIService, then
    /// waits `check_interval` (or a doubling retry delay after a failure, or a wake-up).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut retry = self.inner.config.retry_initial;
        loop {
            let all_passed = tokio::select! {
                () = shutdown.cancelled() => return,
                passed = self.check_all() => passed,
            };
            let delay = if all_passed {
                retry = self.inner.config.retry_initial;
                self.inner.config.check_interval
            } else {
                let d = retry;
                retry = (retry * 2).min(self.inner.config.check_interval);
                d
            };
            let deadline = tokio::time::Instant::now() + delay;
            while !self.inner.dirty.load(Ordering::SeqCst) {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep_until(deadline) => break,
                    () = self.inner.wake.notified() => {}
                }
            }
        }
    }

    async fn check_all(&self) -> bool {
        self.inner.dirty.store(false, Ordering::SeqCst);
        let snapshot: Vec<(ApiService, HttpClient)> = self
            .inner
            .entries
            .read()
            .values()
            .map(|e| (e.spec.clone(), e.client.clone()))
            .collect();
        let results = futures::future::join_all(
            snapshot
                .iter()
                .map(|(spec, client)| self.check(spec, client)),
        )
        .await;
        let mut all_passed = true;
        {
            let mut entries = self.inner.entries.write();
            for ((spec, _), (status, discovered)) in snapshot.iter().zip(results) {
                all_passed &= status.available && discovered.is_some();
                if let Some(e) = entries.get_mut(&spec.name) {
                    e.status = status;
                    e.discovery_ok = discovered.is_some();
                    if let Some(resources) = discovered {
                        e.resources = resources;
                    }
                }
            }
        }
        self.inner.changed.send_modify(|g| *g += 1);
        all_passed
    }

    /// One availability check (5 parallel probes of `/apis/<g>/<v>`) and one discovery fetch.
    async fn check(
        &self,
        spec: &ApiService,
        client: &HttpClient,
    ) -> (Availability, Option<Vec<Value>>) {
        let url = format!("{}/apis/{}/{}", spec.backend_url, spec.group, spec.version);
        let timeout = self.inner.config.probe_timeout;
        let masters = ["system:masters"];
        let attempts =
            (0..PROBE_ATTEMPTS).map(|_| get(client, &url, "application/json", &masters, timeout));
        let results = futures::future::join_all(attempts).await;
        let mut last_error = String::new();
        let mut passed = false;
        for r in results {
            match r {
                Ok((status, _, _)) if (200..400).contains(&status.as_u16()) => passed = true,
                Ok((status, _, _)) => {
                    last_error = format!(
                        "failing or missing response from {url}: bad status from {url}: {}",
                        status.as_u16()
                    );
                }
                Err(e) => last_error = format!("failing or missing response from {url}: {e}"),
            }
        }
        let status = if passed {
            Availability {
                available: true,
                reason: "Passed".to_owned(),
                message: "all checks passed".to_owned(),
            }
        } else {
            Availability {
                available: false,
                reason: "FailedDiscoveryCheck".to_owned(),
                message: last_error,
            }
        };
        let discovered = if passed {
            self.discover(spec, client).await
        } else {
            None
        };
        (status, discovered)
    }

    /// The resources of one group version, from the backend's aggregated discovery (`/apis`,
    /// v2) or, when it answers anything but v2 or 503, its legacy `/apis/<g>/<v>`.
    async fn discover(&self, spec: &ApiService, client: &HttpClient) -> Option<Vec<Value>> {
        let timeout = self.inner.config.probe_timeout;
        let url = format!("{}/apis", spec.backend_url);
        let (status, headers, body) = get(
            client,
            &url,
            discovery::V2_CONTENT_TYPE,
            &["system:masters"],
            timeout,
        )
        .await
        .ok()?;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return None;
        }
        let v2 = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(discovery::accepts_v2);
        if status == StatusCode::OK && v2 {
            let doc: Value = serde_json::from_slice(&body).ok()?;
            let group = doc.get("items")?.as_array()?.iter().find(|g| {
                g.pointer("/metadata/name").and_then(Value::as_str) == Some(spec.group.as_str())
            })?;
            let version = group.get("versions")?.as_array()?.iter().find(|v| {
                v.get("version").and_then(Value::as_str) == Some(spec.version.as_str())
            })?;
            return Some(version.get("resources")?.as_array()?.clone());
        }
        let url = format!("{}/apis/{}/{}", spec.backend_url, spec.group, spec.version);
        let (status, _, body) = get(client, &url, "application/json", &[], timeout)
            .await
            .ok()?;
        if status != StatusCode::OK {
            return None;
        }
        let list: Value = serde_json::from_slice(&body).ok()?;
        Some(discovery::resources_from_list(&list))
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
        let discovery_path = segments.all(str::is_empty);
        let (url, client, available) = {
            let entries = self.inner.entries.read();
            let e = entries
                .values()
                .find(|e| e.spec.group == group && e.spec.version == version)?;
            (
                e.spec.backend_url.clone(),
                e.client.clone(),
                e.status.available,
            )
        };
        if !available {
            return Some(proxy::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable",
            ));
        }
        let timeout = if discovery_path {
            proxy::Timeout::Discovery(self.inner.config.probe_timeout)
        } else {
            proxy::Timeout::Request(self.inner.config.request_timeout)
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

/// One GET as `system:kube-aggregator` with these groups; the body is read in full (bounded).
async fn get(
    client: &HttpClient,
    url: &str,
    accept: &str,
    groups: &[&str],
    timeout: Duration,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let mut builder = Request::get(url)
        .header(http::header::ACCEPT, accept)
        .header("X-Remote-User", "system:kube-aggregator");
    for g in groups {
        builder = builder.header(
            "X-Remote-Group",
            HeaderValue::from_str(g).map_err(|e| e.to_string())?,
        );
    }
    let req = builder
        .body(
            Empty::<Bytes>::new()
                .map_err(|never| match never {})
                .boxed(),
        )
        .map_err(|e| e.to_string())?;
    let fetch = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| proxy::error_chain(&e))?;
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, MAX_DISCOVERY_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    match tokio::time::timeout(timeout, fetch).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out waiting for {url}")),
    }
}
