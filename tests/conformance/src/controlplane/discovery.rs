//! Discovery documents as kube-apiserver serves them: `/api` (APIVersions), `/api/v1` and
//! `/apis/<g>/<v>` (APIResourceList), `/apis` (APIGroupList), `/apis/<g>` (APIGroup) and the
//! aggregated discovery v2 forms of `/api` and `/apis` (APIGroupDiscoveryList).

use std::cmp::Ordering;

use serde_json::{Value, json};

/// The exact media type of aggregated discovery v2 (client-go's `AcceptV2`).
pub const V2_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A built-in resource.
#[derive(Clone, Copy, Debug)]
pub struct Resource {
    /// Plural name.
    pub name: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Kind.
    pub kind: &'static str,
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Short names.
    pub short_names: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];

/// The core (`""`, `v1`) resources served.
pub const CORE: &[Resource] = &[
    Resource {
        name: "configmaps",
        singular: "configmap",
        namespaced: true,
        kind: "ConfigMap",
        verbs: READ,
        short_names: &["cm"],
    },
    Resource {
        name: "namespaces",
        singular: "namespace",
        namespaced: false,
        kind: "Namespace",
        verbs: READ,
        short_names: &["ns"],
    },
    Resource {
        name: "nodes",
        singular: "node",
        namespaced: false,
        kind: "Node",
        verbs: READ,
        short_names: &["no"],
    },
    Resource {
        name: "pods",
        singular: "pod",
        namespaced: true,
        kind: "Pod",
        verbs: READ,
        short_names: &["po"],
    },
];

/// Built-in API groups: (name, version, groupPriorityMinimum as kube-apiserver registers it,
/// resources).
pub const BUILTIN: &[(&str, &str, i32, &[Resource])] = &[
    (
        "apiregistration.k8s.io",
        "v1",
        18000,
        &[Resource {
            name: "apiservices",
            singular: "apiservice",
            namespaced: false,
            kind: "APIService",
            verbs: READ,
            short_names: &[],
        }],
    ),
    (
        "authentication.k8s.io",
        "v1",
        17700,
        &[Resource {
            name: "tokenreviews",
            singular: "tokenreview",
            namespaced: false,
            kind: "TokenReview",
            verbs: &["create"],
            short_names: &[],
        }],
    ),
    (
        "authorization.k8s.io",
        "v1",
        17600,
        &[Resource {
            name: "subjectaccessreviews",
            singular: "subjectaccessreview",
            namespaced: false,
            kind: "SubjectAccessReview",
            verbs: &["create"],
            short_names: &[],
        }],
    ),
];

/// One version of a group, for both discovery forms.
#[derive(Clone, Debug)]
pub struct Version {
    /// `v1`, `v1beta1`, ...
    pub version: String,
    /// The aggregated-discovery (`APIResourceDiscovery`) entries.
    pub resources: Vec<Value>,
    /// `false` marks the version `Stale` in aggregated discovery.
    pub fresh: bool,
}

/// One group, versions in preference order.
#[derive(Clone, Debug)]
pub struct Group {
    /// Group name.
    pub name: String,
    /// Sorts groups (higher first).
    pub priority: i32,
    /// Preferred first.
    pub versions: Vec<Version>,
}

