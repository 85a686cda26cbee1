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
use conformance::kubelet::{Content, DEFAULT_HOUSEKEEPING, Options, SimKubelet, SimNode};
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

/// A value of the server's own `/metrics` (a sample name with its labels, if any).
async fn server_metric(cluster: &conformance::cluster::Cluster, name: &str) -> Option<f64> {
    let (status, text) = cluster.server_get("/metrics", true).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A two-node cluster at `resolution` whose kubelets refresh every `housekeeping`, without
/// random container restarts, once the server has no node warming up (each warm, or given
/// up, a period and a housekeeping interval after the start at most): a node's next scrape
/// is then its period's.
async fn warm_cluster(
    resolution: Duration,
    housekeeping: Duration,
    stop: &CancellationToken,
) -> conformance::cluster::Cluster {
    use conformance::cluster::{Cluster, ClusterConfig};
    let cluster = Cluster::start(
        ClusterConfig {
            nodes: 2,
            pods_per_node: 3,
            resolution,
            housekeeping,
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
    let deadline = Instant::now() + resolution + Duration::from_secs(30);
    while server_metric(&cluster, "scraper_warming_nodes").await != Some(0.0) {
        assert!(Instant::now() < deadline, "nodes still warming up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster
}

/// The path of a pod's metrics.
fn pod_metrics_path(namespace: &str, name: &str) -> String {
    format!("/apis/metrics.k8s.io/v1/namespaces/{namespace}/pods/{name}")
}

/// Restarts the first container of `pod`, on `node`, right before the node's next scrape
/// (at 30 s resolution, within 45 s), and returns the restart time, Unix ms.
async fn restart_before_next_scrape(
    cluster: &conformance::cluster::Cluster,
    node: &str,
    pod: &conformance::kubelet::SimPod,
) -> i64 {
    let restarted = cluster
        .restart_container_before_next_scrape(
            node,
            &pod.namespace,
            &pod.name,
            &pod.containers[0].name,
        )
        .unwrap();
    tokio::time::timeout(Duration::from_secs(45), restarted)
        .await
        .expect("the node scraped within 45 s")
        .unwrap()
}

/// The follow-up scrapes the server counted for `reason`; then stops the cluster.
async fn follow_ups_then_stop(
    cluster: conformance::cluster::Cluster,
    stop: CancellationToken,
    reason: &str,
) -> f64 {
    let name = format!("scraper_follow_up_scrapes_total{{reason=\"{reason}\"}}");
    let counted = server_metric(&cluster, &name).await;
    cluster.stop().await.unwrap();
    stop.cancel();
    counted.unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// A pod that starts on a node the server already scrapes is served once the kubelet has
/// sampled its containers twice (its node is asked again for it), not at its node's next
/// period: here a minute away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_starts_is_served_before_its_nodes_next_period() {
    use conformance::cluster::{ClusterConfig, Kubectl};
    let stop = CancellationToken::new();
    let cluster = warm_cluster(Duration::from_secs(60), DEFAULT_HOUSEKEEPING, &stop).await;
    let node = ClusterConfig::node_name(0);
    let served = |body: &str, name: &str| {
        let list: serde_json::Value = serde_json::from_str(body).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == name)
    };
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
    assert!(follow_ups_then_stop(cluster, stop, "pod_start").await >= 1.0);
}

/// A container that restarts right before its node's scrape: that scrape finds only the new
/// container's first sample, which has no rate, so the pod is not served (metrics-server
/// hides it until the node's next scrape, a period later). The node is asked again when its
/// kubelet should have sampled the container again, and the pod is back well before the
/// next period (here 30 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_container_is_served_again_before_its_nodes_next_period() {
    use conformance::cluster::ClusterConfig;
    let stop = CancellationToken::new();
    let cluster = warm_cluster(Duration::from_secs(30), DEFAULT_HOUSEKEEPING, &stop).await;
    let node = ClusterConfig::node_name(0);
    let model = cluster.node_model(&node).unwrap();
    let pod = model.pods.last().unwrap();
    let path = pod_metrics_path(&pod.namespace, &pod.name);
    let (status, body) = cluster.server_get(&path, true).await.unwrap();
    assert_eq!(status, StatusCode::OK, "served before the restart: {body}");
    let restart_ms = restart_before_next_scrape(&cluster, &node, pod).await;
    let restart = Instant::now();
    let requests_before = cluster.kubelet_requests(&node);
    // Hidden once that scrape is stored, then served again.
    let mut hidden = false;
    let deadline = restart + Duration::from_secs(20);
    loop {
        let (status, body) = cluster.server_get(&path, true).await.unwrap();
        match status {
            StatusCode::NOT_FOUND => hidden = true,
            StatusCode::OK if hidden => {
                let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
                // RFC 3339 in whole seconds, UTC: ordered as strings.
                let at = usage["timestamp"].as_str().unwrap();
                let restarted_at = conformance::objects::build::rfc3339(restart_ms / 1000);
                assert!(
                    *at >= *restarted_at,
                    "a sample of the new container (restarted at {restarted_at}): {body}"
                );
                break;
            }
            StatusCode::OK => {}
            other => panic!("{other}: {body}"),
        }
        assert!(
            Instant::now() < deadline,
            "{} not served again 20 s after its container restarted (hidden: {hidden}; the \
             node's next period is ~30 s away)",
            pod.name
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let extra = cluster.kubelet_requests(&node) - requests_before;
    assert!((1..=4).contains(&extra), "{extra} requests for one restart");
    assert!(follow_ups_then_stop(cluster, stop, "container_start").await >= 1.0);
}

/// Series that never get a second sample (a kubelet whose stats do not refresh) are no
/// reason to ask again: once the warm-up gives up, each node costs one request a period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_that_never_pair_cost_no_follow_ups() {
    use conformance::cluster::ClusterConfig;
    let stop = CancellationToken::new();
    let resolution = Duration::from_secs(10);
    // The warm-up gives up a period and a housekeeping interval after the start.
    let cluster = warm_cluster(resolution, Duration::from_secs(3600), &stop).await;
    let node = ClusterConfig::node_name(0);
    let before = cluster.kubelet_requests(&node);
    let periods = 3;
    tokio::time::sleep(resolution * periods).await;
    let requests = cluster.kubelet_requests(&node) - before;
    assert!(
        (u64::from(periods - 1)..=u64::from(periods + 1)).contains(&requests),
        "{requests} requests in {periods} periods"
    );
    assert_eq!(
        follow_ups_then_stop(cluster, stop, "container_start").await,
        0.0
    );
}

/// A pod that starts on a node whose follow-up waits for a restarted container's next sample
/// (up to ~10 s away) brings that follow-up forward: the node is asked 1 s after the start,
/// for the new containers' first samples, and the pod is served as on any other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_start_brings_a_waiting_follow_up_forward() {
    use conformance::cluster::ClusterConfig;
    let stop = CancellationToken::new();
    let cluster = warm_cluster(Duration::from_secs(30), DEFAULT_HOUSEKEEPING, &stop).await;
    let node = ClusterConfig::node_name(0);
    let model = cluster.node_model(&node).unwrap();
    restart_before_next_scrape(&cluster, &node, model.pods.last().unwrap()).await;
    // That scrape's follow-up is due when the restarted container's next sample is, ~10 s
    // after it; a pod starts meanwhile.
    let requests_before = cluster.kubelet_requests(&node);
    let started = Instant::now();
    let new_pod = cluster.start_pod(&node).unwrap();
    let asked_by = started + Duration::from_secs(5);
    while cluster.kubelet_requests(&node) == requests_before {
        assert!(
            Instant::now() < asked_by,
            "the node not asked within 5 s of the pod start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let path = pod_metrics_path(new_pod.namespace(), &new_pod.sim.name);
    let deadline = started + Duration::from_secs(20);
    loop {
        let (status, body) = cluster.server_get(&path, true).await.unwrap();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(
            Instant::now() < deadline,
            "the new pod not served 20 s after it started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(follow_ups_then_stop(cluster, stop, "pod_start").await >= 1.0);
}
