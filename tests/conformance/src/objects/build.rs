//! Realistic Node, Pod and ConfigMap JSON, shaped like what kube-apiserver serves for a kind
//! cluster (`kubectl top` reads node allocatable and pod containers from these).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::Kind;

/// One container of a built pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSpec {
    /// `name`.
    pub name: String,
    /// `resources.requests.cpu`, a Kubernetes quantity (`100m`).
    pub cpu_request: String,
    /// `resources.requests.memory`, a Kubernetes quantity (`128Mi`).
    pub memory_request: String,
    /// `resources.limits.memory`, when set.
    pub memory_limit: Option<String>,
}

impl ContainerSpec {
    /// A container requesting `100m` CPU and `128Mi` memory, limited to `256Mi`.
    pub fn new(name: &str) -> Self {
        ContainerSpec {
            name: name.to_owned(),
            cpu_request: "100m".to_owned(),
            memory_request: "128Mi".to_owned(),
            memory_limit: Some("256Mi".to_owned()),
        }
    }
}

/// Seconds since the Unix epoch as RFC 3339 (`2025-06-02T09:14:31Z`).
pub fn rfc3339(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The simulated API server's clock, as RFC 3339: this server is where `creationTimestamp`
/// and `startTime` come from.
pub fn now_rfc3339() -> String {
    let unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    rfc3339(unix_s)
}

/// A stable UUID-shaped uid derived from the object's identity (FNV-1a).
pub fn uid(kind: Kind, namespace: &str, name: &str) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in kind
        .name()
        .bytes()
        .chain([0])
        .chain(namespace.bytes())
        .chain([0])
        .chain(name.bytes())
    {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    let hex = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn labels_map(labels: &[(&str, &str)]) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect::<Map<String, Value>>(),
    )
}

/// A Ready Linux node with 4 CPUs and 16 GiB, kubelet v1.33, the given labels (plus the
/// standard `kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch` unless given),
/// `status.addresses` as (type, address) and `daemonEndpoints.kubeletEndpoint.Port`.
pub fn node_json(
    name: &str,
    labels: &[(&str, &str)],
    addresses: &[(&str, &str)],
    kubelet_port: u16,
) -> Value {
    let mut all_labels = labels_map(&[
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
    ]);
    for (k, v) in labels {
        all_labels[*k] = json!(v);
    }
    let now = now_rfc3339();
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|(kind, address)| json!({"type": kind, "address": address}))
        .collect();
    let resources = json!({
        "cpu": "4",
        "ephemeral-storage": "102626232Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "16393216Ki",
        "pods": "110"
    });
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true"
            },
            "managedFields": [{
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:addresses": {}, "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}}}},
                "subresource": "status"
            }]
        },
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"], "providerID": format!("kind://docker/kind/{name}")},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            ],
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": uid(Kind::Node, "machine", name).replace('-', ""),
                "systemUUID": uid(Kind::Node, "system", name),
                "bootID": uid(Kind::Node, "boot", name),
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.18",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64"
            }
        }
    })
}

/// A pod on `node` in `phase` (`Running`, `Pending`, `Succeeded`, ...) with these labels and
/// containers (each with requests and limits and, unless Pending, a container status).
pub fn pod_json(
    namespace: &str,
    name: &str,
    node: &str,
    labels: &[(&str, &str)],
    phase: &str,
    containers: &[ContainerSpec],
) -> Value {
    let now = now_rfc3339();
    let specs: Vec<Value> = containers
        .iter()
        .map(|c| {
            let mut resources =
                json!({"requests": {"cpu": c.cpu_request, "memory": c.memory_request}});
            if let Some(limit) = &c.memory_limit {
                resources["limits"] = json!({"memory": limit});
            }
            json!({
                "name": c.name,
                "image": "registry.k8s.io/e2e-test-images/resource-consumer:1.9",
                "resources": resources,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            })
        })
        .collect();
    let running = phase == "Running";
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let state = match phase {
                "Running" => json!({"running": {"startedAt": now}}),
                "Succeeded" => json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}),
                "Failed" => json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}),
                _ => json!({"waiting": {"reason": "ContainerCreating"}}),
            };
            json!({
                "name": c.name,
                "state": state,
                "ready": running,
                "restartCount": 0,
                "image": "registry.k8s.io/e2e-test-images/resource-consumer:1.9",
                "imageID": "registry.k8s.io/e2e-test-images/resource-consumer@sha256:89f6fb2a1ae5d7e1f4d2c6b1a8e3b6c40b2b6a7b1c4a7d8e9f0a1b2c3d4e5f60",
                "containerID": format!("containerd://{}", uid(Kind::Pod, name, &c.name).replace('-', "")),
                "started": running
            })
        })
        .collect();
    let ready = if running { "True" } else { "False" };
    let mut pod = json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels_map(labels),
            "managedFields": [{
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}, "f:startTime": {}}},
                "subresource": "status"
            }]
        },
        "spec": {
            "containers": specs,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "priority": 0
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastProbeTime": null, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastProbeTime": null, "lastTransitionTime": now}
            ],
            "hostIP": "172.18.0.2",
            "podIP": "10.244.0.10",
            "startTime": now,
            "containerStatuses": statuses,
            "qosClass": "Burstable"
        }
    });
    if node.is_empty()
        && let Some(spec) = pod["spec"].as_object_mut()
    {
        spec.remove("nodeName");
    }
    pod
}

/// A ConfigMap with this `data`.
pub fn configmap_json(namespace: &str, name: &str, data: &BTreeMap<String, String>) -> Value {
    json!({
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "data": data
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_748_855_671), "2025-06-02T09:14:31Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn uids_are_stable_and_distinct() {
        assert_eq!(uid(Kind::Pod, "a", "b"), uid(Kind::Pod, "a", "b"));
        assert_ne!(uid(Kind::Pod, "a", "b"), uid(Kind::Pod, "ab", ""));
        assert_eq!(uid(Kind::Node, "", "n").len(), 36);
    }
}
