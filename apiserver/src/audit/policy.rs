//! The audit policy (`--audit-policy-file`): an `audit.k8s.io/v1` `Policy` in YAML or JSON,
//! checked as k8s.io/apiserver's `audit/policy` reader and validation check it, and evaluated
//! as its `policyRuleEvaluator` does: the first rule that matches a request decides its level
//! and the stages left out.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use crate::auth::{Attributes, UserInfo};

/// How much of a request an event records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    /// No event.
    #[default]
    None,
    /// The request's metadata (user, verb, object reference, status, timestamps).
    Metadata,
    /// Metadata and the request's body.
    Request,
    /// Metadata, the request's body and the response's.
    RequestResponse,
}

impl Level {
    /// The name written in an event.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// A stage of a request at which an event may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else.
    RequestReceived,
    /// Once the response head is sent, before its body (long-running requests only).
    ResponseStarted,
    /// Once the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    /// The name written in an event.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// `GroupResources` of a rule.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

/// `PolicyRule`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Option<Level>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// The file's shape.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// A policy that failed to load.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("failed to read audit policy file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a policy.
    #[error("failed decoding audit policy file {path}: {message}")]
    Decode {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The policy is not valid.
    #[error("invalid audit policy file {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, rule by rule.
        message: String,
    },
}

/// What the policy decides for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The level of its events.
    pub level: Level,
    /// The stages at which no event is written.
    pub omit_stages: BTreeSet<Stage>,
}

impl Decision {
    /// Whether an event is written at `stage`.
    pub fn records(&self, stage: Stage) -> bool {
        self.level != Level::None && !self.omit_stages.contains(&stage)
    }
}

/// A loaded policy.
#[derive(Clone, Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
}

impl Policy {
    /// Reads and checks the policy at `path`.
    pub fn load(path: &Path) -> Result<Policy, Error> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: name.clone(),
            source,
        })?;
        Policy::parse(&text).map_err(|e| match e {
            Error::Decode { message, .. } => Error::Decode {
                path: name.clone(),
                message,
            },
            Error::Invalid { message, .. } => Error::Invalid {
                path: name.clone(),
                message,
            },
            other => other,
        })
    }

    /// A policy from its text (YAML, of which JSON is a part).
    pub fn parse(text: &str) -> Result<Policy, Error> {
        let decode = |message: String| Error::Decode {
            path: String::new(),
            message,
        };
        let file: File = serde_saphyr::from_str(text).map_err(|e| decode(e.to_string()))?;
        if file.kind != "Policy" {
            return Err(decode(format!(
                "no kind \"{}\" is registered for the audit policy; expected Policy",
                file.kind
            )));
        }
        if file.api_version != "audit.k8s.io/v1" {
            return Err(decode(format!(
                "unknown group version {:?}: only audit.k8s.io/v1 is accepted",
                file.api_version
            )));
        }
        let errors: Vec<String> = file
            .rules
            .iter()
            .enumerate()
            .flat_map(|(i, rule)| validate(i, rule))
            .collect();
        if !errors.is_empty() {
            return Err(Error::Invalid {
                path: String::new(),
                message: errors.join(", "),
            });
        }
        if file.rules.is_empty() {
            // As upstream: a policy with no rules records nothing, and says so.
            tracing::warn!("the audit policy has no rules: no events will be recorded");
        }
        Ok(Policy {
            rules: file.rules,
            omit_stages: file.omit_stages,
        })
    }

    /// The decision for a request by `user` (`None`: authentication failed) with
    /// `attributes`: the first matching rule's level and stages to leave out (with the
    /// policy's own), else no events.
    pub fn decide(&self, user: Option<&UserInfo>, attributes: &Attributes) -> Decision {
        for rule in &self.rules {
            if matches(rule, user, attributes) {
                return Decision {
                    level: rule.level.unwrap_or_default(),
                    omit_stages: self
                        .omit_stages
                        .iter()
                        .chain(&rule.omit_stages)
                        .copied()
                        .collect(),
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: BTreeSet::new(),
        }
    }
}

/// `validatePolicyRule`: a level, no mix of resource and non-resource selectors, and
/// non-resource URLs that are paths with at most a trailing `*`.
fn validate(index: usize, rule: &Rule) -> Vec<String> {
    let at = format!("rules[{index}]");
    let mut errors = Vec::new();
    if rule.level.is_none() {
        errors.push(format!("{at}.level: Required value"));
    }
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        errors.push(format!(
            "{at}.nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
        ));
    }
    for (j, url) in rule.non_resource_urls.iter().enumerate() {
        let bad = !url.starts_with('/') && url != "*" || url.trim_end_matches('*').contains('*');
        if bad {
            errors.push(format!(
                "{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character, or be '*', and may only end with a '*'"
            ));
        }
    }
    for (j, group) in rule.resources.iter().enumerate() {
        for (k, resource) in group.resources.iter().enumerate() {
            if resource.is_empty() {
                errors.push(format!(
                    "{at}.resources[{j}].resources[{k}]: Invalid value: \"\": resource cannot be empty"
                ));
            }
        }
        if !group.resource_names.is_empty()
            && group
                .resources
                .iter()
                .any(|r| r == "*" || r.starts_with("*/"))
        {
            errors.push(format!(
                "{at}.resources[{j}].resourceNames: Invalid value: using resource names with a wildcard resource is not allowed"
            ));
        }
    }
    errors
}

