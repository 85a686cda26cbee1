//! An index of one namespace's pods by label: key, then value, then the pods that carry it.
//! A namespaced list with an equality requirement (`app=web`, `app in (a,b)`, what the HPA
//! and the VPA ask) reads the pods it answers instead of every pod of the namespace. Hash
//! maps with std's randomly seeded hasher: label keys and values come from users, so no fixed
//! seed lets them force collisions. An entry is one pointer to the pod's record (a set
//! element of 8 bytes), found by the pod's name.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::PodRecord;

/// A pod's record in a set of one namespace, hashed and compared by its name.
#[derive(Clone, Debug)]
struct ByName(Arc<PodRecord>);

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.key.name == other.0.key.name
    }
}

impl Eq for ByName {}

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (*self.0.key.name).hash(state);
    }
}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.key.name
    }
}

/// The pods that carry one label value.
type Pods = HashSet<ByName>;

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

    /// The pods carrying `key` with any of `values` (an `=`, `==` or `in` requirement), and
    /// how many there are.
    pub(super) fn candidates<'a>(
        &'a self,
        key: &str,
        values: &'a [String],
    ) -> (usize, impl Iterator<Item = &'a Arc<PodRecord>> + 'a) {
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
        let count = sets.iter().map(|s| s.len()).sum();
        (count, sets.into_iter().flatten().map(|p| &p.0))
    }

    /// (key, value, pod) entries held: one per label of every indexed pod.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.by_key
            .values()
            .flat_map(HashMap::values)
            .map(HashSet::len)
            .sum()
    }
}
