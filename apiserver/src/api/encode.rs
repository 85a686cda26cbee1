//! NodeMetrics / PodMetrics writers, byte-compatible with metrics-server's JSON
//! (`encoding/json` of `k8s.io/metrics` v1beta1 types: field order of the Go structs, maps with
//! sorted keys, `omitempty` where Go has it).

use std::sync::Arc;

use scraper::inventory::{Encoding, Labels, NodeRecord, PodRecord};
use scraper::point::{PodUsage, Usage};

use super::json::write_str;
use super::quantity::{
    go_uint64, write_cpu, write_cpu_nanocores, write_memory, write_memory_bytes,
};
use super::time::{rfc3339, write_go_duration};

/// A node that has usage, ready to encode.
#[derive(Clone, Debug)]
pub struct NodeItem {
    /// The node (name, labels).
    pub record: Arc<NodeRecord>,
    /// Its usage.
    pub usage: Usage,
}

/// A pod that has usage, ready to encode.
#[derive(Clone, Debug)]
pub struct PodItem {
    /// The pod (namespace, name, labels).
    pub record: Arc<PodRecord>,
    /// Its usage.
    pub usage: Arc<PodUsage>,
}

impl PodItem {
    /// Loads what the writers read of this pod (its record, name, labels and usage) and
    /// discards it: [`super::body::ListBody::warming`] calls it for a batch of items ahead.
    pub fn warm(&self) {
        let record = &*self.record;
        warm_name(record);
        // The label set (shared, its encodings beside the pairs), not its pairs.
        std::hint::black_box(record.labels.is_empty());
        let usage = &*self.usage;
        std::hint::black_box(usage.timestamp_ns);
        std::hint::black_box(usage.containers.last().map(|c| c.memory_bytes));
    }
}

/// Loads the first byte of `record`'s name and discards it: the name is its own allocation,
/// so a writer that reaches it cold waits for it. The byte itself must be read (a reference
/// to it costs no load at all: `black_box(name.first())` left every name of the streamed list
/// to miss in the writer, ~13 ms of a ~77 ms list of 150,000 pods in process).
#[inline]
pub fn warm_name(record: &PodRecord) {
    std::hint::black_box(record.key.name.as_bytes().first().copied());
}

/// What the row object of a Table holds (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// `None`: `"object":null`.
    None,
    /// `Metadata` (the default): a `PartialObjectMetadata`.
    Metadata,
    /// `Object`: the full NodeMetrics / PodMetrics.
    Object,
}

const CREATION_KEY: &[u8] = b",\"creationTimestamp\":\"";
const CREATION_LEN: usize = CREATION_KEY.len() + 21;

