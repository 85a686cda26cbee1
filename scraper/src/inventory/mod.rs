//! Which nodes and Running pods exist, as slim records.
//!
//! The [`Inventory`] is written by the watchers in [`watch`] and read by the scrape loop (which
//! nodes to scrape) and the API (which pods exist, their labels). Readers copy `Arc`s out
//! under a read lock and release it at once; a relist swaps a whole map in one step, so a
//! reader never sees a half-empty inventory. Label strings and whole label sets are interned
//! ([`Interner`]): the pods of one ReplicaSet share one `Labels` allocation.
//!
//! Mirrors metrics-server's node informer and metadata-only pod informer with
//! `fieldSelector=status.phase=Running` (`pkg/server/config.go`), without keeping objects.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::point::{NodeName, PodKey};
use crate::selector::LabelSelector;
use crate::store::UsageLink;

use index::LabelIndex;

mod index;
pub mod watch;

#[cfg(test)]
mod tests;

/// Labels of a node or pod: sorted by key, strings interned, with the encodings the API
/// writes of them kept beside the pairs ([`Labels::encoded`]).
///
/// Cloning shares the set. Equality and hashing are those of the pairs.
#[derive(Clone)]
pub struct Labels(Arc<SharedLabels>);

/// What the holders of a [`Labels`] share: the pairs and, once asked for, each
/// [`Encoding`] of them.
#[derive(Default)]
struct SharedLabels {
    pairs: Box<[(Arc<str>, Arc<str>)]>,
    encoded: [OnceLock<Box<[u8]>>; Encoding::COUNT],
}

/// The forms of a label set the API writes: a list of 150,000 pods writes the labels of each,
/// and most pods share their set with the other replicas of their ReplicaSet, so each set is
/// encoded once per form and copied after that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// JSON `metadata.labels`.
    Json = 0,
    /// Protobuf `ObjectMeta.labels` entries.
    Protobuf = 1,
}

impl Encoding {
    const COUNT: usize = 2;
}

impl Labels {
    /// A label set of these pairs, which must be sorted by key without duplicates (the
    /// [`Interner`] sorts and shares them).
    pub fn new(pairs: impl Into<Box<[(Arc<str>, Arc<str>)]>>) -> Self {
        let pairs = pairs.into();
        if pairs.is_empty() {
            return Labels::default();
        }
        Labels(Arc::new(SharedLabels {
            pairs,
            encoded: Default::default(),
        }))
    }

    /// Every pair, sorted by key.
    pub fn pairs(&self) -> &[(Arc<str>, Arc<str>)] {
        &self.0.pairs
    }

    /// Whether both are the same shared set (not merely equal).
    pub fn ptr_eq(&self, other: &Labels) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The value of a label.
    pub fn get(&self, key: &str) -> Option<&str> {
        let pairs = self.pairs();
        pairs
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*pairs[i].1)
    }

    /// Every (key, value), sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs().iter().map(|(k, v)| (&**k, &**v))
    }

    /// No labels at all.
    pub fn is_empty(&self) -> bool {
        self.pairs().is_empty()
    }

    /// The set written in `encoding`: `encode`'s output the first time it is asked for by
    /// any holder of the set, the same bytes after that. `encode` must depend on the pairs
    /// only.
    pub fn encoded(&self, encoding: Encoding, encode: impl FnOnce(&Labels) -> Vec<u8>) -> &[u8] {
        self.0.encoded[encoding as usize].get_or_init(|| encode(self).into_boxed_slice())
    }

    /// How many holders share this set (the interner's purge drops sets only it holds).
    fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

/// The empty set, shared: records without labels allocate nothing for them.
static NO_LABELS: LazyLock<Labels> = LazyLock::new(|| Labels(Arc::default()));

impl Default for Labels {
    fn default() -> Self {
        NO_LABELS.clone()
    }
}

