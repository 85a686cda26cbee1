//! One connection: the TLS handshake within [`Config::handshake_timeout`], then HTTP/1.1 or
//! h2 per ALPN with every limit pinned here rather than left to hyper's defaults; requests
//! are timed ([`Config::request_timeout`]) and counted, so an idle connection is closed and a
//! response that outlives its request's deadline is cut.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::coop::unconstrained;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::activity::{Activity, Deadline, Streams, Timed};
use super::router::InvalidTimeout;
use super::{Config, PeerCertificates, RemoteAddr, Router, Seat};
use crate::body::Body;
use crate::selfmetrics::RequestKind;

/// h2 streams per connection when `--http2-max-streams-per-connection` is 0:
/// k8s.io/apiserver's default since the rapid-reset fixes (`secure_serving.go`: "match
/// http2.initialMaxConcurrentStreams used by clients").
pub const HTTP2_DEFAULT_MAX_STREAMS: u32 = 100;

/// Streams the client may reset before the server has accepted them, per connection; one more
/// is answered with GOAWAY `ENHANCE_YOUR_CALM` (h2's rapid-reset limit, CVE-2023-44487).
pub const HTTP2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;

/// Streams the server may reset because the client broke the protocol (refused streams
/// included), per connection; one more is answered with GOAWAY `ENHANCE_YOUR_CALM`
/// (RUSTSEC-2024-0003).
pub const HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// An h2 connection is pinged this often; an unanswered ping closes it after
/// [`HTTP2_KEEP_ALIVE_TIMEOUT`] (a peer that vanished while a response was stalled).
pub const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered.
pub const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Encrypted bytes a connection queues ahead of its socket: four streamed frames
/// ([`crate::api::body::CHUNK_BYTES`]) instead of rustls' default 64 KiB, so a 150,000-pod
/// list goes out in a sixteenth of the writes, each of which also runs the receiver's side
/// of the TCP stack and wakes it (on loopback and on a node's local aggregator connection
/// alike), and the server parks less often on a full socket. Only a client that reads slower
/// than the server writes leaves this much queued: as much as hyper's own write buffer
/// (`max_header_bytes`, 1 MiB by default) and a quarter of what the kernel's send buffer
/// grows to (`tcp_wmem`'s 4 MiB). BENCHMARKS.md, 2026-12-05, second session.
pub const TLS_SEND_BUFFER_BYTES: usize = 4 * crate::api::body::CHUNK_BYTES;

/// The largest h2 frame accepted (the protocol's minimum; requests carry no body here).
pub const HTTP2_MAX_FRAME_BYTES: u32 = 16 * 1024;
/// The h2 receive windows (the protocol's initial 65,535 bytes): request bodies are never
/// read, so this is all a client can make the server buffer per stream and per connection.
pub const HTTP2_RECEIVE_WINDOW_BYTES: u32 = 65_535;
/// Response bytes buffered per h2 stream beyond what flow control lets out.
pub const HTTP2_MAX_SEND_BUF_BYTES: usize = 400 * 1024;

/// Bytes an HTTP/1.1 request head may have beyond [`Config::max_header_bytes`]: Go reads the
/// head through a limit of `MaxHeaderBytes` plus 4,096 ("bufio slop",
/// `initialReadLimitSize`), so a head up to that size is served there and must be here.
pub const HTTP1_HEAD_SLACK_BYTES: usize = 4096;

/// What an h2 header list may have beyond [`Config::max_header_bytes`]: h2 counts 32 bytes
/// per field on top of names and values, and Go pads `MaxHeaderBytes` for 10 fields
/// (`adjustHTTP1MaxHeaderSize`) to get `SETTINGS_MAX_HEADER_LIST_SIZE`.
pub const HTTP2_HEADER_LIST_SLACK_BYTES: usize = 10 * 32;

/// Header lines in an HTTP/1.1 request head (hyper's default is 100): Go counts none, only
/// bytes, and the aggregator sends one `X-Remote-Group` line per group of the user.
pub const HTTP1_MAX_HEADERS: usize = 1024;

/// A connection told to close because it is idle gets this long to say goodbye (h2's GOAWAY
/// and its ping) before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// A 504 answering a request that had no answer by its deadline gets this long to be written.
pub const TIMEOUT_ANSWER_GRACE: Duration = Duration::from_secs(5);

