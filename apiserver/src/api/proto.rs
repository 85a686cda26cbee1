//! `application/vnd.kubernetes.protobuf` writers: NodeMetrics, PodMetrics, their lists and
//! PartialObjectMetadata, byte-identical to what metrics-server's gogo-generated marshallers
//! write, straight from the borrowed items (no owned message structs).
//!
//! Envelope (apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`, `doEncode`, and
//! `runtime.Unknown.NestedMarshalTo`): the magic `k8s\0`, then a `runtime.Unknown`
//! (`pkg/runtime/generated.proto`): `typeMeta = 1 {apiVersion = 1, kind = 2}`, `raw = 2` (the
//! object's message), `contentEncoding = 3` and `contentType = 4`, both empty.
//!
//! Messages (`k8s.io/metrics` `pkg/apis/metrics/v1beta1/generated.proto`; `v1` has the same
//! numbers and types):
//! - `NodeMetrics {metadata = 1 ObjectMeta, timestamp = 2 Time, window = 3 Duration,
//!   usage = 4 map<string, Quantity>}`
//! - `PodMetrics {metadata = 1, timestamp = 2, window = 3, containers = 4 repeated
//!   ContainerMetrics}`, `ContainerMetrics {name = 1, usage = 2 map<string, Quantity>}`
//! - `NodeMetricsList` / `PodMetricsList {metadata = 1 ListMeta, items = 2 repeated}`
//!
//! and apimachinery's (`pkg/apis/meta/v1/generated.proto`, `pkg/api/resource/generated.proto`):
//! `ObjectMeta {name = 1, generateName = 2, namespace = 3, selfLink = 4, uid = 5,
//! resourceVersion = 6, generation = 7, creationTimestamp = 8, labels = 11 map<string,string>}`,
//! `ListMeta {selfLink = 1, resourceVersion = 2, continue = 3}`, `Time {seconds = 1, nanos = 2}`
//! (whole seconds: `Time.ProtoTime` leaves `nanos` 0, as JSON has seconds only),
//! `Duration {duration = 1}` in nanoseconds, `Quantity {string = 1}` (the canonical string the
//! JSON carries), `PartialObjectMetadata {metadata = 1}`.
//!
//! gogo writes every non-pointer field, empty or zero, in field-number order, and map entries
//! sorted by key; so do these writers. A nested message's length is filled in once its bytes
//! are written ([`open`] reserves the usual number of bytes, [`close`] writes the varint and
//! moves the body in the rare case it needs another size), so each value is formatted once.
//! A list's envelope needs the length of all of `raw` before the first item is streamed:
//! each `*_len` computes a message's length arithmetically, without writing it, and the
//! handler sums them while it selects the items (the data is in cache then).

use bytes::Bytes;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use scraper::inventory::{Encoding, Labels, PodRecord};
use scraper::point::{ContainerUsage, PodUsage};

use super::encode::{Ctx, NodeItem, PodItem};
use super::quantity::{
    SHORT, cpu_len, cpu_short, memory_len, memory_short, write_cpu, write_memory,
};
use super::scratch::append_prefix;

/// The four bytes every protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// `runtime.Unknown` after `raw`: `contentEncoding = 3` and `contentType = 4`, empty.
pub const ENVELOPE_TAIL: &[u8] = &[0x1a, 0x00, 0x22, 0x00];

/// An empty `ListMeta` as field 1: `selfLink`, `resourceVersion`, `continue`, all empty.
pub const EMPTY_LIST_META: &[u8] = &[0x0a, 0x06, 0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00];

const NS_PER_S: i64 = 1_000_000_000;

/// The size of a length-delimited field `tag` whose body is `body` bytes.
#[inline]
pub fn field_len(tag: u32, body: usize) -> usize {
    key_len(tag) + encoded_len_varint(body as u64) + body
}

/// The size of a varint field.
#[inline]
pub fn varint_field_len(tag: u32, value: u64) -> usize {
    key_len(tag) + encoded_len_varint(value)
}

/// A field key: one byte for the tags used here (< 16), prost's `encode_key` otherwise.
#[inline(always)]
fn put_key(out: &mut Vec<u8>, tag: u32, wire_type: WireType) {
    if tag < 16 {
        out.push((tag << 3 | wire_type as u32) as u8);
    } else {
        encode_key(tag, wire_type, out);
    }
}

