//! Handler tests without sockets: `Handler::handle` over an in-memory [`Source`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Method, Request, StatusCode};
use http_body::Body as _;
use prometheus_client::registry::Registry;
use scraper::inventory::{Labels, NodeRecord, PodRecord};
use scraper::point::{ContainerUsage, NodeName, PodKey, PodUsage, Usage};
use scraper::selector::LabelSelector;

use super::*;

const S: i64 = 1_000_000_000;
/// 2024-05-13T14:46:48Z
pub(super) const NOW: i64 = 1_715_611_608 * S;
/// 2024-05-13T14:46:35Z
const TS: i64 = 1_715_611_595 * S;

type PodEntry = (Arc<PodRecord>, Option<Arc<PodUsage>>);

#[derive(Default)]
pub(crate) struct Fake {
    pub nodes: BTreeMap<String, (Arc<NodeRecord>, Option<Usage>)>,
    pub pods: BTreeMap<(String, String), PodEntry>,
    /// Hand records out in reverse order, to prove the API sorts.
    pub reverse: bool,
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut v: Vec<(Arc<str>, Arc<str>)> = pairs
        .iter()
        .map(|(k, v)| (Arc::from(*k), Arc::from(*v)))
        .collect();
    v.sort();
    Labels::from(v)
}

impl Fake {
    pub(crate) fn add_node(&mut self, name: &str, l: &[(&str, &str)], usage: Option<Usage>) {
        let record = NodeRecord {
            name: NodeName::from(name),
            labels: labels(l),
            addresses: Vec::new(),
            kubelet_port: None,
            metrics_path: None,
        };
        self.nodes
            .insert(name.to_owned(), (Arc::new(record), usage));
    }

    pub(crate) fn add_pod(
        &mut self,
        ns: &str,
        name: &str,
        l: &[(&str, &str)],
        containers: Option<&[(&str, u64, u64)]>,
    ) {
        let record = PodRecord {
            usage: scraper::store::UsageLink::new(),
            key: PodKey::new(ns, name),
            labels: labels(l),
            node_name: Some(NodeName::from("n1")),
        };
        let usage = containers.map(|cs| {
            let containers: scraper::point::Containers = cs
                .iter()
                .map(|(n, cpu, mem)| ContainerUsage::new(Arc::from(*n), *cpu, *mem, None))
                .collect();
            // Measured as the server's store measures (pod_len checks it in debug builds).
            let containers_len = crate::api::proto::containers_len(&containers);
            Arc::new(PodUsage {
                timestamp_ns: TS,
                window_ns: 15_012_000_000,
                containers,
                containers_len,
            })
        });
        self.pods
            .insert((ns.to_owned(), name.to_owned()), (Arc::new(record), usage));
    }
}

impl Source for Fake {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        let mut v: Vec<_> = self.nodes.values().map(|(r, _)| Arc::clone(r)).collect();
        if self.reverse {
            v.reverse();
        }
        v
    }
    fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        self.nodes.get(name).map(|(r, _)| Arc::clone(r))
    }
    fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        let mut v: Vec<_> = self
            .pods
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, (r, _))| Arc::clone(r))
            .collect();
        if self.reverse {
            v.reverse();
        }
        v
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|(r, _)| Arc::clone(r))
    }
    fn node_usage(&self, name: &str, _now_ns: i64) -> Option<Usage> {
        self.nodes.get(name).and_then(|(_, u)| *u)
    }
    fn pod_usage(&self, namespace: &str, name: &str, _now_ns: i64) -> Option<Arc<PodUsage>> {
        self.pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .and_then(|(_, u)| u.clone())
    }
}

pub(super) fn usage(cpu: u64, mem: u64) -> Usage {
    Usage {
        timestamp_ns: TS,
        window_ns: 20_034_000_000,
        cpu_nanocores: cpu,
        memory_bytes: mem,
        swap_bytes: None,
    }
}

/// Two nodes with data, one without; pods in two namespaces, one without data.
pub(super) fn cluster() -> Fake {
    let mut f = Fake {
        reverse: true,
        ..Fake::default()
    };
    f.add_node(
        "k8s-master",
        &[
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/hostname", "k8s-master"),
        ],
        Some(usage(167_390_565, 1_731_416_064)),
    );
    f.add_node(
        "worker-1",
        &[("role", "worker")],
        Some(usage(5_000_000, 3_145_728)),
    );
    f.add_node("worker-2", &[("role", "worker")], None);
    f.add_pod(
        "default",
        "busybox",
        &[("app", "busybox")],
        Some(&[("busybox", 0, 348_160)]),
    );
    f.add_pod(
        "kube-system",
        "coredns",
        &[("k8s-app", "kube-dns")],
        Some(&[
            ("coredns", 7_338_891, 14_868_480),
            ("a-sidecar", 12_345_000, 1000),
        ]),
    );
    f.add_pod("kube-system", "pending", &[], None);
    f
}

pub(super) fn handler_with(f: Fake, node_selector: &str) -> (Handler<Fake>, Registry) {
    let mut registry = Registry::default();
    let sel = LabelSelector::parse(node_selector).unwrap();
    let h = Handler::new(f, sel, &mut registry);
    (h, registry)
}

pub(super) fn handler() -> Handler<Fake> {
    handler_with(cluster(), "").0
}

pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
    pub(super) frames: usize,
    pub(super) largest_frame: usize,
}

impl Reply {
    pub(super) fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
    pub(super) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    pub(super) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

/// Drains a body: every body here is ready at once (buffered, or encoded on poll).
pub(super) fn collect(mut body: Body) -> (Vec<u8>, usize, usize) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let (mut out, mut frames, mut largest) = (Vec::new(), 0, 0);
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    frames += 1;
                    largest = largest.max(data.len());
                    out.extend_from_slice(&data);
                }
            }
            Poll::Ready(None) => return (out, frames, largest),
            Poll::Ready(Some(Err(e))) => match e {},
            Poll::Pending => panic!("body not ready"),
        }
    }
}

