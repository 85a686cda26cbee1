//! Which nodes and Running pods exist, as slim records. Owned by the client/scrape work;
//! this is the agreed public surface. The watchers that feed it live in `inventory::watch`.

use std::sync::Arc;

use crate::point::{NodeName, PodKey};

/// Labels of a node or pod: sorted by key, strings interned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(pub Arc<[(Arc<str>, Arc<str>)]>);

impl Labels {
    /// The value of a label.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Every (key, value), sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// No labels at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One `status.addresses` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    /// `Hostname`, `InternalDNS`, `InternalIP`, `ExternalDNS`, `ExternalIP`.
    pub kind: Arc<str>,
    /// The address.
    pub address: Arc<str>,
}

/// What is kept of a Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    /// `metadata.name`.
    pub name: NodeName,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `status.addresses`, in order.
    pub addresses: Vec<NodeAddress>,
    /// `status.daemonEndpoints.kubeletEndpoint.Port`, when non-zero.
    pub kubelet_port: Option<u16>,
    /// The `metrics.k8s.io/resource-metrics-path` annotation.
    pub metrics_path: Option<Arc<str>>,
}

/// What is kept of a Running Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    /// Namespace and name.
    pub key: PodKey,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `spec.nodeName`.
    pub node_name: Option<NodeName>,
}

/// The inventory.
#[derive(Debug, Default)]
pub struct Inventory {}

impl Inventory {
    /// An empty inventory.
    pub fn new() -> Self {
        Inventory {}
    }

    /// Adds or replaces a node.
    pub fn upsert_node(&self, node: NodeRecord) {
        let _ = node;
    }

    /// Removes a node.
    pub fn remove_node(&self, name: &str) {
        let _ = name;
    }

    /// Adds or replaces a pod.
    pub fn upsert_pod(&self, pod: PodRecord) {
        let _ = pod;
    }

    /// Removes a pod.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        let _ = (namespace, name);
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        let _ = name;
        None
    }

    /// Every node, sorted by name.
    pub fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        Vec::new()
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        let _ = (namespace, name);
        None
    }

    /// Every pod of a namespace (or of all namespaces), sorted by namespace then name.
    pub fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        let _ = namespace;
        Vec::new()
    }

    /// Whether the initial list of both nodes and pods has completed.
    pub fn synced(&self) -> bool {
        false
    }
}

/// Feeding the inventory from the Kubernetes API (list + watch).
pub mod watch {
    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use super::Inventory;

    /// Watches Nodes and Running Pods until `shutdown`, keeping `inventory` current.
    pub async fn run(client: kube::Client, inventory: Arc<Inventory>, shutdown: CancellationToken) {
        let _ = (client, inventory);
        shutdown.cancelled().await;
    }
}