/// `--http2-max-streams-per-connection`, with 0 meaning [`HTTP2_DEFAULT_MAX_STREAMS`].
pub fn http2_max_streams(flag: u32) -> u32 {
    if flag == 0 {
        HTTP2_DEFAULT_MAX_STREAMS
    } else {
        flag
    }
}

/// What a connection answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// The router's answers.
    Serving,
    /// Accepted while draining with `--shutdown-send-retry-after`: every request gets the
    /// shutdown 429 ([`shutting_down`]).
    ShuttingDown,
}

/// Serves one accepted TCP connection until it ends, is idle too long, or `shutdown` (then
/// in-flight requests finish first). `_seat` is its place under the connection cap.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: TlsAcceptor,
    router: Arc<Router>,
    config: Arc<Config>,
    shutdown: CancellationToken,
    _seat: Seat,
    mode: Mode,
) {
    let _ = stream.set_nodelay(true);
    let abort = Arc::new(AtomicBool::new(false));
    let socket = Socket {
        stream,
        abort: abort.clone(),
    };
    let tls = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = tokio::time::timeout(
            config.handshake_timeout,
            acceptor.accept_with(socket, |session| {
                session.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
            }),
        ) => {
            match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%remote, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let peer = session
        .peer_certificates()
        .filter(|chain| !chain.is_empty())
        .map(|chain| PeerCertificates(Arc::from(chain.to_vec())));

    // Cancelled when this function returns: the connection's h2 stream tasks end with it.
    let closed = CancellationToken::new();
    let _closed = closed.clone().drop_guard();
    // h2 only when ALPN picked it, as Go's server (`TLSNextProto` is looked up by the
    // negotiated protocol; a client that names none is read as HTTP/1.1).
    let http2 = alpn.as_deref() == Some(b"h2");
    // HTTP/1.1 request heads are timed by the connection's activity, not by hyper, whose
    // timer also runs while a keep-alive connection waits for its next request (see
    // `Activity::head_late`).
    let activity = Arc::new(if !http2 {
        Activity::timing_heads(Instant::now())
    } else {
        Activity::new(Instant::now())
    });
    let streams = Streams::new(closed);
    // Set by the service when a request draws `--goaway-chance`: the connection closes
    // gracefully after the requests in flight.
    let goaway = Arc::new(tokio::sync::Notify::new());
    let service = {
        let activity = activity.clone();
        let streams = streams.clone();
        let goaway = goaway.clone();
        let hsts = config.hsts.clone();
        let goaway_chance = config.goaway_chance;
        let retry_after_only = mode == Mode::ShuttingDown;
        let request_timeout = config.request_timeout;
        let head_limit = config
            .max_header_bytes
            .saturating_add(HTTP1_HEAD_SLACK_BYTES);
        service_fn(move |mut request: Request<Incoming>| {
            let extensions = request.extensions_mut();
            extensions.insert(RemoteAddr(remote));
            if let Some(peer) = &peer {
                extensions.insert(peer.clone());
            }
            let limit =
                request_limit(request.uri().query(), request_timeout).unwrap_or_else(|invalid| {
                    request.extensions_mut().insert(invalid);
                    request_timeout
                });
            let deadline = Arc::new(Deadline::new(Instant::now() + limit));
            if request.version() == Version::HTTP_2 && (retry_after_only || draws(goaway_chance)) {
                goaway.notify_one();
            }
            let in_flight = if request.version() == Version::HTTP_2 {
                streams.hand_off(deadline.clone());
                activity.begin(None)
            } else {
                activity.begin(Some(deadline.clone()))
            };
            let router = router.clone();
            let too_large =
                request.version() != Version::HTTP_2 && http1_head_bytes(&request) > head_limit;
            let hsts = hsts.clone();
            async move {
                let mut response = if retry_after_only {
                    shutting_down(request.headers(), request.version())
                } else if too_large {
                    header_fields_too_large()
                } else {
                    answer(&router, request, &deadline).await
                };
                if let Some(hsts) = hsts {
                    response
                        .headers_mut()
                        .insert(header::STRICT_TRANSPORT_SECURITY, hsts);
                }
                Ok::<_, Infallible>(response.map(|body| Timed::new(body, in_flight).boxed()))
            }
        })
    };

    let mut builder = auto::Builder::new(streams);
    builder
        .http1()
        .timer(TokioTimer::new())
        // Heads are timed by the connection's activity (above), not by hyper.
        .header_read_timeout(None)
        // The read buffer bounds the head's memory: one that fills it unparsed gets hyper's
        // 431. A read can take it past the limit, so the service checks the parsed head's
        // size too. (The buffer also bounds the response bytes queued for writing.)
        .max_buf_size(
            config
                .max_header_bytes
                .saturating_add(HTTP1_HEAD_SLACK_BYTES)
                .max(8192),
        )
        .max_headers(HTTP1_MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(http2_max_streams(config.http2_max_streams))
        .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_header_list_size(
            u32::try_from(
                config
                    .max_header_bytes
                    .saturating_add(HTTP2_HEADER_LIST_SLACK_BYTES),
            )
            .unwrap_or(u32::MAX),
        )
        .max_frame_size(HTTP2_MAX_FRAME_BYTES)
        .initial_stream_window_size(HTTP2_RECEIVE_WINDOW_BYTES)
        .initial_connection_window_size(HTTP2_RECEIVE_WINDOW_BYTES)
        .max_send_buf_size(HTTP2_MAX_SEND_BUF_BYTES)
        .keep_alive_interval(HTTP2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT);
    let builder = if http2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    // For h2 (an HTTP/1.1 connection's first bytes are bounded by its first head's timer).
    let first_bytes_by = Instant::now() + config.preface_timeout;
    let io = Heard {
        inner: tls,
        activity: activity.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let watch = Watch {
        first_bytes_by,
        activity: &activity,
        shutdown: &shutdown,
        goaway: &goaway,
        idle_timeout: config.idle_timeout,
        header_read_timeout: config.header_read_timeout,
        request_timeout: config.request_timeout,
        remote,
    };
    match drive(conn, |conn| conn.graceful_shutdown(), watch).await {
        Ended::Finished | Ended::TooLate => {}
        Ended::Cut => abort.store(true, Ordering::SeqCst),
    }
}

/// What bounds a connection while [`drive`] serves it.
struct Watch<'a> {
    /// An h2 client that has sent nothing by then is dropped.
    first_bytes_by: Instant,
    activity: &'a Activity,
    shutdown: &'a CancellationToken,
    goaway: &'a tokio::sync::Notify,
    idle_timeout: Duration,
    /// An HTTP/1.1 head not complete this long after it began ends the connection, unanswered
    /// (for a connection whose activity times heads).
    header_read_timeout: Duration,
    request_timeout: Duration,
    remote: SocketAddr,
}

/// How [`drive`] ended a connection.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// It finished (the client closed it, or it closed after a graceful shutdown).
    Finished,
    /// Its HTTP/1.1 response passed its cut: the socket is to be reset, not closed.
    Cut,
    /// Asked to close, it did not within its grace.
    TooLate,
}

/// Serves `conn` until it ends, closing it gracefully (`close`) on shutdown or when idle:
/// once asked to close, the connection finishes what is in flight, on shutdown within the
/// server's drain timeout, when idle within [`CLOSE_GRACE`].
///
/// The watchers' timers are polled outside the task's cooperative budget: a response being
/// written spends it (`api::body::Streamed`, the socket), and a timer polled after that
/// would answer Pending even when due, so a cut could wait for the rest of a list the kernel
/// keeps accepting.
async fn drive<C, E>(
    mut conn: Pin<&mut C>,
    mut close: impl FnMut(Pin<&mut C>),
    watch: Watch<'_>,
) -> Ended
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let Watch {
        first_bytes_by,
        activity,
        shutdown,
        goaway,
        idle_timeout,
        header_read_timeout,
        request_timeout,
        remote,
    } = watch;
    let mut closing = false;
    let mut close_by: Option<Instant> = None;
    loop {
        let too_late = async {
            match close_by {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%remote, %error, "connection ended with an error");
                }
                return Ended::Finished;
            }
            () = shutdown.cancelled(), if !closing => {
                close(conn.as_mut());
                closing = true;
            }
            () = goaway.notified(), if !closing => {
                tracing::debug!(%remote, "--goaway-chance: closing the connection gracefully");
                close(conn.as_mut());
                closing = true;
                close_by = Some(Instant::now() + request_timeout + CLOSE_GRACE);
            }
            () = unconstrained(activity.idle_for(idle_timeout)), if !closing => {
                tracing::debug!(%remote, "closing an idle connection");
                close(conn.as_mut());
                closing = true;
                close_by = Some(Instant::now() + CLOSE_GRACE);
            }
            () = unconstrained(activity.silent_at(first_bytes_by)), if !closing => {
                tracing::debug!(%remote, "the client sent nothing after the TLS handshake; dropping the connection");
                return Ended::TooLate;
            }
            () = unconstrained(activity.head_late(header_read_timeout)) => {
                tracing::debug!(%remote, "HTTP/1.1 request head not complete within the header timeout; closing the connection unanswered");
                return Ended::TooLate;
            }
            () = unconstrained(activity.http1_cut(request_timeout)) => {
                tracing::debug!(%remote, "HTTP/1.1 response past the request timeout; resetting the connection");
                return Ended::Cut;
            }
            () = unconstrained(too_late) => {
                tracing::debug!(%remote, in_flight = activity.in_flight(), "connection did not close in time; dropping it");
                return Ended::TooLate;
            }
        }
    }
}

