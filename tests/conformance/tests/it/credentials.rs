//! Kubelet credentials that rotate under a running scrape loop: the bearer token, the client
//! certificate and the kubelet CA are files rewritten the ways a node rewrites them (in
//! place, a new file renamed over, a projected volume's `..data` symlink swap), and the
//! simulated kubelets accept only the current credential. Every scrape across each rotation
//! succeeds (`metrics_server_kubelet_request_total{success="false"}` stays 0), a broken new
//! file keeps the last good credential, and a CA taken out of the bundle stops being trusted
//! on kept-alive connections.
//!
//! The loop tests build the client and its reloaders from the flags exactly as `run` does
//! ([`apiserver::credentials::kubelet`]) and run the scrape loop at a 600 ms resolution; the
//! last test runs the whole server against the simulated control plane with an in-cluster
//! style token file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apiserver::credentials::{Counts, Reloads};
use bytes::Bytes;
use conformance::kubelet::{Content, Options, SimKubelet, SimNode};
use http_body_util::{BodyExt, Empty};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use scraper::inventory::NodeRecord;
use scraper::kubelet::Source;
use scraper::kubelet::client::{Client, Error};
use scraper::metrics::Metrics;
use scraper::scrape::{self, NodeSource, Progress};
use scraper::selector::LabelSelector;
use scraper::store::Store;
use tls::issue::{Ca, Issued, LeafSpec};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the reloaders look in these tests.
const RELOAD_INTERVAL: Duration = Duration::from_millis(50);

fn wall_ms() -> i64 {
    conformance::cluster::wall_ms()
}

/// A live workload refreshed every 300 ms, so the loop's warm-up settles at once.
fn live(node: &str) -> Content {
    Content::Live {
        node: SimNode {
            housekeeping: Duration::from_millis(300),
            ..SimNode::generate(node, 2, 2, wall_ms() - 3_600_000)
        },
        clock: Arc::new(wall_ms),
    }
}

/// Two kubelets with serving certificates from `ca`.
async fn kubelets(ca: &Ca, f: impl Fn(Options) -> Options) -> Vec<SimKubelet> {
    let mut kubelets = Vec::new();
    for name in ["node-a", "node-b"] {
        let options = f(Options {
            content: live(name),
            ..Options::new(name)
        });
        kubelets.push(SimKubelet::start(ca, options).await.unwrap());
    }
    kubelets
}

fn client_cert(ca: &Ca) -> Issued {
    ca.issue(&LeafSpec {
        common_name: "system:serviceaccount:kube-system:metrics-server".into(),
        client: true,
        ..LeafSpec::default()
    })
    .unwrap()
}

/// A projected volume as the kubelet writes one: each version in its own timestamped
/// directory, `..data` linking to the current one, and each file a link through `..data`;
/// an update writes a new version and renames a new `..data` link over the old one, so
/// every file of the volume changes at once.
struct Projected {
    dir: PathBuf,
    version: u32,
}

