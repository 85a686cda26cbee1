//! The audit log over real HTTPS, with delegated authentication from the settings (a
//! front-proxy CA and a client CA, no Kubernetes API reachable): the events a policy records,
//! as kube-apiserver's log backend writes them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver::audit::{Config, Destination, Format, Log, Mode, webhook};
use apiserver::config::Settings;
use apiserver::run::Auth;
use http::StatusCode;
use serde_json::Value;
use tls::issue::{Ca, LeafSpec};

use crate::support::{
    Client, Running, eventually, launch, with_cert, write_unreachable_kubeconfig,
};

/// Health is not recorded; everything else at Metadata.
const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    nonResourceURLs: ["/livez", "/healthz*"]
  - level: Metadata
"#;

struct Cluster {
    front_proxy: Ca,
    client: Ca,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Self {
        let cluster = Cluster {
            front_proxy: Ca::new("front-proxy-ca").unwrap(),
            client: Ca::new("kubernetes").unwrap(),
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            cluster.path("front-proxy-ca.crt"),
            cluster.front_proxy.cert_pem(),
        )
        .unwrap();
        std::fs::write(cluster.path("client-ca.crt"), cluster.client.cert_pem()).unwrap();
        std::fs::write(cluster.path("policy.yaml"), POLICY).unwrap();
        write_unreachable_kubeconfig(&cluster.path("kubeconfig"));
        cluster
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server, auditing to `logs/audit.log` in `format` and `mode`, and to `webhook`.
    async fn start(&self, format: Format, mode: Mode, webhook: Option<webhook::Config>) -> Running {
        let file = Destination::File(self.path("logs/audit.log"), unrotated());
        self.start_to(file, format, mode, webhook).await
    }

    /// The same with the log written to `destination`.
    async fn start_to(
        &self,
        destination: Destination,
        format: Format,
        mode: Mode,
        webhook: Option<webhook::Config>,
    ) -> Running {
        let settings = |s: &mut Settings| {
            s.kubeconfig = Some(self.path("kubeconfig"));
            s.authn.requestheader_client_ca_file = Some(self.path("front-proxy-ca.crt"));
            s.authn.requestheader_allowed_names = vec!["front-proxy-client".to_owned()];
            s.authn.client_ca_file = Some(self.path("client-ca.crt"));
            s.audit = Some(Config {
                policy_file: self.path("policy.yaml"),
                log: Some(Log {
                    destination: destination.clone(),
                    format,
                    mode,
                }),
                webhook: webhook.clone(),
            });
        };
        launch(settings, Vec::new(), None, Auth::FromSettings).await
    }

    /// The log's lines once there are `count` of them.
    async fn lines(&self, count: usize) -> Vec<String> {
        let path = self.path("logs/audit.log");
        eventually(Duration::from_secs(10), || {
            let path = path.clone();
            async move {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<String> = text.lines().map(str::to_owned).collect();
                (lines.len() >= count).then_some(lines)
            }
        })
        .await
        .unwrap_or_else(|| panic!("{count} audit lines in {}", path.display()))
    }
}

/// A log file that is never rotated in these tests.
fn unrotated() -> apiserver::audit::logfile::Rotation {
    apiserver::audit::logfile::Rotation {
        max_bytes: 100 << 20,
        max_backups: 0,
        max_age: None,
        compress: false,
    }
}

fn events(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A request through the front proxy (the aggregator's shape), one by a client certificate
/// whose review cannot be made, and one with a bearer token that cannot be reviewed: their
/// events, in order, with what an operator reads in them. Health is not recorded.
#[tokio::test]
async fn each_request_s_events_as_kube_apiserver_s_log_backend_writes_them() {
    let cluster = Cluster::new();
    let server = cluster.start(Format::Json, Mode::Blocking, None).await;
    assert_eq!(mode_of(&cluster.path("logs/audit.log")), 0o600);

    let r = Client::insecure().get(server.addr, "/livez").await;
    assert_eq!(r.status, StatusCode::OK);

    // An administrator through kube-apiserver's front proxy.
    let proxy = with_cert(&cluster.front_proxy, "front-proxy-client", &[]);
    let path = "/apis/metrics.k8s.io/v1beta1/nodes/node-1";
    let r = proxy
        .get_with(
            server.addr,
            path,
            &[
                ("x-remote-user", "admin"),
                ("x-remote-group", "system:masters"),
                ("x-forwarded-for", "192.0.2.10"),
                (
                    "user-agent",
                    "kubectl/v1.37.1 (linux/amd64) kubernetes/0000000",
                ),
                ("audit-id", "3f4bd8d6-94c5-4b3c-8c9f-0b4f2c6c1e01"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let lines = cluster.lines(2).await;
    let [received, complete] = &events(&lines)[..] else {
        panic!("{lines:?}")
    };
    for (event, stage) in [
        (received, "RequestReceived"),
        (complete, "ResponseComplete"),
    ] {
        assert_eq!(event["kind"], "Event");
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["level"], "Metadata");
        assert_eq!(event["stage"], stage);
        assert_eq!(event["auditID"], "3f4bd8d6-94c5-4b3c-8c9f-0b4f2c6c1e01");
        assert_eq!(event["requestURI"], path);
        assert_eq!(event["verb"], "get");
        assert_eq!(event["user"]["username"], "admin");
        assert!(
            event["user"]["groups"]
                .as_array()
                .unwrap()
                .contains(&"system:masters".into()),
            "{event}"
        );
        assert_eq!(
            event["sourceIPs"],
            serde_json::json!(["192.0.2.10", "127.0.0.1"])
        );
        assert_eq!(
            event["userAgent"],
            "kubectl/v1.37.1 (linux/amd64) kubernetes/0000000"
        );
        assert_eq!(
            event["objectRef"],
            serde_json::json!({"resource": "nodes", "name": "node-1", "apiGroup": "metrics.k8s.io", "apiVersion": "v1beta1"})
        );
        assert_eq!(
            event["requestReceivedTimestamp"],
            received["requestReceivedTimestamp"]
        );
    }
    assert!(received.get("responseStatus").is_none());
    assert_eq!(
        complete["responseStatus"],
        serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": "node \"node-1\" not found",
            "reason": "NotFound",
            "details": {"name": "node-1", "kind": "node"},
            "code": 404
        })
    );
    assert_eq!(
        complete["annotations"],
        serde_json::json!({"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""})
    );
    let micro = |v: &Value| v.as_str().unwrap().len();
    assert_eq!(
        micro(&complete["stageTimestamp"]),
        "2026-12-06T13:00:00.123456Z".len()
    );

    // A user whose review cannot be made: the 500 and the authorizer's failure; the answer's
    // Audit-Id is the events' (a new one: the request had none).
    let jane = with_cert(&cluster.client, "jane", &["devs"]);
    let r = jane
        .get(
            server.addr,
            "/apis/metrics.k8s.io/v1/namespaces/default/pods",
        )
        .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.body);
    let lines = cluster.lines(4).await;
    let events = events(&lines);
    let id = r.headers["audit-id"].to_str().unwrap();
    for event in &events[2..] {
        assert_eq!(event["auditID"], id);
        assert_eq!(event["verb"], "list");
        assert_eq!(event["user"]["username"], "jane");
        assert_eq!(event["objectRef"]["namespace"], "default");
    }
    assert_eq!(events[3]["responseStatus"]["code"], 500);
    assert_eq!(events[3]["responseStatus"]["reason"], "InternalError");
    assert_eq!(
        events[3]["annotations"],
        serde_json::json!({"authorization.k8s.io/reason": "internal error"})
    );

    // A token that cannot be reviewed: one ResponseStarted event, no user, the 401.
    let r = Client::insecure()
        .get_with(
            server.addr,
            "/apis/metrics.k8s.io/v1beta1/pods",
            &[("authorization", "Bearer forged")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let lines = cluster.lines(5).await;
    let failed: Value = serde_json::from_str(&lines[4]).unwrap();
    assert_eq!(failed["stage"], "ResponseStarted");
    assert_eq!(failed["user"], serde_json::json!({}));
    assert_eq!(failed["verb"], "list");
    assert_eq!(
        failed["responseStatus"],
        serde_json::json!({"metadata": {}, "message": "Authentication failed, attempted: bearer", "code": 401})
    );
    assert_eq!(failed["auditID"], r.headers["audit-id"].to_str().unwrap());

    // Health was never recorded.
    assert!(lines.iter().all(|l| !l.contains("\"/livez\"")), "{lines:?}");
    // The policy's decisions and the events, counted (the scrape's own RequestReceived too).
    let metrics = proxy
        .get_with(
            server.addr,
            "/metrics",
            &[
                ("x-remote-user", "admin"),
                ("x-remote-group", "system:masters"),
            ],
        )
        .await;
    for line in [
        "apiserver_audit_event_total 6\n",
        "apiserver_audit_level_total{level=\"None\"} 1\n",
        "apiserver_audit_level_total{level=\"Metadata\"} 4\n",
        "apiserver_audit_requests_rejected_total 0\n",
    ] {
        assert!(metrics.body.contains(line), "{line}{}", metrics.body);
    }
    server.shutdown.cancel();
}

/// The legacy format, written by the batch mode's writer thread.
#[tokio::test]
async fn batch_mode_writes_legacy_lines_from_its_own_thread() {
    let cluster = Cluster::new();
    let server = cluster
        .start(Format::Legacy, Mode::Batch { buffer: 100 }, None)
        .await;
    let proxy = with_cert(&cluster.front_proxy, "front-proxy-client", &[]);
    let r = proxy
        .get_with(
            server.addr,
            "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods",
            &[
                (
                    "x-remote-user",
                    "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
                ),
                ("x-remote-group", "system:masters"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let lines = cluster.lines(2).await;
    let id = r.headers["audit-id"].to_str().unwrap();
    for (line, stage, response) in [
        (&lines[0], "RequestReceived", "<deferred>"),
        (&lines[1], "ResponseComplete", "200"),
    ] {
        assert!(
            line.contains(&format!(
                " AUDIT: id=\"{id}\" stage=\"{stage}\" ip=\"127.0.0.1\" method=\"list\" user=\"system:serviceaccount:kube-system:horizontal-pod-autoscaler\" groups=\"\\\"system:masters\\\"",
            )) && line.contains(" as=\"<self>\" asgroups=\"<lookup>\" ")
                && line.contains(" namespace=\"kube-system\" uri=\"/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods\" ")
                && line.ends_with(&format!("response=\"{response}\"")),
            "{line}"
        );
    }
    server.shutdown.cancel();
}

/// A local HTTPS audit webhook (as Falco's `k8s-audit` endpoint receives kube-apiserver's
/// events): every request's path and JSON body.
async fn webhook_receiver(
    dir: &Path,
) -> (
    PathBuf,
    tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let ca = Ca::new("webhook-ca").unwrap();
    let serving = ca
        .issue(&LeafSpec {
            common_name: "webhook".into(),
            sans: vec!["127.0.0.1".into()],
            server: true,
            ..LeafSpec::default()
        })
        .unwrap();
    let key = tls::server::certified_key(&serving.identity).unwrap();
    let resolver = std::sync::Arc::new(rustls::sign::SingleCertAndKey::from(key));
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(
        tls::server::config(resolver, false).unwrap(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sender, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, sender) = (acceptor.clone(), sender.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let sender = sender.clone();
                    async move {
                        let path = request.uri().path().to_owned();
                        let body = http_body_util::BodyExt::collect(request.into_body())
                            .await
                            .unwrap()
                            .to_bytes();
                        let _ = sender.send((path, serde_json::from_slice(&body).unwrap()));
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from_static(b"{}")),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let kubeconfig = dir.join("webhook.kubeconfig");
    let ca_data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca.cert_pem());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: falco\n  cluster:\n    server: https://127.0.0.1:{port}/k8s-audit\n    certificate-authority-data: {ca_data}\ncontexts:\n- name: default\n  context:\n    cluster: falco\n    user: metrics-server\ncurrent-context: default\nusers:\n- name: metrics-server\n  user: {{}}\n"
        ),
    )
    .unwrap();
    (kubeconfig, received)
}

/// With both backends, a request's events go to the log and, batched as an `EventList`, to
/// the webhook's URL.
#[tokio::test]
async fn the_webhook_receives_the_events_the_log_gets() {
    let cluster = Cluster::new();
    let (kubeconfig, mut received) = webhook_receiver(cluster.dir.path()).await;
    let server = cluster
        .start(
            Format::Json,
            Mode::Blocking,
            Some(webhook::Config {
                kubeconfig,
                mode: Mode::Batch { buffer: 100 },
                max_batch_size: 2,
                max_batch_wait: Duration::from_secs(30),
                throttle: None,
                initial_backoff: Duration::from_millis(100),
            }),
        )
        .await;
    let proxy = with_cert(&cluster.front_proxy, "front-proxy-client", &[]);
    let r = proxy
        .get_with(
            server.addr,
            "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods",
            &[
                ("x-remote-user", "admin"),
                ("x-remote-group", "system:masters"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (path, list) = tokio::time::timeout(Duration::from_secs(10), received.recv())
        .await
        .expect("a batch in time")
        .unwrap();
    assert_eq!(path, "/k8s-audit");
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
    let logged = events(&cluster.lines(2).await);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (item, logged) in items.iter().zip(&logged) {
        // As Go encodes an EventList: the type only on the list.
        assert!(item.get("kind").is_none() && item.get("apiVersion").is_none());
        assert_eq!(item["stage"], logged["stage"]);
        assert_eq!(item["auditID"], r.headers["audit-id"].to_str().unwrap());
        assert_eq!(item["stageTimestamp"], logged["stageTimestamp"]);
    }
    server.shutdown.cancel();
}

/// A log that cannot be written (a full disk: `/dev/full` fails every write with ENOSPC).
/// `blocking` serves on and counts each lost event; `blocking-strict` refuses the request with
/// k8s.io/apiserver's 500 and counts the refusal.
#[tokio::test]
async fn an_unwritable_log_is_counted_and_strict_mode_refuses_the_request() {
    let full = Destination::File(PathBuf::from("/dev/full"), unrotated());
    let path = "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods";
    let admin = [
        ("x-remote-user", "admin"),
        ("x-remote-group", "system:masters"),
    ];
    // blocking: served; each event lost is counted (the request's two, and the scrape's own
    // RequestReceived before its answer is written).
    let cluster = Cluster::new();
    let server = cluster
        .start_to(full.clone(), Format::Json, Mode::Blocking, None)
        .await;
    let proxy = with_cert(&cluster.front_proxy, "front-proxy-client", &[]);
    let r = proxy.get_with(server.addr, path, &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let metrics = proxy.get_with(server.addr, "/metrics", &admin).await;
    for line in [
        "apiserver_audit_error_total{plugin=\"log\"} 3\n",
        "apiserver_audit_requests_rejected_total 0\n",
    ] {
        assert!(metrics.body.contains(line), "{line}{}", metrics.body);
    }
    server.shutdown.cancel();

    // blocking-strict: every request is refused at its RequestReceived, `/metrics` too.
    let cluster = Cluster::new();
    let server = cluster
        .start_to(full, Format::Json, Mode::BlockingStrict, None)
        .await;
    let proxy = with_cert(&cluster.front_proxy, "front-proxy-client", &[]);
    let r = proxy.get_with(server.addr, path, &admin).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.headers[http::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_eq!(
        r.body,
        format!("Internal Server Error: \"{path}\": failed to store audit event\n")
    );
    let metrics = proxy.get_with(server.addr, "/metrics", &admin).await;
    assert_eq!(metrics.status, StatusCode::INTERNAL_SERVER_ERROR);
    server.shutdown.cancel();
}
