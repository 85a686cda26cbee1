//! What the store keeps per node, per pod and per container, and how one pod is updated.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::inventory::Interner;
use crate::point::{ContainerUsage, Containers, NodeName, PodKey, PodUsage, Usage};

use super::Measure;
use super::rate::{self, Point, RateError};
use super::slot::UsageSlot;

/// A borrowed view of a pod key, so `DashMap<PodKey, _>` can be searched with two `&str`s
/// without allocating a key.
pub(super) trait KeyView {
    /// The namespace.
    fn namespace(&self) -> &str;
    /// The pod name.
    fn name(&self) -> &str;
}

impl KeyView for PodKey {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
}

impl KeyView for (&str, &str) {
    fn namespace(&self) -> &str {
        self.0
    }
    fn name(&self) -> &str {
        self.1
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for PodKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

// Hashes exactly like the derived `Hash` of `PodKey` (`Arc<str>` hashes as its `str`).
impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace().hash(state);
        self.name().hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.namespace() == other.namespace() && self.name() == other.name()
    }
}

impl Eq for dyn KeyView + '_ {}

/// Strings that repeat across pods (namespaces, container names), shared through the
/// store's interner: one allocation per distinct string instead of one per pod or container,
/// and a list that reads them touches a few hot lines. The last few strings of one ingest
/// are kept at hand, so the repeats within a scrape do not take the interner's lock.
pub(super) struct Names<'a> {
    interner: &'a Interner,
    recent: Vec<Arc<str>>,
}

/// How many strings an ingest keeps at hand.
const RECENT_NAMES: usize = 16;

impl<'a> Names<'a> {
    pub(super) fn new(interner: &'a Interner) -> Self {
        Names {
            interner,
            recent: Vec::new(),
        }
    }

    /// The shared copy of `s`.
    pub(super) fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.recent.iter().find(|r| ***r == *s) {
            return Arc::clone(found);
        }
        let shared = self.interner.string(s);
        if self.recent.len() < RECENT_NAMES {
            self.recent.push(Arc::clone(&shared));
        }
        shared
    }
}

/// Per node: the last two valid raw samples, their usage, and the pods of the last scrape.
#[derive(Debug)]
pub(super) struct NodeEntry {
    pub(super) last: Option<Point>,
    pub(super) prev: Option<Point>,
    /// Usage computed at ingest from `prev` and `last`.
    pub(super) usage: Option<Usage>,
    /// Pods this node reported in its last good scrape and owns, with their containers'
    /// history, in ingest order (by key hash, then key).
    pub(super) pods: Vec<PodHistory>,
    /// When the last good scrape finished, Unix ns.
    pub(super) last_success_ns: i64,
    /// Of `pods`, how many had usage after the last ingest.
    pub(super) pods_with_usage: u32,
    /// Containers of `pods` with usage after the last ingest.
    pub(super) containers_with_usage: u32,
}

impl NodeEntry {
    pub(super) fn empty() -> NodeEntry {
        NodeEntry {
            last: None,
            prev: None,
            usage: None,
            pods: Vec::new(),
            last_success_ns: 0,
            pods_with_usage: 0,
            containers_with_usage: 0,
        }
    }
}

/// A container's computed rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rate {
    /// No previous point yet: the pod waits for it.
    Pending,
    /// The pair was unusable (counter or start time went down): this container is skipped
    /// this cycle, the pod is served without it.
    Failed,
    /// Servable usage.
    Ready(Usage),
}

impl Rate {
    /// The usage served, if any.
    fn usage(self) -> Option<Usage> {
        match self {
            Rate::Ready(usage) => Some(usage),
            Rate::Pending | Rate::Failed => None,
        }
    }
}

/// Per container: name, the last two valid raw samples and the rate computed from them.
#[derive(Debug)]
pub(super) struct ContainerEntry {
    pub(super) name: Arc<str>,
    pub(super) last: Point,
    pub(super) prev: Option<Point>,
    pub(super) rate: Rate,
}

