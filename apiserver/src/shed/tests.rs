use std::borrow::Cow;
use std::collections::BTreeMap;

use http::Method;
use http_body_util::BodyExt;
use scraper::point::{ContainerSample, NodeName, NodeScrape, Sample};

use super::class::{Class, class_of, exempt_path, shape};
use super::queue::{Level, Limits, Rejection};
use super::retry::{Tracker, cold_store_seconds};
use super::*;

const SECOND: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * SECOND;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.to_owned(),
        uid: String::new(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        extra: BTreeMap::new(),
    }
}

const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
const VPA: &str = "system:serviceaccount:kube-system:vpa-recommender";

#[test]
fn exempt_paths_and_their_sub_paths() {
    for path in [
        "/apis",
        "/apis/",
        "/apis/metrics.k8s.io",
        "/apis/metrics.k8s.io/",
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/metrics.k8s.io/v1",
        "/apis/metrics.k8s.io/v1/",
        "/openapi/v2",
        "/openapi/v3/apis/metrics.k8s.io/v1",
        "/version",
        "/healthz",
        "/livez/ping",
        "/readyz",
        "/readyz/metric-storage-ready",
        "/metrics",
    ] {
        assert!(exempt_path(path), "{path}");
    }
    for path in [
        "/",
        "/apis/metrics.k8s.io/v1/nodes",
        "/apis/metrics.k8s.io/v1beta1/pods",
        "/apis/metrics.k8s.io/v2",
        "/apis/apps/v1",
        "/healthzx",
        "/readyzz/x",
        "/metrics/extra",
        "/openapix",
    ] {
        assert!(!exempt_path(path), "{path}");
    }
}

#[test]
fn users_fall_into_classes() {
    assert_eq!(
        class_of(Some(&user("admin", &["system:masters"]))),
        Class::Exempt
    );
    assert_eq!(
        class_of(Some(&user("system:kube-aggregator", &[]))),
        Class::Exempt
    );
    assert_eq!(
        class_of(Some(&user("system:aggregator", &[]))),
        Class::Exempt
    );
    for autoscaler in [
        HPA,
        VPA,
        "system:kube-controller-manager",
        "system:serviceaccount:kube-system:anything",
    ] {
        assert_eq!(
            class_of(Some(&user(autoscaler, &["system:authenticated"]))),
            Class::Autoscalers,
            "{autoscaler}"
        );
    }
    for other in [
        "jane",
        "system:serviceaccount:default:vpa-recommender",
        "system:serviceaccount:kube-systemx:hpa",
        "system:anonymous",
    ] {
        assert_eq!(
            class_of(Some(&user(other, &["system:authenticated"]))),
            Class::Default
        );
    }
    assert_eq!(class_of(None), Class::Default);
}

#[test]
fn request_shapes() {
    let jane = user("jane", &[]);
    let s = |path: &str, query: Option<&str>| shape(&Method::GET, path, query, Some(&jane));
    let v1 = "/apis/metrics.k8s.io/v1";
    let wide = s(&format!("{v1}/pods"), None);
    assert!(wide.cluster_wide_list && !wide.hpa_shaped);
    assert_eq!(wide.class, Class::Default);
    assert!(s("/apis/metrics.k8s.io/v1beta1/nodes/", None).cluster_wide_list);
    assert!(!s(&format!("{v1}/nodes"), Some("watch=true")).cluster_wide_list);
    assert!(!s(&format!("{v1}/nodes/n1"), None).cluster_wide_list);
    let ns = s(&format!("{v1}/namespaces/default/pods"), None);
    assert!(!ns.cluster_wide_list && !ns.hpa_shaped);
    let hpa = s(
        &format!("{v1}/namespaces/default/pods"),
        Some("labelSelector=app%3Dweb"),
    );
    assert!(hpa.hpa_shaped && !hpa.cluster_wide_list);
    assert!(
        !s(
            &format!("{v1}/namespaces/default/pods"),
            Some("labelSelector=")
        )
        .hpa_shaped
    );
    assert!(!s(&format!("{v1}/pods"), Some("labelSelector=app%3Dweb")).hpa_shaped);
    // Exempt paths stay exempt whoever asks; exempt users are exempt on every path.
    assert_eq!(s(v1, None).class, Class::Exempt);
    let master = user("admin", &["system:masters"]);
    let m = shape(&Method::GET, &format!("{v1}/pods"), None, Some(&master));
    assert_eq!(m.class, Class::Exempt);
    assert!(!m.cluster_wide_list);
}