/// Whether a request draws the `chance` (0 to 1) of `--goaway-chance`. A coin from the
/// standard library's randomly keyed hasher: load spreading needs no stronger randomness.
fn draws(chance: f64) -> bool {
    use std::hash::BuildHasher as _;
    if chance <= 0.0 {
        return false;
    }
    let coin = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (coin >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < chance
}

/// How long a request may take (k8s.io/apiserver's `WithRequestDeadline`): `maximum`
/// (`--request-timeout`), or the client's `?timeout=` when it is shorter and above zero (what
/// kubectl's `--request-timeout` sends); a zero or negative one, or one past the maximum, is
/// the maximum. A value that is not a Go duration is an error with upstream's message.
fn request_limit(query: Option<&str>, maximum: Duration) -> Result<Duration, InvalidTimeout> {
    let Some(value) = crate::api::query::get(query, "timeout").filter(|v| !v.is_empty()) else {
        return Ok(maximum);
    };
    match scraper::go::parse_duration(&value) {
        Ok((false, d)) if !d.is_zero() && d < maximum => Ok(d),
        Ok(_) => Ok(maximum),
        Err(e) => Err(InvalidTimeout(format!(
            "invalid timeout specified in the request URL - {e}"
        ))),
    }
}

/// The router's answer within the request's deadline, or k8s.io/apiserver's 504 when it has
/// none by then; either way the deadline is armed to cut the response if it is still being
/// written when its time is up.
async fn answer(
    router: &Router,
    request: Request<Incoming>,
    deadline: &Deadline,
) -> Response<Body> {
    let started = Instant::now();
    let kind = RequestKind::of(request.method(), request.uri());
    let head = request.method() == Method::HEAD;
    let audit_id = request.headers().get(super::router::AUDIT_ID).cloned();
    match tokio::time::timeout_at(deadline.at(), router.handle(request)).await {
        Ok(response) => {
            deadline.arm(deadline.at());
            response
        }
        Err(_) => {
            deadline.arm(Instant::now() + TIMEOUT_ANSWER_GRACE);
            router.timed_out(kind, head, started.elapsed(), audit_id.as_ref())
        }
    }
}

/// The size of an HTTP/1.1 request head as it came (request line, header lines, the blank
/// line), near enough: hyper keeps no count, and names and values are as parsed.
fn http1_head_bytes<B>(request: &Request<B>) -> usize {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(1, |pq| pq.as_str().len())
        + uri.authority().map_or(0, |authority| {
            authority.as_str().len() + uri.scheme_str().map_or(0, |scheme| scheme.len() + 3)
        });
    let line = request.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + ": ".len() + value.len() + "\r\n".len())
        .sum();
    line + fields + "\r\n".len()
}

