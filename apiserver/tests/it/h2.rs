//! The h2 frame-level limits, over real TLS: the stream limit advertised and enforced (a
//! stream past it is refused with `RST_STREAM REFUSED_STREAM`), rapid-reset protection
//! (CVE-2023-44487: a burst of HEADERS each cancelled at once ends in GOAWAY
//! `ENHANCE_YOUR_CALM`, and the server serves other connections on), and the idle timeout's
//! GOAWAY `NO_ERROR`.
//!
//! The `h2` crate is the client where a well-behaved client shows the limit; a client that
//! breaks the rules on purpose writes its frames by hand ([`Raw`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::bounds::{PATIENCE, Stack, USER, config, connect};
use crate::support::Client;

const PODS: &str = "/apis/metrics.k8s.io/v1beta1/pods";

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const CANCEL: u32 = 0x8;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// One frame as read.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    fn error_code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    /// A GOAWAY's last stream id.
    fn last_stream(&self) -> u32 {
        u32::from_be_bytes(self.payload[..4].try_into().unwrap()) & 0x7fff_ffff
    }
}

/// An h2 client that writes frames by hand, so it can break the rules.
struct Raw {
    tls: TlsStream<TcpStream>,
}

impl Raw {
    /// A TLS connection with ALPN `h2`, the preface and an empty SETTINGS written.
    async fn connect(stack: &Stack) -> Raw {
        let mut raw = Raw {
            tls: connect(stack.addr, b"h2", None).await,
        };
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        raw.tls.write_all(&hello).await.unwrap();
        raw
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.tls.write_all(bytes).await.unwrap();
        self.tls.flush().await.unwrap();
    }

    /// The next frame, answering the server's SETTINGS and PINGs on the way; `None` once the
    /// server has closed the connection.
    async fn next(&mut self) -> Option<Frame> {
        let mut head = [0_u8; 9];
        match tokio::time::timeout(PATIENCE, self.tls.read_exact(&mut head)).await {
            Err(_) => panic!("no frame and no close in {PATIENCE:?}"),
            Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0_u8; len];
        if self.tls.read_exact(&mut payload).await.is_err() {
            return None;
        }
        let frame = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload,
        };
        // Acknowledgements may find the connection closed already.
        if frame.kind == SETTINGS && frame.flags & ACK == 0 {
            let _ = self
                .tls
                .write_all(&self::frame(SETTINGS, ACK, 0, &[]))
                .await;
        } else if frame.kind == PING && frame.flags & ACK == 0 {
            let _ = self
                .tls
                .write_all(&self::frame(PING, ACK, 0, &frame.payload))
                .await;
        }
        Some(frame)
    }
}

/// One frame's bytes.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut bytes = len.to_be_bytes()[1..].to_vec();
    bytes.push(kind);
    bytes.push(flags);
    bytes.extend(stream.to_be_bytes());
    bytes.extend(payload);
    bytes
}

/// A HEADERS frame (the whole request: END_STREAM, END_HEADERS) for a GET of `path` as
/// [`USER`] with `extra` headers, HPACK-encoded without the dynamic table or Huffman.
fn get(stream: u32, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    fn string(block: &mut Vec<u8>, s: &str) {
        assert!(s.len() < 127);
        block.push(u8::try_from(s.len()).unwrap());
        block.extend(s.as_bytes());
    }
    // :method GET and :scheme https from the static table, then literal fields without
    // indexing: :path (name 4) and :authority (name 1) by index, the rest by name.
    let mut block = vec![0x82, 0x87, 0x04];
    string(&mut block, path);
    block.push(0x01);
    string(&mut block, "localhost");
    for (name, value) in [("x-test-user", USER)].iter().chain(extra) {
        block.push(0x00);
        string(&mut block, name);
        string(&mut block, value);
    }
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &block)
}

/// An h2-crate client on a new connection; the connection runs on its own task.
async fn client(
    stack: &Stack,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = connect(stack.addr, b"h2", None).await;
    let (sender, conn) = h2::client::handshake(tls).await.unwrap();
    (sender, tokio::spawn(conn))
}

fn request(path: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut request = Request::get(format!("https://localhost{path}")).header("x-test-user", USER);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(()).unwrap()
}

