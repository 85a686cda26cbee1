//! Which API path a request is for. Trailing slashes are ignored, as go-restful does
//! (`tokenizePath` trims them).

use std::borrow::Cow;

use super::query::unescape_path;

/// The served versions of `metrics.k8s.io`, in preference order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `v1` (GA in Kubernetes 1.37, preferred).
    V1,
    /// `v1beta1`.
    V1beta1,
}

impl Version {
    /// Both, preferred first.
    pub const ALL: [Version; 2] = [Version::V1, Version::V1beta1];

    /// `v1` / `v1beta1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V1beta1 => "v1beta1",
        }
    }

    /// `metrics.k8s.io/<v>`.
    pub fn group_version(self) -> &'static str {
        match self {
            Version::V1 => "metrics.k8s.io/v1",
            Version::V1beta1 => "metrics.k8s.io/v1beta1",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "v1" => Some(Version::V1),
            "v1beta1" => Some(Version::V1beta1),
            _ => None,
        }
    }
}

/// A NodeMetrics / PodMetrics path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource<'a> {
    /// `/nodes`
    Nodes,
    /// `/nodes/{name}`
    Node(Cow<'a, str>),
    /// `/pods` (None) or `/namespaces/{ns}/pods`.
    Pods(Option<Cow<'a, str>>),
    /// `/namespaces/{ns}/pods/{name}`
    Pod(Cow<'a, str>, Cow<'a, str>),
}

/// Every path the API answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/apis`
    Apis,
    /// `/apis/metrics.k8s.io`
    Group,
    /// `/apis/metrics.k8s.io/{v}`
    Discovery(Version),
    /// A resource path under `/apis/metrics.k8s.io/{v}`.
    Resource(Version, Resource<'a>),
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiV3,
    /// `/openapi/v3/apis/metrics.k8s.io/{v}`
    OpenApiV3Group(Version),
    /// `/version`
    Version,
    /// Under a prefix the API owns (`/apis/metrics.k8s.io`, `/openapi/v3/`) but nothing is
    /// there: a 404 `Status`.
    NotFound,
}

/// The paths the API serves, for the `/` index (each resource path is under its version's).
pub const PATHS: &[&str] = &[
    "/apis",
    "/apis/",
    "/apis/metrics.k8s.io",
    "/apis/metrics.k8s.io/v1",
    "/apis/metrics.k8s.io/v1beta1",
    "/openapi/v2",
    "/openapi/v3",
    "/openapi/v3/",
    "/version",
];

/// The route of `path`, or `None` when the path is not the API's.
pub fn route(path: &str) -> Option<Route<'_>> {
    let trimmed = path.trim_end_matches('/');
    let rest = trimmed.strip_prefix('/')?;
    let mut segments = rest.split('/');
    match segments.next()? {
        "apis" => apis(segments),
        "openapi" => openapi(segments),
        "version" if segments.next().is_none() => Some(Route::Version),
        _ => None,
    }
}

/// Under `/apis`: the generic apiserver's go-restful container serves `/apis` itself and
/// everything under the group (a 404 there is a `Status`); another group's path is the
/// plain mux's, not the API's.
fn apis<'a>(mut s: impl Iterator<Item = &'a str>) -> Option<Route<'a>> {
    let Some(group) = s.next() else {
        return Some(Route::Apis);
    };
    if group != "metrics.k8s.io" {
        return None;
    }
    Some(group_route(s))
}

fn group_route<'a>(mut s: impl Iterator<Item = &'a str>) -> Route<'a> {
    let Some(version) = s.next() else {
        return Route::Group;
    };
    let Some(version) = Version::parse(version) else {
        return Route::NotFound;
    };
    let parts: Vec<&str> = s.collect();
    let mut decoded = Vec::with_capacity(parts.len());
    for p in &parts {
        match unescape_path(p) {
            Some(d) if !d.is_empty() => decoded.push(d),
            _ => return Route::NotFound,
        }
    }
    let resource = match decoded.as_slice() {
        [] => return Route::Discovery(version),
        [r] if r == "nodes" => Resource::Nodes,
        [r, _] if r == "nodes" => Resource::Node(decoded.swap_remove(1)),
        [r] if r == "pods" => Resource::Pods(None),
        [n, _, p] if n == "namespaces" && p == "pods" => {
            Resource::Pods(Some(decoded.swap_remove(1)))
        }
        [n, _, p, _] if n == "namespaces" && p == "pods" => {
            let name = decoded.swap_remove(3);
            let ns = decoded.swap_remove(1);
            Resource::Pod(ns, name)
        }
        _ => return Route::NotFound,
    };
    Route::Resource(version, resource)
}