/// The answer to a request that arrives while the server drains with
/// `--shutdown-send-retry-after` (k8s.io/apiserver's `WithRetryAfter`): 429, come back in 5 s,
/// on a connection that closes after it (over h2, the connection's GOAWAY).
fn shutting_down(headers: &http::HeaderMap, version: Version) -> Response<crate::body::Body> {
    let mut response = crate::status::Status::too_many_requests(
        "The apiserver is shutting down, please try again later.",
        5,
    )
    .into_negotiated(headers);
    if version != Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Go's answer to a request head over its limit (net/http's `errTooLarge`), after which the
/// connection is closed.
fn header_fields_too_large() -> Response<crate::body::Body> {
    const TEXT: &str = "431 Request Header Fields Too Large";
    let mut response = Response::new(crate::body::full(Bytes::from_static(TEXT.as_bytes())));
    *response.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The accepted socket. Once `abort` is set (a response cut at its deadline) it is closed
/// abortively when dropped (`SO_LINGER` 0: an RST, unsent bytes discarded), so what the
/// kernel still holds of the response is freed at once instead of trickling out to a reader
/// that was too slow, and the client learns the response is incomplete.
struct Socket {
    stream: TcpStream,
    abort: Arc<AtomicBool>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        if self.abort.load(Ordering::SeqCst)
            && let Err(error) = self.stream.set_zero_linger()
        {
            tracing::debug!(%error, "setting SO_LINGER 0 on a cut connection");
        }
    }
}

