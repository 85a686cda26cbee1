//! `Accept: application/yaml`: every form metrics-server serves as YAML, byte for byte as
//! k8s.io/apimachinery writes it (the JSON through sigs.k8s.io/yaml's `JSONToYAML`).

use super::tests::*;
use super::yaml;

const YAML: &str = "application/yaml";

/// The YAML of `path`, checked to be served as YAML.
fn yaml_of<S: super::Source>(h: &super::Handler<S>, path: &str) -> String {
    let r = get_with(h, path, YAML);
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    assert_eq!(r.header("content-type"), "application/yaml", "{path}");
    r.text().to_owned()
}

/// What `JSONToYAML` makes of the JSON answer to `path` asked with `accept`.
fn json_turned_yaml<S: super::Source>(h: &super::Handler<S>, path: &str, accept: &str) -> String {
    let r = get_with(h, path, accept);
    assert_eq!(r.header("content-type"), "application/json", "{path}");
    String::from_utf8(yaml::document_from_json(&r.body)).unwrap()
}

#[test]
fn a_pod_in_yaml() {
    let h = handler();
    assert_eq!(
        yaml_of(
            &h,
            "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/coredns"
        ),
        "apiVersion: metrics.k8s.io/v1beta1
containers:
- name: coredns
  usage:
    cpu: 7338891n
    memory: 14520Ki
- name: a-sidecar
  usage:
    cpu: 12345u
    memory: 1k
kind: PodMetrics
metadata:
  creationTimestamp: \"2024-05-13T14:46:48Z\"
  labels:
    k8s-app: kube-dns
  name: coredns
  namespace: kube-system
timestamp: \"2024-05-13T14:46:35Z\"
window: 15.012s
"
    );
    // A quantity that reads as a number is quoted, as go-yaml quotes it.
    let busybox = yaml_of(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/default/pods/busybox",
    );
    assert!(busybox.contains("\n    cpu: \"0\"\n"), "{busybox}");
}

#[test]
fn a_node_list_in_yaml() {
    let h = handler();
    assert_eq!(
        yaml_of(&h, "/apis/metrics.k8s.io/v1/nodes"),
        "apiVersion: metrics.k8s.io/v1
items:
- metadata:
    creationTimestamp: \"2024-05-13T14:46:48Z\"
    labels:
      kubernetes.io/hostname: k8s-master
      kubernetes.io/os: linux
    name: k8s-master
  timestamp: \"2024-05-13T14:46:35Z\"
  usage:
    cpu: 167390565n
    memory: 1690836Ki
  window: 20.034s
- metadata:
    creationTimestamp: \"2024-05-13T14:46:48Z\"
    labels:
      role: worker
    name: worker-1
  timestamp: \"2024-05-13T14:46:35Z\"
  usage:
    cpu: 5m
    memory: 3Mi
  window: 20.034s
kind: NodeMetricsList
metadata: {}
"
    );
    assert_eq!(
        yaml_of(&h, "/apis/metrics.k8s.io/v1/namespaces/nobody/pods"),
        "apiVersion: metrics.k8s.io/v1\nitems: []\nkind: PodMetricsList\nmetadata: {}\n"
    );
}

/// A long list is streamed item by item: the document is the one the whole JSON makes.
#[test]
fn a_streamed_list_is_the_yaml_of_the_whole_json() {
    let mut f = cluster();
    for i in 0..3 * super::BUFFERED_ITEMS {
        f.add_pod(
            "web",
            &format!("web-{i:04}"),
            &[("app", "web"), ("pod-template-hash", "5d9c7b")],
            Some(&[("nginx", 1_000 * i as u64, 1 << 20), ("true", 0, 1)]),
        );
    }
    let (h, _) = handler_with(f, "");
    for path in [
        "/apis/metrics.k8s.io/v1beta1/pods",
        "/apis/metrics.k8s.io/v1/namespaces/web/pods",
        "/apis/metrics.k8s.io/v1/namespaces/web/pods?labelSelector=app%3Dweb",
    ] {
        let r = get_with(&h, path, YAML);
        // Frames an eighth of JSON's: a YAML item costs ~20 times more to write, and a frame
        // is written in one go on the task's worker.
        let (frame, _) = super::body::YAML_FRAME;
        assert!(r.frames > 2, "{path}: {} frames", r.frames);
        assert!(
            r.largest_frame <= frame + super::body::FRAME_SLACK_BYTES,
            "{path}: {}",
            r.largest_frame
        );
        let streamed = yaml_of(&h, path);
        assert_eq!(
            streamed,
            json_turned_yaml(&h, path, "application/json"),
            "{path}"
        );
        assert!(streamed.contains("\n  - name: \"true\"\n"), "{path}");
    }
}

#[test]
fn tables_and_partial_metadata_in_yaml() {
    let h = handler();
    for (path, form) in [
        (
            "/apis/metrics.k8s.io/v1/namespaces/kube-system/pods",
            "as=Table;v=v1;g=meta.k8s.io",
        ),
        (
            "/apis/metrics.k8s.io/v1/nodes/worker-1",
            "as=Table;v=v1beta1;g=meta.k8s.io",
        ),
        (
            "/apis/metrics.k8s.io/v1/namespaces/nobody/pods",
            "as=Table;v=v1;g=meta.k8s.io",
        ),
        (
            "/apis/metrics.k8s.io/v1/pods",
            "as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        ),
        (
            "/apis/metrics.k8s.io/v1/namespaces/nobody/pods",
            "as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        ),
        (
            "/apis/metrics.k8s.io/v1/nodes/k8s-master",
            "as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        ),
    ] {
        let r = get_with(&h, path, &format!("application/yaml;{form}"));
        assert_eq!(r.status, 200, "{path} {form}");
        assert_eq!(r.header("content-type"), "application/yaml");
        assert_eq!(
            r.text(),
            json_turned_yaml(&h, path, &format!("application/json;{form}")),
            "{path} {form}"
        );
    }
}

#[test]
fn errors_and_discovery_in_yaml() {
    let h = handler();
    let r = get_with(
        &h,
        "/apis/metrics.k8s.io/v1/namespaces/default/pods/ghost",
        YAML,
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), "application/yaml");
    assert_eq!(
        r.text(),
        "apiVersion: v1
code: 404
details:
  kind: pods
  name: ghost
kind: Status
message: pods \"ghost\" not found
metadata: {}
reason: NotFound
status: Failure
"
    );
    for path in [
        "/apis",
        "/apis/metrics.k8s.io",
        "/apis/metrics.k8s.io/v1beta1",
    ] {
        assert_eq!(
            yaml_of(&h, path),
            json_turned_yaml(&h, path, "application/json"),
            "{path}"
        );
    }
}
