//! Indented JSON for people, as k8s.io/apiserver writes it: a JSON answer (an object, a list,
//! a Table, a discovery document, an error `Status`) is indented by two spaces when the
//! request asks with `?pretty=true` or comes from curl, Wget or a browser
//! (`negotiation.isPrettyPrint`; its JSON serializer then uses `json.MarshalIndent`). So
//! `curl` against the server prints what it prints against metrics-server. OpenAPI documents
//! are served as stored, as kube-openapi serves them; other media types are left alone.
//!
//! The body is indented as it streams (a 150,000-pod list is never held whole): a small state
//! machine over the bytes, which carries its state from one frame to the next.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Response, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::body::Body;

/// `NegotiateOutputMediaType`'s choice: the negotiated media type's `pretty=1`
/// (`application/json;pretty=1`), or `isPrettyPrint`: a non-empty `pretty` parameter decides
/// (Go's `strconv.ParseBool`, anything it cannot parse is false); otherwise a `User-Agent`
/// starting with `curl`, `Wget` or `Mozilla/5.0`.
pub fn wanted(parts: &Parts) -> bool {
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    if crate::api::accept::pretty(accept) {
        return true;
    }
    let query = parts.uri.query();
    if query.is_some_and(|q| q.contains("pretty"))
        && let Some(v) = crate::api::query::get(query, "pretty").filter(|v| !v.is_empty())
    {
        return matches!(&*v, "1" | "t" | "T" | "TRUE" | "true" | "True");
    }
    parts.headers.get(header::USER_AGENT).is_some_and(|ua| {
        let ua = ua.as_bytes();
        ua.starts_with(b"curl") || ua.starts_with(b"Wget") || ua.starts_with(b"Mozilla/5.0")
    })
}

/// The response with its body indented, when it is JSON and not an OpenAPI document.
pub fn indent(path: &str, response: Response<Body>) -> Response<Body> {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if !json || path.starts_with("/openapi/") {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = Indented {
        inner: body,
        state: Indenter::default(),
    };
    Response::from_parts(parts, body.boxed())
}

/// Go's `json.Indent(dst, src, "", "  ")` over a stream: whitespace between tokens is
/// dropped, each member and element goes on a line of its own, `:` is followed by a space,
/// and an empty object or array stays `{}` / `[]`.
#[derive(Debug, Default)]
pub struct Indenter {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A line break owed before the next token: after `{`, `[` (unless the container is
    /// empty) or `,`.
    owed: Option<Owed>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    AfterOpen,
    AfterComma,
}

impl Indenter {
    /// Appends the indented form of the next bytes of the document to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            if self.in_string {
                out.push(b);
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => {}
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.owed.take() != Some(Owed::AfterOpen) {
                        self.newline(out);
                    }
                    out.push(b);
                }
                b',' => {
                    out.push(b);
                    self.owed = Some(Owed::AfterComma);
                }
                b':' => out.extend_from_slice(b": "),
                _ => {
                    if self.owed.take().is_some() {
                        self.newline(out);
                    }
                    out.push(b);
                    match b {
                        b'{' | b'[' => {
                            self.depth += 1;
                            self.owed = Some(Owed::AfterOpen);
                        }
                        b'"' => self.in_string = true,
                        _ => {}
                    }
                }
            }
        }
    }

    fn newline(&self, out: &mut Vec<u8>) {
        out.push(b'\n');
        out.resize(out.len() + 2 * self.depth, b' ');
    }
}

/// A JSON body, indented frame by frame.
struct Indented {
    inner: Body,
    state: Indenter,
}

