//! Protobuf handler tests without sockets: every protobuf answer is decoded with the
//! independent messages of `tests/it/k8s_proto.rs` and compared with the JSON answer to the
//! same request.

use super::tests::*;

#[path = "../../tests/it/k8s_proto.rs"]
mod k8s_proto;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What client-go sends for a protobuf client (kubectl top, the HPA).
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf, */*";

/// The same request as JSON and as protobuf; asserts both are 200 with their content types
/// and that the protobuf decodes to the JSON.
fn same_as_json<S: super::Source>(h: &super::Handler<S>, uri: &str, accept: &str) -> usize {
    let json = get_with(h, uri, "application/json");
    let proto = get_with(h, uri, accept);
    assert_eq!(json.status, proto.status, "{uri}");
    assert_eq!(json.header("content-type"), "application/json");
    assert_eq!(proto.header("content-type"), PROTOBUF, "{uri} {accept}");
    assert_eq!(
        k8s_proto::to_json(&proto.body),
        json.json(),
        "{uri} {accept}"
    );
    proto.body.len()
}

#[test]
fn every_resource_decodes_to_the_json_answer_in_both_versions() {
    let (h, _) = handler_with(with_swap((u64::MAX, u64::MAX)), "");
    for v in ["v1", "v1beta1"] {
        for path in [
            "nodes",
            "nodes/k8s-master",
            "nodes/swappy",
            "pods",
            "namespaces/kube-system/pods",
            "namespaces/kube-system/pods/coredns",
            "namespaces/default/pods/busybox",
            "namespaces/empty/pods",
            "pods?labelSelector=app%3Dnone",
            "nodes?fieldSelector=metadata.name%3Dworker-1",
        ] {
            let uri = format!("/apis/metrics.k8s.io/{v}/{path}");
            for accept in [PROTOBUF, CLIENT_GO] {
                same_as_json(&h, &uri, accept);
            }
        }
    }
}

#[test]
fn envelope_names_the_kind_and_version() {
    let h = handler();
    for (uri, api_version, kind) in [
        (
            "/apis/metrics.k8s.io/v1/nodes",
            "metrics.k8s.io/v1",
            "NodeMetricsList",
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/nodes/worker-1",
            "metrics.k8s.io/v1beta1",
            "NodeMetrics",
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/pods",
            "metrics.k8s.io/v1beta1",
            "PodMetricsList",
        ),
        (
            "/apis/metrics.k8s.io/v1/namespaces/default/pods/busybox",
            "metrics.k8s.io/v1",
            "PodMetrics",
        ),
    ] {
        let r = get_with(&h, uri, PROTOBUF);
        let (av, k, _) = k8s_proto::envelope(&r.body);
        assert_eq!((av.as_str(), k.as_str()), (api_version, kind), "{uri}");
    }
}

/// The HPA's request (kube-controller-manager: a namespaced pod list with a label selector,
/// protobuf preferred) and a protobuf-only client (no more 406).
#[test]
fn hpa_request_and_protobuf_only_clients_get_protobuf() {
    let h = handler();
    let uri =
        "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-dns";
    for accept in [
        CLIENT_GO,
        PROTOBUF,
        "application/vnd.kubernetes.protobuf;q=0.9, application/json;q=0.5",
    ] {
        let r = get_with(&h, uri, accept);
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-type"), PROTOBUF, "{accept}");
        let v = k8s_proto::to_json(&r.body);
        assert_eq!(v["items"][0]["metadata"]["name"], "coredns");
        assert_eq!(v["items"][0]["containers"][0]["usage"]["cpu"], "7338891n");
        assert_eq!(v["items"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn json_stays_the_default() {
    let h = handler();
    for accept in [
        "*/*",
        "application/*",
        "application/json",
        "application/json, application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf;q=0.5, application/json",
    ] {
        let r = get_with(&h, "/apis/metrics.k8s.io/v1/nodes", accept);
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-type"), "application/json", "{accept}");
    }
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes");
    assert_eq!(r.header("content-type"), "application/json");
}

/// Table is JSON only (`AllowsMediaTypeTransform`): a protobuf Table range is skipped, so a
/// client that also lists JSON Table gets that, and a protobuf-only Table request is a 406.
#[test]
fn table_is_json_only() {
    let h = handler();
    let both = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let r = get_with(&h, "/apis/metrics.k8s.io/v1/nodes", both);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.json()["kind"], "Table");
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf",
    );
    assert_eq!(r.header("content-type"), PROTOBUF);
    assert_eq!(k8s_proto::to_json(&r.body)["kind"], "NodeMetricsList");
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
    );
    assert_eq!(r.status, 406);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.json()["reason"], "NotAcceptable");
}