impl From<Vec<(Arc<str>, Arc<str>)>> for Labels {
    fn from(pairs: Vec<(Arc<str>, Arc<str>)>) -> Self {
        Labels::new(pairs)
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.pairs() == other.pairs()
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pairs().hash(state);
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
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
    /// Where the store keeps this pod's usage, once a read has looked it up
    /// ([`crate::store::Store::pod_linked`]): the cluster-wide list's shortcut past the
    /// store's hash lookup. Not part of equality; empty in a clone.
    pub usage: UsageLink,
}

/// A label set in the interner, looked up by its slice so a probe needs no allocation.
#[derive(Debug, PartialEq, Eq)]
struct LabelSet(Labels);

impl Hash for LabelSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.pairs().hash(state);
    }
}

impl std::borrow::Borrow<[(Arc<str>, Arc<str>)]> for LabelSet {
    fn borrow(&self) -> &[(Arc<str>, Arc<str>)] {
        self.0.pairs()
    }
}

#[derive(Debug, Default)]
struct InternerState {
    strings: HashSet<Arc<str>>,
    label_sets: HashSet<LabelSet>,
    /// Entry count above which the next insertion purges unused entries.
    purge_at: usize,
}

/// The smallest `purge_at`: below this many entries the interner never purges.
const INTERNER_MIN_PURGE_AT: usize = 4096;

impl InternerState {
    fn string(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.strings.get(s) {
            return found.clone();
        }
        let new: Arc<str> = Arc::from(s);
        self.strings.insert(new.clone());
        self.maybe_purge();
        new
    }

    fn maybe_purge(&mut self) {
        if self.strings.len() + self.label_sets.len() > self.purge_at.max(INTERNER_MIN_PURGE_AT) {
            self.purge();
        }
    }

    /// Drops every entry nobody but the interner holds (label sets first: they hold strings).
    fn purge(&mut self) {
        self.label_sets.retain(|set| set.0.holders() > 1);
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.purge_at = 2 * (self.strings.len() + self.label_sets.len());
    }
}

/// Shares label keys, values, namespaces, node names and whole label sets between records.
///
/// Entries that no record uses any more are dropped when the interner has doubled since the
/// last purge and at every relist, so label churn (a new `pod-template-hash` per rollout)
/// does not grow it without bound.
#[derive(Debug, Default)]
pub struct Interner {
    state: Mutex<InternerState>,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Self {
        Interner::default()
    }

    /// The shared copy of `s`.
    pub fn string(&self, s: &str) -> Arc<str> {
        self.state.lock().string(s)
    }

    /// The shared label set for these pairs (any order; for a duplicated key the last wins).
    pub fn labels<'a, I>(&self, pairs: I) -> Labels
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut sorted: Vec<(&str, &str)> = pairs.into_iter().collect();
        if sorted.is_empty() {
            return Labels::default();
        }
        // Stable sort keeps input order within a key, so the dedup below keeps the last one.
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut deduped: Vec<(&str, &str)> = Vec::with_capacity(sorted.len());
        for pair in sorted {
            match deduped.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => deduped.push(pair),
            }
        }
        let mut state = self.state.lock();
        let interned: Vec<(Arc<str>, Arc<str>)> = deduped
            .into_iter()
            .map(|(k, v)| (state.string(k), state.string(v)))
            .collect();
        if let Some(found) = state.label_sets.get(&interned[..]) {
            return found.0.clone();
        }
        let labels = Labels::new(interned);
        state.label_sets.insert(LabelSet(labels.clone()));
        state.maybe_purge();
        labels
    }

    /// Drops every entry no record holds any more.
    pub fn purge(&self) {
        self.state.lock().purge();
    }

    /// How many strings and label sets are held.
    pub fn len(&self) -> usize {
        let state = self.state.lock();
        state.strings.len() + state.label_sets.len()
    }

    /// Holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One namespace's pods: by name, and by label ([`LabelIndex`]), kept together so the two
/// cannot drift apart.
#[derive(Debug, Default)]
struct Namespace {
    by_name: BTreeMap<Arc<str>, Arc<PodRecord>>,
    index: LabelIndex,
}

