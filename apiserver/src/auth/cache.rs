//! A bounded cache whose entries expire: the TokenReview and SubjectAccessReview results, as
//! k8s.io/apiserver's `cached_token_authenticator.go` and the webhook authorizer's
//! `responseCache` keep them.

use std::collections::HashMap;
use std::hash::Hash;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Entries kept at most; upstream uses LRU caches of a similar size.
pub(crate) const CAPACITY: usize = 4096;

/// Maps keys to values until an expiry instant. Time is a parameter, so a paused tokio clock
/// drives it in tests.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache holding at most `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The value for `key` if it has not expired at `now`.
    pub(crate) fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some((expires, value)) if *expires > now => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` until `expires`. When full, expired entries go first, then the entry
    /// closest to expiry.
    pub(crate) fn insert(&self, key: K, value: V, now: Instant, expires: Instant) {
        if expires <= now {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (at, _)| *at > now);
            if entries.len() >= self.capacity {
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(soonest) = soonest {
                    entries.remove(&soonest);
                }
            }
        }
        entries.insert(key, (expires, value));
    }

    /// Entries currently held (expired or not).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_at_their_ttl() {
        let cache = TtlCache::new(8);
        let now = Instant::now();
        cache.insert("k", 1, now, now + Duration::from_secs(10));
        assert_eq!(cache.get(&"k", now + Duration::from_secs(9)), Some(1));
        assert_eq!(cache.get(&"k", now + Duration::from_secs(10)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_evicts_instead_of_growing() {
        let cache = TtlCache::new(2);
        let now = Instant::now();
        cache.insert(1, "a", now, now + Duration::from_secs(5));
        cache.insert(2, "b", now, now + Duration::from_secs(20));
        cache.insert(3, "c", now, now + Duration::from_secs(20));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&1, now), None, "the entry closest to expiry goes");
        assert_eq!(cache.get(&3, now), Some("c"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_ttl_caches_nothing() {
        let cache = TtlCache::new(2);
        let now = Instant::now();
        cache.insert(1, "a", now, now);
        assert_eq!(cache.get(&1, now), None);
        assert_eq!(cache.len(), 0);
    }
}
