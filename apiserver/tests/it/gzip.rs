//! gzip over real HTTPS, HTTP/1.1 and h2, with hyper clients: large lists compressed frame
//! by frame, small answers and clients that do not ask left alone, HEAD with GET's headers.

use std::borrow::Cow;
use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiserver::serve;
use apiserver::stack;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Version, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord};
use scraper::point::{ContainerSample, NodeName, NodeScrape, PodKey, Sample};
use scraper::store::Store;
use tokio_util::sync::CancellationToken;

use crate::support::Client;

const SECOND: i64 = 1_000_000_000;
/// The server's clock, fixed so two answers to the same list are byte for byte the same.
const NOW: i64 = 1_750_000_000 * SECOND;
const NODES: usize = 10;
const PODS_PER_NODE: usize = 200;
const PODS: &str = "/apis/metrics.k8s.io/v1beta1/pods";

/// A server with 2,000 pods (about 700 KB of PodMetricsList), assembled as `run` does.
struct Stack {
    addr: SocketAddr,
    shutdown: CancellationToken,
    _tmp: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn pod_name(n: usize, p: usize) -> String {
    format!("web-{n:02}-{p:03}-5d8f9c7b6")
}

impl Stack {
    async fn start() -> Stack {
        tls::provider::install_default();
        let tmp = tempfile::tempdir().unwrap();
        let inventory = Arc::new(Inventory::new());
        let store = Arc::new(Store::new(scraper::store::Config::new(
            Duration::from_secs(15),
        )));
        populate(&inventory, &store);
        let mut parts = stack::Parts::filled(inventory, store, Duration::from_secs(15));
        parts.health.started_ns = NOW - 60 * SECOND;
        parts.shed = None;
        parts.clock = Some(|| NOW);
        let stack = stack::build_router(parts, Registry::default());
        let server =
            crate::support::local_server(tmp.path(), stack.router, serve::Config::default()).await;
        let addr = server.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(server.run(shutdown.clone()));
        Stack {
            addr,
            shutdown,
            _tmp: tmp,
        }
    }
}

/// `NODES` nodes of `PODS_PER_NODE` pods, two scrapes 15 s apart ending at `NOW`.
fn populate(inventory: &Inventory, store: &Store) {
    let labels = inventory.interner().labels([("app", "web")]);
    for n in 0..NODES {
        let node = NodeName::from(format!("node-{n:02}").as_str());
        inventory.upsert_node(NodeRecord {
            name: node.clone(),
            labels: labels.clone(),
            addresses: Vec::new(),
            kubelet_port: None,
            metrics_path: None,
        });
        let pods: Vec<String> = (0..PODS_PER_NODE).map(|p| pod_name(n, p)).collect();
        for pod in &pods {
            inventory.upsert_pod(PodRecord {
                usage: scraper::store::UsageLink::new(),
                key: PodKey::new("default", pod),
                labels: labels.clone(),
                node_name: Some(node.clone()),
            });
        }
        for round in 0..2_i64 {
            let ts = NOW - (1 - round) * 15 * SECOND;
            let sample = |i: usize| Sample {
                timestamp_ns: ts,
                cpu_usage_ns_total: Some(
                    u64::try_from(round + 1).unwrap() * (1_000_000_007 + i as u64 * 7_919),
                ),
                cpu_nanocores: None,
                memory_working_set_bytes: Some((64 << 20) + i as u64 * 4096),
                start_time_ns: Some(NOW - 3600 * SECOND),
                swap_bytes: None,
            };
            let scrape = NodeScrape {
                node: Some(sample(n)),
                containers: pods
                    .iter()
                    .enumerate()
                    .map(|(i, pod)| ContainerSample {
                        namespace: Cow::Borrowed("default"),
                        pod: Cow::Borrowed(pod.as_str()),
                        container: Cow::Borrowed("app"),
                        sample: sample(i),
                    })
                    .collect(),
            };
            store.ingest(&node, &scrape, ts);
        }
    }
}

/// What came back, frame by frame.
struct Raw {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    frames: Vec<Bytes>,
}

impl Raw {
    fn bytes(&self) -> Vec<u8> {
        self.frames.concat()
    }
    fn encoding(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap())
    }
    fn vary(&self) -> Vec<&str> {
        self.headers
            .get_all(header::VARY)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }
    fn gunzipped(&self) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&self.bytes()[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    }
}

