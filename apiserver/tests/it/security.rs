//! Delegated authentication and authorization wired from the settings, over real HTTPS, with no
//! Kubernetes API reachable: what can be decided without a review (front-proxy and client-CA
//! certificates, `system:masters`, the always-allowed paths) and what happens when a review is
//! needed but fails. The reviews themselves are in `tests/conformance/tests/it/security.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::auth::{Attributes, UserInfo};
use apiserver::config::Settings;
use apiserver::run::{Auth, Cluster, Setup};
use apiserver::serve::{Filter, Verdict};
use futures::future::BoxFuture;
use http::StatusCode;
use http::request::Parts;
use scraper::inventory::Inventory;
use serde_json::Value;
use tls::issue::Ca;
use tokio_util::sync::CancellationToken;

use crate::support::{
    Client, Reply, Running, launch, serving, with_cert, write_unreachable_kubeconfig,
};

/// The exact 401 body of k8s.io/apiserver.
const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

struct Pki {
    front_proxy: Ca,
    client: Ca,
    other: Ca,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let pki = Pki {
            front_proxy: Ca::new("front-proxy-ca").unwrap(),
            client: Ca::new("kubernetes").unwrap(),
            other: Ca::new("attacker").unwrap(),
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(pki.path("front-proxy-ca.crt"), pki.front_proxy.cert_pem()).unwrap();
        std::fs::write(pki.path("client-ca.crt"), pki.client.cert_pem()).unwrap();
        write_unreachable_kubeconfig(&pki.path("kubeconfig"));
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Settings: both CAs from files (so no ConfigMap lookup), allowed name
    /// `front-proxy-client`, and a kubeconfig whose API server refuses connections.
    fn settings(&self, s: &mut Settings) {
        s.kubeconfig = Some(self.path("kubeconfig"));
        s.authn.requestheader_client_ca_file = Some(self.path("front-proxy-ca.crt"));
        s.authn.requestheader_allowed_names = vec!["front-proxy-client".to_owned()];
        s.authn.client_ca_file = Some(self.path("client-ca.crt"));
    }

    async fn start(&self, filters: Vec<Arc<dyn Filter>>) -> Running {
        launch(|s| self.settings(s), filters, None, Auth::FromSettings).await
    }
}

const SPOOF: &[(&str, &str)] = &[
    ("x-remote-user", "system:admin"),
    ("x-remote-group", "system:masters"),
];

fn message(reply: &Reply) -> String {
    let status: Value = serde_json::from_str(&reply.body).unwrap();
    status["message"].as_str().unwrap_or_default().to_owned()
}

/// Asserts that `path` needed a SubjectAccessReview (the user is not one allowed without one,
/// so the spoofed `system:masters` was not believed) and that the review, which cannot reach
/// the unreachable API server, answered a 500 as k8s.io/apiserver does, not a 403: a client
/// may retry an internal error, a 403 says it is not allowed. (Which user was reviewed is
/// asserted in `the_user_is_in_the_extensions_and_identity_headers_are_gone_before_later_filters`
/// and the authorizer's unit tests.)
fn assert_needs_review(reply: &Reply, path: &str) {
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{path}: {}",
        reply.body
    );
    let status: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(status["reason"], "InternalError", "{path}");
    assert!(
        message(reply).starts_with("Internal error occurred: SubjectAccessReview failed"),
        "{path}: {}",
        reply.body
    );
}

#[tokio::test]
async fn spoofed_front_proxy_headers_are_believed_only_behind_the_allowed_certificate() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;

    // No client certificate: anonymous, and the review it needs cannot be had: 500.
    let r = Client::insecure()
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_needs_review(&r, "/metrics");

    // A certificate with the allowed name from another CA: a failed credential, 401.
    let r = with_cert(&pki.other, "front-proxy-client", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );

    // The front-proxy CA, but a name not in --requestheader-allowed-names: 401.
    let r = with_cert(&pki.front_proxy, "someone-else", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );

    // A client-CA certificate is a user of its own, not a proxy: the headers are ignored.
    let r = with_cert(&pki.client, "bob", &["dev"])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_needs_review(&r, "/metrics");

    // The real front proxy: the headers are believed, and system:masters needs no review.
    let r = with_cert(&pki.front_proxy, "front-proxy-client", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("process_cpu_seconds_total"), "{}", r.body);
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_client_ca_certificate_authenticates_as_its_cn_and_o() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;
    let r = with_cert(&pki.client, "alice", &["system:masters"])
        .get(server.addr, "/metrics")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The same name from a CA nobody trusts is a failed credential.
    let r = with_cert(&pki.other, "alice", &["system:masters"])
        .get(server.addr, "/metrics")
        .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );
    server.shutdown.cancel();
}

