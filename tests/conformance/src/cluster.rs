//! A whole simulated cluster in one process: the control plane (kube-apiserver and
//! kube-aggregator on the wire) serving Nodes and Running Pods from the object server, one
//! simulated kubelet per node serving a workload driven by the wall clock (its stats refreshed
//! on a housekeeping interval, as cAdvisor does), and the server itself: one or more
//! replicas, each started with [`apiserver::run::run_with`] against the control plane, all
//! endpoints of the Service behind `v1beta1.metrics.k8s.io` and `v1.metrics.k8s.io`. Used by
//! the `sandbox` binary, the conformance tests and the benches.
//!
//! # Layout
//! - this module: [`ClusterConfig`], [`Cluster`] (start, kubectl, mutations, rollout,
//!   shutdown).
//! - [`workload`]: the generated pods (objects and workload models), including
//!   metrics-server's e2e workloads.
//! - [`kubectl`]: the real kubectl binaries (v1.32 and v1.37).
//! - `replica`: one replica of the server (listener, cert dir, task), waiting for replicas
//!   and restarting them.

pub mod kubectl;
mod replica;
pub mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

pub use self::kubectl::{Kubectl, Output};
use self::replica::Replica;
pub use self::workload::PlacedPod;
use crate::aggregator::{self, ApiService, METRICS_SERVER_SERVICE, ReadinessProbe};
use crate::controlplane::{self, ControlPlane, User};
use crate::kubelet::{self, Content, Fault, SimKubelet, SimNode};
use crate::objects::{Kind, Objects};

/// The label metrics-server's e2e topology puts on the node the server must skip.
pub const SKIP_LABEL: &str = "metrics-server-skip";
/// The `--node-selector` metrics-server's e2e deployment uses.
pub const SKIP_SELECTOR: &str = "metrics-server-skip!=true";
/// The server's identity towards the control plane and the kubelets.
pub const SERVER_USER: &str = "system:serviceaccount:kube-system:metrics-server";

