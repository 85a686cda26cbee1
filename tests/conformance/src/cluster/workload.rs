//! The pods of a simulated cluster: each one both a Pod object (what kube-apiserver serves)
//! and a workload model (what the node's kubelet reports), generated from a seed.
//!
//! Generic pods look like a small real cluster (Deployments in a few namespaces, a kube-proxy
//! per node, some pods with a sidecar); the e2e pods are metrics-server's e2e workloads
//! (metrics-server.md §6.2) with known CPU and memory use.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kubelet::{SimContainer, SimPod};
use crate::objects::{ContainerSpec, Kind, build};

/// Namespace of the e2e workloads (metrics-server's e2e suite uses `default`).
pub const E2E_NAMESPACE: &str = "default";
/// A pod with one container burning [`CPU_CONSUMER_CORES`].
pub const CPU_CONSUMER: &str = "cpu-consumer";
/// The CPU the cpu-consumer burns, in cores (`consume-cpu --millicores=50`).
pub const CPU_CONSUMER_CORES: f64 = 0.050;
/// A pod with one container holding about [`MEMORY_CONSUMER_BYTES`].
pub const MEMORY_CONSUMER: &str = "memory-consumer";
/// The working set of the memory-consumer, bytes (`stress --vm-bytes 50M`).
pub const MEMORY_CONSUMER_BYTES: u64 = 50 << 20;
/// A pod whose init container `init-container` has finished; its app container has the
/// pod's name.
pub const INIT_CONTAINER_POD: &str = "cmwithinitcontainer-consumer";
/// A pod with two regular containers: `sidecarpod-consumer` and `sidecar-container`.
pub const SIDECAR_POD: &str = "sidecarpod-consumer";
/// A pod with a native sidecar (an init container with `restartPolicy: Always`) named
/// `sidecar-container` and an app container `initsidecarpod-consumer`.
pub const NATIVE_SIDECAR_POD: &str = "initsidecarpod-consumer";

/// A deterministic generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for this seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// `len` characters of Kubernetes' generated-name alphabet.
    fn suffix(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| char::from(ALPHABET[self.below(ALPHABET.len() as u64) as usize]))
            .collect()
    }
}

/// One pod placed on a node: the object the control plane serves and the workload its
/// kubelet reports.
#[derive(Clone, Debug)]
pub struct PlacedPod {
    /// The Pod object (Running, `spec.nodeName` set).
    pub object: Value,
    /// The workload.
    pub sim: SimPod,
}

impl PlacedPod {
    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        &self.sim.namespace
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.sim.name
    }
}

/// One container of a pod being built: its spec in the object and its workload.
struct Part {
    spec: ContainerSpec,
    sim: SimContainer,
}

fn part(name: &str, cpu_cores: f64, memory_bytes: (u64, u64), created_ms: i64) -> Part {
    Part {
        spec: ContainerSpec::new(name),
        sim: SimContainer {
            name: name.to_owned(),
            created_ms,
            cpu_cores,
            cpu_wobble: 0.0,
            memory_min_bytes: memory_bytes.0,
            memory_max_bytes: memory_bytes.1,
            memory_period: Duration::from_secs(180),
            restart_every: None,
            restarted_ms: Vec::new(),
            swap_bytes: 0,
        },
    }
}

