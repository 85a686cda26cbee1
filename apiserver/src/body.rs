//! The one response body type of every route and filter: buffered ([`full`]) or streamed
//! (the API's lists, gzip).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

/// Every response body: buffered or streamed.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A plain-text answer as Go's `http.Error` and the apiserver's `writePlainText` write it:
/// `content_type` (`text/plain` with or without a charset, as the Go handler set it) and
/// `X-Content-Type-Options: nosniff`.
pub fn text(
    status: http::StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> http::Response<Body> {
    let mut response = http::Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    response
}

/// `body`, calling `done` once when it ends or is dropped, whichever comes first: what a
/// request's log line and its audit event wait for, so that a streamed list's latency covers
/// its body, and a client that went away mid-list still gets its line.
pub fn on_end<F>(body: Body, done: F) -> Body
where
    F: FnOnce() + Send + Sync + Unpin + 'static,
{
    OnEnd {
        inner: body,
        done: Some(done),
    }
    .boxed()
}

/// [`on_end`]'s body.
struct OnEnd<F: FnOnce()> {
    inner: Body,
    done: Option<F>,
}

impl<F: FnOnce()> OnEnd<F> {
    fn finish(&mut self) {
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

impl<F: FnOnce()> Drop for OnEnd<F> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<F: FnOnce() + Unpin> http_body::Body for OnEnd<F> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
