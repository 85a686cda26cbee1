//! Start-up against a control plane whose pod list is slow, as a large cluster's is (150,000
//! pods take seconds to list): the server scrapes the kubelets as soon as the nodes are
//! listed, serves each node's metrics, and keeps `/readyz` failing and cluster-wide pod lists at 429
//! until the pods are listed too; then every pod is served.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use conformance::controlplane::{self, Body, ControlPlane, CoreApi, User};
use conformance::kubelet::{Content, Options, SimKubelet, SimNode};
use conformance::objects::{ContainerSpec, Objects};
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use tls::issue::Ca;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The object server, with every pod LIST (not watch) held until [`HeldPods::release`].
#[derive(Clone)]
struct HeldPods {
    objects: Objects,
    released: watch::Sender<bool>,
    held: Arc<AtomicU64>,
}

impl HeldPods {
    fn new(objects: Objects) -> Self {
        HeldPods {
            objects,
            released: watch::Sender::new(false),
            held: Arc::new(AtomicU64::new(0)),
        }
    }

    fn release(&self) {
        self.released.send_replace(true);
    }

    /// Pod lists that arrived while held.
    fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

fn is_pod_list(req: &Request<Bytes>) -> bool {
    req.uri().path() == "/api/v1/pods"
        && !req
            .uri()
            .query()
            .unwrap_or("")
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
}

impl CoreApi for HeldPods {
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<Body>>> {
        Box::pin(async move {
            if is_pod_list(&req) {
                let mut released = self.released.subscribe();
                if !*released.borrow() {
                    self.held.fetch_add(1, Ordering::AcqRel);
                }
                // The sender lives as long as `self`.
                let _ = released.wait_for(|r| *r).await;
            }
            CoreApi::handle(&self.objects, req).await
        })
    }

    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        CoreApi::upsert_configmap(&self.objects, namespace, name, data);
    }
}