/// One request for JSON on a new connection; `h2` picks the protocol by ALPN.
async fn send(
    addr: SocketAddr,
    h2: bool,
    method: Method,
    path: &str,
    accept_encoding: Option<&str>,
) -> Raw {
    send_accepting(addr, h2, method, path, accept_encoding, "application/json").await
}

/// [`send`] with an `Accept` of its own.
async fn send_accepting(
    addr: SocketAddr,
    h2: bool,
    method: Method,
    path: &str,
    accept_encoding: Option<&str>,
    accept: &str,
) -> Raw {
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let stream = Client::insecure()
        .alpn(&[alpn])
        .connect(addr)
        .await
        .unwrap();
    let io = TokioIo::new(stream);
    let mut request = if h2 {
        Request::builder().uri(format!("https://localhost{path}"))
    } else {
        Request::builder()
            .uri(path)
            .header(header::HOST, "localhost")
    }
    .method(method)
    .header(header::ACCEPT, accept);
    if let Some(v) = accept_encoding {
        request = request.header(header::ACCEPT_ENCODING, v);
    }
    let response = crate::support::send(io, h2, request.body(Empty::<Bytes>::new()).unwrap()).await;
    let status = response.status();
    let version = response.version();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(data);
        }
    }
    Raw {
        status,
        version,
        headers,
        frames,
    }
}

#[tokio::test]
async fn a_large_list_is_gzip_streamed_over_http1_and_h2() {
    let stack = Stack::start().await;
    for h2 in [false, true] {
        let identity = send(stack.addr, h2, Method::GET, PODS, None).await;
        assert_eq!(identity.status, StatusCode::OK);
        assert_eq!(
            identity.version,
            if h2 {
                Version::HTTP_2
            } else {
                Version::HTTP_11
            }
        );
        assert_eq!(identity.encoding(), None);
        let list: serde_json::Value = serde_json::from_slice(&identity.bytes()).unwrap();
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            NODES * PODS_PER_NODE
        );
        assert!(
            identity.bytes().len() > 3 * 128 * 1024,
            "{}",
            identity.bytes().len()
        );

        let gzip = send(stack.addr, h2, Method::GET, PODS, Some("gzip")).await;
        assert_eq!(gzip.status, StatusCode::OK);
        assert_eq!(gzip.encoding(), Some("gzip"), "h2: {h2}");
        assert_eq!(gzip.vary(), ["Accept-Encoding"]);
        assert_eq!(gzip.headers[header::CONTENT_TYPE], "application/json");
        assert!(
            gzip.headers.get(header::CONTENT_LENGTH).is_none(),
            "streamed: no Content-Length"
        );
        if !h2 {
            assert_eq!(gzip.headers[header::TRANSFER_ENCODING], "chunked");
        }
        assert!(gzip.frames.len() > 1, "{} frames", gzip.frames.len());
        assert!(gzip.bytes().len() * 3 < identity.bytes().len());
        assert_eq!(gzip.gunzipped(), identity.bytes(), "h2: {h2}");
    }
}

#[tokio::test]
async fn small_answers_and_clients_that_do_not_ask_get_identity() {
    let stack = Stack::start().await;
    let one_pod = format!(
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/{}",
        pod_name(0, 0)
    );
    for h2 in [false, true] {
        for (path, accept_encoding) in [
            (PODS, Some("br")),
            (PODS, Some("gzip;q=0")),
            (PODS, Some("*;q=0.5, gzip;q=0")),
            (one_pod.as_str(), Some("gzip")),
            ("/apis/metrics.k8s.io/v1beta1", Some("gzip")),
            ("/openapi/v2", Some("gzip")),
            ("/metrics", Some("gzip")),
            ("/livez", Some("gzip")),
        ] {
            let r = send(stack.addr, h2, Method::GET, path, accept_encoding).await;
            assert_eq!(r.status, StatusCode::OK, "{path}");
            assert_eq!(r.encoding(), None, "{path} {accept_encoding:?} h2: {h2}");
            assert!(r.vary().iter().all(|v| *v != "Accept-Encoding"), "{path}");
        }
    }
}