/// Replaces `path` as a Secret or ConfigMap volume update does: a new file renamed over it.
fn replace_file(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_rotated_client_ca_file_trusts_the_new_ca_and_no_longer_the_old() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;
    let old = with_cert(&pki.client, "alice", &["system:masters"]);
    let new_ca = Ca::new("kubernetes-2").unwrap();
    let new = with_cert(&new_ca, "alice", &["system:masters"]);
    assert_eq!(
        old.get(server.addr, "/metrics").await.status,
        StatusCode::OK
    );
    assert_eq!(
        new.get(server.addr, "/metrics").await.status,
        StatusCode::UNAUTHORIZED,
        "not trusted before the rotation"
    );

    // A broken file: logged, the old CA kept.
    let before = server.reloads.counts();
    replace_file(
        &pki.path("client-ca.crt"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    );
    server
        .reloads
        .wait_for(|c| c.rejected > before.rejected)
        .await;
    assert_eq!(
        old.get(server.addr, "/metrics").await.status,
        StatusCode::OK
    );

    replace_file(&pki.path("client-ca.crt"), new_ca.cert_pem());
    server
        .reloads
        .wait_for(|c| c.applied > before.applied)
        .await;
    let r = new.get(server.addr, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = old.get(server.addr, "/metrics").await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED),
        "the old CA is no longer trusted"
    );
    // The front proxy is untouched by the client CA's rotation.
    let r = with_cert(&pki.front_proxy, "front-proxy-client", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_rotated_requestheader_client_ca_file_trusts_the_new_front_proxy_only() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;
    let old = with_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let new_ca = Ca::new("front-proxy-ca-2").unwrap();
    let new = with_cert(&new_ca, "front-proxy-client", &[]);
    let status = |r: Reply| r.status;
    assert_eq!(
        status(old.get_with(server.addr, "/metrics", SPOOF).await),
        StatusCode::OK
    );
    assert_eq!(
        status(new.get_with(server.addr, "/metrics", SPOOF).await),
        StatusCode::UNAUTHORIZED
    );
    let before = server.reloads.counts();
    replace_file(&pki.path("front-proxy-ca.crt"), new_ca.cert_pem());
    server
        .reloads
        .wait_for(|c| c.applied > before.applied)
        .await;
    let r = new.get_with(server.addr, "/metrics", SPOOF).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        status(old.get_with(server.addr, "/metrics", SPOOF).await),
        StatusCode::UNAUTHORIZED,
        "the old front-proxy CA is no longer trusted"
    );
    // --requestheader-allowed-names still applies to the new CA.
    let r = with_cert(&new_ca, "someone-else", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The client CA is untouched.
    let r = with_cert(&pki.client, "alice", &["system:masters"])
        .get(server.addr, "/metrics")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    server.shutdown.cancel();
}

#[tokio::test]
async fn health_is_served_anonymously_and_everything_else_needs_authorization() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;
    let anonymous = Client::insecure();
    for path in ["/healthz", "/livez"] {
        let r = anonymous.get(server.addr, path).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (StatusCode::OK, "ok"),
            "{path}"
        );
    }
    // Cold store: /readyz fails its check, but it is answered, not refused.
    let r = anonymous.get(server.addr, "/readyz?verbose").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.body.ends_with("readyz check failed\n"), "{}", r.body);
    // The always-allowed paths are exact: a single check is not one of them.
    for path in [
        "/readyz/metric-storage-ready",
        "/metrics",
        "/apis/metrics.k8s.io/v1beta1",
    ] {
        let r = anonymous.get(server.addr, path).await;
        assert_needs_review(&r, path);
    }
    // A resource too (the 403 wording for a deny is in the authorizer's unit tests).
    let path = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods";
    let r = anonymous.get(server.addr, path).await;
    assert_needs_review(&r, path);
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_token_that_cannot_be_reviewed_is_a_401_even_on_health_paths() {
    let pki = Pki::new();
    let server = pki.start(Vec::new()).await;
    let r = Client::insecure()
        .get_with(server.addr, "/livez", &[("authorization", "Bearer forged")])
        .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    );
    server.shutdown.cancel();
}

/// Answers every request it sees with the user and attributes the earlier filters left, and
/// the identity headers still present.
struct Echo;