/// A varint, with the one-byte case inline (most lengths here are under 128).
#[inline(always)]
fn put_uvarint(out: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        out.push(value as u8);
    } else {
        let mut buf = [0u8; 10];
        let n = varint_into(&mut buf, value);
        append_prefix(out, &buf, n);
    }
}

/// `value` as a varint at the front of `buf`; returns its length (at most 10).
#[inline]
fn varint_into(buf: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 && n + 1 < buf.len() {
        buf[n] = value as u8 | 0x80;
        value >>= 7;
        n += 1;
    }
    if let Some(last) = buf.get_mut(n) {
        *last = value as u8;
    }
    n + 1
}

/// Key and length of a length-delimited field; the caller writes `body` bytes next.
#[inline]
pub fn put_header(out: &mut Vec<u8>, tag: u32, body: usize) {
    put_key(out, tag, WireType::LengthDelimited);
    put_uvarint(out, body as u64);
}

/// A string (or bytes) field.
#[inline]
pub fn put_str(out: &mut Vec<u8>, tag: u32, s: &str) {
    if tag < 16 && s.len() < 0x80 {
        out.extend_from_slice(&[(tag << 3 | 2) as u8, s.len() as u8]);
    } else {
        put_header(out, tag, s.len());
    }
    out.extend_from_slice(s.as_bytes());
}

/// A varint field (`int32`/`int64` as two's complement).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, tag: u32, value: u64) {
    put_key(out, tag, WireType::Varint);
    put_uvarint(out, value);
}

/// Starts length-delimited field `tag` with `reserved` bytes for its length; returns where
/// the length goes. [`close`] fills it in.
#[inline]
pub fn open(out: &mut Vec<u8>, tag: u32, reserved: usize) -> usize {
    put_key(out, tag, WireType::LengthDelimited);
    let at = out.len();
    out.extend_from_slice(&[0; 3][..reserved.min(3)]);
    at
}

/// Writes the length of everything after the bytes [`open`] reserved at `at`.
#[inline(always)]
pub fn close(out: &mut Vec<u8>, at: usize, reserved: usize) {
    let len = out.len() - at - reserved;
    match (reserved, len) {
        (1, 0..0x80) => out[at] = len as u8,
        (2, 0x80..0x4000) => {
            out[at] = (len as u8) | 0x80;
            out[at + 1] = (len >> 7) as u8;
        }
        _ => {
            let need = encoded_len_varint(len as u64);
            if need != reserved {
                resize_gap(out, at, reserved, need);
            }
            let mut slot = &mut out[at..at + need];
            encode_varint(len as u64, &mut slot);
        }
    }
}

/// Makes the `reserved`-byte gap at `at` `need` bytes long, moving what follows.
#[cold]
fn resize_gap(out: &mut Vec<u8>, at: usize, reserved: usize, need: usize) {
    let body = at + reserved;
    let end = out.len();
    if need > reserved {
        out.resize(end + need - reserved, 0);
        out.copy_within(body..end, at + need);
    } else {
        out.copy_within(body..end, at + need);
        out.truncate(end - (reserved - need));
    }
}

/// The length of what [`put_envelope_head`] writes.
fn envelope_head_len(api_version: &str, kind: &str, raw_len: usize) -> usize {
    MAGIC.len()
        + field_len(
            1,
            field_len(1, api_version.len()) + field_len(2, kind.len()),
        )
        + key_len(2)
        + encoded_len_varint(raw_len as u64)
}

/// The magic and `runtime.Unknown` up to `raw`'s bytes: `typeMeta`, then `raw`'s key and
/// length. The caller writes `raw_len` bytes, then [`ENVELOPE_TAIL`].
pub fn put_envelope_head(out: &mut Vec<u8>, api_version: &str, kind: &str, raw_len: usize) {
    out.extend_from_slice(MAGIC);
    put_header(
        out,
        1,
        field_len(1, api_version.len()) + field_len(2, kind.len()),
    );
    put_str(out, 1, api_version);
    put_str(out, 2, kind);
    put_header(out, 2, raw_len);
}

/// `metav1.Time` of whole seconds (floored, as Go's `Unix()`): `{seconds, nanos = 0}`.
fn time_len(unix_ns: i64) -> usize {
    varint_field_len(1, unix_ns.div_euclid(NS_PER_S) as u64) + varint_field_len(2, 0)
}

