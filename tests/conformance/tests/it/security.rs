//! The real server (in-process, real HTTPS) delegating authentication and authorization to the
//! simulated control plane: the `extension-apiserver-authentication` ConfigMap (looked up,
//! then watched), TokenReview and SubjectAccessReview, whose record shows exactly what the
//! server asked; and, end to end, kube-aggregator proxying a kubeconfig user to it.
//!
//! The kubelet side (an untrusted kubelet certificate fails that node unless
//! `--kubelet-insecure-tls`; the bearer token never goes over plain HTTP) is in `scrape.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::auth::UserInfo;
use apiserver::config::{ServingCert, Settings};
use apiserver::credentials::Reloads;
use apiserver::run::{Auth, Cluster, Setup};
use apiserver::serve::{Filter, Verdict};
use bytes::Bytes;
use conformance::aggregator::{self, ApiService};
use conformance::controlplane::{
    self, AUTHENTICATION_CONFIGMAP, Access, Body, ControlPlane, CoreApi, FRONT_PROXY_CLIENT,
    Review, User,
};
use futures::future::BoxFuture;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use scraper::inventory::Inventory;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The exact 401 body of k8s.io/apiserver.
const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;
/// The server's service account, as the control plane knows it.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:metrics-server";

// ---- A core API whose ConfigMap watch delivers changes ------------------------------------

/// ConfigMaps with get, list and a watch that streams every change after the requested
/// resourceVersion (`MODIFIED` events), so the server's real watch sees a rotated CA.
#[derive(Clone, Default)]
struct WatchedConfigMaps {
    inner: Arc<Maps>,
}

impl WatchedConfigMaps {
    /// Deletes a ConfigMap (before any watch is open: no DELETED event is streamed).
    fn remove(&self, namespace: &str, name: &str) {
        let mut state = self.inner.state.lock();
        state.resource_version += 1;
        state.maps.remove(&(namespace.to_owned(), name.to_owned()));
    }
}

#[derive(Default)]
struct Maps {
    state: Mutex<MapState>,
    changed: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct MapState {
    resource_version: u64,
    maps: BTreeMap<(String, String), (u64, BTreeMap<String, String>)>,
}

fn configmap(ns: &str, name: &str, rv: u64, data: &BTreeMap<String, String>) -> Value {
    json!({
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                     "uid": format!("cm-{ns}-{name}")},
        "data": data,
    })
}

impl Maps {
    /// Objects in `ns` (named `name`, if given) newer than `since`, with their versions.
    fn newer(&self, ns: &str, name: Option<&str>, since: u64) -> Vec<(u64, Value)> {
        self.state
            .lock()
            .maps
            .iter()
            .filter(|((n, m), (rv, _))| n == ns && name.is_none_or(|w| w == m) && *rv > since)
            .map(|((n, m), (rv, data))| (*rv, configmap(n, m, *rv, data)))
            .collect()
    }
}

impl CoreApi for WatchedConfigMaps {
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<Body>>> {
        Box::pin(async move {
            if req.method() != Method::GET {
                return None;
            }
            let rest = req.uri().path().strip_prefix("/api/v1/namespaces/")?;
            let mut parts = rest.trim_end_matches('/').split('/');
            let ns = parts.next()?.to_owned();
            (parts.next()? == "configmaps").then_some(())?;
            let name = parts.next().map(str::to_owned);
            let query = aggregator::query::parse(req.uri().query().unwrap_or(""));
            let param = |k: &str| {
                query
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            let wanted = name.clone().or_else(|| {
                param("fieldSelector")
                    .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_owned))
            });
            if param("watch").is_some_and(|w| w == "true" || w == "1") {
                let since = param("resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let secs = param("timeoutSeconds")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(300u64);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
                let inner = self.inner.clone();
                let changes = inner.changed.subscribe();
                let stream = futures::stream::unfold(
                    (inner, changes, since),
                    move |(inner, mut changes, since)| {
                        let (ns, wanted) = (ns.clone(), wanted.clone());
                        async move {
                            loop {
                                let events = inner.newer(&ns, wanted.as_deref(), since);
                                if let Some(last) = events.iter().map(|(rv, _)| *rv).max() {
                                    let mut lines = String::new();
                                    for (_, object) in events {
                                        lines.push_str(
                                            &json!({"type": "MODIFIED", "object": object})
                                                .to_string(),
                                        );
                                        lines.push('\n');
                                    }
                                    let frame = http_body::Frame::data(Bytes::from(lines));
                                    return Some((
                                        Ok::<_, controlplane::BoxError>(frame),
                                        (inner, changes, last),
                                    ));
                                }
                                tokio::select! {
                                    () = tokio::time::sleep_until(deadline) => return None,
                                    changed = changes.changed() => changed.ok()?,
                                }
                            }
                        }
                    },
                );
                return Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(http_body_util::StreamBody::new(stream).boxed())
                    .ok();
            }
            let state = self.inner.state.lock();
            if let Some(name) = name {
                return Some(match state.maps.get(&(ns.clone(), name.clone())) {
                    Some((rv, data)) => controlplane::json_response(
                        StatusCode::OK,
                        &configmap(&ns, &name, *rv, data),
                    ),
                    None => controlplane::status_response(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!("configmaps \"{name}\" not found"),
                    ),
                });
            }
            let items: Vec<Value> = state
                .maps
                .iter()
                .filter(|((n, m), _)| *n == ns && wanted.as_ref().is_none_or(|w| w == m))
                .map(|((n, m), (rv, data))| configmap(n, m, *rv, data))
                .collect();
            Some(controlplane::json_response(
                StatusCode::OK,
                &json!({"kind": "ConfigMapList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": state.resource_version.to_string()},
                        "items": items}),
            ))
        })
    }

    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        let rv = {
            let mut state = self.inner.state.lock();
            state.resource_version += 1;
            let rv = state.resource_version;
            state
                .maps
                .insert((namespace.to_owned(), name.to_owned()), (rv, data));
            rv
        };
        self.inner.changed.send_replace(rv);
    }
}

