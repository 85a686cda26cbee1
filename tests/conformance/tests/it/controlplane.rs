//! The simulated control plane alone: a fake metrics backend (HTTPS, echoing what it received)
//! behind the aggregator, and the real kubectl (v1.32 and v1.37) against it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use conformance::aggregator::{self, ApiService};
use conformance::controlplane::{self, ControlPlane, User, serve};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A fake metrics server: answers discovery, echoes the identity headers and the client
/// certificate's CN it saw (its URL in `x-backend-url`), fails every request while `failing`
/// is set and only `/readyz` while `not_ready` is.
struct Backend {
    url: String,
    failing: Arc<AtomicBool>,
    not_ready: Arc<AtomicBool>,
}

/// A TLS config for a self-signed `localhost` / 127.0.0.1 certificate (offering HTTP/2 when
/// `http2`), a listener on 127.0.0.1 and its `https://` URL.
async fn self_signed_listener(http2: bool) -> (rustls::ServerConfig, TcpListener, String) {
    let identity = tls::issue::self_signed("localhost", &["127.0.0.1".to_owned()])
        .unwrap()
        .identity;
    let key = tls::server::certified_key(&identity).unwrap();
    let config =
        tls::server::config(Arc::new(rustls::sign::SingleCertAndKey::from(key)), http2).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    (config, listener, url)
}

async fn backend(shutdown: &CancellationToken) -> Backend {
    let (config, listener, url) = self_signed_listener(false).await;
    let failing = Arc::new(AtomicBool::new(false));
    let not_ready = Arc::new(AtomicBool::new(false));
    let (fail, unready, own_url) = (failing.clone(), not_ready.clone(), url.clone());
    let handler: serve::Handler = Arc::new(
        move |req: Request<hyper::body::Incoming>, peer: serve::Peer| {
            let (fail, unready, own_url) = (fail.clone(), unready.clone(), own_url.clone());
            Box::pin(async move {
                let path = req.uri().path().to_owned();
                if fail.load(Ordering::SeqCst)
                    || (path == "/readyz" && unready.load(Ordering::SeqCst))
                {
                    let mut r = Response::new(controlplane::full("down"));
                    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    return r;
                }
                if path == "/apis" {
                    return controlplane::status_response(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        "no v2",
                    );
                }
                if let Some(version) = path.strip_prefix("/apis/metrics.k8s.io/")
                    && !version.contains('/')
                {
                    return controlplane::json_response(
                        StatusCode::OK,
                        &json!({"kind":"APIResourceList","apiVersion":"v1","groupVersion":format!("metrics.k8s.io/{version}"),"resources":[
                        {"name":"nodes","singularName":"","namespaced":false,"kind":"NodeMetrics","verbs":["get","list"]},
                        {"name":"pods","singularName":"","namespaced":true,"kind":"PodMetrics","verbs":["get","list"]}]}),
                    );
                }
                let all = |name: &str| -> Vec<String> {
                    req.headers()
                        .get_all(name)
                        .iter()
                        .map(|v| v.to_str().unwrap_or("").to_owned())
                        .collect()
                };
                let cn = peer
                    .certs
                    .first()
                    .and_then(controlplane::authn::subject)
                    .map(|u| u.name)
                    .unwrap_or_default();
                let echo = json!({
                    "path": path, "query": req.uri().query(), "cn": cn,
                    "user": all("x-remote-user"), "uid": all("x-remote-uid"), "groups": all("x-remote-group"),
                    "extra_spoof": all("x-remote-extra-spoof"), "authorization": all("authorization"),
                    "audit": all("audit-id"), "accept": all("accept"),
                });
                let mut resp = controlplane::json_response(StatusCode::OK, &echo);
                resp.headers_mut()
                    .insert("x-backend", http::HeaderValue::from_static("fake"));
                if let Ok(v) = http::HeaderValue::from_str(&own_url) {
                    resp.headers_mut().insert("x-backend-url", v);
                }
                resp
            })
        },
    );
    tokio::spawn(serve::serve(
        listener,
        Arc::new(config),
        handler,
        shutdown.clone(),
    ));
    Backend {
        url,
        failing,
        not_ready,
    }
}

