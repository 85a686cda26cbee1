use super::*;
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
