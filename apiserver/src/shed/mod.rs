//! Load shedding: who is served now, who waits (briefly, fairly) and who gets a 429, instead
//! of hanging. Modelled on kube-apiserver's max-in-flight filter, API Priority and Fairness
//! and KEP-4568 (resilient watch-cache initialization); aggregation-contract §5.
//!
//! Two [`Filter`]s, where kube-apiserver has the matching steps:
//! - [`Admission`] (APF's place: after authentication, which it needs for the user, and
//!   before authorization, so a shed request costs no SubjectAccessReview):
//!   1. **Exempt**: `system:masters`, `system:kube-aggregator`, `system:aggregator`, and the
//!      discovery, OpenAPI, `/version`, health and `/metrics` paths pass untouched.
//!   2. **Seats**: `--max-requests-inflight` seats split between autoscalers (HPA, VPA,
//!      kube-system service accounts) and everyone else; per-user fair queues with a bounded
//!      length and wait; then a 429 with an adaptive Retry-After (at most 2 s for HPA-shaped
//!      requests).
//! - [`ColdStore`] (the storage layer's place: after authorization, so an unauthorized
//!   caller still gets its 403): until the scrape loop's first round is complete and the
//!   store has node and pod usage, and for at most the startup window, cluster-wide LISTs
//!   get 429 `storage is (re)initializing` with `Retry-After = clamp(e^(0.06 t), 1, 30)`;
//!   namespaced LISTs and GETs are served from what exists. One served past the window
//!   while the round is still incomplete is logged (once) and counted
//!   (`apiserver_storage_incomplete_lists_total`). Exempt users and paths are exempt here
//!   too.
//!
//! Every 429 is a JSON `Status` (reason `TooManyRequests`, `details.retryAfterSeconds`) with
//! an integer `Retry-After` header, and no `X-Kubernetes-PF-*` headers (kube-apiserver adds
//! its own when proxying, §1.2).
//!
//! # Layout
//! - [`class`]: exempt paths and users, the two classes, flows, request shapes.
//! - [`queue`]: one class's seats and per-flow fair queue.
//! - [`retry`]: adaptive Retry-After (APF's dropped-requests tracker) and the cold-store curve.
//! - [`metrics`]: `apiserver_flowcontrol_*` families.

pub mod class;
pub mod metrics;
pub mod queue;
pub mod retry;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use http::request::Parts;
use prometheus_client::registry::Registry;
use scraper::scrape::Progress;
use scraper::store::Store;
use tokio::time::Instant;

use self::class::{Class, Shape};
use self::metrics::{ClassMetrics, Metrics};
use self::queue::{Level, Limits, Rejection};
use self::retry::Tracker;
use crate::auth::UserInfo;
use crate::serve::{Filter, Guard, Verdict};
use crate::status::Status;

/// The message of an overload 429, k8s.io/apiserver's `tooManyRequests` wording.
pub const OVERLOADED: &str = "Too many requests, please try again later.";
/// The message of a cold-store 429, KEP-4568's.
pub const INITIALIZING: &str = "storage is (re)initializing";
/// The `reason` label of a cold-store 429.
pub const STORAGE_INITIALIZING: &str = "storage-initializing";
/// Retry-After never exceeds this for HPA-shaped requests: client-go retries up to 10 times,
/// sleeping Retry-After each time, inside one of the HPA's 5 workers (§5.6).
pub const HPA_MAX_RETRY_AFTER_SECONDS: u32 = 2;

/// Load-shedding settings, from the neutral [`config`](crate::config) module.
pub use crate::config::Shed as Config;

impl Config {
    /// The seats and queue bounds of [`Class::Autoscalers`] and [`Class::Default`].
    pub fn limits(&self) -> [Limits; 2] {
        let seats = |n: usize| Limits {
            seats: n,
            per_flow: self.queue_length_per_user,
            total: n.max(4 * self.queue_length_per_user),
            wait: self.queue_wait,
        };
        if self.max_in_flight == 0 {
            return [seats(0), seats(0)];
        }
        let percent = usize::from(self.autoscaler_percent.min(100));
        let autoscalers = (self.max_in_flight * percent / 100).max(1);
        let others = self.max_in_flight.saturating_sub(autoscalers).max(1);
        [seats(autoscalers), seats(others)]
    }
}