pub(super) fn call<S: Source>(
    h: &Handler<S>,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
) -> Option<Reply> {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (parts, ()) = req.body(()).unwrap().into_parts();
    let resp = h.handle(&parts, NOW)?;
    let (rparts, body) = resp.into_parts();
    let (body, frames, largest_frame) = collect(body);
    Some(Reply {
        status: rparts.status,
        headers: rparts.headers,
        body,
        frames,
        largest_frame,
    })
}

pub(super) fn get<S: Source>(h: &Handler<S>, uri: &str) -> Reply {
    call(h, Method::GET, uri, &[]).unwrap()
}

pub(super) fn get_with<S: Source>(h: &Handler<S>, uri: &str, accept: &str) -> Reply {
    call(h, Method::GET, uri, &[("accept", accept)]).unwrap()
}

pub(super) const MASTER: &str = r#"{"metadata":{"name":"k8s-master","creationTimestamp":"2024-05-13T14:46:48Z","labels":{"kubernetes.io/hostname":"k8s-master","kubernetes.io/os":"linux"}},"timestamp":"2024-05-13T14:46:35Z","window":"20.034s","usage":{"cpu":"167390565n","memory":"1690836Ki"}}"#;
pub(super) const WORKER1: &str = r#"{"metadata":{"name":"worker-1","creationTimestamp":"2024-05-13T14:46:48Z","labels":{"role":"worker"}},"timestamp":"2024-05-13T14:46:35Z","window":"20.034s","usage":{"cpu":"5m","memory":"3Mi"}}"#;
pub(super) const BUSYBOX: &str = r#"{"metadata":{"name":"busybox","namespace":"default","creationTimestamp":"2024-05-13T14:46:48Z","labels":{"app":"busybox"}},"timestamp":"2024-05-13T14:46:35Z","window":"15.012s","containers":[{"name":"busybox","usage":{"cpu":"0","memory":"340Ki"}}]}"#;
pub(super) const COREDNS: &str = r#"{"metadata":{"name":"coredns","namespace":"kube-system","creationTimestamp":"2024-05-13T14:46:48Z","labels":{"k8s-app":"kube-dns"}},"timestamp":"2024-05-13T14:46:35Z","window":"15.012s","containers":[{"name":"coredns","usage":{"cpu":"7338891n","memory":"14520Ki"}},{"name":"a-sidecar","usage":{"cpu":"12345u","memory":"1k"}}]}"#;

pub(super) fn with_type(kind: &str, v: &str, obj: &str) -> String {
    format!(
        "{{\"kind\":\"{kind}\",\"apiVersion\":\"metrics.k8s.io/{v}\",{}",
        &obj[1..]
    )
}

#[test]
fn node_list_golden_both_versions() {
    let h = handler();
    for v in ["v1", "v1beta1"] {
        let r = get(&h, &format!("/apis/metrics.k8s.io/{v}/nodes"));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(
            r.text(),
            format!(
                "{{\"kind\":\"NodeMetricsList\",\"apiVersion\":\"metrics.k8s.io/{v}\",\"metadata\":{{}},\"items\":[{MASTER},{WORKER1}]}}\n"
            )
        );
    }
}

#[test]
fn node_get_golden_both_versions() {
    let h = handler();
    for v in ["v1", "v1beta1"] {
        let r = get(&h, &format!("/apis/metrics.k8s.io/{v}/nodes/worker-1"));
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text(),
            format!("{}\n", with_type("NodeMetrics", v, WORKER1))
        );
        // Trailing slash is the same route.
        let r2 = get(&h, &format!("/apis/metrics.k8s.io/{v}/nodes/worker-1/"));
        assert_eq!(r2.body, r.body);
    }
}

#[test]
fn pod_lists_and_get_golden_both_versions() {
    let h = handler();
    for v in ["v1", "v1beta1"] {
        let all = get(&h, &format!("/apis/metrics.k8s.io/{v}/pods"));
        assert_eq!(
            all.text(),
            format!(
                "{{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/{v}\",\"metadata\":{{}},\"items\":[{BUSYBOX},{COREDNS}]}}\n"
            )
        );
        let ns = get(
            &h,
            &format!("/apis/metrics.k8s.io/{v}/namespaces/kube-system/pods"),
        );
        assert_eq!(
            ns.text(),
            format!(
                "{{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/{v}\",\"metadata\":{{}},\"items\":[{COREDNS}]}}\n"
            )
        );
        let empty = get(
            &h,
            &format!("/apis/metrics.k8s.io/{v}/namespaces/nope/pods"),
        );
        assert_eq!(
            empty.text(),
            format!(
                "{{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/{v}\",\"metadata\":{{}},\"items\":[]}}\n"
            )
        );
        let one = get(
            &h,
            &format!("/apis/metrics.k8s.io/{v}/namespaces/default/pods/busybox"),
        );
        assert_eq!(
            one.text(),
            format!("{}\n", with_type("PodMetrics", v, BUSYBOX))
        );
    }
}

/// [`cluster`] with a node `swappy` that reports 32 MiB of swap, and `default/busybox` with
/// two containers: `a` with 1m, 1 MiB and a swap of 0 reported, `b` with `b_usage` (CPU in
/// nanocores, memory in bytes) and no swap reported.
pub(super) fn with_swap(b_usage: (u64, u64)) -> Fake {
    let mut f = cluster();
    f.add_node(
        "swappy",
        &[],
        Some(Usage {
            swap_bytes: Some(32 << 20),
            ..usage(5_000_000, 3_145_728)
        }),
    );
    let key = ("default".to_owned(), "busybox".to_owned());
    let (record, u) = f.pods[&key].clone();
    let mut u = (*u.unwrap()).clone();
    u.containers = vec![
        ContainerUsage::new(Arc::from("a"), 1_000_000, 1 << 20, Some(0)),
        ContainerUsage::new(Arc::from("b"), b_usage.0, b_usage.1, None),
    ]
    .into();
    u.containers_len = crate::api::proto::containers_len(&u.containers);
    f.pods.insert(key, (record, Some(Arc::new(u))));
    f
}