/// Per-response constants.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// `metrics.k8s.io/v1` or `metrics.k8s.io/v1beta1`.
    pub api_version: &'static str,
    /// `,"creationTimestamp":"<RFC 3339>"` of the response time: what every object's
    /// metadata carries between its namespace and its labels.
    pub creation: [u8; CREATION_LEN],
    /// The response time in Unix nanoseconds (protobuf `creationTimestamp`).
    pub creation_ns: i64,
    /// The protobuf `ObjectMeta` bytes from `selfLink` to `creationTimestamp`, the same in
    /// every object, and how many there are: made from `creation_ns` by [`Ctx::new`]
    /// ([`super::proto::meta_middle`]), so that each object copies them.
    pub proto_meta_middle: ([u8; 24], usize),
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`: Table and PartialObjectMetadata version.
    pub meta_api_version: &'static str,
    /// Table rows: what `object` holds.
    pub include: Include,
    /// Table: whether the cpu and memory columns exist (metrics-server derives the columns
    /// from the first item's usage keys; a first pod without containers has none).
    pub usage_columns: bool,
}

impl Ctx {
    /// Constants for a response at `now_ns`.
    pub fn new(api_version: &'static str, now_ns: i64) -> Self {
        let mut creation = [0u8; CREATION_LEN];
        let (key, rest) = creation.split_at_mut(CREATION_KEY.len());
        key.copy_from_slice(CREATION_KEY);
        let (time, quote) = rest.split_at_mut(20);
        time.copy_from_slice(&rfc3339(now_ns));
        quote.copy_from_slice(b"\"");
        Ctx {
            api_version,
            creation,
            creation_ns: now_ns,
            proto_meta_middle: super::proto::meta_middle(now_ns),
            meta_api_version: "meta.k8s.io/v1",
            include: Include::Metadata,
            usage_columns: true,
        }
    }
}

/// `ObjectMeta` with the fields metrics-server fills: name, namespace, creationTimestamp,
/// labels (omitted when empty), in Go's struct order.
pub fn write_meta(
    out: &mut Vec<u8>,
    ctx: &Ctx,
    name: &str,
    namespace: Option<&str>,
    labels: &Labels,
) {
    out.extend_from_slice(b"{\"name\":");
    write_str(out, name);
    if let Some(ns) = namespace {
        out.extend_from_slice(b",\"namespace\":");
        write_str(out, ns);
    }
    out.extend_from_slice(&ctx.creation);
    out.extend_from_slice(labels.encoded(Encoding::Json, json_labels));
    out.push(b'}');
}

/// `,"labels":{…}`, or nothing for no labels: encoded once per label set
/// ([`Labels::encoded`]).
fn json_labels(labels: &Labels) -> Vec<u8> {
    let mut out = Vec::new();
    if !labels.is_empty() {
        out.extend_from_slice(b",\"labels\":{");
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(&mut out, k);
            out.push(b':');
            write_str(&mut out, v);
        }
        out.push(b'}');
    }
    out
}

/// `,"timestamp":"…","window":"…"` of the timestamp's RFC 3339 `stamp`; the part up to the
/// window's value is one append.
fn write_time_window(out: &mut Vec<u8>, stamp: &[u8; 20], window_ns: i64) {
    const KEY: &[u8] = b",\"timestamp\":\"";
    const NEXT: &[u8] = b"\",\"window\":\"";
    let mut head = [0u8; KEY.len() + 20 + NEXT.len()];
    let (key, rest) = head.split_at_mut(KEY.len());
    key.copy_from_slice(KEY);
    let (time, next) = rest.split_at_mut(20);
    time.copy_from_slice(stamp);
    next.copy_from_slice(NEXT);
    out.extend_from_slice(&head);
    write_go_duration(out, window_ns);
    out.push(b'"');
}

/// A `ResourceList`: `cpu`, `memory`, and `swap` only where the kubelet reported it (keys
/// sorted, as Go encodes a map; swap is a BinarySI quantity like memory).
fn write_usage(out: &mut Vec<u8>, cpu_nanocores: u64, memory_bytes: u64, swap_bytes: Option<u64>) {
    out.extend_from_slice(b"{\"cpu\":\"");
    write_cpu(out, cpu_nanocores);
    out.extend_from_slice(b"\",\"memory\":\"");
    write_memory(out, memory_bytes);
    if let Some(swap) = swap_bytes {
        out.extend_from_slice(b"\",\"swap\":\"");
        write_memory(out, swap);
    }
    out.extend_from_slice(b"\"}");
}

/// `"kind":"…","apiVersion":"…",` (the caller opens the object).
pub(crate) fn write_type_meta(out: &mut Vec<u8>, kind: &str, api_version: &str) {
    out.extend_from_slice(b"\"kind\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"apiVersion\":\"");
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(b"\",");
}

/// A NodeMetrics object; `type_meta` adds kind/apiVersion (single objects, not list items).
pub fn write_node(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem, type_meta: bool) {
    out.push(b'{');
    if type_meta {
        write_type_meta(out, "NodeMetrics", ctx.api_version);
    }
    out.extend_from_slice(b"\"metadata\":");
    write_meta(
        out,
        ctx,
        item.record.name.as_str(),
        None,
        &item.record.labels,
    );
    let stamp = rfc3339(item.usage.timestamp_ns);
    write_time_window(out, &stamp, item.usage.window_ns);
    out.extend_from_slice(b",\"usage\":");
    write_usage(
        out,
        item.usage.cpu_nanocores,
        item.usage.memory_bytes,
        item.usage.swap_bytes,
    );
    out.push(b'}');
}

/// A PodMetrics object; `type_meta` adds kind/apiVersion (single objects, not list items).
pub fn write_pod(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem, type_meta: bool) {
    write_pod_of(out, ctx, &item.record, &item.usage, type_meta);
}

/// [`write_pod`] of a pod's record and usage, borrowed (a streamed list holds no items).
pub fn write_pod_of(
    out: &mut Vec<u8>,
    ctx: &Ctx,
    record: &PodRecord,
    usage: &PodUsage,
    type_meta: bool,
) {
    let stamp = rfc3339(usage.timestamp_ns);
    write_pod_stamped(out, ctx, record, usage, type_meta, &stamp);
}

/// [`write_pod_of`] with the usage timestamp's RFC 3339 `stamp` given (a streamed list keeps
/// the few it meets in [`super::time::Stamps`]).
pub fn write_pod_stamped(
    out: &mut Vec<u8>,
    ctx: &Ctx,
    record: &PodRecord,
    usage: &PodUsage,
    type_meta: bool,
    stamp: &[u8; 20],
) {
    out.push(b'{');
    if type_meta {
        write_type_meta(out, "PodMetrics", ctx.api_version);
    }
    out.extend_from_slice(b"\"metadata\":");
    let key = &record.key;
    write_meta(out, ctx, &key.name, Some(&key.namespace), &record.labels);
    write_time_window(out, stamp, usage.window_ns);
    out.extend_from_slice(b",\"containers\":[");
    for (i, c) in usage.containers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        write_str(out, &c.name);
        out.extend_from_slice(b",\"usage\":");
        write_usage(out, c.cpu_nanocores, c.memory_bytes, c.swap_bytes());
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// A `PartialObjectMetadata` of the object.
fn write_partial(
    out: &mut Vec<u8>,
    ctx: &Ctx,
    name: &str,
    namespace: Option<&str>,
    labels: &Labels,
) {
    out.push(b'{');
    write_type_meta(out, "PartialObjectMetadata", ctx.meta_api_version);
    out.extend_from_slice(b"\"metadata\":");
    write_meta(out, ctx, name, namespace, labels);
    out.push(b'}');
}

/// PartialObjectMetadata of a node (`as=PartialObjectMetadata[List]`).
pub fn write_node_partial(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    write_partial(
        out,
        ctx,
        item.record.name.as_str(),
        None,
        &item.record.labels,
    );
}

/// PartialObjectMetadata of a pod (`as=PartialObjectMetadata[List]`).
pub fn write_pod_partial(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    let key = &item.record.key;
    write_partial(
        out,
        ctx,
        &key.name,
        Some(&key.namespace),
        &item.record.labels,
    );
}

/// Table column definitions of metrics-server's `pkg/api/table.go`: Name, the sorted usage
/// keys, Window.
pub fn write_table_columns(out: &mut Vec<u8>, usage_columns: bool) {
    out.extend_from_slice(b"[{\"name\":\"Name\",\"type\":\"string\",\"format\":\"name\",\"description\":\"Name of the resource\",\"priority\":0},");
    if usage_columns {
        out.extend_from_slice(b"{\"name\":\"cpu\",\"type\":\"string\",\"format\":\"quantity\",\"description\":\"\",\"priority\":0},");
        out.extend_from_slice(b"{\"name\":\"memory\",\"type\":\"string\",\"format\":\"quantity\",\"description\":\"\",\"priority\":0},");
    }
    out.extend_from_slice(b"{\"name\":\"Window\",\"type\":\"string\",\"format\":\"duration\",\"description\":\"\",\"priority\":0}]");
}

fn write_row_start(out: &mut Vec<u8>, ctx: &Ctx, name: &str) {
    out.extend_from_slice(b"{\"cells\":[");
    write_str(out, name);
    out.push(b',');
    if ctx.usage_columns {
        out.push(b'"');
    }
}

fn write_row_end(out: &mut Vec<u8>, ctx: &Ctx, window_ns: i64) {
    if ctx.usage_columns {
        out.extend_from_slice(b"\",");
    }
    out.push(b'"');
    write_go_duration(out, window_ns);
    out.extend_from_slice(b"\"],\"object\":");
}

/// A Table row for a node: cells `[name, cpu, memory, window]` and the object.
pub fn write_node_row(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    write_row_start(out, ctx, item.record.name.as_str());
    if ctx.usage_columns {
        write_cpu(out, item.usage.cpu_nanocores);
        out.extend_from_slice(b"\",\"");
        write_memory(out, item.usage.memory_bytes);
    }
    write_row_end(out, ctx, item.usage.window_ns);
    match ctx.include {
        Include::None => out.extend_from_slice(b"null"),
        Include::Metadata => write_node_partial(out, ctx, item),
        Include::Object => write_node(out, ctx, item, true),
    }
    out.push(b'}');
}

/// A Table row for a pod: usage summed over containers (`Quantity.Add`, exact).
pub fn write_pod_row(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    write_row_start(out, ctx, &item.record.key.name);
    if ctx.usage_columns {
        let (cpu, memory) = item
            .usage
            .containers
            .iter()
            .fold((0u128, 0u128), |(c, m), x| {
                (
                    c + go_uint64(x.cpu_nanocores),
                    m + go_uint64(x.memory_bytes),
                )
            });
        write_cpu_nanocores(out, cpu);
        out.extend_from_slice(b"\",\"");
        write_memory_bytes(out, memory);
    }
    write_row_end(out, ctx, item.usage.window_ns);
    match ctx.include {
        Include::None => out.extend_from_slice(b"null"),
        Include::Metadata => write_pod_partial(out, ctx, item),
        Include::Object => write_pod(out, ctx, item, true),
    }
    out.push(b'}');
}
