//! An index of one namespace's pods by label: key, then value, then the names of the pods
//! that carry it. A namespaced list with an equality requirement (`app=web`, `app in (a,b)`,
//! what the HPA and the VPA ask) reads the pods it answers instead of every pod of the
//! namespace. Hash maps with std's randomly seeded hasher: label keys and values come from
//! users, so no fixed seed lets them force collisions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Labels;

/// The names of the pods that carry one label value.
type Names = HashSet<Arc<str>>;

/// Names of the pods of one namespace by label key and value.
#[derive(Debug, Default)]
pub(super) struct LabelIndex {
    by_key: HashMap<Arc<str>, HashMap<Arc<str>, Names>>,
}

impl LabelIndex {
    /// Records that pod `name` carries `labels`.
    pub(super) fn add(&mut self, name: &Arc<str>, labels: &Labels) {
        for (key, value) in labels.0.iter() {
            self.by_key
                .entry(key.clone())
                .or_default()
                .entry(value.clone())
                .or_default()
                .insert(name.clone());
        }
    }

    /// Forgets that pod `name` carries `labels`; empty sets and maps go.
    pub(super) fn remove(&mut self, name: &str, labels: &Labels) {
        for (key, value) in labels.0.iter() {
            let Some(values) = self.by_key.get_mut(&**key) else {
                continue;
            };
            if let Some(names) = values.get_mut(&**value) {
                names.remove(name);
                if names.is_empty() {
                    values.remove(&**value);
                }
            }
            if values.is_empty() {
                self.by_key.remove(&**key);
            }
        }
    }

    /// The names carrying `key` with any of `values` (an `=`, `==` or `in` requirement), and
    /// how many there are.
    pub(super) fn candidates<'a>(
        &'a self,
        key: &str,
        values: &'a [String],
    ) -> (usize, impl Iterator<Item = &'a Arc<str>> + 'a) {
        let sets: Vec<&Names> = self
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
        (count, sets.into_iter().flatten())
    }

    /// (key, value, name) entries held: one per label of every indexed pod.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.by_key
            .values()
            .flat_map(HashMap::values)
            .map(HashSet::len)
            .sum()
    }
}
