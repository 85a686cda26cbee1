use super::*;
use http::header;
use http_body_util::BodyExt;
use parking_lot::Mutex;

#[derive(Default)]
struct Fake {
    synced: Mutex<bool>,
    storage: Mutex<Readiness>,
    first_round: Mutex<bool>,
    tick: Mutex<Option<i64>>,
}

impl Signals for Fake {
    fn informers_synced(&self) -> bool {
        *self.synced.lock()
    }
    fn storage(&self, _now_ns: i64) -> Readiness {
        *self.storage.lock()
    }
    fn first_round_complete(&self) -> bool {
        *self.first_round.lock()
    }
    fn last_tick_start_ns(&self) -> Option<i64> {
        *self.tick.lock()
    }
}

const S: i64 = 1_000_000_000;
const START: i64 = 1_700_000_000 * S;

fn health(timeout: Option<u64>) -> (Health, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let config = Config {
        resolution: Duration::from_secs(15),
        readiness_timeout: timeout.map(Duration::from_secs),
        started_ns: START,
    };
    (Health::new(config, fake.clone()), fake)
}

fn healthy(fake: &Fake) {
    *fake.synced.lock() = true;
    *fake.first_round.lock() = true;
    *fake.storage.lock() = Readiness {
        nodes: true,
        pods: true,
    };
    *fake.tick.lock() = Some(START);
}