// ---- The control plane and the server -----------------------------------------------------

async fn control_plane(shutdown: &CancellationToken) -> ControlPlane {
    control_plane_with(WatchedConfigMaps::default(), shutdown).await
}

async fn control_plane_with(maps: WatchedConfigMaps, shutdown: &CancellationToken) -> ControlPlane {
    let config = controlplane::Config {
        core: Arc::new(maps),
        aggregator: aggregator::Config {
            check_interval: Duration::from_millis(300),
            retry_initial: Duration::from_millis(50),
            probe_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            ..aggregator::Config::default()
        },
        ..Default::default()
    };
    ControlPlane::start(config, shutdown.clone()).await.unwrap()
}

/// The real server, delegating to `cp` as its service account.
struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), apiserver::run::Error>>,
    /// What the credential reloaders did.
    reloads: Reloads,
    _dir: tempfile::TempDir,
}

impl Server {
    fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

async fn kube_config(cp: &ControlPlane, dir: &Path, token: &str) -> kube::Config {
    let path = dir.join(format!("kubeconfig-{token}"));
    cp.kubeconfig_with_token(&path, token).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap()
}

async fn start_server(
    cp: &ControlPlane,
    edit: impl FnOnce(&mut Settings),
    filters: Vec<Arc<dyn Filter>>,
) -> Server {
    tls::provider::install_default();
    cp.add_token(
        "metrics-server-sa",
        User::new(SERVICE_ACCOUNT, &["system:serviceaccounts"]),
    );
    let dir = tempfile::tempdir().unwrap();
    let kube = kube_config(cp, dir.path(), "metrics-server-sa").await;
    let mut config = Settings::for_resolution(Duration::from_secs(15));
    config.kubelet.insecure_tls = true;
    config.listen.cert = ServingCert::self_signed_in(dir.path().join("certs"));
    config.serving.drain_timeout = Duration::from_secs(2);
    edit(&mut config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let reloads = Reloads::default();
    let setup = Setup {
        listener: Some(listener),
        cluster: Cluster::Static(Arc::new(Inventory::new())),
        cert_reload_interval: Duration::from_millis(100),
        reloads: reloads.clone(),
        auth: Auth::Kube(Box::new(kube)),
        filters,
        ..Setup::default()
    };
    let task = tokio::spawn(apiserver::run::run_with(config, setup, shutdown.clone()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(addr, None, "/livez", &[]).await.is_none() {
        assert!(!task.is_finished(), "the server stopped: {:?}", task.await);
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Server {
        addr,
        shutdown,
        task,
        reloads,
        _dir: dir,
    }
}

/// A GET over HTTPS (any server certificate) with an optional client certificate; `None` when
/// no connection could be made.
async fn get(
    addr: SocketAddr,
    identity: Option<&tls::Identity>,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(StatusCode, String)> {
    call(addr, identity, Method::GET, path, headers, "").await
}

async fn call(
    addr: SocketAddr,
    identity: Option<&tls::Identity>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(StatusCode, String)> {
    let mut config = tls::client::config(&tls::client::Verify::Insecure, identity).unwrap();
    config.alpn_protocols.clear();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut req = Request::builder()
        .method(method)
        .uri(format!("https://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .ok()?;
    let status = resp.status();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

async fn must_get(
    addr: SocketAddr,
    identity: Option<&tls::Identity>,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
    get(addr, identity, path, headers)
        .await
        .expect("a response")
}

fn client_cert(ca: &tls::issue::Ca, cn: &str) -> tls::Identity {
    ca.issue(&tls::issue::LeafSpec {
        common_name: cn.to_owned(),
        client: true,
        ..Default::default()
    })
    .unwrap()
    .identity
}

fn allow_if(f: impl Fn(&Access) -> bool + Send + Sync + 'static) -> controlplane::Policy {
    Arc::new(move |a: &Access| {
        if f(a) {
            controlplane::Decision::allow("test policy")
        } else {
            controlplane::Decision::deny("no RBAC policy matched")
        }
    })
}

/// The SubjectAccessReviews the server sent, with the raw specs, checking every one came
/// from the server's own credentials.
fn reviews_by_server(cp: &ControlPlane) -> Vec<(Access, Value)> {
    cp.reviews()
        .recorded()
        .into_iter()
        .filter_map(|r| match r {
            Review::Access {
                caller,
                access,
                spec,
                ..
            } => {
                assert_eq!(caller, SERVICE_ACCOUNT);
                Some((*access, spec))
            }
            Review::Token { .. } => None,
        })
        .collect()
}

/// 200 once the API layer serves metrics, 404 from the router while it is a stub: either
/// way the request got past authentication and authorization.
fn served(status: StatusCode) -> bool {
    status == StatusCode::OK || status == StatusCode::NOT_FOUND
}

// ---- Tests ---------------------------------------------------------------------------------

const SPOOF: &[(&str, &str)] = &[
    ("x-remote-user", "system:admin"),
    ("x-remote-group", "system:masters"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_identity_headers_are_never_served_as_system_admin() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    // Were system:admin ever believed, it would be served (system:masters, or this policy).
    cp.reviews()
        .set_policy(allow_if(|a| a.user == "system:admin"));
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    let path = "/apis/metrics.k8s.io/v1beta1/nodes";

    // No client certificate: anonymous; the review asks about system:anonymous: 403.
    let (status, body) = must_get(server.addr, None, path, SPOOF).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["message"].clone();
    assert_eq!(
        message,
        "nodes.metrics.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \
         \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope: no RBAC policy matched"
    );
    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].0.user, "system:anonymous");
    assert_eq!(reviews[0].0.groups, ["system:unauthenticated"]);

    // The allowed name, but from a CA the ConfigMap does not name: 401, nothing reviewed.
    let other = tls::issue::Ca::new("front-proxy-ca").unwrap();
    let forged = client_cert(&other, FRONT_PROXY_CLIENT);
    let (status, body) = must_get(server.addr, Some(&forged), path, SPOOF).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );

    // The front-proxy CA, but a name not in requestheader-allowed-names: 401.
    let wrong_name = client_cert(cp.front_proxy_ca(), "not-the-aggregator");
    let (status, body) = must_get(server.addr, Some(&wrong_name), path, SPOOF).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );

    assert_eq!(
        reviews_by_server(&cp).len(),
        1,
        "no review for a rejected credential"
    );
    assert!(
        cp.reviews()
            .access_reviews()
            .iter()
            .all(|a| a.user != "system:admin")
    );
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_proxy_attributes_reach_the_review_exactly_and_answers_are_cached() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.reviews()
        .set_policy(allow_if(|a| a.user == "alice" && a.resource == "pods"));
    let server = start_server(
        &cp,
        |s| {
            s.authz.authorized_ttl = Duration::from_secs(60);
            s.authz.unauthorized_ttl = Duration::from_secs(60);
        },
        Vec::new(),
    )
    .await;
    let proxy = client_cert(cp.front_proxy_ca(), FRONT_PROXY_CLIENT);
    let alice: &[(&str, &str)] = &[
        ("x-remote-user", "alice"),
        ("x-remote-uid", "uid-alice"),
        ("x-remote-group", "dev"),
        ("x-remote-group", "system:authenticated"),
        ("x-remote-extra-scopes", "view"),
        ("x-remote-extra-scopes", "edit"),
        ("x-remote-extra-acme.com%2fteam", "blue"),
    ];
    let pods = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb";
    let (status, body) = must_get(server.addr, Some(&proxy), pods, alice).await;
    assert!(served(status), "{status}: {body}");

    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    let (access, spec) = &reviews[0];
    assert_eq!(
        *access,
        Access {
            user: "alice".to_owned(),
            uid: "uid-alice".to_owned(),
            groups: vec!["dev".to_owned(), "system:authenticated".to_owned()],
            extra: BTreeMap::from([
                ("acme.com/team".to_owned(), vec!["blue".to_owned()]),
                (
                    "scopes".to_owned(),
                    vec!["view".to_owned(), "edit".to_owned()]
                ),
            ]),
            verb: "list".to_owned(),
            namespace: "default".to_owned(),
            group: "metrics.k8s.io".to_owned(),
            version: "v1beta1".to_owned(),
            resource: "pods".to_owned(),
            subresource: String::new(),
            name: String::new(),
            path: None,
        }
    );
    assert_eq!(
        spec["resourceAttributes"]["labelSelector"],
        json!({"requirements": [{"key": "app", "operator": "In", "values": ["web"]}]})
    );

    // The same request within the TTL: answered from the cache.
    let (status, _) = must_get(server.addr, Some(&proxy), pods, alice).await;
    assert!(served(status));
    assert_eq!(
        reviews_by_server(&cp).len(),
        1,
        "a cached answer asks no review"
    );

    // A deny: 403 with the upstream wording and the reviewer's reason; cached as well.
    let nodes = "/apis/metrics.k8s.io/v1beta1/nodes";
    for _ in 0..2 {
        let (status, body) = must_get(server.addr, Some(&proxy), nodes, alice).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "nodes.metrics.k8s.io is forbidden: User \"alice\" cannot list \
                               resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster \
                               scope: no RBAC policy matched",
                   "reason": "Forbidden", "details": {"group": "metrics.k8s.io", "kind": "nodes"},
                   "code": 403})
        );
    }
    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 2, "{reviews:?}");
    assert_eq!(reviews[1].0.resource, "nodes");
    server.stop().await;
    shutdown.cancel();
}

/// The review budget holds the questions of autoscalers and people, never kube-aggregator's
/// own (its discovery and OpenAPI fetches, legacy discovery as `system:kube-aggregator`
/// without groups) nor the paths that are never shed: with the budget spent by HPA-shaped
/// selectors, the aggregator still discovers the API and an HPA gets its short 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_review_budget_never_refuses_the_aggregator_or_discovery() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.reviews().set_policy(allow_if(|_| true));
    let server = start_server(
        &cp,
        |s| {
            s.authz.review_limits = apiserver::auth::ReviewLimits {
                qps: 1,
                per_source_qps: 1,
            }
        },
        Vec::new(),
    )
    .await;
    let proxy = client_cert(cp.front_proxy_ca(), FRONT_PROXY_CLIENT);
    let hpa: &[(&str, &str)] = &[
        (
            "x-remote-user",
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ),
        ("x-remote-group", "system:serviceaccounts"),
    ];
    // A burst of two, then the budget is spent: each selector is a question of its own.
    let mut statuses = Vec::new();
    for target in 0..4 {
        let path = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dt{target}"
        );
        statuses.push(must_get(server.addr, Some(&proxy), &path, hpa).await.0);
    }
    assert!(statuses[..2].iter().all(|s| served(*s)), "{statuses:?}");
    assert_eq!(statuses[3], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
    let reviewed = reviews_by_server(&cp).len();

    let aggregator: &[(&str, &str)] = &[("x-remote-user", "system:kube-aggregator")];
    for path in [
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/metrics.k8s.io/v1",
        "/openapi/v2",
    ] {
        let (status, body) = must_get(server.addr, Some(&proxy), path, aggregator).await;
        assert!(served(status), "{path}: {status}: {body}");
    }
    // Discovery for an HPA too: a never-shed path is never over the budget.
    let (status, body) = must_get(server.addr, Some(&proxy), "/apis", hpa).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        reviews_by_server(&cp).len(),
        reviewed + 4,
        "each reviewed, none refused"
    );
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_proxy_ca_rotated_in_the_configmap_takes_effect_within_seconds() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    let masters: &[(&str, &str)] = &[
        ("x-remote-user", "kube-aggregator"),
        ("x-remote-group", "system:masters"),
    ];
    let old = client_cert(cp.front_proxy_ca(), FRONT_PROXY_CLIENT);
    let (status, body) = must_get(server.addr, Some(&old), "/metrics", masters).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let rotated = tls::issue::Ca::new("front-proxy-ca-2").unwrap();
    let new = client_cert(&rotated, FRONT_PROXY_CLIENT);
    let (status, _) = must_get(server.addr, Some(&new), "/metrics", masters).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "not trusted before the rotation"
    );

