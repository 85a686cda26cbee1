//! Load shedding over real HTTPS: saturation answered with fast 429s while probes and
//! discovery stay up, autoscalers served while others flood, and the cold-store rule.
//!
//! Most tests assemble the server from its public parts (the same ones `run` wires) so that
//! a test filter can stand in for authentication before the admission filter (a user from
//! `x-test-user` / `x-test-group`) and make handling slow after it (`x-test-delay-ms`), and
//! so the test owns the store; the cold-store filter comes last, where authorization would
//! precede it. `run_wires_admission_from_the_flags` checks `run`'s own wiring.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::auth::UserInfo;
use apiserver::serve::{self, Filter, Verdict};
use apiserver::shed::class::Class;
use apiserver::shed::{self, Admission};
use apiserver::stack;
use futures::future::BoxFuture;
use http::StatusCode;
use http::request::Parts;
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord};
use scraper::point::{NodeName, PodKey};
use scraper::store::Store;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::support::{Client, Reply, start};

const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
const VPA: &str = "system:serviceaccount:kube-system:vpa-recommender";
const V1: &str = "/apis/metrics.k8s.io/v1";

/// Stands in for authentication: the user named by `x-test-user` (groups from
/// `x-test-group`), none without the header.
struct Identify;

impl Filter for Identify {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let header = |name: &str| {
                parts
                    .headers
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok().map(str::to_owned))
                    .collect::<Vec<_>>()
            };
            if let Some(name) = header("x-test-user").pop() {
                let user = UserInfo {
                    name,
                    uid: String::new(),
                    groups: header("x-test-group"),
                    extra: BTreeMap::new(),
                };
                parts.extensions.insert(user);
            }
            Verdict::Pass(None)
        })
    }
}

/// Makes a request slow after admission: it holds its seat for `x-test-delay-ms`.
struct Slow;

impl Filter for Slow {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let delay = parts
                .headers
                .get("x-test-delay-ms")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            if let Some(ms) = delay {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Verdict::Pass(None)
        })
    }
}

/// A server assembled as `run` assembles it ([`stack`]), with the test's store and filters.
struct Stack {
    addr: SocketAddr,
    store: Arc<Store>,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
    _tmp: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    async fn start(config: shed::Config) -> Stack {
        tls::provider::install_default();
        let tmp = tempfile::tempdir().unwrap();
        let inventory = Arc::new(Inventory::new());
        populate(&inventory);
        let store = Arc::new(Store::new(scraper::store::Config::new(
            Duration::from_secs(15),
        )));
        let stack = stack::build_router(
            stack::Parts {
                shed: Some(config),
                authentication: vec![Arc::new(Identify)],
                authorization: vec![Arc::new(Slow)],
                ..stack::Parts::filled(inventory, store.clone(), Duration::from_secs(15))
            },
            Registry::default(),
        );
        let admission = stack.admission.unwrap();
        let server =
            crate::support::local_server(tmp.path(), stack.router, serve::Config::default()).await;
        let addr = server.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(server.run(shutdown.clone()));
        Stack {
            addr,
            store,
            admission,
            shutdown,
            _tmp: tmp,
        }
    }

    /// GET as `user` (in `groups`), holding the seat `delay_ms` when given.
    async fn get(&self, path: &str, user: Option<(&str, &[&str])>, delay_ms: Option<u64>) -> Reply {
        let delay = delay_ms.map(|d| d.to_string());
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some((name, groups)) = user {
            headers.push(("x-test-user", name));
            headers.extend(groups.iter().map(|g| ("x-test-group", *g)));
        }
        if let Some(d) = &delay {
            headers.push(("x-test-delay-ms", d));
        }
        Client::insecure().get_with(self.addr, path, &headers).await
    }

    fn executing(&self, class: Class) -> usize {
        self.admission.level(class).unwrap().executing()
    }

    fn queued(&self, class: Class) -> usize {
        self.admission.level(class).unwrap().queued()
    }

