//! The lock-sharded store of the newest points and the usage computed from them.
//!
//! Two [`DashMap`]s: nodes by name and pods by [`PodKey`] (a pod read is one lookup). Per
//! node and per container the store keeps the last two valid raw samples and the usage
//! computed from them *at ingest*; per pod a ready-made `Arc<PodUsage>`, in a [`UsageSlot`]
//! that an inventory record's [`UsageLink`] can point at ([`Store::pod_linked`]: a list
//! follows links instead of looking every pod up). Reads are a lookup (or a link) plus a
//! staleness check.
//!
//! The containers' samples are kept by the owning node's entry, its pods in the ingest's
//! order (by key hash): an ingest walks them beside the scrape's pods and publishes each
//! pod's usage to its slot, so a pod the node reported last time costs no lookup in the pod
//! map (whose entries, at 150,000 pods, are cache misses). The map is written only when a
//! pod is new to its node, changes owner or goes.
//!
//! Namespaces and container names are interned: one allocation per distinct string. A writer
//! holds one shard lock at a time and never across anything slow, so readers of other nodes
//! and pods never wait for an ingest.
//!
//! Semantics follow metrics-server `pkg/storage` (reference §4) with these differences:
//! - an unusable container sample (all zeros, as a finished init container reports; no CPU
//!   data or a cumulative CPU of 0; no memory series) is ignored instead of hiding its pod;
//!   zero memory with CPU data is valid;
//! - a failed scrape keeps the last good data until it is older than
//!   [`Config::staleness`] (#1736); reads treat older data as absent;
//! - a container first seen has no previous point (no zero point);
//! - a pod whose containers all failed their rate has no usage (no empty pod, no null
//!   timestamp);
//! - summary `usageNanoCores` is used as is: usage after one scrape;
//! - a pod reported by two nodes belongs to the one it is placed on (`spec.nodeName`, when
//!   the store is [`Store::placed_by`] the inventory), not to the first to report it.
//!
//! # Layout
//! - `rate`: valid samples, `last`/`prev` rules and the CPU rate.
//! - `entry`: per node, pod and container records, and the per-pod update.
//! - `slot`: the shared cell of a pod's served usage and the records' links to it.
//!
//! Ingests of one node are expected one at a time (the scrape loop has at most one scrape per
//! node in flight). Racing ingests of the same node stay memory safe and leave no pod behind:
//! the last to finish keeps its pods, and those of the other that it did not report go.

mod entry;
#[cfg(test)]
mod proptests;
mod rate;
mod slot;
#[cfg(test)]
mod tests;

pub use slot::{UsageLink, UsageSlot};

/// How many pods [`Store::pods_linked`] reads together: as many as a visit hands over.
pub const LINKED_BATCH: usize = crate::inventory::VISIT_BATCH;

use std::cmp::Ordering;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use foldhash::fast::RandomState;

use crate::point::{
    ContainerSample, ContainerUsage, NodeName, NodeScrape, PodKey, PodUsage, Usage,
};

use crate::inventory::Interner;
use entry::{KeyView, Names, NewContainer, NodeEntry, PodEntry, PodHistory, Skipped, Waiting};
use rate::Point;
use slot::Linked;

/// Store settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// `--metric-resolution`: the scrape period; bounds the fresh-container shortcut.
    pub resolution: Duration,
    /// How long the last good data of a node (and its pods) survives failed scrapes.
    /// Default: 2 x resolution.
    pub staleness: Duration,
    /// Measures a pod's containers when their usage is built, into
    /// [`PodUsage::containers_len`]: once per scrape, while they are in cache, instead of at
    /// every list that needs the length. None by default.
    pub measure: Option<Measure>,
}

/// What [`Config::measure`] computes: the length of a pod's containers in the reader's
/// encoding. 0 reads as "not measured" (the reader computes the length itself), so a
/// measure gives 0 for a length it cannot give exactly, never a wrong one.
pub type Measure = fn(&[ContainerUsage]) -> u32;

impl Config {
    /// Defaults for a resolution: staleness = 2 x resolution.
    pub fn new(resolution: Duration) -> Self {
        Config {
            resolution,
            staleness: resolution * 2,
            measure: None,
        }
    }

    /// The same settings with `measure` for every pod usage built.
    pub fn measured_by(self, measure: Measure) -> Self {
        Config {
            measure: Some(measure),
            ..self
        }
    }
}