#[test]
fn swap_is_served_only_where_the_kubelet_reported_it() {
    let f = with_swap((1_000_000, 1 << 20));
    let (h, _) = handler_with(f, "");
    for v in ["v1", "v1beta1"] {
        let node = get(&h, &format!("/apis/metrics.k8s.io/{v}/nodes/swappy"));
        assert!(
            node.text()
                .ends_with("\"usage\":{\"cpu\":\"5m\",\"memory\":\"3Mi\",\"swap\":\"32Mi\"}}\n"),
            "{}",
            node.text()
        );
        // Nodes without swap data are byte for byte what they were.
        let other = get(&h, &format!("/apis/metrics.k8s.io/{v}/nodes/worker-1"));
        assert_eq!(
            other.text(),
            format!("{}\n", with_type("NodeMetrics", v, WORKER1))
        );
        let pod = get(
            &h,
            &format!("/apis/metrics.k8s.io/{v}/namespaces/default/pods/busybox"),
        );
        assert!(
            pod.text().contains(
                r#""containers":[{"name":"a","usage":{"cpu":"1m","memory":"1Mi","swap":"0"}},{"name":"b","usage":{"cpu":"1m","memory":"1Mi"}}]"#
            ),
            "{}",
            pod.text()
        );
    }
}

#[test]
fn labels_are_omitted_when_empty() {
    let mut f = Fake::default();
    f.add_node("bare", &[], Some(usage(1_000_000_000, 1024)));
    let h = handler_with(f, "").0;
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes/bare");
    assert_eq!(
        r.text(),
        "{\"kind\":\"NodeMetrics\",\"apiVersion\":\"metrics.k8s.io/v1\",\"metadata\":{\"name\":\"bare\",\"creationTimestamp\":\"2024-05-13T14:46:48Z\"},\"timestamp\":\"2024-05-13T14:46:35Z\",\"window\":\"20.034s\",\"usage\":{\"cpu\":\"1\",\"memory\":\"1Ki\"}}\n"
    );
}

pub(super) fn status_json(message: &str, reason: &str, details: &str, code: u16) -> String {
    format!(
        "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":{},\"reason\":\"{reason}\",{details}\"code\":{code}}}",
        serde_json::to_string(message).unwrap()
    )
}

#[test]
fn not_found_bodies() {
    let h = handler();
    let r = get(&h, "/apis/metrics.k8s.io/v1beta1/nodes/ghost");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.text(),
        status_json(
            "node \"ghost\" not found",
            "NotFound",
            "\"details\":{\"name\":\"ghost\",\"kind\":\"node\"},",
            404
        )
    );
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes/worker-2");
    assert_eq!(
        r.text(),
        status_json(
            "nodemetrics.metrics.k8s.io \"worker-2\" not found",
            "NotFound",
            "\"details\":{\"name\":\"worker-2\",\"group\":\"metrics.k8s.io\",\"kind\":\"nodemetrics\"},",
            404
        )
    );
    let r = get(&h, "/apis/metrics.k8s.io/v1/namespaces/default/pods/ghost");
    assert_eq!(
        r.text(),
        status_json(
            "pods \"ghost\" not found",
            "NotFound",
            "\"details\":{\"name\":\"ghost\",\"kind\":\"pods\"},",
            404
        )
    );
    let r = get(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods/pending",
    );
    assert_eq!(
        r.text(),
        status_json(
            "podmetrics.metrics.k8s.io \"kube-system/pending\" not found",
            "NotFound",
            "\"details\":{\"name\":\"kube-system/pending\",\"group\":\"metrics.k8s.io\",\"kind\":\"podmetrics\"},",
            404
        )
    );
    // A pod exists only in its own namespace.
    assert_eq!(
        get(
            &h,
            "/apis/metrics.k8s.io/v1/namespaces/default/pods/coredns"
        )
        .status,
        404
    );
    for path in [
        "/apis/metrics.k8s.io/v2/nodes",
        "/apis/metrics.k8s.io/v1/services",
        "/apis/metrics.k8s.io/v1/nodes/a/b",
        "/openapi/v3/apis/metrics.k8s.io/v9",
    ] {
        let r = get(&h, path);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.text(),
            status_json(
                "the server could not find the requested resource",
                "NotFound",
                "\"details\":{},",
                404
            ),
            "{path}"
        );
    }
}

#[test]
fn paths_not_ours_are_left_to_the_router() {
    let h = handler();
    for path in [
        "/healthz",
        "/readyz",
        "/livez",
        "/metrics",
        "/",
        "/api/v1/pods",
    ] {
        assert!(call(&h, Method::GET, path, &[]).is_none(), "{path}");
    }
}

#[test]
fn watch_and_other_verbs_are_405() {
    let h = handler();
    for q in ["watch=true", "watch=1", "watch", "watch=True"] {
        let r = get(&h, &format!("/apis/metrics.k8s.io/v1beta1/pods?{q}"));
        assert_eq!(r.status, 405, "{q}");
        assert_eq!(
            r.text(),
            status_json(
                "watch is not supported on resources of kind \"pods.metrics.k8s.io\"",
                "MethodNotAllowed",
                "\"details\":{\"group\":\"metrics.k8s.io\",\"kind\":\"pods\"},",
                405
            )
        );
    }
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes?watch=true");
    assert!(r.text().contains("kind \\\"nodes.metrics.k8s.io\\\""));
    assert_eq!(
        get(&h, "/apis/metrics.k8s.io/v1/nodes?watch=false").status,
        200
    );
    assert_eq!(get(&h, "/apis/metrics.k8s.io/v1/nodes?watch=0").status, 200);
    for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let r = call(&h, m.clone(), "/apis/metrics.k8s.io/v1/nodes", &[]).unwrap();
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(
            r.text(),
            status_json(
                "the server does not allow this method on the requested resource",
                "MethodNotAllowed",
                "\"details\":{},",
                405
            )
        );
    }
    let head = call(&h, Method::HEAD, "/apis/metrics.k8s.io/v1/nodes", &[]).unwrap();
    assert_eq!(head.status, 200);
}