/// Field `tag` with a `Time`: key, length (one byte: the body is at most 1 + 10 + 2), then
/// `seconds = 1` and `nanos = 2` zero, written into a scratch and appended at once.
fn put_time(out: &mut Vec<u8>, tag: u32, unix_ns: i64) {
    let mut buf = [0u8; 16];
    buf[0] = (tag << 3 | 2) as u8;
    buf[2] = 0x08;
    let n = varint_into(&mut buf[3..13], unix_ns.div_euclid(NS_PER_S) as u64);
    buf[3 + n] = 0x10;
    buf[1] = (n + 3) as u8;
    append_prefix(out, &buf, n + 5);
}

/// `metav1.Duration {duration = 1}` in nanoseconds.
fn duration_len(ns: i64) -> usize {
    varint_field_len(1, ns as u64)
}

/// Field `tag` with a `Duration` (`duration = 1`), appended at once like [`put_time`].
fn put_duration(out: &mut Vec<u8>, tag: u32, ns: i64) {
    let mut buf = [0u8; 16];
    buf[0] = (tag << 3 | 2) as u8;
    buf[2] = 0x08;
    let n = varint_into(&mut buf[3..13], ns as u64);
    buf[1] = (n + 1) as u8;
    append_prefix(out, &buf, n + 3);
}

/// The longest quantity string the writers make (a sum above `u64::MAX` written out; a
/// `u64` takes at most 21 bytes).
const QUANTITY_MAX: usize = 48;

/// One resource of a `ResourceList`.
#[derive(Clone, Copy)]
enum Quantity {
    /// CPU in nanocores (DecimalSI).
    Cpu(u64),
    /// Memory or swap in bytes (BinarySI).
    Bytes(u64),
}

impl Quantity {
    fn string_len(self) -> usize {
        match self {
            Quantity::Cpu(v) => cpu_len(v),
            Quantity::Bytes(v) => memory_len(v),
        }
    }

    fn write(self, out: &mut Vec<u8>) {
        match self {
            Quantity::Cpu(v) => write_cpu(out, v),
            Quantity::Bytes(v) => write_memory(out, v),
        }
    }
}

/// A `ResourceList` (`map<string, Quantity>`): `cpu`, `memory`, and `swap` only where the
/// kubelet reported it, in key order.
#[derive(Clone, Copy)]
struct Resources {
    cpu_nanocores: u64,
    memory_bytes: u64,
    swap_bytes: Option<u64>,
}

impl Resources {
    fn of_container(c: &ContainerUsage) -> Self {
        Resources {
            cpu_nanocores: c.cpu_nanocores,
            memory_bytes: c.memory_bytes,
            swap_bytes: c.swap_bytes(),
        }
    }

    /// A map entry's body: `key = 1`, `value = 2 Quantity {string = 1}`; the quantity's
    /// string is at most 41 bytes, so every length inside is one byte.
    #[inline]
    fn entry_len(key: &str, q: Quantity) -> usize {
        key.len() + q.string_len() + 6
    }

    /// Every entry as repeated field `tag`.
    fn len(self, tag: u32) -> usize {
        let entry = |key: &str, q| field_len(tag, Self::entry_len(key, q));
        entry("cpu", Quantity::Cpu(self.cpu_nanocores))
            + entry("memory", Quantity::Bytes(self.memory_bytes))
            + self
                .swap_bytes
                .map_or(0, |s| entry("swap", Quantity::Bytes(s)))
    }

    fn write(self, out: &mut Vec<u8>, tag: u32) {
        Self::write_entry(out, tag, b"cpu", Quantity::Cpu(self.cpu_nanocores));
        Self::write_entry(out, tag, b"memory", Quantity::Bytes(self.memory_bytes));
        if let Some(swap) = self.swap_bytes {
            Self::write_entry(out, tag, b"swap", Quantity::Bytes(swap));
        }
    }

    /// One entry around its quantity: the common quantities (all but zero and the huge)
    /// are formatted straight into a scratch, the others through the general writers.
    #[inline(always)]
    fn write_entry(out: &mut Vec<u8>, tag: u32, key: &[u8], q: Quantity) {
        let mut string = [0u8; SHORT];
        let short = match q {
            Quantity::Cpu(v) => cpu_short(&mut string, v),
            Quantity::Bytes(v) => memory_short(&mut string, v),
        };
        match short {
            Some(n) => Self::put_entry(out, tag, key, &string, n),
            None => Self::write_rare_entry(out, tag, key, q),
        }
    }