impl Namespace {
    /// The pods `selector` matches, by name: through the label index when the selector
    /// requires one of some values of a label (the narrowest such requirement), else by
    /// walking the namespace.
    fn matching<'a>(&'a self, selector: &LabelSelector, out: &mut Vec<&'a Arc<PodRecord>>) {
        let narrowest = selector
            .required_values()
            .map(|(key, values)| (key, values, self.index.candidates(key, values)))
            .min_by_key(|(_, _, candidates)| candidates.count);
        match narrowest {
            Some((key, values, candidates)) => {
                // The candidates meet the requirement they were found by: only the others
                // are checked (an HPA's one-label selector reads no labels at all).
                let start = out.len();
                out.reserve(candidates.count);
                let rest = selector.besides(key, values);
                if rest.is_everything() {
                    out.extend(candidates.pods);
                } else {
                    out.extend(candidates.pods.filter(|pod| rest.matches(&pod.labels)));
                }
                if !candidates.sorted {
                    out[start..].sort_by(|a, b| a.key.name.cmp(&b.key.name));
                }
            }
            None => out.extend(
                self.by_name
                    .values()
                    .filter(|pod| selector.matches(&pod.labels)),
            ),
        }
    }
}

/// How many records [`Inventory::visit_pods`] hands over at once: a reader can load a
/// batch's memory together, so its cache misses overlap. 32 rather than 8: each batch ends in
/// locked instructions (slot locks, reference counts) that wait for every load before them,
/// so a batch costs about one round of misses whatever its size up to what the core keeps in
/// flight (in process, alternated: the 150,000-pod lists 10 % and an HPA-shaped request
/// 12 % faster than with 8; BENCHMARKS.md, 2026-12-05).
pub const VISIT_BATCH: usize = 32;

/// How many pods [`Inventory::visit_pods`] reads between chances for a waiting writer.
pub const VISIT_YIELD_EVERY: usize = 4096;

/// Hands `pods` to `visit` [`VISIT_BATCH`] at a time: what [`Inventory::visit_pods`] does
/// with a list it had to build (a selector's matches), for sources that build theirs.
pub fn in_batches(pods: &[Arc<PodRecord>], visit: impl FnMut(&[&Arc<PodRecord>])) {
    let refs: Vec<&Arc<PodRecord>> = pods.iter().collect();
    refs.chunks(VISIT_BATCH).for_each(visit);
}

/// Pods by namespace: a namespace's pods are one map lookup away.
#[derive(Debug, Default)]
struct PodMap {
    by_namespace: BTreeMap<Arc<str>, Namespace>,
    len: usize,
}

impl PodMap {
    /// The pods of `namespace` (or of all) that `selector` matches, in namespace-then-name
    /// order (see [`Namespace::matching`]).
    fn matching<'a>(
        &'a self,
        namespace: Option<&str>,
        selector: &LabelSelector,
        out: &mut Vec<&'a Arc<PodRecord>>,
    ) {
        match namespace {
            Some(namespace) => {
                if let Some(ns) = self.by_namespace.get(namespace) {
                    ns.matching(selector, out);
                }
            }
            None => {
                for ns in self.by_namespace.values() {
                    ns.matching(selector, out);
                }
            }
        }
    }

    /// Visits up to `limit` pods of `namespace` (or of all) in order, starting after
    /// `after`, in batches; returns the last visited key when it stopped at the limit.
    fn visit_from(
        &self,
        namespace: Option<&str>,
        after: Option<&PodKey>,
        limit: usize,
        visit: &mut impl FnMut(&[&Arc<PodRecord>]),
    ) -> Option<PodKey> {
        let from = after.map(|k| &*k.namespace).or(namespace);
        let to = namespace.map_or(Bound::Unbounded, Bound::Included);
        let namespaces = self
            .by_namespace
            .range::<str, _>((from.map_or(Bound::Unbounded, Bound::Included), to));
        let mut batch: Vec<&Arc<PodRecord>> = Vec::with_capacity(VISIT_BATCH);
        let mut visited = 0usize;
        for (name, ns) in namespaces {
            let start = match after {
                Some(k) if *k.namespace == **name => Bound::Excluded(&*k.name),
                _ => Bound::Unbounded,
            };
            for pod in ns
                .by_name
                .range::<str, _>((start, Bound::Unbounded))
                .map(|(_, p)| p)
            {
                batch.push(pod);
                if batch.len() == VISIT_BATCH {
                    visit(&batch);
                    batch.clear();
                }
                visited += 1;
                if visited >= limit {
                    if !batch.is_empty() {
                        visit(&batch);
                    }
                    return Some(pod.key.clone());
                }
            }
        }
        if !batch.is_empty() {
            visit(&batch);
        }
        None
    }

    /// Adds or replaces a pod; true when its key is new.
    fn insert(&mut self, pod: Arc<PodRecord>) -> bool {
        let ns = self
            .by_namespace
            .entry(pod.key.namespace.clone())
            .or_default();
        let new = match ns.by_name.insert(pod.key.name.clone(), pod.clone()) {
            None => {
                self.len += 1;
                true
            }
            // The index points at records: the replaced one goes, under its own labels.
            Some(old) => {
                ns.index.remove(&old);
                false
            }
        };
        ns.index.add(&pod);
        new
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        let ns = self.by_namespace.get_mut(namespace)?;
        let removed = ns.by_name.remove(name)?;
        if ns.by_name.is_empty() {
            self.by_namespace.remove(namespace);
        } else {
            ns.index.remove(&removed);
        }
        self.len -= 1;
        Some(removed)
    }
}

