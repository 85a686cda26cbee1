//! Feeding the inventory from the Kubernetes API (list + watch).
//!
//! Two kube-runtime watchers, one on Nodes and one on Pods with
//! `fieldSelector=status.phase=Running`, decode straight into [`SlimNode`] and [`SlimPod`]:
//! serde skips everything else (managedFields, spec, conditions) without building it, so a
//! 150,000-pod relist never holds full objects. A (re)list is buffered and swapped into the
//! [`Inventory`] at `InitDone`, so a relist after `410 Gone` drops objects deleted meanwhile.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use kube::{Api, Resource};
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use tokio_util::sync::CancellationToken;

use super::{Interner, Inventory, NodeAddress, NodeRecord, PodRecord};
use crate::point::{NodeName, PodKey};

/// The node annotation that overrides the kubelet path (`/metrics/resource` by default), as in
/// metrics-server's `AnnotationResourceMetricsPath` (`pkg/scraper/client/resource/client.go`).
pub const METRICS_PATH_ANNOTATION: &str = "metrics.k8s.io/resource-metrics-path";

/// The field selector of the pod watch: only Running pods exist for the metrics API.
pub const RUNNING_PODS: &str = "status.phase=Running";

/// The metadata a slim object keeps.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: MetricsPathAnnotation,
}

impl SlimMeta {
    /// The `ObjectMeta` kube-runtime reads: name, namespace, uid and resourceVersion only.
    fn split(self) -> (ObjectMeta, Vec<(String, String)>, Option<String>) {
        let meta = ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            ..ObjectMeta::default()
        };
        let labels = self.labels.unwrap_or_default().into_iter().collect();
        (meta, labels, self.annotations.0)
    }
}

/// `metadata.annotations`, of which only [`METRICS_PATH_ANNOTATION`] is kept; other keys are
/// compared without being copied and their values skipped.
#[derive(Default)]
struct MetricsPathAnnotation(Option<String>);

impl<'de> Deserialize<'de> for MetricsPathAnnotation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = MetricsPathAnnotation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations or null")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(MetricsPathAnnotation(None))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(MetricsPathAnnotation(None))
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                d.deserialize_map(MapVisitor)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<IsMetricsPath>()? {
                    if key.0 {
                        found = Some(map.next_value::<String>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(MetricsPathAnnotation(found))
            }
        }
        deserializer.deserialize_option(MapVisitor)
    }
}

/// An annotation key, reduced to whether it is [`METRICS_PATH_ANNOTATION`].
struct IsMetricsPath(bool);

impl<'de> Deserialize<'de> for IsMetricsPath {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = IsMetricsPath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an annotation key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(IsMetricsPath(v == METRICS_PATH_ANNOTATION))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodSpecWire {
    #[serde(default)]
    node_name: Option<String>,
}

#[derive(Deserialize, Default)]
struct PodStatusWire {
    #[serde(default)]
    phase: Option<String>,
}

#[derive(Deserialize)]
struct PodWire {
    #[serde(default)]
    metadata: SlimMeta,
    #[serde(default)]
    spec: Option<PodSpecWire>,
    #[serde(default)]
    status: Option<PodStatusWire>,
}

#[derive(Deserialize)]
struct AddressWire {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    address: String,
}

#[derive(Deserialize, Default)]
struct KubeletEndpointWire {
    #[serde(rename = "Port", default)]
    port: i64,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DaemonEndpointsWire {
    #[serde(default)]
    kubelet_endpoint: Option<KubeletEndpointWire>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NodeStatusWire {
    #[serde(default)]
    addresses: Option<Vec<AddressWire>>,
    #[serde(default)]
    daemon_endpoints: Option<DaemonEndpointsWire>,
}

#[derive(Deserialize)]
struct NodeWire {
    #[serde(default)]
    metadata: SlimMeta,
    #[serde(default)]
    status: Option<NodeStatusWire>,
}

/// A Pod as the watcher decodes it: only what the inventory keeps, plus the metadata
/// kube-runtime needs (name, namespace, uid, resourceVersion).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "PodWire")]
pub struct SlimPod {
    /// Name, namespace, uid and resourceVersion; every other field is unset.
    pub meta: ObjectMeta,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
}

impl From<PodWire> for SlimPod {
    fn from(wire: PodWire) -> Self {
        let (meta, labels, _) = wire.metadata.split();
        SlimPod {
            meta,
            labels,
            node_name: wire.spec.and_then(|s| s.node_name),
            phase: wire.status.and_then(|s| s.phase),
        }
    }
}

impl SlimPod {
    /// Whether `status.phase` is `Running`.
    pub fn is_running(&self) -> bool {
        self.phase.as_deref() == Some("Running")
    }

    /// The record kept in the inventory, or `None` when the pod has no namespace or name.
    pub fn to_record(&self, interner: &Interner) -> Option<PodRecord> {
        let namespace = self.meta.namespace.as_deref().filter(|s| !s.is_empty())?;
        let name = self.meta.name.as_deref().filter(|s| !s.is_empty())?;
        Some(PodRecord {
            usage: crate::store::UsageLink::new(),
            key: PodKey {
                namespace: interner.string(namespace),
                name: Arc::from(name),
            },
            labels: interner.labels(self.labels.iter().map(|(k, v)| (&**k, &**v))),
            node_name: self
                .node_name
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(|n| NodeName(interner.string(n))),
        })
    }
}

/// Implements kube's [`Resource`] for a slim core/v1 object whose metadata is its `meta`.
macro_rules! core_v1_resource {
    ($ty:ty, $scope:ty, $kind:literal, $plural:literal) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("")
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.meta
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.meta
            }
        }
    };
}

