//! Routing one request: the filter chain (where authentication, authorization and load
//! shedding plug in), then health, `/metrics`, `/metrics/slis`, the API, or a 404 Status.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use rustls_pki_types::CertificateDer;
use scraper::metrics::NodeSeries;
use tokio::time::Instant;

use super::{debugflags, gzip, httplog, pretty};
use crate::api::Api;
use crate::body::Body;
use crate::health::Health;
use crate::selfmetrics::{self, RequestKind, Requests};
use crate::status::Status;

/// The client certificate chain (leaf first), in the request's extensions when the client
/// presented one during the handshake. Not verified: each authenticator checks it against its
/// own CA (`--client-ca-file`, `--requestheader-client-ca-file`).
#[derive(Clone, Debug)]
pub struct PeerCertificates(pub Arc<[CertificateDer<'static>]>);

/// The client's address, in every request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr(pub SocketAddr);

/// Held while a request is served (until its response body is finished or dropped): an
/// in-flight slot of the load shedder, say.
pub type Guard = Box<dyn Send + Sync>;

/// What a [`Filter`] decided.
pub enum Verdict {
    /// Go on to the next filter, then the handlers; the guard, if any, lives as long as the
    /// response.
    Pass(Option<Guard>),
    /// Answer with this (a 401, 403 or 429 Status) and stop.
    Reject(Response<Body>),
}

impl std::fmt::Debug for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Pass(guard) => write!(f, "Pass(guard: {})", guard.is_some()),
            Verdict::Reject(r) => write!(f, "Reject({})", r.status()),
        }
    }
}

/// A step every request passes before routing, in order: authentication (which may record
/// the user in the extensions), authorization, admission. `parts.extensions` carries
/// [`PeerCertificates`] and [`RemoteAddr`].
pub trait Filter: Send + Sync + 'static {
    /// Decides on one request.
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict>;
}

/// Where each request goes.
pub struct Router {
    health: Arc<Health>,
    api: Arc<Api>,
    registry: Arc<Registry>,
    /// `/metrics/slis`' own registry, as k8s.io/component-base keeps the SLIs apart.
    slis: Registry,
    node_series: Option<Arc<NodeSeries>>,
    requests: Requests,
    filters: Vec<Arc<dyn Filter>>,
    clock: fn() -> i64,
    debug_flags: Option<debugflags::Setter>,
    audit: Option<Arc<crate::audit::Auditor>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("filters", &self.filters.len())
            .finish_non_exhaustive()
    }
}

/// The wall clock in Unix nanoseconds: the response time handed to health and the API.
pub use scraper::clock::unix_now_ns;

impl Router {
    /// A router with no filters (everything is allowed) and the wall clock.
    pub fn new(
        health: Arc<Health>,
        api: Arc<Api>,
        registry: Arc<Registry>,
        requests: Requests,
    ) -> Self {
        let mut slis = Registry::default();
        slis.register_collector(Box::new(health.sli_collector()));
        Router {
            health,
            api,
            registry,
            slis,
            node_series: None,
            requests,
            filters: Vec::new(),
            clock: unix_now_ns,
            debug_flags: None,
            audit: None,
        }
    }

    /// Appends a filter; filters run in the order they are added.
    pub fn with_filter(mut self, filter: Arc<dyn Filter>) -> Self {
        self.filters.push(filter);
        self
    }

    /// Serves `series` (the scrape loop's per-node families) on `/metrics` after the
    /// registry's.
    pub fn with_node_series(mut self, series: Arc<NodeSeries>) -> Self {
        self.node_series = Some(series);
        self
    }

    /// Serves `/debug/flags` and `/debug/flags/v`, whose `PUT` calls `set` (`--profiling`).
    pub fn with_debug_flags(mut self, set: debugflags::Setter) -> Self {
        self.debug_flags = Some(set);
        self
    }

