//! An `audit.k8s.io/v1` `Event` and its two log forms: the JSON line of the `json` format and
//! the one-line text of the `legacy` format (`audit.EventString`).

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;
use serde_json::Value;

use scraper::go::quote;

use super::policy::{Level, Stage};
use crate::auth::{Attributes, UserInfo};
use crate::status::Status;

/// `authentication.k8s.io/v1` `UserInfo` as an event carries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct User {
    /// The user name (none when authentication failed).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The UID, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for User {
    fn from(user: &UserInfo) -> Self {
        User {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        }
    }
}

/// `ObjectReference`: what a resource request is about.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// The resource.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The namespace, at namespace scope.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name (also a list's exact `metadata.name` field selector).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The API group (empty for the core group).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The API version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The subresource.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

impl ObjectRef {
    /// The reference of a resource request; `None` for any other path.
    pub fn of(attributes: &Attributes) -> Option<ObjectRef> {
        match attributes {
            Attributes::Resource(r) => Some(ObjectRef {
                resource: r.resource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                api_group: r.group.clone(),
                api_version: r.version.clone(),
                subresource: r.subresource.clone(),
            }),
            Attributes::NonResource { .. } => None,
        }
    }
}

/// `responseStatus`: the code, and for a `Status` answer its status, message, reason and
/// details, as `audit.LogResponseObject` copies them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResponseStatus {
    metadata: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<crate::status::Details>,
    code: u16,
}

impl ResponseStatus {
    /// The status of an answer with `code`, and `status` when the answer is a `Status`.
    pub fn new(code: u16, status: Option<&Status>) -> Self {
        ResponseStatus {
            metadata: Value::Object(serde_json::Map::new()),
            status: status.map(|_| "Failure"),
            message: status.map(|s| s.message.clone()),
            reason: status.map(|s| s.reason).filter(|r| !r.is_empty()),
            details: status.and_then(|s| s.details.clone()),
            code,
        }
    }

    /// The HTTP code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// Sets the message (a failed authentication's, which is no `Status` answer).
    pub fn set_message(&mut self, message: String) {
        self.message = Some(message);
    }
}

/// One event, with its fields in `audit.k8s.io/v1`'s order.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    kind: &'static str,
    api_version: &'static str,
    /// The level the policy chose.
    pub level: &'static str,
    #[serde(rename = "auditID")]
    /// The request's audit ID (its `Audit-Id` header).
    pub audit_id: String,
    /// The stage written.
    pub stage: &'static str,
    #[serde(rename = "requestURI")]
    /// Path and query as sent.
    pub request_uri: String,
    /// The Kubernetes verb (`get`, `list`, or a non-resource request's method).
    pub verb: String,
    /// Who asked (authenticated; empty when authentication failed).
    pub user: User,
    /// Whom they acted as, when impersonating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<User>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    /// `X-Forwarded-For`, `X-Real-Ip`, then the peer, as `utilnet.SourceIPs` lists them.
    pub source_ips: Vec<String>,
    /// The `User-Agent`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// What a resource request is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    /// The answer's status, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    /// When the request arrived (`MicroTime`).
    pub request_received_timestamp: String,
    /// When this stage was reached (`MicroTime`).
    pub stage_timestamp: String,
    /// The authorizer's decision and reason, when it was asked.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<&'static str, String>,
}

