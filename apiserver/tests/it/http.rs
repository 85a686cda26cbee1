//! HTTP/1.1 and h2 over TLS, 404s, client certificates, graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use apiserver::serve::{Filter, PeerCertificates, Verdict};
use futures::future::BoxFuture;
use http::request::Parts;
use http::{StatusCode, Version};

use crate::support::{Client, eventually, start, start_with};

#[tokio::test]
async fn alpn_picks_http1_or_h2() {
    let server = start(|_| {}).await;
    let h2 = Client::insecure().get(server.addr, "/livez").await;
    assert_eq!(
        (h2.status, h2.version, h2.body.as_str()),
        (StatusCode::OK, Version::HTTP_2, "ok")
    );
    let h1 = Client::insecure()
        .alpn(&[b"http/1.1"])
        .get(server.addr, "/livez")
        .await;
    assert_eq!(
        (h1.status, h1.version, h1.body.as_str()),
        (StatusCode::OK, Version::HTTP_11, "ok")
    );
    // No ALPN at all: HTTP/1.1, as Go's server reads it (h2 over TLS only by ALPN).
    let none = Client::insecure()
        .alpn(&[])
        .get(server.addr, "/livez")
        .await;
    assert_eq!(
        (none.status, none.version),
        (StatusCode::OK, Version::HTTP_11)
    );
    server.shutdown.cancel();
    server.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn disable_http2_serving_leaves_only_http1() {
    let server = start(|s| s.serving.http2 = false).await;
    let stream = Client::insecure().connect(server.addr).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    drop(stream);
    let reply = Client::insecure().get(server.addr, "/livez").await;
    assert_eq!(reply.version, Version::HTTP_11);
    // A client that speaks only h2 finds no common protocol.
    assert!(
        Client::insecure()
            .alpn(&[b"h2"])
            .connect(server.addr)
            .await
            .is_err()
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn unknown_paths_get_a_404_as_metrics_server_answers_them() {
    let server = start(|_| {}).await;
    // Under the API group, go-restful's 404: a Status.
    let reply = Client::insecure()
        .get(server.addr, "/apis/metrics.k8s.io/v1beta1/things")
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(
        reply.headers[http::header::CONTENT_TYPE],
        "application/json"
    );
    let status: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);
    assert_eq!(
        status["message"],
        "the server could not find the requested resource"
    );
    // Anywhere else, the plain mux's: Go's `http.NotFound`.
    for path in [
        "/apis/example.com/v1/things",
        "/nothing",
        "/readyz/no-such-check",
    ] {
        let reply = Client::insecure().get(server.addr, path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            reply.headers[http::header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            reply.headers[http::header::X_CONTENT_TYPE_OPTIONS],
            "nosniff"
        );
        assert_eq!(reply.body, "404 page not found\n", "{path}");
    }
    server.shutdown.cancel();
}

/// Answers every request with the subject of the client certificate, or "none".
struct ShowPeer;

impl Filter for ShowPeer {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let who = match parts.extensions.get::<PeerCertificates>() {
                Some(chain) => {
                    let (_, cert) = x509_parser::parse_x509_certificate(&chain.0[0]).unwrap();
                    cert.subject().to_string()
                }
                None => "none".to_owned(),
            };
            Verdict::Reject(http::Response::new(apiserver::body::full(who)))
        })
    }
}

#[tokio::test]
async fn client_certificates_reach_the_filters_without_being_required() {
    let server = start_with(|_| {}, vec![Arc::new(ShowPeer)], None).await;
    let anonymous = Client::insecure().get(server.addr, "/livez").await;
    assert_eq!(anonymous.body, "none");

    let ca = tls::issue::Ca::new("front-proxy-ca").unwrap();
    let proxy = ca
        .issue(&tls::issue::LeafSpec {
            common_name: "front-proxy-client".into(),
            client: true,
            ..Default::default()
        })
        .unwrap();
    let mut client = Client::insecure();
    client.identity = Some(proxy.identity.clone());
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let reply = client
            .clone()
            .alpn(&[alpn])
            .get(server.addr, "/livez")
            .await;
        assert_eq!(reply.body, "CN=front-proxy-client");
    }
    server.shutdown.cancel();
}

#[tokio::test]
async fn shutdown_fails_readyz_during_the_delay_then_stops_serving() {
    // The cluster is empty, so metric-storage-ready never passes: the shutdown check is
    // watched beside the others.
    const READYZ: &str = "/readyz?exclude=metric-storage-ready";
    let server = start(|s| s.shutdown_delay = Duration::from_secs(1)).await;
    let before = Client::insecure().get(server.addr, READYZ).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.body);

    // A connection opened before shutdown.
    let open = Client::insecure()
        .alpn(&[b"http/1.1"])
        .connect(server.addr)
        .await
        .unwrap();

    server.shutdown.cancel();
    // Shutdown has begun once /readyz fails.
    let during = eventually(Duration::from_secs(5), || async {
        let r = Client::insecure().get(server.addr, READYZ).await;
        (r.status == StatusCode::INTERNAL_SERVER_ERROR).then_some(r)
    })
    .await
    .expect("/readyz fails once shutdown has begun");
    assert!(
        during
            .body
            .ends_with("[-]shutdown failed: reason withheld\nreadyz check failed\n")
    );
    let live = Client::insecure().get(server.addr, "/livez").await;
    assert_eq!(live.status, StatusCode::OK);

    let result = tokio::time::timeout(Duration::from_secs(10), server.task)
        .await
        .expect("run returns after the delay and the drain")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(server.started.elapsed() >= Duration::from_secs(1));
    // No longer accepting.
    assert!(Client::insecure().connect(server.addr).await.is_err());
    drop(open);
}