/// Builds a Running pod from its parts; `init` are init containers as (spec, restartable):
/// finished ones get a terminated status, restartable ones (native sidecars) a running status
/// and a workload of their own.
fn pod(
    namespace: &str,
    name: &str,
    node: &str,
    labels: &[(&str, &str)],
    containers: Vec<Part>,
    init: Vec<(Part, bool)>,
) -> PlacedPod {
    let specs: Vec<ContainerSpec> = containers.iter().map(|p| p.spec.clone()).collect();
    let mut object = build::pod_json(namespace, name, node, labels, "Running", &specs);
    let uid = build::uid(Kind::Pod, namespace, name);
    object["metadata"]["uid"] = json!(uid);
    let mut sims: Vec<SimContainer> = Vec::new();
    if !init.is_empty() {
        let started = object["status"]["startTime"].clone();
        let mut init_specs = Vec::new();
        let mut init_statuses = Vec::new();
        for (p, restartable) in &init {
            let mut spec = json!({
                "name": p.spec.name,
                "image": "registry.k8s.io/e2e-test-images/resource-consumer:1.9",
                "resources": {"requests": {"cpu": p.spec.cpu_request, "memory": p.spec.memory_request}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            });
            let state = if *restartable {
                spec["restartPolicy"] = json!("Always");
                json!({"running": {"startedAt": started}})
            } else {
                json!({"terminated": {"exitCode": 0, "reason": "Completed",
                                      "startedAt": started, "finishedAt": started}})
            };
            init_specs.push(spec);
            init_statuses.push(json!({
                "name": p.spec.name,
                "state": state,
                "ready": true,
                "restartCount": 0,
                "image": "registry.k8s.io/e2e-test-images/resource-consumer:1.9",
                "imageID": "registry.k8s.io/e2e-test-images/resource-consumer@sha256:89f6fb2a1ae5d7e1f4d2c6b1a8e3b6c40b2b6a7b1c4a7d8e9f0a1b2c3d4e5f60",
                "containerID": format!("containerd://{}", build::uid(Kind::Pod, name, &p.spec.name).replace('-', "")),
                "started": *restartable
            }));
            // A finished init container is gone: the kubelet reports it nowhere in
            // /metrics/resource. A native sidecar runs like any container.
            if *restartable {
                sims.push(p.sim.clone());
            }
        }
        object["spec"]["initContainers"] = Value::Array(init_specs);
        object["status"]["initContainerStatuses"] = Value::Array(init_statuses);
    }
    sims.extend(containers.into_iter().map(|p| p.sim));
    PlacedPod {
        object,
        sim: SimPod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid,
            containers: sims,
        },
    }
}

/// Deployments of the generic pods: (namespace, app, sidecar container name if any).
const APPS: &[(&str, &str, Option<&str>)] = &[
    ("default", "nginx", None),
    ("default", "redis", None),
    ("web", "frontend", Some("istio-proxy")),
    ("web", "api", Some("istio-proxy")),
    ("payments", "ledger", Some("log-shipper")),
    ("monitoring", "prometheus", Some("config-reloader")),
    ("monitoring", "grafana", None),
    ("batch", "worker", None),
    ("ingress-nginx", "ingress-nginx-controller", None),
];

/// `count` pods for `node`: a `kube-proxy` first, then Deployment pods. Each has 1 to
/// `containers` containers (an app plus sidecars), CPU rates between 1m and 250m and memory
/// wandering within a pod-specific band. Containers started up to an hour before `now_ms`.
pub fn generic_pods(
    node: &str,
    count: usize,
    containers: usize,
    rng: &mut Rng,
    now_ms: i64,
) -> Vec<PlacedPod> {
    let mut pods = Vec::with_capacity(count);
    let created =
        |rng: &mut Rng| now_ms - 60_000 - i64::try_from(rng.below(3_540_000)).unwrap_or(0);
    if count > 0 {
        let name = format!("kube-proxy-{}", rng.suffix(5));
        let c = part("kube-proxy", 0.001, (18 << 20, 22 << 20), created(rng));
        pods.push(pod(
            "kube-system",
            &name,
            node,
            &[
                ("k8s-app", "kube-proxy"),
                ("controller-revision-hash", "6d4b9c7f8"),
            ],
            vec![c],
            Vec::new(),
        ));
    }
    while pods.len() < count {
        let (namespace, app, sidecar) = APPS[rng.below(APPS.len() as u64) as usize];
        let hash = format!("{:x}", rng.next_u64() & 0xff_ffff_ffff);
        let name = format!("{app}-{hash}-{}", rng.suffix(5));
        let started = created(rng);
        let cpu = 0.001 * (1 + rng.below(250)) as f64;
        let base_mib = 24 + rng.below(400);
        let mut parts = vec![part(
            app,
            cpu,
            (base_mib << 20, (base_mib + 8 + rng.below(64)) << 20),
            started,
        )];
        let wanted = 1 + rng.below(containers.max(1) as u64) as usize;
        for i in 1..wanted {
            let name = match (i, sidecar) {
                (1, Some(s)) => s.to_owned(),
                _ => format!("helper-{i}"),
            };
            parts.push(part(
                &name,
                0.001 * (1 + rng.below(20)) as f64,
                (20 << 20, 40 << 20),
                started,
            ));
        }
        // Application load comes and goes: CPU swings around its mean.
        for part in &mut parts {
            part.sim.cpu_wobble = 0.5;
        }
        // Now and then a container that crashes and restarts (counter reset, new start).
        if rng.below(17) == 0 {
            parts[0].sim.restart_every = Some(Duration::from_secs(600));
        }
        pods.push(pod(
            namespace,
            &name,
            node,
            &[("app", app), ("pod-template-hash", &hash)],
            parts,
            Vec::new(),
        ));
    }
    pods
}

