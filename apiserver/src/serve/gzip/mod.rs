//! Response compression as k8s.io/apiserver does it (`endpoints/handlers/responsewriters`,
//! `deferredResponseWriter`): when the request's `Accept-Encoding` allows gzip and the body
//! is larger than [`THRESHOLD_BYTES`], the response is gzip at [`LEVEL`] (zlib-rs), with
//! `Content-Encoding: gzip` and an added `Vary: Accept-Encoding`; otherwise it is left alone.
//!
//! One transform over every response ([`encode`], run by the router), so discovery,
//! OpenAPI, `/metrics`, lists and errors all get it. A body of known size is decided at once;
//! a streamed one (a long list) is read until more than [`THRESHOLD_BYTES`] have come (then
//! gzip, starting with what was read) or it ends (then identity, with a Content-Length), as
//! the deferred writer decides on its first write. A gzip body stays streamed: it is
//! compressed frame by frame as the client reads, never buffered whole.
//!
//! # Layout
//! - [`accept`]: `Accept-Encoding` with quality values.

pub mod accept;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use flate2::Compression;
use flate2::write::GzEncoder;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

pub use self::accept::Accepts;
use crate::body::Body;

/// Bodies up to this size are sent as they are: k8s.io/apiserver's
/// `defaultGzipThresholdBytes` (compared with `>`, so exactly 128 KiB is not compressed).
pub const THRESHOLD_BYTES: usize = 128 * 1024;

/// The deflate level: zlib-rs's 2, which is what k8s.io/apiserver's level 1
/// (`defaultGzipContentEncodingLevel`, the least CPU: kubernetes/kubernetes#112296) means in
/// zlib: `deflate_fast` with zlib's level-1 parameters. zlib-rs numbers its levels as zlib-ng,
/// whose level 1 is `deflate_quick` (fixed Huffman codes): a quarter to a third more bytes
/// than zlib's level 1 on metrics lists, for a few % less CPU per list. Measured in
/// `BENCHMARKS.md` ("Wire: gzip").
pub const LEVEL: u32 = 2;

/// A compressed frame is handed on once it holds this much (one TLS record, one default h2
/// DATA frame), or sooner when the source has nothing ready.
const FRAME_BYTES: usize = 16 * 1024;

/// Input is fed to the compressor in slices of at most this size, so one large buffered
/// body becomes many frames rather than one long poll.
const SLICE_BYTES: usize = 64 * 1024;

/// Encodes `response` as `accepts` allows: gzip when the body is larger than
/// [`THRESHOLD_BYTES`] (any size with [`Accepts::GzipOnly`]), unchanged otherwise. Never
/// touches a response that already has a `Content-Encoding`, a status without a body
/// (1xx, 204, 304) or an empty body. A streamed body of unknown size is read here (up to
/// just over the threshold) before the headers are decided.
pub async fn encode(accepts: Accepts, response: Response<Body>) -> Response<Body> {
    encode_at(accepts, LEVEL, response).await
}

/// [`encode`] at another deflate level (0-9), for the benchmarks that pick [`LEVEL`].
pub async fn encode_at(accepts: Accepts, level: u32, response: Response<Body>) -> Response<Body> {
    if accepts == Accepts::Identity || !may_encode(&response) {
        return response;
    }
    let threshold = match accepts {
        Accepts::GzipOnly => 0,
        _ => THRESHOLD_BYTES,
    };
    let (mut parts, body) = response.into_parts();
    let source = match body.size_hint().exact() {
        Some(n) if usize::try_from(n).is_ok_and(|n| n <= threshold) => {
            return Response::from_parts(parts, body);
        }
        Some(_) => Replay::new(VecDeque::new(), Some(body)),
        None => match read_past(body, threshold).await {
            Ok(replay) => replay,
            // Ended within the threshold: identity, now of known size.
            Err(whole) => return Response::from_parts(parts, whole.boxed()),
        },
    };
    let h = &mut parts.headers;
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    // `header.Add`: beside any Vary the handler set (discovery's `Vary: Accept`).
    h.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.remove(header::CONTENT_LENGTH);
    let body = Gzip::new(source, Compression::new(level.min(9)));
    Response::from_parts(parts, body.boxed())
}

/// A status that carries a body, and no encoding yet.
fn may_encode(response: &Response<Body>) -> bool {
    let status = response.status();
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || response.headers().contains_key(header::CONTENT_ENCODING))
}