/// The `APIResourceDiscovery` entry of a built-in resource.
pub fn resource_v2(r: &Resource, group: &str, version: &str) -> Value {
    let mut v = json!({
        "resource": r.name,
        "responseKind": {"group": group, "version": version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    v
}

/// The `APIResourceList` of built-in resources.
pub fn resource_list(group_version: &str, resources: &[Resource]) -> Value {
    let resources: Vec<Value> = resources
        .iter()
        .map(|r| {
            let mut v = json!({
                "name": r.name, "singularName": r.singular, "namespaced": r.namespaced,
                "kind": r.kind, "verbs": r.verbs,
            });
            if !r.short_names.is_empty() {
                v["shortNames"] = json!(r.short_names);
            }
            v
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// Converts a legacy `APIResourceList` into aggregated-discovery entries, as kube-aggregator
/// does when a backend has no v2 discovery (subresources folded into their parent).
pub fn resources_from_list(list: &Value) -> Vec<Value> {
    let Some(items) = list.get("resources").and_then(Value::as_array) else {
        return Vec::new();
    };
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut out: Vec<Value> = Vec::new();
    for r in items {
        let name = s(r, "name");
        let kind =
            json!({"group": s(r, "group"), "version": s(r, "version"), "kind": s(r, "kind")});
        let scope = if r
            .get("namespaced")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            "Namespaced"
        } else {
            "Cluster"
        };
        let verbs = r.get("verbs").cloned().unwrap_or_else(|| json!([]));
        if let Some((parent, sub)) = name.split_once('/') {
            if let Some(p) = out.iter_mut().find(|p| p["resource"] == parent) {
                let entry = json!({"subresource": sub, "responseKind": kind, "verbs": verbs});
                match p.get_mut("subresources").and_then(Value::as_array_mut) {
                    Some(subs) => subs.push(entry),
                    None => p["subresources"] = json!([entry]),
                }
            }
            continue;
        }
        let mut v = json!({"resource": name, "responseKind": kind, "scope": scope,
                           "singularResource": s(r, "singularName"), "verbs": verbs});
        for key in ["shortNames", "categories"] {
            if let Some(x) = r
                .get(key)
                .filter(|x| x.as_array().is_some_and(|a| !a.is_empty()))
            {
                v[key] = x.clone();
            }
        }
        out.push(v);
    }
    out
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

/// `GET /api` in the aggregated v2 form.
pub fn api_v2() -> Value {
    let resources: Vec<Value> = CORE.iter().map(|r| resource_v2(r, "", "v1")).collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
           "items": [{"metadata": {"creationTimestamp": null},
                      "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}]}]})
}

/// The built-in groups as [`Group`]s.
pub fn builtin_groups() -> Vec<Group> {
    BUILTIN
        .iter()
        .map(|(name, version, priority, resources)| Group {
            name: (*name).to_owned(),
            priority: *priority,
            versions: vec![Version {
                version: (*version).to_owned(),
                resources: resources
                    .iter()
                    .map(|r| resource_v2(r, name, version))
                    .collect(),
                fresh: true,
            }],
        })
        .collect()
}

fn group_versions(g: &Group) -> Vec<Value> {
    g.versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{}/{}", g.name, v.version), "version": v.version}))
        .collect()
}

/// `GET /apis/<g>` (APIGroup).
pub fn api_group(g: &Group) -> Value {
    let versions = group_versions(g);
    let preferred = versions.first().cloned().unwrap_or_else(|| json!({}));
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": g.name, "versions": versions, "preferredVersion": preferred})
}

/// Sorts groups as kube-aggregator does: priority (higher first), then name.
pub fn sort_groups(groups: &mut [Group]) {
    groups.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// `GET /apis` (APIGroupList).
pub fn api_group_list(groups: &[Group]) -> Value {
    let groups: Vec<Value> = groups
        .iter()
        .map(|g| {
            let mut v = api_group(g);
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            v
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis` in the aggregated v2 form; stale versions carry `freshness: Stale`.
pub fn apis_v2(groups: &[Group]) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|v| {
                    json!({"version": v.version, "resources": v.resources,
                                "freshness": if v.fresh { "Current" } else { "Stale" }})
                })
                .collect();
            json!({"metadata": {"name": g.name, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// Whether an Accept header asks for aggregated discovery v2 (parameter order ignored).
pub fn accepts_v2(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<&str> = parts.collect();
        base == "application/json"
            && params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

/// Kubernetes version order (`v1` > `v1beta2` > `v1beta1` > `v1alpha1` > anything else, which
/// sorts by name): `Less` means `a` is preferred.
pub fn version_order(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, level, num.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}