/// A pod is on the node its `spec.nodeName` names.
impl crate::store::Placement for Inventory {
    fn is_on(&self, namespace: &str, name: &str, node: &str) -> Option<bool> {
        let pod = self.pod(namespace, name)?;
        Some(pod.node_name.as_ref()?.as_str() == node)
    }
}

/// The inventory: every node and every Running pod, as slim records.
#[derive(Debug)]
pub struct Inventory {
    nodes: RwLock<BTreeMap<NodeName, Arc<NodeRecord>>>,
    pods: RwLock<PodMap>,
    nodes_synced: AtomicBool,
    pods_synced: AtomicBool,
    interner: Interner,
    /// Bumped when the set of nodes, a node's labels or the sync state changes: what the
    /// scrape loop reacts to at once (a new node is scraped right away, not next period).
    changes: tokio::sync::watch::Sender<u64>,
    /// Nodes on which a pod started Running since the scrape loop last took them (pods the
    /// watch adds after the first list), at most [`MAX_POD_STARTS`].
    pod_starts: parking_lot::Mutex<HashSet<NodeName>>,
    /// Bumped when `pod_starts` gains a node.
    pod_starts_changed: tokio::sync::watch::Sender<u64>,
}

/// At most this many nodes wait in [`Inventory::take_pod_starts`]; past it a start is not
/// recorded (its pod waits for its node's next period, as any pod did before).
pub const MAX_POD_STARTS: usize = 65_536;

