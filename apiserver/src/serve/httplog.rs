//! One log line per request, as k8s.io/apiserver's `httplog` writes it at klog `-v=3`: the
//! Kubernetes verb, the URI, the latency, the user agent, the authenticated user, the source
//! address and the status, so an operator can see who asks what.
//!
//! The line goes to the `httplog` tracing target at INFO, which the binary enables from
//! `-v=3` up. It is written when the response body is finished or dropped, so a streamed
//! list's latency covers its body too (Go's handler returns after writing it). When the target
//! is off a request pays one cached `enabled` check.

use std::net::SocketAddr;
use tokio::time::Instant;

use http::request::Parts;
use http::{HeaderValue, Response, header};

use super::router::RemoteAddr;
use crate::auth::{Attributes, UserInfo};
use crate::body::Body;

/// The tracing target of the request lines.
pub const TARGET: &str = "httplog";

/// Whether request lines are wanted.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// What the line says about a request, taken when its response head is ready.
#[derive(Debug)]
struct Entry {
    verb: String,
    uri: String,
    user: String,
    user_agent: String,
    audit_id: String,
    source: Option<SocketAddr>,
    status: u16,
    started: Instant,
}

impl Entry {
    fn write(&self) {
        tracing::info!(
            target: TARGET,
            verb = %self.verb,
            URI = %self.uri,
            latency = ?self.started.elapsed(),
            userAgent = %self.user_agent,
            "audit-ID" = %self.audit_id,
            user = %self.user,
            srcIP = %self.source.map(|a| a.to_string()).unwrap_or_default(),
            resp = self.status,
            "HTTP"
        );
    }
}

/// `response` with its line written when its body ends. `parts` is the request after the
/// filters (the user and the authorization attributes are in its extensions when they got
/// that far); `started` is when it arrived.
pub fn logged(parts: &Parts, started: Instant, response: Response<Body>) -> Response<Body> {
    // Authorization leaves the attributes where it needed them; otherwise (a user allowed
    // everything, a request refused before authorization) they are derived here, as
    // k8s.io/apiserver resolves every request's RequestInfo before authenticating it.
    let derived;
    let attributes = match parts.extensions.get::<Attributes>() {
        Some(attributes) => attributes,
        None => {
            derived = crate::auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
            &derived
        }
    };
    let verb = attributes.verb().to_ascii_uppercase();
    let entry = Entry {
        verb,
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        user: parts
            .extensions
            .get::<UserInfo>()
            .map(|u| u.name.clone())
            .unwrap_or_default(),
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .map(HeaderValue::as_bytes)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default(),
        audit_id: response
            .headers()
            .get(super::router::AUDIT_ID)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default(),
        source: parts.extensions.get::<RemoteAddr>().map(|a| a.0),
        status: response.status().as_u16(),
        started,
    };
    response.map(|inner| crate::body::on_end(inner, move || entry.write()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use http::{Method, Request, StatusCode};
    use http_body_util::BodyExt as _;
    use parking_lot::Mutex;

    use super::*;

    /// Everything written through the subscriber.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn subscriber(captured: &Captured, directive: &str) -> impl tracing::Subscriber {
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(directive))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }

    fn request() -> Parts {
        let (mut parts, ()) = Request::builder()
            .method(Method::GET)
            .uri("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb")
            .header(header::USER_AGENT, "kube-controller-manager/v1.36.0")
            .body(())
            .unwrap()
            .into_parts();
        parts.extensions.insert(UserInfo {
            name: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
            ..UserInfo::default()
        });
        parts.extensions.insert(crate::auth::attributes(
            &parts.method,
            parts.uri.path(),
            parts.uri.query(),
        ));
        parts
            .extensions
            .insert(RemoteAddr("192.0.2.10:41234".parse().unwrap()));
        parts
    }

    #[tokio::test]
    async fn one_line_per_request_when_the_body_ends_with_who_asked_what() {
        let captured = Captured::default();
        let _default = tracing::subscriber::set_default(subscriber(&captured, "httplog=info"));
        assert!(enabled());
        let mut response = Response::new(crate::body::full("{}"));
        *response.status_mut() = StatusCode::OK;
        response.headers_mut().insert(
            super::super::router::AUDIT_ID,
            HeaderValue::from_static("5e0b7f6c-3c1a-4a39-9b3e-2f1d0c8a7e61"),
        );
        let response = logged(&request(), Instant::now(), response);
        assert!(captured.0.lock().is_empty(), "not before the body ends");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "{}");
        let text = String::from_utf8(captured.0.lock().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        for part in [
            "HTTP",
            "verb=LIST",
            "URI=/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb",
            "latency=",
            "userAgent=kube-controller-manager/v1.36.0",
            "audit-ID=5e0b7f6c-3c1a-4a39-9b3e-2f1d0c8a7e61",
            "user=system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "srcIP=192.0.2.10:41234",
            "resp=200",
        ] {
            assert!(text.contains(part), "{part} missing in {text}");
        }
    }

    #[tokio::test]
    async fn a_body_dropped_unread_is_logged_once_too() {
        let captured = Captured::default();
        let _default = tracing::subscriber::set_default(subscriber(&captured, "httplog=info"));
        let mut response = Response::new(crate::body::full("{}"));
        *response.status_mut() = StatusCode::FORBIDDEN;
        drop(logged(&request(), Instant::now(), response));
        let text = String::from_utf8(captured.0.lock().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("resp=403"), "{text}");
    }

    #[tokio::test]
    async fn the_verb_is_the_kubernetes_one_when_authorization_left_no_attributes() {
        // A user allowed everything, or a request refused by authentication: no attributes.
        let captured = Captured::default();
        let _default = tracing::subscriber::set_default(subscriber(&captured, "httplog=info"));
        let mut parts = request();
        parts.extensions.remove::<Attributes>();
        let mut response = Response::new(crate::body::full("{}"));
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        drop(logged(&parts, Instant::now(), response));
        let text = String::from_utf8(captured.0.lock().clone()).unwrap();
        assert!(text.contains("verb=LIST"), "{text}");
        assert!(text.contains("resp=401"), "{text}");
    }

    #[tokio::test]
    async fn off_below_its_level() {
        let captured = Captured::default();
        let _default = tracing::subscriber::set_default(subscriber(&captured, "info,httplog=off"));
        assert!(!enabled());
    }
}