#[tokio::test]
async fn the_stream_limit_is_advertised_and_a_stream_past_it_is_refused() {
    // k8s.io/apiserver's default, pinned: 100.
    let stack = Stack::start(config(|_| {}), 0).await;
    let (sender, _conn) = client(&stack).await;
    let mut sender = sender.ready().await.unwrap();
    let (response, _) = sender.send_request(request("/livez", &[]), true).unwrap();
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
    assert_eq!(sender.current_max_send_streams(), 100);
    drop(stack);

    // --http2-max-streams-per-connection=3: three held requests take seats, a fourth
    // stream opened regardless is refused, and the held ones are unaffected.
    let stack = Stack::start(config(|c| c.http2_max_streams = 3), 0).await;
    let mut raw = Raw::connect(&stack).await;
    let settings = loop {
        let frame = raw.next().await.expect("the server's SETTINGS");
        if frame.kind == SETTINGS && frame.flags & ACK == 0 {
            break frame;
        }
    };
    let advertised = settings
        .payload
        .chunks_exact(6)
        .find(|s| u16::from_be_bytes([s[0], s[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS)
        .map(|s| u32::from_be_bytes(s[2..6].try_into().unwrap()));
    assert_eq!(advertised, Some(3));
    let mut burst = Vec::new();
    for stream in [1, 3, 5, 7] {
        burst.extend(get(stream, PODS, &[("x-test-hold", "1")]));
    }
    raw.write(&burst).await;
    let refused = loop {
        let frame = raw.next().await.expect("an answer to the fourth stream");
        assert!(frame.kind != GOAWAY, "{frame:?}");
        if frame.kind == RST_STREAM {
            break frame;
        }
    };
    assert_eq!(refused.stream, 7, "{refused:?}");
    assert_eq!(refused.error_code(), 0x7, "REFUSED_STREAM: {refused:?}");
    stack.until("three held", |s| s.executing() == 3).await;
    // The fourth was refused at the h2 layer (the RST_STREAM above), so it never reaches
    // the stack: three is all there will be.
    assert_eq!(
        stack.executing(),
        3,
        "only three streams are served at once"
    );
    assert_eq!(stack.connections.open(), 1);
}

#[tokio::test]
async fn a_well_behaved_client_waits_at_the_stream_limit() {
    let stack = Stack::start(config(|c| c.http2_max_streams = 3), 0).await;
    let (sender, _conn) = client(&stack).await;
    let mut sender = sender.ready().await.unwrap();
    // The first request brings the server's SETTINGS.
    let (response, _) = sender.send_request(request("/livez", &[]), true).unwrap();
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
    assert_eq!(sender.current_max_send_streams(), 3);
    // Five requests the server answers after 500 ms each: three at once, then two.
    let delay = Duration::from_millis(500);
    let started = Instant::now();
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let sender = sender.clone();
            tokio::spawn(async move {
                let mut sender = sender.ready().await.unwrap();
                let (response, _) = sender
                    .send_request(request(PODS, &[("x-test-delay-ms", "500")]), true)
                    .unwrap();
                let status = response.await.unwrap().status();
                (status, started.elapsed())
            })
        })
        .collect();
    stack.until("three executing", |s| s.executing() == 3).await;
    let mut took = Vec::new();
    for request in requests {
        let (status, elapsed) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        took.push(elapsed);
    }
    // The other two waited in the client: they could begin only once a stream had ended.
    took.sort();
    assert!(took[3] >= 2 * delay - Duration::from_millis(50), "{took:?}");
}

#[tokio::test]
async fn a_rapid_reset_burst_gets_goaway_and_other_connections_are_served() {
    let stack = Stack::start(config(|_| {}), 0).await;
    // 1,000 streams, each opened and cancelled at once (HEADERS, RST_STREAM CANCEL), in one
    // write: the server resets none, so the protocol's stream limit does not stop them.
    let mut raw = Raw::connect(&stack).await;
    let mut burst = Vec::new();
    for i in 0..1000_u32 {
        let stream = 2 * i + 1;
        burst.extend(get(stream, PODS, &[]));
        burst.extend(frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
    }
    // The server may stop reading before the burst is written.
    let _ = raw.tls.write_all(&burst).await;
    let _ = raw.tls.flush().await;
    let started = Instant::now();
    let goaway = loop {
        let frame = raw
            .next()
            .await
            .expect("a GOAWAY before the connection closes");
        if frame.kind == GOAWAY {
            break frame;
        }
    };
    assert_eq!(goaway.error_code(), 0xb, "ENHANCE_YOUR_CALM: {goaway:?}");
    assert!(goaway.last_stream() < 2 * 1000, "{goaway:?}");
    // Then the connection closes.
    while let Some(frame) = raw.next().await {
        assert!(
            frame.kind != HEADERS,
            "a stream answered after GOAWAY: {frame:?}"
        );
    }
    assert!(started.elapsed() < PATIENCE);
    stack.until("closed", |s| s.connections.open() == 0).await;
    // The server serves on.
    assert_eq!(
        Client::insecure().get(stack.addr, "/livez").await.status,
        StatusCode::OK
    );
    let (sender, _conn) = client(&stack).await;
    let mut sender = sender.ready().await.unwrap();
    let (response, _) = sender.send_request(request("/livez", &[]), true).unwrap();
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn a_client_that_resets_its_streams_through_the_h2_crate_is_stopped_too() {
    let stack = Stack::start(config(|_| {}), 0).await;
    let (sender, mut conn) = client(&stack).await;
    let mut sender = sender.ready().await.unwrap();
    let (response, _) = sender.send_request(request("/livez", &[]), true).unwrap();
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
    // Batches of 100 (the server's limit) requests dropped as soon as they are sent: the
    // client's connection task writes each HEADERS with its RST_STREAM CANCEL. Between
    // batches, the client reads what the server said (and stops once it ended things).
    let mut sent = 0;
    let ended = 'burst: {
        for _ in 0..50 {
            for _ in 0..100 {
                // Full, the queue of streams not yet open asks to wait for `ready`.
                if let Ok((response, _)) = sender.send_request(request(PODS, &[]), true) {
                    drop(response);
                    sent += 1;
                }
            }
            // The connection task writes the batch and reads the answers meanwhile.
            tokio::select! {
                ended = &mut conn => break 'burst ended,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            match sender.clone().ready().await {
                Ok(ready) => sender = ready,
                Err(_) => {
                    break 'burst tokio::time::timeout(PATIENCE, &mut conn)
                        .await
                        .expect("the connection ended");
                }
            }
        }
        panic!("{sent} streams opened and reset, and the connection lives on");
    };
    let error = ended.unwrap().expect_err("ended by the server");
    assert!(error.is_go_away(), "{error:?} after {sent} streams");
    assert_eq!(
        error.reason(),
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{error:?}"
    );
    stack.until("closed", |s| s.connections.open() == 0).await;
    assert_eq!(
        Client::insecure().get(stack.addr, "/livez").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_idle_h2_connection_is_told_goaway_no_error_then_closed() {
    let idle = Duration::from_millis(300);
    let stack = Stack::start(config(|c| c.idle_timeout = idle), 0).await;
    let mut raw = Raw::connect(&stack).await;
    raw.write(&get(1, "/livez", &[])).await;
    // The answer, to its last frame.
    loop {
        let frame = raw.next().await.expect("an answer");
        assert!(frame.kind != GOAWAY, "{frame:?}");
        if frame.stream == 1 && frame.flags & END_STREAM != 0 {
            break;
        }
    }
    let answered = Instant::now();
    let mut goaways = Vec::new();
    while let Some(frame) = raw.next().await {
        if frame.kind == GOAWAY {
            goaways.push((frame, answered.elapsed()));
        }
    }
    let (first, after) = goaways.first().expect("a GOAWAY before the close");
    assert!(
        *after >= idle - Duration::from_millis(50),
        "GOAWAY after {after:?}"
    );
    assert!(
        goaways.iter().all(|(g, _)| g.error_code() == 0),
        "{goaways:?}"
    );
    // Graceful: the first GOAWAY announces it, the last names the last stream served.
    assert!(first.last_stream() >= 1, "{goaways:?}");
    assert_eq!(goaways.last().unwrap().0.last_stream(), 1, "{goaways:?}");
    stack.until("closed", |s| s.connections.open() == 0).await;
}

/// The frames of the answer to `stream` up to its end, and whether a GOAWAY came meanwhile
/// (with its error code and last stream); `None` when the connection closed first.
async fn answer_of(raw: &mut Raw, stream: u32) -> Option<(Vec<Frame>, Option<Frame>)> {
    let (mut frames, mut goaway) = (Vec::new(), None);
    loop {
        let frame = raw.next().await?;
        if frame.kind == GOAWAY {
            goaway = Some(frame);
            continue;
        }
        if frame.stream != stream {
            continue;
        }
        let end = frame.flags & END_STREAM != 0;
        frames.push(frame);
        if end {
            return Some((frames, goaway));
        }
    }
}

#[tokio::test]
async fn goaway_chance_closes_the_connection_after_the_request_it_answers() {
    // HPACK's static index 8 is `:status 200`.
    const STATUS_200: u8 = 0x88;
    // Off (the default): the connection serves one request after another.
    let stack = Stack::start(config(|_| {}), 0).await;
    let mut raw = Raw::connect(&stack).await;
    for stream in [1, 3] {
        raw.write(&get(stream, "/livez", &[])).await;
        let (frames, goaway) = answer_of(&mut raw, stream).await.expect("an answer");
        assert_eq!(frames[0].kind, HEADERS);
        assert_eq!(frames[0].payload[0], STATUS_200);
        assert!(goaway.is_none(), "{goaway:?}");
    }
    drop(stack);

    // At 1 (past the flag's 0.02, which only the flag checks): the request drawn is
    // answered in full, with a GOAWAY NO_ERROR, and the connection then closes, so the
    // client opens a new one (through its load balancer, maybe to another replica).
    // (No idle timeout within the test's patience: the GOAWAY can only be the chance's.)
    let stack = Stack::start(
        config(|c| {
            c.goaway_chance = 1.0;
            c.idle_timeout = Duration::from_secs(3600);
        }),
        0,
    )
    .await;
    let mut raw = Raw::connect(&stack).await;
    raw.write(&get(1, "/livez", &[])).await;
    let (frames, mut goaway) = answer_of(&mut raw, 1)
        .await
        .expect("the answer to stream 1");
    assert_eq!(frames[0].payload[0], STATUS_200);
    while let Some(frame) = raw.next().await {
        assert!(
            frame.kind != HEADERS,
            "a stream answered after GOAWAY: {frame:?}"
        );
        if frame.kind == GOAWAY {
            goaway = Some(frame);
        }
    }
    let goaway = goaway.expect("a GOAWAY");
    assert_eq!(goaway.error_code(), 0, "NO_ERROR: {goaway:?}");
    stack.until("closed", |s| s.connections.open() == 0).await;
}