/// Reads `body` until more than `threshold` data bytes have come (`Ok`: what was read, then
/// the rest) or it ends (`Err`: all of it).
async fn read_past(mut body: Body, threshold: usize) -> Result<Replay, Replay> {
    let mut frames = VecDeque::new();
    let mut read = 0;
    while read <= threshold {
        match body.frame().await {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                frames.push_back(frame);
            }
            Some(Err(never)) => match never {},
            None => return Err(Replay::new(frames, None)),
        }
    }
    Ok(Replay::new(frames, Some(body)))
}

/// Frames already read, then the rest of the body.
struct Replay {
    frames: VecDeque<Frame<Bytes>>,
    rest: Option<Body>,
    /// Data bytes in `frames`.
    buffered: u64,
}

impl Replay {
    fn new(frames: VecDeque<Frame<Bytes>>, rest: Option<Body>) -> Self {
        let buffered = frames
            .iter()
            .filter_map(Frame::data_ref)
            .map(|d| d.len() as u64)
            .sum();
        Replay {
            frames,
            rest,
            buffered,
        }
    }
}

impl HttpBody for Replay {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(frame) = self.frames.pop_front() {
            if let Some(d) = frame.data_ref() {
                self.buffered -= d.len() as u64;
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    /// Exact once the whole body is buffered, so an identity answer gets a Content-Length.
    fn size_hint(&self) -> SizeHint {
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(self.buffered));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(self.buffered));
        }
        hint
    }
}

/// A body compressed frame by frame.
struct Gzip {
    source: Replay,
    /// The source has ended (its last frame, perhaps trailers, has been read).
    source_done: bool,
    level: Compression,
    /// Made on the first poll, so a response whose body is never read (HEAD) costs no
    /// compressor.
    encoder: Option<GzEncoder<Vec<u8>>>,
    /// The part of a source frame not yet compressed (a frame is fed in slices).
    pending: Bytes,
    /// The source's trailers, sent after the gzip trailer.
    trailers: Option<http::HeaderMap>,
    /// The gzip trailer has been handed on.
    done: bool,
}

impl Gzip {
    fn new(source: Replay, level: Compression) -> Self {
        Gzip {
            source,
            source_done: false,
            level,
            encoder: None,
            pending: Bytes::new(),
            trailers: None,
            done: false,
        }
    }

    /// Ends the stream after a compressor failure (none is expected when writing to memory):
    /// the client sees a truncated gzip stream, which it reports, rather than wrong bytes.
    fn fail(&mut self, error: &std::io::Error) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        tracing::error!(%error, "gzip encoding failed; ending the response early");
        self.done = true;
        self.encoder = None;
        self.trailers = None;
        Poll::Ready(None)
    }
}

/// What the compressor has written so far, as a frame.
fn take(out: &mut Vec<u8>) -> Frame<Bytes> {
    Frame::data(Bytes::from(std::mem::replace(
        out,
        Vec::with_capacity(OUT_CAPACITY),
    )))
}

/// Room for one frame plus what one slice of input can add before it is handed on.
const OUT_CAPACITY: usize = FRAME_BYTES + FRAME_BYTES / 2;

impl HttpBody for Gzip {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
        }
        let level = this.level;
        let encoder = this
            .encoder
            .get_or_insert_with(|| GzEncoder::new(Vec::with_capacity(OUT_CAPACITY), level));
        loop {
            if encoder.get_ref().len() >= FRAME_BYTES {
                return Poll::Ready(Some(Ok(take(encoder.get_mut()))));
            }
            if !this.pending.is_empty() {
                let n = this.pending.len().min(SLICE_BYTES);
                if let Err(e) = encoder.write_all(&this.pending[..n]) {
                    return this.fail(&e);
                }
                this.pending.advance(n);
                continue;
            }
            if this.source_done {
                if let Err(e) = encoder.try_finish() {
                    return this.fail(&e);
                }
                let last = take(encoder.get_mut());
                this.done = true;
                this.encoder = None;
                return Poll::Ready(Some(Ok(last)));
            }
            match Pin::new(&mut this.source).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pending = data,
                    Err(frame) => {
                        // Trailers are the last frame.
                        this.trailers = frame.into_trailers().ok();
                        this.source_done = true;
                    }
                },
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => this.source_done = true,
                Poll::Pending => {
                    if encoder.get_ref().is_empty() {
                        return Poll::Pending;
                    }
                    // Hand on what is ready rather than sit on it while the source waits.
                    return Poll::Ready(Some(Ok(take(encoder.get_mut()))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