#[test]
fn bad_selectors_are_400() {
    let h = handler();
    let r = get(
        &h,
        "/apis/metrics.k8s.io/v1/pods?labelSelector=app%3D%3Dx%20y",
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.text(),
        status_json(
            "found 'y', expected: ',' or 'end of string'",
            "BadRequest",
            "",
            400
        )
    );
    let r = get(
        &h,
        "/apis/metrics.k8s.io/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue",
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "\"spec.unschedulable\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    // Selector errors come before the watch check, as in the apiserver.
    let r = get(
        &h,
        "/apis/metrics.k8s.io/v1/nodes?watch=true&labelSelector=-x",
    );
    assert_eq!(r.status, 400);
}

#[test]
fn list_options_the_apiserver_refuses_are_refused_with_its_status() {
    let h = handler();
    // An integer that does not parse: 400, whatever the rest.
    let r = get(&h, "/apis/metrics.k8s.io/v1beta1/pods?limit=abc");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.text(),
        status_json(
            "strconv.ParseInt: parsing \"abc\": invalid syntax",
            "BadRequest",
            "",
            400
        )
    );
    assert_eq!(
        get(&h, "/apis/metrics.k8s.io/v1/nodes?timeoutSeconds=1.5").status,
        400
    );
    // Options that contradict each other: 422 Invalid, with the causes a client can show.
    let r = get(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/default/pods?resourceVersionMatch=NotOlderThan",
    );
    assert_eq!(r.status, 422);
    assert_eq!(
        r.text(),
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","#,
            r#""reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","field":"resourceVersionMatch"}]},"code":422}"#
        )
    );
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes?sendInitialEvents=false");
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["details"]["causes"][0]["field"],
        "sendInitialEvents"
    );
    // What client-go's reflectors and kubectl send still lists.
    for q in [
        "limit=500&resourceVersion=0",
        "limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan",
        "resourceVersion=&continue=",
    ] {
        assert_eq!(
            get(&h, &format!("/apis/metrics.k8s.io/v1/nodes?{q}")).status,
            200,
            "{q}"
        );
    }
    // A get is not a list: its options are not checked.
    assert_eq!(
        get(&h, "/apis/metrics.k8s.io/v1/nodes/worker-1?limit=abc").status,
        200
    );
}

#[test]
fn selectors_filter_lists() {
    let h = handler();
    let names = |r: &Reply| -> Vec<String> {
        r.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/nodes?labelSelector=role%3Dworker"
        )),
        ["worker-1"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/nodes?labelSelector=role+notin+(worker)"
        )),
        ["k8s-master"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/nodes?labelSelector=!role"
        )),
        ["k8s-master"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/nodes?fieldSelector=metadata.name!%3Dk8s-master"
        )),
        ["worker-1"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/pods?fieldSelector=metadata.namespace%3Ddefault"
        )),
        ["busybox"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/pods?fieldSelector=metadata.namespace!%3Ddefault"
        )),
        ["coredns"]
    );
    assert_eq!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods?labelSelector=k8s-app+in+(kube-dns)&fieldSelector=metadata.name%3D%3Dcoredns"
        )),
        ["coredns"]
    );
    assert!(
        names(&get(
            &h,
            "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods?labelSelector=app"
        ))
        .is_empty()
    );
}

#[test]
fn node_selector_applies_to_lists_not_to_get() {
    let (h, _) = handler_with(cluster(), "role=worker");
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes");
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 1);
    assert_eq!(r.json()["items"][0]["metadata"]["name"], "worker-1");
    let r = get(&h, "/apis/metrics.k8s.io/v1/nodes/k8s-master");
    assert_eq!(r.status, 200);
}

#[test]
fn not_acceptable_is_406() {
    let h = handler();
    for accept in [
        "text/yaml",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
        "application/json;as=Table;g=meta.k8s.io;v=v2",
    ] {
        for path in [
            "/apis/metrics.k8s.io/v1/nodes",
            "/apis/metrics.k8s.io/v1/nodes/worker-1",
        ] {
            let r = get_with(&h, path, accept);
            assert_eq!(r.status, 406, "{accept} {path}");
            assert_eq!(r.header("content-type"), "application/json");
            assert_eq!(
                r.text(),
                status_json(
                    "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
                    "NotAcceptable",
                    "",
                    406
                )
            );
        }
    }
    // Discovery is JSON or YAML.
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1",
        "application/vnd.kubernetes.protobuf",
    );
    assert_eq!(r.status, 406);
    assert!(
        r.text()
            .contains("accepted: application/json, application/yaml\""),
        "{}",
        r.text()
    );
    for accept in ["application/*", "*/*", "application/json"] {
        let r = get_with(&h, "/apis/metrics.k8s.io/v1/nodes", accept);
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-type"), "application/json");
    }
}

pub(super) const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const COLUMNS: &str = r#"[{"name":"Name","type":"string","format":"name","description":"Name of the resource","priority":0},{"name":"cpu","type":"string","format":"quantity","description":"","priority":0},{"name":"memory","type":"string","format":"quantity","description":"","priority":0},{"name":"Window","type":"string","format":"duration","description":"","priority":0}]"#;

#[test]
fn node_table_with_include_object_variants() {
    let h = handler();
    let partial = |name: &str, labels: &str| {
        format!(
            "{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{\"name\":\"{name}\",\"creationTimestamp\":\"2024-05-13T14:46:48Z\",\"labels\":{labels}}}}}"
        )
    };
    let master_labels = r#"{"kubernetes.io/hostname":"k8s-master","kubernetes.io/os":"linux"}"#;
    let worker_labels = r#"{"role":"worker"}"#;
    let row = |cells: &str, object: &str| format!("{{\"cells\":{cells},\"object\":{object}}}");
    let master_cells = r#"["k8s-master","167390565n","1690836Ki","20.034s"]"#;
    let worker_cells = r#"["worker-1","5m","3Mi","20.034s"]"#;
    let table = |rows: Vec<String>| {
        format!(
            "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{}},\"columnDefinitions\":{COLUMNS},\"rows\":[{}]}}\n",
            rows.join(",")
        )
    };
    let expected_metadata = table(vec![
        row(master_cells, &partial("k8s-master", master_labels)),
        row(worker_cells, &partial("worker-1", worker_labels)),
    ]);
    for q in ["", "?includeObject=Metadata"] {
        let r = get_with(
            &h,
            &format!("/apis/metrics.k8s.io/v1beta1/nodes{q}"),
            KUBECTL_GET,
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), expected_metadata, "{q}");
    }
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1beta1/nodes?includeObject=None",
        KUBECTL_GET,
    );
    assert_eq!(
        r.text(),
        table(vec![row(master_cells, "null"), row(worker_cells, "null")])
    );
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1beta1/nodes?includeObject=Object",
        KUBECTL_GET,
    );
    assert_eq!(
        r.text(),
        table(vec![
            row(master_cells, &with_type("NodeMetrics", "v1beta1", MASTER)),
            row(worker_cells, &with_type("NodeMetrics", "v1beta1", WORKER1)),
        ])
    );
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes?includeObject=Bogus",
        KUBECTL_GET,
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "unrecognized includeObject value: \"Bogus\""
    );
    // Single object.
    let r = get_with(&h, "/apis/metrics.k8s.io/v1/nodes/worker-1", KUBECTL_GET);
    assert_eq!(
        r.text(),
        table(vec![row(worker_cells, &partial("worker-1", worker_labels))])
    );
}