    /// Writes the audit log's `ResponseComplete` events (and a failed authentication's);
    /// the auditor's [`filter`](crate::audit::Auditor::filter) goes after authentication.
    pub fn with_audit(mut self, auditor: Arc<crate::audit::Auditor>) -> Self {
        self.audit = Some(auditor);
        self
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    /// Answers one request. The request body is read only by `PUT /debug/flags/v` (a few
    /// bytes, bounded); every other route is a GET. The response, whoever made it (a
    /// filter's rejection included), is gzip-encoded when the request allows it and the body
    /// is large ([`gzip::encode`]).
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let (mut parts, body) = request.into_parts();
        if self.audit.is_some() {
            parts
                .extensions
                .insert(crate::audit::Received(unix_now_ns()));
        }
        let kind = RequestKind::of(&parts.method, &parts.uri);
        let accepts = gzip::Accepts::of(&parts.headers);
        let mut guards: Vec<Guard> = Vec::new();
        // A `?timeout=` that does not parse is refused before authentication, as
        // k8s.io/apiserver's `WithRequestDeadline` refuses it.
        let mut rejected = parts
            .extensions
            .remove::<InvalidTimeout>()
            .map(|invalid| Status::bad_request(invalid.0).into_negotiated(&parts.headers));
        for filter in self.filters.iter().take_while(|_| rejected.is_none()) {
            match filter.filter(&mut parts).await {
                Verdict::Pass(guard) => guards.extend(guard),
                Verdict::Reject(response) => {
                    // The filters passed so far release their guards at once.
                    guards.clear();
                    rejected = Some(response);
                    break;
                }
            }
        }
        // k8s.io/apiserver counts what its routes answer; of the filters' refusals, only the
        // 429s (`RecordDroppedRequest`), not a failed authentication or authorization.
        let counted = kind.filter(|_| {
            rejected
                .as_ref()
                .is_none_or(|r| r.status() == StatusCode::TOO_MANY_REQUESTS)
        });
        let mut response = match (rejected, self.debug_flags) {
            (Some(response), _) => response,
            (None, Some(set)) if debugflags::serves(parts.uri.path()) => {
                debugflags::answer(&parts.method, parts.uri.path(), body, set).await
            }
            (None, _) => self.route(&parts),
        };
        if let Some(kind) = counted {
            self.requests
                .observe(kind, response.status().as_u16(), started.elapsed());
        }
        common_headers(
            response.headers_mut(),
            parts.headers.get(AUDIT_ID).filter(|id| !id.is_empty()),
        );
        if pretty::wanted(&parts) {
            response = pretty::indent(parts.uri.path(), response);
        }
        let mut response = gzip::encode(accepts, response).await;
        if parts.method == Method::HEAD {
            response = without_body(response);
        }
        if httplog::enabled() {
            response = httplog::logged(&parts, started, response);
        }
        if let Some(auditor) = &self.audit {
            response = auditor.complete(&parts, response);
        }
        if guards.is_empty() {
            response
        } else {
            response.map(|body| {
                Guarded {
                    inner: body,
                    _guards: guards,
                }
                .boxed()
            })
        }
    }

    /// The 504 `Timeout` Status of a request that had no answer within `--request-timeout`
    /// (k8s.io/apiserver's timeout filter), counted in `apiserver_request_total` like every
    /// other answer of its kind, with the headers every answer has (`audit_id`: the
    /// request's `Audit-Id`); for HEAD, its headers without the body.
    pub fn timed_out(
        &self,
        kind: Option<RequestKind>,
        head: bool,
        elapsed: Duration,
        audit_id: Option<&HeaderValue>,
    ) -> Response<Body> {
        if let Some(kind) = kind {
            self.requests.observe(kind, 504, elapsed);
        }
        let mut response = Status::timeout().into_response();
        common_headers(response.headers_mut(), audit_id.filter(|id| !id.is_empty()));
        if head {
            without_body(response)
        } else {
            response
        }
    }

    fn route(&self, parts: &Parts) -> Response<Body> {
        let now_ns = (self.clock)();
        let path = parts.uri.path();
        if let Some(response) = self.health.handle(path, parts.uri.query(), now_ns) {
            return response;
        }
        if path == "/" || path == "/index.html" {
            return index();
        }
        if path == "/metrics" {
            return selfmetrics::response(
                &self.registry,
                self.node_series.as_ref(),
                parts.headers.get(header::ACCEPT),
            );
        }
        if path == SLIS_PATH {
            return selfmetrics::response(&self.slis, None, parts.headers.get(header::ACCEPT));
        }
        if let Some(response) = self.api.handle(parts, now_ns) {
            return response;
        }
        not_found()
    }
}