#[tokio::test]
async fn quality_values_over_the_wire() {
    let stack = Stack::start().await;
    let small = "/apis/metrics.k8s.io/v1beta1";
    for h2 in [false, true] {
        for (path, accept_encoding, gzip) in [
            (PODS, "*;q=0.5", true),
            (PODS, "br, gzip;q=0.2", true),
            (PODS, "identity;q=0, gzip", true),
            // Identity refused: even a small answer is gzip.
            (small, "identity;q=0, gzip", true),
            (small, "*;q=0, gzip", true),
            (small, "gzip", false),
        ] {
            let r = send(stack.addr, h2, Method::GET, path, Some(accept_encoding)).await;
            assert_eq!(
                r.encoding() == Some("gzip"),
                gzip,
                "{path} {accept_encoding} h2: {h2}"
            );
            if gzip {
                serde_json::from_slice::<serde_json::Value>(&r.gunzipped()).unwrap();
            }
        }
    }
}

#[tokio::test]
async fn head_gets_the_headers_of_get_and_no_body() {
    let stack = Stack::start().await;
    for h2 in [false, true] {
        let head = send(
            stack.addr,
            h2,
            Method::HEAD,
            "/apis/metrics.k8s.io/v1beta1",
            None,
        )
        .await;
        assert!(head.bytes().is_empty(), "identity h2: {h2}");
        let head = send(stack.addr, h2, Method::HEAD, PODS, Some("gzip")).await;
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.encoding(), Some("gzip"), "h2: {h2}");
        assert_eq!(head.vary(), ["Accept-Encoding"]);
        assert!(head.bytes().is_empty(), "h2: {h2}");
        let small = send(
            stack.addr,
            h2,
            Method::HEAD,
            "/apis/metrics.k8s.io/v1beta1",
            Some("gzip"),
        )
        .await;
        assert_eq!(small.encoding(), None);
        assert!(small.bytes().is_empty(), "h2: {h2}");
        let get = send(
            stack.addr,
            h2,
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1",
            Some("gzip"),
        )
        .await;
        assert_eq!(
            small.headers.get(header::CONTENT_LENGTH),
            get.headers.get(header::CONTENT_LENGTH),
            "h2: {h2}"
        );
    }
}

/// A long list asked as YAML is streamed like JSON's, frame by frame, gzipped when asked: the
/// document is the JSON list's, turned into YAML whole.
#[tokio::test]
async fn a_large_list_in_yaml_is_streamed_and_gzipped() {
    let stack = Stack::start().await;
    let json = send(stack.addr, true, Method::GET, PODS, None)
        .await
        .bytes();
    let want = apiserver::api::yaml::document_from_json(&json);
    assert!(want.len() > 2 * apiserver::api::body::CHUNK_BYTES);
    for h2 in [false, true] {
        let yaml =
            send_accepting(stack.addr, h2, Method::GET, PODS, None, "application/yaml").await;
        assert_eq!(yaml.status, StatusCode::OK);
        assert_eq!(yaml.headers[header::CONTENT_TYPE], "application/yaml");
        assert!(yaml.frames.len() > 2, "{} frames", yaml.frames.len());
        assert!(yaml.bytes() == want, "h2 {h2}: not the whole list's YAML");
        let gzipped = send_accepting(
            stack.addr,
            h2,
            Method::GET,
            PODS,
            Some("gzip"),
            "application/yaml",
        )
        .await;
        assert_eq!(gzipped.encoding(), Some("gzip"));
        assert!(gzipped.gunzipped() == want, "h2 {h2}: gzip");
    }
}