fn get(h: &Health, path: &str, query: Option<&str>, now: i64) -> (u16, String) {
    let r = h.handle(path, query, now).expect("a health path");
    let status = r.status().as_u16();
    let body = futures::FutureExt::now_or_never(r.into_body().collect())
        .expect("a buffered body")
        .unwrap()
        .to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[test]
fn verbose_bodies_match_metrics_server_e2e() {
    let (h, fake) = health(None);
    healthy(&fake);
    let now = START + S;
    assert_eq!(
        get(&h, "/readyz", Some("verbose"), now),
        (
            200,
            "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
             [+]poststarthook/storage-object-count-tracker-hook ok\n\
             [+]metric-storage-ready ok\n[+]metric-informer-sync ok\n\
             [+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check passed\n"
                .to_owned()
        )
    );
    assert_eq!(
        get(&h, "/livez", Some("verbose"), now),
        (
            200,
            "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
             [+]poststarthook/storage-object-count-tracker-hook ok\n\
             [+]metric-collection-timely ok\n[+]metadata-informer-sync ok\n\
             livez check passed\n"
                .to_owned()
        )
    );
    assert_eq!(
        get(&h, "/healthz", Some("verbose=1"), now),
        (
            200,
            "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
             [+]poststarthook/storage-object-count-tracker-hook ok\n\
             [+]metadata-informer-sync ok\nhealthz check passed\n"
                .to_owned()
        )
    );
    for path in ["/readyz", "/livez", "/healthz"] {
        assert_eq!(get(&h, path, None, now), (200, "ok".to_owned()));
    }
}

#[test]
fn failure_withholds_the_reason_and_is_always_verbose() {
    let (h, fake) = health(None);
    *fake.synced.lock() = true;
    let (status, body) = get(&h, "/readyz", None, START);
    assert_eq!(status, 500);
    assert_eq!(
        body,
        "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
         [+]poststarthook/storage-object-count-tracker-hook ok\n\
         [-]metric-storage-ready failed: reason withheld\n[+]metric-informer-sync ok\n\
         [+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check failed\n"
    );
    // Single checks show the reason.
    assert_eq!(
        get(&h, "/readyz/metric-storage-ready", None, START),
        (
            500,
            "internal server error: no metrics to serve\n".to_owned()
        )
    );
    assert_eq!(get(&h, "/readyz/ping", None, START), (200, "ok".to_owned()));
    // livez does not look at the store.
    assert_eq!(get(&h, "/livez", None, START).0, 200);
}

#[test]
fn storage_needs_both_nodes_and_pods() {
    let (h, fake) = health(None);
    healthy(&fake);
    *fake.storage.lock() = Readiness {
        nodes: true,
        pods: false,
    };
    assert_eq!(get(&h, "/readyz/metric-storage-ready", None, START).0, 500);
    *fake.storage.lock() = Readiness {
        nodes: false,
        pods: true,
    };
    assert_eq!(get(&h, "/readyz/metric-storage-ready", None, START).0, 500);
    *fake.storage.lock() = Readiness {
        nodes: true,
        pods: true,
    };
    assert_eq!(get(&h, "/readyz/metric-storage-ready", None, START).0, 200);
}

#[test]
fn storage_waits_for_the_first_round_even_with_some_data() {
    // A new replica with part of the cluster scraped takes no traffic yet.
    let (h, fake) = health(Some(30));
    healthy(&fake);
    *fake.first_round.lock() = false;
    assert_eq!(
        get(&h, "/readyz/metric-storage-ready", None, START),
        (
            500,
            "internal server error: the first scrape round is not complete: metrics of some \
             nodes are missing\n"
                .to_owned()
        )
    );
    assert_eq!(get(&h, "/readyz", None, START + S).0, 500);
    *fake.first_round.lock() = true;
    assert_eq!(get(&h, "/readyz", None, START + S), (200, "ok".to_owned()));
    // The start-up timeout still lets a replica whose round never completes in.
    *fake.first_round.lock() = false;
    assert_eq!(get(&h, "/readyz", None, START + 30 * S).0, 200);
}

#[test]
fn startup_timeout_lets_node_metrics_alone_in_but_never_no_metrics() {
    let (h, fake) = health(Some(30));
    *fake.synced.lock() = true;
    *fake.first_round.lock() = true;
    // Every scrape failing (a wrong kubelet CA, no RBAC on nodes/metrics): never ready, so a
    // rollout with that setting stalls instead of replacing a working replica.
    assert_eq!(get(&h, "/readyz", None, START + 29 * S).0, 500);
    assert_eq!(
        get(&h, "/readyz/metric-storage-ready", None, START + 3600 * S),
        (
            500,
            "internal server error: no metrics to serve\n".to_owned()
        )
    );
    // Nodes answer but no pod has usage (a cluster with no running pods): ready once the
    // timeout has passed, not before.
    *fake.storage.lock() = Readiness {
        nodes: true,
        pods: false,
    };
    assert_eq!(get(&h, "/readyz", None, START + 29 * S).0, 500);
    assert_eq!(
        get(&h, "/readyz", None, START + 30 * S),
        (200, "ok".to_owned())
    );
    // Not for good: once no node has metrics, the replica leaves the Service again.
    *fake.storage.lock() = Readiness::default();
    assert_eq!(get(&h, "/readyz", None, START + 3600 * S).0, 500);
    // Without a timeout, node metrics alone never do.
    let (h, fake) = health(None);
    *fake.synced.lock() = true;
    *fake.first_round.lock() = true;
    *fake.storage.lock() = Readiness {
        nodes: true,
        pods: false,
    };
    assert_eq!(get(&h, "/readyz", None, START + 3600 * S).0, 500);
}

#[test]
fn collection_timely_allows_one_and_a_half_resolutions() {
    let (h, fake) = health(None);
    healthy(&fake);
    // Before the first tick: passes.
    *fake.tick.lock() = None;
    assert_eq!(get(&h, "/livez", None, START + 3600 * S).0, 200);
    *fake.tick.lock() = Some(START);
    // 15s resolution: 22.5s is the limit.
    assert_eq!(get(&h, "/livez", None, START + 22_500_000_000).0, 200);
    let (status, body) = get(&h, "/livez", None, START + 22_500_000_001);
    assert_eq!(status, 500);
    assert!(body.contains("[-]metric-collection-timely failed: reason withheld\n"));
    assert!(body.ends_with("livez check failed\n"));
    // readyz does not include it.
    assert_eq!(get(&h, "/readyz", None, START + 60 * S).0, 200);
}

#[test]
fn informer_sync_gates_all_three() {
    let (h, fake) = health(None);
    healthy(&fake);
    *fake.synced.lock() = false;
    for path in ["/livez", "/readyz", "/healthz"] {
        let (status, body) = get(&h, path, None, START);
        assert_eq!(status, 500, "{path}");
        assert!(body.contains("[-]metadata-informer-sync failed"), "{path}");
    }
    let (_, body) = get(&h, "/readyz", None, START);
    assert!(body.contains("[-]metric-informer-sync failed"));
}

#[test]
fn shutdown_fails_readyz_only() {
    let (h, fake) = health(None);
    healthy(&fake);
    h.begin_shutdown();
    let (status, body) = get(&h, "/readyz", None, START);
    assert_eq!(status, 500);
    assert!(body.contains("[-]shutdown failed: reason withheld\nreadyz check failed\n"));
    assert_eq!(get(&h, "/livez", None, START).0, 200);
    assert_eq!(get(&h, "/healthz", None, START).0, 200);
}

#[test]
fn exclude_skips_a_check_and_warns_about_unknown_names() {
    let (h, fake) = health(None);
    healthy(&fake);
    *fake.storage.lock() = Readiness::default();
    let (status, body) = get(
        &h,
        "/readyz",
        Some(
            "verbose&exclude=metric-storage-ready&exclude=nope&exclude=poststarthook%2Fmax-in-flight-filter",
        ),
        START,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]metric-storage-ready excluded: ok\n"));
    assert!(body.contains("[+]poststarthook/max-in-flight-filter excluded: ok\n"));
    assert!(body.ends_with(
        "warn: some health checks cannot be excluded: no matches for \"nope\"\n\
         readyz check passed\n"
    ));
}

#[test]
fn other_paths_are_not_health() {
    let (h, _) = health(None);
    for path in [
        "/readyzz",
        "/readyz/nope",
        "/livez/metric-storage-ready",
        "/metrics",
        "/",
    ] {
        assert!(h.handle(path, None, START).is_none(), "{path}");
    }
    assert!(
        h.handle("/livez/metric-collection-timely", None, START)
            .is_some()
    );
}

#[test]
fn plain_text_headers() {
    let (h, _) = health(None);
    let r = h.handle("/livez/ping", None, START).unwrap();
    assert_eq!(
        r.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
}

fn slis_text(h: &Health) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(h.sli_collector()));
    crate::selfmetrics::encode(&registry, crate::selfmetrics::Format::Prometheus).unwrap()
}

#[test]
fn slis_record_what_the_root_endpoints_ran() {
    let (h, fake) = health(None);
    // Nothing probed yet: no family at all, as an empty Go vector gathers nothing.
    assert_eq!(slis_text(&h), "");

    // A failing readiness probe, then a passing one, with `shutdown` excluded from the
    // second; a single check's sub-path records nothing.
    *fake.synced.lock() = true;
    assert_eq!(get(&h, "/readyz", None, START).0, 500);
    healthy(&fake);
    assert_eq!(
        get(&h, "/readyz", Some("exclude=shutdown"), START + S).0,
        200
    );
    assert_eq!(get(&h, "/livez/ping", None, START + S).0, 200);
    assert_eq!(
        get(&h, "/livez/metric-collection-timely", None, START + S).0,
        200
    );

    assert_eq!(
        slis_text(&h),
        "# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.\n\
         # TYPE kubernetes_healthcheck gauge\n\
         kubernetes_healthcheck{name=\"log\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"metadata-informer-sync\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"metric-informer-sync\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"metric-storage-ready\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"ping\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"poststarthook/max-in-flight-filter\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"poststarthook/storage-object-count-tracker-hook\",type=\"readyz\"} 1\n\
         kubernetes_healthcheck{name=\"shutdown\",type=\"readyz\"} 1\n\
         # HELP kubernetes_healthchecks_total [STABLE] This metric records the results of all healthcheck.\n\
         # TYPE kubernetes_healthchecks_total counter\n\
         kubernetes_healthchecks_total{name=\"log\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"metadata-informer-sync\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"metric-informer-sync\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"metric-storage-ready\",status=\"error\",type=\"readyz\"} 1\n\
         kubernetes_healthchecks_total{name=\"metric-storage-ready\",status=\"success\",type=\"readyz\"} 1\n\
         kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"poststarthook/max-in-flight-filter\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"poststarthook/storage-object-count-tracker-hook\",status=\"success\",type=\"readyz\"} 2\n\
         kubernetes_healthchecks_total{name=\"shutdown\",status=\"success\",type=\"readyz\"} 1\n"
    );
}

#[test]
fn slis_sort_by_check_then_status_then_endpoint() {
    let (h, fake) = health(None);
    healthy(&fake);
    assert_eq!(get(&h, "/livez", None, START).0, 200);
    h.begin_shutdown();
    assert_eq!(get(&h, "/readyz", None, START).0, 500);
    assert_eq!(get(&h, "/healthz", None, START).0, 200);
    let text = slis_text(&h);
    let ping: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("{name=\"ping\""))
        .collect();
    assert_eq!(
        ping,
        [
            "kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1",
            "kubernetes_healthcheck{name=\"ping\",type=\"livez\"} 1",
            "kubernetes_healthcheck{name=\"ping\",type=\"readyz\"} 1",
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 1",
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"livez\"} 1",
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"readyz\"} 1",
        ]
    );
    assert!(
        text.contains("kubernetes_healthcheck{name=\"shutdown\",type=\"readyz\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "kubernetes_healthchecks_total{name=\"shutdown\",status=\"error\",type=\"readyz\"} 1\n"
        ),
        "{text}"
    );
    assert!(!text.contains("shutdown\",type=\"livez"), "{text}");
}