core_v1_resource!(SlimPod, k8s_openapi::NamespaceResourceScope, "Pod", "pods");

/// A Node as the watcher decodes it: only what the inventory keeps, plus the metadata
/// kube-runtime needs (name, uid, resourceVersion).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "NodeWire")]
pub struct SlimNode {
    /// Name, uid and resourceVersion; every other field is unset.
    pub meta: ObjectMeta,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// The [`METRICS_PATH_ANNOTATION`] annotation.
    pub metrics_path: Option<String>,
    /// `status.addresses` as (type, address), in order.
    pub addresses: Vec<(String, String)>,
    /// `status.daemonEndpoints.kubeletEndpoint.Port`, when it is a valid non-zero port.
    pub kubelet_port: Option<u16>,
}

impl From<NodeWire> for SlimNode {
    fn from(wire: NodeWire) -> Self {
        let (meta, labels, metrics_path) = wire.metadata.split();
        let status = wire.status.unwrap_or_default();
        let addresses = status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.kind, a.address))
            .collect();
        let kubelet_port = status
            .daemon_endpoints
            .and_then(|d| d.kubelet_endpoint)
            .and_then(|k| u16::try_from(k.port).ok())
            .filter(|&port| port != 0);
        SlimNode {
            meta,
            labels,
            metrics_path,
            addresses,
            kubelet_port,
        }
    }
}

impl SlimNode {
    /// The record kept in the inventory, or `None` when the node has no name.
    pub fn to_record(&self, interner: &Interner) -> Option<NodeRecord> {
        let name = self.meta.name.as_deref().filter(|s| !s.is_empty())?;
        Some(NodeRecord {
            name: NodeName(interner.string(name)),
            labels: interner.labels(self.labels.iter().map(|(k, v)| (&**k, &**v))),
            addresses: self
                .addresses
                .iter()
                .map(|(kind, address)| NodeAddress {
                    kind: interner.string(kind),
                    address: Arc::from(address.as_str()),
                })
                .collect(),
            kubelet_port: self.kubelet_port,
            metrics_path: self.metrics_path.as_deref().map(Arc::from),
        })
    }
}

core_v1_resource!(SlimNode, k8s_openapi::ClusterResourceScope, "Node", "nodes");

/// Applies watcher events for one kind to the inventory, buffering a (re)list until it is
/// complete.
pub(crate) trait Sink {
    /// The decoded object.
    type Object;
    /// The record kept.
    type Record;
    /// The record for an applied object, or `None` when it does not belong in the inventory.
    fn record(&self, object: &Self::Object) -> Option<Self::Record>;
    /// Stores one record.
    fn upsert(&self, record: Self::Record);
    /// Removes the object (deleted, or no longer belongs).
    fn remove(&self, object: &Self::Object);
    /// Swaps in a complete list.
    fn replace(&self, records: Vec<Self::Record>);
}

pub(crate) struct Nodes<'a>(pub(crate) &'a Inventory);

impl Sink for Nodes<'_> {
    type Object = SlimNode;
    type Record = NodeRecord;
    fn record(&self, node: &SlimNode) -> Option<NodeRecord> {
        node.to_record(self.0.interner())
    }
    fn upsert(&self, record: NodeRecord) {
        self.0.upsert_node(record);
    }
    fn remove(&self, node: &SlimNode) {
        if let Some(name) = node.meta.name.as_deref() {
            self.0.remove_node(name);
        }
    }
    fn replace(&self, records: Vec<NodeRecord>) {
        self.0.replace_nodes(records);
    }
}