impl Projected {
    fn new(dir: PathBuf, files: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let mut projected = Projected { dir, version: 0 };
        projected.update(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(Path::new("..data").join(name), projected.path(name))
                .unwrap();
        }
        projected
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn update(&mut self, files: &[(&str, &str)]) {
        self.version += 1;
        let version = format!("..2025_06_01_12_00_00.{}", self.version);
        std::fs::create_dir(self.dir.join(&version)).unwrap();
        for (name, content) in files {
            std::fs::write(self.dir.join(&version).join(name), content).unwrap();
        }
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

/// Replaces `path` as an editor or a config tool does: a new file renamed over it.
fn rename_over(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

struct Nodes(Vec<Arc<NodeRecord>>);

impl NodeSource for Nodes {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.0.clone()
    }
}

/// The scrape loop with the kubelet client and reloaders `run` builds from these settings.
struct Loop {
    metrics: Arc<Metrics>,
    registry: Registry,
    reloads: Reloads,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Loop {
    fn start(
        flags: &apiserver::credentials::kubelet::Config,
        kube: Option<&kube::Config>,
        kubelets: &[SimKubelet],
    ) -> Self {
        tls::provider::install_default();
        let transport = scraper::kubelet::client::Config {
            timeout: Duration::from_millis(500),
            ..scraper::kubelet::client::Config::default()
        };
        let settings = apiserver::credentials::kubelet::settings(flags, transport, kube).unwrap();
        let resolution = Duration::from_millis(600);
        let client = Client::new(settings.config).unwrap();
        let reloads = Reloads::default();
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        for reloader in settings.files.reloaders(&client, &reloads) {
            tasks.push(tokio::spawn(
                reloader.run(RELOAD_INTERVAL, shutdown.clone()),
            ));
        }
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry, resolution));
        let config = scrape::Config {
            resolution,
            request_timeout: Duration::from_millis(500),
            max_in_flight: 4,
            slot_hold: scrape::DEFAULT_SLOT_HOLD,
            source: Source::Resource,
            summary_warmup: false,
            address_types: vec!["InternalIP".into()],
            kubelet_port: 1,
            use_node_status_port: true,
            node_selector: LabelSelector::default(),
            threads: Vec::new(),
        };
        let nodes = Arc::new(Nodes(
            kubelets.iter().map(|k| Arc::new(k.node_record())).collect(),
        ));
        tasks.push(tokio::spawn(scrape::run(
            config,
            nodes,
            Arc::new(Store::new(scraper::store::Config::new(resolution))),
            client,
            metrics.clone(),
            Arc::new(Progress::default()),
            shutdown.clone(),
        )));
        Loop {
            metrics,
            registry,
            reloads,
            shutdown,
            tasks: Mutex::new(tasks),
        }
    }

    /// Waits until a reloader applied new content.
    async fn applied(&self, before: Counts) {
        let within = tokio::time::timeout(
            Duration::from_secs(5),
            self.reloads.wait_for(|c| c.applied > before.applied),
        );
        within.await.expect("the new credential is applied");
    }

    /// Waits until a reloader refused new content.
    async fn rejected(&self, before: Counts) {
        let within = tokio::time::timeout(
            Duration::from_secs(5),
            self.reloads.wait_for(|c| c.rejected > before.rejected),
        );
        within.await.expect("the broken credential is refused");
    }

    /// Waits until every kubelet has answered a request since `marks` (see [`marks`]) and
    /// the loop has counted every request the kubelets saw, then asserts that none failed.
    async fn all_scrapes_succeed_after(&self, kubelets: &[SimKubelet], marks: &[u64]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen: u64 = kubelets.iter().map(SimKubelet::requests).sum();
            let counted = self.metrics.requests(true) + self.metrics.requests(false);
            let fresh = kubelets.iter().zip(marks).all(|(k, m)| k.requests() > *m);
            if fresh && counted >= seen {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kubelets saw {seen} requests, the loop counted {counted}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            self.metrics.requests(false),
            0,
            "failures by reason: {}",
            self.exposition()
        );
        let text = self.exposition();
        assert!(
            !text.contains("metrics_server_kubelet_request_total{success=\"false\"}"),
            "{text}"
        );
        assert!(
            text.contains("metrics_server_kubelet_request_total{success=\"true\"}"),
            "{text}"
        );
    }

    fn exposition(&self) -> String {
        self.metrics.exposition(&self.registry)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for task in tasks {
            task.await.unwrap();
        }
    }
}

/// Each kubelet's request count now.
fn marks(kubelets: &[SimKubelet]) -> Vec<u64> {
    kubelets.iter().map(SimKubelet::requests).collect()
}

/// `--kubelet-certificate-authority=path`.
fn ca_file_flag(path: &Path) -> apiserver::credentials::kubelet::Config {
    apiserver::credentials::kubelet::Config {
        ca_file: Some(path.to_path_buf()),
        ..apiserver::credentials::kubelet::Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_is_sent_from_the_next_scrape_and_none_fails() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubelet-ca").unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
    let kubelets = kubelets(&ca, |o| Options {
        bearer_token: Some("token-1".into()),
        ..o
    })
    .await;
    let mut volume = Projected::new(dir.path().join("serviceaccount"), &[("token", "token-1")]);
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.auth_info.token_file = Some(volume.path("token").display().to_string());
    let l = Loop::start(
        &ca_file_flag(&dir.path().join("ca.crt")),
        Some(&kube),
        &kubelets,
    );
    l.all_scrapes_succeed_after(&kubelets, &[0, 0]).await;

    // The projected token is swapped (`..data`); the kubelets accept both while it is,
    // as the old token stays valid until it expires, then only the new one.
    let accept = |tokens: &[&str]| kubelets.iter().for_each(|k| k.set_bearer_tokens(tokens));
    accept(&["token-1", "token-2"]);
    let before = l.reloads.counts();
    volume.update(&[("token", "token-2\n")]);
    l.applied(before).await;
    accept(&["token-2"]);
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;

    // Rewritten in place (truncated, then written: a poll may see it empty in between).
    accept(&["token-2", "token-3"]);
    let before = l.reloads.counts();
    std::fs::write(volume.path("token"), "token-3").unwrap();
    l.applied(before).await;
    accept(&["token-3"]);
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;

    // An empty token: refused and logged; the last good one is still sent.
    let before = l.reloads.counts();
    volume.update(&[("token", "\n")]);
    l.rejected(before).await;
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;
    for k in &kubelets {
        let last = k.seen().last().cloned().unwrap();
        assert_eq!(last.authorization(), Some("Bearer token-3"));
    }
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_is_presented_on_new_connections_and_none_fails() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubelet-ca").unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
    let (client_ca_1, client_ca_2) = (
        Ca::new("kubelet-client-ca-1").unwrap(),
        Ca::new("kubelet-client-ca-2").unwrap(),
    );
    // The kubelets trust client certificates from these CAs only, checked per request.
    let kubelets = kubelets(&ca, |o| Options {
        client_cas: vec![client_ca_1.cert().clone()],
        ..o
    })
    .await;
    let one = client_cert(&client_ca_1);
    let mut volume = Projected::new(
        dir.path().join("client"),
        &[("tls.crt", &one.cert_pem), ("tls.key", &one.key_pem)],
    );
    let flags = apiserver::credentials::kubelet::Config {
        client_cert: Some((volume.path("tls.crt"), volume.path("tls.key"))),
        ..ca_file_flag(&dir.path().join("ca.crt"))
    };
    let l = Loop::start(&flags, None, &kubelets);
    l.all_scrapes_succeed_after(&kubelets, &[0, 0]).await;
    let connections: Vec<u64> = kubelets.iter().map(SimKubelet::connections).collect();

    // Re-issued by another CA: once it is in use, the old CA is no longer accepted, so a
    // kept-alive connection still presenting the old certificate would fail.
    for k in &kubelets {
        k.set_client_cas(&[&client_ca_1, &client_ca_2]).unwrap();
    }
    let two = client_cert(&client_ca_2);
    let before = l.reloads.counts();
    volume.update(&[("tls.crt", &two.cert_pem), ("tls.key", &two.key_pem)]);
    l.applied(before).await;
    for k in &kubelets {
        k.set_client_cas(&[&client_ca_2]).unwrap();
    }
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;
    for (k, before) in kubelets.iter().zip(connections) {
        assert!(
            k.connections() > before,
            "a new handshake for the new identity"
        );
    }

    // A key that does not match the certificate, then a certificate that is not PEM:
    // refused; the last good pair stays in use.
    let three = client_cert(&client_ca_2);
    let before = l.reloads.counts();
    volume.update(&[("tls.crt", &three.cert_pem), ("tls.key", &two.key_pem)]);
    l.rejected(before).await;
    let before = l.reloads.counts();
    volume.update(&[("tls.crt", "garbage"), ("tls.key", &three.key_pem)]);
    l.rejected(before).await;
    for k in &kubelets {
        k.close_connections();
    }
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;
    l.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_kubelet_ca_verifies_reissued_serving_certificates_and_none_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_1, ca_2) = (
        Ca::new("kubelet-ca-1").unwrap(),
        Ca::new("kubelet-ca-2").unwrap(),
    );
    let ca_file = dir.path().join("kubelet-ca.crt");
    std::fs::write(&ca_file, ca_1.cert_pem()).unwrap();
    let kubelets = kubelets(&ca_1, |o| o).await;
    let l = Loop::start(&ca_file_flag(&ca_file), None, &kubelets);
    l.all_scrapes_succeed_after(&kubelets, &[0, 0]).await;

    // The bundle gains the new CA, then the kubelets restart with certificates from it.
    let before = l.reloads.counts();
    rename_over(&ca_file, &format!("{}{}", ca_1.cert_pem(), ca_2.cert_pem()));
    l.applied(before).await;
    for k in &kubelets {
        k.reissue_serving_cert(&ca_2).unwrap();
        k.close_connections();
    }
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;

    // The old CA leaves the bundle.
    let before = l.reloads.counts();
    rename_over(&ca_file, ca_2.cert_pem());
    l.applied(before).await;
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;

    // A broken bundle is refused; new handshakes still verify against the last good one.
    let before = l.reloads.counts();
    rename_over(&ca_file, "-----BEGIN CERTIFICATE-----\nbroken\n");
    l.rejected(before).await;
    for k in &kubelets {
        k.close_connections();
    }
    l.all_scrapes_succeed_after(&kubelets, &marks(&kubelets))
        .await;
    l.stop().await;
}

// ---------------------------------------------------------------------------------------
// The client alone: what happens to kept-alive connections
// ---------------------------------------------------------------------------------------

async fn one_kubelet(ca: &Ca, f: impl Fn(Options) -> Options) -> SimKubelet {
    SimKubelet::start(ca, f(Options::new("n1"))).await.unwrap()
}

fn client_for(ca: &Ca) -> Client {
    Client::new(scraper::kubelet::client::Config {
        verify: tls::client::Verify::Roots(vec![ca.cert().clone()]),
        timeout: Duration::from_secs(5),
        ..scraper::kubelet::client::Config::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_new_token_goes_out_on_the_kept_alive_connection() {
    let ca = Ca::new("kubelet-ca").unwrap();
    let k = one_kubelet(&ca, |o| Options {
        bearer_token: Some("one".into()),
        ..o
    })
    .await;
    let c = client_for(&ca);
    c.set_bearer_token(Some("one")).unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
    k.set_bearer_tokens(&["two"]);
    c.set_bearer_token(Some("two")).unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.connections(), 1, "no new handshake for a token");
    // A token that is not a header value is refused; the last good one stays.
    assert!(matches!(
        c.set_bearer_token(Some("bad\ntoken")),
        Err(Error::InvalidToken)
    ));
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.seen()[2].authorization(), Some("Bearer two"));
}

#[tokio::test]
async fn a_ca_taken_out_of_the_bundle_is_distrusted_at_once_even_on_a_kept_alive_connection() {
    let (ca_1, ca_2) = (Ca::new("ca-1").unwrap(), Ca::new("ca-2").unwrap());
    let k = one_kubelet(&ca_1, |o| o).await;
    let c = client_for(&ca_1);
    c.get(&k.url("/metrics/resource")).await.unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.connections(), 1);
    // The kept-alive connection was verified against ca-1; once ca-1 is out, the pool is
    // replaced, so the next request makes a new handshake and refuses the kubelet.
    c.set_verify(tls::client::Verify::Roots(vec![ca_2.cert().clone()]))
        .unwrap();
    let err = c.get(&k.url("/metrics/resource")).await.unwrap_err();
    assert_eq!(err.reason(), "tls_unknown_authority", "{err}");
    assert_eq!(k.connections(), 2);
    k.reissue_serving_cert(&ca_2).unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
}

#[tokio::test]
async fn a_new_identity_is_presented_on_a_new_connection_and_a_bad_one_is_refused() {
    let ca = Ca::new("kubelet-ca").unwrap();
    let (client_ca_1, client_ca_2) = (Ca::new("cca-1").unwrap(), Ca::new("cca-2").unwrap());
    let k = one_kubelet(&ca, |o| Options {
        client_cas: vec![client_ca_1.cert().clone()],
        ..o
    })
    .await;
    let c = client_for(&ca);
    c.set_identity(Some(client_cert(&client_ca_1).identity))
        .unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
    k.set_client_cas(&[&client_ca_2]).unwrap();
    let err = c.get(&k.url("/metrics/resource")).await.unwrap_err();
    assert_eq!(
        err.reason(),
        "status",
        "the old certificate is refused: {err}"
    );
    c.set_identity(Some(client_cert(&client_ca_2).identity))
        .unwrap();
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.connections(), 2, "the new identity on a new connection");
    // A key from another certificate: refused, the last good identity stays.
    let mut mismatched = client_cert(&client_ca_2).identity;
    mismatched.key = client_cert(&client_ca_2).identity.key;
    assert!(matches!(
        c.set_identity(Some(mismatched)),
        Err(Error::Build(_))
    ));
    c.get(&k.url("/metrics/resource")).await.unwrap();
    assert_eq!(k.connections(), 2);
}

// ---------------------------------------------------------------------------------------
// The whole server: an in-cluster style token file under the real wiring
// ---------------------------------------------------------------------------------------

/// A GET on the server's `/metrics` (authentication is off in this test).
async fn server_metrics(addr: std::net::SocketAddr) -> Option<String> {
    let client =
        conformance::https::client::<Empty<Bytes>>(&tls::client::Verify::Insecure, None).unwrap();
    let uri: http::Uri = format!("https://{addr}/metrics").parse().unwrap();
    let response = client.get(uri).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// `metrics_server_kubelet_request_total{success="<success>"}` in an exposition.
fn requests(text: &str, success: bool) -> u64 {
    let prefix = format!("metrics_server_kubelet_request_total{{success=\"{success}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sends_a_rotated_service_account_token_with_no_failed_scrape() {
    use conformance::controlplane::{self, ControlPlane, User};
    tls::provider::install_default();
    let stop = CancellationToken::new();
    let objects = conformance::objects::Objects::new();
    let cp = ControlPlane::start(
        controlplane::Config {
            core: Arc::new(objects.clone()),
            ..controlplane::Config::default()
        },
        stop.clone(),
    )
    .await
    .unwrap();
    let user = || {
        User::new(
            conformance::cluster::SERVER_USER,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
            ],
        )
    };
    cp.add_token("sa-token-1", user());
    cp.add_token("sa-token-2", user());

    let dir = tempfile::tempdir().unwrap();
    let kubelet_ca = Ca::new("kubelet-ca").unwrap();
    let ca_file = dir.path().join("kubelet-ca.crt");
    std::fs::write(&ca_file, kubelet_ca.cert_pem()).unwrap();
    let kubelets = kubelets(&kubelet_ca, |o| Options {
        bearer_token: Some("sa-token-1".into()),
        ..o
    })
    .await;
    for k in &kubelets {
        objects.add_node(
            k.node_name(),
            &[],
            &[("InternalIP", "127.0.0.1")],
            k.addr().port(),
        );
    }
    let mut volume = Projected::new(
        dir.path().join("serviceaccount"),
        &[("token", "sa-token-1")],
    );
    let kubeconfig = dir.path().join("kubeconfig");
    use base64::Engine as _;
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: sa\n  user:\n    tokenFile: {token}\n\
             contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sa\ncurrent-context: sim\n",
            url = cp.url(),
            ca = base64::engine::general_purpose::STANDARD.encode(cp.cluster_ca().cert_pem()),
            token = volume.path("token").display(),
        ),
    )
    .unwrap();
    let mut settings = apiserver::config::Settings::for_resolution(Duration::from_secs(10));
    settings.kubeconfig = Some(kubeconfig.clone());
    settings.listen.cert = apiserver::config::ServingCert::self_signed_in(dir.path().join("certs"));
    settings.scrape.request_timeout = Duration::from_secs(5);
    settings.kubelet_client.timeout = Duration::from_secs(5);
    settings.scrape.use_node_status_port = true;
    settings.scrape.address_types = vec!["InternalIP".to_owned()];
    settings.kubelet = ca_file_flag(&ca_file);
    // Every kubelet request below is a scrape the server counts (the warm-up's summary
    // would be one more request per node than scrapes).
    settings.scrape.summary_warmup = false;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reloads = Reloads::default();
    let setup = apiserver::run::Setup {
        listener: Some(listener),
        auth: apiserver::run::Auth::DisabledForTesting,
        cert_reload_interval: RELOAD_INTERVAL,
        reloads: reloads.clone(),
        ..apiserver::run::Setup::default()
    };
    let shutdown = stop.child_token();
    let server = tokio::spawn(apiserver::run::run_with(settings, setup, shutdown.clone()));

