//! The client end to end over plain HTTP against a scripted raw-TCP server (TLS, certificates
//! and the kubelet's faults are covered by `tests/conformance/tests/scrape.rs`).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// What the server does with a request.
#[derive(Clone)]
struct Answer {
    bytes: Vec<u8>,
    /// Close the connection after answering.
    close: bool,
}

fn answer(bytes: impl Into<Vec<u8>>) -> Answer {
    Answer {
        bytes: bytes.into(),
        close: false,
    }
}

struct Server {
    url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

/// Serves `script(n)` to the n-th request (from 0), on any connection.
async fn serve(script: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(script);
    let (c, r) = (Arc::clone(&connections), Arc::clone(&requests));
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let (script, r) = (Arc::clone(&script), Arc::clone(&r));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let n = {
                            let mut r = r.lock();
                            r.push(String::from_utf8(head).unwrap());
                            r.len() - 1
                        };
                        let a = script(n);
                        if stream.write_all(&a.bytes).await.is_err() || a.close {
                            return;
                        }
                    }
                }
            });
        }
    });
    Server {
        url,
        connections,
        requests,
    }
}

fn plain_client(keep_alive: bool) -> Client {
    Client::new(Config {
        plain_http: true,
        keep_alive,
        timeout: Duration::from_secs(2),
        max_body_bytes: 1 << 20,
        ..Config::default()
    })
    .unwrap()
}

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";