pub(crate) struct Pods<'a>(pub(crate) &'a Inventory);

impl Sink for Pods<'_> {
    type Object = SlimPod;
    type Record = PodRecord;
    fn record(&self, pod: &SlimPod) -> Option<PodRecord> {
        // The field selector already excludes other phases; a pod that finished is normally
        // sent as a deletion, but one arriving as an update is dropped all the same.
        if !pod.is_running() {
            return None;
        }
        pod.to_record(self.0.interner())
    }
    fn upsert(&self, record: PodRecord) {
        self.0.upsert_pod(record);
    }
    fn remove(&self, pod: &SlimPod) {
        if let (Some(namespace), Some(name)) =
            (pod.meta.namespace.as_deref(), pod.meta.name.as_deref())
        {
            self.0.remove_pod(namespace, name);
        }
    }
    fn replace(&self, records: Vec<PodRecord>) {
        self.0.replace_pods(records);
    }
}

/// The state of one watcher between events: the (re)list being buffered.
pub(crate) struct Applier<S: Sink> {
    sink: S,
    buffer: Vec<S::Record>,
}

impl<S: Sink> Applier<S> {
    pub(crate) fn new(sink: S) -> Self {
        Applier {
            sink,
            buffer: Vec::new(),
        }
    }

    pub(crate) fn apply(&mut self, event: Event<S::Object>) {
        match event {
            Event::Init => self.buffer.clear(),
            Event::InitApply(object) => {
                if let Some(record) = self.sink.record(&object) {
                    self.buffer.push(record);
                }
            }
            Event::InitDone => {
                let records = std::mem::take(&mut self.buffer);
                self.sink.replace(records);
            }
            Event::Apply(object) => match self.sink.record(&object) {
                Some(record) => self.sink.upsert(record),
                None => self.sink.remove(&object),
            },
            Event::Delete(object) => self.sink.remove(&object),
        }
    }
}

/// Runs one watcher until `shutdown`, retrying with kube-runtime's default backoff.
async fn drive<S>(
    api: Api<S::Object>,
    config: watcher::Config,
    sink: S,
    what: &'static str,
    shutdown: &CancellationToken,
) where
    S: Sink,
    S::Object: Resource<DynamicType = ()>
        + Clone
        + fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let mut applier = Applier::new(sink);
    let mut events = std::pin::pin!(watch_stream(api, config).default_backoff());
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => {
                if matches!(event, Event::InitDone) {
                    tracing::debug!(kind = what, "inventory list complete");
                }
                applier.apply(event);
            }
            Some(Err(error)) => {
                tracing::warn!(kind = what, error = %error, "inventory watch failed; retrying");
            }
            // The watcher stream never ends on its own; should it, the caller starts another.
            None => {
                tracing::error!(kind = what, "inventory watch stream ended; restarting");
                return;
            }
        }
    }
}

/// Runs watchers of one kind one after the other until `shutdown`.
async fn keep_driving<S, F>(make: F, what: &'static str, shutdown: &CancellationToken)
where
    F: Fn() -> (Api<S::Object>, watcher::Config, S),
    S: Sink,
    S::Object: Resource<DynamicType = ()>
        + Clone
        + fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    while !shutdown.is_cancelled() {
        let (api, config, sink) = make();
        drive(api, config, sink, what, shutdown).await;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RESTART_DELAY) => {}
        }
    }
}

/// The pause before a new watcher replaces one whose stream ended.
const RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Watches Nodes and Running Pods until `shutdown`, keeping `inventory` current.
///
/// Works with any `kube::Client` (in-cluster or from a kubeconfig). Errors are logged and
/// retried with backoff; this returns only once `shutdown` is cancelled.
pub async fn run(client: kube::Client, inventory: Arc<Inventory>, shutdown: CancellationToken) {
    let nodes = keep_driving(
        || {
            (
                Api::<SlimNode>::all(client.clone()),
                watcher::Config::default(),
                Nodes(&inventory),
            )
        },
        "Node",
        &shutdown,
    );
    let pods = keep_driving(
        || {
            (
                Api::<SlimPod>::all(client.clone()),
                watcher::Config::default().fields(RUNNING_PODS),
                Pods(&inventory),
            )
        },
        "Pod",
        &shutdown,
    );
    tokio::join!(nodes, pods);
}
