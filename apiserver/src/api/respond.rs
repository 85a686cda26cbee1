//! Shaping a NodeMetrics / PodMetrics answer in the negotiated form: the object, its Table or
//! PartialObjectMetadata, in JSON, YAML or protobuf, single objects buffered and lists
//! streamed.

use bytes::Bytes;
use http::{Response, StatusCode};

use super::accept::{self, Format, Target};
use super::body::{BUFFERED_ITEMS, ListBody, WarmItem, WriteItem};
use super::encode::{self, Ctx, NodeItem, PodItem};
use super::proto::{self, Writer};
use super::{json_response, response};
use crate::body::Body;
use crate::status::Status;

/// The object of a GET.
pub(super) enum SingleItem<'a> {
    Node(&'a NodeItem),
    Pod(&'a PodItem),
}

/// A single object in the negotiated form.
pub(super) fn single(
    format: Format,
    target: Target,
    ctx: &Ctx,
    item: SingleItem<'_>,
    accept: Option<&str>,
) -> Response<Body> {
    if format == Format::Protobuf {
        return proto_single(target, ctx, item, accept);
    }
    let mut out = Vec::with_capacity(1024);
    match target {
        Target::Object | Target::DiscoveryV2 => match item {
            SingleItem::Node(n) => encode::write_node(&mut out, ctx, n, true),
            SingleItem::Pod(p) => encode::write_pod(&mut out, ctx, p, true),
        },
        Target::Partial(_) => match item {
            SingleItem::Node(n) => encode::write_node_partial(&mut out, ctx, n),
            SingleItem::Pod(p) => encode::write_pod_partial(&mut out, ctx, p),
        },
        Target::PartialList(_) => return not_a_list(&item, accept),
        Target::Table(_) => {
            let mut ctx = ctx.clone();
            if let SingleItem::Pod(p) = item {
                ctx.usage_columns = !p.usage.containers.is_empty();
            }
            table_head(&mut out, &ctx, true);
            match item {
                SingleItem::Node(n) => encode::write_node_row(&mut out, &ctx, n),
                SingleItem::Pod(p) => encode::write_pod_row(&mut out, &ctx, p),
            }
            out.extend_from_slice(b"]}");
        }
    }
    out.push(b'\n');
    whole(format, out)
}

/// A whole JSON document (ending in a newline) in the negotiated text format: as it is, or
/// turned into YAML. (Protobuf is written by its own writers.)
pub(super) fn whole(format: Format, json: impl Into<Bytes>) -> Response<Body> {
    let json = json.into();
    if format == Format::Yaml {
        let yaml = super::yaml::document_from_json(&json);
        return response(
            StatusCode::OK,
            Format::Yaml.content_type(),
            crate::body::full(yaml),
        );
    }
    json_response(crate::body::full(json))
}

/// The 406 for `as=PartialObjectMetadataList` on a single object.
fn not_a_list(item: &SingleItem<'_>, accept: Option<&str>) -> Response<Body> {
    let t = match item {
        SingleItem::Node(_) => "*metrics.NodeMetrics",
        SingleItem::Pod(_) => "*metrics.PodMetrics",
    };
    Status::not_acceptable(format!(
        "you requested PartialObjectMetadataList, but the requested object is not a list ({t})"
    ))
    .into_response_for(accept)
}

/// The 406 for `as=PartialObjectMetadata` on a list.
fn not_an_object(go_type: &str, accept: Option<&str>) -> Response<Body> {
    Status::not_acceptable(format!(
        "you requested PartialObjectMetadata, but the requested object is a list ({go_type})"
    ))
    .into_response_for(accept)
}

/// A single object in protobuf: the object itself or its PartialObjectMetadata (Table is
/// JSON only: negotiation never picks protobuf for it).
fn proto_single(
    target: Target,
    ctx: &Ctx,
    item: SingleItem<'_>,
    accept: Option<&str>,
) -> Response<Body> {
    let partial = match target {
        Target::PartialList(_) => return not_a_list(&item, accept),
        Target::Partial(_) => true,
        Target::Object | Target::DiscoveryV2 | Target::Table(_) => false,
    };
    let body = match (item, partial) {
        (SingleItem::Node(n), false) => {
            proto::single(ctx, ctx.api_version, "NodeMetrics", n, proto::NODE)
        }
        (SingleItem::Pod(p), false) => {
            proto::single(ctx, ctx.api_version, "PodMetrics", p, proto::POD)
        }
        (SingleItem::Node(n), true) => proto::single(
            ctx,
            ctx.meta_api_version,
            "PartialObjectMetadata",
            n,
            proto::NODE_PARTIAL,
        ),
        (SingleItem::Pod(p), true) => proto::single(
            ctx,
            ctx.meta_api_version,
            "PartialObjectMetadata",
            p,
            proto::POD_PARTIAL,
        ),
    };
    response(StatusCode::OK, accept::PROTOBUF, crate::body::full(body))
}

/// `{"kind":"Table",...,"rows":[` (or the whole empty Table when there are no rows).
fn table_head(out: &mut Vec<u8>, ctx: &Ctx, has_rows: bool) {
    out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"");
    out.extend_from_slice(ctx.meta_api_version.as_bytes());
    out.extend_from_slice(b"\",\"metadata\":{},\"columnDefinitions\":");
    if has_rows {
        encode::write_table_columns(out, ctx.usage_columns);
        out.extend_from_slice(b",\"rows\":[");
    } else {
        out.extend_from_slice(b"null,\"rows\":null}");
    }
}

/// `{"kind":…,"apiVersion":…,"metadata":{},"items":` (the caller writes the items).
pub(super) fn list_head(out: &mut Vec<u8>, kind: &str, api_version: &str) {
    out.push(b'{');
    encode::write_type_meta(out, kind, api_version);
    out.extend_from_slice(b"\"metadata\":{},\"items\":");
}