/// Under `/openapi`: `/openapi/v2` and `/openapi/v3` are the documents, and kube-openapi's
/// v3 handler owns everything under `/openapi/v3/`; anything else is the plain mux's.
fn openapi<'a>(mut s: impl Iterator<Item = &'a str>) -> Option<Route<'a>> {
    let rest: Vec<&str> = s.by_ref().collect();
    Some(match rest.as_slice() {
        ["v2"] => Route::OpenApiV2,
        ["v3"] => Route::OpenApiV3,
        ["v3", "apis", "metrics.k8s.io", v] => match Version::parse(v) {
            Some(v) => Route::OpenApiV3Group(v),
            None => Route::NotFound,
        },
        ["v3", ..] => Route::NotFound,
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths_for_both_versions() {
        for v in Version::ALL {
            let p = |s: &str| format!("/apis/metrics.k8s.io/{}{s}", v.as_str());
            assert_eq!(route(&p("")), Some(Route::Discovery(v)));
            assert_eq!(route(&p("/")), Some(Route::Discovery(v)));
            assert_eq!(
                route(&p("/nodes")),
                Some(Route::Resource(v, Resource::Nodes))
            );
            assert_eq!(
                route(&p("/nodes/")),
                Some(Route::Resource(v, Resource::Nodes))
            );
            assert_eq!(
                route(&p("/nodes/n1")),
                Some(Route::Resource(v, Resource::Node("n1".into())))
            );
            assert_eq!(
                route(&p("/pods")),
                Some(Route::Resource(v, Resource::Pods(None)))
            );
            assert_eq!(
                route(&p("/namespaces/kube-system/pods/")),
                Some(Route::Resource(
                    v,
                    Resource::Pods(Some("kube-system".into()))
                ))
            );
            assert_eq!(
                route(&p("/namespaces/default/pods/web%2D1")),
                Some(Route::Resource(
                    v,
                    Resource::Pod("default".into(), "web-1".into())
                ))
            );
            for bad in [
                "/namespaces",
                "/namespaces/default",
                "/namespaces//pods",
                "/nodes/n1/status",
                "/services",
                "/watch/nodes",
            ] {
                assert_eq!(route(&p(bad)), Some(Route::NotFound), "{bad}");
            }
        }
    }

    #[test]
    fn other_paths() {
        assert_eq!(route("/apis"), Some(Route::Apis));
        assert_eq!(route("/apis/"), Some(Route::Apis));
        assert_eq!(route("/apis/metrics.k8s.io/"), Some(Route::Group));
        assert_eq!(route("/apis/metrics.k8s.io/v2"), Some(Route::NotFound));
        // Another group's path is not the API's (the plain mux's 404).
        assert_eq!(route("/apis/apps/v1"), None);
        assert_eq!(route("/openapi/v2"), Some(Route::OpenApiV2));
        assert_eq!(route("/openapi/v3"), Some(Route::OpenApiV3));
        assert_eq!(
            route("/openapi/v3/apis/metrics.k8s.io/v1beta1"),
            Some(Route::OpenApiV3Group(Version::V1beta1))
        );
        assert_eq!(route("/openapi/v3/apis/apps/v1"), Some(Route::NotFound));
        assert_eq!(route("/openapi/v4"), None);
        assert_eq!(route("/version"), Some(Route::Version));
        assert_eq!(route("/version/"), Some(Route::Version));
        for none in [
            "/",
            "",
            "/healthz",
            "/readyz",
            "/metrics",
            "/livez/ping",
            "/api",
            "/apisx",
            "/versions",
        ] {
            assert_eq!(route(none), None, "{none}");
        }
    }
}