impl HttpBody for Indented {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        loop {
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                other => return other,
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
            };
            let mut out = Vec::with_capacity(data.len() + data.len() / 2);
            this.state.push(&data, &mut out);
            // A frame of whitespace only indents to nothing: read on rather than send it.
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn indent_str(s: &str) -> String {
        let mut out = Vec::new();
        Indenter::default().push(s.as_bytes(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn indents_as_go_marshal_indent() {
        let compact = r#"{"kind":"PodMetricsList","metadata":{},"items":[{"metadata":{"name":"a,b:c","labels":{"x":"\"{[\\"}},"containers":[],"n":-1.5e3,"t":true,"z":null}]}"#;
        assert_eq!(
            indent_str(&format!("{compact}\n")),
            "{\n  \"kind\": \"PodMetricsList\",\n  \"metadata\": {},\n  \"items\": [\n    {\n      \"metadata\": {\n        \"name\": \"a,b:c\",\n        \"labels\": {\n          \"x\": \"\\\"{[\\\\\"\n        }\n      },\n      \"containers\": [],\n      \"n\": -1.5e3,\n      \"t\": true,\n      \"z\": null\n    }\n  ]\n}"
        );
        // Indenting is idempotent (already indented documents, such as /version, stay).
        let once = indent_str(compact);
        assert_eq!(indent_str(&once), once);
    }

    #[test]
    fn a_document_split_anywhere_indents_the_same() {
        let doc = r#"{"a":[1,{"b":"x\\\"y,"},[]],"c":{}}"#;
        let whole = indent_str(doc);
        for cut in 0..=doc.len() {
            let mut state = Indenter::default();
            let mut out = Vec::new();
            state.push(&doc.as_bytes()[..cut], &mut out);
            state.push(&doc.as_bytes()[cut..], &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), whole, "cut at {cut}");
        }
    }

    fn parts(uri: &str, user_agent: Option<&str>) -> Parts {
        let mut b = http::Request::get(uri);
        if let Some(ua) = user_agent {
            b = b.header(header::USER_AGENT, ua);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn asked_for_by_parameter_or_by_a_human_client() {
        assert!(wanted(&parts("/apis", Some("curl/8.5.0"))));
        assert!(wanted(&parts("/apis", Some("Wget/1.21"))));
        assert!(wanted(&parts("/apis", Some("Mozilla/5.0 (X11)"))));
        assert!(!wanted(&parts("/apis", Some("kubectl/v1.32.4"))));
        assert!(!wanted(&parts("/apis", None)));
        assert!(wanted(&parts("/apis?pretty=true", Some("kubectl/v1.32.4"))));
        assert!(wanted(&parts("/apis?pretty=1", None)));
        // The parameter decides over the agent; what ParseBool refuses is false.
        assert!(!wanted(&parts("/apis?pretty=false", Some("curl/8.5.0"))));
        assert!(!wanted(&parts("/apis?pretty=yes", Some("curl/8.5.0"))));
        assert!(wanted(&parts("/apis?pretty=", Some("curl/8.5.0"))));
        assert!(!wanted(&parts("/apis?prettyx=1", None)));
    }

    #[test]
    fn asked_for_by_the_negotiated_media_type() {
        let with_accept = |accept: &str, uri: &str| {
            let mut p = parts(uri, Some("kubectl/v1.32.4"));
            p.headers.insert(header::ACCEPT, accept.parse().unwrap());
            wanted(&p)
        };
        assert!(with_accept("application/json;pretty=1", "/apis"));
        assert!(with_accept("*/*;pretty=1", "/apis"));
        // Either asks: the media type's `pretty=1` or the parameter.
        assert!(with_accept(
            "application/json;pretty=1",
            "/apis?pretty=false"
        ));
        assert!(!with_accept("application/json;pretty=0", "/apis"));
        assert!(!with_accept("application/json;pretty=true", "/apis"));
        // Only the range JSON is negotiated from counts.
        assert!(!with_accept(
            "application/json, application/yaml;pretty=1",
            "/apis"
        ));
        assert!(!with_accept(
            "application/json;q=0.5, application/*;pretty=1;q=0.1",
            "/apis"
        ));
    }
}