/// How a list of one resource is written.
struct ListKind<T> {
    /// `NodeMetricsList` / `PodMetricsList`.
    kind: &'static str,
    /// The Go type named in the PartialObjectMetadata 406.
    go_type: &'static str,
    json: WriteItem<T>,
    partial: WriteItem<T>,
    row: WriteItem<T>,
    /// The protobuf message and its list item.
    proto: (Writer<T>, WriteItem<T>),
    /// The protobuf PartialObjectMetadata and its list item.
    proto_partial: (Writer<T>, WriteItem<T>),
    /// Loads an item's memory ahead of its writer.
    warm: WarmItem<T>,
}

/// Streams a list in the negotiated form.
fn list_body<T: Send + Sync + Unpin + 'static>(
    format: Format,
    target: Target,
    ctx: Ctx,
    items: Vec<T>,
    k: ListKind<T>,
    accept: Option<&str>,
) -> Response<Body> {
    let ListKind {
        kind: list_kind,
        go_type,
        json,
        partial,
        row,
        proto,
        proto_partial,
        warm,
    } = k;
    if format == Format::Protobuf {
        let (api_version, kind, (writer, write)) = match target {
            Target::Partial(_) => return not_an_object(go_type, accept),
            Target::PartialList(_) => (
                ctx.meta_api_version,
                "PartialObjectMetadataList",
                proto_partial,
            ),
            Target::Object | Target::DiscoveryV2 | Target::Table(_) => {
                (ctx.api_version, list_kind, proto)
            }
        };
        if items.len() <= BUFFERED_ITEMS {
            // A short list (an HPA's) is written whole, its length put in front after: no
            // item is measured. Its items' memory (the names above all: the selection reads
            // none) is loaded all at once first, so the misses overlap instead of stalling
            // the writer one item at a time.
            items.iter().for_each(warm);
            let body = proto::whole_list(&ctx, api_version, kind, &items, write);
            return response(StatusCode::OK, accept::PROTOBUF, crate::body::full(body));
        }
        // `raw`'s length goes first, so every item is measured before the first is written.
        let raw_len = proto::list_len(&ctx, &items, writer);
        let head = proto::list_head(api_version, kind, raw_len);
        let body = ListBody::new(head, items, proto::ENVELOPE_TAIL, ctx, write).warming(warm);
        return response(
            StatusCode::OK,
            accept::PROTOBUF,
            body.without_separator().into_body(),
        );
    }
    let mut head = Vec::with_capacity(1024);
    let (write, key): (WriteItem<T>, &str) = match target {
        Target::Object | Target::DiscoveryV2 => {
            list_head(&mut head, list_kind, ctx.api_version);
            head.push(b'[');
            (json, "items")
        }
        Target::PartialList(_) => {
            list_head(&mut head, "PartialObjectMetadataList", ctx.meta_api_version);
            if items.is_empty() {
                head.extend_from_slice(b"null}\n");
                return whole(format, head);
            }
            head.push(b'[');
            (partial, "items")
        }
        Target::Partial(_) => return not_an_object(go_type, accept),
        Target::Table(_) => {
            if items.is_empty() {
                table_head(&mut head, &ctx, false);
                head.push(b'\n');
                return whole(format, head);
            }
            table_head(&mut head, &ctx, true);
            (row, "rows")
        }
    };
    if format == Format::Yaml {
        // The document without its items (`"items":[]`), in YAML up to the items' key and
        // after it; the items go between as a block sequence, streamed like JSON's.
        head.extend_from_slice(b"]}");
        if items.is_empty() {
            head.push(b'\n');
            return whole(format, head);
        }
        let (head, tail) = super::yaml::list_parts(&head, key);
        let body = ListBody::new(head, items, tail, ctx, write)
            .warming(warm)
            .as_yaml();
        return response(
            StatusCode::OK,
            Format::Yaml.content_type(),
            body.into_body(),
        );
    }
    json_response(
        ListBody::new(head, items, &b"]}\n"[..], ctx, write)
            .warming(warm)
            .into_body(),
    )
}

pub(super) fn nodes_list(
    format: Format,
    target: Target,
    ctx: Ctx,
    items: Vec<NodeItem>,
    accept: Option<&str>,
) -> Response<Body> {
    list_body(
        format,
        target,
        ctx,
        items,
        ListKind {
            kind: "NodeMetricsList",
            go_type: "*metrics.NodeMetricsList",
            json: |out, ctx, item| encode::write_node(out, ctx, item, false),
            partial: encode::write_node_partial,
            row: encode::write_node_row,
            proto: (proto::NODE, proto::node_item),
            proto_partial: (proto::NODE_PARTIAL, proto::node_partial_item),
            warm: |_| {},
        },
        accept,
    )
}

pub(super) fn pods_list(
    format: Format,
    target: Target,
    mut ctx: Ctx,
    items: Vec<PodItem>,
    accept: Option<&str>,
) -> Response<Body> {
    if let Some(first) = items.first() {
        ctx.usage_columns = !first.usage.containers.is_empty();
    }
    list_body(
        format,
        target,
        ctx,
        items,
        ListKind {
            kind: "PodMetricsList",
            go_type: "*metrics.PodMetricsList",
            json: |out, ctx, item| encode::write_pod(out, ctx, item, false),
            partial: encode::write_pod_partial,
            row: encode::write_pod_row,
            proto: (proto::POD, proto::pod_item),
            proto_partial: (proto::POD_PARTIAL, proto::pod_partial_item),
            warm: PodItem::warm,
        },
        accept,
    )
}
