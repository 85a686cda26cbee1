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