#[test]
fn seats_split_between_classes() {
    let limits = |max: usize, percent: u8| {
        Config {
            max_in_flight: max,
            autoscaler_percent: percent,
            ..Config::default()
        }
        .limits()
        .map(|l| l.seats)
    };
    assert_eq!(limits(400, 25), [100, 300]);
    assert_eq!(limits(4, 25), [1, 3]);
    assert_eq!(limits(10, 50), [5, 5]);
    assert_eq!(limits(0, 25), [0, 0], "0: unlimited");
    let l = Config::default().limits()[1];
    assert_eq!(l.per_flow, 10);
    assert_eq!(l.wait, Duration::from_secs(3));
}

#[test]
fn cold_store_curve_is_keps() {
    let at = |s: u64| cold_store_seconds(Duration::from_secs(s));
    assert_eq!(at(0), 1);
    assert_eq!(at(11), 1);
    assert_eq!(at(12), 2);
    assert_eq!(at(30), 6);
    assert_eq!(at(50), 20);
    assert_eq!(at(57), 30);
    assert_eq!(at(3600), 30);
}

#[tokio::test(start_paused = true)]
async fn retry_after_doubles_under_drops_and_decays_when_quiet() {
    let t = Tracker::new(Duration::from_secs(8), Instant::now());
    assert_eq!(t.current(Instant::now()), 1);
    // A flood: 10 drops a second.
    let mut seen = Vec::new();
    for _ in 0..12 {
        for _ in 0..10 {
            t.drop_one(Instant::now());
        }
        seen.push(t.current(Instant::now()));
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(seen.first(), Some(&1), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&8), "capped: {seen:?}");
    assert!(seen.contains(&2) && seen.contains(&4), "doubles: {seen:?}");
    // Quiet: the last 8 s still hold the flood, then one second less per quiet second.
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(t.current(Instant::now()), 8);
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(t.current(Instant::now()), 2);
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(t.current(Instant::now()), 1);
    // A single drop now does not push it up again.
    assert_eq!(t.drop_one(Instant::now()), 1);
}