impl Filter for Echo {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let user = parts.extensions.get::<UserInfo>().cloned();
            let attributes = parts.extensions.get::<Attributes>().is_some();
            let leftover: Vec<String> = parts
                .headers
                .keys()
                .map(|k| k.as_str().to_owned())
                .filter(|k| k.starts_with("x-remote-") || k == "authorization")
                .collect();
            let body = serde_json::json!({
                "user": user.as_ref().map(|u| &u.name),
                "groups": user.as_ref().map(|u| &u.groups),
                "extra": user.as_ref().map(|u| &u.extra),
                "attributes_yet": attributes,
                "leftover": leftover,
            });
            Verdict::Reject(
                http::Response::builder()
                    .status(StatusCode::IM_A_TEAPOT)
                    .body(apiserver::body::full(body.to_string()))
                    .unwrap(),
            )
        })
    }
}

#[tokio::test]
async fn the_user_is_in_the_extensions_and_identity_headers_are_gone_before_later_filters() {
    let pki = Pki::new();
    let server = pki.start(vec![Arc::new(Echo)]).await;
    let r = with_cert(&pki.front_proxy, "front-proxy-client", &[])
        .get_with(
            server.addr,
            "/apis/metrics.k8s.io/v1beta1/nodes",
            &[
                ("x-remote-user", "alice"),
                ("x-remote-group", "dev"),
                ("x-remote-group", "system:authenticated"),
                ("x-remote-extra-scopes", "view"),
                ("x-remote-uid", "u-1"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::IM_A_TEAPOT, "{}", r.body);
    let seen: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(seen["user"], "alice");
    assert_eq!(
        seen["groups"],
        serde_json::json!(["dev", "system:authenticated"])
    );
    assert_eq!(seen["extra"], serde_json::json!({"scopes": ["view"]}));
    assert_eq!(seen["leftover"], serde_json::json!([]));
    // Filters given in the Setup run before authorization (where load shedding goes).
    assert_eq!(seen["attributes_yet"], false);
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_failed_configmap_lookup_stops_the_start_unless_tolerated() {
    tls::provider::install_default();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_unreachable_kubeconfig(&kubeconfig);
    let settings = |client_ca_file: Option<PathBuf>| {
        let mut s = crate::support::settings(dir.path());
        s.kubelet.insecure_tls = false;
        s.kubeconfig = Some(kubeconfig.clone());
        s.authn.client_ca_file = client_ca_file;
        s
    };
    let setup = || Setup {
        listener: None,
        cluster: Cluster::Static(Arc::new(Inventory::new())),
        ..Setup::default()
    };
    let error = apiserver::run::run_with(settings(None), setup(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "unable to get configmap/extension-apiserver-authentication in kube-system"
        ),
        "{error}"
    );
    assert_eq!(error.exit_code(), 1);

    // A client CA file that is not a certificate is a configuration error.
    std::fs::write(dir.path().join("bad.crt"), "not pem").unwrap();
    let bad = dir.path().join("bad.crt");
    let error = apiserver::run::run_with(settings(Some(bad)), setup(), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(error.exit_code(), 64, "{error}");

    // Tolerated: it serves, and with no trust at all every spoofed header is anonymous.
    let server = launch(
        |s| {
            s.kubeconfig = Some(kubeconfig.clone());
            s.authn.tolerate_lookup_failure = true;
        },
        Vec::new(),
        None,
        Auth::FromSettings,
    )
    .await;
    let r = with_cert(&Ca::new("any").unwrap(), "front-proxy-client", &[])
        .get_with(server.addr, "/metrics", SPOOF)
        .await;
    assert_needs_review(&r, "/metrics");
    server.shutdown.cancel();
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_binary_writes_nothing_but_the_cert_dir() {
    // The working directory, HOME and TMPDIR are empty directories of their own; the kubeconfig
    // sits alone in another. After serving, only --cert-dir has gained files.
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let kubeconfig = config.path().join("kubeconfig");
    write_unreachable_kubeconfig(&kubeconfig);
    let mut child = Command::new(env!("CARGO_BIN_EXE_metrics-server"))
        .current_dir(cwd.path())
        .env("HOME", home.path())
        .env("TMPDIR", tmp.path())
        .env_remove("RUST_LOG")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cert-dir={}", certs.path().display()))
        .args([
            "--secure-port=0",
            "--bind-address=127.0.0.1",
            "--authentication-tolerate-lookup-failure",
            "--metric-resolution=15s",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = serving(&mut child);
    // Let it run a little: the scrape loop, the watches and their retries.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "the server did not start");
    assert_eq!(files_under(cwd.path()), Vec::<String>::new());
    assert_eq!(files_under(home.path()), Vec::<String>::new());
    assert_eq!(files_under(tmp.path()), Vec::<String>::new());
    assert_eq!(files_under(config.path()), ["kubeconfig"]);
    assert_eq!(
        files_under(certs.path()),
        ["apiserver.crt", "apiserver.key"]
    );
}