    let rotated_at = Instant::now();
    cp.core().upsert_configmap(
        "kube-system",
        AUTHENTICATION_CONFIGMAP,
        controlplane::authentication_configmap(cp.cluster_ca().cert_pem(), rotated.cert_pem()),
    );
    let mut switched = None;
    while rotated_at.elapsed() < Duration::from_secs(10) {
        let (with_new, _) = must_get(server.addr, Some(&new), "/metrics", masters).await;
        if with_new == StatusCode::OK {
            switched = Some(rotated_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let switched = switched.expect("the new front-proxy certificate is trusted");
    assert!(switched < Duration::from_secs(5), "{switched:?}");
    let (status, body) = must_get(server.addr, Some(&old), "/metrics", masters).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED),
        "the old front-proxy certificate no longer works"
    );
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_authentication_configmap_at_start_is_survived_and_used_once_created() {
    // k8s.io/apiserver: a ConfigMap that does not exist is not a lookup failure; the server
    // starts without front-proxy trust and its watch applies the ConfigMap when it appears.
    let shutdown = CancellationToken::new();
    let maps = WatchedConfigMaps::default();
    let cp = control_plane_with(maps.clone(), &shutdown).await;
    maps.remove("kube-system", AUTHENTICATION_CONFIGMAP);
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    let masters: &[(&str, &str)] = &[
        ("x-remote-user", "kube-aggregator"),
        ("x-remote-group", "system:masters"),
    ];
    let proxy = client_cert(cp.front_proxy_ca(), FRONT_PROXY_CLIENT);
    let (status, body) = must_get(server.addr, None, "/livez", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    // No CA trusts the front-proxy certificate yet: the request is anonymous, and the
    // identity headers are ignored (never served as the system:masters they claim).
    let (status, body) = must_get(server.addr, Some(&proxy), "/metrics", masters).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );

    let created_at = Instant::now();
    cp.core().upsert_configmap(
        "kube-system",
        AUTHENTICATION_CONFIGMAP,
        controlplane::authentication_configmap(
            cp.cluster_ca().cert_pem(),
            cp.front_proxy_ca().cert_pem(),
        ),
    );
    loop {
        let (status, body) = must_get(server.addr, Some(&proxy), "/metrics", masters).await;
        if status == StatusCode::OK {
            assert!(body.contains("process_cpu_seconds_total"), "{body}");
            break;
        }
        assert!(
            created_at.elapsed() < Duration::from_secs(10),
            "the created ConfigMap is applied without a restart: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ca_file_rotates_while_the_configmap_keeps_the_front_proxy_current() {
    // k8s.io/apiserver: --client-ca-file replaces the ConfigMap's client CA (reloaded from
    // the file), and the request-header half still comes from the watched ConfigMap.
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    let (ca_a, ca_b) = (
        tls::issue::Ca::new("client-ca-a").unwrap(),
        tls::issue::Ca::new("client-ca-b").unwrap(),
    );
    std::fs::write(&ca_file, ca_a.cert_pem()).unwrap();
    let server = start_server(
        &cp,
        |s| s.authn.client_ca_file = Some(ca_file.clone()),
        Vec::new(),
    )
    .await;
    let alice = |ca: &tls::issue::Ca| {
        ca.issue(&tls::issue::LeafSpec {
            common_name: "alice".to_owned(),
            organizations: vec!["system:masters".to_owned()],
            client: true,
            ..Default::default()
        })
        .unwrap()
        .identity
    };
    let masters: &[(&str, &str)] = &[
        ("x-remote-user", "kube-aggregator"),
        ("x-remote-group", "system:masters"),
    ];
    let status = async |identity: tls::Identity, headers: &[(&str, &str)]| {
        must_get(server.addr, Some(&identity), "/metrics", headers)
            .await
            .0
    };
    assert_eq!(status(alice(&ca_a), &[]).await, StatusCode::OK);
    assert_eq!(
        status(alice(cp.cluster_ca()), &[]).await,
        StatusCode::UNAUTHORIZED,
        "the ConfigMap's client CA is not used while the flag is set"
    );
    let proxy = client_cert(cp.front_proxy_ca(), FRONT_PROXY_CLIENT);
    assert_eq!(status(proxy.clone(), masters).await, StatusCode::OK);

    let before = server.reloads.counts();
    let tmp = dir.path().join("client-ca.crt.tmp");
    std::fs::write(&tmp, ca_b.cert_pem()).unwrap();
    std::fs::rename(&tmp, &ca_file).unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        server.reloads.wait_for(|c| c.applied > before.applied),
    )
    .await
    .expect("the client CA file is reloaded");
    assert_eq!(status(alice(&ca_b), &[]).await, StatusCode::OK);
    assert_eq!(status(alice(&ca_a), &[]).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(proxy.clone(), masters).await, StatusCode::OK);

    // The ConfigMap rotates the front-proxy CA; the file's client CA stays.
    let front_proxy_2 = tls::issue::Ca::new("front-proxy-ca-2").unwrap();
    cp.core().upsert_configmap(
        "kube-system",
        AUTHENTICATION_CONFIGMAP,
        controlplane::authentication_configmap(
            cp.cluster_ca().cert_pem(),
            front_proxy_2.cert_pem(),
        ),
    );
    let proxy_2 = client_cert(&front_proxy_2, FRONT_PROXY_CLIENT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(proxy_2.clone(), masters).await != StatusCode::OK {
        assert!(Instant::now() < deadline, "the ConfigMap update is applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status(proxy, masters).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(alice(&ca_b), &[]).await, StatusCode::OK);
    assert_eq!(
        status(alice(cp.cluster_ca()), &[]).await,
        StatusCode::UNAUTHORIZED
    );
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_anonymous_and_metrics_needs_authorization() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.reviews().set_policy(allow_if(|a| {
        a.user == "prometheus" && matches!(a.path.as_deref(), Some("/metrics" | "/metrics/slis"))
    }));
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    for path in ["/healthz", "/livez"] {
        let (status, body) = must_get(server.addr, None, path, &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"), "{path}");
    }
    let (status, body) = must_get(server.addr, None, "/readyz?verbose", &[]).await;
    assert_eq!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "cold, but answered"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert!(
        reviews_by_server(&cp).is_empty(),
        "health paths need no review"
    );

    let (status, body) = must_get(server.addr, None, "/metrics", &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 1);
    assert_eq!(
        (reviews[0].0.user.as_str(), reviews[0].0.verb.as_str()),
        ("system:anonymous", "get")
    );
    assert_eq!(reviews[0].0.path.as_deref(), Some("/metrics"));

    // A client certificate of the cluster CA (client-ca-file from the ConfigMap).
    let prometheus = cp
        .issue_client_cert("prometheus", &["monitoring", "ops"])
        .unwrap();
    let (status, body) = must_get(server.addr, Some(&prometheus.identity), "/metrics", &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("process_cpu_seconds_total"), "{body}");
    let reviews = reviews_by_server(&cp);
    assert_eq!(
        reviews[1].0.groups,
        ["monitoring", "ops", "system:authenticated"],
        "user and groups from CN and O"
    );

    // The component SLIs: their own non-resource path, reviewed as such, recording what the
    // probes above saw (the cold replica's storage check failed).
    let (status, body) = must_get(
        server.addr,
        Some(&prometheus.identity),
        "/metrics/slis",
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for line in [
        "kubernetes_healthcheck{name=\"ping\",type=\"livez\"} 1\n",
        "kubernetes_healthcheck{name=\"metric-storage-ready\",type=\"readyz\"} 0\n",
        "# TYPE kubernetes_healthchecks_total counter\n",
    ] {
        assert!(body.contains(line), "{line}: {body}");
    }
    assert!(!body.contains("apiserver_request_total"), "{body}");
    assert_eq!(
        reviews_by_server(&cp).last().unwrap().0.path.as_deref(),
        Some("/metrics/slis")
    );
    server.stop().await;
    shutdown.cancel();
}

/// Changing the log verbosity (`PUT /debug/flags/v`, served with `--profiling`, the default)
/// is a non-resource `put`, reviewed as such: reading `/metrics` does not allow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_to_debug_flags_v_needs_its_own_permission() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.reviews().set_policy(allow_if(|a| {
        let path = a.path.as_deref();
        (a.user == "prometheus" && a.verb == "get" && path == Some("/metrics"))
            || (a.user == "ops" && a.verb == "put" && path == Some("/debug/flags/v"))
    }));
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    let prometheus = cp.issue_client_cert("prometheus", &["monitoring"]).unwrap();
    let ops = cp.issue_client_cert("ops", &["sre"]).unwrap();
    let put = |identity: tls::Identity, value: &'static str| async move {
        call(
            server.addr,
            Some(&identity),
            Method::PUT,
            "/debug/flags/v",
            &[],
            value,
        )
        .await
        .expect("a response")
    };

    let (status, body) = put(prometheus.identity.clone(), "6").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let denied: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        denied["message"],
        "forbidden: User \"prometheus\" cannot put path \"/debug/flags/v\": no RBAC policy matched"
    );
    assert_eq!(
        put(ops.identity.clone(), "6").await,
        (
            StatusCode::OK,
            "successfully set klog.logging.verbosity to 6\n".to_owned()
        )
    );
    assert_eq!(
        put(ops.identity.clone(), "six").await.0,
        StatusCode::BAD_REQUEST
    );
    let reviews = reviews_by_server(&cp);
    assert!(!reviews.is_empty());
    for (access, _) in &reviews {
        assert_eq!(
            (access.verb.as_str(), access.path.as_deref()),
            ("put", Some("/debug/flags/v"))
        );
    }
    server.stop().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_is_reviewed_once_within_the_ttl() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.add_token("dave-token", User::new("dave", &["readers"]));
    cp.reviews().set_policy(allow_if(|a| a.user == "dave"));
    let server = start_server(
        &cp,
        |s| s.authn.token_webhook_cache_ttl = Duration::from_secs(60),
        Vec::new(),
    )
    .await;
    let bearer = [("authorization", "Bearer dave-token")];
    for _ in 0..2 {
        let (status, body) = must_get(server.addr, None, "/metrics", &bearer).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let tokens: Vec<(String, String, bool)> = cp
        .reviews()
        .recorded()
        .into_iter()
        .filter_map(|r| match r {
            Review::Token {
                caller,
                token,
                authenticated,
                ..
            } => Some((caller, token, authenticated)),
            Review::Access { .. } => None,
        })
        .collect();
    assert_eq!(
        tokens,
        [(SERVICE_ACCOUNT.to_owned(), "dave-token".to_owned(), true)]
    );
    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 1, "the allow is cached too");
    assert_eq!(reviews[0].0.user, "dave");
    assert_eq!(reviews[0].0.groups, ["readers", "system:authenticated"]);

    let (status, body) = must_get(
        server.addr,
        None,
        "/metrics",
        &[("authorization", "Bearer forged")],
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );
    assert_eq!(
        cp.reviews().token_reviews().last(),
        Some(&("forged".to_owned(), false))
    );
    server.stop().await;
    shutdown.cancel();
}

/// Answers the aggregator's discovery probe of `/apis/metrics.k8s.io/v1beta1`, and only for
/// `system:kube-aggregator` behind the front proxy, while the API layer (another branch) is a
/// stub here. Every other request goes on to authorization.
struct ProbeStandIn;

impl Filter for ProbeStandIn {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let aggregator = parts
                .extensions
                .get::<UserInfo>()
                .is_some_and(|u| u.name == "system:kube-aggregator");
            if !aggregator || parts.uri.path() != "/apis/metrics.k8s.io/v1beta1" {
                return Verdict::Pass(None);
            }
            let list = json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "metrics.k8s.io/v1beta1", "resources": [
                {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}]});
            Verdict::Reject(
                http::Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(apiserver::body::full(list.to_string()))
                    .unwrap(),
            )
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_proxies_a_kubeconfig_user_and_the_server_asks_a_review() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    let server = start_server(&cp, |_| {}, vec![Arc::new(ProbeStandIn)]).await;
    cp.aggregator()
        .register(ApiService::new("metrics.k8s.io", "v1beta1", &server.url()))
        .unwrap();
    assert!(
        cp.aggregator()
            .wait_available("v1beta1.metrics.k8s.io", Duration::from_secs(10))
            .await,
        "{:?}",
        cp.aggregator().availability("v1beta1.metrics.k8s.io")
    );
    let mut dave = User::new("dave", &["readers"]);
    dave.extra
        .insert("scopes".to_owned(), vec!["metrics".to_owned()]);
    cp.add_token("dave-token", dave);
    cp.add_token("eve-token", User::new("eve", &[]));
    cp.reviews().set_policy(allow_if(|a| {
        a.user == "dave" && a.resource == "pods" && a.namespace == "default"
    }));
    cp.reviews().clear();