fn level(seats: usize, per_flow: usize, total: usize, wait_ms: u64) -> Arc<Level> {
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    Level::new(
        Limits {
            seats,
            per_flow,
            total,
            wait: Duration::from_millis(wait_ms),
        },
        metrics.class(Class::Default),
    )
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_round_robin_across_users() {
    let level = level(1, 10, 40, 10_000);
    let first = level.acquire("vpa").await.unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    // The flooder queues 4, then the HPA queues 1.
    for (i, flow) in ["vpa", "vpa", "vpa", "vpa", "hpa"].into_iter().enumerate() {
        let (level, order) = (level.clone(), order.clone());
        tasks.spawn(async move {
            let seat = level.acquire(flow).await.unwrap();
            order.lock().push(format!("{flow}{i}"));
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(seat);
        });
        tokio::task::yield_now().await;
    }
    assert_eq!(level.queued(), 5);
    drop(first);
    while tasks.join_next().await.is_some() {}
    let order = order.lock().clone();
    // vpa0 was first in line; the HPA goes next, not after the whole flood.
    assert_eq!(order, ["vpa0", "hpa4", "vpa1", "vpa2", "vpa3"]);
    assert_eq!(level.executing(), 0);
    assert_eq!(level.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn full_queue_rejects_at_once_and_wait_is_bounded() {
    let level = level(1, 2, 40, 500);
    let _held = level.acquire("a").await.unwrap();
    let started = Instant::now();
    let (w1, w2, w3) = tokio::join!(level.acquire("a"), level.acquire("a"), async {
        tokio::task::yield_now().await;
        level.acquire("a").await
    });
    // The third found its user's queue full; the first two waited exactly the limit.
    assert_eq!(w3.unwrap_err(), Rejection::QueueFull);
    assert_eq!(w1.unwrap_err(), Rejection::TimeOut);
    assert_eq!(w2.unwrap_err(), Rejection::TimeOut);
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(level.queued(), 0);
    // No queueing configured: max-in-flight's immediate rejection.
    let strict = self::level(1, 0, 0, 500);
    let _held = strict.acquire("a").await.unwrap();
    assert_eq!(
        strict.acquire("b").await.unwrap_err(),
        Rejection::ConcurrencyLimit
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_class_pushes_out_the_longest_flow() {
    let level = level(1, 4, 4, 10_000);
    let _held = level.acquire("flood").await.unwrap();
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let level = level.clone();
        flood.spawn(async move { level.acquire("flood").await.map(drop) });
        tokio::task::yield_now().await;
    }
    assert_eq!(level.queued(), 4);
    let hpa = {
        let level = level.clone();
        tokio::spawn(async move { level.acquire("hpa").await.map(drop) })
    };
    tokio::task::yield_now().await;
    // One flooder was pushed out (queue-full) to make room for the HPA.
    let pushed = flood.join_next().await.unwrap().unwrap();
    assert_eq!(pushed, Err(Rejection::QueueFull));
    assert_eq!(level.queued(), 4);
    drop(_held);
    assert_eq!(hpa.await.unwrap(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_gives_its_place_and_seat_back() {
    let level = level(1, 10, 40, 10_000);
    let held = level.acquire("a").await.unwrap();
    let waiter = {
        let level = level.clone();
        tokio::spawn(async move {
            let _seat = level.acquire("b").await;
            std::future::pending::<()>().await;
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(level.queued(), 1);
    // Hand the seat to the waiter, then drop the waiter (a client gone away).
    drop(held);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(level.executing(), 0, "the seat came back");
    // And a waiter dropped while still queued leaves the queue.
    let held = level.acquire("a").await.unwrap();
    let waiter = {
        let level = level.clone();
        tokio::spawn(async move { level.acquire("b").await.map(drop) })
    };
    tokio::task::yield_now().await;
    assert_eq!(level.queued(), 1);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(level.queued(), 0);
    drop(held);
    assert_eq!(level.executing(), 0);
}

/// Two scrapes 15 s apart of one node with one pod: usage for both.
fn fill(store: &Store) {
    let node = NodeName::from("n1");
    for round in 0..2_i64 {
        let ts = T0 + round * 15 * SECOND;
        let cpu = u64::try_from(round + 1).unwrap() * 1_000_000_000;
        let sample = Sample {
            timestamp_ns: ts,
            cpu_usage_ns_total: Some(cpu),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(1 << 20),
            start_time_ns: Some(T0 - 3600 * SECOND),
            swap_bytes: None,
        };
        let scrape = NodeScrape {
            node: Some(sample),
            containers: vec![ContainerSample {
                namespace: Cow::Borrowed("default"),
                pod: Cow::Borrowed("web"),
                container: Cow::Borrowed("app"),
                sample,
            }],
        };
        store.ingest(&node, &scrape, ts);
    }
}

/// Admission over an empty store whose scrape loop finished its first round.
fn admission(config: Config) -> (Admission, Arc<Store>, Registry) {
    admission_with(config, Progress::completed())
}

fn admission_with(config: Config, progress: Progress) -> (Admission, Arc<Store>, Registry) {
    let mut registry = Registry::default();
    let store = Arc::new(Store::new(scraper::store::Config::new(
        Duration::from_secs(15),
    )));
    let admission = Admission::new(config, store.clone(), Arc::new(progress), &mut registry)
        .with_clock(|| T0 + 15 * SECOND);
    (admission, store, registry)
}

async fn status_json(
    response: http::Response<crate::body::Body>,
) -> (u16, String, serde_json::Value) {
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, retry, serde_json::from_slice(&body).unwrap())
}

#[tokio::test(start_paused = true)]
async fn cold_store_rejects_cluster_wide_lists_on_keps_curve_until_ready() {
    let (admission, store, _registry) = admission(Config::default());
    let cold = admission.cold_store();
    let jane = user("jane", &[]);
    let get = |path: &str| shape(&Method::GET, path, None, Some(&jane));
    let pods = get("/apis/metrics.k8s.io/v1/pods");
    let nodes = get("/apis/metrics.k8s.io/v1beta1/nodes");
    let namespaced = get("/apis/metrics.k8s.io/v1/namespaces/default/pods");
    let one = get("/apis/metrics.k8s.io/v1/nodes/n1");

    let (code, retry, body) = status_json(cold.reject(pods, "jane").unwrap()).await;
    assert_eq!((code, retry.as_str()), (429, "1"));
    assert_eq!(body["message"], "storage is (re)initializing");
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["details"]["retryAfterSeconds"], 1);
    assert!(cold.reject(namespaced, "jane").is_none());
    assert!(cold.reject(one, "jane").is_none());

    tokio::time::advance(Duration::from_secs(30)).await;
    let (_, retry, body) = status_json(cold.reject(nodes, "jane").unwrap()).await;
    assert_eq!(retry, "6", "e^(0.06*30) = 6.05");
    assert_eq!(body["details"]["retryAfterSeconds"], 6);

    // Admission itself is not about the store.
    assert!(admission.admit(pods, "jane").await.is_ok());
    fill(&store);
    assert!(cold.reject(pods, "jane").is_none());
    assert!(cold.reject(nodes, "jane").is_none());
}

#[tokio::test(start_paused = true)]
async fn cold_store_gives_up_after_its_window() {
    let (admission, _store, _registry) = admission(Config {
        cold_store_window: Duration::from_secs(20),
        ..Config::default()
    });
    let cold = admission.cold_store();
    let pods = shape(&Method::GET, "/apis/metrics.k8s.io/v1/pods", None, None);
    assert!(cold.reject(pods, "x").is_some());
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(
        cold.reject(pods, "x").is_none(),
        "served (empty) after the window"
    );
    // Zero: never.
    let (never, _, _) = self::admission(Config {
        cold_store_window: Duration::ZERO,
        ..Config::default()
    });
    assert!(never.cold_store().reject(pods, "x").is_none());
}

#[tokio::test(start_paused = true)]
async fn data_before_the_first_round_is_complete_is_still_cold_then_counted_as_incomplete() {
    // A replica that has scraped some nodes but not all: the store has node and pod usage,
    // but a cluster-wide list would be partial.
    let (admission, store, registry) = admission_with(
        Config {
            cold_store_window: Duration::from_secs(20),
            ..Config::default()
        },
        Progress::default(),
    );
    fill(&store);
    let cold = admission.cold_store();
    let pods = shape(&Method::GET, "/apis/metrics.k8s.io/v1/pods", None, None);
    let (code, retry, _) = status_json(cold.reject(pods, "x").unwrap()).await;
    assert_eq!((code, retry.as_str()), (429, "1"));
    let incomplete = |registry: &Registry| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text.lines()
            .find(|l| l.starts_with("apiserver_storage_incomplete_lists_total{class=\"default\"}"))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
    };
    assert_eq!(incomplete(&registry), None);
    // Past the window it is served, and counted as incomplete every time.
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(cold.reject(pods, "x").is_none());
    assert!(cold.reject(pods, "x").is_none());
    assert_eq!(incomplete(&registry).as_deref(), Some("2"));
}

#[tokio::test(start_paused = true)]
async fn hpa_shaped_rejections_keep_retry_after_short() {
    let (admission, store, registry) = admission(Config {
        max_in_flight: 2,
        autoscaler_percent: 50,
        queue_length_per_user: 0,
        ..Config::default()
    });
    fill(&store);
    let hpa_user = user(HPA, &[]);
    let list = |query: Option<&str>| {
        shape(
            &Method::GET,
            "/apis/metrics.k8s.io/v1/namespaces/default/pods",
            query,
            Some(&hpa_user),
        )
    };
    let hpa = list(Some("labelSelector=app%3Dweb"));
    let plain = list(None);
    assert_eq!(hpa.class, Class::Autoscalers);
    let _seat = admission.admit(hpa, HPA).await.unwrap();
    // Keep dropping for a while: the class's Retry-After climbs, the HPA's stays at 2.
    let mut plain_max = 0;
    for _ in 0..20 {
        for _ in 0..20 {
            let (_, retry, _) = status_json(admission.admit(hpa, HPA).await.err().unwrap()).await;
            assert!(retry.parse::<u32>().unwrap() <= 2, "{retry}");
        }
        let (_, retry, _) = status_json(admission.admit(plain, HPA).await.err().unwrap()).await;
        plain_max = plain_max.max(retry.parse::<u32>().unwrap());
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert!(plain_max >= 8, "the adaptive value climbed: {plain_max}");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            "apiserver_flowcontrol_rejected_requests_total{class=\"autoscalers\",reason=\"concurrency-limit\"} 420\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "apiserver_flowcontrol_current_executing_requests{class=\"autoscalers\"} 1\n"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn exempt_requests_pass_even_with_every_seat_taken() {
    let (admission, store, registry) = admission(Config {
        max_in_flight: 2,
        queue_length_per_user: 0,
        ..Config::default()
    });
    fill(&store);
    let jane = user("jane", &[]);
    let list = shape(
        &Method::GET,
        "/apis/metrics.k8s.io/v1/pods",
        None,
        Some(&jane),
    );
    let _a = admission.admit(list, "jane").await.unwrap();
    assert!(admission.admit(list, "jane").await.is_err());
    let master = user("admin", &["system:masters"]);
    for (path, who) in [
        ("/readyz", Some(&jane)),
        ("/apis/metrics.k8s.io/v1beta1", Some(&jane)),
        ("/apis/metrics.k8s.io/v1/pods", Some(&master)),
    ] {
        let s = shape(&Method::GET, path, None, who);
        let guard = admission.admit(s, "x").await.unwrap();
        assert!(guard.is_some());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("apiserver_flowcontrol_current_executing_requests{class=\"exempt\"} 1\n"),
            "{text}"
        );
    }
}
