//! An index of one namespace's pods by label: key, then value, then the pods that carry it.
//! A namespaced list with an equality requirement (`app=web`, `app in (a,b)`, what the HPA
//! and the VPA ask) reads the pods it answers instead of every pod of the namespace. Keys
//! and values are in hash maps with std's randomly seeded hasher: they come from users, so
//! no fixed seed lets them force collisions. The pods of one value are a set ordered by
//! name, the order a list answers in, so a one-value requirement's pods need no sorting per
//! request (an HPA asks every sync); an entry is one pointer to the pod's record (8 bytes in
//! a B-tree node, about what a hash set's slot and control byte take).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::PodRecord;

/// A pod's record in a set of one namespace, ordered by its name.
#[derive(Clone, Debug)]
struct ByName(Arc<PodRecord>);

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.key.name == other.0.key.name
    }
}

impl Eq for ByName {}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByName {
    /// The names' order (the one [`Borrow<str>`] looks up by).
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.name.cmp(&other.0.key.name)
    }
}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.key.name
    }
}

/// The pods that carry one label value, by name.
type Pods = BTreeSet<ByName>;

/// What [`LabelIndex::candidates`] found.
pub(super) struct Candidates<I> {
    /// How many pods `pods` yields.
    pub(super) count: usize,
    /// Whether `pods` yields them in name order.
    pub(super) sorted: bool,
    /// The pods.
    pub(super) pods: I,
}

/// The pods of one namespace by label key and value.
#[derive(Debug, Default)]
pub(super) struct LabelIndex {
    by_key: HashMap<Arc<str>, HashMap<Arc<str>, Pods>>,
}

impl LabelIndex {
    /// Indexes `pod` under each of its labels (replacing an entry of the same name).
    pub(super) fn add(&mut self, pod: &Arc<PodRecord>) {
        for (key, value) in pod.labels.pairs().iter() {
            self.by_key
                .entry(key.clone())
                .or_default()
                .entry(value.clone())
                .or_default()
                .replace(ByName(pod.clone()));
        }
    }

    /// Forgets `pod` under each of its labels; empty sets and maps go.
    pub(super) fn remove(&mut self, pod: &PodRecord) {
        let name: &str = &pod.key.name;
        for (key, value) in pod.labels.pairs().iter() {
            let Some(values) = self.by_key.get_mut(&**key) else {
                continue;
            };
            if let Some(pods) = values.get_mut(&**value) {
                pods.remove(name);
                if pods.is_empty() {
                    values.remove(&**value);
                }
            }
            if values.is_empty() {
                self.by_key.remove(&**key);
            }
        }
    }

    /// The pods carrying `key` with any of `values` (an `=`, `==` or `in` requirement), how
    /// many there are, and whether they come sorted by name (they do when one value has pods).
    pub(super) fn candidates<'a>(
        &'a self,
        key: &str,
        values: &[String],
    ) -> Candidates<impl Iterator<Item = &'a Arc<PodRecord>> + use<'a>> {
        let sets: Vec<&Pods> = self
            .by_key
            .get(key)
            .map(|by_value| {
                values
                    .iter()
                    .filter_map(|v| by_value.get(v.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        Candidates {
            count: sets.iter().map(|s| s.len()).sum(),
            sorted: sets.len() <= 1,
            pods: sets.into_iter().flatten().map(|p| &p.0),
        }
    }

    /// (key, value, pod) entries held: one per label of every indexed pod.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.by_key
            .values()
            .flat_map(HashMap::values)
            .map(BTreeSet::len)
            .sum()
    }
}