/// Errors from starting, driving or stopping a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control plane did not start.
    #[error("control plane: {0}")]
    ControlPlane(#[from] controlplane::Error),
    /// A simulated kubelet did not start.
    #[error("kubelet: {0}")]
    Kubelet(#[from] kubelet::Error),
    /// Certificates.
    #[error("TLS: {0}")]
    Tls(#[from] tls::Error),
    /// Registering the APIServices.
    #[error("APIService: {0}")]
    ApiService(#[from] aggregator::Error),
    /// A file or socket operation.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server's flags were rejected.
    #[error("server flags: {0}")]
    Flags(String),
    /// The server stopped with an error.
    #[error("server: {0}")]
    Server(#[source] Box<apiserver::run::Error>),
    /// The server ended without being asked to (or its task panicked).
    #[error("server stopped unexpectedly")]
    ServerEnded,
    /// Something did not happen in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A kubectl binary is not installed.
    #[error("kubectl {version} not found at {path}: run tests/conformance/install-kubectl.sh")]
    KubectlMissing {
        /// `1.32` or `1.37`.
        version: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// kubectl could not be run.
    #[error("running {path}: {source}")]
    Kubectl {
        /// The binary.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A request to the server failed at the transport level.
    #[error("request to the server: {0}")]
    Request(String),
    /// No node of that name.
    #[error("no node {0:?}")]
    NoSuchNode(String),
    /// A node of that name exists already.
    #[error("node {0:?} exists already")]
    NodeExists(String),
    /// No such container (namespace/pod/container on node).
    #[error("no container {0}")]
    NoSuchContainer(String),
    /// No replica of that index.
    #[error("no replica {0}")]
    NoSuchReplica(usize),
    /// A replica's endpoint was removed while waiting for it to be ready.
    #[error("the endpoint {0} was removed")]
    EndpointGone(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Nodes, named by [`ClusterConfig::node_name`].
    pub nodes: usize,
    /// Generic pods per node (a kube-proxy and Deployment pods); the e2e workloads come on
    /// top, on the first node.
    pub pods_per_node: usize,
    /// Most containers in one generic pod (each has 1 to this many).
    pub containers: usize,
    /// Seed of the generated names, rates and memory bands.
    pub seed: u64,
    /// `--metric-resolution`.
    pub resolution: Duration,
    /// How often every kubelet refreshes its stats (cAdvisor `--housekeeping_interval`, see
    /// [`SimNode::housekeeping`]); zero renders them at each request.
    pub housekeeping: Duration,
    /// Let a few generic pods' containers crash and restart now and then (about one pod in
    /// 17, every 10 minutes). A restart can hide its pod for a moment (until the new
    /// container's second sample); a test that asserts every pod is always served turns it off.
    pub container_restarts: bool,
    /// These nodes have swap on (kubelet NodeSwap): their kubelets report swap for the node
    /// and every container, and the first container of every third pod uses some.
    pub swap_nodes: Vec<String>,
    /// Start these nodes' kubelets in a fault mode.
    pub faults: Vec<(String, Fault)>,
    /// Extra labels on these nodes.
    pub node_labels: Vec<(String, Vec<(String, String)>)>,
    /// `--node-selector` (empty: none).
    pub node_selector: String,
    /// Place metrics-server's e2e workloads on the first node.
    pub e2e_workloads: bool,
    /// More server flags (`--flag=value`), after the cluster's own.
    pub server_args: Vec<String>,
    /// How long [`Cluster::start`] waits for the server to be Available and ready, and
    /// [`Cluster::wait_replica_ready`] for a replica to be ready.
    pub ready_timeout: Duration,
    /// Servers started, each an endpoint of the Service behind both APIServices.
    pub replicas: usize,
    /// The readiness probe of every replica (`GET /readyz`).
    pub readiness: ReadinessProbe,
}

impl Default for ClusterConfig {
    /// Three nodes of five pods (up to two containers each), 10 s resolution, kubelets that
    /// refresh their stats every 10 s (cAdvisor's default), the e2e workloads, and the last
    /// node labelled `metrics-server-skip=true` and excluded by
    /// `--node-selector=metrics-server-skip!=true`, as in metrics-server's e2e topology.
    fn default() -> Self {
        ClusterConfig {
            nodes: 3,
            pods_per_node: 5,
            containers: 2,
            seed: 1,
            resolution: Duration::from_secs(10),
            housekeeping: kubelet::DEFAULT_HOUSEKEEPING,
            container_restarts: true,
            swap_nodes: Vec::new(),
            faults: Vec::new(),
            node_labels: vec![(
                ClusterConfig::node_name(2),
                vec![(SKIP_LABEL.to_owned(), "true".to_owned())],
            )],
            node_selector: SKIP_SELECTOR.to_owned(),
            e2e_workloads: true,
            server_args: Vec::new(),
            ready_timeout: Duration::from_secs(90),
            replicas: 1,
            readiness: ReadinessProbe::default(),
        }
    }
}

impl ClusterConfig {
    /// The name of node `index` (`node-000`, `node-001`, ...).
    pub fn node_name(index: usize) -> String {
        format!("node-{index:03}")
    }
}

/// One node: its kubelet and the workload it reports.
struct Node {
    kubelet: SimKubelet,
    model: SimNode,
}

/// A running cluster. [`Cluster::stop`] shuts everything down and waits; dropping it cancels.
pub struct Cluster {
    config: ClusterConfig,
    stop: CancellationToken,
    control_plane: Option<ControlPlane>,
    objects: Objects,
    kubelet_ca: tls::issue::Ca,
    server_token: String,
    nodes: Arc<Mutex<BTreeMap<String, Node>>>,
    rng: Mutex<workload::Rng>,
    /// The server's flags (the program name first, no `--cert-dir`), the same for every
    /// replica.
    server_args: Vec<String>,
    replicas: Mutex<Vec<Replica>>,
    /// Restarts run one at a time.
    restarting: tokio::sync::Mutex<()>,
    admin_kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("control_plane", &self.control_plane)
            .field(
                "replicas",
                &self
                    .replicas
                    .lock()
                    .iter()
                    .map(|r| r.addr)
                    .collect::<Vec<_>>(),
            )
            .field("nodes", &self.nodes.lock().len())
            .finish_non_exhaustive()
    }
}

/// The swap space of a node with swap on, bytes (what its Node reports in
/// `status.nodeInfo.swap.capacity`).
pub const SWAP_CAPACITY: u64 = 1 << 30;

/// Unix ms of the wall clock: the simulated workloads are driven by real time.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn live(model: &SimNode) -> Content {
    Content::Live {
        node: model.clone(),
        clock: Arc::new(wall_ms),
    }
}

fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(wall_ms().unsigned_abs());
    format!("{:016x}", h.finish())
}

impl Cluster {
    /// Starts everything and waits until every replica's endpoint is ready (its `/readyz`
    /// passes) and both APIServices are Available. Stops when `shutdown` is cancelled or on
    /// [`Cluster::stop`].
    pub async fn start(config: ClusterConfig, shutdown: CancellationToken) -> Result<Self, Error> {
        tls::provider::install_default();
        let stop = shutdown.child_token();
        let objects = Objects::new();
        let control_plane = ControlPlane::start(
            controlplane::Config {
                core: Arc::new(objects.clone()),
                aggregator: aggregator::Config {
                    check_interval: Duration::from_secs(10),
                    retry_initial: Duration::from_millis(100),
                    readiness: config.readiness.clone(),
                    ..aggregator::Config::default()
                },
                ..controlplane::Config::default()
            },
            stop.clone(),
        )
        .await?;
        let dir = tempfile::Builder::new()
            .prefix("metrics-server-cluster-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        let admin_kubeconfig = dir.path().join("kubeconfig");
        control_plane.kubeconfig(&admin_kubeconfig)?;

        // The server's identity: a service-account token, accepted by the control plane
        // (TokenReview, lists and watches) and required by every kubelet.
        let server_token = format!("ms-{}", random_hex());
        control_plane.add_token(
            &server_token,
            User::new(
                SERVER_USER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                ],
            ),
        );
        let server_kubeconfig = dir.path().join("metrics-server.kubeconfig");
        control_plane.kubeconfig_with_token(&server_kubeconfig, &server_token)?;
        let kubelet_ca = tls::issue::Ca::new("kubelet-serving-ca")?;
        let kubelet_ca_file = dir.path().join("kubelet-ca.crt");
        std::fs::write(&kubelet_ca_file, kubelet_ca.cert_pem())
            .map_err(io(format!("writing {}", kubelet_ca_file.display())))?;

        let mut cluster = Cluster {
            rng: Mutex::new(workload::Rng::new(config.seed)),
            config,
            stop,
            control_plane: Some(control_plane),
            objects,
            kubelet_ca,
            server_token,
            nodes: Arc::new(Mutex::new(BTreeMap::new())),
            server_args: Vec::new(),
            replicas: Mutex::new(Vec::new()),
            restarting: tokio::sync::Mutex::new(()),
            admin_kubeconfig,
            dir,
        };

        // Nodes, kubelets and pods.
        let now_ms = wall_ms();
        for i in 0..cluster.config.nodes {
            let name = ClusterConfig::node_name(i);
            let labels = cluster
                .config
                .node_labels
                .iter()
                .filter(|(n, _)| *n == name)
                .flat_map(|(_, l)| l.clone())
                .collect::<Vec<_>>();
            let mut pods = cluster.generic_pods(&name, cluster.config.pods_per_node, now_ms);
            if i == 0 && cluster.config.e2e_workloads {
                pods.extend(workload::e2e_pods(&name, now_ms));
            }
            let fault = cluster
                .config
                .faults
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| f.clone())
                .unwrap_or_default();
            cluster.add_node_with(&name, &labels, pods, fault).await?;
        }

        // The server's replicas, against the control plane.
        let mut args = vec![
            "metrics-server".to_owned(),
            format!("--kubeconfig={}", server_kubeconfig.display()),
            format!(
                "--metric-resolution={}s",
                cluster.config.resolution.as_secs().max(1)
            ),
            "--kubelet-use-node-status-port".to_owned(),
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
            format!(
                "--kubelet-certificate-authority={}",
                kubelet_ca_file.display()
            ),
        ];
        // metrics-server wants the kubelet timeout below the resolution (default 10s).
        if cluster.config.resolution <= Duration::from_secs(10) {
            args.push(format!(
                "--kubelet-request-timeout={}ms",
                cluster.config.resolution.as_millis() / 2
            ));
        }
        if !cluster.config.node_selector.is_empty() {
            args.push(format!("--node-selector={}", cluster.config.node_selector));
        }
        args.extend(cluster.config.server_args.iter().cloned());
        cluster.server_args = args;
        let aggregator = cluster.control_plane().aggregator().clone();
        for index in 0..cluster.config.replicas.max(1) {
            let replica = replica::start(
                &cluster.server_args,
                cluster.dir.path(),
                index,
                0,
                &cluster.stop,
            )
            .await?;
            let url = replica.url();
            cluster.replicas.lock().push(replica);
            aggregator.add_endpoint(METRICS_SERVER_SERVICE, &url)?;
        }

        // Registered as both versions on the same Service; v1 preferred.
        aggregator.register(ApiService {
            version_priority: 100,
            ..ApiService::for_service("metrics.k8s.io", "v1beta1", METRICS_SERVER_SERVICE)
        })?;
        aggregator.register(ApiService {
            version_priority: 200,
            ..ApiService::for_service("metrics.k8s.io", "v1", METRICS_SERVER_SERVICE)
        })?;
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    fn generic_pods(&self, node: &str, count: usize, now_ms: i64) -> Vec<PlacedPod> {
        let mut rng = self.rng.lock();
        let mut pods =
            workload::generic_pods(node, count, self.config.containers, &mut rng, now_ms);
        if !self.config.container_restarts {
            for container in pods.iter_mut().flat_map(|p| p.sim.containers.iter_mut()) {
                container.restart_every = None;
            }
        }
        pods
    }

    /// Starts a kubelet for `name`, adds the Node object and the pods.
    async fn add_node_with(
        &self,
        name: &str,
        labels: &[(String, String)],
        pods: Vec<PlacedPod>,
        fault: Fault,
    ) -> Result<(), Error> {
        if self.nodes.lock().contains_key(name) {
            return Err(Error::NodeExists(name.to_owned()));
        }
        let mut model = SimNode {
            name: name.to_owned(),
            boot_ms: wall_ms() - 86_400_000,
            system_cpu_cores: 0.15,
            system_memory_bytes: 900 << 20,
            pods: pods.iter().map(|p| p.sim.clone()).collect(),
            housekeeping: self.config.housekeeping,
            system_swap_bytes: None,
        };
        if self.config.swap_nodes.iter().any(|n| n == name) {
            model.system_swap_bytes = Some(96 << 20);
            for (i, pod) in model
                .pods
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| i % 3 == 0)
            {
                if let Some(c) = pod.containers.first_mut() {
                    c.swap_bytes = (16 + (i as u64 * 7) % 48) << 20;
                }
            }
        }
        let options = kubelet::Options {
            bearer_token: Some(self.server_token.clone()),
            content: live(&model),
            fault,
            ..kubelet::Options::new(name)
        };
        let kubelet = SimKubelet::start(&self.kubelet_ca, options).await?;
        let port = kubelet.addr().port();
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.objects.add_node(
            name,
            &labels,
            &[("InternalIP", "127.0.0.1"), ("Hostname", name)],
            port,
        );
        if model.system_swap_bytes.is_some()
            && let Some(mut node) = self.objects.get(Kind::Node, "", name)
        {
            // NodeSwapStatus (kubelet 1.30+), what `kubectl top node --show-swap` divides by.
            node["status"]["nodeInfo"]["swap"] = serde_json::json!({ "capacity": SWAP_CAPACITY });
            // A node built by `add_node` always carries its name.
            let _ = self.objects.put(Kind::Node, node);
        }
        for pod in pods {
            // Built pods always carry a name and a namespace.
            let _ = self.objects.put(Kind::Pod, pod.object);
        }
        self.nodes
            .lock()
            .insert(name.to_owned(), Node { kubelet, model });
        Ok(())
    }

    /// Adds a node with `pods` generic pods and its kubelet, as a node joining the cluster.
    pub async fn add_node(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        pods: usize,
    ) -> Result<Vec<PlacedPod>, Error> {
        let placed = self.generic_pods(name, pods, wall_ms());
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.add_node_with(name, &labels, placed.clone(), Fault::Healthy)
            .await?;
        Ok(placed)
    }

    /// Deletes a node, its pods and its kubelet.
    pub async fn remove_node(&self, name: &str) -> Result<(), Error> {
        let node = self
            .nodes
            .lock()
            .remove(name)
            .ok_or_else(|| Error::NoSuchNode(name.to_owned()))?;
        for pod in &node.model.pods {
            self.objects.delete_pod(&pod.namespace, &pod.name);
        }
        self.objects.delete_node(name);
        node.kubelet.shutdown().await;
        Ok(())
    }

    /// Starts a generic pod on a running node now, as a rollout does: its kubelet reports
    /// its containers from now on (first sampled at once, then on the node's housekeeping) and
    /// the Pod, Running, is added to the API.
    pub fn start_pod(&self, node: &str) -> Result<PlacedPod, Error> {
        let now_ms = wall_ms();
        // The first generic pod of a node is its kube-proxy: the second is an application's.
        let mut pod = self
            .generic_pods(node, 2, now_ms)
            .pop()
            .ok_or_else(|| Error::NoSuchNode(node.to_owned()))?;
        for container in &mut pod.sim.containers {
            container.created_ms = now_ms;
            container.restart_every = None;
        }
        {
            let mut nodes = self.nodes.lock();
            let entry = nodes
                .get_mut(node)
                .ok_or_else(|| Error::NoSuchNode(node.to_owned()))?;
            entry.model.pods.push(pod.sim.clone());
            entry.kubelet.set_content(live(&entry.model));
        }
        // A built pod always carries a name and a namespace.
        let _ = self.objects.put(Kind::Pod, pod.object.clone());
        Ok(pod)
    }

    /// Restarts a container of a pod on `node` right before its kubelet answers its next
    /// request (a scrape): a crash and restart a moment before, so that the scrape finds the
    /// new container's first sample, taken at its discovery. The receiver gets the restart
    /// time, Unix ms.
    pub fn restart_container_before_next_scrape(
        &self,
        node: &str,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<tokio::sync::oneshot::Receiver<i64>, Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let nodes = Arc::downgrade(&self.nodes);
        let (node, namespace, pod, container) = (
            node.to_owned(),
            namespace.to_owned(),
            pod.to_owned(),
            container.to_owned(),
        );
        let guard = self.nodes.lock();
        let entry = guard
            .get(&node)
            .ok_or_else(|| Error::NoSuchNode(node.clone()))?;
        let found = entry.model.pods.iter().any(|p| {
            p.namespace == namespace
                && p.name == pod
                && p.containers.iter().any(|c| c.name == container)
        });
        if !found {
            return Err(Error::NoSuchContainer(format!(
                "{namespace}/{pod}/{container} on {node}"
            )));
        }
        let restart = move || {
            let Some(nodes) = nodes.upgrade() else {
                return;
            };
            let mut nodes = nodes.lock();
            let Some(entry) = nodes.get_mut(&node) else {
                return;
            };
            // Discovered (and sampled) before the request is answered.
            let at = wall_ms() - 2 * kubelet::DISCOVERY_MS;
            let containers = entry
                .model
                .pods
                .iter_mut()
                .filter(|p| p.namespace == namespace && p.name == pod)
                .flat_map(|p| p.containers.iter_mut());
            for c in containers.filter(|c| c.name == container) {
                c.restart_at(at);
            }
            entry.kubelet.set_content(live(&entry.model));
            let _ = tx.send(at);
        };
        entry.kubelet.before_next_request(restart);
        Ok(rx)
    }

    /// Requests a node's kubelet has answered (0 for an unknown node).
    pub fn kubelet_requests(&self, node: &str) -> u64 {
        self.nodes
            .lock()
            .get(node)
            .map_or(0, |n| n.kubelet.requests())
    }

    /// Deletes a pod: from the API and from its kubelet's reports. False when unknown.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> bool {
        let deleted = self.objects.delete_pod(namespace, name).is_some();
        let mut nodes = self.nodes.lock();
        for node in nodes.values_mut() {
            let before = node.model.pods.len();
            node.model
                .pods
                .retain(|p| !(p.namespace == namespace && p.name == name));
            if node.model.pods.len() != before {
                node.kubelet.set_content(live(&node.model));
            }
        }
        deleted
    }

    /// Switches a node's kubelet into a fault mode ([`Fault::Healthy`] to recover).
    pub fn set_kubelet_fault(&self, node: &str, fault: Fault) -> Result<(), Error> {
        let nodes = self.nodes.lock();
        let node = nodes
            .get(node)
            .ok_or_else(|| Error::NoSuchNode(node.to_owned()))?;
        node.kubelet.set_fault(fault);
        Ok(())
    }

    /// The workload a node's kubelet reports.
    pub fn node_model(&self, node: &str) -> Option<SimNode> {
        self.nodes.lock().get(node).map(|n| n.model.clone())
    }

    /// The node a pod runs on and its workload.
    pub fn pod_model(&self, namespace: &str, name: &str) -> Option<(String, kubelet::SimPod)> {
        self.nodes.lock().iter().find_map(|(node, n)| {
            n.model
                .pods
                .iter()
                .find(|p| p.namespace == namespace && p.name == name)
                .map(|p| (node.clone(), p.clone()))
        })
    }

    /// Node names, sorted.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.lock().keys().cloned().collect()
    }

    /// Names of nodes the server scrapes (those `--node-selector` keeps), sorted.
    pub fn scraped_node_names(&self) -> Vec<String> {
        self.node_names()
            .into_iter()
            .filter(|n| !self.is_skipped(n))
            .collect()
    }

    /// Whether the node carries `metrics-server-skip=true` while the selector excludes it.
    pub fn is_skipped(&self, node: &str) -> bool {
        self.config.node_selector == SKIP_SELECTOR
            && self
                .objects
                .get(Kind::Node, "", node)
                .is_some_and(|n| n["metadata"]["labels"][SKIP_LABEL] == "true")
    }

    /// Every pod as (namespace, name, node), sorted by namespace then name.
    pub fn pods(&self) -> Vec<(String, String, String)> {
        self.objects
            .all(Kind::Pod)
            .iter()
            .map(|p| {
                let s = |ptr: &str| {
                    p.pointer(ptr)
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_owned()
                };
                (
                    s("/metadata/namespace"),
                    s("/metadata/name"),
                    s("/spec/nodeName"),
                )
            })
            .collect()
    }

    /// The settings it was started with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The control plane.
    pub fn control_plane(&self) -> &ControlPlane {
        // Present until `stop` consumes the cluster.
        match &self.control_plane {
            Some(cp) => cp,
            None => unreachable!("the control plane is only taken by stop"),
        }
    }

    /// The object server behind `/api/v1`.
    pub fn objects(&self) -> &Objects {
        &self.objects
    }

    /// A kubeconfig for the admin user (`kubernetes-admin`, `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Runs the real kubectl with `args` as the admin user, with an isolated home and
    /// discovery cache per release.
    pub async fn kubectl(&self, version: Kubectl, args: &[&str]) -> Result<Output, Error> {
        let bin = version.require()?;
        let home = self.dir.path().join(format!("home-{}", version.version()));
        kubectl::run(
            bin,
            home,
            self.admin_kubeconfig.clone(),
            args.iter().map(|a| (*a).to_owned()).collect(),
            Duration::from_secs(30),
        )
        .await
    }

    /// Stops the server's replicas, the kubelets and the control plane, and waits for each.
    /// An error when a replica had failed.
    pub async fn stop(mut self) -> Result<(), Error> {
        self.stop.cancel();
        let tasks: Vec<replica::Task> = self
            .replicas
            .lock()
            .iter_mut()
            .filter_map(|r| r.task.take())
            .collect();
        let mut result = Ok(());
        for task in tasks {
            let outcome = replica::outcome(task.await);
            if result.is_ok() {
                result = outcome;
            }
        }
        let nodes = std::mem::take(&mut *self.nodes.lock());
        for node in nodes.into_values() {
            node.kubelet.shutdown().await;
        }
        if let Some(cp) = self.control_plane.take() {
            cp.stopped().await;
        }
        result
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