#[test]
fn pod_table_sums_containers_and_v1beta1_meta() {
    let h = handler();
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods?includeObject=None",
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    );
    assert_eq!(r.status, 200);
    // 7338891n + 12345000n = 19683891n; 14868480 + 1000 = 14869480 bytes.
    assert_eq!(
        r.text(),
        format!(
            "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1beta1\",\"metadata\":{{}},\"columnDefinitions\":{COLUMNS},\"rows\":[{{\"cells\":[\"coredns\",\"19683891n\",\"14869480\",\"15.012s\"],\"object\":null}}]}}\n"
        )
    );
    let r = get_with(&h, "/apis/metrics.k8s.io/v1/pods", KUBECTL_GET);
    let v = r.json();
    assert_eq!(v["rows"][0]["cells"][0], "busybox");
    assert_eq!(v["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(v["rows"][0]["object"]["metadata"]["namespace"], "default");
}

#[test]
fn empty_table_has_no_column_definitions() {
    let h = handler();
    for q in ["", "?includeObject=Bogus"] {
        let r = get_with(
            &h,
            &format!("/apis/metrics.k8s.io/v1/namespaces/empty/pods{q}"),
            KUBECTL_GET,
        );
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text(),
            "{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{},\"columnDefinitions\":null,\"rows\":null}\n"
        );
    }
}

#[test]
fn partial_object_metadata() {
    let h = handler();
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    );
    assert_eq!(r.json()["kind"], "PartialObjectMetadataList");
    assert_eq!(r.json()["items"][1]["metadata"]["name"], "worker-1");
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    );
    assert_eq!(r.status, 406);
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/nodes/worker-1",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    );
    assert_eq!(
        r.text(),
        "{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"name\":\"worker-1\",\"creationTimestamp\":\"2024-05-13T14:46:48Z\",\"labels\":{\"role\":\"worker\"}}}\n"
    );
}

const GROUP_VERSIONS: &str = r#"[{"groupVersion":"metrics.k8s.io/v1","version":"v1"},{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}]"#;
const PREFERRED: &str = r#"{"groupVersion":"metrics.k8s.io/v1","version":"v1"}"#;

#[test]
fn legacy_discovery_golden() {
    let h = handler();
    for v in ["v1", "v1beta1"] {
        for suffix in ["", "/"] {
            let r = get(&h, &format!("/apis/metrics.k8s.io/{v}{suffix}"));
            assert_eq!(r.status, 200);
            assert_eq!(r.header("content-type"), "application/json");
            assert_eq!(
                r.text(),
                format!(
                    "{{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"metrics.k8s.io/{v}\",\"resources\":[{{\"name\":\"nodes\",\"singularName\":\"\",\"namespaced\":false,\"kind\":\"NodeMetrics\",\"verbs\":[\"get\",\"list\"]}},{{\"name\":\"pods\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"PodMetrics\",\"verbs\":[\"get\",\"list\"]}}]}}\n"
                )
            );
        }
        // kubectl's protobuf-first Accept still gets JSON.
        let r = get_with(
            &h,
            &format!("/apis/metrics.k8s.io/{v}"),
            "application/vnd.kubernetes.protobuf, */*",
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        get(&h, "/apis/metrics.k8s.io/").text(),
        format!(
            "{{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",\"name\":\"metrics.k8s.io\",\"versions\":{GROUP_VERSIONS},\"preferredVersion\":{PREFERRED}}}\n"
        )
    );
    assert_eq!(
        get(&h, "/apis").text(),
        format!(
            "{{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[{{\"name\":\"metrics.k8s.io\",\"versions\":{GROUP_VERSIONS},\"preferredVersion\":{PREFERRED}}}]}}\n"
        )
    );
}

#[test]
fn aggregated_discovery_v2_with_etag_and_304() {
    let h = handler();
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let r = get_with(&h, "/apis", accept);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), accept);
    let body = r.text();
    let res = |v: &str| {
        format!(
            "{{\"version\":\"{v}\",\"resources\":[{{\"resource\":\"nodes\",\"responseKind\":{{\"group\":\"\",\"version\":\"\",\"kind\":\"NodeMetrics\"}},\"scope\":\"Cluster\",\"singularResource\":\"\",\"verbs\":[\"get\",\"list\"]}},{{\"resource\":\"pods\",\"responseKind\":{{\"group\":\"\",\"version\":\"\",\"kind\":\"PodMetrics\"}},\"scope\":\"Namespaced\",\"singularResource\":\"\",\"verbs\":[\"get\",\"list\"]}}],\"freshness\":\"Current\"}}"
        )
    };
    let doc = format!(
        "{{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"metadata\":{{}},\"items\":[{{\"metadata\":{{\"name\":\"metrics.k8s.io\",\"creationTimestamp\":null}},\"versions\":[{},{}]}}]}}",
        res("v1"),
        res("v1beta1")
    );
    assert_eq!(body, format!("{doc}\n"));
    let etag = r.header("etag").to_owned();
    assert_eq!(etag, format!("\"{}\"", discovery::hash_hex(doc.as_bytes())));
    assert_eq!(etag.len(), 130);
    assert_eq!(r.header("cache-control"), "public");
    assert_eq!(r.header("vary"), "Accept");

    let r = call(
        &h,
        Method::GET,
        "/apis",
        &[("accept", accept), ("if-none-match", &etag)],
    )
    .unwrap();
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), etag);
    let r = call(
        &h,
        Method::GET,
        "/apis",
        &[("accept", accept), ("if-none-match", "\"stale\"")],
    )
    .unwrap();
    assert_eq!(r.status, 200);
    // Without the v2 Accept: the legacy APIGroupList.
    let r = get_with(&h, "/apis", "application/json");
    assert_eq!(r.json()["kind"], "APIGroupList");
    assert!(r.headers.get("etag").is_none());
}

