//! An in-memory Kubernetes object server: Nodes, Pods and ConfigMaps as JSON, with a global
//! monotonically increasing `resourceVersion`, change history, list (selectors, pagination,
//! resourceVersion semantics) and watch, behaving like kube-apiserver on the wire.
//!
//! Tests mutate it directly ([`Objects::add_node`], [`Objects::set_pod_phase`],
//! [`Objects::compact`], ...); clients read it over HTTP through [`Objects::handle`], which the
//! control-plane router composes with its other handlers (it returns `None` for paths it does
//! not serve). [`serve`] is a small HTTPS server over just this handler, for tests.
//!
//! # Layout
//! - this file: the store, its history and the mutations.
//! - [`build`]: realistic Node, Pod and ConfigMap JSON.
//! - `query`: query strings, label and field selectors.
//! - `http`: routing, list, get and watch responses, Status errors.
//! - `table`: Table output for `kubectl get`.
//! - `watch`: watch streams (selector transitions, bookmarks, deadline, 410).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

pub mod build;
mod http;
mod query;
mod table;
mod watch;

pub use build::ContainerSpec;
pub use http::{Body, serve};

/// The kinds this server stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `v1` Node (cluster-scoped).
    Node,
    /// `v1` Pod.
    Pod,
    /// `v1` ConfigMap.
    ConfigMap,
}

impl Kind {
    /// The `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::ConfigMap => "ConfigMap",
        }
    }

    /// The resource in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::ConfigMap => "configmaps",
        }
    }

    /// Whether objects live in a namespace.
    pub fn namespaced(self) -> bool {
        self != Kind::Node
    }

    fn index(self) -> usize {
        match self {
            Kind::Node => 0,
            Kind::Pod => 1,
            Kind::ConfigMap => 2,
        }
    }
}

/// Errors from mutating the store.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    /// The object has no `metadata.name`.
    #[error("object has no metadata.name")]
    NoName,
    /// A namespaced object has no `metadata.namespace`.
    #[error("{0} object has no metadata.namespace")]
    NoNamespace(&'static str),
    /// The object is not a JSON object.
    #[error("not a JSON object")]
    NotAnObject,
}

/// (namespace, name); the namespace is empty for nodes.
pub(crate) type Key = (String, String);

/// One change, as the watch cache keeps it: the object before and after.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) kind: Kind,
    pub(crate) key: Key,
    /// The object before the change (`None`: it was created).
    pub(crate) prev: Option<Arc<Value>>,
    /// The object after the change (`None`: it was deleted).
    pub(crate) cur: Option<Arc<Value>>,
}

#[derive(Debug)]
pub(crate) struct State {
    /// The newest resourceVersion handed out.
    pub(crate) rv: u64,
    pub(crate) objects: [BTreeMap<Key, Arc<Value>>; 3],
    /// Every change with `rv > compacted_rv`, oldest first.
    pub(crate) history: VecDeque<Change>,
    pub(crate) compacted_rv: u64,
    history_limit: usize,
}

impl State {
    pub(crate) fn map(&self, kind: Kind) -> &BTreeMap<Key, Arc<Value>> {
        &self.objects[kind.index()]
    }

    /// The changes after `rv`, oldest first (`rv` must not be older than `compacted_rv`).
    pub(crate) fn changes_after(&self, rv: u64) -> impl Iterator<Item = &Change> {
        let start = self.history.partition_point(|c| c.rv <= rv);
        self.history.range(start..)
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_rv = dropped.rv;
            }
        }
    }
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Carries the newest resourceVersion to waiting watchers.
    pub(crate) changed: tokio::sync::watch::Sender<u64>,
    pub(crate) bookmark_interval: Duration,
    /// The default watch duration when the client gives no `timeoutSeconds`.
    pub(crate) default_watch_timeout: Duration,
    /// While set, open watches deliver nothing (a partitioned or stalled watch).
    pub(crate) paused: AtomicBool,
    /// Bumped by [`Objects::drop_watches`]: every watch opened before breaks off.
    pub(crate) dropped: AtomicU64,
    /// List requests answered (each page counts).
    pub(crate) lists_served: AtomicU64,
    /// Watch requests answered.
    pub(crate) watches_served: AtomicU64,
}

