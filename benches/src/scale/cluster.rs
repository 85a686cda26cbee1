//! The simulated cluster the server runs against: the in-memory kube-apiserver (nodes, pods,
//! the authentication ConfigMap, reviews) and one simulated kubelet per node.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use conformance::controlplane::{self, ControlPlane, CoreApi};
use conformance::kubelet::{Clock, SimNode};
use conformance::objects::{ContainerSpec, Objects};
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::BodyExt as _;
use tokio_util::sync::CancellationToken;

use super::kubelets::Kubelets;

/// The object store behind the control plane's `/api/v1`.
struct ObjectsCore(Objects);

impl CoreApi for ObjectsCore {
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<controlplane::Body>>> {
        Box::pin(async move {
            let resp = self.0.handle(req).await?;
            Some(resp.map(|body| {
                body.map_err(|e| Box::new(e) as controlplane::BoxError)
                    .boxed()
            }))
        })
    }

    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        self.0.upsert_configmap(namespace, name, &data);
    }
}

/// The shape of the simulated cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Nodes.
    pub nodes: usize,
    /// Running pods per node.
    pub pods_per_node: usize,
    /// Containers per pod.
    pub containers: usize,
    /// How often each kubelet refreshes its stats (cAdvisor's housekeeping interval).
    pub housekeeping: std::time::Duration,
    /// Child processes the kubelets run in; 0: in this process (see [`Kubelets`]).
    pub kubelet_processes: usize,
    /// How those child processes are scheduled.
    pub kubelet_sched: KubeletSched,
}

/// How the kubelets' child processes are scheduled (`--kubelet-sched`, named as
/// [`super::parse_choice`] reads it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KubeletSched {
    /// As any process: the simulated kubelets' bursts (every answer of a 100 ms scrape slice
    /// encrypted at once) compete with the server for the machine's cores, which no real
    /// kubelet does.
    #[default]
    Normal,
    /// Under `SCHED_IDLE` (`chrt --idle 0`): they get a core only when the server and the
    /// load client leave one free, as kubelets on other machines take none of the server's.
    Idle,
}

/// About how many pods one HPA target selects: pod 0 of every node (namespace `ns-0`) carries
/// `hpa-target=t-<node % targets>` with [`hpa_targets`] targets, like a Deployment of ~100
/// replicas that an HPA scales.
pub const HPA_TARGET_PODS: usize = 100;

/// How many HPA targets a cluster of `nodes` has.
pub fn hpa_targets(nodes: usize) -> usize {
    (nodes / HPA_TARGET_PODS).max(1)
}

/// The HPA controller's question for target `t`: its namespace's pods by label selector.
pub fn hpa_path(t: usize) -> String {
    format!("/apis/metrics.k8s.io/v1beta1/namespaces/ns-0/pods?labelSelector=hpa-target%3Dt-{t}")
}

/// Node `i`'s workload model: `SimNode::generate` at the shape's housekeeping interval (the
/// same in the harness and in a kubelet child process), with swap reported and none in use,
/// as a kubelet 1.30+ on cgroup v2 reports a node without swap and as the fixture
/// (`../shared/fixtures/kubelet/metrics-resource-kubelet-v1.36-shape-30pods-generated.txt`)
/// shows: `container_swap_usage_bytes`, `node_swap_usage_bytes` and `pod_swap_usage_bytes`,
/// all 0.
pub fn model(shape: &Shape, i: usize, boot_ms: i64) -> SimNode {
    SimNode {
        housekeeping: shape.housekeeping,
        system_swap_bytes: Some(0),
        ..SimNode::generate(
            &node_name(i),
            shape.pods_per_node,
            shape.containers,
            boot_ms,
        )
    }
}

/// The running control plane and kubelets.
pub struct Cluster {
    /// The in-memory kube-apiserver.
    pub control_plane: ControlPlane,
    /// Every node's kubelet.
    pub fleet: Kubelets,
    /// Its objects.
    pub objects: Objects,
}

/// Node `i`'s name (`node-00042`).
pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