    #[cold]
    fn write_rare_entry(out: &mut Vec<u8>, tag: u32, key: &[u8], q: Quantity) {
        let mut formatted = Vec::with_capacity(QUANTITY_MAX);
        q.write(&mut formatted);
        debug_assert!(formatted.len() <= QUANTITY_MAX, "{}", formatted.len());
        let mut string = [0u8; QUANTITY_MAX];
        let n = formatted.len().min(QUANTITY_MAX);
        string[..n].copy_from_slice(&formatted[..n]);
        Self::put_entry(out, tag, key, &string, n);
    }

    /// An entry as repeated field `tag`: its length, `key = 1`, `value = 2 {string = 1}`
    /// with the first `n` bytes of `string`, built on the stack and appended at once. Every
    /// length inside is one byte: a key of at most 8 bytes (ours: `cpu`, `memory`, `swap`),
    /// a string of at most [`QUANTITY_MAX`].
    #[inline(always)]
    fn put_entry<const N: usize>(
        out: &mut Vec<u8>,
        tag: u32,
        key: &[u8],
        string: &[u8; N],
        n: usize,
    ) {
        let k = key.len().min(8);
        let n = n.min(N);
        let mut entry = [0u8; 16 + QUANTITY_MAX];
        entry[0] = (tag << 3 | 2) as u8;
        entry[1] = (k + n + 6) as u8;
        entry[2] = 0x0a;
        entry[3] = k as u8;
        entry[4..4 + k].copy_from_slice(&key[..k]);
        entry[4 + k..8 + k].copy_from_slice(&[0x12, (n + 2) as u8, 0x0a, n as u8]);
        if let Some(dst) = entry.get_mut(8 + k..8 + k + N) {
            dst.copy_from_slice(string);
        }
        append_prefix(out, &entry, 8 + k + n);
    }
}

/// The `ObjectMeta` metrics-server fills: name, namespace (empty for nodes), creationTimestamp
/// (the response time), labels; the other non-pointer fields empty.
struct Meta<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: &'a Labels,
}

impl Meta<'_> {
    fn of_node(item: &NodeItem) -> Meta<'_> {
        Meta {
            name: item.record.name.as_str(),
            namespace: "",
            labels: &item.record.labels,
        }
    }

    fn of_pod(record: &PodRecord) -> Meta<'_> {
        Meta {
            name: &record.key.name,
            namespace: &record.key.namespace,
            labels: &record.labels,
        }
    }

    fn len(&self, ctx: &Ctx) -> usize {
        let labels = self.labels.encoded(Encoding::Protobuf, labels).len();
        field_len(1, self.name.len())
            + field_len(2, 0)
            + field_len(3, self.namespace.len())
            + field_len(4, 0)
            + field_len(5, 0)
            + field_len(6, 0)
            + varint_field_len(7, 0)
            + field_len(8, time_len(ctx.creation_ns))
            + labels
    }

    fn write(&self, out: &mut Vec<u8>, ctx: &Ctx, tag: u32) {
        let at = open(out, tag, 1);
        put_str(out, 1, self.name);
        // generateName = 2, empty.
        out.extend_from_slice(&[0x12, 0x00]);
        put_str(out, 3, self.namespace);
        let (middle, len) = &ctx.proto_meta_middle;
        append_prefix(out, middle, *len);
        out.extend_from_slice(self.labels.encoded(Encoding::Protobuf, labels));
        close(out, at, 1);
    }
}

/// What every `ObjectMeta` of a response carries between its namespace and its labels, the
/// same for all: `selfLink = 4`, `uid = 5`, `resourceVersion = 6` empty, `generation = 7`
/// zero, `creationTimestamp = 8` the response time. Made once per response ([`Ctx`]).
pub fn meta_middle(creation_ns: i64) -> ([u8; 24], usize) {
    // 8 bytes of empty fields and a `Time` of at most 15 (a 10-byte varint of seconds).
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&[0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00]);
    put_time(&mut out, 8, creation_ns);
    let mut middle = [0u8; 24];
    let len = out.len().min(middle.len());
    middle[..len].copy_from_slice(&out[..len]);
    (middle, len)
}

/// `ObjectMeta.labels = 11`, one entry per label in key order: encoded once per label set
/// ([`Labels::encoded`]).
fn labels(labels: &Labels) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in labels.iter() {
        put_header(&mut out, 11, field_len(1, k.len()) + field_len(2, v.len()));
        put_str(&mut out, 1, k);
        put_str(&mut out, 2, v);
    }
    out
}