/// A GET to the server; `None` when no answer came.
async fn get(addr: SocketAddr, path: &str) -> Option<(StatusCode, http::HeaderMap, String)> {
    let client =
        conformance::https::client::<Empty<Bytes>>(&tls::client::Verify::Insecure, None).unwrap();
    let uri: http::Uri = format!("https://{addr}{path}").parse().unwrap();
    let response = client.get(uri).await.ok()?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    Some((
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// Polls `check` every 50 ms until it holds, for at most 30 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn item_names(list: &str) -> BTreeSet<String> {
    let list: serde_json::Value = serde_json::from_str(list).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_scraped_while_the_pods_are_listed_and_no_partial_list_is_served() {
    tls::provider::install_default();
    let stop = CancellationToken::new();
    let objects = Objects::new();
    let core = HeldPods::new(objects.clone());
    let cp = ControlPlane::start(
        controlplane::Config {
            core: Arc::new(core.clone()),
            ..controlplane::Config::default()
        },
        stop.clone(),
    )
    .await
    .unwrap();
    cp.add_token(
        "ms-token",
        User::new(
            conformance::cluster::SERVER_USER,
            &["system:serviceaccounts"],
        ),
    );

    let dir = tempfile::tempdir().unwrap();
    let kubelet_ca = Ca::new("kubelet-ca").unwrap();
    let ca_file = dir.path().join("kubelet-ca.crt");
    std::fs::write(&ca_file, kubelet_ca.cert_pem()).unwrap();
    let now_ms = conformance::cluster::wall_ms();
    let mut kubelets = Vec::new();
    let mut pods = BTreeSet::new();
    for name in ["node-a", "node-b"] {
        let node = SimNode {
            housekeeping: Duration::from_millis(300),
            ..SimNode::generate(name, 3, 2, now_ms - 3_600_000)
        };
        for pod in &node.pods {
            let containers: Vec<ContainerSpec> = pod
                .containers
                .iter()
                .map(|c| ContainerSpec::new(&c.name))
                .collect();
            objects.add_pod(&pod.namespace, &pod.name, name, &[], "Running", &containers);
            pods.insert(pod.name.clone());
        }
        let options = Options {
            content: Content::Live {
                node,
                clock: Arc::new(conformance::cluster::wall_ms),
            },
            ..Options::new(name)
        };
        let kubelet = SimKubelet::start(&kubelet_ca, options).await.unwrap();
        objects.add_node(
            name,
            &[],
            &[("InternalIP", "127.0.0.1")],
            kubelet.addr().port(),
        );
        kubelets.push(kubelet);
    }

    let kubeconfig = dir.path().join("kubeconfig");
    cp.kubeconfig_with_token(&kubeconfig, "ms-token").unwrap();
    let mut settings = apiserver::config::Settings::for_resolution(Duration::from_secs(15));
    settings.kubeconfig = Some(kubeconfig);
    settings.listen.cert = apiserver::config::ServingCert::self_signed_in(dir.path().join("certs"));
    settings.scrape.use_node_status_port = true;
    settings.scrape.address_types = vec!["InternalIP".to_owned()];
    settings.kubelet = apiserver::credentials::kubelet::Config {
        ca_file: Some(ca_file),
        ..apiserver::credentials::kubelet::Config::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let setup = apiserver::run::Setup {
        listener: Some(listener),
        auth: apiserver::run::Auth::DisabledForTesting,
        ..apiserver::run::Setup::default()
    };
    let shutdown = stop.child_token();
    let server = tokio::spawn(apiserver::run::run_with(settings, setup, shutdown.clone()));

    // With the pods' list held, every kubelet is asked and each node is served.
    eventually(
        "both kubelets scraped while the pod list is held",
        || async { kubelets.iter().all(|k| k.requests() > 0) },
    )
    .await;
    for node in ["node-a", "node-b"] {
        eventually("each node served", || async {
            get(addr, &format!("/apis/metrics.k8s.io/v1/nodes/{node}"))
                .await
                .is_some_and(|(status, _, _)| status == StatusCode::OK)
        })
        .await;
    }
    assert!(core.held() > 0, "the server asked for the pods");
    // Not ready, and no cluster-wide list (the pods' would lack every pod).
    let (status, _, body) = get(addr, "/readyz?verbose").await.unwrap();
    assert_ne!(status, StatusCode::OK, "{body}");
    let (status, headers, body) = get(addr, "/apis/metrics.k8s.io/v1/pods").await.unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        headers.contains_key(http::header::RETRY_AFTER),
        "{headers:?}"
    );

    // The pods arrive: ready, and every pod listed with its usage.
    core.release();
    eventually("/readyz to pass", || async {
        get(addr, "/readyz")
            .await
            .is_some_and(|(status, _, _)| status == StatusCode::OK)
    })
    .await;
    let (status, _, body) = get(addr, "/apis/metrics.k8s.io/v1/pods").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(item_names(&body), pods);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    for item in list["items"].as_array().unwrap() {
        assert_eq!(item["containers"].as_array().unwrap().len(), 2, "{item}");
    }

    shutdown.cancel();
    server.await.unwrap().unwrap();
    stop.cancel();
    cp.stopped().await;
}

/// A pod that starts on a node the server already scrapes is served once the kubelet has
/// sampled its containers twice (its node is asked again for it), not at its node's next
/// period: here a minute away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_starts_is_served_before_its_nodes_next_period() {
    use conformance::cluster::{Cluster, ClusterConfig, Kubectl};
    let stop = CancellationToken::new();
    let cluster = Cluster::start(
        ClusterConfig {
            nodes: 2,
            pods_per_node: 3,
            resolution: Duration::from_secs(60),
            container_restarts: false,
            e2e_workloads: false,
            node_labels: Vec::new(),
            node_selector: String::new(),
            ..ClusterConfig::default()
        },
        stop.clone(),
    )
    .await
    .unwrap();
    let node = ClusterConfig::node_name(0);
    let served = |body: &str, name: &str| {
        let list: serde_json::Value = serde_json::from_str(body).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == name)
    };
    // Once every node is warm, the node's next scrape is its period's, a minute after start.
    let metric = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let server_metric = |name: &'static str| {
        let cluster = &cluster;
        async move {
            let (status, text) = cluster.server_get("/metrics", true).await.unwrap();
            assert_eq!(status, StatusCode::OK);
            metric(&text, name)
        }
    };
    eventually("every node warm", || async {
        server_metric("scraper_warming_nodes").await == Some(0.0)
    })
    .await;
    let started = Instant::now();
    let requests_before = cluster.kubelet_requests(&node);
    let pod = cluster.start_pod(&node).unwrap();
    let name = pod.sim.name.clone();
    let deadline = started + Duration::from_secs(35);
    loop {
        let (status, body) = cluster
            .server_get("/apis/metrics.k8s.io/v1/pods", true)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        if served(&body, &name) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not served 35 s after it started (the node's next period is ~60 s away)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // kubectl shows it, with its usage.
    let out = cluster
        .kubectl(
            Kubectl::V1_37,
            &["top", "pod", "-n", pod.namespace(), &name, "--no-headers"],
        )
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert!(out.starts_with(&name), "{out}");
    // A few follow-ups did it, not a scrape loop gone wild.
    let extra = cluster.kubelet_requests(&node) - requests_before;
    assert!(
        (1..=6).contains(&extra),
        "{extra} requests for one pod start"
    );
    let counted = server_metric("scraper_pod_start_scrapes_total").await;
    assert!(counted.is_some_and(|n| n >= 1.0), "{counted:?}");
    cluster.stop().await.unwrap();
    stop.cancel();
}
