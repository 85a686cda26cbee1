use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::HeaderMap;
use http_body_util::{BodyExt, Empty};

use super::*;
use crate::api::body::{BUFFERED_ITEMS, CHUNK_BYTES, ListBody};
use crate::api::encode::Ctx;

const KIB: usize = 1024;

/// JSON-ish text that compresses like a list does (~10x), `len` bytes long.
fn text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(
            format!(
                "{{\"name\":\"pod-{i:06}\",\"cpu\":\"{}n\"}},",
                i * 7919 % 100_003
            )
            .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    out
}

/// Bytes that do not compress (xorshift from `seed`): frames fill quickly.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn ok(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn accepting(value: &str) -> Accepts {
    Accepts::parse([value])
}

struct Collected {
    headers: HeaderMap,
    exact: Option<u64>,
    frames: Vec<Bytes>,
}

impl Collected {
    fn bytes(&self) -> Vec<u8> {
        self.frames.concat()
    }
    fn gzip(&self) -> bool {
        self.headers
            .get(header::CONTENT_ENCODING)
            .map(|v| v.as_bytes())
            == Some(b"gzip")
    }
    fn vary(&self) -> Vec<&str> {
        self.headers
            .get_all(header::VARY)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }
    /// The body as the client reads it: gunzipped when encoded.
    fn decoded(&self) -> Vec<u8> {
        if self.gzip() {
            gunzip(&self.bytes())
        } else {
            self.bytes()
        }
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

async fn collect(response: Response<Body>) -> Collected {
    let (parts, mut body) = response.into_parts();
    let exact = body.size_hint().exact();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(data);
        }
    }
    Collected {
        headers: parts.headers,
        exact,
        frames,
    }
}

async fn run(accepts: Accepts, response: Response<Body>) -> Collected {
    collect(encode(accepts, response).await).await
}

/// A list body as the API streams it: `items` items of about 200 bytes, which compress
/// about 4x.
fn list(items: usize) -> Body {
    let ctx = Ctx::new("metrics.k8s.io/v1beta1", 0);
    let items: Vec<Arc<Vec<u8>>> = (0..items)
        .map(|i| {
            let seed = i as u64;
            let hex: String = noise(40, seed).iter().map(|b| format!("{b:02x}")).collect();
            Arc::new(
                format!(
                    "{{\"name\":\"pod-{i:06}\",\"cpu\":\"{}n\",\"memory\":\"{}Ki\",\"uid\":\"{hex}\"}}",
                    seed * 7919 % 100_003,
                    seed * 104_729 % 1_000_003
                )
                .into_bytes(),
            )
        })
        .collect();
    ListBody::new(
        b"{\"kind\":\"List\",\"items\":[".to_vec(),
        items,
        b"]}\n",
        ctx,
        |out, _, item| out.extend_from_slice(item),
    )
    .into_body()
}

/// Wraps a body and counts the frames read from it.
struct Counting {
    inner: Body,
    frames: Arc<AtomicUsize>,
}

impl HttpBody for Counting {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(_)) = &poll {
            self.frames.fetch_add(1, Ordering::SeqCst);
        }
        poll
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[tokio::test]
async fn large_bodies_are_gzip_and_decompress_to_the_identity_bytes() {
    let body = text(300 * KIB);
    let r = run(accepting("gzip"), ok(crate::body::full(body.clone()))).await;
    assert!(r.gzip());
    assert_eq!(r.vary(), ["Accept-Encoding"]);
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(r.exact, None, "no Content-Length on a compressed body");
    assert!(r.bytes().len() < body.len() / 3, "{}", r.bytes().len());
    assert_eq!(r.decoded(), body);
}

#[tokio::test]
async fn the_threshold_is_128_kib_exclusive() {
    for (len, gzip) in [
        (127 * KIB, false),
        (128 * KIB, false),
        (128 * KIB + 1, true),
        (129 * KIB, true),
    ] {
        let body = text(len);
        let r = run(accepting("gzip"), ok(crate::body::full(body.clone()))).await;
        assert_eq!(r.gzip(), gzip, "{len} bytes");
        assert_eq!(r.decoded(), body, "{len} bytes");
        if !gzip {
            assert!(
                r.vary().is_empty(),
                "no Vary on identity, as k8s.io/apiserver"
            );
            assert_eq!(r.exact, Some(len as u64), "Content-Length kept");
        }
    }
}

