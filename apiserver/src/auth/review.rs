//! What every outbound review (TokenReview, SubjectAccessReview) goes through, so that
//! authentication is not an amplifier of whatever reaches the port:
//!
//! - [`Reviews`]: the answers, in a bounded LRU cache whose entries expire (O(1) per lookup
//!   and per insert, also at its size cap), and at most one call in flight per distinct key
//!   (single-flight: concurrent requests with the same unseen token, or the same
//!   authorization question, wait for the one call and share its answer, error included);
//! - [`Limiter`]: the calls actually made, limited globally and per source address
//!   (`governor` token buckets); a call over the limit is not made and the request gets 429
//!   with `Retry-After`;
//! - [`call_with_retry`]: a call that fails in transport (connection error, timeout, 429 or
//!   5xx from the API server) is tried once more after [`RETRY_BACKOFF`].

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use lru::LruCache;
use parking_lot::Mutex;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// Answers kept at most per cache; upstream uses LRU caches of a similar size.
pub(crate) const CAPACITY: usize = 4096;

/// The pause before the one retry of a call that failed in transport.
pub(crate) const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// Source addresses whose buckets are kept at most; past it the idle ones are dropped, and
/// while it is still full a new address is refused (a flood from that many addresses at
/// once is not a client to serve).
const MAX_SOURCES: usize = 65_536;

/// How many per-source checks pass between two sweeps of idle buckets.
const SWEEP_EVERY: usize = 4096;

/// The outbound review budget (ours): per second, bursts of twice that. Zero is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewLimits {
    /// Calls per second in all.
    pub qps: u32,
    /// Calls per second for one source address, for requests that did not come through the
    /// front proxy (the aggregator's are held to `qps` only: every user's requests come from
    /// its address).
    pub per_source_qps: u32,
}

impl Default for ReviewLimits {
    /// 200 per second in all (the QPS k8s.io/apiserver gives its delegated authentication
    /// and authorization clients), 20 per second per source.
    fn default() -> Self {
        ReviewLimits {
            qps: 200,
            per_source_qps: 20,
        }
    }
}

/// Which review budget a review that a request needs is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The global budget and the client address's own (a client that called directly).
    Source(IpAddr),
    /// The global budget only: the front proxy's requests carry every user's, from one
    /// address.
    Global,
    /// None: requests that are never shed, kube-aggregator's own (its discovery and OpenAPI
    /// fetches, as `system:kube-aggregator` and `system:aggregator`) and those of the paths
    /// that are never shed (discovery, OpenAPI, health, `/metrics`). They ask few distinct
    /// questions, each reviewed once per cache TTL, and a 429 there, with the budget spent
    /// by autoscalers' selectors, would cost the aggregator its discovery of the API.
    Exempt,
}

impl Budget {
    /// A direct client's budget, or the front proxy's (`None`).
    pub fn of(source: Option<IpAddr>) -> Self {
        source.map_or(Budget::Global, Budget::Source)
    }
}

/// Why a review has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Over the review budget; try again after this long.
    Throttled(Duration),
    /// The call failed (after its retry, where one was due).
    Call(String),
}

fn quota(qps: u32) -> Option<Quota> {
    let qps = NonZeroU32::new(qps)?;
    let burst = NonZeroU32::new(qps.get().saturating_mul(2)).unwrap_or(qps);
    Some(Quota::per_second(qps).allow_burst(burst))
}

/// The review budget: one global bucket and one bucket per source address.
#[derive(Debug)]
pub(crate) struct Limiter {
    global: Option<DefaultDirectRateLimiter>,
    per_source: Option<DefaultKeyedRateLimiter<IpAddr>>,
    checks: AtomicUsize,
}

impl Limiter {
    pub(crate) fn new(limits: ReviewLimits) -> Self {
        Limiter {
            global: quota(limits.qps).map(RateLimiter::direct),
            per_source: quota(limits.per_source_qps).map(RateLimiter::keyed),
            checks: AtomicUsize::new(0),
        }
    }

    /// Takes one call from `budget`, or says how long to wait.
    pub(crate) fn check(&self, budget: Budget) -> Result<(), Duration> {
        let source = match budget {
            Budget::Exempt => return Ok(()),
            Budget::Global => None,
            Budget::Source(source) => Some(source),
        };
        let clock = DefaultClock::default();
        if let (Some(buckets), Some(source)) = (&self.per_source, source) {
            let sweep = self
                .checks
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(SWEEP_EVERY);
            if sweep || buckets.len() >= MAX_SOURCES {
                buckets.retain_recent();
                buckets.shrink_to_fit();
                if buckets.len() >= MAX_SOURCES {
                    return Err(Duration::from_secs(1));
                }
            }
            buckets
                .check_key(&source)
                .map_err(|not_until| not_until.wait_time_from(clock.now()))?;
        }
        match &self.global {
            Some(bucket) => bucket
                .check()
                .map_err(|not_until| not_until.wait_time_from(clock.now())),
            None => Ok(()),
        }
    }

