//! An independent reading of Kubernetes protobuf for the tests: prost messages written from
//! the published schemas (apimachinery `pkg/runtime/generated.proto`,
//! `pkg/apis/meta/v1/generated.proto`, `pkg/api/resource/generated.proto`, `k8s.io/metrics`
//! `pkg/apis/metrics/v1beta1/generated.proto`), not from the server's encoder, and a
//! conversion of what they decode into the JSON shape the server serves, so a protobuf
//! answer can be compared with the JSON answer to the same request.
//!
//! Shared by the unit tests (`apiserver/src/api/proto_tests.rs`), this crate's integration
//! tests and the conformance suite, through `#[path]`.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;

use prost::Message;
use serde_json::{Map, Value, json};

#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Duration {
    #[prost(int64, optional, tag = "1")]
    pub duration: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Quantity {
    #[prost(string, optional, tag = "1")]
    pub string: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    pub finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListMeta {
    #[prost(string, optional, tag = "1")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub r#continue: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeMetrics {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub timestamp: Option<Time>,
    #[prost(message, optional, tag = "3")]
    pub window: Option<Duration>,
    #[prost(btree_map = "string, message", tag = "4")]
    pub usage: BTreeMap<String, Quantity>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerMetrics {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub usage: BTreeMap<String, Quantity>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodMetrics {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub timestamp: Option<Time>,
    #[prost(message, optional, tag = "3")]
    pub window: Option<Duration>,
    #[prost(message, repeated, tag = "4")]
    pub containers: Vec<ContainerMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeMetricsList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<NodeMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodMetricsList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<PodMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PartialObjectMetadata {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PartialObjectMetadataList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<PartialObjectMetadata>,
}

#[derive(Clone, PartialEq, Message)]
pub struct StatusDetails {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub group: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub kind: Option<String>,
    #[prost(message, repeated, tag = "4")]
    pub causes: Vec<StatusCause>,
    #[prost(int32, optional, tag = "5")]
    pub retry_after_seconds: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub uid: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct StatusCause {
    #[prost(string, optional, tag = "1")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub field: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub details: Option<StatusDetails>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// The envelope: checks the magic, decodes the `runtime.Unknown`, and checks what
/// protobuf.go's `doEncode` leaves empty. Returns (apiVersion, kind, raw).
pub fn envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    assert_eq!(&body[..4], b"k8s\0", "magic");
    let unknown = Unknown::decode(&body[4..]).expect("runtime.Unknown");
    assert_eq!(unknown.content_encoding.as_deref(), Some(""));
    assert_eq!(unknown.content_type.as_deref(), Some(""));
    let tm = unknown.type_meta.expect("typeMeta");
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        unknown.raw.expect("raw"),
    )
}

/// `metav1.Time` as RFC 3339 (`nanos` must be 0: metav1.Time carries whole seconds).
fn rfc3339(t: &Option<Time>) -> Value {
    let t = t.clone().expect("time");
    assert_eq!(t.nanos, Some(0), "nanos");
    let time = apiserver::api::time::rfc3339(t.seconds.expect("seconds") * 1_000_000_000);
    Value::String(String::from_utf8(time.to_vec()).expect("utf-8"))
}

fn duration(d: &Option<Duration>) -> Value {
    let mut out = Vec::new();
    apiserver::api::time::write_go_duration(
        &mut out,
        d.clone().expect("window").duration.expect("duration"),
    );
    Value::String(String::from_utf8(out).expect("utf-8"))
}

fn usage(u: &BTreeMap<String, Quantity>) -> Value {
    Value::Object(
        u.iter()
            .map(|(k, q)| (k.clone(), json!(q.string.clone().expect("quantity"))))
            .collect(),
    )
}

/// `ObjectMeta` in the JSON shape: empty strings and maps omitted, as `omitempty` does.
pub fn meta(m: &Option<ObjectMeta>) -> Value {
    let m = m.clone().expect("metadata");
    for empty in [&m.generate_name, &m.self_link, &m.uid, &m.resource_version] {
        assert_eq!(empty.as_deref().unwrap_or(""), "");
    }
    assert_eq!(m.generation.unwrap_or(0), 0);
    assert!(m.deletion_timestamp.is_none() && m.annotations.is_empty());
    let mut out = Map::new();
    out.insert("name".into(), json!(m.name.unwrap_or_default()));
    if let Some(ns) = m.namespace.filter(|ns| !ns.is_empty()) {
        out.insert("namespace".into(), json!(ns));
    }
    out.insert("creationTimestamp".into(), rfc3339(&m.creation_timestamp));
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    Value::Object(out)
}

pub fn node_json(n: &NodeMetrics) -> Value {
    json!({
        "metadata": meta(&n.metadata),
        "timestamp": rfc3339(&n.timestamp),
        "window": duration(&n.window),
        "usage": usage(&n.usage),
    })
}

pub fn pod_json(p: &PodMetrics) -> Value {
    json!({
        "metadata": meta(&p.metadata),
        "timestamp": rfc3339(&p.timestamp),
        "window": duration(&p.window),
        "containers": p.containers.iter().map(|c| json!({
            "name": c.name.clone().unwrap_or_default(),
            "usage": usage(&c.usage),
        })).collect::<Vec<_>>(),
    })
}

fn with_type(kind: &str, api_version: &str, obj: Value) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), json!(kind));
    out.insert("apiVersion".into(), json!(api_version));
    if let Value::Object(fields) = obj {
        out.extend(fields);
    }
    Value::Object(out)
}

fn empty_list_meta(m: &Option<ListMeta>) -> Value {
    let m = m.clone().expect("list metadata");
    assert_eq!(m.self_link.as_deref().unwrap_or(""), "");
    assert_eq!(m.resource_version.as_deref().unwrap_or(""), "");
    assert_eq!(m.r#continue.as_deref().unwrap_or(""), "");
    assert!(m.remaining_item_count.is_none());
    json!({})
}

/// Any body this server sends in protobuf, as the JSON it sends for the same request
/// (NodeMetrics, PodMetrics, their lists, PartialObjectMetadata[List], Status).
pub fn to_json(body: &[u8]) -> Value {
    let (api_version, kind, raw) = envelope(body);
    let raw = raw.as_slice();
    let obj = match kind.as_str() {
        "NodeMetrics" => node_json(&NodeMetrics::decode(raw).expect("NodeMetrics")),
        "PodMetrics" => pod_json(&PodMetrics::decode(raw).expect("PodMetrics")),
        "NodeMetricsList" => {
            let l = NodeMetricsList::decode(raw).expect("NodeMetricsList");
            json!({
                "metadata": empty_list_meta(&l.metadata),
                "items": l.items.iter().map(node_json).collect::<Vec<_>>(),
            })
        }
        "PodMetricsList" => {
            let l = PodMetricsList::decode(raw).expect("PodMetricsList");
            json!({
                "metadata": empty_list_meta(&l.metadata),
                "items": l.items.iter().map(pod_json).collect::<Vec<_>>(),
            })
        }
        "PartialObjectMetadata" => {
            let p = PartialObjectMetadata::decode(raw).expect("PartialObjectMetadata");
            json!({"metadata": meta(&p.metadata)})
        }
        "PartialObjectMetadataList" => {
            let l = PartialObjectMetadataList::decode(raw).expect("PartialObjectMetadataList");
            let items: Vec<Value> = l
                .items
                .iter()
                .map(|p| {
                    with_type(
                        "PartialObjectMetadata",
                        &api_version,
                        json!({"metadata": meta(&p.metadata)}),
                    )
                })
                .collect();
            json!({
                "metadata": empty_list_meta(&l.metadata),
                // Go's JSON writes a nil slice as null.
                "items": if items.is_empty() { Value::Null } else { Value::Array(items) },
            })
        }
        "Status" => {
            let s = Status::decode(raw).expect("Status");
            let mut out = Map::new();
            out.insert("metadata".into(), empty_list_meta(&s.metadata));
            out.insert("status".into(), json!(s.status.unwrap_or_default()));
            out.insert("message".into(), json!(s.message.unwrap_or_default()));
            out.insert("reason".into(), json!(s.reason.unwrap_or_default()));
            if let Some(d) = s.details {
                let mut details = Map::new();
                for (k, v) in [("name", d.name), ("group", d.group), ("kind", d.kind)] {
                    if let Some(v) = v.filter(|v| !v.is_empty()) {
                        details.insert(k.into(), json!(v));
                    }
                }
                if !d.causes.is_empty() {
                    let causes = d.causes.iter().map(|c| {
                        let mut cause = Map::new();
                        for (k, v) in [
                            ("reason", &c.reason),
                            ("message", &c.message),
                            ("field", &c.field),
                        ] {
                            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                                cause.insert(k.into(), json!(v));
                            }
                        }
                        Value::Object(cause)
                    });
                    details.insert("causes".into(), causes.collect());
                }
                if let Some(r) = d.retry_after_seconds.filter(|r| *r != 0) {
                    details.insert("retryAfterSeconds".into(), json!(r));
                }
                assert_eq!(d.uid.as_deref().unwrap_or(""), "");
                out.insert("details".into(), Value::Object(details));
            }
            out.insert("code".into(), json!(s.code.unwrap_or_default()));
            Value::Object(out)
        }
        other => panic!("unexpected kind {other}"),
    };
    with_type(&kind, &api_version, obj)
}