#[tokio::test]
async fn clients_that_do_not_ask_get_identity() {
    let body = text(200 * KIB);
    for accepts in [
        Accepts::of(&HeaderMap::new()),
        accepting(""),
        accepting("br"),
        accepting("deflate, br;q=1"),
        accepting("gzip;q=0"),
        accepting("*, gzip;q=0"),
        accepting("gzip;q=0.3, identity;q=0.9"),
    ] {
        let r = run(accepts, ok(crate::body::full(body.clone()))).await;
        assert!(!r.gzip(), "{accepts:?}");
        assert!(r.vary().is_empty());
        assert_eq!(r.bytes(), body);
        assert_eq!(r.exact, Some(body.len() as u64));
    }
}

#[tokio::test]
async fn quality_values_and_wildcards_decide() {
    let large = text(200 * KIB);
    let small = text(2 * KIB);
    for (header, large_gzip, small_gzip) in [
        ("gzip", true, false),
        ("*;q=0.5", true, false),
        ("br;q=1, gzip;q=0.1", true, false),
        ("identity;q=0, gzip", true, true),
        ("*;q=0, gzip;q=0.5", true, true),
        ("gzip;q=0, identity;q=0", false, false),
    ] {
        for (body, want) in [(&large, large_gzip), (&small, small_gzip)] {
            let r = run(accepting(header), ok(crate::body::full(body.clone()))).await;
            assert_eq!(r.gzip(), want, "{header}, {} bytes", body.len());
            assert_eq!(&r.decoded(), body);
        }
    }
}

#[tokio::test]
async fn vary_is_added_beside_the_handlers_own() {
    let mut response = ok(crate::body::full(text(200 * KIB)));
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    response
        .headers_mut()
        .insert(header::ETAG, HeaderValue::from_static("\"abc\""));
    let r = run(accepting("gzip"), response).await;
    assert!(r.gzip());
    assert_eq!(r.vary(), ["Accept", "Accept-Encoding"]);
    assert_eq!(r.headers[header::ETAG], "\"abc\"");
}

#[tokio::test]
async fn bodiless_statuses_empty_bodies_and_encoded_responses_are_left_alone() {
    let mut not_modified = Response::new(crate::body::full(Bytes::new()));
    *not_modified.status_mut() = StatusCode::NOT_MODIFIED;
    let r = run(accepting("identity;q=0, gzip"), not_modified).await;
    assert!(!r.gzip());
    assert!(r.vary().is_empty());
    assert!(r.bytes().is_empty());

    let r = run(accepting("identity;q=0, gzip"), ok(Empty::new().boxed())).await;
    assert!(!r.gzip());
    assert!(r.bytes().is_empty());

    let mut encoded = ok(crate::body::full(noise(200 * KIB, 1)));
    encoded
        .headers_mut()
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
    let r = run(accepting("gzip"), encoded).await;
    assert_eq!(r.headers[header::CONTENT_ENCODING], "br");
    assert_eq!(r.bytes(), noise(200 * KIB, 1));
}

