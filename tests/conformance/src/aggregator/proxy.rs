//! Forwarding one request to a backend the way kube-aggregator's proxy handler does: the
//! original path, the query re-encoded, client headers cloned except `Authorization`,
//! incoming `X-Remote-*`/`Impersonate-*` and hop-by-hop headers, the caller's identity in
//! `X-Remote-User`/`-Uid`/`-Group`/`-Extra-*`, and the response streamed back unchanged.
//! `Accept-Encoding` goes up with the other client headers and `Content-Encoding` comes back
//! with the body as the backend encoded it: Go's transport neither adds gzip nor
//! decompresses when the request already names an encoding, so kube-aggregator passes a
//! backend's gzip through to clients that asked for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;

use super::{HttpClient, UpstreamBody};
use crate::controlplane::{Body, User, status_response};

/// How long a proxied request may take.
#[derive(Clone, Copy, Debug)]
pub enum Timeout {
    /// `/apis/<g>/<v>`: the whole request; on expiry the proxy error (503).
    Discovery(Duration),
    /// Anything else: until the response headers; on expiry kube-apiserver's 504 Status.
    Request(Duration),
}

/// A plain-text answer as Go's `http.Error` writes it.
pub fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut resp = Response::new(crate::controlplane::full(format!("{message}\n")));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// An error and its sources, joined with `: ` as Go prints wrapped errors.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// Go's `headerKeyEscape`: bytes that are not legal header-token bytes, and `%`, become `%XX`.
pub fn escape_extra_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let token = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if token {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Replaces identity headers: deletes `Authorization`, `Impersonate-*` and every incoming
/// `X-Remote-*`, then sets the caller's (client-go `SetAuthProxyHeaders`).
pub fn set_identity(headers: &mut HeaderMap, user: &User) {
    headers.remove(header::AUTHORIZATION);
    let spoofed: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-remote-") || k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for k in spoofed {
        headers.remove(k);
    }
    let add = |headers: &mut HeaderMap, name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    };
    add(headers, "x-remote-user", &user.name);
    if !user.uid.is_empty() {
        add(headers, "x-remote-uid", &user.uid);
    }
    for g in &user.groups {
        add(headers, "x-remote-group", g);
    }
    for (k, values) in &user.extra {
        let name = format!("x-remote-extra-{}", escape_extra_key(k));
        for v in values {
            add(headers, &name, v);
        }
    }
}

static AUDIT_IDS: AtomicU64 = AtomicU64::new(1);

/// Sends `req` to `backend_url` + its path and re-encoded query as `user`, and streams the
/// answer back.
pub async fn forward(
    client: &HttpClient,
    backend_url: &str,
    req: Request<UpstreamBody>,
    user: &User,
    timeout: Timeout,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let mut url = format!("{backend_url}{}", parts.uri.path());
    if let Some(q) = parts.uri.query() {
        let encoded = super::query::encode(&super::query::parse(q));
        if !encoded.is_empty() {
            url.push('?');
            url.push_str(&encoded);
        }
    }
    let uri: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("error trying to reach service: {e}"),
            );
        }
    };
    strip_hop_by_hop(&mut parts.headers);
    set_identity(&mut parts.headers, user);
    let audit_id = format!(
        "00000000-0000-4000-8000-{:012x}",
        AUDIT_IDS.fetch_add(1, Ordering::Relaxed)
    );
    if let Ok(v) = HeaderValue::from_str(&audit_id) {
        parts.headers.insert("audit-id", v);
    }
    let mut upstream = Request::new(body);
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri;
    *upstream.headers_mut() = parts.headers;

    let limit = match timeout {
        Timeout::Discovery(d) | Timeout::Request(d) => d,
    };
    let resp = match tokio::time::timeout(limit, client.request(upstream)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("error trying to reach service: {}", error_chain(&e)),
            );
        }
        Err(_) => {
            return match timeout {
                Timeout::Discovery(_) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "error trying to reach service: context deadline exceeded",
                ),
                Timeout::Request(_) => status_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    "Timeout: request did not complete within the allotted timeout",
                ),
            };
        }
    };
    let (mut parts, incoming) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = match timeout {
        Timeout::Discovery(d) => {
            // The discovery deadline covers the body too: read it in full.
            match tokio::time::timeout(d, incoming.collect()).await {
                Ok(Ok(c)) => crate::controlplane::full(c.to_bytes()),
                _ => {
                    return text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "error trying to reach service: context deadline exceeded",
                    );
                }
            }
        }
        Timeout::Request(_) => incoming
            .map_err(|e| -> crate::controlplane::BoxError { Box::new(e) })
            .boxed(),
    };
    Response::from_parts(parts, body)
}

/// A request body as the upstream body type.
pub fn upstream_body<B>(body: B) -> UpstreamBody
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<crate::controlplane::BoxError>,
{
    body.map_err(Into::into).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_escaped_like_client_go() {
        assert_eq!(escape_extra_key("scopes"), "scopes");
        assert_eq!(
            escape_extra_key("example.org/foo bar%"),
            "example.org%2Ffoo%20bar%25"
        );
    }

    #[test]
    fn identity_replaces_spoofed_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret"),
        );
        h.insert("x-remote-user", HeaderValue::from_static("mallory"));
        h.insert("x-remote-extra-evil", HeaderValue::from_static("1"));
        h.insert("impersonate-user", HeaderValue::from_static("root"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let mut user = User::new("alice", &["dev", "system:authenticated"]);
        user.uid = "u-1".to_owned();
        user.extra
            .insert("scopes".to_owned(), vec!["a".to_owned(), "b".to_owned()]);
        set_identity(&mut h, &user);
        assert!(h.get(header::AUTHORIZATION).is_none());
        assert!(h.get("impersonate-user").is_none());
        assert!(h.get("x-remote-extra-evil").is_none());
        assert_eq!(
            h.get_all("x-remote-user").iter().collect::<Vec<_>>(),
            ["alice"]
        );
        assert_eq!(
            h.get("x-remote-uid").map(|v| v.as_bytes()),
            Some(&b"u-1"[..])
        );
        assert_eq!(
            h.get_all("x-remote-group").iter().collect::<Vec<_>>(),
            ["dev", "system:authenticated"]
        );
        assert_eq!(
            h.get_all("x-remote-extra-scopes")
                .iter()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            h.get(header::ACCEPT).map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
    }
}