    // dave, through kube-apiserver: the front proxy vouches, the server asks about dave.
    let dir = tempfile::tempdir().unwrap();
    let (dave_config, eve_config) = (dir.path().join("dave"), dir.path().join("eve"));
    cp.kubeconfig_with_token(&dave_config, "dave-token")
        .unwrap();
    cp.kubeconfig_with_token(&eve_config, "eve-token").unwrap();
    let pods = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods";
    let (ok, out, err) = tokio::task::block_in_place(|| kubectl(dir.path(), &dave_config, pods));
    // Served once the API layer lands; a NotFound from our router until then.
    assert!(
        ok || err.contains("(NotFound)"),
        "dave was not served: {out} {err}"
    );
    let reviews = reviews_by_server(&cp);
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    let a = &reviews[0].0;
    assert_eq!(
        (
            a.user.as_str(),
            a.verb.as_str(),
            a.namespace.as_str(),
            a.resource.as_str()
        ),
        ("dave", "list", "default", "pods")
    );
    assert_eq!(a.groups, ["readers", "system:authenticated"]);
    assert_eq!(a.extra["scopes"], ["metrics"]);
    assert!(
        cp.reviews().token_reviews().is_empty(),
        "a proxied user needs no TokenReview"
    );

    // eve: denied, and kubectl shows the upstream wording.
    let (ok, _, err) = tokio::task::block_in_place(|| {
        kubectl(dir.path(), &eve_config, "/apis/metrics.k8s.io/v1beta1/pods")
    });
    assert!(!ok);
    assert!(
        err.contains(
            "Error from server (Forbidden): pods.metrics.k8s.io is forbidden: User \"eve\" \
             cannot list resource \"pods\" in API group \"metrics.k8s.io\" at the cluster scope"
        ),
        "{err}"
    );
    server.stop().await;
    shutdown.cancel();
}