/// A request's `?timeout=` that Go's `time.ParseDuration` refuses: the 400's message, put in
/// the request's extensions by the connection (`conn::request_limit`) and answered before
/// the filters.
#[derive(Clone, Debug)]
pub struct InvalidTimeout(pub String);

/// The request and response header of k8s.io/apiserver's audit ID.
pub const AUDIT_ID: &str = "audit-id";

/// What k8s.io/apiserver's handler chain puts on every answer, a filter's refusal and a
/// timeout included, unless the handler set its own:
/// - `Cache-Control: no-cache, private` (`WithCacheControl`: every answer is behind
///   authentication and authorization, so no shared cache may keep it; OpenAPI documents
///   set their own);
/// - `Audit-Id`: the request's own, which kube-apiserver's aggregator sends, or a new random
///   UUID (`WithAuditInit`), so a client's `-v=8` output and the `-v=3` request log meet.
fn common_headers(headers: &mut http::HeaderMap, audit_id: Option<&HeaderValue>) {
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-cache, private"));
    if let http::header::Entry::Vacant(entry) = headers.entry(AUDIT_ID) {
        entry.insert(match audit_id {
            Some(id) => id.clone(),
            None => {
                let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
                let text = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
                HeaderValue::from_str(text).unwrap_or(HeaderValue::from_static(""))
            }
        });
    }
}

/// Where the component SLIs are served (`slis.SLIMetrics`).
pub const SLIS_PATH: &str = "/metrics/slis";