/// metrics-server's e2e workloads on `node` (metrics-server.md §6.2), started two minutes
/// before `now_ms`: the cpu-consumer, the memory-consumer, the pod with a finished init
/// container, the pod with two containers and the pod with a native sidecar.
pub fn e2e_pods(node: &str, now_ms: i64) -> Vec<PlacedPod> {
    let started = now_ms - 120_000;
    let mem = |mib: u64| (mib << 20, (mib << 20) + (512 << 10));
    let labels = |app: &'static str| [("app", app)];
    let mut memory = part("memory-consumer", 0.002, mem(50), started);
    memory.sim.memory_min_bytes = MEMORY_CONSUMER_BYTES;
    memory.sim.memory_max_bytes = MEMORY_CONSUMER_BYTES + (256 << 10);
    vec![
        pod(
            E2E_NAMESPACE,
            CPU_CONSUMER,
            node,
            &labels(CPU_CONSUMER),
            vec![part("cpu-consumer", CPU_CONSUMER_CORES, mem(9), started)],
            Vec::new(),
        ),
        pod(
            E2E_NAMESPACE,
            MEMORY_CONSUMER,
            node,
            &labels(MEMORY_CONSUMER),
            vec![memory],
            Vec::new(),
        ),
        pod(
            E2E_NAMESPACE,
            INIT_CONTAINER_POD,
            node,
            &labels(INIT_CONTAINER_POD),
            vec![part(INIT_CONTAINER_POD, 0.050, mem(9), started)],
            vec![(part("init-container", 0.050, mem(9), started), false)],
        ),
        pod(
            E2E_NAMESPACE,
            SIDECAR_POD,
            node,
            &labels(SIDECAR_POD),
            vec![
                part(SIDECAR_POD, 0.050, mem(9), started),
                part("sidecar-container", 0.050, mem(9), started),
            ],
            Vec::new(),
        ),
        pod(
            E2E_NAMESPACE,
            NATIVE_SIDECAR_POD,
            node,
            &labels(NATIVE_SIDECAR_POD),
            vec![part(NATIVE_SIDECAR_POD, 0.050, mem(9), started)],
            vec![(part("sidecar-container", 0.050, mem(9), started), true)],
        ),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn generic_pods_are_deterministic_and_sized() {
        let a = generic_pods("n1", 12, 3, &mut Rng::new(7), 10_000_000);
        let b = generic_pods("n1", 12, 3, &mut Rng::new(7), 10_000_000);
        assert_eq!(a.len(), 12);
        assert_eq!(format!("{:?}", a[5].sim), format!("{:?}", b[5].sim));
        assert_eq!(a[0].namespace(), "kube-system");
        assert!(a.iter().all(|p| (1..=3).contains(&p.sim.containers.len())));
        assert!(a.iter().any(|p| p.sim.containers.len() > 1));
        for p in &a {
            assert_eq!(p.object["spec"]["nodeName"], "n1");
            assert_eq!(
                p.object["spec"]["containers"].as_array().unwrap().len(),
                p.sim.containers.len()
            );
        }
        let c = generic_pods("n1", 12, 3, &mut Rng::new(8), 10_000_000);
        assert_ne!(a[3].name(), c[3].name());
    }

    #[test]
    fn e2e_pods_report_only_running_containers() {
        let pods = e2e_pods("n1", 10_000_000);
        let by_name = |n: &str| pods.iter().find(|p| p.name() == n).unwrap();
        let init = by_name(INIT_CONTAINER_POD);
        assert_eq!(init.sim.containers.len(), 1);
        assert_eq!(
            init.object["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        let native = by_name(NATIVE_SIDECAR_POD);
        assert_eq!(native.sim.containers.len(), 2);
        assert_eq!(
            native.object["spec"]["initContainers"][0]["restartPolicy"],
            "Always"
        );
        assert_eq!(by_name(SIDECAR_POD).sim.containers.len(), 2);
        assert_eq!(
            by_name(CPU_CONSUMER).sim.containers[0].cpu_cores,
            CPU_CONSUMER_CORES
        );
    }
}