fn node_resources(item: &NodeItem) -> Resources {
    Resources {
        cpu_nanocores: item.usage.cpu_nanocores,
        memory_bytes: item.usage.memory_bytes,
        swap_bytes: item.usage.swap_bytes,
    }
}

/// The length of a `NodeMetrics` message.
pub fn node_len(ctx: &Ctx, item: &NodeItem) -> usize {
    field_len(1, Meta::of_node(item).len(ctx))
        + field_len(2, time_len(item.usage.timestamp_ns))
        + field_len(3, duration_len(item.usage.window_ns))
        + node_resources(item).len(4)
}

/// A `NodeMetrics` message (its fields; the caller wrote the length).
pub fn write_node(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    Meta::of_node(item).write(out, ctx, 1);
    put_time(out, 2, item.usage.timestamp_ns);
    put_duration(out, 3, item.usage.window_ns);
    node_resources(item).write(out, 4);
}

fn container_len(c: &ContainerUsage) -> usize {
    field_len(1, c.name.len()) + Resources::of_container(c).len(2)
}

/// The length of a `PodMetrics`' containers (`containers = 4`, repeated).
fn containers_len_of(containers: &[ContainerUsage]) -> usize {
    containers
        .iter()
        .map(|c| field_len(4, container_len(c)))
        .sum()
}

/// The store's [`scraper::store::Measure`]: a pod's containers' length in a `PodMetrics`,
/// computed when their usage is built, so [`pod_len`] reads one number instead of every
/// container (the containers' memory, read again by the writer, is most of a 150,000-pod
/// list's measuring). 0 (unmeasured) if it does not fit.
pub fn containers_len(containers: &[ContainerUsage]) -> u32 {
    u32::try_from(containers_len_of(containers)).unwrap_or(0)
}

/// The length of a `PodMetrics` message.
pub fn pod_len(ctx: &Ctx, item: &PodItem) -> usize {
    let containers = match item.usage.containers_len {
        0 => containers_len_of(&item.usage.containers),
        measured => measured as usize,
    };
    debug_assert_eq!(containers, containers_len_of(&item.usage.containers));
    field_len(1, Meta::of_pod(&item.record).len(ctx))
        + field_len(2, time_len(item.usage.timestamp_ns))
        + field_len(3, duration_len(item.usage.window_ns))
        + containers
}

/// A `PodMetrics` message (its fields; the caller wrote the length).
pub fn write_pod(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    write_pod_of(out, ctx, &item.record, &item.usage);
}

/// [`write_pod`] of a pod's record and usage, without an item that owns them.
fn write_pod_of(out: &mut Vec<u8>, ctx: &Ctx, record: &PodRecord, usage: &PodUsage) {
    Meta::of_pod(record).write(out, ctx, 1);
    put_time(out, 2, usage.timestamp_ns);
    put_duration(out, 3, usage.window_ns);
    for c in usage.containers.iter() {
        let at = open(out, 4, 1);
        put_str(out, 1, &c.name);
        Resources::of_container(c).write(out, 2);
        close(out, at, 1);
    }
}

/// The length of a `PartialObjectMetadata` of a node.
pub fn node_partial_len(ctx: &Ctx, item: &NodeItem) -> usize {
    field_len(1, Meta::of_node(item).len(ctx))
}

/// A `PartialObjectMetadata` of a node.
pub fn write_node_partial(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    Meta::of_node(item).write(out, ctx, 1);
}

/// The length of a `PartialObjectMetadata` of a pod.
pub fn pod_partial_len(ctx: &Ctx, item: &PodItem) -> usize {
    field_len(1, Meta::of_pod(&item.record).len(ctx))
}

/// A `PartialObjectMetadata` of a pod.
pub fn write_pod_partial(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    Meta::of_pod(&item.record).write(out, ctx, 1);
}

/// How one message kind is measured and written.
#[derive(Clone, Copy)]
pub struct Writer<T> {
    /// The message's length, computed without writing it.
    pub len: fn(&Ctx, &T) -> usize,
    /// The message's fields.
    pub write: fn(&mut Vec<u8>, &Ctx, &T),
}