impl Default for Inventory {
    fn default() -> Self {
        Inventory {
            nodes: RwLock::default(),
            pods: RwLock::default(),
            nodes_synced: AtomicBool::new(false),
            pods_synced: AtomicBool::new(false),
            interner: Interner::default(),
            changes: tokio::sync::watch::Sender::new(0),
            pod_starts: parking_lot::Mutex::new(HashSet::new()),
            pod_starts_changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Inventory {
    /// An empty inventory.
    pub fn new() -> Self {
        Inventory::default()
    }

    /// The interner records of this inventory should be built with.
    pub fn interner(&self) -> &Interner {
        &self.interner
    }

    /// A receiver whose value changes when the node set, a node's labels or the sync state
    /// change. Status-only updates of a known node (its heartbeat) do not wake it.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Adds or replaces a node.
    pub fn upsert_node(&self, node: NodeRecord) {
        let node = Arc::new(node);
        let old = self.nodes.write().insert(node.name.clone(), node.clone());
        if old.as_ref().is_none_or(|old| old.labels != node.labels) {
            self.changed();
        }
        drop(old);
    }

    /// Removes a node.
    pub fn remove_node(&self, name: &str) {
        let old = self.nodes.write().remove(name);
        if old.is_some() {
            self.changed();
        }
        drop(old);
    }

    /// Adds or replaces a pod. A pod new to the inventory after the first list is a pod
    /// that just started Running (the watch selects Running pods): its node is recorded for
    /// [`Inventory::take_pod_starts`].
    pub fn upsert_pod(&self, pod: PodRecord) {
        let node = pod.node_name.clone();
        let new = self.pods.write().insert(Arc::new(pod));
        if let Some(node) = node.filter(|_| new && self.pods_listed()) {
            let mut starts = self.pod_starts.lock();
            if starts.len() < MAX_POD_STARTS && starts.insert(node) {
                drop(starts);
                self.pod_starts_changed.send_modify(|g| *g += 1);
            }
        }
    }

    /// The nodes on which a pod started since the last call, in no order.
    pub fn take_pod_starts(&self) -> Vec<NodeName> {
        self.pod_starts.lock().drain().collect()
    }

    /// A receiver whose value changes when a pod starts on a node
    /// ([`Inventory::take_pod_starts`] has something).
    pub fn subscribe_pod_starts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pod_starts_changed.subscribe()
    }

    /// Removes a pod.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        let old = self.pods.write().remove(namespace, name);
        drop(old);
    }

    /// Replaces every node at once (a relist) and marks the node list as synced. Readers see
    /// either the old set or the new one, never a mix. For a duplicated name the last wins.
    pub fn replace_nodes(&self, nodes: Vec<NodeRecord>) {
        let new: BTreeMap<NodeName, Arc<NodeRecord>> = nodes
            .into_iter()
            .map(|node| (node.name.clone(), Arc::new(node)))
            .collect();
        let old = std::mem::replace(&mut *self.nodes.write(), new);
        self.nodes_synced.store(true, Ordering::Release);
        self.changed();
        // The old map is freed outside the lock.
        drop(old);
        self.interner.purge();
    }

    /// Replaces every pod at once (a relist) and marks the pod list as synced. Readers see
    /// either the old set or the new one, never a mix ([`Inventory::visit_pods`] sees the
    /// new one from its next pause on). For a duplicated key the last wins.
    pub fn replace_pods(&self, pods: Vec<PodRecord>) {
        let mut new = PodMap::default();
        for pod in pods {
            new.insert(Arc::new(pod));
        }
        let old = std::mem::replace(&mut *self.pods.write(), new);
        let first = !self.pods_synced.swap(true, Ordering::AcqRel);
        if first {
            self.changed();
        }
        drop(old);
        self.interner.purge();
    }

    /// Marks both lists as in: for an inventory its owner fills (the sandbox, benches), not
    /// watches.
    pub fn mark_synced(&self) {
        self.nodes_synced.store(true, Ordering::Release);
        self.pods_synced.store(true, Ordering::Release);
        self.changed();
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        self.nodes.read().get(name).cloned()
    }

    /// Every node, sorted by name.
    pub fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.nodes.read().values().cloned().collect()
    }

    /// How many nodes there are.
    pub fn node_count(&self) -> usize {
        self.nodes.read().len()
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.pods
            .read()
            .by_namespace
            .get(namespace)?
            .by_name
            .get(name)
            .cloned()
    }

