//! Which class a request belongs to, whose flow it is, and what shape it has, from the
//! authenticated user and the request line only (no body, no lookups).
//!
//! Mirrors the default APF FlowSchemas that matter for a metrics server (aggregation-contract
//! §5.2): `exempt` (group `system:masters`) and `probes` (health paths) are never limited; the
//! HPA and VPA identities and kube-system service accounts (`kube-controller-manager`,
//! `kube-system-service-accounts` → `workload-high`) get their own share; everyone else
//! (`service-accounts`, `global-default`) shares the rest, fairly by user.

use http::Method;

use crate::api::routes::{self, Resource, Route};
use crate::auth::{ANONYMOUS, UserInfo};

/// The group whose members are always served (max-in-flight and APF's `exempt`).
pub const MASTERS: &str = "system:masters";

/// Users that are never shed: kube-aggregator's availability probe, discovery and OpenAPI
/// fetches (the legacy discovery fallback arrives without `system:masters`, §2.4).
pub const AGGREGATOR_USERS: [&str; 2] = ["system:kube-aggregator", "system:aggregator"];

/// Autoscaler identities outside kube-system service accounts.
pub const AUTOSCALER_USERS: [&str; 1] = ["system:kube-controller-manager"];

/// Every service account of kube-system (the HPA's `horizontal-pod-autoscaler`, the VPA's
/// `vpa-recommender`) is an autoscaler, as APF's `kube-system-service-accounts` schema.
pub const KUBE_SYSTEM_SERVICE_ACCOUNTS: &str = "system:serviceaccount:kube-system:";

/// A concurrency class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Never limited, never rejected.
    Exempt,
    /// The HPA and the VPA (and kube-system service accounts).
    Autoscalers,
    /// Everyone else: humans (`kubectl top`), dashboards, other controllers.
    Default,
}

impl Class {
    /// The two limited classes, in index order.
    pub const LIMITED: [Class; 2] = [Class::Autoscalers, Class::Default];

    /// The `class` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Exempt => "exempt",
            Class::Autoscalers => "autoscalers",
            Class::Default => "default",
        }
    }
}

/// What admission needs to know about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Its class.
    pub class: Class,
    /// A LIST of every node, or of every pod across namespaces: what a cold store rejects.
    pub cluster_wide_list: bool,
    /// A namespaced pods LIST with a label selector, as the HPA sends: Retry-After stays short.
    pub hpa_shaped: bool,
}

/// Paths that are never shed: discovery (what the aggregator's availability probe and
/// discovery fetch read), OpenAPI, `/version`, health, `/metrics` and `/metrics/slis`.
pub fn exempt_path(path: &str) -> bool {
    let trimmed = path.trim_end_matches('/');
    let under = |prefix: &str| {
        trimmed == prefix
            || trimmed
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    matches!(
        trimmed,
        "/apis"
            | "/apis/metrics.k8s.io"
            | "/apis/metrics.k8s.io/v1beta1"
            | "/apis/metrics.k8s.io/v1"
            | "/version"
            | "/metrics"
            | "/metrics/slis"
    ) || under("/openapi")
        || under("/healthz")
        || under("/livez")
        || under("/readyz")
}

/// The class of a user (no user: anonymous, the default class).
pub fn class_of(user: Option<&UserInfo>) -> Class {
    let Some(user) = user else {
        return Class::Default;
    };
    if user.groups.iter().any(|g| g == MASTERS) || AGGREGATOR_USERS.contains(&user.name.as_str()) {
        Class::Exempt
    } else if AUTOSCALER_USERS.contains(&user.name.as_str())
        || user.name.starts_with(KUBE_SYSTEM_SERVICE_ACCOUNTS)
    {
        Class::Autoscalers
    } else {
        Class::Default
    }
}

/// The flow a request is queued in: its user name.
pub fn flow_of(user: Option<&UserInfo>) -> &str {
    user.map_or(ANONYMOUS, |u| u.name.as_str())
}

/// Classifies one request.
pub fn shape(method: &Method, path: &str, query: Option<&str>, user: Option<&UserInfo>) -> Shape {
    let class = if exempt_path(path) {
        Class::Exempt
    } else {
        class_of(user)
    };
    let mut shape = Shape {
        class,
        cluster_wide_list: false,
        hpa_shaped: false,
    };
    if class == Class::Exempt || !matches!(*method, Method::GET | Method::HEAD) {
        return shape;
    }
    let Some(Route::Resource(_, resource)) = routes::route(path) else {
        return shape;
    };
    match resource {
        Resource::Nodes | Resource::Pods(None) => {
            // A watch is answered 405 by the API; a cold store does not turn it into a 429.
            shape.cluster_wide_list = !is_watch(query);
        }
        Resource::Pods(Some(_)) => shape.hpa_shaped = has_label_selector(query),
        Resource::Node(_) | Resource::Pod(..) => {}
    }
    shape
}

/// Whether the API will filter by labels (its first `labelSelector` is not blank).
fn has_label_selector(query: Option<&str>) -> bool {
    crate::api::query::get(query, "labelSelector").is_some_and(|v| !v.trim().is_empty())
}

/// Whether the API reads the request as a watch.
fn is_watch(query: Option<&str>) -> bool {
    crate::api::query::flag(query, "watch")
}