#[test]
fn version_info() {
    let h = handler();
    let r = get(&h, "/version");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["gitVersion"], format!("v{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(v["compiler"], "rustc");
    assert!(r.text().starts_with("{\n  \"major\": "));
}

#[test]
fn openapi_v2_and_v3() {
    let h = handler();
    let r = get(&h, "/openapi/v2");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["swagger"], "2.0");
    for ver in ["v1", "v1beta1"] {
        for kind in [
            "NodeMetrics",
            "NodeMetricsList",
            "PodMetrics",
            "PodMetricsList",
            "ContainerMetrics",
        ] {
            let def = &v["definitions"][format!("io.k8s.metrics.pkg.apis.metrics.{ver}.{kind}")];
            assert!(def.is_object(), "{ver} {kind}");
        }
        assert_eq!(
            v["definitions"][format!("io.k8s.metrics.pkg.apis.metrics.{ver}.NodeMetrics")]["x-kubernetes-group-version-kind"]
                [0]["version"],
            ver
        );
        let list_path =
            &v["paths"][format!("/apis/metrics.k8s.io/{ver}/namespaces/{{namespace}}/pods")];
        let list = &list_path["get"];
        assert_eq!(list["x-kubernetes-action"], "list");
        assert_eq!(list["description"], "list objects of kind PodMetrics");
        assert_eq!(list["consumes"], serde_json::json!(["*/*"]));
        // Every `ListOptions` parameter and `pretty`, at the path's level, by name, as
        // kube-openapi writes a path with one operation.
        let names = |params: &serde_json::Value| -> Vec<String> {
            params
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    format!(
                        "{}:{}:{}",
                        p["name"].as_str().unwrap(),
                        p["in"].as_str().unwrap(),
                        p["type"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(
            names(&list_path["parameters"]),
            [
                "allowWatchBookmarks:query:boolean",
                "continue:query:string",
                "fieldSelector:query:string",
                "labelSelector:query:string",
                "limit:query:integer",
                "namespace:path:string",
                "pretty:query:string",
                "resourceVersion:query:string",
                "resourceVersionMatch:query:string",
                "sendInitialEvents:query:boolean",
                "timeoutSeconds:query:integer",
                "watch:query:boolean",
            ]
        );
        let get_path = &v["paths"]
            [format!("/apis/metrics.k8s.io/{ver}/namespaces/{{namespace}}/pods/{{name}}")];
        assert_eq!(
            names(&get_path["parameters"]),
            [
                "name:path:string",
                "namespace:path:string",
                "pretty:query:string"
            ]
        );
        assert_eq!(
            get_path["parameters"][0]["description"],
            "name of the PodMetrics"
        );
        assert_eq!(get_path["parameters"][0]["required"], true);
        assert_eq!(
            get_path["get"]["description"],
            "read the specified PodMetrics"
        );
        // The media types the installer declares: every serializer, and for a list the
        // watch streams too.
        assert_eq!(
            list["produces"],
            serde_json::json!([
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
                "application/json;stream=watch",
                "application/vnd.kubernetes.protobuf;stream=watch"
            ])
        );
        assert_eq!(
            v["paths"][format!("/apis/metrics.k8s.io/{ver}/nodes/{{name}}")]["get"]["produces"],
            serde_json::json!([
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf"
            ])
        );
    }
    for name in [
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
        "io.k8s.apimachinery.pkg.api.resource.Quantity",
    ] {
        assert!(v["definitions"][name].is_object(), "{name}");
    }
    assert_eq!(
        v["definitions"]["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"],
        "string"
    );
    // The v2 form, as k8s.io/apiserver serves it: references beside their description, no
    // defaults (pruned); the full ObjectMeta, with what it refers to.
    let text = r.text();
    assert!(!text.contains("\"allOf\"") && !text.contains("\"default\""));
    let meta = &v["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    assert_eq!(
        meta["properties"]["managedFields"]["items"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"
    );
    // Every $ref resolves.
    for piece in text.split("\"$ref\":\"#/definitions/").skip(1) {
        let name = &piece[..piece.find('"').unwrap()];
        assert!(v["definitions"][name].is_object(), "dangling {name}");
    }
    assert_eq!(r.header("vary"), "Accept");
    let etag = r.header("etag").to_owned();
    let r = call(&h, Method::GET, "/openapi/v2", &[("if-none-match", &etag)]).unwrap();
    assert_eq!(r.status, 304);
    assert_eq!(r.header("vary"), "Accept");

    let index = get(&h, "/openapi/v3").json();
    for ver in ["v1", "v1beta1"] {
        let url = index["paths"][format!("apis/metrics.k8s.io/{ver}")]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(url.starts_with(&format!("/openapi/v3/apis/metrics.k8s.io/{ver}?hash=")));
        let r = get(&h, &url);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("cache-control"), "public, immutable");
        let doc = r.json();
        assert_eq!(doc["openapi"], "3.0.0");
        assert!(
            doc["components"]["schemas"]
                [format!("io.k8s.metrics.pkg.apis.metrics.{ver}.PodMetrics")]
            .is_object()
        );
        // A reference with a description beside it is wrapped in allOf, as kube-openapi
        // writes v3; every one resolves.
        assert_eq!(
            doc["components"]["schemas"]
                [format!("io.k8s.metrics.pkg.apis.metrics.{ver}.PodMetrics")]["properties"]["metadata"]
                ["allOf"],
            serde_json::json!([{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}])
        );
        let text = r.text();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "dangling {name}"
            );
        }
        // A quantity is a string or a number in v3 (a string in v2), as kube-openapi
        // generates it: `kubectl explain` then shows `map[string]Quantity` for a usage.
        assert_eq!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.api.resource.Quantity"]["oneOf"],
            serde_json::json!([{"type": "string"}, {"type": "number"}])
        );
        let content =
            doc["paths"][format!("/apis/metrics.k8s.io/{ver}/nodes/{{name}}")]["get"]["responses"]
                ["200"]["content"]
                .as_object()
                .unwrap();
        assert_eq!(
            content.keys().collect::<Vec<_>>(),
            [
                "application/json",
                "application/vnd.kubernetes.protobuf",
                "application/yaml"
            ]
        );
        // In v3 a parameter's type is in its schema.
        let nodes = &doc["paths"][format!("/apis/metrics.k8s.io/{ver}/nodes")]["parameters"];
        let limit = nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(
            limit["schema"],
            serde_json::json!({"type": "integer", "uniqueItems": true})
        );
        let hash = url.split("hash=").nth(1).unwrap();
        assert_eq!(hash, discovery::hash_hex(&r.body));
        let stale = get(
            &h,
            &format!("/openapi/v3/apis/metrics.k8s.io/{ver}?hash=0000"),
        );
        assert_eq!(stale.status, 301);
        assert_eq!(stale.header("location"), url);
    }
}

