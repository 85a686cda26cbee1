//! What one peer can hold, over real TLS on 127.0.0.1 with short configured limits: the
//! connection cap, the handshake, header-read and idle timeouts, the header-size limit, and
//! `--request-timeout` (a 504 before the answer, the response cut after, its load-shedding
//! seat released). The h2 frame-level limits are in `h2.rs`.
//!
//! Each test waits on events (a closed socket, the open-connection count, the admission's
//! executing seats); the only fixed waits are the short ones that show something does *not*
//! happen.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::auth::UserInfo;
use apiserver::serve::{self, Connections, Filter, Verdict};
use apiserver::shed::class::Class;
use apiserver::shed::{self, Admission};
use apiserver::stack;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::request::Parts;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord};
use scraper::point::{NodeName, PodKey};
use scraper::store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::support::Client;

pub(crate) const USER: &str = "jane";
const PODS: &str = "/apis/metrics.k8s.io/v1beta1/pods";
/// How long a test waits for something that must happen.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not happen.
const QUIET: Duration = Duration::from_millis(400);

/// Stands in for authentication (`x-test-user`), so the admission filter counts seats.
struct Identify;

impl Filter for Identify {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Some(name) = parts
                .headers
                .get("x-test-user")
                .and_then(|v| v.to_str().ok())
            {
                parts.extensions.insert(UserInfo {
                    name: name.to_owned(),
                    uid: String::new(),
                    groups: vec!["system:authenticated".to_owned()],
                    extra: BTreeMap::new(),
                });
            }
            Verdict::Pass(None)
        })
    }
}

/// After admission: `x-test-hold` never answers, `x-test-delay-ms` answers late.
struct Stall;

impl Filter for Stall {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if parts.headers.contains_key("x-test-hold") {
                std::future::pending::<()>().await;
            }
            let delay = parts
                .headers
                .get("x-test-delay-ms")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            if let Some(ms) = delay {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Verdict::Pass(None)
        })
    }
}

/// A server assembled as `run` assembles it ([`stack`]), with the test's connection settings.
pub(crate) struct Stack {
    pub(crate) addr: SocketAddr,
    pub(crate) connections: Connections,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
    _tmp: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    /// A server with `config` and `nodes` nodes of 1,000 pods each.
    pub(crate) async fn start(config: serve::Config, nodes: usize) -> Stack {
        tls::provider::install_default();
        let tmp = tempfile::tempdir().unwrap();
        let inventory = Arc::new(Inventory::new());
        let store = Arc::new(Store::new(scraper::store::Config::new(
            Duration::from_secs(15),
        )));
        populate(&inventory, &store, nodes);
        let stack = stack::build_router(
            stack::Parts {
                // The store stays empty with no nodes: no cold-store 429s here.
                shed: Some(shed::Config {
                    cold_store_window: Duration::ZERO,
                    ..shed::Config::default()
                }),
                authentication: vec![Arc::new(Identify)],
                authorization: vec![Arc::new(Stall)],
                ..stack::Parts::filled(inventory, store, Duration::from_secs(15))
            },
            Registry::default(),
        );
        let admission = stack.admission.unwrap();
        let server = crate::support::local_server(tmp.path(), stack.router, config).await;
        let addr = server.local_addr().unwrap();
        let connections = server.connections();
        let shutdown = CancellationToken::new();
        tokio::spawn(server.run(shutdown.clone()));
        Stack {
            addr,
            connections,
            admission,
            shutdown,
            _tmp: tmp,
        }
    }

    /// Seats taken by ordinary users' requests.
    pub(crate) fn executing(&self) -> usize {
        self.admission.level(Class::Default).unwrap().executing()
    }

