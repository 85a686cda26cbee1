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