/// `kubectl get --raw <path>` with this kubeconfig: (success, stdout, stderr).
fn kubectl(home: &Path, kubeconfig: &Path, path: &str) -> (bool, String, String) {
    let out = std::process::Command::new("kubectl")
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .args(["get", "--raw", path])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_authorized_for_the_requester_and_served_as_the_impersonated_user() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.add_token("alice-token", User::new("alice", &["support"]));
    cp.reviews().set_policy(allow_if(|a| {
        let impersonates = |resource: &str, name: &str| {
            a.user == "alice" && a.verb == "impersonate" && a.resource == resource && a.name == name
        };
        impersonates("users", "jane")
            || impersonates("groups", "viewers")
            || (a.user == "jane" && a.path.as_deref() == Some("/metrics"))
    }));
    let server = start_server(&cp, |_| {}, Vec::new()).await;
    let alice = ("authorization", "Bearer alice-token");

    // Alice may not read /metrics herself, but may act as jane, who may.
    let (status, _) = must_get(server.addr, None, "/metrics", &[alice]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = must_get(
        server.addr,
        None,
        "/metrics",
        &[
            alice,
            ("impersonate-user", "jane"),
            ("impersonate-group", "viewers"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reviews: Vec<Access> = reviews_by_server(&cp).into_iter().map(|(a, _)| a).collect();
    let asked: Vec<(&str, &str, &str, &str)> = reviews
        .iter()
        .map(|a| {
            (
                a.user.as_str(),
                a.verb.as_str(),
                a.resource.as_str(),
                a.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        asked[1..],
        [
            ("alice", "impersonate", "users", "jane"),
            ("alice", "impersonate", "groups", "viewers"),
            ("jane", "get", "", ""),
        ]
    );
    // The request went on as jane, in the groups asked for and system:authenticated.
    assert_eq!(reviews[3].groups, ["viewers", "system:authenticated"]);
    assert_eq!(reviews[3].path.as_deref(), Some("/metrics"));

    // Acting as someone alice may not be: 403 worded as k8s.io/apiserver words it.
    let (status, body) = must_get(
        server.addr,
        None,
        "/metrics",
        &[alice, ("impersonate-user", "system:admin")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let status_object: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status_object["message"],
        "users \"system:admin\" is forbidden: User \"alice\" cannot impersonate resource \
         \"users\" in API group \"\" at the cluster scope: no RBAC policy matched"
    );
    // A group without a user to go with it: 500, as upstream.
    let (status, body) = must_get(
        server.addr,
        None,
        "/metrics",
        &[alice, ("impersonate-group", "system:masters")],
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    server.stop().await;
    shutdown.cancel();
}