/// The admission filter.
pub struct Admission {
    levels: [Arc<Level>; 2],
    trackers: [Tracker; 2],
    cold: Arc<Cold>,
    metrics: Metrics,
    exempt: ClassMetrics,
    clock: fn() -> i64,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("levels", &self.levels)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// Admission over `store` and the scrape loop's `progress` (which decide the cold-store
    /// rule), started now, with its metric families registered on `registry`.
    pub fn new(
        config: Config,
        store: Arc<Store>,
        progress: Arc<Progress>,
        registry: &mut Registry,
    ) -> Self {
        let metrics = Metrics::new(registry);
        let started = Instant::now();
        let [a, d] = config.limits();
        Admission {
            levels: [
                Level::new(a, metrics.class(Class::Autoscalers)),
                Level::new(d, metrics.class(Class::Default)),
            ],
            trackers: [
                Tracker::new(config.max_retry_after, started),
                Tracker::new(config.max_retry_after, started),
            ],
            cold: Arc::new(Cold {
                store,
                progress,
                started,
                window: config.cold_store_window,
                warm: AtomicBool::new(false),
                incomplete_logged: AtomicBool::new(false),
            }),
            exempt: metrics.class(Class::Exempt),
            metrics,
            clock: crate::serve::router::unix_now_ns,
        }
    }

    /// Replaces the wall clock (Unix ns) the store's readiness is judged at (tests).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    /// The cold-store filter over the same store, start time and metrics; it goes after
    /// authorization.
    pub fn cold_store(&self) -> ColdStore {
        ColdStore {
            cold: Arc::clone(&self.cold),
            metrics: self.metrics.clone(),
            clock: self.clock,
        }
    }

    /// The seats and queue of a limited class (`None` for [`Class::Exempt`]).
    pub fn level(&self, class: Class) -> Option<&Arc<Level>> {
        match class {
            Class::Exempt => None,
            Class::Autoscalers => Some(&self.levels[0]),
            Class::Default => Some(&self.levels[1]),
        }
    }

    fn tracker(&self, class: Class) -> &Tracker {
        match class {
            Class::Autoscalers => &self.trackers[0],
            Class::Exempt | Class::Default => &self.trackers[1],
        }
    }

    /// Decides on one request: a guard to hold while it is served, or the 429 to send.
    pub async fn admit(
        &self,
        shape: Shape,
        flow: &str,
    ) -> Result<Option<Guard>, http::Response<crate::body::Body>> {
        let Some(level) = self.level(shape.class) else {
            self.exempt.inc_executing();
            return Ok(Some(Box::new(ExemptSeat(self.exempt.clone()))));
        };
        let now = Instant::now();
        match level.acquire(flow).await {
            Ok(seat) => {
                self.metrics.waited(shape.class, true, now.elapsed());
                Ok(Some(Box::new(seat)))
            }
            Err(rejection) => {
                self.metrics.waited(shape.class, false, now.elapsed());
                Err(self.reject(shape, flow, rejection))
            }
        }
    }

    fn reject(
        &self,
        shape: Shape,
        flow: &str,
        rejection: Rejection,
    ) -> http::Response<crate::body::Body> {
        let mut seconds = self.tracker(shape.class).drop_one(Instant::now());
        if shape.hpa_shaped {
            seconds = seconds.min(HPA_MAX_RETRY_AFTER_SECONDS);
        }
        self.metrics.rejected(shape.class, rejection.as_str());
        shed(shape.class, rejection.as_str(), flow, seconds);
        Status::too_many_requests(OVERLOADED, seconds).into_response()
    }
}