/// The store and HTTP handler. Cloning gives another handle to the same store.
#[derive(Clone)]
pub struct Objects {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Objects")
            .field("resource_version", &state.rv)
            .field("nodes", &state.map(Kind::Node).len())
            .field("pods", &state.map(Kind::Pod).len())
            .field("configmaps", &state.map(Kind::ConfigMap).len())
            .finish()
    }
}

impl Default for Objects {
    fn default() -> Self {
        Objects::new()
    }
}

/// Changes kept for watches by default (kube-apiserver's watch cache keeps a time window).
pub const DEFAULT_HISTORY_LIMIT: usize = 100_000;

impl Objects {
    /// An empty store: bookmarks every 60 s (as kube-apiserver), default history.
    pub fn new() -> Self {
        Objects::with_options(Duration::from_secs(60), DEFAULT_HISTORY_LIMIT)
    }

    /// An empty store with this bookmark interval and this many changes kept for watches.
    pub fn with_options(bookmark_interval: Duration, history_limit: usize) -> Self {
        // kube-apiserver starts well above zero; so do we, so "0" is never a real version.
        let rv = 1000;
        let (changed, _) = tokio::sync::watch::channel(rv);
        Objects {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rv,
                    objects: Default::default(),
                    history: VecDeque::new(),
                    compacted_rv: rv,
                    history_limit: history_limit.max(1),
                }),
                changed,
                bookmark_interval,
                default_watch_timeout: Duration::from_secs(1800),
                paused: AtomicBool::new(false),
                dropped: AtomicU64::new(0),
                lists_served: AtomicU64::new(0),
                watches_served: AtomicU64::new(0),
            }),
        }
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state.lock().rv
    }

    /// Creates or replaces an object; sets `kind`, `apiVersion`, `resourceVersion`, and a
    /// `uid` and `creationTimestamp` when missing (kept from the previous version when there
    /// is one). Returns the new resourceVersion.
    pub fn put(&self, kind: Kind, mut object: Value) -> Result<u64, ObjectError> {
        let meta = object
            .as_object_mut()
            .ok_or(ObjectError::NotAnObject)?
            .entry("metadata")
            .or_insert_with(|| json!({}));
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(ObjectError::NoName)?
            .to_owned();
        let namespace = if kind.namespaced() {
            meta.get("namespace")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or(ObjectError::NoNamespace(kind.name()))?
                .to_owned()
        } else {
            String::new()
        };
        let key = (namespace, name);
        let mut state = self.shared.state.lock();
        let prev = state.objects[kind.index()].get(&key).cloned();
        let rv = state.rv + 1;
        state.rv = rv;
        object["kind"] = json!(kind.name());
        object["apiVersion"] = json!("v1");
        let meta = &mut object["metadata"];
        meta["resourceVersion"] = json!(rv.to_string());
        for field in ["uid", "creationTimestamp"] {
            if meta.get(field).is_none_or(Value::is_null) {
                meta[field] = match prev.as_ref().map(|p| &p["metadata"][field]) {
                    Some(old) if !old.is_null() => old.clone(),
                    _ if field == "uid" => json!(build::uid(kind, &key.0, &key.1)),
                    _ => json!(build::now_rfc3339()),
                };
            }
        }
        let cur = Arc::new(object);
        state.objects[kind.index()].insert(key.clone(), cur.clone());
        state.record(Change {
            rv,
            kind,
            key,
            prev,
            cur: Some(cur),
        });
        drop(state);
        self.shared.changed.send_replace(rv);
        Ok(rv)
    }

    /// Deletes an object; returns the resourceVersion of the deletion, or `None` when it did
    /// not exist.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Option<u64> {
        let key = (
            if kind.namespaced() { namespace } else { "" }.to_owned(),
            name.to_owned(),
        );
        let mut state = self.shared.state.lock();
        let prev = state.objects[kind.index()].remove(&key)?;
        let rv = state.rv + 1;
        state.rv = rv;
        state.record(Change {
            rv,
            kind,
            key,
            prev: Some(prev),
            cur: None,
        });
        drop(state);
        self.shared.changed.send_replace(rv);
        Some(rv)
    }

    /// The current version of an object.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let key = (
            if kind.namespaced() { namespace } else { "" }.to_owned(),
            name.to_owned(),
        );
        self.shared.state.lock().objects[kind.index()]
            .get(&key)
            .map(|v| (**v).clone())
    }

    /// Every object of a kind, sorted by namespace then name.
    pub fn all(&self, kind: Kind) -> Vec<Value> {
        self.shared.state.lock().objects[kind.index()]
            .values()
            .map(|v| (**v).clone())
            .collect()
    }

    /// Adds or replaces a Ready node built by [`build::node_json`].
    pub fn add_node(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        addresses: &[(&str, &str)],
        kubelet_port: u16,
    ) -> u64 {
        self.put_built(
            Kind::Node,
            build::node_json(name, labels, addresses, kubelet_port),
        )
    }

    /// Adds or replaces a pod built by [`build::pod_json`].
    pub fn add_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: &[(&str, &str)],
        phase: &str,
        containers: &[ContainerSpec],
    ) -> u64 {
        let pod = build::pod_json(namespace, name, node, labels, phase, containers);
        self.put_built(Kind::Pod, pod)
    }

    /// Sets a pod's `status.phase`; returns the new resourceVersion, or `None` when the pod
    /// does not exist.
    pub fn set_pod_phase(&self, namespace: &str, name: &str, phase: &str) -> Option<u64> {
        let mut pod = self.get(Kind::Pod, namespace, name)?;
        pod["status"]["phase"] = json!(phase);
        self.put(Kind::Pod, pod).ok()
    }

    /// Deletes a node.
    pub fn delete_node(&self, name: &str) -> Option<u64> {
        self.delete(Kind::Node, "", name)
    }

    /// Deletes a pod.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Option<u64> {
        self.delete(Kind::Pod, namespace, name)
    }

    /// Deletes a ConfigMap.
    pub fn delete_configmap(&self, namespace: &str, name: &str) -> Option<u64> {
        self.delete(Kind::ConfigMap, namespace, name)
    }

    /// Creates or replaces a ConfigMap with this `data`.
    pub fn upsert_configmap(
        &self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> u64 {
        self.put_built(
            Kind::ConfigMap,
            build::configmap_json(namespace, name, data),
        )
    }

    /// Drops every change from the history, as etcd compaction does: a watch or an exact list
    /// from any resourceVersion before now gets `410 Gone`.
    pub fn compact(&self) {
        let mut state = self.shared.state.lock();
        state.history.clear();
        state.compacted_rv = state.rv;
    }

    /// Stops every open watch from delivering events until [`Objects::resume_watches`], so a
    /// test can make changes a watcher misses (then [`Objects::compact`] to force a relist).
    pub fn pause_watches(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
    }

    /// Lets open watches deliver again (from where each stopped, or a 410 if compacted).
    pub fn resume_watches(&self) {
        self.shared.paused.store(false, Ordering::SeqCst);
        self.shared.changed.send_modify(|_| {});
    }

    /// Breaks off every open watch mid-stream (its connection reset, as when a
    /// kube-apiserver restarts or a load balancer drops it); watches opened afterwards work.
    pub fn drop_watches(&self) {
        self.shared.dropped.fetch_add(1, Ordering::SeqCst);
        self.shared.changed.send_modify(|_| {});
    }

    /// How many watch requests have been answered: a reconnect shows up here.
    pub fn watches_served(&self) -> u64 {
        self.shared.watches_served.load(Ordering::SeqCst)
    }

    /// How many list requests (pages) have been answered: a relist shows up here.
    pub fn lists_served(&self) -> u64 {
        self.shared.lists_served.load(Ordering::SeqCst)
    }

    fn put_built(&self, kind: Kind, object: Value) -> u64 {
        match self.put(kind, object) {
            Ok(rv) => rv,
            // The builders always set a name and, for namespaced kinds, a namespace.
            Err(error) => unreachable!("built {} is invalid: {error}", kind.name()),
        }
    }
}