/// A whole single-object body: envelope, message, tail.
pub fn single<T>(ctx: &Ctx, api_version: &str, kind: &str, item: &T, w: Writer<T>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(MAGIC);
    let type_meta = open(&mut out, 1, 1);
    put_str(&mut out, 1, api_version);
    put_str(&mut out, 2, kind);
    close(&mut out, type_meta, 1);
    let raw = open(&mut out, 2, 2);
    (w.write)(&mut out, ctx, item);
    close(&mut out, raw, 2);
    out.extend_from_slice(ENVELOPE_TAIL);
    out
}

/// The length of a list message (`ListMeta metadata = 1; repeated items = 2`).
pub fn list_len<T>(ctx: &Ctx, items: &[T], w: Writer<T>) -> usize {
    EMPTY_LIST_META.len()
        + items
            .iter()
            .map(|item| field_len(2, (w.len)(ctx, item)))
            .sum::<usize>()
}

/// The head of a list body: envelope up to `raw`'s bytes, then the empty `ListMeta`; items
/// follow as field 2 ([`write_list_item`]), then [`ENVELOPE_TAIL`].
pub fn list_head(api_version: &str, kind: &str, raw_len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(64);
    put_envelope_head(&mut head, api_version, kind, raw_len);
    head.extend_from_slice(EMPTY_LIST_META);
    head
}

/// A whole list body in one buffer: the empty `ListMeta` and `items` (each written by
/// `write`, field 2), the envelope's head put in front once their length is known.
pub fn whole_list<T>(
    ctx: &Ctx,
    api_version: &'static str,
    kind: &'static str,
    items: &[T],
    write: fn(&mut Vec<u8>, &Ctx, &T),
) -> Bytes {
    let mut list = ListWriter::new(api_version, kind, items.len());
    for item in items {
        write(list.items(), ctx, item);
    }
    list.finish()
}

/// A list written into one buffer as its items come, after room for the longest envelope
/// head: the head goes right before them once their length is known, so nothing is copied.
#[derive(Debug)]
pub struct ListWriter {
    out: Vec<u8>,
    /// Bytes reserved in front for the envelope's head.
    room: usize,
    api_version: &'static str,
    kind: &'static str,
}

impl ListWriter {
    /// An empty list of `kind`, with room for about `items` items.
    pub fn new(api_version: &'static str, kind: &'static str, items: usize) -> Self {
        let room = envelope_head_len(api_version, kind, usize::MAX);
        let mut out = Vec::with_capacity(
            room + EMPTY_LIST_META.len() + items.saturating_mul(256) + ENVELOPE_TAIL.len(),
        );
        out.resize(room, 0);
        out.extend_from_slice(EMPTY_LIST_META);
        ListWriter {
            out,
            room,
            api_version,
            kind,
        }
    }