/// The TLS stream, telling the connection's [`Activity`] when the client's plaintext bytes
/// are read: the first ones (the h2 preface may have come with the handshake's last flight,
/// so it is the plaintext that counts, not the socket), and those that begin an HTTP/1.1
/// request head.
struct Heard<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.heard();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_due_http1_cut_ends_a_connection_that_spends_its_whole_budget() {
        // The connection's task polls the cut after the connection in a random share of its
        // polls, when the connection has left no budget: the cut must come anyway, on the
        // first poll after its timer (the one before may still see it unfired), not whenever
        // it happens to be polled first. Trials, because the order is random.
        let shutdown = CancellationToken::new();
        for trial in 0..32 {
            let activity = Arc::new(Activity::new(Instant::now()));
            // A request came, so the client's first bytes did.
            activity.heard();
            let due = Instant::now() + Duration::from_secs(60);
            let deadline = Arc::new(Deadline::new(due));
            deadline.arm(due);
            let _request = activity.begin(Some(deadline));
            let (busy, running, polls) = super::super::testing::Busy::new(due);
            let served = {
                let (activity, shutdown) = (activity.clone(), shutdown.clone());
                tokio::spawn(async move {
                    let mut conn = std::pin::pin!(busy);
                    let goaway = tokio::sync::Notify::new();
                    let watch = Watch {
                        first_bytes_by: Instant::now() + Duration::from_secs(10),
                        activity: &activity,
                        shutdown: &shutdown,
                        goaway: &goaway,
                        idle_timeout: Duration::from_secs(90),
                        header_read_timeout: Duration::from_secs(32),
                        request_timeout: Duration::from_secs(60),
                        remote: SocketAddr::from(([127, 0, 0, 1], 1)),
                    };
                    drive(conn.as_mut(), |_| {}, watch).await
                })
            };
            // The cut is waiting on its timer when its time comes.
            running.await.unwrap();
            tokio::time::advance(Duration::from_secs(60)).await;
            assert_eq!(served.await.unwrap(), Ended::Cut, "trial {trial}");
            let polls = polls.await.unwrap();
            assert!(
                polls <= 2,
                "trial {trial}: cut after {polls} polls past its time"
            );
        }
    }

    #[test]
    fn goaway_chance_draws_about_its_share() {
        assert!(!(0..10_000).any(|_| draws(0.0)));
        assert!((0..10_000).all(|_| draws(1.0)));
        let drawn = (0..100_000).filter(|_| draws(0.02)).count();
        // 2,000 expected; the binomial's standard deviation is ~44.
        assert!(
            (1_700..=2_300).contains(&drawn),
            "{drawn} of 100,000 at 0.02"
        );
    }

    #[test]
    fn an_http1_head_is_counted_as_it_came() {
        let wire = "GET /apis/metrics.k8s.io/v1beta1/pods?limit=5 HTTP/1.1\r\nhost: localhost\r\nx-remote-group: a\r\nx-remote-group: b\r\n\r\n";
        let request = Request::get("/apis/metrics.k8s.io/v1beta1/pods?limit=5")
            .header("host", "localhost")
            .header("x-remote-group", "a")
            .header("x-remote-group", "b")
            .body(())
            .unwrap();
        assert_eq!(http1_head_bytes(&request), wire.len());
        // The absolute form counts its scheme and authority.
        let request = Request::get("https://localhost/livez").body(()).unwrap();
        assert_eq!(
            http1_head_bytes(&request),
            "GET https://localhost/livez HTTP/1.1\r\n\r\n".len()
        );
    }

    #[test]
    fn the_431_closes_the_connection() {
        let response = header_fields_too_large();
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        assert_eq!(response.headers()[header::CONNECTION], "close");
    }
}