/// What one ingest did, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    /// The node has servable usage after this ingest.
    pub node_usage: bool,
    /// Pods in the scrape.
    pub pods: usize,
    /// Pods with servable usage after this ingest.
    pub pods_with_usage: usize,
    /// Container samples ignored (all-zero stubs, missing CPU, invalid).
    pub containers_ignored: usize,
    /// Series (the node's own and its containers') that have one point and wait for a
    /// second, newer one before a rate can be computed: what a warm-up scrape waits out.
    pub pending: u32,
    /// Series served from the kubelet's own rate (summary `usageNanoCores`, attached to a
    /// warm-up scrape) that have no pair of points yet: servable now, but their next usage
    /// needs a newer sample. (With `--kubelet-source=summary` every first sample is one.)
    pub unpaired: u32,
    /// The newest sample timestamp among the pending and unpaired series, Unix ns; 0 when
    /// there is none. The kubelet refreshes a series one housekeeping interval after its
    /// last sample, so this says when a scrape can next complete them.
    pub waiting_newest_ns: i64,
}

impl Ingested {
    fn add_waiting(&mut self, waiting: Waiting) {
        self.pending += waiting.pending;
        self.unpaired += waiting.unpaired;
        self.waiting_newest_ns = self.waiting_newest_ns.max(waiting.newest_ns);
    }
}

/// Whether the store holds usable data, the signal behind `/readyz` `metric-storage-ready`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// At least one node has servable usage.
    pub nodes: bool,
    /// At least one pod has servable usage.
    pub pods: bool,
}

/// Points that have a previous point, for `metrics_server_storage_points{type}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Points {
    /// Nodes with servable usage.
    pub nodes: u64,
    /// Containers with servable usage.
    pub containers: u64,
}

/// Where the cluster placed a pod: its `spec.nodeName`, which decides between nodes that
/// report the same pod ([`Store::placed_by`]).
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// Whether the pod `namespace/name` is placed on `node`; `None` when that is not known
    /// (a pod not listed yet).
    fn is_on(&self, namespace: &str, name: &str, node: &str) -> Option<bool>;
}

/// The store: newest points and computed usage of every node, pod and container.
#[derive(Debug)]
pub struct Store {
    config: Config,
    /// Which node a pod is on, when the store is told ([`Store::placed_by`]).
    placement: Option<Arc<dyn Placement>>,
    /// Tells this store's slots from another's (see [`UsageLink`]).
    id: u32,
    resolution_ns: i64,
    staleness_ns: i64,
    nodes: DashMap<NodeName, NodeEntry, RandomState>,
    pods: DashMap<PodKey, PodEntry, RandomState>,
    /// Namespaces and container names, shared by every pod that has them.
    names: Interner,
}

/// One pod of the scrape being ingested, with its valid containers.
struct PodScrape<'a, 's> {
    /// The key's hash in the store's map: the ingest's order.
    hash: u64,
    namespace: &'a str,
    name: &'a str,
    containers: &'a [NewContainer<'s>],
}

/// What `ingest_pod` stored, for the node's counters.
struct StoredPod {
    history: PodHistory,
    has_usage: bool,
    containers_with_usage: u32,
    /// Containers waiting for a newer sample.
    waiting: Waiting,
}

impl StoredPod {
    fn new(history: PodHistory, has_usage: bool) -> StoredPod {
        StoredPod {
            has_usage,
            containers_with_usage: history.containers_with_usage(),
            waiting: history.waiting(),
            history,
        }
    }
}

/// The debug log of a container whose rate could not be computed.
fn skipped<'a>(node: &'a NodeName, pod: &'a PodScrape<'_, '_>) -> impl FnMut(Skipped<'_>) + 'a {
    move |Skipped { container, error }| {
        tracing::debug!(node = %node, namespace = pod.namespace, pod = pod.name, container,
            reason = %error, "skipping container usage");
    }
}

fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn pod_view<'a>(key: &'a (&'a str, &'a str)) -> &'a (dyn KeyView + 'a) {
    key
}

impl Store {
    /// An empty store.
    pub fn new(config: Config) -> Self {
        Store {
            config,
            placement: None,
            id: slot::store_id(),
            resolution_ns: duration_ns(config.resolution),
            staleness_ns: duration_ns(config.staleness),
            nodes: DashMap::with_hasher(RandomState::default()),
            pods: DashMap::with_hasher(RandomState::default()),
            names: Interner::new(),
        }
    }