#[tokio::test]
async fn errors_are_encoded_by_the_same_rule() {
    // A small Status: identity. (k8s.io/apiserver writes errors through the same writer.)
    let status = crate::status::Status::no_route().into_response();
    let r = run(accepting("gzip"), status).await;
    assert!(!r.gzip());
    // A large body with an error status is gzip like any other.
    let mut large = ok(crate::body::full(text(200 * KIB)));
    *large.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    let encoded = encode(accepting("gzip"), large).await;
    assert_eq!(encoded.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(collect(encoded).await.gzip());
}

#[tokio::test]
async fn a_short_streamed_list_is_identity_with_a_content_length() {
    // More than BUFFERED_ITEMS items (so streamed), less than 128 KiB in all.
    let items = BUFFERED_ITEMS + 20;
    let identity = collect(ok(list(items))).await;
    assert_eq!(identity.exact, None, "streamed");
    let total = identity.bytes().len();
    assert!(total < THRESHOLD_BYTES, "{total}");
    let r = run(accepting("gzip"), ok(list(items))).await;
    assert!(!r.gzip());
    assert_eq!(
        r.exact,
        Some(total as u64),
        "read in full, so its length is known"
    );
    assert_eq!(r.bytes(), identity.bytes());
}

#[tokio::test]
async fn a_long_streamed_list_stays_streamed_when_compressed() {
    // ~2.5 MB in frames of about CHUNK_BYTES.
    let items = 15_000;
    let identity = collect(ok(list(items))).await;
    assert!(identity.frames.len() > 8, "{}", identity.frames.len());
    assert!(
        identity
            .frames
            .iter()
            .all(|f| f.len() <= CHUNK_BYTES + 4096)
    );

    let r = run(accepting("gzip"), ok(list(items))).await;
    assert!(r.gzip());
    assert_eq!(r.exact, None, "no Content-Length");
    assert!(r.frames.len() >= 4, "{} frames", r.frames.len());
    assert!(
        r.frames.iter().all(|f| f.len() <= 128 * KIB),
        "{:?}",
        r.frames.iter().map(Bytes::len).collect::<Vec<_>>()
    );
    assert_eq!(r.decoded(), identity.bytes());
}

#[tokio::test]
async fn compression_reads_the_source_as_the_client_reads() {
    // Incompressible 60 KiB frames: each fills an output frame, so the source is read only
    // as far as the client has read, plus the frames read to decide.
    let frames = Arc::new(AtomicUsize::new(0));
    let chunks: Vec<Bytes> = (0..40).map(|i| Bytes::from(noise(60 * KIB, i))).collect();
    let source = Counting {
        inner: http_body_util::StreamBody::new(futures::stream::iter(
            chunks.clone().into_iter().map(|c| Ok(Frame::data(c))),
        ))
        .boxed(),
        frames: frames.clone(),
    };
    let response = encode(accepting("gzip"), ok(source.boxed())).await;
    let read_to_decide = frames.load(Ordering::SeqCst);
    assert_eq!(read_to_decide, 3, "just over 128 KiB");
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(!first.is_empty());
    assert!(
        frames.load(Ordering::SeqCst) <= read_to_decide + 1,
        "the first frame came from the first source frames"
    );
    let mut all = first.to_vec();
    while let Some(frame) = body.frame().await {
        all.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    assert_eq!(frames.load(Ordering::SeqCst), 40);
    assert_eq!(gunzip(&all), chunks.concat());
}

/// A body that is not ready between its frames.
struct Slow {
    frames: VecDeque<Bytes>,
    ready: bool,
}

impl HttpBody for Slow {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.ready {
            self.ready = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = false;
        Poll::Ready(self.frames.pop_front().map(|f| Ok(Frame::data(f))))
    }
}

#[tokio::test]
async fn what_is_compressed_is_handed_on_while_the_source_waits() {
    let chunks: Vec<Bytes> = (0..6).map(|_| Bytes::from(text(100 * KIB))).collect();
    let slow = Slow {
        frames: chunks.iter().cloned().collect(),
        ready: false,
    };
    let r = run(accepting("gzip"), ok(slow.boxed())).await;
    assert!(r.gzip());
    // Each 100 KiB compresses below FRAME_BYTES, yet comes out before the next one arrives.
    assert!(r.frames.len() >= 4, "{} frames", r.frames.len());
    assert_eq!(r.decoded(), chunks.concat());
}

#[tokio::test]
async fn trailers_follow_the_gzip_trailer() {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("1"));
    let frames = vec![
        Ok(Frame::data(Bytes::from(text(200 * KIB)))),
        Ok(Frame::trailers(trailers.clone())),
    ];
    let body = http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed();
    let mut body = encode(accepting("gzip"), ok(body)).await.into_body();
    let mut data = Vec::new();
    let mut got = None;
    while let Some(frame) = body.frame().await {
        match frame.unwrap().into_data() {
            Ok(d) => {
                assert!(got.is_none(), "data after trailers");
                data.extend_from_slice(&d);
            }
            Err(f) => got = f.into_trailers().ok(),
        }
    }
    assert_eq!(got, Some(trailers));
    assert_eq!(gunzip(&data), text(200 * KIB));
}

#[tokio::test]
async fn a_large_buffered_body_is_compressed_in_slices() {
    let body = noise(1024 * KIB, 2);
    let r = run(accepting("gzip"), ok(crate::body::full(body.clone()))).await;
    assert!(r.frames.len() > 10, "{} frames", r.frames.len());
    assert!(r.frames.iter().all(|f| f.len() <= 128 * KIB));
    assert_eq!(r.decoded(), body);
}
