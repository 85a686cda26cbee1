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

/// One selector requirement as SubjectAccessReview carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label or field key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: &'static str,
    /// Values (sorted and unique for labels).
    pub values: Vec<String>,
}

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

    let query: Vec<(String, String)> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let first = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    if request.name.is_empty() && request.verb == "get" {
        let watch = first("watch")
            .is_some_and(|w| !matches!(w.to_ascii_lowercase().as_str(), "false" | "0" | ""));
        request.verb = if watch { "watch" } else { "list" }.to_owned();
    }
    if matches!(request.verb.as_str(), "list" | "watch" | "deletecollection") {
        if let Some(selector) = first("fieldSelector") {
            request.field_requirements = field_requirements(selector).unwrap_or_default();
            if request.name.is_empty()
                && let Some(name) = exact_name(&request.field_requirements)
            {
                request.name = name;
            }
        }
        if let Some(selector) = first("labelSelector") {
            request.label_requirements = label_requirements(selector).unwrap_or_default();
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

/// `fields.ParseSelector`: `k=v`, `k==v`, `k!=v` terms split on unescaped commas.
fn field_requirements(selector: &str) -> Option<Vec<Requirement>> {
    let mut out = Vec::new();
    if selector.is_empty() {
        return Some(out);
    }
    for term in split_unescaped(selector, ',') {
        let (key, operator, value) = split_field_term(&term)?;
        out.push(Requirement {
            key: key.to_owned(),
            operator,
            values: vec![unescape_field_value(value)],
        });
    }
    Some(out)
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == sep {
            terms.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    terms.push(current);
    terms
}

fn split_field_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, operator) in [("!=", "NotIn"), ("==", "In"), ("=", "In")] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], operator, value));
            }
        }
    }
    None
}

fn unescape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

fn lex(s: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '!' | '=' | '>' | '<' | ',' | '(' | ')' => {
                chars.next();
                let double = chars.peek() == Some(&'=');
                tokens.push(match c {
                    '!' if double => {
                        chars.next();
                        Token::NotEq
                    }
                    '=' if double => {
                        chars.next();
                        Token::Eq
                    }
                    '!' => Token::Not,
                    '=' => Token::Eq,
                    '>' => Token::Gt,
                    '<' => Token::Lt,
                    ',' => Token::Comma,
                    '(' => Token::Open,
                    _ => Token::Close,
                });
            }
            _ => {
                let mut ident = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || "!=><,()".contains(c) {
                        break;
                    }
                    ident.push(c);
                    chars.next();
                }
                tokens.push(Token::Ident(ident));
            }
        }
    }
    tokens
}

/// `labels.ParseToRequirements` for the operators SubjectAccessReview carries: `=`/`==`/`in`
/// become `In`, `!=`/`notin` `NotIn`, `k` `Exists`, `!k` `DoesNotExist`; `>`/`<` parse but
/// are left out (as upstream). Requirements sorted by key, values sorted and unique. `None`
/// when the selector does not parse.
fn label_requirements(selector: &str) -> Option<Vec<Requirement>> {
    let tokens = lex(selector);
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |i: usize| match tokens.get(i) {
        Some(Token::Ident(s)) => Some(s.clone()),
        _ => None,
    };
    while i < tokens.len() {
        if tokens[i] == Token::Not {
            let key = ident(i + 1)?;
            out.push(requirement(key, "DoesNotExist", Vec::new()));
            i += 2;
        } else {
            let key = ident(i)?;
            i += 1;
            match tokens.get(i) {
                None | Some(Token::Comma) => out.push(requirement(key, "Exists", Vec::new())),
                Some(op @ (Token::Eq | Token::NotEq | Token::Gt | Token::Lt)) => {
                    let value = match tokens.get(i + 1) {
                        Some(Token::Ident(v)) => {
                            i += 1;
                            v.clone()
                        }
                        None | Some(Token::Comma) => String::new(),
                        Some(_) => return None,
                    };
                    i += 1;
                    match op {
                        Token::Eq => out.push(requirement(key, "In", vec![value])),
                        Token::NotEq => out.push(requirement(key, "NotIn", vec![value])),
                        _ => {}
                    }
                }
                Some(Token::Ident(word)) if word == "in" || word == "notin" => {
                    let operator = if word == "in" { "In" } else { "NotIn" };
                    if tokens.get(i + 1) != Some(&Token::Open) {
                        return None;
                    }
                    i += 2;
                    let mut values = Vec::new();
                    loop {
                        match tokens.get(i) {
                            Some(Token::Ident(v)) => {
                                values.push(v.clone());
                                i += 1;
                            }
                            Some(Token::Comma) => {
                                i += 1;
                            }
                            Some(Token::Close) => {
                                i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                    out.push(requirement(key, operator, values));
                }
                Some(_) => return None,
            }
        }
        match tokens.get(i) {
            None => {}
            Some(Token::Comma) => i += 1,
            Some(_) => return None,
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Some(out)
}

fn requirement(key: String, operator: &'static str, mut values: Vec<String>) -> Requirement {
    values.sort();
    values.dedup();
    Requirement {
        key,
        operator,
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(label_requirements("a in b"), None);
        assert_eq!(label_requirements("a=b c"), None);
        assert_eq!(field_requirements("metadata.name"), None);
        assert_eq!(
            label_requirements("a!=b,c>3").expect("parses"),
            vec![requirement("a".into(), "NotIn", vec!["b".into()])]
        );
        assert_eq!(
            field_requirements(r"a!=x\,y,b==z").expect("parses"),
            vec![
                requirement("a".into(), "NotIn", vec!["x,y".into()]),
                requirement("b".into(), "In", vec!["z".into()]),
            ]
        );
    }
}