impl Event {
    /// An event at `stage` for a request whose fields are given; `received_ns` and
    /// `stage_ns` are Unix times in nanoseconds.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        level: Level,
        stage: Stage,
        audit_id: String,
        request_uri: String,
        verb: String,
        user: User,
        source_ips: Vec<String>,
        user_agent: String,
        object_ref: Option<ObjectRef>,
        received_ns: i64,
        stage_ns: i64,
    ) -> Self {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: level.as_str(),
            audit_id,
            stage: stage.as_str(),
            request_uri,
            verb,
            user,
            impersonated_user: None,
            source_ips,
            user_agent,
            object_ref,
            response_status: None,
            request_received_timestamp: micro_time(received_ns),
            stage_timestamp: micro_time(stage_ns),
            annotations: Default::default(),
        }
    }

    /// The event as an item of an `EventList` (the webhook's batches): without `kind` and
    /// `apiVersion`, which Go's encoder writes only on the list.
    pub fn list_item_json(&self) -> serde_json::Result<Vec<u8>> {
        let mut value = serde_json::to_value(self)?;
        if let Some(fields) = value.as_object_mut() {
            fields.remove("kind");
            fields.remove("apiVersion");
        }
        serde_json::to_vec(&value)
    }

    /// The `json` format's line, newline included.
    pub fn json_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// The `legacy` format's line (`audit.EventString`), newline included.
    pub fn legacy_line(&self) -> Vec<u8> {
        let quoted = |list: &[String]| list.iter().map(|s| quote(s)).collect::<Vec<_>>().join(",");
        let (username, groups) = if self.user.username.is_empty() {
            ("<none>".to_owned(), "<none>".to_owned())
        } else if self.user.groups.is_empty() {
            (self.user.username.clone(), "<none>".to_owned())
        } else {
            (self.user.username.clone(), quoted(&self.user.groups))
        };
        let (as_user, as_groups) = match &self.impersonated_user {
            Some(user) if !user.groups.is_empty() => (user.username.clone(), quoted(&user.groups)),
            Some(user) => (user.username.clone(), "<lookup>".to_owned()),
            None => ("<self>".to_owned(), "<lookup>".to_owned()),
        };
        let namespace = self
            .object_ref
            .as_ref()
            .map(|r| r.namespace.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("<none>");
        let response = self
            .response_status
            .as_ref()
            .map_or_else(|| "<deferred>".to_owned(), |s| s.code.to_string());
        let ip = self.source_ips.first().map_or("<unknown>", String::as_str);
        format!(
            "{} AUDIT: id={} stage={} ip={} method={} user={} groups={} as={} asgroups={} user-agent={} namespace={} uri={} response=\"{}\"\n",
            rfc3339_nano(&self.request_received_timestamp),
            quote(&self.audit_id),
            quote(self.stage),
            quote(ip),
            quote(&self.verb),
            quote(&username),
            quote(&groups),
            quote(&as_user),
            quote(&as_groups),
            quote(&self.user_agent),
            quote(namespace),
            quote(&self.request_uri),
            response,
        )
        .into_bytes()
    }
}

/// `utilnet.SourceIPs`: every address of `X-Forwarded-For` that parses, `X-Real-Ip` unless
/// already listed, then the peer unless it is the last one listed.
pub fn source_ips(headers: &http::HeaderMap, peer: Option<SocketAddr>) -> Vec<String> {
    let parse = |s: &str| s.trim().parse::<IpAddr>().ok();
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(forwarded) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        ips.extend(forwarded.split(',').filter_map(parse));
    }
    if let Some(real) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(parse)
        && !ips.contains(&real)
    {
        ips.push(real);
    }
    if let Some(peer) = peer.map(|p| p.ip().to_canonical())
        && ips.last() != Some(&peer)
    {
        ips.push(peer);
    }
    ips.iter().map(IpAddr::to_string).collect()
}

/// `metav1.MicroTime` in JSON: `2006-01-02T15:04:05.000000Z`.
pub fn micro_time(unix_ns: i64) -> String {
    let seconds = crate::api::time::rfc3339(unix_ns.div_euclid(1_000_000_000) * 1_000_000_000);
    let micros = unix_ns.rem_euclid(1_000_000_000) / 1_000;
    let seconds = String::from_utf8_lossy(&seconds[..19]).into_owned();
    format!("{seconds}.{micros:06}Z")
}