#[test]
fn partial_object_metadata_in_protobuf() {
    let h = handler();
    let list =
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let one = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let json_of = |a: &str| a.replace(PROTOBUF, "application/json");
    for (uri, accept) in [
        ("/apis/metrics.k8s.io/v1/pods", list),
        ("/apis/metrics.k8s.io/v1beta1/nodes", list),
        ("/apis/metrics.k8s.io/v1/namespaces/empty/pods", list),
        ("/apis/metrics.k8s.io/v1/nodes/worker-1", one),
        (
            "/apis/metrics.k8s.io/v1/namespaces/default/pods/busybox",
            one,
        ),
    ] {
        let proto = get_with(&h, uri, accept);
        let json = get_with(&h, uri, &json_of(accept));
        assert_eq!(proto.status, 200, "{uri}");
        assert_eq!(proto.header("content-type"), PROTOBUF);
        assert_eq!(k8s_proto::to_json(&proto.body), json.json(), "{uri}");
    }
    // The list / object mismatch is a 406 Status in the negotiated serializer.
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes",
        &format!("{one}, {PROTOBUF}"),
    );
    assert_eq!(r.status, 406);
    assert_eq!(r.header("content-type"), PROTOBUF);
    let v = k8s_proto::to_json(&r.body);
    assert_eq!(
        v["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*metrics.NodeMetricsList)"
    );
}

/// Errors are Status objects in the negotiated serializer (`ErrorNegotiated`), with the
/// same fields as the JSON Status.
#[test]
fn errors_are_negotiated_status_objects() {
    let h = handler();
    for uri in [
        "/apis/metrics.k8s.io/v1/nodes/worker-2",
        "/apis/metrics.k8s.io/v1/nodes/nope",
        "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/pending",
        "/apis/metrics.k8s.io/v1/pods?labelSelector=a%20b%20c",
        "/apis/metrics.k8s.io/v1/pods?watch=true",
        "/apis/metrics.k8s.io/v1/pods?limit=many",
        "/apis/metrics.k8s.io/v1/nodes?resourceVersionMatch=Newest&sendInitialEvents=1",
        "/apis/metrics.k8s.io/v1/nodes/a/b/c",
    ] {
        let json = get_with(&h, uri, "application/json");
        let proto = get_with(&h, uri, CLIENT_GO);
        assert!(json.status.is_client_error(), "{uri}: {}", json.status);
        assert_eq!(proto.status, json.status, "{uri}");
        assert_eq!(proto.header("content-type"), PROTOBUF, "{uri}");
        let v = k8s_proto::to_json(&proto.body);
        assert_eq!(v, json.json(), "{uri}");
        assert_eq!(
            (v["kind"].as_str(), v["apiVersion"].as_str()),
            (Some("Status"), Some("v1"))
        );
    }
    // A Table request's errors are JSON.
    let r = get_with(&h, "/apis/metrics.k8s.io/v1/nodes/nope", KUBECTL_GET);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), "application/json");
}

#[test]
fn large_protobuf_list_is_streamed_and_exact() {
    let mut f = Fake::default();
    let pods = 12_000;
    for i in 0..pods {
        f.add_pod(
            &format!("ns-{:02}", i % 50),
            &format!("pod-{i:05}"),
            &[("app", "web"), ("pod-template-hash", "5d8f9c7b6")],
            Some(&[
                ("app", 4_710_169 + i, 12_533_760 + i),
                ("sidecar", 1_000_000, 3_145_728),
            ]),
        );
    }
    let h = handler_with(f, "").0;
    let uri = "/apis/metrics.k8s.io/v1/pods";
    let r = get_with(&h, uri, CLIENT_GO);
    assert!(r.frames > 5, "{} frames", r.frames);
    assert!(r.largest_frame < super::body::CHUNK_BYTES + 4096);
    // A length mismatch anywhere would fail the decode (or leave bytes over).
    let bytes = same_as_json(&h, uri, CLIENT_GO);
    assert_eq!(bytes, r.body.len());
    let v = k8s_proto::to_json(&r.body);
    assert_eq!(v["items"].as_array().unwrap().len(), pods as usize);
}

/// Around the size up to which a list is written whole and measured afterwards (and past
/// which its items are measured as they are selected, the first ones late): every size
/// decodes exactly, to what the JSON answer says.
#[test]
fn protobuf_lists_around_the_buffered_size_are_exact() {
    let buffered = super::body::BUFFERED_ITEMS;
    for n in [1, buffered - 1, buffered, buffered + 1, 3 * buffered] {
        let mut f = Fake::default();
        for i in 0..n as u64 {
            f.add_pod(
                "team",
                &format!("web-{i:04}"),
                &[("app", "web")],
                Some(&[("app", 4_710_169 + i, 12_533_760 + i)]),
            );
        }
        let h = handler_with(f, "").0;
        for uri in [
            "/apis/metrics.k8s.io/v1/namespaces/team/pods?labelSelector=app%3Dweb",
            "/apis/metrics.k8s.io/v1beta1/pods",
        ] {
            let r = get_with(&h, uri, CLIENT_GO);
            assert_eq!(r.status, 200, "{n} pods, {uri}");
            let bytes = same_as_json(&h, uri, CLIENT_GO);
            assert_eq!(bytes, r.body.len(), "{n} pods, {uri}");
            let v = k8s_proto::to_json(&r.body);
            assert_eq!(v["items"].as_array().unwrap().len(), n, "{uri}");
        }
    }
}