    /// Waits until `class` has `executing` seats taken and `queued` waiters.
    async fn until(&self, class: Class, executing: usize, queued: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.executing(class) != executing || self.queued(class) != queued {
            assert!(
                Instant::now() < deadline,
                "{class:?}: {} executing, {} queued",
                self.executing(class),
                self.queued(class)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One node `n1` and pods `default/web-0..3` labelled `app=web` on it.
fn populate(inventory: &Inventory) {
    let labels = inventory.interner().labels([("app", "web")]);
    inventory.upsert_node(NodeRecord {
        name: NodeName::from("n1"),
        labels: labels.clone(),
        addresses: Vec::new(),
        kubelet_port: None,
        metrics_path: None,
    });
    for i in 0..4 {
        inventory.upsert_pod(PodRecord {
            usage: scraper::store::UsageLink::new(),
            key: PodKey::new("default", &format!("web-{i}")),
            labels: labels.clone(),
            node_name: Some(NodeName::from("n1")),
        });
    }
}

/// Two scrapes of `n1`, 15 s apart and ending now: usage for the node and its pods.
fn fill(store: &Store) {
    let pods: Vec<String> = (0..4).map(|i| format!("web-{i}")).collect();
    crate::support::ingest_two_scrapes(store, &NodeName::from("n1"), &pods);
}

fn json(reply: &Reply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

/// The reply is an overload or cold-store 429 in the exact wire form client-go needs.
fn assert_429(reply: &Reply, message: &str) -> u32 {
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.body
    );
    let retry: u32 = reply.headers[http::header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .expect("an integer Retry-After");
    assert!(retry >= 1);
    assert_eq!(
        reply.headers[http::header::CONTENT_TYPE],
        "application/json"
    );
    let body = json(reply);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["code"], 429);
    assert_eq!(body["message"], message);
    assert_eq!(body["details"]["retryAfterSeconds"], retry);
    for name in reply.headers.keys() {
        assert!(
            !name.as_str().starts_with("x-kubernetes-pf-"),
            "{name} must not be sent"
        );
    }
    retry
}

#[tokio::test]
async fn saturated_server_rejects_fast_and_keeps_probes_and_discovery() {
    // 4 seats: 1 for autoscalers, 3 for everyone else; 2 waiters per user, 1.5 s wait.
    let stack = Stack::start(shed::Config {
        max_in_flight: 4,
        autoscaler_percent: 25,
        queue_length_per_user: 2,
        queue_wait: Duration::from_millis(1500),
        ..shed::Config::default()
    })
    .await;
    fill(&stack.store);
    let stack = Arc::new(stack);
    let pods = format!("{V1}/pods");
    let mut slow = JoinSet::new();
    for _ in 0..3 {
        let (stack, pods) = (stack.clone(), pods.clone());
        slow.spawn(async move { stack.get(&pods, Some(("jane", &[])), Some(8_000)).await });
    }
    stack.until(Class::Default, 3, 0).await;

    // Bob's two requests wait; his third finds his queue full and is answered at once.
    let mut waiting = JoinSet::new();
    for _ in 0..2 {
        let (stack, pods) = (stack.clone(), pods.clone());
        waiting.spawn(async move {
            let started = Instant::now();
            (
                stack.get(&pods, Some(("bob", &[])), None).await,
                started.elapsed(),
            )
        });
    }
    stack.until(Class::Default, 3, 2).await;
    let started = Instant::now();
    let full = stack.get(&pods, Some(("bob", &[])), None).await;
    let queue_full_after = started.elapsed();
    assert_429(&full, shed::OVERLOADED);
    assert!(
        queue_full_after < Duration::from_millis(1200),
        "queue-full is immediate: {queue_full_after:?}"
    );

    // While every seat is held: probes, discovery, OpenAPI, /metrics and the aggregator.
    let aggregator: Option<(&str, &[&str])> = Some(("system:kube-aggregator", &[]));
    let outsider: Option<(&str, &[&str])> = Some(("jane", &[]));
    for (path, who) in [
        ("/readyz", None),
        ("/livez", None),
        ("/healthz", None),
        ("/apis/metrics.k8s.io/v1beta1", aggregator),
        ("/apis/metrics.k8s.io/v1", aggregator),
        ("/apis", aggregator),
        ("/apis/metrics.k8s.io/v1beta1", outsider),
        ("/openapi/v2", outsider),
        ("/version", outsider),
        ("/metrics", None),
    ] {
        let started = Instant::now();
        let r = stack.get(path, who, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
    }
    // system:masters is never shed, even on a limited path.
    let admin = stack
        .get(&pods, Some(("admin", &["system:masters"])), None)
        .await;
    assert_eq!(admin.status, StatusCode::OK, "{}", admin.body);
    assert_eq!(json(&admin)["items"].as_array().unwrap().len(), 4);

    // The waiters gave up after the bounded wait, with a 429 rather than a hang.
    while let Some(joined) = waiting.join_next().await {
        let (reply, waited) = joined.unwrap();
        assert_429(&reply, shed::OVERLOADED);
        assert!(
            waited >= Duration::from_millis(1400) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
    let metrics = stack.get("/metrics", None, None).await.body;
    for line in [
        "apiserver_flowcontrol_rejected_requests_total{class=\"default\",reason=\"queue-full\"} 1",
        "apiserver_flowcontrol_rejected_requests_total{class=\"default\",reason=\"time-out\"} 2",
        "apiserver_flowcontrol_current_executing_requests{class=\"default\"} 3",
        "apiserver_flowcontrol_nominal_limit_seats{class=\"autoscalers\"} 1",
        "apiserver_request_total{code=\"429\",component=\"apiserver\",dry_run=\"\",group=\"metrics.k8s.io\",resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }
    stack.shutdown.cancel();
    slow.abort_all();
}

#[tokio::test]
async fn autoscalers_get_through_while_a_vpa_and_humans_flood() {
    // 4 seats: 1 for autoscalers (HPA and VPA share it), 3 for everyone else.
    let stack = Stack::start(shed::Config {
        max_in_flight: 4,
        autoscaler_percent: 25,
        queue_length_per_user: 10,
        queue_wait: Duration::from_secs(3),
        ..shed::Config::default()
    })
    .await;
    fill(&stack.store);
    let stack = Arc::new(stack);
    let stop = CancellationToken::new();
    let mut flood = JoinSet::new();
    // A VPA and a human keep cluster-wide lists going, each held 700 ms, 6 at a time each.
    for (user, count) in [(VPA, 6), ("jane", 6)] {
        for _ in 0..count {
            let (stack, stop) = (stack.clone(), stop.clone());
            flood.spawn(async move {
                let mut codes = Vec::new();
                while !stop.is_cancelled() {
                    let r = stack
                        .get(&format!("{V1}/pods"), Some((user, &[])), Some(700))
                        .await;
                    codes.push((user, r.status));
                }
                codes
            });
        }
    }
    stack.until(Class::Autoscalers, 1, 5).await;

    // The HPA's namespaced, label-selected lists: each waits at most one VPA request.
    for _ in 0..4 {
        let started = Instant::now();
        let r = stack
            .get(
                &format!("{V1}/namespaces/default/pods?labelSelector=app%3Dweb"),
                Some((HPA, &["system:serviceaccounts"])),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(json(&r)["items"].as_array().unwrap().len(), 4);
        let took = started.elapsed();
        assert!(took < Duration::from_millis(2500), "HPA waited {took:?}");
    }
    stop.cancel();
    let mut codes = Vec::new();
    while let Some(joined) = flood.join_next().await {
        codes.extend(joined.unwrap());
    }
    // The floods were served too, and the human's overflow was shed, not queued forever.
    assert!(codes.contains(&(VPA, StatusCode::OK)));
    assert!(codes.contains(&("jane", StatusCode::OK)));
    assert!(
        codes
            .iter()
            .all(|(_, c)| matches!(*c, StatusCode::OK | StatusCode::TOO_MANY_REQUESTS)),
        "{codes:?}"
    );
}

#[tokio::test]
async fn a_cold_store_rejects_cluster_wide_lists_and_serves_the_rest() {
    let stack = Stack::start(shed::Config::default()).await;
    let jane: Option<(&str, &[&str])> = Some(("jane", &[]));
    for path in [
        format!("{V1}/pods"),
        format!("{V1}/nodes"),
        "/apis/metrics.k8s.io/v1beta1/pods".to_owned(),
    ] {
        let started = Instant::now();
        let r = stack.get(&path, jane, None).await;
        // t < 12 s since start: e^(0.06 t) < 2.
        assert_eq!(assert_429(&r, shed::INITIALIZING), 1, "{path}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    // Namespaced lists and GETs are served from what exists (nothing yet): no hang.
    let r = stack
        .get(&format!("{V1}/namespaces/default/pods"), jane, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["items"], serde_json::json!([]));
    let r = stack
        .get(&format!("{V1}/namespaces/default/pods/web-0"), jane, None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = stack.get("/apis/metrics.k8s.io/v1", jane, None).await;
    assert_eq!(r.status, StatusCode::OK);

    // Once the store has node and pod usage, cluster-wide lists are served.
    fill(&stack.store);
    let r = stack.get(&format!("{V1}/pods"), jane, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["items"].as_array().unwrap().len(), 4);
    let r = stack.get(&format!("{V1}/nodes"), jane, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["items"][0]["metadata"]["name"], "n1");
    let metrics = stack.get("/metrics", None, None).await.body;
    let line = "apiserver_flowcontrol_rejected_requests_total{class=\"default\",reason=\"storage-initializing\"} 3";
    assert!(metrics.contains(line), "{metrics}");
}

#[tokio::test]
async fn run_wires_admission_from_the_settings() {
    // No kubelets: the store stays cold for the whole test.
    let server = start(|s| s.shed.max_in_flight = 10).await;
    let client = Client::insecure();
    let r = client.get(server.addr, &format!("{V1}/pods")).await;
    let first = assert_429(&r, shed::INITIALIZING);
    assert!(first <= 2);
    let r = client.get(server.addr, &format!("{V1}/nodes")).await;
    assert_429(&r, shed::INITIALIZING);
    let r = client
        .get(server.addr, &format!("{V1}/namespaces/default/pods"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let metrics = client.get(server.addr, "/metrics").await.body;
    for line in [
        "apiserver_flowcontrol_rejected_requests_total{class=\"default\",reason=\"storage-initializing\"} 2",
        "apiserver_flowcontrol_nominal_limit_seats{class=\"autoscalers\"} 2",
        "apiserver_flowcontrol_nominal_limit_seats{class=\"default\"} 8",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }
    // The Retry-After follows e^(0.06 t): 2 s once 12 s have passed since start.
    let at_12s = server.started + Duration::from_millis(12_300);
    tokio::time::sleep_until(at_12s.into()).await;
    let r = client.get(server.addr, &format!("{V1}/pods")).await;
    assert_eq!(assert_429(&r, shed::INITIALIZING), 2);
    server.shutdown.cancel();

    // A zero cold-store window turns the rule off.
    let server = start(|s| s.shed.cold_store_window = Duration::ZERO).await;
    let r = client.get(server.addr, &format!("{V1}/pods")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    server.shutdown.cancel();
}

#[test]
fn shedding_flags_parse_and_validate() {
    use apiserver::cli::Flags;
    use clap::Parser;
    let parse = |args: &[&str]| {
        let mut argv = vec!["metrics-server"];
        argv.extend_from_slice(args);
        Flags::try_parse_from(argv).unwrap()
    };
    let defaults = parse(&[]).settings().unwrap().shed;
    assert_eq!(defaults.max_in_flight, 400);
    assert_eq!(defaults.limits().map(|l| l.seats), [100, 300]);
    assert_eq!(defaults.queue_wait, Duration::from_secs(3));
    assert_eq!(defaults.queue_length_per_user, 10);
    assert_eq!(
        defaults.cold_store_window,
        Duration::from_secs(120),
        "2 x the 60s default resolution"
    );
    let c = parse(&[
        "--metric-resolution=20s",
        "--autoscaler-inflight-percent=50",
        "--request-queue-wait=500ms",
        "--request-queue-length-per-user=0",
    ]);
    let s = c.settings().unwrap().shed;
    assert_eq!(s.limits().map(|l| l.seats), [200, 200]);
    assert_eq!(s.queue_wait, Duration::from_millis(500));
    assert_eq!(s.queue_length_per_user, 0);
    assert_eq!(s.cold_store_window, Duration::from_secs(60), "at least 1m");
    for bad in [
        "--autoscaler-inflight-percent=0",
        "--autoscaler-inflight-percent=100",
    ] {
        let err = parse(&[bad]).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--autoscaler-inflight-percent must be between 1 and 99"
        );
    }
}