/// Per pod, in the store's map: the owning node and the usage served to readers. The
/// containers' history is the owning node's ([`PodHistory`]): only its ingests read it.
#[derive(Debug)]
pub(super) struct PodEntry {
    pub(super) node: NodeName,
    /// The usage served to readers (`None` while any container waits for a previous point or
    /// none has usage), shared with the owner's [`PodHistory`] and the links of inventory
    /// records.
    pub(super) slot: Arc<UsageSlot>,
    /// A conflicting report from another node was already logged.
    pub(super) conflict_logged: bool,
}

impl PodEntry {
    pub(super) fn new(node: &NodeName, store: u32) -> PodEntry {
        PodEntry {
            node: node.clone(),
            slot: UsageSlot::new(store),
            conflict_logged: false,
        }
    }
}

/// Per pod, in its owning node's entry: the key, its hash (the ingest's order), the slot it
/// publishes to and its containers sorted by name, each with its last two samples. An ingest
/// of the node walks these in order beside the scrape's pods and updates each pod without a
/// lookup in the map; the slot's owner mark ([`UsageSlot::publish`]) says whether the node
/// still owns the pod.
#[derive(Debug)]
pub(super) struct PodHistory {
    pub(super) hash: u64,
    pub(super) key: PodKey,
    pub(super) slot: Arc<UsageSlot>,
    /// The slot's owner mark when this node became the pod's owner.
    pub(super) owner: u32,
    pub(super) containers: Vec<ContainerEntry>,
}

impl PodHistory {
    /// Its containers that wait for a newer sample.
    pub(super) fn waiting(&self) -> Waiting {
        let mut waiting = Waiting::default();
        for c in &self.containers {
            match c.rate {
                Rate::Pending => waiting.add_pending(c.last.timestamp_ns),
                Rate::Ready(_) if c.prev.is_none() => waiting.add_unpaired(c.last.timestamp_ns),
                Rate::Ready(_) | Rate::Failed => {}
            }
        }
        waiting
    }

    /// Containers with servable usage.
    pub(super) fn containers_with_usage(&self) -> u32 {
        self.containers
            .iter()
            .filter(|c| matches!(c.rate, Rate::Ready(_)))
            .count() as u32
    }
}

/// Series that wait for a newer sample: what a warm-up scrape waits out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Waiting {
    /// Series with one point and no usage: they wait for a second point.
    pub(super) pending: u32,
    /// Series served from the kubelet's own rate (summary `usageNanoCores`) that have no
    /// pair of points yet: served, but their next usage needs a newer sample.
    pub(super) unpaired: u32,
    /// The newest sample timestamp among them, Unix ns; 0 when there is none.
    pub(super) newest_ns: i64,
}

impl Waiting {
    pub(super) fn add_pending(&mut self, timestamp_ns: i64) {
        self.pending += 1;
        self.newest_ns = self.newest_ns.max(timestamp_ns);
    }

    pub(super) fn add_unpaired(&mut self, timestamp_ns: i64) {
        self.unpaired += 1;
        self.newest_ns = self.newest_ns.max(timestamp_ns);
    }
}

/// A container's rate once `entry` holds the scrape's point ([`rate::next_usage`]: `held` is
/// the point it held before, `served` the usage it had).
fn next_rate(
    entry: &ContainerEntry,
    cpu_nanocores: Option<u64>,
    held: Option<&Point>,
    served: Option<Usage>,
    on_skip: &mut impl FnMut(Skipped<'_>),
) -> Rate {
    match rate::next_usage(
        entry.prev.as_ref(),
        &entry.last,
        cpu_nanocores,
        held,
        served,
    ) {
        Ok(Some(usage)) => Rate::Ready(usage),
        Ok(None) => Rate::Pending,
        Err(error) => {
            on_skip(Skipped {
                container: &entry.name,
                error,
            });
            Rate::Failed
        }
    }
}

/// One valid container sample of the scrape being ingested.
#[derive(Clone, Copy, Debug)]
pub(super) struct NewContainer<'s> {
    pub(super) name: &'s str,
    pub(super) point: Point,
    /// The kubelet's own rate (summary `usageNanoCores`), when present.
    pub(super) cpu_nanocores: Option<u64>,
}

/// Where a rate could not be computed, for the debug log.
pub(super) struct Skipped<'a> {
    pub(super) container: &'a str,
    pub(super) error: RateError,
}