    /// Source addresses with a bucket.
    #[cfg(test)]
    pub(crate) fn sources(&self) -> usize {
        self.per_source.as_ref().map_or(0, |b| b.len())
    }
}

type Shared<V> = Arc<OnceCell<Result<V, Failure>>>;

/// Review answers by key: cached until they expire, one call in flight per key.
#[derive(Debug)]
pub(crate) struct Reviews<K: Hash + Eq, V> {
    answers: Mutex<LruCache<K, (Instant, V)>>,
    in_flight: Mutex<HashMap<K, Shared<V>>>,
}

impl<K: Eq + Hash + Clone, V: Clone> Reviews<K, V> {
    /// An empty cache holding at most `capacity` answers.
    pub(crate) fn new(capacity: usize) -> Self {
        Reviews {
            answers: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `key` if it has not expired at `now`.
    pub(crate) fn cached(&self, key: &K, now: Instant) -> Option<V> {
        let mut answers = self.answers.lock();
        match answers.get(key) {
            Some((expires, value)) if *expires > now => Some(value.clone()),
            Some(_) => {
                answers.pop(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `ttl` (not at all when zero); a full cache drops its least recently
    /// used answer.
    pub(crate) fn insert(&self, key: K, value: V, now: Instant, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        self.answers.lock().put(key, (now + ttl, value));
    }

    /// The cached answer, or the answer of the call in flight for `key`, or `review()`'s
    /// (value, how long to cache it). A failure is shared with whoever waited for the same
    /// call, and not cached. If the caller making the call goes away, a waiter makes it.
    pub(crate) async fn get_or_review<F, Fut>(&self, key: &K, review: F) -> Result<V, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(V, Duration), Failure>>,
    {
        if let Some(value) = self.cached(key, Instant::now()) {
            return Ok(value);
        }
        let cell = Arc::clone(self.in_flight.lock().entry(key.clone()).or_default());
        let guard = InFlight {
            reviews: self,
            key,
            cell,
        };
        guard
            .cell
            .get_or_init(|| async {
                // A call that finished just before this one joined may have filled the cache.
                if let Some(value) = self.cached(key, Instant::now()) {
                    return Ok(value);
                }
                let (value, ttl) = review().await?;
                self.insert(key.clone(), value.clone(), Instant::now(), ttl);
                Ok(value)
            })
            .await
            .clone()
    }

    /// Answers held (expired or not).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.answers.lock().len()
    }

    /// Callers waiting on the call in flight for `key`.
    #[cfg(test)]
    pub(crate) fn waiting(&self, key: &K) -> usize {
        self.in_flight
            .lock()
            .get(key)
            .map_or(0, |cell| Arc::strong_count(cell) - 1)
    }
}

/// One caller's share of a call in flight: the last one to leave, answered or cancelled,
/// takes the entry out, so abandoned calls leave nothing behind.
struct InFlight<'a, K: Hash + Eq + Clone, V: Clone> {
    reviews: &'a Reviews<K, V>,
    key: &'a K,
    cell: Shared<V>,
}

impl<K: Hash + Eq + Clone, V: Clone> Drop for InFlight<'_, K, V> {
    fn drop(&mut self) {
        let mut in_flight = self.reviews.in_flight.lock();
        let ours = in_flight
            .get(self.key)
            .is_some_and(|cell| Arc::ptr_eq(cell, &self.cell));
        // The map and this guard hold the last two references when nobody else waits.
        if ours && (self.cell.initialized() || Arc::strong_count(&self.cell) <= 2) {
            in_flight.remove(self.key);
        }
    }
}

/// One attempt's failure.
pub(crate) struct Attempt {
    /// A connection error, a timeout, or a 429 or 5xx answer: worth one more try.
    pub(crate) transient: bool,
    pub(crate) message: String,
}

impl Attempt {
    /// Classifies a failed `kube` call.
    pub(crate) fn from_kube(what: &str, error: &kube::Error) -> Self {
        let transient = match error {
            kube::Error::Api(status) => status.code == 429 || status.code >= 500,
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            _ => false,
        };
        Attempt {
            transient,
            message: format!("{what} failed: {error}"),
        }
    }

    /// A call that ran past its timeout.
    pub(crate) fn timed_out(what: &str, timeout: Duration) -> Self {
        Attempt {
            transient: true,
            message: format!("{what} timed out after {timeout:?}"),
        }
    }
}

/// `call()`, and once more after [`RETRY_BACKOFF`] if it failed transiently.
pub(crate) async fn call_with_retry<T, F, Fut>(mut call: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt>>,
{
    match call().await {
        Ok(value) => Ok(value),
        Err(first) if first.transient => {
            tracing::debug!(error = %first.message, "review failed; retrying once");
            tokio::time::sleep(RETRY_BACKOFF).await;
            call().await.map_err(|second| Failure::Call(second.message))
        }
        Err(first) => Err(Failure::Call(first.message)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn answers_expire_at_their_ttl() {
        let reviews = Reviews::new(8);
        let now = Instant::now();
        reviews.insert("k", 1, now, Duration::from_secs(10));
        assert_eq!(reviews.cached(&"k", now + Duration::from_secs(9)), Some(1));
        assert_eq!(reviews.cached(&"k", now + Duration::from_secs(10)), None);
        assert_eq!(reviews.len(), 0, "an expired answer found is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_drops_its_least_recently_used_answer() {
        let reviews = Reviews::new(2);
        let now = Instant::now();
        let ttl = Duration::from_secs(20);
        reviews.insert(1, "a", now, ttl);
        reviews.insert(2, "b", now, ttl);
        assert_eq!(
            reviews.cached(&1, now),
            Some("a"),
            "1 is now the most recent"
        );
        reviews.insert(3, "c", now, ttl);
        assert_eq!(reviews.len(), 2);
        assert_eq!(
            reviews.cached(&2, now),
            None,
            "2 was the least recently used"
        );
        assert_eq!(reviews.cached(&1, now), Some("a"));
        assert_eq!(reviews.cached(&3, now), Some("c"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_ttl_caches_nothing() {
        let reviews = Reviews::new(2);
        reviews.insert(1, "a", Instant::now(), Duration::ZERO);
        assert_eq!(reviews.len(), 0);
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_call_and_its_failure() {
        let reviews = Arc::new(Reviews::<u8, u8>::new(8));
        let calls = Arc::new(AtomicU32::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut waiters = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (reviews, calls, gate) = (reviews.clone(), calls.clone(), gate.clone());
            waiters.spawn(async move {
                reviews
                    .get_or_review(&7, || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Err::<(u8, Duration), _>(Failure::Call("refused".into()))
                    })
                    .await
            });
        }
        while reviews.waiting(&7) < 20 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        while let Some(result) = waiters.join_next().await {
            assert_eq!(
                result.ok(),
                Some(Err(Failure::Call("refused".into()))),
                "every waiter gets the one call's failure"
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(reviews.waiting(&7), 0, "nothing left in flight");
        assert_eq!(reviews.len(), 0, "a failure is not cached");
    }

    #[tokio::test]
    async fn a_cancelled_caller_leaves_nothing_in_flight_and_the_next_one_calls() {
        let reviews = Reviews::<u8, u8>::new(8);
        let pending = reviews.get_or_review(&1, std::future::pending);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), pending)
                .await
                .is_err()
        );
        assert_eq!(reviews.waiting(&1), 0);
        let answer = reviews
            .get_or_review(&1, || async { Ok((5, Duration::from_secs(10))) })
            .await;
        assert_eq!(answer, Ok(5));
        let cached = reviews
            .get_or_review(&1, || async { Err(Failure::Call("not called".into())) })
            .await;
        assert_eq!(cached, Ok(5), "the answer was cached");
    }

    #[test]
    fn the_budget_is_per_source_then_global_and_says_when_to_come_back() {
        let limiter = Limiter::new(ReviewLimits {
            qps: 3,
            per_source_qps: 1,
        });
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        // Bursts of twice the rate: 2 per source, 6 in all.
        assert!(limiter.check(Budget::of(a)).is_ok());
        assert!(limiter.check(Budget::of(a)).is_ok());
        let wait = limiter
            .check(Budget::of(a))
            .expect_err("a's burst is spent");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            limiter.check(Budget::of(b)).is_ok(),
            "b has a budget of its own"
        );
        assert!(limiter.check(Budget::of(b)).is_ok());
        assert!(limiter.check(Budget::Global).is_ok());
        assert!(limiter.check(Budget::Global).is_ok());
        assert!(
            limiter.check(Budget::Global).is_err(),
            "the global burst is spent"
        );
        assert!(
            (0..100).all(|_| limiter.check(Budget::Exempt).is_ok()),
            "never-shed requests are outside it"
        );
        assert!(
            limiter.check(Budget::of(b)).is_err(),
            "and spend none of it"
        );
        assert_eq!(limiter.sources(), 2);
    }

    #[test]
    fn zero_is_unlimited() {
        let limiter = Limiter::new(ReviewLimits {
            qps: 0,
            per_source_qps: 0,
        });
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        assert!((0..10_000).all(|_| limiter.check(Budget::of(a)).is_ok()));
        assert_eq!(limiter.sources(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_retried_once_and_a_permanent_one_is_not() {
        let calls = AtomicU32::new(0);
        let flaky = call_with_retry(|| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(Attempt {
                        transient: true,
                        message: "connection reset".into(),
                    }),
                    _ => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(flaky, Ok(1));

        let calls = AtomicU32::new(0);
        let down = call_with_retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Err::<(), _>(Attempt {
                    transient: true,
                    message: "connection refused".into(),
                })
            }
        })
        .await;
        assert_eq!(down, Err(Failure::Call("connection refused".into())));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one retry, no more");

        let calls = AtomicU32::new(0);
        let bad = call_with_retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Err::<(), _>(Attempt {
                    transient: false,
                    message: "forbidden".into(),
                })
            }
        })
        .await;
        assert_eq!(bad, Err(Failure::Call("forbidden".into())));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