    /// Where the next item is written (field 2, [`write_list_item`] or [`pod_list_item`]).
    pub fn items(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// The list message's length so far (`raw`'s: the `ListMeta` and the items written).
    pub fn raw_len(&self) -> usize {
        self.out.len() - self.room
    }

    /// The whole body: the envelope's head, the list, the envelope's tail.
    pub fn finish(mut self) -> Bytes {
        let start = self.put_head(self.raw_len());
        self.out.extend_from_slice(ENVELOPE_TAIL);
        Bytes::from(self.out).slice(start..)
    }

    /// The start of a longer body: the envelope's head for a list of `raw_len` bytes and what
    /// is written so far; the rest of the items and [`ENVELOPE_TAIL`] follow.
    pub fn into_head(mut self, raw_len: usize) -> Vec<u8> {
        let start = self.put_head(raw_len);
        self.out.drain(..start);
        self.out
    }

    /// Writes the envelope's head at the end of the room; returns where it starts.
    fn put_head(&mut self, raw_len: usize) -> usize {
        let mut head = Vec::with_capacity(self.room);
        put_envelope_head(&mut head, self.api_version, self.kind, raw_len);
        // The room is the head's length for the longest list there can be.
        debug_assert!(head.len() <= self.room, "{} > {}", head.len(), self.room);
        let start = self.room.saturating_sub(head.len());
        if let Some(room) = self.out.get_mut(start..self.room) {
            room.copy_from_slice(&head);
        }
        start
    }
}

/// One list item: field 2, its length, its message (most items take 128 bytes or more:
/// two bytes of length are reserved).
pub fn write_list_item<T>(out: &mut Vec<u8>, ctx: &Ctx, item: &T, w: Writer<T>) {
    let at = open(out, 2, 2);
    (w.write)(out, ctx, item);
    close(out, at, 2);
}

/// NodeMetrics.
pub const NODE: Writer<NodeItem> = Writer {
    len: node_len,
    write: write_node,
};
/// PodMetrics.
pub const POD: Writer<PodItem> = Writer {
    len: pod_len,
    write: write_pod,
};
/// PartialObjectMetadata of a node.
pub const NODE_PARTIAL: Writer<NodeItem> = Writer {
    len: node_partial_len,
    write: write_node_partial,
};
/// PartialObjectMetadata of a pod.
pub const POD_PARTIAL: Writer<PodItem> = Writer {
    len: pod_partial_len,
    write: write_pod_partial,
};

/// A NodeMetricsList item.
pub fn node_item(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    write_list_item(out, ctx, item, NODE);
}
/// A PodMetricsList item.
pub fn pod_item(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    write_list_item(out, ctx, item, POD);
}
/// A PodMetricsList item of a pod's record and usage (no item that owns them).
pub fn pod_list_item(out: &mut Vec<u8>, ctx: &Ctx, record: &PodRecord, usage: &PodUsage) {
    let at = open(out, 2, 2);
    write_pod_of(out, ctx, record, usage);
    close(out, at, 2);
}
/// A PartialObjectMetadataList item of a pod's record.
pub fn pod_partial_list_item(out: &mut Vec<u8>, ctx: &Ctx, record: &PodRecord) {
    let at = open(out, 2, 2);
    Meta::of_pod(record).write(out, ctx, 1);
    close(out, at, 2);
}
/// A PartialObjectMetadataList item of a node.
pub fn node_partial_item(out: &mut Vec<u8>, ctx: &Ctx, item: &NodeItem) {
    write_list_item(out, ctx, item, NODE_PARTIAL);
}
/// A PartialObjectMetadataList item of a pod.
pub fn pod_partial_item(out: &mut Vec<u8>, ctx: &Ctx, item: &PodItem) {
    write_list_item(out, ctx, item, POD_PARTIAL);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use scraper::inventory::NodeRecord;
    use scraper::point::{NodeName, Usage};

    use super::*;

    /// A node, written out by hand from gogo's marshalling rules.
    #[test]
    fn node_bytes_follow_gogo() {
        let item = NodeItem {
            record: Arc::new(NodeRecord {
                name: NodeName::from("n1"),
                labels: Labels::from(vec![(Arc::from("a"), Arc::from("b"))]),
                addresses: Vec::new(),
                kubelet_port: None,
                metrics_path: None,
            }),
            usage: Usage {
                timestamp_ns: 100 * NS_PER_S + 999,
                window_ns: 1_000_000_000,
                cpu_nanocores: 5_000_000,
                memory_bytes: 1024,
                swap_bytes: None,
            },
        };
        let ctx = Ctx::new("metrics.k8s.io/v1beta1", 200 * NS_PER_S + 5);
        let body = single(&ctx, ctx.api_version, "NodeMetrics", &item, NODE);
        let mut want = b"k8s\0".to_vec();
        let tm = b"\x0a\x16metrics.k8s.io/v1beta1\x12\x0bNodeMetrics";
        want.push(0x0a);
        want.push(tm.len() as u8);
        want.extend_from_slice(tm);
        let meta: &[u8] = b"\x0a\x02n1\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\
\x42\x05\x08\xc8\x01\x10\x00\x5a\x06\x0a\x01a\x12\x01b";
        let mut raw = vec![0x0a, meta.len() as u8];
        raw.extend_from_slice(meta);
        // timestamp 100 s (nanos dropped), window 1e9 ns.
        raw.extend_from_slice(b"\x12\x04\x08\x64\x10\x00");
        raw.extend_from_slice(b"\x1a\x06\x08\x80\x94\xeb\xdc\x03");
        // usage: cpu "5m", memory "1Ki".
        raw.extend_from_slice(b"\x22\x0b\x0a\x03cpu\x12\x04\x0a\x025m");
        raw.extend_from_slice(b"\x22\x0f\x0a\x06memory\x12\x05\x0a\x031Ki");
        want.push(0x12);
        want.push(raw.len() as u8);
        want.extend_from_slice(&raw);
        want.extend_from_slice(ENVELOPE_TAIL);
        assert_eq!(body, want);
    }

    /// An entry has the same layout whichever path formats its quantity: the common one
    /// (straight into a scratch) and the rare one (zero, below 1024 bytes, the huge).
    #[test]
    fn resource_entries_are_laid_out_alike_on_both_paths() {
        for (cpu, memory) in [
            (5_000_000, 12_533_760),
            (0, 0),
            (1, 512),
            (u64::MAX, 1000),
            (u64::MAX / 100 + 1, i64::MAX as u64 + 1),
        ] {
            let mut out = Vec::new();
            Resources {
                cpu_nanocores: cpu,
                memory_bytes: memory,
                swap_bytes: None,
            }
            .write(&mut out, 2);
            let mut want = Vec::new();
            for (key, q) in [
                ("cpu", Quantity::Cpu(cpu)),
                ("memory", Quantity::Bytes(memory)),
            ] {
                let mut string = Vec::new();
                q.write(&mut string);
                let body = [
                    &[0x0a, key.len() as u8][..],
                    key.as_bytes(),
                    &[0x12, string.len() as u8 + 2, 0x0a, string.len() as u8],
                    &string,
                ]
                .concat();
                want.extend_from_slice(&[0x12, body.len() as u8]);
                want.extend_from_slice(&body);
            }
            assert_eq!(out, want, "cpu {cpu}, memory {memory}");
        }
    }

    /// `*_len` (used for the list envelope) agrees with what the writers write, including
    /// the lengths that do not fit the reserved bytes (long names, many labels).
    #[test]
    fn lengths_match_what_is_written() {
        use scraper::inventory::PodRecord;
        use scraper::point::{PodKey, PodUsage};

        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000 {
            let long = "x".repeat((next() % 300) as usize);
            let labels: Vec<(Arc<str>, Arc<str>)> = (0..next() % 12)
                .map(|i| (Arc::from(format!("k{i:02}{long}")), Arc::from("v")))
                .collect();
            let containers: Vec<ContainerUsage> = (0..next() % 4)
                .map(|i| {
                    ContainerUsage::new(
                        Arc::from(format!("c{i}{}", &long[..long.len().min(round % 200)])),
                        next() >> (next() % 64),
                        next() >> (next() % 64),
                        (next() % 2 == 0).then(|| next() >> (next() % 64)),
                    )
                })
                .collect();
            let ts = next() as i64;
            let pod = PodItem {
                record: Arc::new(PodRecord {
                    usage: scraper::store::UsageLink::new(),
                    key: PodKey::new("ns", &format!("p{}", &long[..long.len().min(round % 150)])),
                    labels: Labels::from(labels.clone()),
                    node_name: None,
                }),
                usage: Arc::new(PodUsage {
                    timestamp_ns: ts,
                    window_ns: next() as i64,
                    containers: containers.clone().into(),
                    // Every other round measured as the server's store measures.
                    containers_len: if round % 2 == 0 {
                        containers_len(&containers)
                    } else {
                        0
                    },
                }),
            };
            let node = NodeItem {
                record: Arc::new(NodeRecord {
                    name: NodeName::from(long.as_str()),
                    labels: Labels::from(labels),
                    addresses: Vec::new(),
                    kubelet_port: None,
                    metrics_path: None,
                }),
                usage: Usage {
                    timestamp_ns: ts,
                    window_ns: -(next() as i64 >> 3),
                    cpu_nanocores: next(),
                    memory_bytes: next() >> 20,
                    swap_bytes: containers.first().and_then(ContainerUsage::swap_bytes),
                },
            };
            let ctx = Ctx::new("metrics.k8s.io/v1", next() as i64);
            let written = |write: &dyn Fn(&mut Vec<u8>)| {
                let mut out = vec![0xff; 3];
                write(&mut out);
                out.len() - 3
            };
            assert_eq!(written(&|o| write_pod(o, &ctx, &pod)), pod_len(&ctx, &pod));
            assert_eq!(
                written(&|o| write_node(o, &ctx, &node)),
                node_len(&ctx, &node)
            );
            assert_eq!(
                written(&|o| write_pod_partial(o, &ctx, &pod)),
                pod_partial_len(&ctx, &pod)
            );
            assert_eq!(
                written(&|o| pod_item(o, &ctx, &pod)),
                field_len(2, pod_len(&ctx, &pod))
            );
            let items = [pod.clone(), pod];
            let mut list = list_head("v", "k", list_len(&ctx, &items, POD));
            let head = list.len();
            for item in &items {
                pod_item(&mut list, &ctx, item);
            }
            assert_eq!(
                list.len() - head + EMPTY_LIST_META.len(),
                list_len(&ctx, &items, POD)
            );
        }
    }
}
