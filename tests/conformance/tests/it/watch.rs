//! The inventory watchers (kube-rs) against the in-memory object server over HTTPS.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use conformance::objects::{self, ContainerSpec, Kind, Objects};
use futures::StreamExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use scraper::inventory::Inventory;
use scraper::inventory::watch::{METRICS_PATH_ANNOTATION, SlimPod};
use tls::issue::{Ca, LeafSpec};
use tokio_util::sync::CancellationToken;

struct Cluster {
    objects: Objects,
    client: kube::Client,
    shutdown: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl Cluster {
    async fn start(objects: Objects) -> Cluster {
        tls::provider::install_default();
        let ca = Ca::new("test-ca").expect("ca");
        let leaf = ca
            .issue(&LeafSpec {
                common_name: "kube-apiserver".into(),
                sans: vec!["127.0.0.1".into()],
                server: true,
                ..LeafSpec::default()
            })
            .expect("leaf");
        let key = tls::server::certified_key(&leaf.identity).expect("key");
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(key));
        let config = tls::server::config(resolver, true).expect("server config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(objects::serve(
            listener,
            Arc::new(config),
            objects.clone(),
            shutdown.clone(),
        ));
        let mut kube_config = kube::Config::new(format!("https://{addr}").parse().expect("url"));
        kube_config.root_cert = Some(vec![ca.cert().to_vec()]);
        let client = kube::Client::try_from(kube_config).expect("client");
        Cluster {
            objects,
            client,
            shutdown,
            tasks,
        }
    }

    fn run_inventory(&mut self) -> Arc<Inventory> {
        let inventory = Arc::new(Inventory::new());
        self.tasks.spawn(scraper::inventory::watch::run(
            self.client.clone(),
            inventory.clone(),
            self.shutdown.clone(),
        ));
        inventory
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        while let Some(joined) = self.tasks.join_next().await {
            assert!(joined.is_ok(), "a task panicked");
        }
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

fn pod_keys(inventory: &Inventory) -> Vec<String> {
    inventory
        .pods(None)
        .iter()
        .map(|p| p.key.to_string())
        .collect()
}

fn node_names(inventory: &Inventory) -> Vec<String> {
    inventory
        .nodes()
        .iter()
        .map(|n| n.name.to_string())
        .collect()
}

fn containers() -> Vec<ContainerSpec> {
    vec![ContainerSpec::new("app")]
}

fn seed() -> Objects {
    let objects = Objects::with_options(Duration::from_millis(200), 10_000);
    objects.add_node(
        "node-a",
        &[("pool", "blue")],
        &[("InternalIP", "10.0.0.1"), ("Hostname", "node-a")],
        10250,
    );
    let mut node_b = objects::build::node_json("node-b", &[], &[("InternalIP", "10.0.0.2")], 10255);
    node_b["metadata"]["annotations"][METRICS_PATH_ANNOTATION] =
        serde_json::json!("/api/v1/nodes/node-b/proxy/metrics/resource");
    objects.put(Kind::Node, node_b).expect("node-b");
    objects.add_pod(
        "default",
        "web-1",
        "node-a",
        &[("app", "web")],
        "Running",
        &containers(),
    );
    objects.add_pod(
        "default",
        "web-2",
        "node-b",
        &[("app", "web")],
        "Running",
        &containers(),
    );
    objects.add_pod(
        "kube-system",
        "dns",
        "node-a",
        &[("k8s-app", "kube-dns")],
        "Running",
        &containers(),
    );
    objects.add_pod(
        "default",
        "pending",
        "",
        &[("app", "web")],
        "Pending",
        &containers(),
    );
    objects
}

#[tokio::test]
async fn inventory_follows_nodes_and_running_pods() {
    let mut cluster = Cluster::start(seed()).await;
    let inventory = cluster.run_inventory();
    eventually("the inventory is synced", || async { inventory.synced() }).await;

    assert_eq!(node_names(&inventory), ["node-a", "node-b"]);
    assert_eq!(
        pod_keys(&inventory),
        ["default/web-1", "default/web-2", "kube-system/dns"]
    );

    let a = inventory.node("node-a").expect("node-a");
    assert_eq!(a.kubelet_port, Some(10250));
    assert_eq!(a.labels.get("pool"), Some("blue"));
    assert_eq!(a.labels.get("kubernetes.io/hostname"), Some("node-a"));
    assert_eq!(a.addresses.len(), 2);
    assert_eq!(
        (&*a.addresses[0].kind, &*a.addresses[0].address),
        ("InternalIP", "10.0.0.1")
    );
    assert_eq!(a.metrics_path, None);
    let b = inventory.node("node-b").expect("node-b");
    assert_eq!(b.kubelet_port, Some(10255));
    assert_eq!(
        b.metrics_path.as_deref(),
        Some("/api/v1/nodes/node-b/proxy/metrics/resource")
    );

    let web = inventory.pod("default", "web-2").expect("web-2");
    assert_eq!(web.labels.get("app"), Some("web"));
    assert_eq!(web.node_name.as_ref().map(|n| n.as_str()), Some("node-b"));
    let web1 = inventory.pod("default", "web-1").expect("web-1");
    assert!(web.labels.ptr_eq(&web1.labels), "label sets are shared");

    // The pending pod starts running: it appears.
    cluster
        .objects
        .set_pod_phase("default", "pending", "Running");
    eventually("the started pod appears", || async {
        inventory.pod("default", "pending").is_some()
    })
    .await;
    // A pod that finishes disappears.
    cluster
        .objects
        .set_pod_phase("default", "web-1", "Succeeded");
    eventually("the finished pod disappears", || async {
        inventory.pod("default", "web-1").is_none()
    })
    .await;
    // A deleted pod disappears.
    cluster.objects.delete_pod("kube-system", "dns");
    eventually("the deleted pod disappears", || async {
        inventory.pod("kube-system", "dns").is_none()
    })
    .await;
    // Labels follow updates.
    cluster.objects.add_pod(
        "default",
        "web-2",
        "node-b",
        &[("app", "web"), ("v", "2")],
        "Running",
        &containers(),
    );
    eventually("relabelled pod updates", || async {
        inventory
            .pod("default", "web-2")
            .is_some_and(|p| p.labels.get("v") == Some("2"))
    })
    .await;
    // A new node appears; a deleted one goes.
    cluster
        .objects
        .add_node("node-c", &[], &[("InternalIP", "10.0.0.3")], 10250);
    cluster.objects.delete_node("node-a");
    eventually("node-c replaces node-a", || async {
        node_names(&inventory) == ["node-b", "node-c"]
    })
    .await;
    assert_eq!(pod_keys(&inventory), ["default/pending", "default/web-2"]);

    cluster.stop().await;
}

#[tokio::test]
async fn a_compacted_history_makes_the_watcher_relist() {
    let mut cluster = Cluster::start(seed()).await;
    let inventory = cluster.run_inventory();
    eventually("the inventory is synced", || async { inventory.synced() }).await;
    let lists_before = cluster.objects.lists_served();

    // Changes the open watches never see, then the history that held them is compacted.
    cluster.objects.pause_watches();
    cluster.objects.delete_pod("default", "web-1");
    cluster.objects.delete_node("node-a");
    cluster
        .objects
        .add_pod("default", "late", "node-b", &[], "Running", &containers());
    cluster
        .objects
        .set_pod_phase("kube-system", "dns", "Failed");
    cluster.objects.compact();
    cluster.objects.resume_watches();

    eventually("the relisted inventory is correct", || async {
        pod_keys(&inventory) == ["default/late", "default/web-2"]
            && node_names(&inventory) == ["node-b"]
    })
    .await;
    assert!(
        cluster.objects.lists_served() >= lists_before + 2,
        "both watchers relisted after 410"
    );
    // And it keeps following changes afterwards.
    cluster.objects.delete_pod("default", "late");
    eventually("watching resumed", || async {
        inventory.pod("default", "late").is_none()
    })
    .await;
    assert!(inventory.synced());

    cluster.stop().await;
}

#[tokio::test]
async fn a_dropped_watch_is_resumed_and_misses_nothing() {
    let mut cluster = Cluster::start(seed()).await;
    let inventory = cluster.run_inventory();
    eventually("the inventory is synced", || async { inventory.synced() }).await;

    let watches_before = cluster.objects.watches_served();
    // Every watch breaks off mid-stream, and changes come while the watchers reconnect.
    cluster.objects.drop_watches();
    cluster.objects.delete_pod("default", "web-1");
    cluster.objects.add_pod(
        "default",
        "after-drop",
        "node-b",
        &[],
        "Running",
        &containers(),
    );
    cluster.objects.delete_node("node-a");

    eventually("the inventory caught up after the drop", || async {
        pod_keys(&inventory) == ["default/after-drop", "default/web-2", "kube-system/dns"]
            && node_names(&inventory) == ["node-b"]
    })
    .await;
    assert!(
        cluster.objects.watches_served() >= watches_before + 2,
        "both watchers reconnected"
    );
    assert!(
        inventory.synced(),
        "still synced: a dropped watch is not a lost cache"
    );
    cluster.stop().await;
}

fn pods_api(client: &kube::Client, namespace: Option<&str>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("", "v1", "Pod");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "pods");
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn names(list: &kube::core::ObjectList<DynamicObject>) -> Vec<String> {
    list.items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn lists_select_paginate_and_expire_like_kube_apiserver() {
    let objects = seed();
    for i in 0..5 {
        objects.add_pod(
            "paged",
            &format!("p{i}"),
            "node-a",
            &[("batch", "x")],
            "Running",
            &containers(),
        );
    }
    let cluster = Cluster::start(objects).await;
    let all = pods_api(&cluster.client, None);

    let running = all
        .list(&ListParams::default().fields("status.phase=Running"))
        .await
        .expect("list");
    assert_eq!(running.items.len(), 8, "the Pending pod is not Running");
    let on_b = all
        .list(&ListParams::default().fields("spec.nodeName=node-b"))
        .await
        .expect("list");
    assert_eq!(names(&on_b), ["web-2"]);
    let labelled = all
        .list(&ListParams::default().labels("app in (web),app!=db"))
        .await
        .expect("list");
    assert_eq!(names(&labelled), ["pending", "web-1", "web-2"]);
    let bad = all
        .list(&ListParams::default().fields("status.podIP=1.2.3.4"))
        .await;
    assert!(
        matches!(bad, Err(kube::Error::Api(ref s)) if s.code == 400),
        "{bad:?}"
    );

    // Pages are a consistent snapshot: a pod deleted between pages still shows.
    let paged = pods_api(&cluster.client, Some("paged"));
    let first = paged
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(names(&first), ["p0", "p1"]);
    let token = first.metadata.continue_.clone().expect("continue token");
    cluster.objects.delete_pod("paged", "p3");
    cluster
        .objects
        .add_pod("paged", "p2a", "node-a", &[], "Running", &containers());
    let second = paged
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(names(&second), ["p2", "p3"]);
    let token = second.metadata.continue_.clone().expect("continue token");
    let third = paged
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 3");
    assert_eq!(names(&third), ["p4"]);
    assert!(third.metadata.continue_.is_none());
    assert_eq!(
        first.metadata.resource_version,
        third.metadata.resource_version
    );

    // After compaction the old snapshot, and an exact list at an old version, are gone.
    let old_rv = first.metadata.resource_version.clone().expect("rv");
    cluster.objects.compact();
    let expired = paged
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await;
    assert!(
        matches!(expired, Err(kube::Error::Api(ref s)) if s.code == 410 && s.reason == "Expired"),
        "{expired:?}"
    );
    let exact = paged
        .list(
            &ListParams::default()
                .at(&old_rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await;
    assert!(
        matches!(exact, Err(kube::Error::Api(ref s)) if s.code == 410),
        "{exact:?}"
    );
    let current = paged.list(&ListParams::default()).await.expect("list");
    assert_eq!(names(&current), ["p0", "p1", "p2", "p2a", "p4"]);

    // 404 is a Status.
    let missing = paged.get("nope").await;
    assert!(
        matches!(missing, Err(kube::Error::Api(ref s)) if s.code == 404 && s.reason == "NotFound" && s.message == "pods \"nope\" not found"),
        "{missing:?}"
    );
    cluster.stop().await;
}

#[tokio::test]
async fn watches_send_selector_transitions_bookmarks_and_410() {
    let cluster = Cluster::start(seed()).await;
    let api: Api<SlimPod> = Api::all(cluster.client.clone());
    let rv = cluster.objects.resource_version().to_string();
    let params = WatchParams::default()
        .fields("status.phase=Running")
        .timeout(5);
    let mut events = api.watch(&params, &rv).await.expect("watch").boxed();

    cluster
        .objects
        .set_pod_phase("default", "pending", "Running");
    cluster
        .objects
        .set_pod_phase("default", "web-1", "Succeeded");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match events.next().await {
            Some(Ok(WatchEvent::Added(p))) => {
                seen.push(format!("ADDED {}", p.meta.name.unwrap_or_default()))
            }
            Some(Ok(WatchEvent::Deleted(p))) => {
                // The object as it was when it still matched, at the new version.
                assert!(p.is_running());
                seen.push(format!("DELETED {}", p.meta.name.unwrap_or_default()));
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["ADDED pending", "DELETED web-1"]);
    // With nothing changing, bookmarks arrive.
    let mut bookmark = false;
    while let Some(event) = events.next().await {
        if let Ok(WatchEvent::Bookmark(b)) = event {
            assert_eq!(
                b.metadata.resource_version,
                cluster.objects.resource_version().to_string()
            );
            bookmark = true;
            break;
        }
    }
    assert!(bookmark, "a bookmark was sent");

    // A watch from before the compaction gets a 410 ERROR event.
    cluster.objects.compact();
    let mut stale = api.watch(&params, &rv).await.expect("watch").boxed();
    match stale.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status
                    .message
                    .starts_with(&format!("too old resource version: {rv} (")),
                "{}",
                status.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    cluster.stop().await;
}

#[tokio::test]
async fn configmaps_are_served_and_watched() {
    let objects = seed();
    let mut data = BTreeMap::new();
    data.insert(
        "requestheader-allowed-names".to_owned(),
        "[\"front-proxy-client\"]".to_owned(),
    );
    objects.upsert_configmap("kube-system", "extension-apiserver-authentication", &data);
    let cluster = Cluster::start(objects).await;
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "configmaps");
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), "kube-system", &resource);
    let cm = api
        .get("extension-apiserver-authentication")
        .await
        .expect("get");
    assert_eq!(
        cm.data["data"]["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );

    let params = WatchParams::default()
        .fields("metadata.name=extension-apiserver-authentication")
        .timeout(5);
    let mut events = api.watch(&params, "0").await.expect("watch").boxed();
    let mut next = async || loop {
        match events.next().await {
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            other => return other,
        }
    };
    assert!(
        matches!(next().await, Some(Ok(WatchEvent::Added(_)))),
        "initial state as ADDED"
    );
    data.insert("client-ca-file".to_owned(), "PEM".to_owned());
    cluster
        .objects
        .upsert_configmap("kube-system", "extension-apiserver-authentication", &data);
    cluster
        .objects
        .upsert_configmap("kube-system", "other", &data);
    match next().await {
        Some(Ok(WatchEvent::Modified(cm))) => assert_eq!(cm.data["data"]["client-ca-file"], "PEM"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    cluster.stop().await;
}
