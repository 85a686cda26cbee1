//! Authorization attributes of a request, as k8s.io/apiserver's `RequestInfoFactory`
//! (`pkg/endpoints/request/requestinfo.go`) derives them: resource requests under
//! `/apis/<group>/<version>/...` (and `/api/<version>/...`), non-resource requests otherwise.

use http::Method;

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A request on an API resource.
    Resource(ResourceRequest),
    /// Any other path.
    NonResource {
        /// The URL path.
        path: String,
        /// The lower-cased HTTP method (`get` for GET).
        verb: String,
    },
}

/// The attributes of a resource request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceRequest {
    /// `get`, `list`, `watch` (`create`, `update`, ... for other methods).
    pub verb: String,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (`nodes`, `pods`).
    pub resource: String,
    /// Subresource, usually empty.
    pub subresource: String,
    /// Namespace, empty at cluster scope.
    pub namespace: String,
    /// Object name; for a list, the `metadata.name` of an exact field selector.
    pub name: String,
    /// `labelSelector` requirements of a list or watch (KEP-4601 AuthorizeWithSelectors).
    pub label_requirements: Vec<Requirement>,
    /// `fieldSelector` requirements of a list or watch.
    pub field_requirements: Vec<Requirement>,
}

/// One selector requirement as SubjectAccessReview carries it: the API's own selector
/// grammar (`scraper::selector`) reads it, so what is authorized is what is filtered.
pub use scraper::selector::SelectorRequirement as Requirement;

impl Attributes {
    /// The verb, for either kind.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource { verb, .. } => verb,
        }
    }
}