impl Filter for Admission {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let user = parts.extensions.get::<UserInfo>();
            let shape = class::shape(&parts.method, parts.uri.path(), parts.uri.query(), user);
            let flow = class::flow_of(user);
            match self.admit(shape, flow).await {
                Ok(guard) => {
                    // The cold-store check after authorization reads it instead of
                    // classifying the request again (the user does not change in between).
                    parts.extensions.insert(shape);
                    Verdict::Pass(guard)
                }
                Err(response) => Verdict::Reject(response),
            }
        })
    }
}

/// The KEP-4568 rule as a filter; see [`Admission::cold_store`].
pub struct ColdStore {
    cold: Arc<Cold>,
    metrics: Metrics,
    clock: fn() -> i64,
}

impl std::fmt::Debug for ColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdStore")
            .field("cold", &self.cold)
            .finish_non_exhaustive()
    }
}

impl ColdStore {
    /// The 429 for a cluster-wide LIST while the store is cold; `None` lets it pass.
    pub fn reject(&self, shape: Shape, flow: &str) -> Option<http::Response<crate::body::Body>> {
        if !shape.cluster_wide_list {
            return None;
        }
        match self.cold.check(Instant::now(), (self.clock)()) {
            Coldness::Warm => None,
            Coldness::Incomplete => {
                self.metrics.incomplete(shape.class);
                None
            }
            Coldness::Cold { retry_after } => {
                self.metrics.rejected(shape.class, STORAGE_INITIALIZING);
                shed(shape.class, STORAGE_INITIALIZING, flow, retry_after);
                Some(Status::too_many_requests(INITIALIZING, retry_after).into_response())
            }
        }
    }
}

impl Filter for ColdStore {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let user = parts.extensions.get::<UserInfo>();
            let shape = match parts.extensions.get::<Shape>() {
                Some(shape) => *shape,
                None => class::shape(&parts.method, parts.uri.path(), parts.uri.query(), user),
            };
            match self.reject(shape, class::flow_of(user)) {
                None => Verdict::Pass(None),
                Some(response) => Verdict::Reject(response),
            }
        })
    }
}

/// The event of one 429.
fn shed(class: Class, reason: &'static str, user: &str, retry_after_seconds: u32) {
    tracing::debug!(
        class = class.as_str(),
        reason,
        user,
        retry_after_seconds,
        "request shed"
    );
}

/// Counts an exempt request as executing while it is served.
struct ExemptSeat(ClassMetrics);

impl Drop for ExemptSeat {
    fn drop(&mut self) {
        self.0.dec_executing();
    }
}

/// The KEP-4568 rule for the metrics store.
#[derive(Debug)]
struct Cold {
    store: Arc<Store>,
    progress: Arc<Progress>,
    started: Instant,
    window: Duration,
    /// Latched once the first round was complete with data: a later gap in the data is
    /// served as it is (staleness handles it), not rejected.
    warm: AtomicBool,
    /// The first incomplete list was logged.
    incomplete_logged: AtomicBool,
}

/// What the cold-store rule says of a cluster-wide LIST now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coldness {
    /// Served: the data is complete.
    Warm,
    /// Served, though the first round is incomplete (the window passed, or is off).
    Incomplete,
    /// Rejected with this Retry-After.
    Cold { retry_after: u32 },
}

impl Cold {
    fn check(&self, now: Instant, now_ns: i64) -> Coldness {
        if self.warm.load(Ordering::Relaxed) {
            return Coldness::Warm;
        }
        let readiness = self.store.readiness(now_ns);
        if self.progress.first_round_complete() && readiness.nodes && readiness.pods {
            self.warm.store(true, Ordering::Relaxed);
            return Coldness::Warm;
        }
        let t = now.saturating_duration_since(self.started);
        if self.window.is_zero() || t >= self.window {
            if !self.incomplete_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    pending_nodes = self.progress.first_round_pending(),
                    nodes = readiness.nodes,
                    pods = readiness.pods,
                    window = ?self.window,
                    "serving a cluster-wide list before the first scrape round is complete: \
                     it may lack nodes and pods (counted in apiserver_storage_incomplete_lists_total)"
                );
            }
            return Coldness::Incomplete;
        }
        Coldness::Cold {
            retry_after: retry::cold_store_seconds(t),
        }
    }
}