    // Every request the kubelets saw is counted by the server, none failed, and each kubelet
    // saw one since `marks`.
    let settled = |marks: Vec<u64>| {
        let kubelets = &kubelets;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let seen: u64 = kubelets.iter().map(SimKubelet::requests).sum();
                let text = server_metrics(addr).await.unwrap_or_default();
                let (ok, failed) = (requests(&text, true), requests(&text, false));
                let fresh = kubelets.iter().zip(&marks).all(|(k, m)| k.requests() > *m);
                if fresh && ok + failed >= seen {
                    assert_eq!(failed, 0, "{text}");
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "seen {seen}, counted {ok}+{failed}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    settled(vec![0, 0]).await;
    kubelets
        .iter()
        .for_each(|k| k.set_bearer_tokens(&["sa-token-1", "sa-token-2"]));
    let before = reloads.counts();
    volume.update(&[("token", "sa-token-2")]);
    tokio::time::timeout(
        Duration::from_secs(5),
        reloads.wait_for(|c| c.applied > before.applied),
    )
    .await
    .expect("the token is reloaded");
    kubelets
        .iter()
        .for_each(|k| k.set_bearer_tokens(&["sa-token-2"]));
    settled(marks(&kubelets)).await;
    for k in &kubelets {
        let last = k.seen().last().cloned().unwrap();
        assert_eq!(last.authorization(), Some("Bearer sa-token-2"));
    }
    shutdown.cancel();
    server.await.unwrap().unwrap();
    stop.cancel();
    cp.stopped().await;
}