/// The attributes of a request from its method, path and raw query.
pub fn attributes(method: &Method, path: &str, query: Option<&str>) -> Attributes {
    let non_resource = || Attributes::NonResource {
        path: path.to_owned(),
        verb: method.as_str().to_ascii_lowercase(),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if parts.len() < 3 {
        return non_resource();
    }
    let (group, rest) = match parts[0] {
        "api" => ("", &parts[1..]),
        "apis" if parts.len() >= 4 => (parts[1], &parts[2..]),
        _ => return non_resource(),
    };
    let mut request = ResourceRequest {
        group: group.to_owned(),
        version: rest[0].to_owned(),
        ..ResourceRequest::default()
    };
    let mut rest = &rest[1..];
    if matches!(rest[0], "watch" | "proxy") {
        if rest.len() < 2 {
            // upstream: "unable to determine kind and namespace"; nothing is authorized on it
            return non_resource();
        }
        request.verb = rest[0].to_owned();
        rest = &rest[1..];
    } else {
        request.verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        }
        .to_owned();
    }
    if rest[0] == "namespaces"
        && let Some(namespace) = rest.get(1)
    {
        request.namespace = (*namespace).to_owned();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    if rest.len() >= 3 && request.verb != "proxy" {
        request.subresource = rest[2].to_owned();
    }
    if rest.len() >= 2 {
        request.name = rest[1].to_owned();
    }
    request.resource = rest[0].to_owned();

    let first = |key: &str| crate::api::query::get(query, key);
    if request.name.is_empty() && request.verb == "get" {
        let watch = crate::api::query::flag(query, "watch");
        request.verb = if watch { "watch" } else { "list" }.to_owned();
    }
    if matches!(request.verb.as_str(), "list" | "watch" | "deletecollection") {
        // A selector that does not parse authorizes the broader, unfiltered list (the
        // request itself then fails with 400), as k8s.io/apiserver does.
        if let Some(selector) = first("fieldSelector") {
            request.field_requirements =
                scraper::selector::field_requirements(&selector).unwrap_or_default();
            if request.name.is_empty()
                && let Some(name) = exact_name(&request.field_requirements)
            {
                request.name = name;
            }
        }
        if let Some(selector) = first("labelSelector") {
            request.label_requirements = scraper::selector::LabelSelector::parse(&selector)
                .map(|s| s.authorization_requirements())
                .unwrap_or_default();
        }
    }
    Attributes::Resource(request)
}

/// `metadata.name=<n>` from the first equality on it (`RequiresExactMatch`), when the name is
/// a valid path segment.
fn exact_name(requirements: &[Requirement]) -> Option<String> {
    requirements
        .iter()
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| r.values.first().cloned())
        .filter(|n| !matches!(n.as_str(), "." | "..") && !n.contains(['/', '%']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(key: String, operator: &'static str, values: Vec<String>) -> Requirement {
        Requirement {
            key,
            operator,
            values,
        }
    }

    fn resource(method: Method, path: &str, query: Option<&str>) -> ResourceRequest {
        match attributes(&method, path, query) {
            Attributes::Resource(r) => r,
            other => panic!("not a resource request: {other:?}"),
        }
    }

    #[test]
    fn namespaced_pod_list_and_get() {
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
            None,
        );
        assert_eq!(
            (r.verb.as_str(), r.group.as_str(), r.version.as_str()),
            ("list", "metrics.k8s.io", "v1beta1")
        );
        assert_eq!(
            (r.resource.as_str(), r.namespace.as_str(), r.name.as_str()),
            ("pods", "default", "")
        );
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods/coredns-1",
            None,
        );
        assert_eq!(
            (r.verb.as_str(), r.name.as_str(), r.namespace.as_str()),
            ("get", "coredns-1", "kube-system")
        );
    }

    #[test]
    fn cluster_scoped_nodes_and_watch() {
        let r = resource(Method::GET, "/apis/metrics.k8s.io/v1beta1/nodes", None);
        assert_eq!(
            (r.verb.as_str(), r.resource.as_str(), r.namespace.as_str()),
            ("list", "nodes", "")
        );
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/nodes",
            Some("watch=true"),
        );
        assert_eq!(r.verb, "watch");
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/nodes",
            Some("watch=false"),
        );
        assert_eq!(r.verb, "list");
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/watch/nodes",
            None,
        );
        assert_eq!((r.verb.as_str(), r.resource.as_str()), ("watch", "nodes"));
        let r = resource(Method::GET, "/apis/metrics.k8s.io/v1beta1/nodes/n1", None);
        assert_eq!((r.verb.as_str(), r.name.as_str()), ("get", "n1"));
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource() {
        for path in [
            "/apis/metrics.k8s.io/v1beta1",
            "/apis",
            "/healthz",
            "/metrics",
            "/openapi/v2",
        ] {
            assert_eq!(
                attributes(&Method::GET, path, None),
                Attributes::NonResource {
                    path: path.to_owned(),
                    verb: "get".to_owned()
                }
            );
        }
    }

    #[test]
    fn selectors_become_requirements_on_lists_only() {
        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
            Some(
                "labelSelector=zone%20in%20(b,a,a),app%3Dweb,!canary,tier&fieldSelector=metadata.name%3Dp1",
            ),
        );
        assert_eq!(
            r.label_requirements,
            vec![
                requirement("app".into(), "In", vec!["web".into()]),
                requirement("canary".into(), "DoesNotExist", vec![]),
                requirement("tier".into(), "Exists", vec![]),
                requirement("zone".into(), "In", vec!["a".into(), "b".into()]),
            ]
        );
        assert_eq!(
            r.field_requirements,
            vec![requirement("metadata.name".into(), "In", vec!["p1".into()])]
        );
        assert_eq!((r.verb.as_str(), r.name.as_str()), ("list", "p1"));

        let r = resource(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/p1",
            Some("labelSelector=app%3Dweb"),
        );
        assert!(r.label_requirements.is_empty(), "a get carries no selector");
    }

    #[test]
    fn bad_selectors_give_no_requirements() {
        let list = |key: &str, selector: &str| {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair(key, selector)
                .finish();
            resource(Method::GET, "/apis/metrics.k8s.io/v1/pods", Some(&query))
        };
        assert!(
            list("labelSelector", "a in b")
                .label_requirements
                .is_empty()
        );
        assert!(list("labelSelector", "a=b c").label_requirements.is_empty());
        // What the API would reject with a 400 (an invalid label value) is not authorized
        // on either: the same parser reads both.
        assert!(list("labelSelector", "a=-b-").label_requirements.is_empty());
        assert!(
            list("fieldSelector", "metadata.name")
                .field_requirements
                .is_empty()
        );
        assert_eq!(
            list("labelSelector", "a!=b,c>3").label_requirements,
            vec![requirement("a".into(), "NotIn", vec!["b".into()])]
        );
        // Terms sorted, as `fields.ParseSelector` sorts them; any field is authorized on.
        assert_eq!(
            list("fieldSelector", r"spec.nodeName!=x\,y,metadata.name==z").field_requirements,
            vec![
                requirement("metadata.name".into(), "In", vec!["z".into()]),
                requirement("spec.nodeName".into(), "NotIn", vec!["x,y".into()]),
            ]
        );
    }
}