    /// Waits until `f` holds, for at most [`PATIENCE`].
    pub(crate) async fn until(&self, what: &str, f: impl Fn(&Stack) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !f(self) {
            assert!(
                Instant::now() < deadline,
                "{what}: {} executing, {} connections",
                self.executing(),
                self.connections.open()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `nodes` nodes of 1,000 pods each, with usage.
fn populate(inventory: &Inventory, store: &Store, nodes: usize) {
    let labels = inventory.interner().labels([("app", "web")]);
    for n in 0..nodes {
        let node = NodeName::from(format!("node-{n:02}").as_str());
        inventory.upsert_node(NodeRecord {
            name: node.clone(),
            labels: labels.clone(),
            addresses: Vec::new(),
            kubelet_port: None,
            metrics_path: None,
        });
        let pods: Vec<String> = (0..1000).map(|p| format!("web-{n:02}-{p:04}")).collect();
        for pod in &pods {
            inventory.upsert_pod(PodRecord {
                usage: scraper::store::UsageLink::new(),
                key: PodKey::new("default", pod),
                labels: labels.clone(),
                node_name: Some(node.clone()),
            });
        }
        crate::support::ingest_two_scrapes(store, &node, &pods);
    }
}

/// Short limits everywhere, then `f`'s changes.
pub(crate) fn config(f: impl FnOnce(&mut serve::Config)) -> serve::Config {
    let mut config = serve::Config {
        handshake_timeout: Duration::from_secs(5),
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        drain_timeout: Duration::from_secs(1),
        ..serve::Config::default()
    };
    f(&mut config);
    config
}

/// A TLS connection offering `alpn`, with a receive buffer of `rcvbuf` bytes when given (a
/// reader that cannot take much at once).
pub(crate) async fn connect(
    addr: SocketAddr,
    alpn: &[u8],
    rcvbuf: Option<u32>,
) -> TlsStream<TcpStream> {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).unwrap();
    }
    let tcp = socket.connect(addr).await.unwrap();
    let mut config = tls::client::config(&tls::client::Verify::Insecure, None).unwrap();
    // Empty: no ALPN at all.
    config.alpn_protocols = [alpn]
        .iter()
        .filter(|a| !a.is_empty())
        .map(|a| a.to_vec())
        .collect();
    TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap()
}

type Sender1 = http1::SendRequest<Empty<Bytes>>;
type Sender2 = http2::SendRequest<Empty<Bytes>>;

/// An HTTP/1.1 client on `stream`; the connection's task is returned to watch it end.
async fn h1(stream: TlsStream<TcpStream>) -> (Sender1, tokio::task::JoinHandle<()>) {
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

/// An h2 client on `stream`.
async fn h2(stream: TlsStream<TcpStream>) -> (Sender2, tokio::task::JoinHandle<()>) {
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

/// A GET of `path` as [`USER`] with extra `headers`, for either protocol.
fn get(path: &str, h2: bool, headers: &[(&str, &str)]) -> Request<Empty<Bytes>> {
    let mut request = if h2 {
        Request::get(format!("https://localhost{path}"))
    } else {
        Request::get(path).header(header::HOST, "localhost")
    }
    .header("x-test-user", USER);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Empty::new()).unwrap()
}

/// Sends `request` on an HTTP/1.1 sender and reads the whole answer.
async fn send1(sender: &mut Sender1, request: Request<Empty<Bytes>>) -> (StatusCode, Bytes) {
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// Reads until the server closes the connection (EOF or a reset), for at most [`PATIENCE`];
/// returns what came and how long it took.
async fn read_until_closed(stream: &mut (impl AsyncReadExt + Unpin)) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (got, started.elapsed()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("still open after {PATIENCE:?}; got {got:?}"),
        }
    }
}

#[tokio::test]
async fn connections_past_the_cap_wait_in_the_backlog_until_one_closes() {
    let stack = Stack::start(config(|c| c.max_connections = 2), 1).await;
    let (mut first, _first_conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
    let (mut second, second_conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
    assert_eq!(
        send1(&mut first, get("/livez", false, &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send1(&mut second, get("/livez", false, &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(stack.connections.open(), 2);

    // The third is taken by the kernel, but the server does not accept it: no handshake.
    let addr = stack.addr;
    let mut third = tokio::spawn(async move { connect(addr, b"http/1.1", None).await });
    assert!(
        tokio::time::timeout(QUIET, &mut third).await.is_err(),
        "a third connection was served past a cap of 2"
    );
    assert_eq!(stack.connections.open(), 2);
    // Those that are in keep working.
    assert_eq!(
        send1(&mut first, get("/livez", false, &[])).await.0,
        StatusCode::OK
    );

    // One closes: the waiting one is accepted and served.
    drop(second);
    second_conn.await.unwrap();
    let third = tokio::time::timeout(PATIENCE, third)
        .await
        .expect("the waiting connection was accepted")
        .unwrap();
    let (mut third, _third_conn) = h1(third).await;
    assert_eq!(
        send1(&mut third, get("/livez", false, &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(stack.connections.open(), 2);
}

#[tokio::test]
async fn a_tls_handshake_that_does_not_come_is_dropped_at_its_timeout() {
    let timeout = Duration::from_millis(300);
    let stack = Stack::start(config(|c| c.handshake_timeout = timeout), 0).await;
    // Silence, then half a ClientHello record header.
    let opened = Instant::now();
    let mut silent = TcpStream::connect(stack.addr).await.unwrap();
    let mut partial = TcpStream::connect(stack.addr).await.unwrap();
    partial.write_all(&[0x16, 0x03, 0x01, 0x02]).await.unwrap();
    stack
        .until("both accepted", |s| s.connections.open() == 2)
        .await;
    for stream in [&mut silent, &mut partial] {
        let (got, _) = read_until_closed(stream).await;
        assert!(got.is_empty(), "{got:?}");
        let after = opened.elapsed();
        assert!(
            after >= timeout - Duration::from_millis(50),
            "closed after {after:?}"
        );
    }
    stack
        .until("both closed", |s| s.connections.open() == 0)
        .await;
    // A real handshake is unaffected.
    assert_eq!(
        Client::insecure().get(stack.addr, "/livez").await.status,
        StatusCode::OK
    );
}

/// Go's server does not answer a head that did not come in time (a timeout is a "common net
/// read error": `return // don't reply`); neither does hyper.
#[tokio::test]
async fn half_a_request_head_is_closed_unanswered_at_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let stack = Stack::start(config(|c| c.header_read_timeout = timeout), 0).await;
    let mut tls = connect(stack.addr, b"http/1.1", None).await;
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .await
        .unwrap();
    let (got, after) = read_until_closed(&mut tls).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        after >= timeout - Duration::from_millis(50),
        "closed after {after:?}"
    );
    stack.until("closed", |s| s.connections.open() == 0).await;

    // A head that is complete in time is served on the same terms.
    let mut tls = connect(stack.addr, b"http/1.1", None).await;
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (got, _) = read_until_closed(&mut tls).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
}

/// A client that completes the TLS handshake and then sends nothing is dropped: over h2
/// at the preface timeout (Go's `prefaceTimeout`), over HTTP/1.1 (also when it named no
/// protocol) at its first head's header timeout.
#[tokio::test]
async fn a_client_silent_after_the_handshake_is_dropped() {
    let timeout = Duration::from_millis(300);
    let stack = Stack::start(
        config(|c| {
            c.preface_timeout = timeout;
            c.header_read_timeout = 2 * timeout;
            // Past the patience: only the first-bytes and head timers can close in time.
            c.idle_timeout = 2 * PATIENCE;
        }),
        0,
    )
    .await;
    for (alpn, after_at_least) in [
        (&b"h2"[..], timeout),
        (b"", 2 * timeout),
        (b"http/1.1", 2 * timeout),
    ] {
        let mut tls = connect(stack.addr, alpn, None).await;
        let (got, after) = read_until_closed(&mut tls).await;
        // An h2 server sends its SETTINGS without waiting for the client's preface.
        assert!(
            alpn == b"h2" || got.is_empty(),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        let protocol = String::from_utf8_lossy(alpn);
        assert!(
            after >= after_at_least - Duration::from_millis(50) && after < PATIENCE,
            "{protocol:?}: closed after {after:?}"
        );
        stack.until("closed", |s| s.connections.open() == 0).await;
    }
    // A client that speaks in time is served, and then only the idle timeout applies.
    let (mut sender, _conn) = h2(connect(stack.addr, b"h2", None).await).await;
    tokio::time::sleep(2 * timeout).await;
    let response = sender.send_request(get("/livez", true, &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// As in Go's server, a keep-alive HTTP/1.1 connection waits for its next request under the
/// idle timeout, not the header timeout (hyper's own header timer would close it at 32 s
/// instead of 90 s); a head that has begun then has the header timeout. The same for a
/// client that names no protocol in ALPN, which Go reads as HTTP/1.1.
#[tokio::test]
async fn a_keep_alive_http1_connection_waits_under_the_idle_timeout_and_then_times_the_head() {
    let header = Duration::from_millis(300);
    let idle = Duration::from_secs(5);
    let stack = Stack::start(
        config(|c| {
            c.header_read_timeout = header;
            c.idle_timeout = idle;
        }),
        0,
    )
    .await;
    for alpn in [&b"http/1.1"[..], b""] {
        keep_alive_then_a_stalled_head(&stack, alpn, header, idle).await;
    }
}

async fn keep_alive_then_a_stalled_head(
    stack: &Stack,
    alpn: &[u8],
    header: Duration,
    idle: Duration,
) {
    let mut tls = connect(stack.addr, alpn, None).await;
    let request = b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n";
    tls.write_all(request).await.unwrap();
    let answer = read_livez_answer(&mut tls).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    // Waiting past the header timeout is what this test is about: the connection lives on.
    tokio::time::sleep(3 * header).await;
    tls.write_all(request).await.unwrap();
    let answer = read_livez_answer(&mut tls).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    // The next head begins and stalls: closed unanswered at the header timeout, counted from
    // its first bytes, well before the idle timeout.
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let (got, after) = read_until_closed(&mut tls).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        after >= header - Duration::from_millis(50) && after < idle,
        "{:?}: closed after {after:?}",
        String::from_utf8_lossy(alpn)
    );
    stack.until("closed", |s| s.connections.open() == 0).await;
}

/// h2 over TLS is chosen by ALPN only, as in Go: a client that names no protocol and sends
/// h2's preface anyway is read as HTTP/1.1 and gets no h2 answer.
#[tokio::test]
async fn h2_without_alpn_is_not_served() {
    let stack = Stack::start(config(|_| {}), 0).await;
    let (mut sender, _conn) = h2(connect(stack.addr, b"", None).await).await;
    let answer = tokio::time::timeout(PATIENCE, sender.send_request(get("/livez", true, &[])))
        .await
        .expect("an answer or an error in time");
    assert!(answer.is_err(), "{answer:?}");
}

/// Reads one `/livez` answer (its body is `ok`) off a raw HTTP/1.1 connection.
async fn read_livez_answer(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(b"\r\n\r\nok") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn an_idle_http1_connection_is_closed_and_a_slow_request_is_not_idle() {
    let idle = Duration::from_millis(300);
    let stack = Stack::start(config(|c| c.idle_timeout = idle), 0).await;
    let mut tls = connect(stack.addr, b"http/1.1", None).await;
    // A request that takes longer than the idle timeout keeps the connection busy...
    tls.write_all(
        b"GET /livez HTTP/1.1\r\nHost: localhost\r\nx-test-delay-ms: 800\r\nx-test-user: jane\r\n\r\n",
    )
    .await
    .unwrap();
    // ...and once answered, the connection closes after the idle timeout.
    let (got, after) = read_until_closed(&mut tls).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nok"), "{got}");
    assert!(
        after >= Duration::from_millis(800) + idle - Duration::from_millis(50),
        "closed after {after:?}"
    );
    stack.until("closed", |s| s.connections.open() == 0).await;
}

#[tokio::test]
async fn an_idle_h2_connection_gets_a_goaway_and_is_closed() {
    let idle = Duration::from_millis(300);
    let stack = Stack::start(config(|c| c.idle_timeout = idle), 0).await;
    let (mut sender, conn) = h2(connect(stack.addr, b"h2", None).await).await;
    let response = sender.send_request(get("/livez", true, &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.unwrap();
    let started = Instant::now();
    tokio::time::timeout(PATIENCE, conn)
        .await
        .expect("the idle h2 connection was closed")
        .unwrap();
    assert!(started.elapsed() >= idle - Duration::from_millis(50));
    stack.until("closed", |s| s.connections.open() == 0).await;
}

/// Go's limits, not hyper's: an HTTP/1.1 head is read through `MaxHeaderBytes` + 4 KiB, an h2
/// header list may have `MaxHeaderBytes` + 320 bytes (32 per field for 10 fields), so a
/// 1 MiB header value fits in both and one 4 KiB larger in neither.
#[tokio::test]
async fn request_heads_up_to_1_mib_are_served_and_larger_ones_get_431() {
    let stack = Stack::start(config(|_| {}), 0).await;
    let near = "a".repeat((1 << 20) - 4096);
    let at = "a".repeat(1 << 20);
    let over = "a".repeat((1 << 20) + 4096);
    // Many header lines (the aggregator sends one X-Remote-Group per group) are fine too.
    let groups: Vec<String> = (0..500).map(|i| format!("group-{i}")).collect();
    for h2_client in [false, true] {
        let alpn: &[u8] = if h2_client { b"h2" } else { b"http/1.1" };
        let status = |headers: Vec<(&'static str, String)>| {
            let addr = stack.addr;
            async move {
                let stream = connect(addr, alpn, None).await;
                let mut request = get("/livez", h2_client, &[]);
                for (name, value) in headers {
                    request
                        .headers_mut()
                        .append(name, http::HeaderValue::from_str(&value).unwrap());
                }
                if h2_client {
                    let (mut sender, _conn) = h2(stream).await;
                    sender.send_request(request).await.unwrap().status()
                } else {
                    let (mut sender, conn) = h1(stream).await;
                    let status = sender.send_request(request).await.unwrap().status();
                    if status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE {
                        // As Go's server, a head too large ends the connection.
                        tokio::time::timeout(PATIENCE, conn)
                            .await
                            .expect("closed after a 431")
                            .unwrap();
                    }
                    status
                }
            }
        };
        assert_eq!(
            status(vec![("x-big", near.clone())]).await,
            StatusCode::OK,
            "h2: {h2_client}"
        );
        assert_eq!(
            status(vec![("x-big", at.clone())]).await,
            StatusCode::OK,
            "h2: {h2_client}"
        );
        assert_eq!(
            status(
                groups
                    .iter()
                    .map(|g| ("x-remote-group", g.clone()))
                    .collect()
            )
            .await,
            StatusCode::OK,
            "h2: {h2_client}"
        );
        assert_eq!(
            status(vec![("x-big", over.clone())]).await,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "h2: {h2_client}"
        );
    }
}

#[tokio::test]
async fn a_request_without_an_answer_by_the_request_timeout_gets_a_504_status() {
    let timeout = Duration::from_millis(500);
    let stack = Stack::start(config(|c| c.request_timeout = timeout), 0).await;
    for h2_client in [false, true] {
        let started = Instant::now();
        let request = get(
            PODS,
            h2_client,
            &[("x-test-hold", "1"), ("audit-id", "held-by-the-test")],
        );
        let (status, headers, body) = if h2_client {
            let (mut sender, _conn) = h2(connect(stack.addr, b"h2", None).await).await;
            let response = sender.send_request(request).await.unwrap();
            let headers = response.headers().clone();
            let status = response.status();
            (
                status,
                headers,
                response.into_body().collect().await.unwrap().to_bytes(),
            )
        } else {
            let (mut sender, _conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
            let response = sender.send_request(request).await.unwrap();
            let headers = response.headers().clone();
            let status = response.status();
            (
                status,
                headers,
                response.into_body().collect().await.unwrap().to_bytes(),
            )
        };
        assert!(started.elapsed() >= timeout - Duration::from_millis(50));
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache, private");
        assert_eq!(headers["audit-id"], "held-by-the-test");
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "Timeout");
        assert_eq!(status["code"], 504);
        assert_eq!(
            status["message"],
            "Timeout: request did not complete within the allotted timeout"
        );
        assert_eq!(status["details"], serde_json::json!({}));
        // The held request's seat is free again.
        stack.until("seat released", |s| s.executing() == 0).await;
    }
}

/// kubectl's `--request-timeout` sends `?timeout=`: a shorter limit than the server's is the
/// request's own; one that is not a Go duration is a 400, as k8s.io/apiserver answers.
#[tokio::test]
async fn a_client_s_timeout_parameter_shortens_the_limit_and_a_bad_one_is_a_400() {
    let stack = Stack::start(config(|c| c.request_timeout = PATIENCE * 3), 0).await;
    let (mut sender, _conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
    let started = Instant::now();
    let response = sender
        .send_request(get(
            &format!("{PODS}?timeout=500ms"),
            false,
            &[("x-test-hold", "1")],
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < PATIENCE,
        "{waited:?}"
    );
    stack.until("seat released", |s| s.executing() == 0).await;

    // A pod list with `?timeout=value`, on a connection of its own.
    let with_timeout = |value: &'static str| async move {
        let (mut sender, _conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
        sender
            .send_request(get(&format!("{PODS}?timeout={value}"), false, &[]))
            .await
            .unwrap()
    };
    for (value, error) in [
        ("abc", "time: invalid duration \"abc\""),
        ("5x", "time: unknown unit \"x\" in duration \"5x\""),
        ("5", "time: missing unit in duration \"5\""),
    ] {
        let response = with_timeout(value).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{value}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["reason"], "BadRequest", "{value}");
        assert_eq!(
            status["message"],
            format!("invalid timeout specified in the request URL - {error}")
        );
    }
    // Zero, negative or past the server's own: the server's limit.
    for value in ["0", "-1s", "1h"] {
        assert_eq!(
            with_timeout(value).await.status(),
            StatusCode::OK,
            "{value}"
        );
    }
}

#[tokio::test]
async fn a_slow_http1_reader_is_cut_at_the_request_timeout_and_its_seat_released() {
    let timeout = Duration::from_secs(1);
    // A ~15 MB list: far more than the server can hand to buffers before its cut (the
    // kernel's send buffer, up to `net.ipv4.tcp_wmem`'s 4 MiB here, the TLS buffer and
    // hyper's, ~5.3 MiB together), so the cut, not the end of the list, ends the response
    // even when a loaded machine fires the cut's timer late. (20,000 pods, ~4.9 MB, fit.)
    let stack = Stack::start(config(|c| c.request_timeout = timeout), 60).await;
    // A reader that takes 4 KiB at a time, one read every 100 ms: ~40 KiB/s.
    let stream = connect(stack.addr, b"http/1.1", Some(4096)).await;
    let (mut sender, conn) = h1(stream).await;
    let started = Instant::now();
    let response = sender.send_request(get(PODS, false, &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        stack.executing(),
        1,
        "the list holds its seat while it is written"
    );
    let mut body = response.into_body();
    let mut read = 0;
    let ended = loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(Err(error)) => break error,
            None => panic!("the whole list ({read} bytes) arrived"),
        }
    };
    assert!(
        started.elapsed() >= timeout,
        "cut after {:?}",
        started.elapsed()
    );
    // The connection is reset (`SO_LINGER` 0), not closed: what the server's kernel still
    // held of the response is dropped, not trickled out, and no TLS close_notify says the
    // response was complete.
    assert_eq!(
        io_error(&ended),
        Some(std::io::ErrorKind::ConnectionReset),
        "{ended:?} after {:?}",
        started.elapsed()
    );
    assert!(read < 7_000_000, "{read}");
    stack.until("seat released", |s| s.executing() == 0).await;
    conn.await.unwrap();
    stack
        .until("connection closed", |s| s.connections.open() == 0)
        .await;
}

#[tokio::test]
async fn a_stalled_h2_stream_is_reset_at_the_request_timeout_and_the_connection_lives_on() {
    let timeout = Duration::from_secs(1);
    let stack = Stack::start(config(|c| c.request_timeout = timeout), 20).await;
    let (mut sender, _conn) = h2(connect(stack.addr, b"h2", None).await).await;
    let started = Instant::now();
    let response = sender.send_request(get(PODS, true, &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        stack.executing(),
        1,
        "the list holds its seat while it is written"
    );
    // Not reading: once the client's stream window is full, the server cannot send more.
    stack.until("seat released", |s| s.executing() == 0).await;
    assert!(
        started.elapsed() >= timeout,
        "cut after {:?}",
        started.elapsed()
    );
    let error = response.into_body().collect().await.unwrap_err();
    assert_eq!(reset_reason(&error), Some(h2::Reason::CANCEL), "{error:?}");
    // Only the stream was reset: the connection serves the next request.
    let next = sender.send_request(get("/livez", true, &[])).await.unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(stack.connections.open(), 1);
}

/// The h2 reset reason behind a hyper error.
fn reset_reason(error: &hyper::Error) -> Option<h2::Reason> {
    let mut source = std::error::Error::source(error);
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.reason();
        }
        source = error.source();
    }
    None
}

/// The I/O error kind behind a hyper error.
fn io_error(error: &hyper::Error) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(error);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = error.source();
    }
    None
}

/// Whether a TLS connection to `addr` can still be made (the listener is open).
async fn listening(addr: SocketAddr) -> bool {
    let Ok(tcp) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut config = tls::client::config(&tls::client::Verify::Insecure, None).unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .is_ok()
}

/// `--shutdown-send-retry-after`: while a request in flight finishes, the port stays open
/// and a new request is told to come back (429, `Retry-After: 5`, its connection closed
/// after the answer; over h2 a GOAWAY); once nothing is in flight the listener closes.
/// Without it the listener closes as soon as shutdown begins.
#[tokio::test]
async fn shutdown_send_retry_after_answers_429_until_the_requests_in_flight_are_done() {
    for send_retry_after in [false, true] {
        let stack = Stack::start(
            config(|c| {
                c.shutdown_send_retry_after = send_retry_after;
                c.drain_timeout = Duration::from_secs(20);
            }),
            1,
        )
        .await;
        let (mut slow, _conn) = h1(connect(stack.addr, b"http/1.1", None).await).await;
        let in_flight = tokio::spawn(async move {
            send1(&mut slow, get(PODS, false, &[("x-test-delay-ms", "3000")])).await
        });
        stack.until("one executing", |s| s.executing() == 1).await;
        stack.shutdown.cancel();
        if send_retry_after {
            let (mut sender, closed) = h1(connect(stack.addr, b"http/1.1", None).await).await;
            let response = sender
                .send_request(get("/livez", false, &[]))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(response.headers()[header::RETRY_AFTER], "5");
            assert_eq!(response.headers()[header::CONNECTION], "close");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                status["message"],
                "The apiserver is shutting down, please try again later."
            );
            tokio::time::timeout(PATIENCE, closed)
                .await
                .expect("the connection closes after the answer")
                .unwrap();
            let (mut sender, closed) = h2(connect(stack.addr, b"h2", None).await).await;
            let response = sender.send_request(get("/livez", true, &[])).await.unwrap();
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            tokio::time::timeout(PATIENCE, closed)
                .await
                .expect("the h2 connection is closed (GOAWAY) after the answer")
                .unwrap();
        }
        let until_closed = async {
            let deadline = Instant::now() + PATIENCE;
            while listening(stack.addr).await {
                assert!(Instant::now() < deadline, "still listening");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if send_retry_after {
            // The request in flight is answered in full, then the port closes.
            let (status, _) = in_flight.await.unwrap();
            assert_eq!(status, StatusCode::OK);
            until_closed.await;
        } else {
            // The port closes at once, while the request in flight is still running; it is
            // answered in full all the same.
            until_closed.await;
            assert!(!in_flight.is_finished());
            let (status, _) = in_flight.await.unwrap();
            assert_eq!(status, StatusCode::OK);
        }
    }
}