/// An entry leaves the store only by being dropped (removed, retained away, or with the
/// whole map): its slot is retired then, so links to it stop serving and its owner's history
/// stops publishing to it.
impl Drop for PodEntry {
    fn drop(&mut self) {
        self.slot.retire();
    }
}

impl PodHistory {
    /// Replaces this pod's containers by `new` (sorted by name, unique), keeping each
    /// surviving container's history, recomputes every rate and the pod's usage. A pod new
    /// to its node's history has no containers yet: counters of another node, or from
    /// before the pod left the store, never pair with the scrape's.
    pub(super) fn update(
        &mut self,
        new: &[NewContainer<'_>],
        resolution_ns: i64,
        measure: Option<Measure>,
        names: &mut Names<'_>,
        mut on_skip: impl FnMut(Skipped<'_>),
    ) -> Option<PodUsage> {
        let same_names = self.containers.len() == new.len()
            && self
                .containers
                .iter()
                .zip(new)
                .all(|(old, new)| *old.name == *new.name);
        if same_names {
            for (entry, new) in self.containers.iter_mut().zip(new) {
                let prev = rate::next_container_prev(
                    Some(&entry.last),
                    entry.prev.as_ref(),
                    &new.point,
                    resolution_ns,
                );
                let (held, served) = (entry.last, entry.rate.usage());
                entry.last = new.point;
                entry.prev = prev;
                entry.rate = next_rate(entry, new.cpu_nanocores, Some(&held), served, &mut on_skip);
            }
        } else {
            let mut containers = Vec::with_capacity(new.len());
            for new in new {
                let old = self
                    .containers
                    .binary_search_by(|c| (*c.name).cmp(new.name))
                    .ok()
                    .map(|i| &self.containers[i]);
                let prev = rate::next_container_prev(
                    old.map(|o| &o.last),
                    old.and_then(|o| o.prev.as_ref()),
                    &new.point,
                    resolution_ns,
                );
                let served = old.and_then(|o| o.rate.usage());
                let mut entry = ContainerEntry {
                    name: old.map_or_else(|| names.get(new.name), |o| o.name.clone()),
                    last: new.point,
                    prev,
                    rate: Rate::Pending,
                };
                let held = old.map(|o| &o.last);
                entry.rate = next_rate(&entry, new.cpu_nanocores, held, served, &mut on_skip);
                containers.push(entry);
            }
            self.containers = containers;
        }
        self.build_usage(measure)
    }

    /// The pod's usage: only when no container waits for a previous point and at least one
    /// has usage; time info from the container with the earliest timestamp
    /// (metrics-server `pkg/storage/pod.go`, reference §2.4); measured by `measure`.
    fn build_usage(&self, measure: Option<Measure>) -> Option<PodUsage> {
        if self.containers.iter().any(|c| c.rate == Rate::Pending) {
            return None;
        }
        let mut earliest: Option<Usage> = None;
        let containers: Containers = self
            .containers
            .iter()
            .filter_map(|c| match c.rate {
                Rate::Ready(usage) => {
                    if earliest.is_none_or(|e| usage.timestamp_ns < e.timestamp_ns) {
                        earliest = Some(usage);
                    }
                    // A container's swap is served where it is in use: kubelets on cgroup v2
                    // report 0 for every container of a node without swap, and a `swap: 0` in
                    // each would grow every list (a tenth of a protobuf one) for clients that
                    // never ask, while `kubectl top --show-swap` sums a pod's containers the
                    // same without it. A node's swap is served as reported.
                    Some(ContainerUsage::new(
                        c.name.clone(),
                        usage.cpu_nanocores,
                        usage.memory_bytes,
                        usage.swap_bytes.filter(|&bytes| bytes > 0),
                    ))
                }
                Rate::Pending | Rate::Failed => None,
            })
            .collect();
        let earliest = earliest?;
        let containers_len = measure.map_or(0, |measure| measure(&containers));
        Some(PodUsage {
            timestamp_ns: earliest.timestamp_ns,
            window_ns: earliest.window_ns,
            containers,
            containers_len,
        })
    }
}