impl Cluster {
    /// Starts the control plane and the kubelets and creates every Node (InternalIP
    /// 127.0.0.1, the kubelet's port in `daemonEndpoints`) and Running Pod object, with the
    /// names and namespaces the kubelets report. Bodies are rendered at `clock()`.
    pub async fn start(
        shape: Shape,
        clock: Clock,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Cluster> {
        let objects = Objects::new();
        let control_plane = ControlPlane::start(
            controlplane::Config {
                core: Arc::new(ObjectsCore(objects.clone())),
                ..controlplane::Config::default()
            },
            shutdown,
        )
        .await?;
        let boot_ms = clock() - 3_600_000;
        let models: Vec<SimNode> = (0..shape.nodes)
            .map(|i| model(&shape, i, boot_ms))
            .collect();
        let pods: Vec<Vec<(String, String)>> = models
            .iter()
            .map(|m| {
                m.pods
                    .iter()
                    .map(|p| (p.namespace.clone(), p.name.clone()))
                    .collect()
            })
            .collect();
        let fleet =
            Kubelets::start(control_plane.cluster_ca(), &shape, models, boot_ms, clock).await?;
        let containers: Vec<ContainerSpec> = (0..shape.containers)
            .map(|c| ContainerSpec::new(&format!("c{c}")))
            .collect();
        for (i, pods) in pods.iter().enumerate() {
            let name = node_name(i);
            let port = fleet
                .addr(i)
                .map(|a| a.port())
                .ok_or_else(|| anyhow::anyhow!("no kubelet for node {i}"))?;
            objects.add_node(
                &name,
                &[("node.kubernetes.io/instance-type", "m5.xlarge")],
                &[("InternalIP", "127.0.0.1"), ("Hostname", &name)],
                port,
            );
            let target = format!("t-{}", i % hpa_targets(shape.nodes));
            for (p, (namespace, pod)) in pods.iter().enumerate() {
                let app = format!("app-{}", p % 10);
                let mut labels = vec![("app", app.as_str()), ("pod-template-hash", "5d8f9c7b6")];
                if p == 0 {
                    labels.push(("hpa-target", &target));
                }
                objects.add_pod(namespace, pod, &name, &labels, "Running", &containers);
            }
        }
        Ok(Cluster {
            control_plane,
            fleet,
            objects,
        })
    }
}

/// What a harness needs beside the cluster to run the server and talk to it.
pub struct Workdir {
    /// A directory kept after the run (the server's log, certificates, kubeconfig).
    pub dir: std::path::PathBuf,
    /// The control plane's admin kubeconfig, for the server.
    pub kubeconfig: std::path::PathBuf,
    /// A front-proxy client identity (CN `front-proxy-client`), as kube-aggregator has.
    pub front_proxy: tls::issue::Issued,
}

impl Cluster {
    /// A kept directory named after `prefix`, the kubeconfig in it and a front-proxy client
    /// identity.
    pub fn workdir(&self, prefix: &str) -> anyhow::Result<Workdir> {
        use anyhow::Context as _;
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .context("temporary directory")?
            .keep();
        let kubeconfig = dir.join("kubeconfig");
        self.control_plane.kubeconfig(&kubeconfig)?;
        let front_proxy = self
            .control_plane
            .front_proxy_ca()
            .issue(&tls::issue::LeafSpec {
                common_name: conformance::controlplane::FRONT_PROXY_CLIENT.to_owned(),
                client: true,
                ..Default::default()
            })?;
        Ok(Workdir {
            dir,
            kubeconfig,
            front_proxy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric families of a `/metrics/resource` body, in order.
    fn families(body: &str) -> Vec<&str> {
        body.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect()
    }

    /// The harness's kubelets answer with the fixture's shape (the one the comparison with
    /// metrics-server uses): the same families in the same order, swap included, and about
    /// its size, so that a scrape costs here what it costs there.
    #[test]
    fn a_harness_body_has_the_fixture_s_families_and_size() {
        let fixture = crate::fixture(crate::RESOURCE_V1_36_SHAPE).expect("the fixture");
        let fixture = String::from_utf8(fixture).expect("utf-8");
        let shape = Shape {
            nodes: 1,
            pods_per_node: 30,
            containers: 2,
            housekeeping: std::time::Duration::from_secs(10),
            kubelet_processes: 0,
            kubelet_sched: KubeletSched::Normal,
        };
        let now_ms = 1_764_590_403_000;
        let node = model(&shape, 0, now_ms - 3_600_000);
        let body = conformance::payload::render_resource(&node.stats_at(now_ms));
        assert_eq!(families(&body), families(&fixture), "{body}");
        assert!(families(&body).contains(&"container_swap_usage_bytes"));
        let ratio = body.len() as f64 / fixture.len() as f64;
        assert!(
            (0.8..1.2).contains(&ratio),
            "{} bytes against the fixture's {}",
            body.len(),
            fixture.len()
        );
    }
}