    /// Every pod of a namespace (or of all namespaces) that `selector` matches, in
    /// namespace-then-name order, handed to `visit` [`VISIT_BATCH`] at a time under the read
    /// lock, without copying the list first: a cluster-wide list touches each record once,
    /// while it reads it, instead of once more to copy it out. Every [`VISIT_YIELD_EVERY`]
    /// pods a waiting writer goes first (the walk then resumes after the last pod it
    /// visited), so a watch event waits for a few thousand pods, not for a whole list. So a
    /// visit is not one snapshot: a relist or watch event that gets in at such a pause shows
    /// in the pods after it (the order stays sorted and no pod is visited twice), as it
    /// would in a list served a moment later.
    ///
    /// A label selector's matches are gathered first (through the label index where it
    /// can): up to [`VISIT_YIELD_EVERY`] of them (an HPA's ~100) are visited in place under
    /// the lock, one snapshot; more are copied out and visited after the lock is released,
    /// so a writer never waits for more than that many pods.
    ///
    /// `visit` may run under the read lock: it must not call back into this inventory (a
    /// second read behind a waiting writer would wait forever).
    pub fn visit_pods(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
        mut visit: impl FnMut(&[&Arc<PodRecord>]),
    ) {
        if !selector.is_empty() {
            let pods = self.pods.read();
            let mut matched = Vec::new();
            pods.matching(namespace, selector, &mut matched);
            if matched.len() <= VISIT_YIELD_EVERY {
                // A few (an HPA's ~100): visited in place, with no reference count touched.
                matched.chunks(VISIT_BATCH).for_each(visit);
                return;
            }
            // Many: copied out, so a waiting writer is not held up for the whole visit.
            let owned: Vec<Arc<PodRecord>> = matched.into_iter().cloned().collect();
            drop(pods);
            in_batches(&owned, visit);
            return;
        }
        let mut pods = self.pods.read();
        let mut after: Option<PodKey> = None;
        loop {
            let resume = pods.visit_from(namespace, after.as_ref(), VISIT_YIELD_EVERY, &mut visit);
            match resume {
                Some(key) => {
                    after = Some(key);
                    RwLockReadGuard::bump(&mut pods);
                }
                None => return,
            }
        }
    }

    /// Up to `limit` (at least one) pods of a namespace (or of all namespaces) that come
    /// after `after` in namespace-then-name order (from the first when `None`), handed to
    /// `visit` [`VISIT_BATCH`] at a time under the read lock. Returns the last key visited
    /// when it stopped at `limit` (the next call resumes after it), `None` when no pod is
    /// left: a list streamed as the client reads it takes a frame's worth per call, so the
    /// lock is held for `limit` pods at a time and each pod is read once, right before it
    /// is written. Successive calls are not one snapshot (see [`Inventory::visit_pods`]).
    ///
    /// `visit` must not call back into this inventory.
    pub fn visit_pods_after(
        &self,
        namespace: Option<&str>,
        after: Option<&PodKey>,
        limit: usize,
        mut visit: impl FnMut(&[&Arc<PodRecord>]),
    ) -> Option<PodKey> {
        self.pods
            .read()
            .visit_from(namespace, after, limit.max(1), &mut visit)
    }

    /// Every pod of a namespace (or of all namespaces), sorted by namespace then name.
    pub fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        let pods = self.pods.read();
        match namespace {
            Some(namespace) => pods
                .by_namespace
                .get(namespace)
                .map(|ns| ns.by_name.values().cloned().collect())
                .unwrap_or_default(),
            None => {
                let mut all = Vec::with_capacity(pods.len);
                for ns in pods.by_namespace.values() {
                    all.extend(ns.by_name.values().cloned());
                }
                all
            }
        }
    }

    /// The pods of a namespace (or of all namespaces) that `selector` matches, sorted by
    /// namespace then name. An equality requirement (`app=web`, `app in (a,b)`) is answered
    /// from the label index, reading only the pods that carry the label: an HPA's question
    /// costs what it answers, not the size of its namespace.
    pub fn pods_matching(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<PodRecord>> {
        if selector.is_empty() {
            return self.pods(namespace);
        }
        let pods = self.pods.read();
        let mut out = Vec::new();
        pods.matching(namespace, selector, &mut out);
        out.into_iter().cloned().collect()
    }

    /// How many Running pods there are.
    pub fn pod_count(&self) -> usize {
        self.pods.read().len
    }

    /// Whether the initial list of both nodes and pods has completed.
    pub fn synced(&self) -> bool {
        self.nodes_listed() && self.pods_listed()
    }

    /// Whether the initial list of nodes has completed.
    pub fn nodes_listed(&self) -> bool {
        self.nodes_synced.load(Ordering::Acquire)
    }

    /// Whether the initial list of pods has completed.
    pub fn pods_listed(&self) -> bool {
        self.pods_synced.load(Ordering::Acquire)
    }
}