#[tokio::test]
async fn a_kept_alive_connection_is_reused_and_the_request_is_minimal() {
    let s = serve(|_| answer(OK)).await;
    let c = plain_client(true);
    for _ in 0..3 {
        let body = c.get(&format!("{}/metrics/resource", s.url)).await.unwrap();
        assert_eq!(&body[..], b"hello");
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
    let authority = s.url.trim_start_matches("http://");
    assert_eq!(
        s.requests.lock()[0],
        format!(
            "GET /metrics/resource HTTP/1.1\r\nhost: {authority}\r\naccept-encoding: gzip\r\n\r\n"
        )
    );
    assert_eq!(c.inner.pool.read().idle(), 1);
}

fn gzipped(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `body` gzipped, with a Content-Length, or chunked in 2 KiB chunks as Go's server sends.
fn gzip_answer(body: &[u8], chunked: bool) -> Answer {
    let z = gzipped(body);
    let mut a =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: gzip\r\n".to_vec();
    if chunked {
        a.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        for chunk in z.chunks(2048) {
            a.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            a.extend_from_slice(chunk);
            a.extend_from_slice(b"\r\n");
        }
        a.extend_from_slice(b"0\r\n\r\n");
    } else {
        a.extend_from_slice(format!("content-length: {}\r\n\r\n", z.len()).as_bytes());
        a.extend_from_slice(&z);
    }
    answer(a)
}

fn metric_text(lines: usize) -> Vec<u8> {
    (0..lines)
        .map(|i| format!("container_cpu_usage_seconds_total{{container=\"c\",namespace=\"n\",pod=\"p{i}\"}} {i}.5 1700000000000\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn a_gzipped_answer_is_read_as_its_text_and_the_connection_kept() {
    let text = metric_text(500);
    let t = text.clone();
    let s = serve(move |n| gzip_answer(&t, n % 2 == 1)).await;
    let c = plain_client(true);
    let full = c.inner.budget.available_permits();
    let mut buffers = Vec::new();
    for _ in 0..4 {
        let body = c.get(&s.url).await.unwrap();
        assert_eq!(&body[..], &text[..]);
        buffers.push(body.as_ptr());
        drop(body);
        assert_eq!(c.inner.budget.available_permits(), full, "room given back");
    }
    // A dropped body's buffer holds the next body inflated on the thread.
    assert!(buffers.iter().all(|&b| b == buffers[0]), "{buffers:?}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
    assert!(
        s.requests
            .lock()
            .iter()
            .all(|r| r.contains("\r\naccept-encoding: gzip\r\n"))
    );
}

#[tokio::test]
async fn without_compression_gzip_is_not_asked_for_but_still_read() {
    let text = metric_text(20);
    let t = text.clone();
    let s = serve(move |_| gzip_answer(&t, false)).await;
    let c = Client::new(Config {
        plain_http: true,
        compression: false,
        max_body_bytes: 1 << 20,
        ..Config::default()
    })
    .unwrap();
    assert_eq!(&c.get(&s.url).await.unwrap()[..], &text[..]);
    assert!(!s.requests.lock()[0].contains("accept-encoding"));
}

#[tokio::test]
async fn a_gzip_bomb_is_refused_at_the_limit_and_its_room_given_back() {
    // 8 MiB of zeros in ~8 KiB, against a 1 MiB limit.
    let bomb = gzip_answer(&vec![0u8; 8 << 20], false);
    assert!(bomb.bytes.len() < 16 << 10);
    let s = serve(move |_| bomb.clone()).await;
    let c = plain_client(true);
    let full = c.inner.budget.available_permits();
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "body_too_large", "{err}");
    assert!(
        err.to_string().contains(
            "inflates (gzip) to more than 1048576 bytes, refused (--kubelet-max-body-bytes)"
        ),
        "{err}"
    );
    assert_eq!(c.inner.budget.available_permits(), full);
}

#[tokio::test]
async fn a_corrupt_gzip_or_an_unknown_coding_fails_the_node_saying_why() {
    let s = serve(|n| match n {
        0 => answer(
            "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 12\r\n\r\nnot gzip at all",
        ),
        _ => answer("HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 5\r\n\r\nhello"),
    })
    .await;
    let c = plain_client(true);
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "body", "{err}");
    assert!(err.to_string().contains(": gzip: "), "{err}");
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "content_encoding", "{err}");
    assert!(
        err.to_string()
            .contains("Content-Encoding \"br\", which this server cannot read"),
        "{err}"
    );
}

#[tokio::test]
async fn without_keep_alive_the_request_says_close_and_nothing_is_pooled() {
    let s = serve(|_| Answer {
        bytes: OK.into(),
        close: true,
    })
    .await;
    let c = plain_client(false);
    for _ in 0..2 {
        assert_eq!(&c.get(&s.url).await.unwrap()[..], b"hello");
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 2);
    assert!(s.requests.lock()[0].contains("connection: close\r\n"));
    assert_eq!(c.inner.pool.read().idle(), 0);
}

#[tokio::test]
async fn a_connection_the_kubelet_closed_while_idle_is_replaced_without_an_error() {
    // Every answer closes its connection, though it does not say so: the pooled connection
    // is found closed (or fails before any byte of the answer) and the GET goes out again.
    let s = serve(|_| Answer {
        bytes: OK.into(),
        close: true,
    })
    .await;
    let c = plain_client(true);
    for _ in 0..4 {
        assert_eq!(&c.get(&s.url).await.unwrap()[..], b"hello");
        // Let the close reach the client's reactor only sometimes.
        tokio::task::yield_now().await;
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_on_a_new_connection_is_a_request_error() {
    let s = serve(|_| Answer {
        bytes: Vec::new(),
        close: true,
    })
    .await;
    let err = plain_client(true).get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "request", "{err}");
    assert!(
        err.to_string()
            .contains("connection closed before message completed"),
        "{err}"
    );
}

#[tokio::test]
async fn chunked_bodies_are_read_whole_and_keep_the_connection() {
    let s = serve(|_| {
        answer(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
    })
    .await;
    let c = plain_client(true);
    for _ in 0..2 {
        assert_eq!(&c.get(&s.url).await.unwrap()[..], b"abcde");
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_until_close_is_read_and_the_connection_not_kept() {
    let s = serve(|_| Answer {
        bytes: b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(),
        close: true,
    })
    .await;
    let c = plain_client(true);
    assert_eq!(&c.get(&s.url).await.unwrap()[..], b"until the end");
    assert_eq!(c.inner.pool.read().idle(), 0);
}

#[tokio::test]
async fn bad_framing_is_a_body_error_and_a_bad_head_a_request_error() {
    let s = serve(|n| match n {
        0 => answer("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
        1 => Answer {
            bytes: b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf".to_vec(),
            close: true,
        },
        2 => answer("HTTP/1.1 200 OK\r\ncontent-length: nope\r\n\r\n"),
        _ => answer("<html>not http</html>\r\n\r\n"),
    })
    .await;
    let c = plain_client(true);
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "body", "{err}");
    assert!(err.to_string().contains("invalid chunked body"), "{err}");
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "body", "{err}");
    assert!(
        err.to_string()
            .contains("connection closed before message completed"),
        "{err}"
    );
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "request", "{err}");
    assert!(err.to_string().contains("bad Content-Length"), "{err}");
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "request", "{err}");
}

#[tokio::test]
async fn a_huge_head_is_refused_not_buffered() {
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    while head.len() < 256 * 1024 {
        head.extend_from_slice(b"x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let s = serve(move |_| answer(head.clone())).await;
    let err = plain_client(true).get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "request", "{err}");
    assert!(
        err.to_string().contains("response head larger than"),
        "{err}"
    );
}

#[tokio::test]
async fn declared_and_streamed_bodies_over_the_limit_are_refused() {
    let s = serve(|n| match n {
        0 => answer("HTTP/1.1 200 OK\r\ncontent-length: 2000000\r\n\r\n"),
        _ => {
            let mut a = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for _ in 0..40 {
                a.extend_from_slice(b"8000\r\n");
                a.extend(std::iter::repeat_n(b'x', 0x8000));
                a.extend_from_slice(b"\r\n");
            }
            answer(a)
        }
    })
    .await;
    let c = plain_client(true);
    for _ in 0..2 {
        let err = c.get(&s.url).await.unwrap_err();
        assert_eq!(err.reason(), "body_too_large", "{err}");
    }
}

#[tokio::test]
async fn more_bytes_than_announced_are_cut_and_the_connection_dropped() {
    let s = serve(|_| answer("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhello")).await;
    let c = plain_client(true);
    assert_eq!(&c.get(&s.url).await.unwrap()[..], b"he");
    assert_eq!(c.inner.pool.read().idle(), 0);
}

#[tokio::test]
async fn other_statuses_and_informational_heads() {
    let s = serve(|n| match n {
        0 => answer("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        _ => answer("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"),
    })
    .await;
    let c = plain_client(true);
    assert_eq!(&c.get(&s.url).await.unwrap()[..], b"ok");
    let err = c.get(&s.url).await.unwrap_err();
    assert_eq!(err.reason(), "status", "{err}");
    assert!(
        err.to_string()
            .contains("request failed, status: \"503 Service Unavailable\""),
        "{err}"
    );
}

#[tokio::test]
async fn idle_connections_expire() {
    let s = serve(|_| answer(OK)).await;
    let c = plain_client(true);
    c.get(&s.url).await.unwrap();
    let pool = Arc::clone(&c.inner.pool.read());
    assert_eq!(pool.idle(), 1);
    // An expired connection is not handed out (checked with the pool's own clock).
    tokio::time::pause();
    tokio::time::advance(POOL_IDLE_TIMEOUT + Duration::from_secs(1)).await;
    let authority = s.url.trim_start_matches("http://");
    assert!(pool.checkout(authority).is_none());
    tokio::time::resume();
}

#[tokio::test]
async fn refused_connections_say_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = plain_client(true).get(&url).await.unwrap_err();
    assert_eq!(err.reason(), "connection_refused", "{err}");
}

#[tokio::test]
async fn plain_http_urls_are_refused_without_the_flag() {
    let c = Client::new(Config::default()).unwrap();
    let err = c.get("http://127.0.0.1:1/").await.unwrap_err();
    assert_eq!(err.reason(), "plain_http_refused");
}

#[tokio::test]
async fn a_request_and_an_idle_connection_are_small() {
    // A scrape task holds the request future, the pool a connection: the TLS state and the
    // request's state are boxed, so neither carries KiBs inline.
    let c = plain_client(true);
    let request = c.get("http://127.0.0.1:1/");
    assert!(
        std::mem::size_of_val(&request) <= 1024,
        "{}",
        std::mem::size_of_val(&request)
    );
    assert!(std::mem::size_of::<conn::Conn>() <= 64);
}

/// A slice's requests all wait for their kubelets at once; their buffers wait in the stock
/// meanwhile, so the answers (read a few at a time) are served by a few sets of buffers
/// instead of one allocated and zeroed per request.
#[tokio::test]
async fn requests_waiting_for_their_answers_hold_no_buffers() {
    const REQUESTS: usize = 32;
    // One kubelet per request (one idle connection is kept per kubelet); each answers only
    // once every kubelet has its request.
    let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
    let mut urls = Vec::new();
    for _ in 0..REQUESTS {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        urls.push(format!(
            "http://{}/metrics/resource",
            listener.local_addr().unwrap()
        ));
        let barrier = Arc::clone(&barrier);
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            loop {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if stream.read(&mut byte).await.unwrap() == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                barrier.wait().await;
                stream.write_all(OK.as_bytes()).await.unwrap();
            }
        });
    }
    let c = plain_client(true);
    let round = || async {
        let fetches = urls.iter().map(|url| c.get(url));
        for body in futures::future::join_all(fetches).await {
            assert_eq!(&body.unwrap()[..], b"hello");
        }
    };
    // The first round opens the connections (each holds its buffers while it connects).
    round().await;
    assert_eq!(c.inner.pool.read().idle(), REQUESTS);
    let before = c.inner.scratch.made();
    round().await;
    let made = c.inner.scratch.made() - before;
    assert!(
        made == 0,
        "{made} sets of buffers made for {REQUESTS} requests on kept connections"
    );
}