/// `ruleMatches`.
fn matches(rule: &Rule, user: Option<&UserInfo>, attributes: &Attributes) -> bool {
    if !rule.users.is_empty() && !user.is_some_and(|u| rule.users.contains(&u.name)) {
        return false;
    }
    if !rule.user_groups.is_empty()
        && !user.is_some_and(|u| u.groups.iter().any(|g| rule.user_groups.contains(g)))
    {
        return false;
    }
    if !rule.verbs.is_empty() && !rule.verbs.iter().any(|v| v == attributes.verb()) {
        return false;
    }
    if !rule.namespaces.is_empty() || !rule.resources.is_empty() {
        return matches_resource(rule, attributes);
    }
    if !rule.non_resource_urls.is_empty() {
        return match attributes {
            Attributes::Resource(_) => false,
            Attributes::NonResource { path, .. } => rule
                .non_resource_urls
                .iter()
                .any(|spec| path_matches(path, spec)),
        };
    }
    true
}

/// `pathMatches`: `*`, the path itself, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|_| path.starts_with(spec.trim_end_matches('*')))
}

/// `ruleMatchesResource`.
fn matches_resource(rule: &Rule, attributes: &Attributes) -> bool {
    let Attributes::Resource(request) = attributes else {
        return false;
    };
    if !rule.namespaces.is_empty() && !rule.namespaces.contains(&request.namespace) {
        return false;
    }
    if rule.resources.is_empty() {
        return true;
    }
    let combined = if request.subresource.is_empty() {
        request.resource.clone()
    } else {
        format!("{}/{}", request.resource, request.subresource)
    };
    rule.resources
        .iter()
        .filter(|group| group.group == request.group)
        .any(|group| {
            if group.resources.is_empty() {
                return true;
            }
            if !group.resource_names.is_empty() && !group.resource_names.contains(&request.name) {
                return false;
            }
            group.resources.iter().any(|resource| {
                *resource == combined
                    || resource == "*"
                    || (!request.subresource.is_empty()
                        && resource.strip_prefix("*/") == Some(request.subresource.as_str()))
                    || resource.strip_suffix("/*") == Some(request.resource.as_str())
            })
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use http::Method;

    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: Default::default(),
        }
    }

    fn attrs(path: &str) -> Attributes {
        let (path, query) = path
            .split_once('?')
            .map_or((path, None), |(p, q)| (p, Some(q)));
        crate::auth::attributes(&Method::GET, path, query)
    }

    /// A policy as operators write them (the shape of kube-apiserver's documented example).
    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - "RequestReceived"
rules:
  - level: None
    users: ["system:kube-proxy"]
  - level: None
    nonResourceURLs:
      - /healthz*
      - /livez
      - /readyz
  - level: RequestResponse
    userGroups: ["system:masters"]
    resources:
      - group: "metrics.k8s.io"
        resources: ["nodes"]
  - level: Request
    verbs: ["get"]
    namespaces: ["kube-system"]
    resources:
      - group: "metrics.k8s.io"
        resources: ["pods"]
        resourceNames: ["coredns-1"]
    omitStages: ["ResponseStarted"]
  - level: Metadata
    resources:
      - group: "metrics.k8s.io"
  - level: Metadata
    nonResourceURLs: ["/metrics"]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        let hpa = user(
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            &["system:serviceaccounts"],
        );
        let level = |u: &UserInfo, path: &str| policy.decide(Some(u), &attrs(path)).level;
        assert_eq!(
            level(
                &user("system:kube-proxy", &[]),
                "/apis/metrics.k8s.io/v1beta1/nodes"
            ),
            Level::None
        );
        assert_eq!(level(&hpa, "/healthz/ping"), Level::None);
        assert_eq!(level(&hpa, "/livez"), Level::None);
        // `/livez` names that path only; nothing else matches `/livez/ping`.
        assert_eq!(level(&hpa, "/livez/ping"), Level::None);
        assert_eq!(
            level(&admin, "/apis/metrics.k8s.io/v1beta1/nodes"),
            Level::RequestResponse
        );
        assert_eq!(
            level(&admin, "/apis/metrics.k8s.io/v1/nodes/n1"),
            Level::RequestResponse
        );
        assert_eq!(
            level(
                &hpa,
                "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/coredns-1"
            ),
            Level::Request
        );
        // Another name, another verb (list), another namespace: the next rule.
        for path in [
            "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/coredns-2",
            "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/coredns-1",
        ] {
            assert_eq!(level(&hpa, path), Level::Metadata, "{path}");
        }
        assert_eq!(level(&hpa, "/metrics"), Level::Metadata);
        // No rule: no events.
        assert_eq!(level(&hpa, "/version"), Level::None);
        assert_eq!(level(&hpa, "/apis/other.io/v1/things"), Level::None);
        // A failed authentication matches no rule that names users or groups.
        assert_eq!(
            policy
                .decide(None, &attrs("/apis/metrics.k8s.io/v1beta1/nodes"))
                .level,
            Level::Metadata
        );
    }

    #[test]
    fn omitted_stages_join_the_policy_s_and_the_rule_s() {
        let policy = Policy::parse(POLICY).unwrap();
        let decision = policy.decide(
            Some(&user("u", &[])),
            &attrs("/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/coredns-1"),
        );
        assert_eq!(
            decision.omit_stages,
            [Stage::RequestReceived, Stage::ResponseStarted].into()
        );
        assert!(!decision.records(Stage::RequestReceived));
        assert!(decision.records(Stage::ResponseComplete));
        let none = policy.decide(Some(&user("u", &[])), &attrs("/version"));
        assert!(!none.records(Stage::ResponseComplete));
    }

    #[test]
    fn wildcards_in_resources_and_paths() {
        let policy = Policy::parse(
            r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [
                {"level": "Request", "resources": [{"group": "metrics.k8s.io", "resources": ["*"]}]},
                {"level": "Metadata", "nonResourceURLs": ["*"]}
            ]}"#,
        )
        .unwrap();
        let u = user("u", &[]);
        assert_eq!(
            policy
                .decide(Some(&u), &attrs("/apis/metrics.k8s.io/v1/pods"))
                .level,
            Level::Request
        );
        assert_eq!(
            policy.decide(Some(&u), &attrs("/openapi/v2")).level,
            Level::Metadata
        );
        assert!(path_matches("/debug/flags/v", "/debug/*"));
        assert!(!path_matches("/debugger", "/debug/*"));
        assert!(path_matches("/readyz", "/readyz"));
    }

    #[test]
    fn a_policy_file_that_cannot_be_read_or_decoded_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let error = Policy::load(&missing).unwrap_err().to_string();
        assert!(
            error.starts_with("failed to read audit policy file") && error.contains("missing.yaml"),
            "{error}"
        );
        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- {}\n",
        )
        .unwrap();
        let error = Policy::load(&bad).unwrap_err().to_string();
        assert!(
            error.contains("invalid audit policy file")
                && error.contains("bad.yaml")
                && error.contains("rules[0].level: Required value"),
            "{error}"
        );
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        for (text, words) in [
            (
                "apiVersion: audit.k8s.io/v1\nkind: Pod\n",
                "expected Policy",
            ),
            ("apiVersion: v1\nkind: Policy\n", "only audit.k8s.io/v1"),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- users: [a]\n",
                "rules[0].level: Required value",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
                "Loud",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [/a]\n  namespaces: [b]\n",
                "both regular resources and non-resource URLs",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [a*b]\n",
                "must begin with a '/'",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Never]\n",
                "Never",
            ),
            ("[not, a, map]", ""),
        ] {
            let error = Policy::parse(text).unwrap_err().to_string();
            assert!(error.contains(words), "{text:?}: {error}");
        }
    }
}