/// Go's `time.RFC3339Nano` of a [`micro_time`]: trailing zeros of the fraction dropped, and
/// the fraction with them when it is zero.
fn rfc3339_nano(micro: &str) -> String {
    match micro.strip_suffix('Z').and_then(|t| t.split_once('.')) {
        Some((seconds, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{fraction}Z")
            }
        }
        None => micro.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;

    fn event() -> Event {
        let mut event = Event::new(
            Level::Metadata,
            Stage::ResponseComplete,
            "5e0b7f6c-3c1a-4a39-9b3e-2f1d0c8a7e61".into(),
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb".into(),
            "list".into(),
            User {
                username: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
                uid: "0b7f".into(),
                groups: vec![
                    "system:serviceaccounts".into(),
                    "system:authenticated".into(),
                ],
                extra: Default::default(),
            },
            vec!["10.0.0.7".into(), "10.0.0.1".into()],
            "kube-controller-manager/v1.37.0".into(),
            Some(ObjectRef {
                resource: "pods".into(),
                namespace: "default".into(),
                api_group: "metrics.k8s.io".into(),
                api_version: "v1beta1".into(),
                ..ObjectRef::default()
            }),
            1_765_025_405_123_456_789,
            1_765_025_405_125_000_000,
        );
        event.response_status = Some(ResponseStatus::new(200, None));
        event
            .annotations
            .insert("authorization.k8s.io/decision", "allow".into());
        event
            .annotations
            .insert("authorization.k8s.io/reason", String::new());
        event
    }

    /// The JSON line as kube-apiserver's log backend writes one (field order, MicroTime,
    /// an empty `metadata` in the status, the empty reason kept).
    #[test]
    fn json_line_is_audit_k8s_io_v1() {
        assert_eq!(
            String::from_utf8(event().json_line()).unwrap(),
            concat!(
                r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5e0b7f6c-3c1a-4a39-9b3e-2f1d0c8a7e61","stage":"ResponseComplete","#,
                r#""requestURI":"/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb","verb":"list","#,
                r#""user":{"username":"system:serviceaccount:kube-system:horizontal-pod-autoscaler","uid":"0b7f","groups":["system:serviceaccounts","system:authenticated"]},"#,
                r#""sourceIPs":["10.0.0.7","10.0.0.1"],"userAgent":"kube-controller-manager/v1.37.0","#,
                r#""objectRef":{"resource":"pods","namespace":"default","apiGroup":"metrics.k8s.io","apiVersion":"v1beta1"},"#,
                r#""responseStatus":{"metadata":{},"code":200},"#,
                r#""requestReceivedTimestamp":"2025-12-06T12:50:05.123456Z","stageTimestamp":"2025-12-06T12:50:05.125000Z","#,
                r#""annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_status_answer_is_copied_into_the_response_status() {
        let status = Status::not_found("nodemetrics", "metrics.k8s.io", "n1");
        let value = serde_json::to_value(ResponseStatus::new(404, Some(&status))).unwrap();
        assert_eq!(value["status"], "Failure");
        assert_eq!(value["reason"], "NotFound");
        assert_eq!(value["details"]["name"], "n1");
        assert_eq!(value["code"], 404);
        assert_eq!(value["message"], status.message.as_str());
    }

    #[test]
    fn legacy_line_is_event_string() {
        assert_eq!(
            String::from_utf8(event().legacy_line()).unwrap(),
            "2025-12-06T12:50:05.123456Z AUDIT: id=\"5e0b7f6c-3c1a-4a39-9b3e-2f1d0c8a7e61\" stage=\"ResponseComplete\" ip=\"10.0.0.7\" method=\"list\" user=\"system:serviceaccount:kube-system:horizontal-pod-autoscaler\" groups=\"\\\"system:serviceaccounts\\\",\\\"system:authenticated\\\"\" as=\"<self>\" asgroups=\"<lookup>\" user-agent=\"kube-controller-manager/v1.37.0\" namespace=\"default\" uri=\"/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb\" response=\"200\"\n"
        );
        let mut anonymous = event();
        anonymous.user = User::default();
        anonymous.response_status = None;
        anonymous.object_ref = None;
        let line = String::from_utf8(anonymous.legacy_line()).unwrap();
        assert!(
            line.contains("user=\"<none>\" groups=\"<none>\"")
                && line.contains("namespace=\"<none>\"")
                && line.ends_with("response=\"<deferred>\"\n"),
            "{line}"
        );
    }

    #[test]
    fn source_ips_as_utilnet_lists_them() {
        let peer: SocketAddr = "10.0.0.1:51234".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(source_ips(&headers, Some(peer)), ["10.0.0.1"]);
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("10.0.0.7, junk, 10.0.0.1"),
        );
        headers.insert("x-real-ip", HeaderValue::from_static("10.0.0.7"));
        // The peer is already last; the real IP already listed.
        assert_eq!(source_ips(&headers, Some(peer)), ["10.0.0.7", "10.0.0.1"]);
        headers.insert("x-real-ip", HeaderValue::from_static("192.0.2.9"));
        let other: SocketAddr = "[::ffff:10.0.0.2]:1".parse().unwrap();
        assert_eq!(
            source_ips(&headers, Some(other)),
            ["10.0.0.7", "10.0.0.1", "192.0.2.9", "10.0.0.2"]
        );
    }

    #[test]
    fn legacy_timestamps_are_rfc3339_nano() {
        assert_eq!(
            rfc3339_nano("2025-12-06T12:50:05.120000Z"),
            "2025-12-06T12:50:05.12Z"
        );
        assert_eq!(
            rfc3339_nano("2025-12-06T12:50:05.000000Z"),
            "2025-12-06T12:50:05Z"
        );
    }
}
