//! Protobuf over real HTTPS (h2 and HTTP/1.1): the HPA's request, kubectl's, a streamed
//! cluster-wide list and a negotiated error, each decoded with the independent messages of
//! `k8s_proto` and compared with the JSON answer to the same request.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiserver::serve;
use apiserver::stack;
use http::StatusCode;
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord};
use scraper::point::{ContainerSample, NodeName, NodeScrape, PodKey, Sample};
use scraper::store::Store;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::k8s_proto;
use crate::support::{Client, Reply};

const SECOND: i64 = 1_000_000_000;
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf, */*";
const PODS: usize = 300;

/// A server with one node and `PODS` pods (`app=web` for even ones, `app=db` for odd), all
/// with usage from two scrapes.
struct Cluster {
    addr: SocketAddr,
    shutdown: CancellationToken,
    _tmp: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> Cluster {
    tls::provider::install_default();
    let tmp = tempfile::tempdir().unwrap();
    let inventory = Arc::new(Inventory::new());
    let interner = inventory.interner();
    inventory.upsert_node(NodeRecord {
        name: NodeName::from("n1"),
        labels: interner.labels([("kubernetes.io/os", "linux")]),
        addresses: Vec::new(),
        kubelet_port: None,
        metrics_path: None,
    });
    let pods: Vec<String> = (0..PODS).map(|i| format!("web-{i:03}")).collect();
    for (i, pod) in pods.iter().enumerate() {
        let app = if i % 2 == 0 { "web" } else { "db" };
        inventory.upsert_pod(PodRecord {
            usage: scraper::store::UsageLink::new(),
            key: PodKey::new("default", pod),
            labels: interner.labels([("app", app), ("pod-template-hash", "5d8f9c7b6")]),
            node_name: Some(NodeName::from("n1")),
        });
    }
    let store = Arc::new(Store::new(scraper::store::Config::new(
        Duration::from_secs(15),
    )));
    let now = serve::router::unix_now_ns();
    for round in 0..2_i64 {
        let ts = now - (1 - round) * 15 * SECOND;
        let sample = |cpu: u64, memory: u64| Sample {
            timestamp_ns: ts,
            cpu_usage_ns_total: Some(u64::try_from(round + 1).unwrap() * cpu),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(memory),
            start_time_ns: Some(now - 3600 * SECOND),
            swap_bytes: (round == 1).then_some(1 << 20),
        };
        let scrape = NodeScrape {
            node: Some(sample(30_000_000_000, 8 << 30)),
            containers: pods
                .iter()
                .enumerate()
                .flat_map(|(i, pod)| {
                    ["app", "sidecar"].map(|c| ContainerSample {
                        namespace: Cow::Borrowed("default"),
                        pod: Cow::Borrowed(pod.as_str()),
                        container: Cow::Borrowed(c),
                        sample: sample(1_000_000_007 * (i as u64 + 1), 12_533_760 + i as u64),
                    })
                })
                .collect(),
        };
        store.ingest(&NodeName::from("n1"), &scrape, ts);
    }
    let mut parts = stack::Parts::filled(inventory, store, Duration::from_secs(15));
    parts.health.started_ns = now;
    parts.shed = None;
    let stack = stack::build_router(parts, Registry::default());
    let server =
        crate::support::local_server(tmp.path(), stack.router, serve::Config::default()).await;
    let addr = server.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.run(shutdown.clone()));
    Cluster {
        addr,
        shutdown,
        _tmp: tmp,
    }
}

/// `creationTimestamp` is the response time, so two requests may straddle a second: compare
/// everything else, and that it is an RFC 3339 time.
fn without_creation(mut v: Value) -> Value {
    fn strip(meta: &mut Value) {
        if let Some(m) = meta.as_object_mut() {
            let t = m.remove("creationTimestamp");
            assert!(
                t.as_ref()
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with('Z'))
            );
        }
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip(&mut item["metadata"]);
        }
    } else if v.get("metadata").is_some_and(|m| m.get("name").is_some()) {
        strip(&mut v["metadata"]);
    }
    v
}

async fn get(client: &Client, addr: SocketAddr, path: &str, accept: &str) -> Reply {
    client.get_with(addr, path, &[("accept", accept)]).await
}

async fn same_as_json(client: &Client, addr: SocketAddr, path: &str, accept: &str) -> Value {
    let proto = get(client, addr, path, accept).await;
    let json = get(client, addr, path, "application/json").await;
    assert_eq!(proto.status, json.status, "{path}");
    assert_eq!(
        proto.headers[http::header::CONTENT_TYPE],
        PROTOBUF,
        "{path}"
    );
    let decoded = k8s_proto::to_json(&proto.bytes);
    let json: Value = serde_json::from_str(&json.body).unwrap();
    assert_eq!(
        without_creation(decoded.clone()),
        without_creation(json),
        "{path}"
    );
    decoded
}

#[tokio::test]
async fn protobuf_answers_match_json_over_h2_and_http1() {
    let cluster = start().await;
    for client in [Client::insecure(), Client::insecure().alpn(&[b"http/1.1"])] {
        // The HPA's request: a namespaced list with a label selector, protobuf preferred.
        let hpa = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb";
        let v = same_as_json(&client, cluster.addr, hpa, CLIENT_GO).await;
        assert_eq!(v["kind"], "PodMetricsList");
        assert_eq!(v["items"].as_array().unwrap().len(), PODS / 2);
        assert_eq!(v["items"][0]["containers"][1]["usage"]["swap"], "1Mi");
        // A protobuf-only client is served too, and the cluster-wide list (> 128 items,
        // streamed) decodes whole.
        for path in [
            "/apis/metrics.k8s.io/v1/pods",
            "/apis/metrics.k8s.io/v1/nodes",
            "/apis/metrics.k8s.io/v1/nodes/n1",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-007",
        ] {
            same_as_json(&client, cluster.addr, path, PROTOBUF).await;
        }
        let all = same_as_json(
            &client,
            cluster.addr,
            "/apis/metrics.k8s.io/v1/pods",
            CLIENT_GO,
        )
        .await;
        assert_eq!(all["items"].as_array().unwrap().len(), PODS);
        // The API's errors follow the negotiated serializer.
        for path in [
            "/apis/metrics.k8s.io/v1/nodes/missing",
            "/apis/metrics.k8s.io/v1/pods?watch=1",
            "/apis/metrics.k8s.io/v1/not-a-resource",
        ] {
            let proto = get(&client, cluster.addr, path, CLIENT_GO).await;
            let json = get(&client, cluster.addr, path, "application/json").await;
            assert!(proto.status.is_client_error(), "{path}");
            assert_eq!(proto.status, json.status, "{path}");
            assert_eq!(
                proto.headers[http::header::CONTENT_TYPE],
                PROTOBUF,
                "{path}"
            );
            let json: Value = serde_json::from_str(&json.body).unwrap();
            assert_eq!(k8s_proto::to_json(&proto.bytes), json, "{path}");
        }
        // `kubectl get --raw` and plain JSON clients still get JSON.
        let raw = get(
            &client,
            cluster.addr,
            "/apis/metrics.k8s.io/v1/nodes",
            "application/json, */*",
        )
        .await;
        assert_eq!(raw.status, StatusCode::OK);
        assert_eq!(raw.headers[http::header::CONTENT_TYPE], "application/json");
    }
}