/// The generic apiserver's `routes.Index` at `/` and `/index.html`: every path served, sorted,
/// as indented JSON (`metav1.RootPaths` through `WriteRawJSON`).
fn index() -> Response<Body> {
    static BODY: std::sync::LazyLock<Bytes> = std::sync::LazyLock::new(|| {
        let mut paths: Vec<String> = Health::paths()
            .chain(["/metrics".to_owned(), SLIS_PATH.to_owned()])
            .chain(crate::api::routes::PATHS.iter().map(|p| (*p).to_owned()))
            .collect();
        paths.sort();
        let root = serde_json::json!({ "paths": paths });
        Bytes::from(serde_json::to_vec_pretty(&root).unwrap_or_default())
    });
    let mut response = Response::new(crate::body::full(BODY.clone()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A path no route serves: the generic apiserver's plain mux answers with Go's
/// `http.NotFound` (metrics-server's delegation chain ends in none of its own), not a
/// `Status`; the API's own paths answer their 404s as `Status` objects.
fn not_found() -> Response<Body> {
    let mut response = Response::new(crate::body::full(Bytes::from_static(
        b"404 page not found\n",
    )));
    *response.status_mut() = StatusCode::NOT_FOUND;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A HEAD answer: GET's headers (a Content-Length when the body's size is known), no body.
/// hyper leaves the body out over HTTP/1.1 but would send it over h2, where the client
/// resets the stream.
fn without_body(response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let status = parts.status;
    let has_body = !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED);
    if has_body && let Some(len) = http_body::Body::size_hint(&body).exact() {
        parts
            .headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    Response::from_parts(parts, crate::body::full(Bytes::new()))
}

/// A body that keeps the filters' guards alive until it is finished or dropped.
struct Guarded {
    inner: Body,
    _guards: Vec<Guard>,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::health;
    use http_body_util::Empty;
    use scraper::inventory::Inventory;
    use scraper::scrape::Progress;
    use scraper::selector::LabelSelector;
    use scraper::store::Store;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const NOW: i64 = 1_700_000_000_000_000_000;

    fn router() -> Router {
        let inventory = Arc::new(Inventory::new());
        let store = Arc::new(Store::new(scraper::store::Config::new(
            Duration::from_secs(15),
        )));
        let mut registry = Registry::default();
        let requests = Requests::new(&mut registry);
        selfmetrics::register_process_metrics(&mut registry);
        let api = Arc::new(Api::new(
            inventory.clone(),
            store.clone(),
            LabelSelector::default(),
            &mut registry,
        ));
        let signals = Arc::new(health::Sources {
            inventory,
            store,
            progress: Arc::new(Progress::completed()),
            inventory_is_static: true,
        });
        let health = Arc::new(Health::new(
            health::Config {
                resolution: Duration::from_secs(15),
                readiness_timeout: None,
                started_ns: NOW,
            },
            signals,
        ));
        Router::new(health, api, Arc::new(registry), requests).with_clock(|| NOW)
    }

    async fn get(router: &Router, uri: &str) -> (u16, String) {
        let response = router
            .handle(Request::get(uri).body(Empty::<Bytes>::new()).unwrap())
            .await;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn curl_gets_indented_json_and_kubectl_compact() {
        let r = router();
        let fetch = |uri: &'static str, agent: &'static str| {
            let r = &r;
            async move {
                let request = Request::get(uri)
                    .header(header::USER_AGENT, agent)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let response = r.handle(request).await;
                let body = response.into_body().collect().await.unwrap().to_bytes();
                String::from_utf8(body.to_vec()).unwrap()
            }
        };
        // An error Status, as curl shows it from any Kubernetes API server.
        let curl = fetch("/apis/metrics.k8s.io/v1/nodes/nope", "curl/8.5.0").await;
        assert!(
            curl.starts_with(
                "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n"
            ),
            "{curl}"
        );
        assert!(curl.ends_with("\n  \"code\": 404\n}"), "{curl}");
        // The same document either way.
        for uri in [
            "/apis/metrics.k8s.io/v1/nodes",
            "/apis/metrics.k8s.io/v1/pods",
            "/apis",
        ] {
            let compact = fetch(uri, "kubectl/v1.32.4").await;
            let pretty = fetch(uri, "curl/8.5.0").await;
            assert!(!compact.contains("\n  "), "{uri}: {compact}");
            assert!(pretty.contains("\n  \"kind\": "), "{uri}: {pretty}");
            let a: serde_json::Value = serde_json::from_str(&compact).unwrap();
            let b: serde_json::Value = serde_json::from_str(&pretty).unwrap();
            assert_eq!(a, b, "{uri}");
        }
        // OpenAPI documents and plain text are served as they are.
        let v2 = fetch("/openapi/v2", "curl/8.5.0").await;
        assert_eq!(v2, fetch("/openapi/v2", "kubectl/v1.32.4").await);
        assert_eq!(fetch("/livez", "curl/8.5.0").await, "ok");
    }

    #[tokio::test]
    async fn the_index_lists_every_path_served_and_each_is_served() {
        let r = router();
        let (status, body) = get(&r, "/").await;
        assert_eq!(status, 200);
        assert!(
            body.starts_with("{\n  \"paths\": [\n    \"/apis\",\n"),
            "{body}"
        );
        assert_eq!(get(&r, "/index.html").await, (200, body.clone()));
        let index: serde_json::Value = serde_json::from_str(&body).unwrap();
        let paths: Vec<&str> = index["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let mut sorted = paths.clone();
        sorted.sort_unstable();
        assert_eq!(paths, sorted);
        for must in [
            "/apis/metrics.k8s.io/v1",
            "/metrics",
            "/metrics/slis",
            "/readyz/shutdown",
            "/livez/ping",
        ] {
            assert!(paths.contains(&must), "{must}: {paths:?}");
        }
        for path in paths {
            assert_ne!(get(&r, path).await.0, 404, "{path}");
        }
        assert_eq!(get(&r, "/index.htm").await.0, 404);
    }

    #[tokio::test]
    async fn routes_health_metrics_and_404() {
        let r = router();
        assert_eq!(get(&r, "/livez").await, (200, "ok".to_owned()));
        assert_eq!(get(&r, "/healthz/ping").await, (200, "ok".to_owned()));
        // A path no route serves: Go's plain 404, as metrics-server's mux answers it; under
        // the API group, a Status.
        for path in [
            "/nope",
            "/healthz/nope",
            "/apis/other.example.com/v1",
            "/openapi/v9",
        ] {
            assert_eq!(
                get(&r, path).await,
                (404, "404 page not found\n".to_owned()),
                "{path}"
            );
        }
        let (status, body) = get(&r, "/apis/metrics.k8s.io/v1beta1/nope").await;
        assert_eq!(status, 404);
        let status_json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status_json["kind"], "Status");
        assert_eq!(status_json["reason"], "NotFound");
        assert_eq!(
            status_json["message"],
            "the server could not find the requested resource"
        );
        // /metrics counts the requests above as k8s.io/apiserver does: the health root, not
        // its check's sub-path nor a path no route serves.
        let (status, body) = get(&r, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.contains(
                "apiserver_request_total{code=\"200\",component=\"\",dry_run=\"\",group=\"\",\
                 resource=\"\",scope=\"\",subresource=\"/livez\",verb=\"GET\",version=\"\"} 1\n"
            ),
            "{body}"
        );
        assert_eq!(
            body.matches("apiserver_request_total{").count(),
            1,
            "{body}"
        );
        assert!(body.contains("process_resident_memory_bytes "), "{body}");
        assert!(!body.contains(".."), "{body}");
        assert!(!body.contains("kubernetes_healthcheck"), "{body}");
        // The SLIs are served apart: the root probe above counted, its sub-path did not.
        let (status, body) = get(&r, "/metrics/slis").await;
        assert_eq!(status, 200);
        assert!(
            body.contains(
                "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"livez\"} 1\n"
            ),
            "{body}"
        );
        assert!(!body.contains("type=\"healthz\""), "{body}");
        assert!(!body.contains("apiserver_request_total"), "{body}");
    }

    struct Deny;
    impl Filter for Deny {
        fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
            Box::pin(async move {
                if parts.uri.path() == "/livez" {
                    Verdict::Pass(None)
                } else {
                    Verdict::Reject(Status::forbidden("forbidden: no", None).into_response())
                }
            })
        }
    }

    struct Counting(Arc<AtomicUsize>);
    struct Slot(Arc<AtomicUsize>);
    impl Drop for Slot {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    impl Filter for Counting {
        fn filter<'a>(&'a self, _parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Verdict::Pass(Some(Box::new(Slot(self.0.clone())) as Guard)) })
        }
    }

    #[tokio::test]
    async fn every_answer_has_cache_control_and_an_audit_id() {
        let r = router().with_filter(Arc::new(Deny));
        let head = |uri: &str, audit: Option<&str>| {
            let mut request = Request::get(uri);
            if let Some(id) = audit {
                request = request.header("Audit-Id", id);
            }
            let r = &r;
            let request = request.body(Empty::<Bytes>::new()).unwrap();
            async move { r.handle(request).await.into_parts().0 }
        };
        // A handler's answer and a filter's refusal alike.
        let mut ids = Vec::new();
        for (uri, status) in [("/livez", 200), ("/metrics", 403), ("/metrics", 403)] {
            let parts = head(uri, None).await;
            assert_eq!(parts.status, status);
            assert_eq!(parts.headers[header::CACHE_CONTROL], "no-cache, private");
            let id = parts.headers[AUDIT_ID].to_str().unwrap().to_owned();
            let uuid = uuid::Uuid::parse_str(&id).unwrap();
            assert_eq!(uuid.get_version_num(), 4, "{id}");
            ids.push(id);
        }
        assert_ne!(ids[1], ids[2], "a new ID per request");
        // The aggregator's ID is echoed; an empty one is replaced.
        let parts = head("/livez", Some("8d1e0a3c-aggregator")).await;
        assert_eq!(parts.headers[AUDIT_ID], "8d1e0a3c-aggregator");
        let parts = head("/livez", Some("")).await;
        assert_eq!(parts.headers[AUDIT_ID].len(), 36);
        // A handler's own Cache-Control stays (aggregated discovery is public).
        let r = router();
        let request = Request::get("/apis")
            .header(
                header::ACCEPT,
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            )
            .body(Empty::<Bytes>::new())
            .unwrap();
        let parts = r.handle(request).await.into_parts().0;
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers[header::CACHE_CONTROL], "public");
    }

    #[tokio::test]
    async fn filters_can_reject_before_routing() {
        let r = router().with_filter(Arc::new(Deny));
        assert_eq!(get(&r, "/livez").await.0, 200);
        assert_eq!(get(&r, "/metrics").await.0, 403);
        assert_eq!(get(&r, "/nope").await.0, 403);
    }

    /// Refuses node lists with 403 and pod lists with 429, as authorization and load
    /// shedding would.
    struct Refuse;
    impl Filter for Refuse {
        fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
            let status = match parts.uri.path() {
                "/apis/metrics.k8s.io/v1/nodes" => StatusCode::FORBIDDEN,
                "/apis/metrics.k8s.io/v1/pods" => StatusCode::TOO_MANY_REQUESTS,
                _ => return Box::pin(async { Verdict::Pass(None) }),
            };
            let mut response = Response::new(crate::body::full(Bytes::new()));
            *response.status_mut() = status;
            Box::pin(async move { Verdict::Reject(response) })
        }
    }

    #[tokio::test]
    async fn of_the_filters_refusals_only_429s_are_counted() {
        let r = router().with_filter(Arc::new(Refuse));
        assert_eq!(get(&r, "/apis/metrics.k8s.io/v1/nodes").await.0, 403);
        assert_eq!(get(&r, "/apis/metrics.k8s.io/v1/pods").await.0, 429);
        let (_, body) = get(&r, "/metrics").await;
        let counted: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .collect();
        assert_eq!(
            counted,
            [
                "apiserver_request_total{code=\"429\",component=\"apiserver\",dry_run=\"\",\
              group=\"metrics.k8s.io\",resource=\"pods\",scope=\"cluster\",subresource=\"\",\
              verb=\"LIST\",version=\"v1\"} 1"
            ],
            "{body}"
        );
    }

    /// Answers everything with `len` bytes of text.
    struct Large(usize);
    impl Filter for Large {
        fn filter<'a>(&'a self, _parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
            let body = "0123456789abcdef".repeat(self.0 / 16);
            Box::pin(async move { Verdict::Reject(Response::new(crate::body::full(body))) })
        }
    }

    #[tokio::test]
    async fn every_answer_is_gzip_when_large_and_asked_for() {
        let r = router().with_filter(Arc::new(Large(256 * 1024)));
        let request = |method: Method, encoding: &str| {
            Request::builder()
                .method(method)
                .uri("/apis/metrics.k8s.io/v1/nodes")
                .header(header::ACCEPT_ENCODING, encoding)
                .body(Empty::<Bytes>::new())
                .unwrap()
        };
        let response = r.handle(request(Method::GET, "gzip")).await;
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(response.headers()[header::VARY], "Accept-Encoding");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let mut plain = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
            .unwrap();
        assert_eq!(plain, "0123456789abcdef".repeat(16 * 1024));

        let response = r.handle(request(Method::GET, "br")).await;
        assert!(response.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(
            http_body::Body::size_hint(response.body()).exact(),
            Some(256 * 1024)
        );

        // HEAD: GET's headers, no body.
        let response = r.handle(request(Method::HEAD, "gzip")).await;
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        assert!(response.headers().get(header::CONTENT_LENGTH).is_none());
        assert!(
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );
        let response = r.handle(request(Method::HEAD, "br")).await;
        assert_eq!(response.headers()[header::CONTENT_LENGTH], "262144");
        assert!(
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn guards_live_until_the_body_is_done() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let r = router().with_filter(Arc::new(Counting(in_flight.clone())));
        let response = r
            .handle(Request::get("/livez").body(Empty::<Bytes>::new()).unwrap())
            .await;
        assert_eq!(
            in_flight.load(Ordering::SeqCst),
            1,
            "held while the body is unsent"
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        assert_eq!(in_flight.load(Ordering::SeqCst), 0);
    }
}