fn fast() -> aggregator::Config {
    aggregator::Config {
        check_interval: Duration::from_millis(300),
        retry_initial: Duration::from_millis(50),
        probe_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        ..aggregator::Config::default()
    }
}

async fn control_plane(shutdown: &CancellationToken) -> ControlPlane {
    let config = controlplane::Config {
        aggregator: fast(),
        ..Default::default()
    };
    ControlPlane::start(config, shutdown.clone()).await.unwrap()
}

/// A client trusting the cluster CA, optionally with a client certificate.
async fn call(
    cp: &ControlPlane,
    identity: Option<&tls::Identity>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, HeaderMap, Bytes) {
    let client = conformance::https::client::<Full<Bytes>>(
        &tls::client::Verify::Roots(vec![cp.cluster_ca().cert().clone()]),
        identity,
    )
    .unwrap();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{}{path}", cp.url()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// GET `path` as the cluster admin (bearer token), with `headers` besides.
async fn admin_get(
    cp: &ControlPlane,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let auth = format!("Bearer {}", cp.admin_token());
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    call(cp, None, Method::GET, path, &all, "").await
}

async fn get_json(cp: &ControlPlane, path: &str, accept: &str) -> (StatusCode, HeaderMap, Value) {
    let (s, h, b) = admin_get(cp, path, &[("accept", accept)]).await;
    (s, h, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

async fn with_backend(shutdown: &CancellationToken) -> (ControlPlane, Backend) {
    let cp = control_plane(shutdown).await;
    let b = backend(shutdown).await;
    cp.aggregator()
        .register(ApiService::new("metrics.k8s.io", "v1beta1", &b.url))
        .unwrap();
    let mut v1 = ApiService::new("metrics.k8s.io", "v1", &b.url);
    v1.version_priority = 200;
    cp.aggregator().register(v1).unwrap();
    for name in ["v1beta1.metrics.k8s.io", "v1.metrics.k8s.io"] {
        assert!(
            cp.aggregator()
                .wait_available(name, Duration::from_secs(10))
                .await,
            "{name} available"
        );
    }
    (cp, b)
}

#[tokio::test]
async fn proxy_presents_front_proxy_identity_and_strips_credentials() {
    let shutdown = CancellationToken::new();
    let (cp, _b) = with_backend(&shutdown).await;
    let mut alice = User::new("alice", &["dev", "ops"]);
    alice.uid = "uid-alice".to_owned();
    cp.add_token("alice-token", alice);
    let (status, headers, body) = call(
        &cp,
        None,
        Method::GET,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb,tier+in+(a)&limit=5",
        &[
            ("authorization", "Bearer alice-token"),
            ("x-remote-user", "system:admin"),
            ("x-remote-group", "system:masters"),
            ("x-remote-extra-spoof", "1"),
            ("accept", "application/json"),
        ],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers.get("x-backend").unwrap(),
        "fake",
        "backend headers come back"
    );
    let echo: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(echo["cn"], "front-proxy-client");
    assert_eq!(echo["user"], json!(["alice"]));
    assert_eq!(echo["uid"], json!(["uid-alice"]));
    assert_eq!(
        echo["groups"],
        json!(["dev", "ops", "system:authenticated"])
    );
    assert_eq!(echo["extra_spoof"], json!([]));
    assert_eq!(echo["authorization"], json!([]));
    assert_eq!(echo["accept"], json!(["application/json"]));
    assert_eq!(echo["audit"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        echo["path"],
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"
    );
    assert_eq!(
        echo["query"],
        "labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5"
    );
    shutdown.cancel();
}

#[tokio::test]
async fn client_certificates_of_the_cluster_ca_authenticate() {
    let shutdown = CancellationToken::new();
    let (cp, _b) = with_backend(&shutdown).await;
    let cert = cp.issue_client_cert("bob", &["team-b"]).unwrap();
    let (status, _, body) = call(
        &cp,
        Some(&cert.identity),
        Method::GET,
        "/apis/metrics.k8s.io/v1/nodes",
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let echo: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(echo["user"], json!(["bob"]));
    assert_eq!(echo["groups"], json!(["team-b", "system:authenticated"]));

    // A certificate from another CA is rejected, not treated as anonymous.
    let other = tls::issue::Ca::new("other").unwrap();
    let stranger = other
        .issue(&tls::issue::LeafSpec {
            common_name: "bob".into(),
            client: true,
            ..Default::default()
        })
        .unwrap();
    let (status, _, _) = call(&cp, Some(&stranger.identity), Method::GET, "/apis", &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // No credentials: health is open, the rest forbidden; a bad token is 401.
    let (status, _, body) = call(&cp, None, Method::GET, "/readyz", &[], "").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    let (status, _, _) = call(&cp, None, Method::GET, "/apis", &[], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = call(
        &cp,
        None,
        Method::GET,
        "/apis",
        &[("authorization", "Bearer nope")],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    shutdown.cancel();
}

#[tokio::test]
async fn unavailable_apiservice_answers_503_and_turns_stale() {
    let shutdown = CancellationToken::new();
    let (cp, b) = with_backend(&shutdown).await;
    b.failing.store(true, Ordering::SeqCst);
    cp.aggregator().check_now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cp
        .aggregator()
        .availability("v1beta1.metrics.k8s.io")
        .unwrap()
        .available
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never became unavailable"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let a = cp
        .aggregator()
        .availability("v1beta1.metrics.k8s.io")
        .unwrap();
    assert_eq!(a.reason, "FailedDiscoveryCheck");
    assert!(
        a.message.ends_with("/apis/metrics.k8s.io/v1beta1: 500"),
        "{}",
        a.message
    );

    let (status, headers, body) = admin_get(&cp, "/apis/metrics.k8s.io/v1beta1/nodes", &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(&body[..], b"service unavailable\n");
    assert!(headers.get("retry-after").is_none());

    let (_, _, doc) = get_json(&cp, "/apis", controlplane::discovery::V2_CONTENT_TYPE).await;
    let metrics = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "metrics.k8s.io")
        .unwrap();
    for v in metrics["versions"].as_array().unwrap() {
        assert_eq!(v["freshness"], "Stale", "{v}");
    }
    // The aggregator still answers the group itself.
    let (status, _, group) = get_json(&cp, "/apis/metrics.k8s.io/", "application/json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(group["preferredVersion"]["version"], "v1");
    shutdown.cancel();
}

#[tokio::test]
async fn unreachable_backend_is_a_503_with_the_error() {
    let shutdown = CancellationToken::new();
    let backend_stop = shutdown.child_token();
    // Checks are rare here, so the APIService stays Available after the backend dies and the
    // proxy meets the connection error, as a request racing a dying backend does.
    let cfg = controlplane::Config {
        aggregator: aggregator::Config {
            check_interval: Duration::from_secs(3600),
            ..fast()
        },
        ..Default::default()
    };
    let cp = ControlPlane::start(cfg, shutdown.clone()).await.unwrap();
    let b = backend(&backend_stop).await;
    cp.aggregator()
        .register(ApiService::new("metrics.k8s.io", "v1beta1", &b.url))
        .unwrap();
    assert!(
        cp.aggregator()
            .wait_available("v1beta1.metrics.k8s.io", Duration::from_secs(10))
            .await
    );
    backend_stop.cancel();
    // Once the backend is gone, the proxied request fails.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (status, headers, body) = loop {
        let answer = admin_get(&cp, "/apis/metrics.k8s.io/v1beta1/nodes", &[]).await;
        if answer.0 != StatusCode::OK || tokio::time::Instant::now() >= deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        headers.get("content-type").unwrap(),
        "text/plain; charset=utf-8"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.starts_with("error trying to reach service: "),
        "{text} {:?}",
        cp.aggregator().availability("v1beta1.metrics.k8s.io")
    );
    assert!(text.contains("onnect"), "{text}");

    // The next check notices.
    cp.aggregator().check_now();
    let a = wait_availability(&cp, "v1beta1.metrics.k8s.io", "unavailable", |a| {
        !a.available
    })
    .await;
    assert!(
        a.message
            .starts_with("failing or missing response from https://127.0.0.1:"),
        "{}",
        a.message
    );
    shutdown.cancel();
}

/// Polls the availability of `name` until `ok` holds, or panics after 10 s.
async fn wait_availability(
    cp: &ControlPlane,
    name: &str,
    what: &str,
    ok: impl Fn(&aggregator::Availability) -> bool,
) -> aggregator::Availability {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let a = cp.aggregator().availability(name).unwrap();
        if ok(&a) {
            return a;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {a:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which backends answered `n` proxied node lists, by URL (a 503 counts as `503`).
async fn served_by(cp: &ControlPlane, n: usize) -> Vec<String> {
    let mut by = Vec::new();
    for _ in 0..n {
        let (status, headers, _) = admin_get(cp, "/apis/metrics.k8s.io/v1beta1/nodes", &[]).await;
        by.push(match headers.get("x-backend-url") {
            Some(url) if status == StatusCode::OK => url.to_str().unwrap().to_owned(),
            _ => status.as_u16().to_string(),
        });
    }
    by
}

#[tokio::test]
async fn a_service_balances_over_its_ready_endpoints() {
    let shutdown = CancellationToken::new();
    let cfg = controlplane::Config {
        aggregator: aggregator::Config {
            readiness: aggregator::ReadinessProbe {
                period: Duration::from_millis(50),
                failure_threshold: 2,
                ..Default::default()
            },
            ..fast()
        },
        ..Default::default()
    };
    let cp = ControlPlane::start(cfg, shutdown.clone()).await.unwrap();
    let agg = cp.aggregator();
    let svc = aggregator::METRICS_SERVER_SERVICE;
    let name = "v1beta1.metrics.k8s.io";
    agg.register(ApiService::for_service("metrics.k8s.io", "v1beta1", svc))
        .unwrap();
    let a = wait_availability(&cp, name, "no endpoints", |a| {
        a.reason == "EndpointsNotFound"
    })
    .await;
    assert_eq!(
        a.message,
        "cannot find endpointslices for service/metrics-server in \"kube-system\""
    );
    assert_eq!(served_by(&cp, 1).await, ["503"]);

    // Two pods; b's readiness probe fails, so only a gets traffic.
    let (a, b) = (backend(&shutdown).await, backend(&shutdown).await);
    b.not_ready.store(true, Ordering::SeqCst);
    agg.add_endpoint(svc, &a.url).unwrap();
    agg.add_endpoint(svc, &b.url).unwrap();
    assert!(
        agg.wait_endpoint_ready(svc, &a.url, Duration::from_secs(10))
            .await
    );
    assert!(agg.wait_available(name, Duration::from_secs(10)).await);
    assert_eq!(
        agg.endpoints(svc),
        [
            aggregator::EndpointStatus {
                url: a.url.clone(),
                ready: true
            },
            aggregator::EndpointStatus {
                url: b.url.clone(),
                ready: false
            },
        ]
    );
    assert!(served_by(&cp, 6).await.iter().all(|u| *u == a.url));

    // b passes its probe: requests go to both.
    b.not_ready.store(false, Ordering::SeqCst);
    assert!(
        agg.wait_endpoint_ready(svc, &b.url, Duration::from_secs(10))
            .await
    );
    let by = served_by(&cp, 10).await;
    for url in [&a.url, &b.url] {
        assert!(by.iter().filter(|u| *u == url).count() >= 3, "{by:?}");
    }
    assert!(by.iter().all(|u| *u == a.url || *u == b.url), "{by:?}");

    // a is deleted: from this moment on no request reaches it (it still serves).
    assert!(agg.remove_endpoint(svc, &a.url));
    assert!(!agg.remove_endpoint(svc, &a.url));
    assert!(served_by(&cp, 6).await.iter().all(|u| *u == b.url));

    // b fails failureThreshold probes in a row: no ready endpoint, 503, MissingEndpoints.
    b.not_ready.store(true, Ordering::SeqCst);
    let a = wait_availability(&cp, name, "no ready endpoint", |a| {
        a.reason == "MissingEndpoints"
    })
    .await;
    assert_eq!(
        a.message,
        "endpointslices for service/metrics-server in \"kube-system\" have no addresses with port name \"https\""
    );
    let (status, _, body) = admin_get(&cp, "/apis/metrics.k8s.io/v1beta1/nodes", &[]).await;
    assert_eq!(
        (status, &body[..]),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            &b"service unavailable\n"[..]
        )
    );

    // And back.
    b.not_ready.store(false, Ordering::SeqCst);
    assert!(agg.wait_available(name, Duration::from_secs(10)).await);
    assert_eq!(served_by(&cp, 2).await, [b.url.clone(), b.url.clone()]);
    shutdown.cancel();
}

#[tokio::test]
async fn availability_passes_while_one_endpoint_of_several_fails_discovery() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    let agg = cp.aggregator();
    let svc = aggregator::METRICS_SERVER_SERVICE;
    let name = "v1beta1.metrics.k8s.io";
    agg.register(ApiService::for_service("metrics.k8s.io", "v1beta1", svc))
        .unwrap();
    let (a, b) = (backend(&shutdown).await, backend(&shutdown).await);
    agg.add_endpoint(svc, &a.url).unwrap();
    agg.add_endpoint(svc, &b.url).unwrap();
    for url in [&a.url, &b.url] {
        assert!(
            agg.wait_endpoint_ready(svc, url, Duration::from_secs(10))
                .await
        );
    }
    assert!(agg.wait_available(name, Duration::from_secs(10)).await);
    // a answers 500 to everything (its readiness too, but that takes three periods to
    // count): every check in the meantime still finds b.
    a.failing.store(true, Ordering::SeqCst);
    for _ in 0..5 {
        agg.check_now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = agg.availability(name).unwrap();
        assert!(status.available, "{status:?}");
    }
    // Once a is not ready, traffic goes to b only.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while agg.endpoints(svc)[0].ready {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served_by(&cp, 4).await.iter().all(|u| *u == b.url));
    shutdown.cancel();
}

#[tokio::test]
async fn discovery_documents_have_kube_apiserver_shapes() {
    let shutdown = CancellationToken::new();
    let (cp, _b) = with_backend(&shutdown).await;
    let (_, _, versions) = get_json(&cp, "/api", "application/json").await;
    assert_eq!(versions["kind"], "APIVersions");
    assert_eq!(versions["versions"], json!(["v1"]));

    let (_, _, core) = get_json(&cp, "/api/v1", "application/json").await;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for want in ["configmaps", "namespaces", "nodes", "pods"] {
        assert!(names.contains(&want), "{names:?}");
    }

    let (_, _, groups) = get_json(&cp, "/apis", "application/json").await;
    assert_eq!(groups["kind"], "APIGroupList");
    let metrics = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "metrics.k8s.io")
        .unwrap();
    assert_eq!(
        metrics["versions"],
        json!([{"groupVersion":"metrics.k8s.io/v1","version":"v1"},{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}])
    );
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apiregistration.k8s.io")
    );

    let v2 = controlplane::discovery::V2_CONTENT_TYPE;
    for path in ["/api", "/apis"] {
        let (status, headers, _) = get_json(&cp, path, &format!("{v2},application/json")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get("content-type").unwrap(), v2, "{path}");
    }
    let (_, _, doc) = get_json(&cp, "/apis", v2).await;
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    let metrics = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "metrics.k8s.io")
        .unwrap();
    let versions: Vec<&str> = metrics["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
    let v1 = &metrics["versions"][0];
    assert_eq!(v1["freshness"], "Current");
    assert_eq!(
        v1["resources"][1],
        json!({"resource":"pods","responseKind":{"group":"","version":"","kind":"PodMetrics"},"scope":"Namespaced","singularResource":"","verbs":["get","list"]})
    );

    // Discovery of a registered version is proxied to the backend.
    let (status, _, list) = get_json(&cp, "/apis/metrics.k8s.io/v1beta1", "application/json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["groupVersion"], "metrics.k8s.io/v1beta1");
    let (status, _, _) = get_json(&cp, "/apis/metrics.k8s.io/v2", "application/json").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    shutdown.cancel();
}

#[tokio::test]
async fn reviews_and_the_authentication_configmap() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    cp.add_token(
        "sa-token",
        User::new(
            "system:serviceaccount:kube-system:metrics-server",
            &["system:serviceaccounts"],
        ),
    );
    cp.add_token("carol-token", User::new("carol", &[]));
    let sa = [
        ("authorization", "Bearer sa-token"),
        ("content-type", "application/json"),
    ];

    let (status, _, body) = call(&cp, None, Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", &sa,
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"carol-token"}}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["status"]["authenticated"], true);
    assert_eq!(review["status"]["user"]["username"], "carol");
    assert_eq!(
        review["status"]["user"]["groups"],
        json!(["system:authenticated"])
    );
    let (_, _, body) = call(
        &cp,
        None,
        Method::POST,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &sa,
        r#"{"spec":{"token":"forged"}}"#,
    )
    .await;
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["status"]["authenticated"],
        false
    );
    assert_eq!(
        cp.reviews().token_reviews(),
        [
            ("carol-token".to_owned(), true),
            ("forged".to_owned(), false)
        ]
    );

    cp.reviews()
        .set_policy(Arc::new(|a: &controlplane::Access| {
            if a.user == "carol" && a.verb == "list" && a.resource == "pods" {
                controlplane::Decision::allow("test")
            } else {
                controlplane::Decision::deny("")
            }
        }));
    let sar = |user: &str, verb: &str| {
        format!(
            r#"{{"spec":{{"user":"{user}","groups":["system:authenticated"],"resourceAttributes":{{"namespace":"default","verb":"{verb}","group":"metrics.k8s.io","version":"v1beta1","resource":"pods"}}}}}}"#
        )
    };
    let (status, _, body) = call(
        &cp,
        None,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &sa,
        &sar("carol", "list"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["status"]["allowed"],
        true
    );
    let (_, _, body) = call(
        &cp,
        None,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &sa,
        &sar("carol", "get"),
    )
    .await;
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["status"]["allowed"],
        false
    );
    let seen = cp.reviews().access_reviews();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (
            seen[0].namespace.as_str(),
            seen[0].group.as_str(),
            seen[1].verb.as_str()
        ),
        ("default", "metrics.k8s.io", "get")
    );

    let (status, _, cm) = get_json(
        &cp,
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
        "application/json",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let data = &cm["data"];
    assert_eq!(
        data["requestheader-allowed-names"],
        r#"["front-proxy-client"]"#
    );
    assert_eq!(
        data["requestheader-username-headers"],
        r#"["X-Remote-User"]"#
    );
    assert_eq!(data["requestheader-group-headers"], r#"["X-Remote-Group"]"#);
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        r#"["X-Remote-Extra-"]"#
    );
    assert_eq!(data["requestheader-uid-headers"], r#"["X-Remote-Uid"]"#);
    assert_eq!(
        data["requestheader-client-ca-file"],
        cp.front_proxy_ca().cert_pem()
    );
    assert_eq!(data["client-ca-file"], cp.cluster_ca().cert_pem());
    shutdown.cancel();
}

fn kubectls() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let v137 = root.join("_output/kubectl-1.37/bin/kubectl");
    assert!(
        v137.exists(),
        "kubectl 1.37 missing: run tests/conformance/install-kubectl.sh"
    );
    vec![PathBuf::from("/usr/bin/kubectl"), v137]
}

fn kubectl(
    bin: &PathBuf,
    home: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let out = std::process::Command::new(bin)
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_the_aggregated_group() {
    let shutdown = CancellationToken::new();
    let (cp, b) = with_backend(&shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cp.kubeconfig(&kubeconfig).unwrap();
    for bin in kubectls() {
        let home = tempfile::tempdir().unwrap();
        let (ok, out, err) = tokio::task::block_in_place(|| {
            kubectl(&bin, home.path(), &kubeconfig, &["get", "--raw", "/apis"])
        });
        assert!(ok, "{bin:?}: {err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert!(
            doc["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "metrics.k8s.io"),
            "{out}"
        );

        let (ok, out, err) = tokio::task::block_in_place(|| {
            kubectl(&bin, home.path(), &kubeconfig, &["api-versions"])
        });
        assert!(ok, "{bin:?}: {err}");
        let lines: Vec<&str> = out.lines().collect();
        for want in [
            "metrics.k8s.io/v1",
            "metrics.k8s.io/v1beta1",
            "v1",
            "apiregistration.k8s.io/v1",
        ] {
            assert!(lines.contains(&want), "{bin:?} api-versions: {out}");
        }
        let (ok, out, err) = tokio::task::block_in_place(|| {
            kubectl(
                &bin,
                home.path(),
                &kubeconfig,
                &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
            )
        });
        assert!(ok, "{bin:?}: {err}");
        let echo: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(echo["user"], json!(["kubernetes-admin"]));
        assert_eq!(
            echo["groups"],
            json!(["system:masters", "system:authenticated"])
        );
    }

    // A failing backend: its versions go Stale and kubectl leaves them out.
    b.failing.store(true, Ordering::SeqCst);
    cp.aggregator().check_now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cp
        .aggregator()
        .availability("v1.metrics.k8s.io")
        .unwrap()
        .available
    {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for bin in kubectls() {
        let home = tempfile::tempdir().unwrap();
        let (_, out, _) = tokio::task::block_in_place(|| {
            kubectl(&bin, home.path(), &kubeconfig, &["api-versions"])
        });
        assert!(
            !out.lines().any(|l| l.starts_with("metrics.k8s.io")),
            "{bin:?}: {out}"
        );
        assert!(
            out.lines().any(|l| l == "apiregistration.k8s.io/v1"),
            "{bin:?}: {out}"
        );
    }
    shutdown.cancel();
}

/// A backend that authenticates and authorizes like the real server: `apiserver::auth` with a
/// kube client against the control plane (ConfigMap lookup, TokenReview, SubjectAccessReview).
async fn real_auth_backend(cp: &ControlPlane, shutdown: &CancellationToken) -> String {
    tls::provider::install_default();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cp.add_token(
        "metrics-server-sa",
        User::new(
            "system:serviceaccount:kube-system:metrics-server",
            &["system:serviceaccounts"],
        ),
    );
    cp.kubeconfig_with_token(&kubeconfig, "metrics-server-sa")
        .unwrap();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let client = apiserver::auth::review_client(config).unwrap();
    let authn = Arc::new(
        apiserver::auth::Authenticator::new(
            apiserver::auth::AuthnConfig::default(),
            Some(client.clone()),
        )
        .await
        .unwrap(),
    );
    let authz =
        Arc::new(apiserver::auth::Authorizer::new(Default::default(), Some(client)).unwrap());

    let (tls_config, listener, url) = self_signed_listener(true).await;
    let handler: serve::Handler = Arc::new(
        move |req: Request<hyper::body::Incoming>, peer: serve::Peer| {
            let (authn, authz) = (authn.clone(), authz.clone());
            Box::pin(async move {
                let (mut parts, _) = req.into_parts();
                let user = match authn
                    .authenticate(&mut parts.headers, Some(&peer.certs[..]))
                    .await
                {
                    Ok(u) => u,
                    Err(e) => {
                        return controlplane::status_response(
                            StatusCode::UNAUTHORIZED,
                            "Unauthorized",
                            &e.to_string(),
                        );
                    }
                };
                let attrs =
                    apiserver::auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
                match authz.authorize(&user, &attrs).await {
                    apiserver::auth::Decision::Allow => controlplane::json_response(
                        StatusCode::OK,
                        &json!({"kind":"APIResourceList","apiVersion":"v1","groupVersion":"metrics.k8s.io/v1beta1","resources":[],
                            "user": user.name, "groups": user.groups}),
                    ),
                    apiserver::auth::Decision::Deny(_) => {
                        controlplane::status_response(StatusCode::FORBIDDEN, "Forbidden", "denied")
                    }
                    apiserver::auth::Decision::Throttled(_) => controlplane::status_response(
                        StatusCode::TOO_MANY_REQUESTS,
                        "TooManyRequests",
                        "throttled",
                    ),
                    apiserver::auth::Decision::Error(e) => controlplane::status_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "InternalError",
                        &e,
                    ),
                }
            })
        },
    );
    tokio::spawn(serve::serve(
        listener,
        Arc::new(tls_config),
        handler,
        shutdown.clone(),
    ));
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_authenticator_trusts_the_aggregator_and_asks_for_reviews() {
    let shutdown = CancellationToken::new();
    let cp = control_plane(&shutdown).await;
    let url = real_auth_backend(&cp, &shutdown).await;
    cp.aggregator()
        .register(ApiService::new("metrics.k8s.io", "v1beta1", &url))
        .unwrap();
    // The probe comes as system:kube-aggregator in system:masters: no review needed.
    assert!(
        cp.aggregator()
            .wait_available("v1beta1.metrics.k8s.io", Duration::from_secs(10))
            .await
    );

    cp.add_token("dave-token", User::new("dave", &["readers"]));
    cp.reviews()
        .set_policy(Arc::new(|a: &controlplane::Access| {
            if a.user == "dave"
                && a.verb == "list"
                && a.resource == "pods"
                && a.namespace == "default"
            {
                controlplane::Decision::allow("test policy")
            } else {
                controlplane::Decision::deny("")
            }
        }));
    cp.reviews().clear();
    let dave = [("authorization", "Bearer dave-token")];
    // Through the aggregator: front-proxy identity, then a SubjectAccessReview for dave.
    let (status, _, body) = call(
        &cp,
        None,
        Method::GET,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
        &dave,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["user"], "dave");
    assert_eq!(seen["groups"], json!(["readers", "system:authenticated"]));
    let (status, _, _) = call(
        &cp,
        None,
        Method::GET,
        "/apis/metrics.k8s.io/v1beta1/pods",
        &dave,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let reviews = cp.reviews().access_reviews();
    assert_eq!(reviews.len(), 2, "{reviews:?}");
    assert_eq!(
        (
            reviews[0].user.as_str(),
            reviews[0].verb.as_str(),
            reviews[0].namespace.as_str()
        ),
        ("dave", "list", "default")
    );
    assert_eq!(
        (reviews[1].namespace.as_str(), reviews[1].resource.as_str()),
        ("", "pods")
    );
    assert!(
        cp.reviews().token_reviews().is_empty(),
        "front-proxy users need no TokenReview"
    );

    // Straight to the backend with a bearer token: a TokenReview from the server's own client.
    let client =
        conformance::https::client::<Full<Bytes>>(&tls::client::Verify::Insecure, None).unwrap();
    let req = Request::get(format!(
        "{url}/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"
    ))
    .header("authorization", "Bearer dave-token")
    .body(Full::new(Bytes::new()))
    .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        cp.reviews().token_reviews(),
        [("dave-token".to_owned(), true)]
    );
    shutdown.cancel();
}