/// kube-openapi's negotiation of `/openapi/v2` and the v3 group documents: JSON for any range
/// that matches `application/json` by type and subtype, whatever its parameters; otherwise 406
/// with no body; `Vary: Accept` always.
#[test]
fn openapi_documents_are_negotiated_as_kube_openapi_does() {
    let h = handler();
    let index = get(&h, "/openapi/v3").json();
    let v3 = index["paths"]["apis/metrics.k8s.io/v1beta1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let stale = "/openapi/v3/apis/metrics.k8s.io/v1beta1?hash=0000";
    for path in ["/openapi/v2", v3.as_str(), stale] {
        for accept in [
            "application/json",
            "application/*",
            "*/*;q=0.1",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "application/json;as=Table;g=meta.k8s.io;v=v1",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json",
        ] {
            let r = call(&h, Method::GET, path, &[("accept", accept)]).unwrap();
            let expected = if path == stale { 301 } else { 200 };
            assert_eq!(r.status, expected, "{path} {accept}");
            assert_eq!(r.header("vary"), "Accept", "{path} {accept}");
            if expected == 200 {
                assert_eq!(r.header("content-type"), "application/json");
            }
        }
        for accept in [
            "text/plain",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ] {
            let r = call(&h, Method::GET, path, &[("accept", accept)]).unwrap();
            assert_eq!(r.status, 406, "{path} {accept}");
            assert!(r.body.is_empty(), "{path} {accept}");
            assert_eq!(r.header("vary"), "Accept", "{path} {accept}");
        }
    }
    // The v3 index is served whatever the Accept.
    let r = call(&h, Method::GET, "/openapi/v3", &[("accept", "text/plain")]).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json");
}

#[test]
fn freshness_histogram_observes_every_returned_item() {
    let (h, registry) = handler_with(cluster(), "");
    get(&h, "/apis/metrics.k8s.io/v1/nodes");
    assert_eq!(h.freshness().count(), 2);
    get(&h, "/apis/metrics.k8s.io/v1/pods");
    get(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/default/pods/busybox",
    );
    get(&h, "/apis/metrics.k8s.io/v1/nodes/worker-2"); // 404: no observation
    assert_eq!(h.freshness().count(), 5);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains(
        "# HELP metrics_server_api_metric_freshness_seconds [ALPHA] Freshness of metrics exported\n"
    ), "{text}");
    assert!(text.contains("# TYPE metrics_server_api_metric_freshness_seconds histogram\n"));
    // Every item is 13 s old: above the 11.98 s bucket (1.364^8), within 16.34 s (1.364^9).
    assert!(
        text.contains("metrics_server_api_metric_freshness_seconds_count 5\n"),
        "{text}"
    );
    assert!(
        text.contains("metrics_server_api_metric_freshness_seconds_sum 65.0\n"),
        "{text}"
    );
    let bucket_line = |le_prefix: &str| {
        text.lines()
            .find(|l| l.contains(&format!("le=\"{le_prefix}")))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(bucket_line("11.98"), "0");
    assert_eq!(bucket_line("16.34"), "5");
    assert_eq!(bucket_line("+Inf"), "5");
}

#[test]
fn large_cluster_list_is_streamed_in_bounded_frames() {
    let mut f = Fake::default();
    for i in 0..20_000 {
        let ns = format!("ns-{:03}", i % 100);
        f.add_pod(
            &ns,
            &format!("pod-{i:05}"),
            &[("app", "web"), ("pod-template-hash", "5d8f9c7b6")],
            Some(&[
                ("app", 4_710_169, 12_533_760),
                ("sidecar", 1_000_000, 3_145_728),
            ]),
        );
    }
    f.reverse = true;
    let h = handler_with(f, "").0;
    let r = get(&h, "/apis/metrics.k8s.io/v1/pods");
    assert_eq!(r.status, 200);
    assert!(r.frames > 10, "{} frames", r.frames);
    // A frame stops after the batch of pods that fills it: at most one batch (of items under
    // 512 bytes here) past the target.
    assert!(
        r.largest_frame < body::CHUNK_BYTES + scraper::inventory::VISIT_BATCH * 512,
        "largest frame {}",
        r.largest_frame
    );
    let v = r.json();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 20_000);
    // Sorted by namespace, then name.
    let keys: Vec<(String, String)> = items
        .iter()
        .map(|i| {
            (
                i["metadata"]["namespace"].as_str().unwrap().to_owned(),
                i["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(items[0]["containers"][0]["usage"]["memory"], "12240Ki");
    assert!(r.body.ends_with(b"]}\n"));
    // The Table form streams too.
    let t = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/pods?includeObject=None",
        KUBECTL_GET,
    );
    assert!(t.frames > 1);
    assert_eq!(t.json()["rows"].as_array().unwrap().len(), 20_000);
    assert_eq!(t.json()["rows"][0]["cells"][1], "5710169n");
}

/// Walking a sorted vector in steps of any size visits exactly the pods of the namespace
/// asked for (all, one, or one that does not exist), in order, each once, at most `max` per
/// step, and says when it is done.
#[test]
fn sorted_pods_walk_in_steps_as_one_visit() {
    let mut pods: Vec<Arc<PodRecord>> = [("a", 5), ("b", 1), ("c", 9)]
        .into_iter()
        .flat_map(|(ns, n)| (0..n).map(move |i| (ns, i)))
        .map(|(ns, i)| {
            Arc::new(PodRecord {
                usage: scraper::store::UsageLink::new(),
                key: PodKey::new(ns, &format!("p{i}")),
                labels: Labels::default(),
                node_name: None,
            })
        })
        .collect();
    pods.sort_by(|a, b| a.key.cmp(&b.key));
    for namespace in [None, Some("a"), Some("b"), Some("c"), Some("bb"), Some("z")] {
        let want: Vec<PodKey> = pods
            .iter()
            .filter(|p| namespace.is_none_or(|ns| &*p.key.namespace == ns))
            .map(|p| p.key.clone())
            .collect();
        for max in 1..=16 {
            let mut got = Vec::new();
            let mut after = None;
            for _ in 0..=pods.len() {
                let mut step = 0;
                after = visit_sorted_pods_after(&pods, namespace, after.as_ref(), max, &mut |b| {
                    step += b.len();
                    got.extend(b.iter().map(|p| p.key.clone()));
                });
                assert!(step <= max, "{step} pods in a step of {max}");
                if after.is_none() {
                    break;
                }
            }
            assert!(after.is_none(), "{namespace:?}, max {max}: never done");
            assert_eq!(got, want, "{namespace:?}, max {max}");
        }
    }
}

/// A source whose cluster-wide pod visit stalls until the test releases it: a list that
/// takes as long as the test wants, in the middle of its selection.
struct Stalling {
    inner: Fake,
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Source for Stalling {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.inner.nodes()
    }
    fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        self.inner.node(name)
    }
    fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        self.inner.pods(namespace)
    }
    fn visit_pods(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) {
        if namespace.is_none() {
            self.entered.send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
        scraper::inventory::in_batches(&self.inner.pods_matching(namespace, labels), visit);
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.inner.pod(namespace, name)
    }
    fn node_usage(&self, name: &str, now_ns: i64) -> Option<Usage> {
        self.inner.node_usage(name, now_ns)
    }
    fn pod_usage(&self, namespace: &str, name: &str, now_ns: i64) -> Option<Arc<PodUsage>> {
        self.inner.pod_usage(namespace, name, now_ns)
    }
    fn pod_count(&self) -> usize {
        OFF_WORKER_PODS
    }
}

#[test]
fn a_long_cluster_wide_list_leaves_its_worker_to_other_requests() {
    // One worker: a list that held it would hold every other request of the runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let h = Arc::new(Handler::new(
        Stalling {
            inner: cluster(),
            entered: entered_tx,
            release: std::sync::Mutex::new(release_rx),
        },
        LabelSelector::default(),
        &mut Registry::default(),
    ));
    let patience = std::time::Duration::from_secs(30);
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for (path, accept) in [
        ("/apis/metrics.k8s.io/v1beta1/pods", accept::PROTOBUF),
        ("/apis/metrics.k8s.io/v1/pods", table),
    ] {
        let list = {
            let h = Arc::clone(&h);
            runtime.spawn(async move { get_with(&h, path, accept).status })
        };
        entered
            .recv_timeout(patience)
            .expect("the cluster-wide list reached its selection");
        // The list is inside its selection, on the runtime's one worker; a namespaced list
        // (an HPA's) comes in meanwhile.
        let (answered_tx, answered) = std::sync::mpsc::channel();
        let namespaced = Arc::clone(&h);
        runtime.spawn(async move {
            let path = "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods";
            let _ = answered_tx.send(get_with(&namespaced, path, accept::PROTOBUF).status);
        });
        let status = answered.recv_timeout(patience);
        release.send(()).unwrap();
        assert_eq!(
            status.expect("a namespaced list answered while a cluster-wide one was selecting"),
            StatusCode::OK
        );
        assert_eq!(runtime.block_on(list).unwrap(), StatusCode::OK, "{path}");
    }
}