#[test]
fn a_whole_list_is_its_envelope_around_its_items_whatever_their_length() {
    // Items of one byte each, so the list's length crosses the varint widths of its prefix
    // (one byte up to 127, two up to 16,383, three beyond).
    fn write(out: &mut Vec<u8>, _: &super::encode::Ctx, item: &u8) {
        out.push(*item);
    }
    let ctx = super::encode::Ctx::new("metrics.k8s.io/v1beta1", 0);
    for n in [0, 1, 119, 120, 121, 16_375, 16_376, 16_377, 40_000] {
        let items: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        for (api_version, kind) in [
            ("metrics.k8s.io/v1beta1", "PodMetricsList"),
            ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        ] {
            let got = super::proto::whole_list(&ctx, api_version, kind, &items, write);
            let raw_len = super::proto::EMPTY_LIST_META.len() + items.len();
            let mut want = Vec::new();
            super::proto::put_envelope_head(&mut want, api_version, kind, raw_len);
            want.extend_from_slice(super::proto::EMPTY_LIST_META);
            want.extend_from_slice(&items);
            want.extend_from_slice(super::proto::ENVELOPE_TAIL);
            assert_eq!(&got[..], &want[..], "{kind} of {n} items");
        }
    }
}

/// Pod lists from the real source (inventory and store), which are written as their pods
/// are selected: the first [`super::body::BUFFERED_ITEMS`] straight into the answer, the rest
/// collected, measured and streamed after them. Short and long, cluster-wide and namespaced,
/// with label and field selectors, each decodes to the JSON answer, its length prefix
/// exact, and each pod is counted once in the freshness histogram; asked as a
/// PartialObjectMetadataList, the same pods' metadata, as JSON has it.
#[test]
fn live_protobuf_lists_decode_to_the_json_answer() {
    let (live, with_usage) = super::stream::tests::cluster();
    let h = super::stream::tests::handler(&live);
    for v in ["v1", "v1beta1"] {
        let base = format!("/apis/metrics.k8s.io/{v}");
        for (path, items) in [
            ("pods".to_owned(), with_usage),
            ("namespaces/a/pods".to_owned(), 3),
            // One past the pods written as they are selected.
            ("namespaces/c/pods".to_owned(), 129),
            (
                "namespaces/big/pods?labelSelector=app%3Dapp-1".to_owned(),
                1372,
            ),
            ("namespaces/c/pods?labelSelector=app%3Dapp-2".to_owned(), 26),
            (
                "pods?labelSelector=app%20in%20(app-0,app-3)".to_owned(),
                2_794,
            ),
            ("pods?fieldSelector=metadata.namespace%3Dc".to_owned(), 129),
            ("namespaces/none/pods?labelSelector=app".to_owned(), 0),
        ] {
            let uri = format!("{base}/{path}");
            let before = h.freshness().count();
            let r = get_with(&h, &uri, CLIENT_GO);
            let counted = h.freshness().count() - before;
            assert_eq!(r.status, 200, "{uri}");
            assert_eq!(r.body.len(), same_as_json(&h, &uri, CLIENT_GO), "{uri}");
            let list = k8s_proto::to_json(&r.body);
            assert_eq!(list["items"].as_array().unwrap().len(), items, "{uri}");
            assert_eq!(counted, items as u64, "{uri}");
            // The same pods' metadata, written the same way.
            let partial = get_with(&h, &uri, PARTIAL_LIST);
            let json = get_with(
                &h,
                &uri,
                &PARTIAL_LIST.replace(PROTOBUF, "application/json"),
            );
            assert_eq!(partial.status, 200, "{uri}");
            assert_eq!(partial.header("content-type"), PROTOBUF, "{uri}");
            let partial = k8s_proto::to_json(&partial.body);
            assert_eq!(partial, json.json(), "{uri}");
            let names = |v: &serde_json::Value| -> Vec<serde_json::Value> {
                v["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .map(|i| i["metadata"]["name"].clone())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            assert_eq!(names(&partial), names(&list), "{uri}");
        }
    }
}

/// What a client asks for to get a list's metadata only, in protobuf.
const PARTIAL_LIST: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
