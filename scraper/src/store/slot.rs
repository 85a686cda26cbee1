//! Where a pod's served usage lives: one small shared cell per pod entry, which the pod's
//! inventory record can point at, so a cluster-wide list reads each pod's usage without a
//! hash lookup in the store.
//!
//! The owning node's ingest publishes into the slot at every scrape of the pod, and the
//! store retires it when the entry leaves the map (the entry's `Drop`), so a reader that
//! followed a link never sees usage of a pod the store no longer holds. The slot also carries
//! the owner mark: when another node takes the pod over, the mark changes, and the previous
//! owner's publishes are refused from then on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use crate::point::PodUsage;

/// Gives every [`super::Store`] its own id, so a link made by one store is never read as
/// another's.
static NEXT_STORE_ID: AtomicU32 = AtomicU32::new(1);

/// A fresh store id.
pub(super) fn store_id() -> u32 {
    NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed)
}

/// One pod entry's served usage, shared between the store entry and the links to it.
#[derive(Debug)]
pub struct UsageSlot {
    state: Mutex<SlotState>,
}

#[derive(Debug)]
struct SlotState {
    usage: Option<Arc<PodUsage>>,
    /// When the owning node's scrape that reported the pod finished, Unix ns.
    seen_ns: i64,
    /// The store that owns the entry.
    store: u32,
    /// Changes whenever another node takes the pod over: only the owner that read the
    /// current mark may publish.
    owner: u32,
    /// The entry left the store: nothing may be read from this slot any more.
    retired: bool,
}

/// What a read through a link found.
pub(super) enum Linked {
    /// The slot is live: this is the pod's usage (or none) and when it was seen.
    Live(Option<Arc<PodUsage>>, i64),
    /// The slot belongs to another store or its entry is gone: look the pod up.
    Gone,
}

impl UsageSlot {
    pub(super) fn new(store: u32) -> Arc<UsageSlot> {
        Arc::new(UsageSlot {
            state: Mutex::new(SlotState {
                usage: None,
                seen_ns: 0,
                store,
                owner: 0,
                retired: false,
            }),
        })
    }

    /// Replaces the served usage and when the pod was seen, if the slot is live and `owner`
    /// is its current owner mark; otherwise changes nothing and says so.
    ///
    /// A usage no reader holds any more (the common case: lists hold one only while they
    /// write it) is written over in place, so a scrape allocates no new one per pod; one a
    /// reader still holds is left to it and a new one takes its place.
    pub(super) fn publish(&self, owner: u32, usage: Option<PodUsage>, seen_ns: i64) -> bool {
        let mut state = self.state.lock();
        if state.retired || state.owner != owner {
            return false;
        }
        state.seen_ns = seen_ns;
        let old = match (&mut state.usage, usage) {
            (Some(held), Some(usage)) => match Arc::get_mut(held) {
                Some(value) => (Some(std::mem::replace(value, usage)), None),
                None => (None, Some(std::mem::replace(held, Arc::new(usage)))),
            },
            (slot, usage) => (None, std::mem::replace(slot, usage.map(Arc::new))),
        };
        drop(state);
        // The previous usage (its containers' names, a spilled list) is freed outside the lock.
        drop(old);
        true
    }

    /// The current owner mark.
    pub(super) fn owner(&self) -> u32 {
        self.state.lock().owner
    }

    /// A new owner takes the pod over: the mark changes (the previous owner's publishes
    /// are refused from now on) and the new one is returned.
    pub(super) fn take_over(&self) -> u32 {
        let mut state = self.state.lock();
        state.owner = state.owner.wrapping_add(1);
        state.owner
    }

    /// When the pod was last seen, Unix ns.
    pub(super) fn seen_ns(&self) -> i64 {
        self.state.lock().seen_ns
    }

    /// The usage and when it was seen.
    pub(super) fn get(&self) -> (Option<Arc<PodUsage>>, i64) {
        let state = self.state.lock();
        (state.usage.clone(), state.seen_ns)
    }

    /// The usage, if the slot is `store`'s and its entry is still held.
    pub(super) fn read(&self, store: u32) -> Linked {
        let state = self.state.lock();
        if state.retired || state.store != store {
            return Linked::Gone;
        }
        Linked::Live(state.usage.clone(), state.seen_ns)
    }

    /// The slot locked, if it is `store`'s, its entry is still held and nobody else holds
    /// the lock right now: what [`super::Store::pods_linked`] holds for a batch of pods at
    /// once. It never waits, so holding several can never deadlock; a busy slot is read
    /// the ordinary way after the batch's locks are released.
    pub(super) fn try_lock_live(&self, store: u32) -> Option<LiveSlot<'_>> {
        let state = self.state.try_lock()?;
        (!state.retired && state.store == store).then_some(LiveSlot(state))
    }

    /// The entry left the store.
    pub(super) fn retire(&self) {
        let old = {
            let mut state = self.state.lock();
            state.retired = true;
            state.usage.take()
        };
        drop(old);
    }
}

/// A live slot, locked: its usage can be read by reference while the lock is held.
pub(super) struct LiveSlot<'a>(MutexGuard<'a, SlotState>);

impl LiveSlot<'_> {
    /// The usage, borrowed.
    pub(super) fn usage(&self) -> Option<&Arc<PodUsage>> {
        self.0.usage.as_ref()
    }

    /// When the pod was seen.
    pub(super) fn seen_ns(&self) -> i64 {
        self.0.seen_ns
    }
}

/// A pod record's link to the store slot of the same pod, made by the first
/// [`super::Store::pod_linked`] for it; empty until then (and in every clone, since a clone
/// may be given another key).
///
/// A link is only read by the store that made it. When the store drops the pod (its node
/// went away, its data went stale) the slot is retired and reads fall back to a lookup.
#[derive(Default)]
pub struct UsageLink(pub(super) OnceLock<Arc<UsageSlot>>);

impl UsageLink {
    /// An empty link.
    pub fn new() -> Self {
        UsageLink::default()
    }

    /// Whether a store has linked this record.
    pub fn is_linked(&self) -> bool {
        self.0.get().is_some()
    }

    /// Loads the linked slot's memory (a plain read, no lock) and discards it, so a reader
    /// of many pods can have the next ones' slots on their way while it reads this one.
    pub fn warm(&self) {
        if let Some(slot) = self.0.get() {
            std::hint::black_box(Arc::strong_count(slot));
        }
    }
}

impl Clone for UsageLink {
    fn clone(&self) -> Self {
        UsageLink::default()
    }
}

/// Links never take part in a record's equality: two records with the same fields are equal
/// whether or not a store has linked them.
impl PartialEq for UsageLink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for UsageLink {}

impl std::fmt::Debug for UsageLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_linked() {
            "UsageLink(linked)"
        } else {
            "UsageLink"
        })
    }
}