#[test]
fn a_streamed_list_gives_up_its_worker_between_frames() {
    let mut f = Fake::default();
    for i in 0..20_000 {
        f.add_pod(
            &format!("ns-{:03}", i % 100),
            &format!("pod-{i:05}"),
            &[("app", "web")],
            Some(&[("app", 4_710_169, 12_533_760)]),
        );
    }
    let h = handler_with(f, "").0;
    // One worker: while a task drains the list without awaiting anything else, only the
    // body's own yields let another task run.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for accept in ["application/json", accept::PROTOBUF] {
        other_ran.store(false, std::sync::atomic::Ordering::SeqCst);
        let req = Request::get("/apis/metrics.k8s.io/v1/pods").header("accept", accept);
        let (parts, ()) = req.body(()).unwrap().into_parts();
        let body = h.handle(&parts, NOW).unwrap().into_body();
        let seen = Arc::clone(&other_ran);
        let (started_tx, started) = std::sync::mpsc::channel();
        let drain = runtime.spawn(async move {
            use http_body_util::BodyExt as _;
            let (mut body, mut frames, mut first_seen) = (body, 0usize, None);
            while let Some(frame) = body.frame().await {
                frame.unwrap();
                frames += 1;
                if frames == 1 {
                    started_tx.send(()).unwrap();
                }
                if first_seen.is_none() && seen.load(std::sync::atomic::Ordering::SeqCst) {
                    first_seen = Some(frames);
                }
            }
            (frames, first_seen)
        });
        // The other task comes in once the drain is under way, as an HPA's request does
        // while a list is being written.
        started
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the drain started");
        let other = Arc::clone(&other_ran);
        runtime.spawn(async move { other.store(true, std::sync::atomic::Ordering::SeqCst) });
        let (frames, first_seen) = runtime.block_on(drain).unwrap();
        assert!(frames > 8, "{accept}: {frames} frames");
        let at = first_seen.unwrap_or_else(|| {
            panic!("{accept}: the other task ran only after all {frames} frames")
        });
        assert!(
            at <= 8,
            "{accept}: the other task ran only after frame {at} of {frames}"
        );
    }
}
