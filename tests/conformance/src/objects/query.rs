//! Query strings and the label and field selectors of list and watch requests.

use serde_json::Value;

use super::Kind;

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The list and watch parameters of a request.
#[derive(Debug, Default)]
pub(crate) struct Params {
    pub(crate) watch: bool,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) resource_version_match: Option<String>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) send_initial_events: bool,
    pub(crate) timeout_seconds: Option<u64>,
}

impl Params {
    pub(crate) fn parse(query: Option<&str>) -> Params {
        let mut params = Params::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            let truthy = value == "true" || value == "1";
            match percent_decode(key).as_str() {
                "watch" => params.watch = truthy,
                "labelSelector" => params.label_selector = Some(value),
                "fieldSelector" => params.field_selector = Some(value),
                "limit" => params.limit = value.parse().ok().filter(|&l| l > 0),
                "continue" => params.continue_token = Some(value).filter(|v| !v.is_empty()),
                "resourceVersion" => {
                    params.resource_version = Some(value).filter(|v| !v.is_empty())
                }
                "resourceVersionMatch" => {
                    params.resource_version_match = Some(value).filter(|v| !v.is_empty());
                }
                "allowWatchBookmarks" => params.allow_bookmarks = truthy,
                "sendInitialEvents" => params.send_initial_events = truthy,
                "timeoutSeconds" => params.timeout_seconds = value.parse().ok(),
                _ => {}
            }
        }
        params
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_label_part(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            format!("unable to parse requirement: {whole}: expected a (value, ...) set")
        })?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(requirements));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            let bad = || format!("unable to parse requirement: found '{part}'");
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_owned())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                Requirement::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(key.trim().to_owned(), set_values(rest, part)?)
            } else if let Some((key, rest)) = part.split_once(" in ") {
                Requirement::In(key.trim().to_owned(), set_values(rest, part)?)
            } else {
                Requirement::Exists(part.to_owned())
            };
            let key = match &requirement {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_label_part(key) {
                return Err(bad());
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(FieldPath, bool, String)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldPath {
    Name,
    Namespace,
    Phase,
    NodeName,
}

impl FieldSelector {
    pub(crate) fn parse(kind: Kind, s: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                ));
            };
            let path = match (kind, field.trim()) {
                (_, "metadata.name") => FieldPath::Name,
                (_, "metadata.namespace") => FieldPath::Namespace,
                (Kind::Pod, "status.phase") => FieldPath::Phase,
                (Kind::Pod, "spec.nodeName") => FieldPath::NodeName,
                (_, other) => return Err(format!("field label not supported: {other}")),
            };
            terms.push((path, equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let field = match path {
                FieldPath::Name => &object["metadata"]["name"],
                FieldPath::Namespace => &object["metadata"]["namespace"],
                FieldPath::Phase => &object["status"]["phase"],
                FieldPath::NodeName => &object["spec"]["nodeName"],
            };
            // Go's field sets hold "" for unset fields.
            (field.as_str().unwrap_or("") == value) == *equal
        })
    }
}

/// What a list or watch selects: a namespace (or all), labels and fields.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
}

impl Filter {
    pub(crate) fn new(
        kind: Kind,
        namespace: Option<&str>,
        params: &Params,
    ) -> Result<Filter, String> {
        Ok(Filter {
            namespace: namespace.map(str::to_owned),
            labels: LabelSelector::parse(params.label_selector.as_deref().unwrap_or(""))?,
            fields: FieldSelector::parse(kind, params.field_selector.as_deref().unwrap_or(""))?,
        })
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        if let Some(namespace) = &self.namespace
            && object["metadata"]["namespace"].as_str() != Some(namespace)
        {
            return false;
        }
        self.labels.matches(object) && self.fields.matches(object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn query_is_decoded() {
        let p = Params::parse(Some(
            "watch=true&fieldSelector=status.phase%3DRunning&labelSelector=app+in+%28a%2Cb%29&limit=500&allowWatchBookmarks=true&timeoutSeconds=290&resourceVersion=12",
        ));
        assert!(p.watch && p.allow_bookmarks);
        assert_eq!(p.field_selector.as_deref(), Some("status.phase=Running"));
        assert_eq!(p.label_selector.as_deref(), Some("app in (a,b)"));
        assert_eq!((p.limit, p.timeout_seconds), (Some(500), Some(290)));
        assert_eq!(p.resource_version.as_deref(), Some("12"));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn label_selectors_match_like_kubernetes() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (db, web)",
            "env notin (prod)",
            "tier",
            "!env",
            "app=web,tier=front",
            "",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).map(|l| l.matches(&obj)) == Ok(true),
                "{s} should match"
            );
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "tier notin (front)",
            "env",
            "!tier",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(
                LabelSelector::parse(s).map(|l| l.matches(&obj)) == Ok(false),
                "{s} should not match"
            );
        }
        assert!(LabelSelector::parse("app in db").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn field_selectors_match_and_reject_unknown_fields() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = FieldSelector::parse(Kind::Pod, "status.phase=Running,spec.nodeName==n1")
            .expect("parses");
        assert!(f.matches(&pod));
        let f = FieldSelector::parse(Kind::Pod, "status.phase!=Running").expect("parses");
        assert!(!f.matches(&pod));
        let f = FieldSelector::parse(Kind::Pod, "spec.nodeName=").expect("parses");
        assert!(!f.matches(&pod));
        assert_eq!(
            FieldSelector::parse(Kind::Node, "status.phase=Running"),
            Err("field label not supported: status.phase".to_owned())
        );
    }
}