    /// The same store, told where pods are placed: a node reports a pod's usage only if the
    /// pod is on it, when `placement` knows. A kubelet that still reports a pod it no
    /// longer runs (lingering cgroups, metrics-server #1300; the old incarnation of a
    /// StatefulSet pod rescheduled with its name) is refused, and the node the pod is on
    /// takes it over at its first report instead of once the other's data is stale.
    pub fn placed_by(self, placement: Arc<dyn Placement>) -> Self {
        Store {
            placement: Some(placement),
            ..self
        }
    }

    /// Whether `node` may report the pod: `Some(true)` when the pod is placed on it,
    /// `Some(false)` when on another, `None` when not known.
    fn placed_on(&self, pod: &PodScrape<'_, '_>, node: &NodeName) -> Option<bool> {
        self.placement
            .as_ref()?
            .is_on(pod.namespace, pod.name, node.as_str())
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    fn is_stale(&self, seen_ns: i64, now_ns: i64) -> bool {
        now_ns.saturating_sub(seen_ns) > self.staleness_ns
    }

    /// Stores one node's scrape. `now_ns` is when the scrape finished; it marks the data as
    /// fresh for the staleness bound. Pods this node reported before but not now are dropped.
    pub fn ingest(&self, node: &NodeName, scrape: &NodeScrape<'_>, now_ns: i64) -> Ingested {
        let mut ingested = Ingested::default();
        let old_pods = self.ingest_node(node, scrape, now_ns, &mut ingested);

        // Group by pod: sort by a hash of the pod key first (integer compares), strings only
        // on ties. The order is stable across ingests, so the pod set usually comes out
        // identical to the previous one.
        let hasher = self.pods.hasher();
        let mut samples: Vec<(u64, &ContainerSample<'_>)> = scrape
            .containers
            .iter()
            .map(|s| (hasher.hash_one((&*s.namespace, &*s.pod)), s))
            .collect();
        samples.sort_unstable_by(|(ha, a), (hb, b)| {
            ha.cmp(hb).then_with(|| {
                (&*a.namespace, &*a.pod, &*a.container).cmp(&(
                    &*b.namespace,
                    &*b.pod,
                    &*b.container,
                ))
            })
        });
        // The node's previous pods come in the same order: walked beside the scrape's, each
        // pod it still reports is updated in place, without a lookup in the map.
        let mut old = old_pods.into_iter().peekable();
        let mut new_pods: Vec<PodHistory> = Vec::with_capacity(old.len());
        let mut valid: Vec<NewContainer<'_>> = Vec::new();
        let mut containers_with_usage = 0u32;
        let mut names = Names::new(&self.names);
        for pod in samples
            .chunk_by(|(ha, a), (hb, b)| ha == hb && a.namespace == b.namespace && a.pod == b.pod)
        {
            ingested.pods += 1;
            let hash = pod[0].0;
            let (namespace, name) = (&*pod[0].1.namespace, &*pod[0].1.pod);
            let mut history = None;
            while let Some(previous) = old.peek() {
                let order = (previous.hash, &*previous.key.namespace, &*previous.key.name)
                    .cmp(&(hash, namespace, name));
                match order {
                    Ordering::Greater => break,
                    Ordering::Equal => {
                        history = old.next();
                        break;
                    }
                    Ordering::Less => {
                        if let Some(gone) = old.next() {
                            self.forget(node.as_str(), &gone);
                        }
                    }
                }
            }
            valid.clear();
            for (_, sample) in pod {
                let duplicate = valid.last().is_some_and(|v| v.name == sample.container);
                match Point::container(&sample.sample) {
                    Some(point) if !duplicate => valid.push(NewContainer {
                        name: &sample.container,
                        point,
                        cpu_nanocores: sample.sample.cpu_nanocores,
                    }),
                    _ => ingested.containers_ignored += 1,
                }
            }
            if valid.is_empty() {
                if let Some(gone) = history {
                    self.forget(node.as_str(), &gone);
                }
                continue;
            }
            let pod = PodScrape {
                hash,
                namespace,
                name,
                containers: &valid,
            };
            let Some(stored) = self.ingest_pod(node, &pod, history, now_ns, &mut names) else {
                continue;
            };
            ingested.pods_with_usage += usize::from(stored.has_usage);
            ingested.add_waiting(stored.waiting);
            containers_with_usage += stored.containers_with_usage;
            new_pods.push(stored.history);
        }
        for gone in old {
            self.forget(node.as_str(), &gone);
        }

        match self.nodes.get_mut(node.as_str()) {
            Some(mut entry) => {
                entry.pods_with_usage = ingested.pods_with_usage as u32;
                entry.containers_with_usage = containers_with_usage;
                let displaced = std::mem::replace(&mut entry.pods, new_pods);
                if !displaced.is_empty() {
                    // Another ingest of this node ran meanwhile: its pods that this one did
                    // not report go, so every pod the node owns stays in its entry.
                    let kept: HashSet<&PodKey> = entry.pods.iter().map(|p| &p.key).collect();
                    let gone: Vec<PodHistory> = displaced
                        .into_iter()
                        .filter(|p| !kept.contains(&p.key))
                        .collect();
                    drop(kept);
                    drop(entry);
                    for pod in &gone {
                        self.forget(node.as_str(), pod);
                    }
                }
            }
            None => {
                // Removed while this ingest ran: take its pods with it.
                for pod in &new_pods {
                    self.forget(node.as_str(), pod);
                }
            }
        }
        ingested
    }

    /// Drops a pod this node no longer reports from the map, unless another node owns it.
    fn forget(&self, node: &str, pod: &PodHistory) {
        self.pods
            .remove_if(&pod.key, |_, e| e.node.as_str() == node);
    }

    /// Updates the node's own samples and usage (§4.2) and hands back its previous pod set.
    fn ingest_node(
        &self,
        node: &NodeName,
        scrape: &NodeScrape<'_>,
        now_ns: i64,
        ingested: &mut Ingested,
    ) -> Vec<PodHistory> {
        let mut entry = match self.nodes.get_mut(node.as_str()) {
            Some(entry) => entry,
            None => self
                .nodes
                .entry(node.clone())
                .or_insert_with(NodeEntry::empty),
        };
        match scrape.node.as_ref().and_then(Point::node) {
            Some(new) => {
                let prev = rate::next_prev(entry.last.as_ref(), entry.prev.as_ref(), &new);
                if prev.is_none() && entry.last.is_some() {
                    tracing::debug!(node = %node, "node point not newer than the stored ones, dropping the previous");
                }
                let nanocores = scrape.node.and_then(|s| s.cpu_nanocores);
                let held = entry.last;
                let mut waiting = Waiting::default();
                entry.usage = match rate::next_usage(
                    prev.as_ref(),
                    &new,
                    nanocores,
                    held.as_ref(),
                    entry.usage,
                ) {
                    Ok(Some(usage)) => {
                        if prev.is_none() {
                            waiting.add_unpaired(new.timestamp_ns);
                        }
                        Some(usage)
                    }
                    Ok(None) => {
                        waiting.add_pending(new.timestamp_ns);
                        None
                    }
                    Err(error) => {
                        tracing::debug!(node = %node, reason = %error, "skipping node usage");
                        None
                    }
                };
                ingested.add_waiting(waiting);
                entry.last = Some(new);
                entry.prev = prev;
            }
            None => {
                if scrape.node.is_some() {
                    tracing::debug!(node = %node, "incomplete node sample, no node usage");
                }
                entry.last = None;
                entry.prev = None;
                entry.usage = None;
            }
        }
        entry.last_success_ns = now_ns;
        ingested.node_usage = entry.usage.is_some();
        std::mem::take(&mut entry.pods)
    }

    /// Stores one pod's valid containers; `None` when another node with fresh data owns it.
    /// With the pod's `history` from this node's previous ingest, the pod is updated there
    /// and published to its slot; the map is only looked up for a pod new to this node, or
    /// one whose slot refused the publish (taken over by another node, or dropped).
    fn ingest_pod(
        &self,
        node: &NodeName,
        pod: &PodScrape<'_, '_>,
        history: Option<PodHistory>,
        now_ns: i64,
        names: &mut Names<'_>,
    ) -> Option<StoredPod> {
        if let Some(stored) =
            history.and_then(|history| self.update_pod(node, pod, history, now_ns, names))
        {
            return Some(stored);
        }

        let mut entry = match self.pods.get_mut(pod_view(&(pod.namespace, pod.name))) {
            Some(entry) => entry,
            None => {
                if self.placed_on(pod, node) == Some(false) {
                    tracing::debug!(node = %node, namespace = pod.namespace, pod = pod.name,
                        "pod reported by a node it is not placed on, ignoring it");
                    return None;
                }
                self.pods
                    .entry(PodKey {
                        namespace: names.get(pod.namespace),
                        name: Arc::from(pod.name),
                    })
                    .or_insert_with(|| PodEntry::new(node, self.id))
            }
        };
        let owner = if entry.node == *node {
            entry.slot.owner()
        } else {
            // The node the pod is placed on takes it over; one it is not placed on never
            // does. Where placement is not known, the first node to report the pod keeps it
            // while its data is fresh.
            let placed = self.placed_on(pod, node);
            if placed == Some(false)
                || (placed.is_none() && !self.is_stale(entry.slot.seen_ns(), now_ns))
            {
                if !entry.conflict_logged {
                    entry.conflict_logged = true;
                    tracing::debug!(node = %node, owner = %entry.node, namespace = pod.namespace,
                        pod = pod.name, "pod reported by two nodes, keeping the owner");
                }
                return None;
            }
            entry.node = node.clone();
            entry.conflict_logged = false;
            entry.slot.take_over()
        };
        let history = PodHistory {
            hash: pod.hash,
            key: entry.key().clone(),
            slot: Arc::clone(&entry.slot),
            owner,
            containers: Vec::new(),
        };
        // Published while the map entry is held: no other node can take the pod over
        // between the owner mark read above and the publish.
        self.update_pod(node, pod, history, now_ns, names)
    }

    /// Updates the pod's history with the scrape and publishes its usage to the slot; `None`
    /// when the slot refuses it (the node no longer owns the pod).
    fn update_pod(
        &self,
        node: &NodeName,
        pod: &PodScrape<'_, '_>,
        mut history: PodHistory,
        now_ns: i64,
        names: &mut Names<'_>,
    ) -> Option<StoredPod> {
        let usage = history.update(
            pod.containers,
            self.resolution_ns,
            self.config.measure,
            names,
            skipped(node, pod),
        );
        let has_usage = usage.is_some();
        history
            .slot
            .publish(history.owner, usage, now_ns)
            .then(|| StoredPod::new(history, has_usage))
    }

    /// Records a failed scrape: the node's last good data is kept until it is older than the
    /// staleness bound; once it is, the node and its pods are freed here.
    pub fn scrape_failed(&self, node: &NodeName, now_ns: i64) {
        let stale = self
            .nodes
            .get(node.as_str())
            .is_some_and(|e| self.is_stale(e.last_success_ns, now_ns));
        if stale {
            self.remove_node(node.as_str());
        }
    }

    /// Forgets a node and every pod it reported (the node was deleted or deselected).
    pub fn remove_node(&self, node: &str) {
        if let Some((_, entry)) = self.nodes.remove(node) {
            for pod in &entry.pods {
                self.forget(node, pod);
            }
        }
    }

    /// Drops every node (and its pods) whose last good scrape is older than the staleness
    /// bound. Reads already ignore such data; this frees the memory. A pod's data is as
    /// fresh as its owner's last good scrape (a scrape that leaves a pod out forgets it), so
    /// the pods that go are those in the histories of the nodes that go.
    pub fn evict_stale(&self, now_ns: i64) {
        let mut gone: Vec<(NodeName, Vec<PodHistory>)> = Vec::new();
        self.nodes.retain(|name, e| {
            let stale = self.is_stale(e.last_success_ns, now_ns);
            if stale {
                gone.push((name.clone(), std::mem::take(&mut e.pods)));
            }
            !stale
        });
        for (node, pods) in &gone {
            for pod in pods {
                self.forget(node.as_str(), pod);
            }
        }
    }

    /// The node's usage, if it has servable, non-stale data.
    pub fn node(&self, name: &str, now_ns: i64) -> Option<Usage> {
        let entry = self.nodes.get(name)?;
        if self.is_stale(entry.last_success_ns, now_ns) {
            return None;
        }
        entry.usage
    }

    /// The pod's usage, if every one of its containers has servable, non-stale data.
    pub fn pod(&self, namespace: &str, name: &str, now_ns: i64) -> Option<Arc<PodUsage>> {
        let entry = self.pods.get(pod_view(&(namespace, name)))?;
        let (usage, seen_ns) = entry.slot.get();
        if self.is_stale(seen_ns, now_ns) {
            return None;
        }
        usage
    }

    /// [`Store::pod`] for the pod whose record holds `link`: once a lookup has linked the
    /// record, its usage is read straight from the pod's slot, without a hash lookup (what a
    /// cluster-wide list does per pod). `namespace` and `name` must be the record's key.
    /// A link to a pod the store has since dropped falls back to the lookup for good.
    pub fn pod_linked(
        &self,
        link: &UsageLink,
        namespace: &str,
        name: &str,
        now_ns: i64,
    ) -> Option<Arc<PodUsage>> {
        let (usage, seen_ns) = match link.0.get().map(|slot| slot.read(self.id)) {
            Some(Linked::Live(usage, seen_ns)) => (usage, seen_ns),
            None | Some(Linked::Gone) => {
                let entry = self.pods.get(pod_view(&(namespace, name)))?;
                // Only an empty link is set; one to a retired slot stays as it is.
                let _ = link.0.set(Arc::clone(&entry.slot));
                entry.slot.get()
            }
        };
        if self.is_stale(seen_ns, now_ns) {
            return None;
        }
        usage
    }

    /// [`Store::pod_linked`] for a batch of pods at once: `out[i]` for `pods[i]` (the two
    /// slices are walked together; extra entries of the longer one are left alone), at most
    /// [`LINKED_BATCH`] read together, longer slices in turns.
    ///
    /// A list reads many pods whose memory is cold. One at a time, each read waits for its
    /// usage's line behind the atomic reference-count update that clones it (a locked
    /// instruction waits for every load before it), so the misses queue up. Here every
    /// linked slot of the batch is locked first, every usage's line is loaded with a plain
    /// read while the locks are held (the misses overlap), and only then are the usages
    /// cloned. The batch only ever tries its locks (a slot being published right now is
    /// read afterwards, the ordinary way), and they are released before a pod without a
    /// live link is looked up: no wait while holding a slot lock, and no slot lock held
    /// while a map shard is locked (the ingest path takes them the other way round).
    pub fn pods_linked(
        &self,
        pods: &[(&UsageLink, &PodKey)],
        now_ns: i64,
        out: &mut [Option<Arc<PodUsage>>],
    ) {
        for (pods, out) in pods.chunks(LINKED_BATCH).zip(out.chunks_mut(LINKED_BATCH)) {
            let mut read_alone = [false; LINKED_BATCH];
            {
                let slots: smallvec::SmallVec<[Option<slot::LiveSlot<'_>>; LINKED_BATCH]> = pods
                    .iter()
                    .map(|(link, _)| link.0.get().and_then(|s| s.try_lock_live(self.id)))
                    .collect();
                for usage in slots.iter().flatten().filter_map(|s| s.usage()) {
                    std::hint::black_box(Arc::strong_count(usage));
                }
                for ((slot, out), alone) in slots.iter().zip(out.iter_mut()).zip(&mut read_alone) {
                    match slot {
                        Some(slot) if self.is_stale(slot.seen_ns(), now_ns) => *out = None,
                        Some(slot) => *out = slot.usage().cloned(),
                        None => *alone = true,
                    }
                }
            }
            for (((link, key), out), _) in pods
                .iter()
                .zip(out.iter_mut())
                .zip(read_alone)
                .filter(|(_, alone)| *alone)
            {
                *out = self.pod_linked(link, &key.namespace, &key.name, now_ns);
            }
        }
    }

    /// Whether nodes and pods have servable data.
    pub fn readiness(&self, now_ns: i64) -> Readiness {
        let mut readiness = Readiness::default();
        for entry in self.nodes.iter() {
            if self.is_stale(entry.last_success_ns, now_ns) {
                continue;
            }
            readiness.nodes |= entry.usage.is_some();
            readiness.pods |= entry.pods_with_usage > 0;
            if readiness.nodes && readiness.pods {
                break;
            }
        }
        readiness
    }

    /// The node that owns a pod's entry (the one whose scrapes it is taken from).
    #[cfg(test)]
    pub(crate) fn owner(&self, namespace: &str, name: &str) -> Option<NodeName> {
        self.pods
            .get(pod_view(&(namespace, name)))
            .map(|entry| entry.node.clone())
    }

    /// Entries held, servable or not: (nodes, pods). What the store's memory grows with.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> (usize, usize) {
        (self.nodes.len(), self.pods.len())
    }

    /// Counts for `metrics_server_storage_points`: nodes and containers with usage as of
    /// their node's last ingest (stale data counts until evicted).
    pub fn points(&self) -> Points {
        self.nodes.iter().fold(Points::default(), |mut points, e| {
            points.nodes += u64::from(e.usage.is_some());
            points.containers += u64::from(e.containers_with_usage);
            points
        })
    }
}
