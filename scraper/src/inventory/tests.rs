use std::sync::Arc;

use kube::runtime::watcher::Event;

use super::watch::{Applier, SlimNode, SlimPod};
use super::*;

const POD_JSON: &str = include_str!("testdata/pod.json");
const NODE_JSON: &str = include_str!("testdata/node.json");

fn pod(inv: &Inventory, ns: &str, name: &str, labels: &[(&str, &str)], node: &str) -> PodRecord {
    PodRecord {
        usage: crate::store::UsageLink::new(),
        key: PodKey {
            namespace: inv.interner().string(ns),
            name: Arc::from(name),
        },
        labels: inv.interner().labels(labels.iter().copied()),
        node_name: Some(NodeName(inv.interner().string(node))),
    }
}

fn node(inv: &Inventory, name: &str) -> NodeRecord {
    NodeRecord {
        name: NodeName(inv.interner().string(name)),
        labels: inv.interner().labels([("kubernetes.io/hostname", name)]),
        addresses: vec![NodeAddress {
            kind: Arc::from("InternalIP"),
            address: Arc::from("10.0.0.1"),
        }],
        kubelet_port: Some(10250),
        metrics_path: None,
    }
}

fn keys(pods: &[Arc<PodRecord>]) -> Vec<String> {
    pods.iter().map(|p| p.key.to_string()).collect()
}

#[test]
fn pods_are_sorted_by_namespace_then_name_and_filtered_by_namespace() {
    let inv = Inventory::new();
    for (ns, name) in [
        ("kube-system", "b"),
        ("default", "z"),
        ("kube-system", "a"),
        ("default", "a"),
        ("apps", "m"),
    ] {
        inv.upsert_pod(pod(&inv, ns, name, &[], "n1"));
    }
    assert_eq!(
        keys(&inv.pods(None)),
        [
            "apps/m",
            "default/a",
            "default/z",
            "kube-system/a",
            "kube-system/b"
        ]
    );
    assert_eq!(
        keys(&inv.pods(Some("kube-system"))),
        ["kube-system/a", "kube-system/b"]
    );
    assert!(inv.pods(Some("kube")).is_empty());
    assert!(inv.pods(Some("nothing")).is_empty());
    assert_eq!(inv.pod_count(), 5);

    inv.remove_pod("apps", "m");
    inv.remove_pod("apps", "never-existed");
    assert!(inv.pods(Some("apps")).is_empty());
    assert!(inv.pod("apps", "m").is_none());
    assert_eq!(inv.pod_count(), 4);
    assert_eq!(
        inv.pod("default", "z").map(|p| p.key.to_string()),
        Some("default/z".into())
    );

    // Upserting an existing pod replaces it and does not count it twice.
    inv.upsert_pod(pod(&inv, "default", "z", &[("app", "new")], "n2"));
    assert_eq!(inv.pod_count(), 4);
    let z = inv.pod("default", "z");
    assert_eq!(z.as_ref().and_then(|p| p.labels.get("app")), Some("new"));
}

#[test]
fn nodes_are_sorted_by_name() {
    let inv = Inventory::new();
    for name in ["node-c", "node-a", "node-b"] {
        inv.upsert_node(node(&inv, name));
    }
    let names: Vec<String> = inv.nodes().iter().map(|n| n.name.to_string()).collect();
    assert_eq!(names, ["node-a", "node-b", "node-c"]);
    inv.remove_node("node-b");
    assert!(inv.node("node-b").is_none());
    assert_eq!(inv.node_count(), 2);
    assert_eq!(
        inv.node("node-c").map(|n| n.kubelet_port),
        Some(Some(10250))
    );
}

#[test]
fn replace_swaps_the_whole_set_and_marks_synced() {
    let inv = Inventory::new();
    inv.upsert_pod(pod(&inv, "default", "gone", &[], "n1"));
    inv.upsert_node(node(&inv, "gone-node"));
    assert!(!inv.synced());

    inv.replace_pods(vec![pod(&inv, "default", "kept", &[], "n1")]);
    assert!(!inv.synced(), "nodes have not been listed yet");
    inv.replace_nodes(vec![node(&inv, "n1")]);
    assert!(inv.synced());

    assert_eq!(keys(&inv.pods(None)), ["default/kept"]);
    assert_eq!(inv.pod_count(), 1);
    assert!(inv.node("gone-node").is_none());
    assert!(inv.node("n1").is_some());
}

#[test]
fn readers_never_see_a_half_replaced_pod_set() {
    let inv = Arc::new(Inventory::new());
    let set_a: Vec<PodRecord> = (0..2000)
        .map(|i| pod(&inv, "a", &format!("p{i:05}"), &[], "n"))
        .collect();
    let set_b: Vec<PodRecord> = (0..3000)
        .map(|i| pod(&inv, "b", &format!("p{i:05}"), &[], "n"))
        .collect();
    inv.replace_pods(set_a.clone());
    let writer = {
        let inv = inv.clone();
        std::thread::spawn(move || {
            for round in 0..50 {
                inv.replace_pods(if round % 2 == 0 {
                    set_b.clone()
                } else {
                    set_a.clone()
                });
            }
        })
    };
    while !writer.is_finished() {
        let len = inv.pods(None).len();
        assert!(
            len == 2000 || len == 3000,
            "saw a partial set of {len} pods"
        );
    }
    assert!(writer.join().is_ok());
}

#[test]
fn labels_are_interned_and_shared_between_pods() {
    let inv = Inventory::new();
    let a = pod(
        &inv,
        "default",
        "a",
        &[("app", "web"), ("tier", "front")],
        "n1",
    );
    // Same labels in another order: the very same allocation.
    let b = pod(
        &inv,
        "default",
        "b",
        &[("tier", "front"), ("app", "web")],
        "n1",
    );
    assert!(a.labels.ptr_eq(&b.labels));
    assert!(Arc::ptr_eq(&a.key.namespace, &b.key.namespace));
    let c = pod(&inv, "default", "c", &[("app", "web")], "n1");
    assert!(!a.labels.ptr_eq(&c.labels));
    // Strings are shared across different label sets.
    assert!(Arc::ptr_eq(&a.labels.pairs()[0].1, &c.labels.pairs()[0].1));
    assert_eq!(
        a.labels.iter().collect::<Vec<_>>(),
        [("app", "web"), ("tier", "front")]
    );
    assert_eq!(a.labels.get("tier"), Some("front"));
    assert_eq!(a.labels.get("nope"), None);
}

#[test]
fn interner_last_duplicate_key_wins_and_empty_is_empty() {
    let interner = Interner::new();
    let labels = interner.labels([("a", "1"), ("b", "2"), ("a", "3")]);
    assert_eq!(labels.iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
    assert!(interner.labels([]).is_empty());
}

#[test]
fn interner_forgets_labels_nobody_uses() {
    let interner = Interner::new();
    let kept = interner.labels([("app", "kept")]);
    for i in 0..20_000 {
        // A rollout's worth of pod-template-hash values, each dropped at once.
        let _ = interner.labels([("pod-template-hash", format!("h{i}").as_str())]);
    }
    assert!(
        interner.len() < 10_000,
        "interner grew to {}",
        interner.len()
    );
    interner.purge();
    // "app", "kept" and the set; "pod-template-hash" and the hashes are gone.
    assert_eq!(interner.len(), 3);
    let again = interner.labels([("app", "kept")]);
    assert!(Arc::ptr_eq(&kept.0, &again.0));
}

#[test]
fn slim_pod_decodes_from_a_real_pod_and_skips_the_rest() {
    let slim: SlimPod = serde_json::from_str(POD_JSON).expect("pod decodes");
    assert_eq!(slim.meta.name.as_deref(), Some("coredns-668d6bf9bc-8m2xq"));
    assert_eq!(slim.meta.namespace.as_deref(), Some("kube-system"));
    assert_eq!(
        slim.meta.uid.as_deref(),
        Some("6f1b9d0e-3c47-4a8e-9d0b-2f0b8e1c5a11")
    );
    assert_eq!(slim.meta.resource_version.as_deref(), Some("48213"));
    assert!(slim.meta.managed_fields.is_none());
    assert!(slim.meta.annotations.is_none());
    assert!(slim.meta.owner_references.is_none());
    assert!(
        slim.meta.labels.is_none(),
        "labels live in the slim field, not the ObjectMeta"
    );
    assert_eq!(slim.node_name.as_deref(), Some("kind-control-plane"));
    assert!(slim.is_running());

    let inv = Inventory::new();
    let record = slim.to_record(inv.interner()).expect("record");
    assert_eq!(
        record.key.to_string(),
        "kube-system/coredns-668d6bf9bc-8m2xq"
    );
    assert_eq!(
        record.labels.iter().collect::<Vec<_>>(),
        [("k8s-app", "kube-dns"), ("pod-template-hash", "668d6bf9bc")]
    );
    assert_eq!(
        record.node_name.as_ref().map(|n| n.as_str()),
        Some("kind-control-plane")
    );
}

#[test]
fn slim_decoding_never_parses_managed_fields() {
    // A shape k8s-openapi's ObjectMeta would reject: only a decoder that skips it succeeds.
    let mut pod: serde_json::Value = serde_json::from_str(POD_JSON).expect("json");
    pod["metadata"]["managedFields"] = serde_json::json!("not a list");
    pod["metadata"]["creationTimestamp"] = serde_json::json!(12);
    let slim: SlimPod = serde_json::from_value(pod).expect("managedFields is not parsed");
    assert_eq!(slim.meta.name.as_deref(), Some("coredns-668d6bf9bc-8m2xq"));
    let mut node: serde_json::Value = serde_json::from_str(NODE_JSON).expect("json");
    node["metadata"]["managedFields"] = serde_json::json!({"f:weird": true});
    node["status"]["capacity"] = serde_json::json!("not a map");
    let slim: SlimNode = serde_json::from_value(node).expect("managedFields is not parsed");
    assert_eq!(slim.meta.name.as_deref(), Some("kind-worker"));
}

#[test]
fn slim_node_keeps_addresses_port_labels_and_metrics_path() {
    let slim: SlimNode = serde_json::from_str(NODE_JSON).expect("node decodes");
    assert_eq!(slim.meta.resource_version.as_deref(), Some("51877"));
    assert!(slim.meta.managed_fields.is_none());
    let inv = Inventory::new();
    let record = slim.to_record(inv.interner()).expect("record");
    assert_eq!(record.name.as_str(), "kind-worker");
    assert_eq!(record.kubelet_port, Some(10250));
    assert_eq!(
        record.metrics_path.as_deref(),
        Some("/metrics/nodes/kind-worker/metrics/resource")
    );
    let addresses: Vec<(&str, &str)> = record
        .addresses
        .iter()
        .map(|a| (&*a.kind, &*a.address))
        .collect();
    assert_eq!(
        addresses,
        [("InternalIP", "172.18.0.3"), ("Hostname", "kind-worker")]
    );
    assert_eq!(
        record.labels.get("kubernetes.io/hostname"),
        Some("kind-worker")
    );
    assert_eq!(record.labels.iter().count(), 5);
}

#[test]
fn slim_node_without_status_or_with_port_zero() {
    let slim: SlimNode =
        serde_json::from_str(r#"{"metadata":{"name":"bare","labels":null,"annotations":null},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}}}}"#)
            .expect("decodes");
    let inv = Inventory::new();
    let record = slim.to_record(inv.interner()).expect("record");
    assert_eq!(record.kubelet_port, None);
    assert!(record.addresses.is_empty());
    assert!(record.labels.is_empty());
    assert_eq!(record.metrics_path, None);
    let slim: SlimNode = serde_json::from_str(r#"{"metadata":{"name":"big"},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":70000}}}}"#)
        .expect("decodes");
    assert_eq!(slim.kubelet_port, None, "out-of-range port is ignored");
    let slim: SlimNode = serde_json::from_str(r#"{"metadata":{}}"#).expect("decodes");
    assert!(
        slim.to_record(inv.interner()).is_none(),
        "a node without a name is not kept"
    );
}

fn pod_event_object(name: &str, phase: &str) -> SlimPod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "7", "labels": {"app": "x"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase}
    }))
    .expect("decodes")
}

#[test]
fn applier_buffers_a_relist_and_handles_phase_changes() {
    let inv = Inventory::new();
    let mut pods = Applier::new(watch::Pods(&inv));
    pods.apply(Event::Init);
    pods.apply(Event::InitApply(pod_event_object("a", "Running")));
    pods.apply(Event::InitApply(pod_event_object("pending", "Pending")));
    assert!(
        inv.pods(None).is_empty(),
        "nothing is visible before InitDone"
    );
    assert!(!inv.synced());
    pods.apply(Event::InitDone);
    assert_eq!(keys(&inv.pods(None)), ["default/a"]);

    pods.apply(Event::Apply(pod_event_object("b", "Running")));
    assert_eq!(keys(&inv.pods(None)), ["default/a", "default/b"]);
    // A pod that finished, sent as an update: gone.
    pods.apply(Event::Apply(pod_event_object("a", "Succeeded")));
    assert_eq!(keys(&inv.pods(None)), ["default/b"]);
    pods.apply(Event::Delete(pod_event_object("b", "Running")));
    assert!(inv.pods(None).is_empty());

    // A relist replaces the set: "c" appears, nothing else survives.
    pods.apply(Event::Apply(pod_event_object("stale", "Running")));
    pods.apply(Event::Init);
    pods.apply(Event::InitApply(pod_event_object("c", "Running")));
    assert_eq!(
        keys(&inv.pods(None)),
        ["default/stale"],
        "old set visible during the relist"
    );
    pods.apply(Event::InitDone);
    assert_eq!(keys(&inv.pods(None)), ["default/c"]);

    // A relist that failed half-way and restarted does not keep the half.
    pods.apply(Event::Init);
    pods.apply(Event::InitApply(pod_event_object("half", "Running")));
    pods.apply(Event::Init);
    pods.apply(Event::InitApply(pod_event_object("d", "Running")));
    pods.apply(Event::InitDone);
    assert_eq!(keys(&inv.pods(None)), ["default/d"]);
}

fn big_inventory(pods: usize) -> (Inventory, Vec<PodRecord>) {
    let inv = Inventory::new();
    let records: Vec<PodRecord> = (0..pods)
        .map(|i| {
            let app = format!("app-{}", i / 50);
            let hash = format!("{:010x}", (i / 50) * 7919);
            pod(
                &inv,
                &format!("ns-{}", i % 300),
                &format!("{app}-{hash}-{:05}", i % 100_000),
                &[
                    ("app", &app),
                    ("pod-template-hash", &hash),
                    ("team", "platform"),
                ],
                &format!("node-{:04}", i % 1500),
            )
        })
        .collect();
    (inv, records)
}

/// A cluster-wide copy of 150,000 pods (several namespaces) holds each once, in namespace
/// then name order; one namespace's copy holds just its own. (How long it takes is the
/// encode bench's to say, not a test's.)
#[test]
fn pods_none_at_150k_are_every_pod_in_order() {
    let (inv, records) = big_inventory(150_000);
    inv.replace_pods(records);
    assert_eq!(inv.pod_count(), 150_000);
    let all = inv.pods(None);
    assert_eq!(all.len(), 150_000);
    assert!(
        all.windows(2).all(|w| w[0].key < w[1].key),
        "pods(None) is sorted by namespace then name"
    );
    let one_ns = inv.pods(Some("ns-7"));
    assert_eq!(one_ns.len(), 500);
    assert!(one_ns.iter().all(|p| &*p.key.namespace == "ns-7"));
}

fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Run alone: `cargo test -p scraper --release -- --ignored memory_per_pod --nocapture
/// --test-threads=1`.
#[test]
#[ignore = "measures process RSS; run alone"]
fn memory_per_pod() {
    let before = rss_bytes().expect("linux");
    let (inv, records) = big_inventory(150_000);
    inv.replace_pods(records);
    let after = rss_bytes().expect("linux");
    let per_pod = (after.saturating_sub(before)) as f64 / 150_000.0;
    println!(
        "RSS per slim pod record: {per_pod:.0} bytes ({} pods)",
        inv.pod_count()
    );
    // 627-628 bytes on 2026-12-02 (three labels, mostly one pod per label value in a
    // namespace, so the label index's sets are small); a bound that catches a regression.
    assert!(per_pod < 700.0, "a slim pod costs {per_pod} bytes");
}

#[test]
fn an_equality_selector_is_answered_from_the_label_index_and_follows_changes() {
    let inv = Inventory::new();
    inv.upsert_pod(pod(
        &inv,
        "a",
        "web-1",
        &[("app", "web"), ("tier", "1")],
        "n",
    ));
    inv.upsert_pod(pod(
        &inv,
        "a",
        "web-0",
        &[("app", "web"), ("tier", "2")],
        "n",
    ));
    inv.upsert_pod(pod(&inv, "a", "db-0", &[("app", "db")], "n"));
    inv.upsert_pod(pod(&inv, "b", "web-0", &[("app", "web")], "n"));
    let sel = |s: &str| LabelSelector::parse(s).unwrap();
    let matching = |ns: Option<&str>, s: &str| keys(&inv.pods_matching(ns, &sel(s)));

    assert_eq!(matching(Some("a"), "app=web"), ["a/web-0", "a/web-1"]);
    assert_eq!(
        matching(Some("a"), "app in (db,web),tier!=1"),
        ["a/db-0", "a/web-0"]
    );
    assert_eq!(
        matching(None, "app==web"),
        ["a/web-0", "a/web-1", "b/web-0"]
    );
    assert_eq!(
        matching(Some("a"), "app!=web"),
        ["a/db-0"],
        "no equality: a walk"
    );
    assert!(matching(Some("a"), "app=none").is_empty());
    assert!(matching(Some("c"), "app=web").is_empty());
    assert_eq!(matching(Some("a"), "").len(), 3);

    // Relabelled, removed: the index follows.
    inv.upsert_pod(pod(
        &inv,
        "a",
        "web-1",
        &[("app", "db"), ("tier", "1")],
        "n",
    ));
    assert_eq!(matching(Some("a"), "app=web"), ["a/web-0"]);
    assert_eq!(matching(Some("a"), "app=db,tier=1"), ["a/web-1"]);
    inv.remove_pod("a", "web-0");
    assert!(matching(Some("a"), "app=web").is_empty());
    inv.remove_pod("a", "web-1");
    inv.remove_pod("a", "db-0");
    assert!(
        !inv.pods.read().by_namespace.contains_key("a"),
        "an emptied namespace leaves no index"
    );
    inv.replace_pods(vec![pod(&inv, "b", "x", &[("app", "web")], "n")]);
    assert_eq!(matching(None, "app=web"), ["b/x"]);
}

mod index_props {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Upsert {
            ns: u8,
            name: u8,
            app: u8,
            tier: Option<u8>,
        },
        Remove {
            ns: u8,
            name: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3u8, 0..8u8, 0..3u8, proptest::option::of(0..2u8))
                .prop_map(|(ns, name, app, tier)| Op::Upsert { ns, name, app, tier }),
            1 => (0..3u8, 0..8u8).prop_map(|(ns, name)| Op::Remove { ns, name }),
        ]
    }

    const SELECTORS: &[&str] = &[
        "app=a0",
        "app in (a0,a2)",
        "app=a1,tier=t0",
        "tier==t1,app!=a0",
        "app notin (a1)",
        "!tier",
        "app=a9",
        "app=a0,app=a1",
        "app in (a0,a1),app!=a1",
        "app=a0,app in (a0,a2)",
        "app in (a0,a2),tier in (t0)",
        // The same key and values under a negated operator, first: not the index's one.
        "app!=a0,app=a0",
        "app notin (a0,a2),app in (a0,a2)",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the sequence of upserts (relabelling included) and removals, the index
        /// answers exactly what walking every pod and matching its labels answers.
        #[test]
        fn the_index_answers_what_a_walk_answers(ops in proptest::collection::vec(op(), 0..60)) {
            let inv = Inventory::new();
            for op in ops {
                match op {
                    Op::Upsert { ns, name, app, tier } => {
                        let (app, tier) = (format!("a{app}"), tier.map(|t| format!("t{t}")));
                        let mut labels = vec![("app", app.as_str())];
                        if let Some(tier) = &tier {
                            labels.push(("tier", tier.as_str()));
                        }
                        inv.upsert_pod(pod(&inv, &format!("ns{ns}"), &format!("p{name}"), &labels, "n"));
                    }
                    Op::Remove { ns, name } => inv.remove_pod(&format!("ns{ns}"), &format!("p{name}")),
                }
            }
            // The index holds one entry per label of every pod there is, nothing stale.
            let pods = inv.pods.read();
            let indexed: usize = pods.by_namespace.values().map(|n| n.index.entries()).sum();
            let labels: usize = pods.by_namespace.values().flat_map(|n| n.by_name.values()).map(|p| p.labels.pairs().len()).sum();
            prop_assert_eq!(indexed, labels);
            prop_assert!(pods.by_namespace.values().all(|n| !n.by_name.is_empty()), "no empty namespace is kept");
            drop(pods);
            for s in SELECTORS {
                let selector = LabelSelector::parse(s).unwrap();
                for ns in [None, Some("ns0"), Some("ns1"), Some("ns2")] {
                    let walked: Vec<String> = inv
                        .pods(ns)
                        .iter()
                        .filter(|p| selector.matches(&p.labels))
                        .map(|p| p.key.to_string())
                        .collect();
                    prop_assert_eq!(keys(&inv.pods_matching(ns, &selector)), walked, "{} in {:?}", s, ns);
                }
            }
        }
    }
}

/// `visit_pods` hands over what `pods`/`pods_matching` return, in the same order, in
/// batches of at most VISIT_BATCH, across the points where it lets a writer in (a namespace
/// larger than VISIT_YIELD_EVERY, and pauses that fall on a namespace's end).
#[test]
fn visiting_pods_sees_what_a_copy_sees_in_the_same_order() {
    let inv = Inventory::new();
    let mut records = Vec::new();
    for (ns, count) in [
        ("big", VISIT_YIELD_EVERY + 700),
        ("a", 3),
        ("mid", VISIT_YIELD_EVERY - 3),
        ("z", 1),
    ] {
        for i in 0..count {
            let app = if i % 3 == 0 { "web" } else { "db" };
            records.push(pod(&inv, ns, &format!("p{i:05}"), &[("app", app)], "n"));
        }
    }
    inv.replace_pods(records);
    let web = LabelSelector::parse("app=web").unwrap();
    // Past VISIT_YIELD_EVERY matches in all namespaces and in `big`: copied out, not visited
    // in place.
    let any = LabelSelector::parse("app in (web,db)").unwrap();
    for namespace in [None, Some("big"), Some("mid"), Some("a"), Some("none")] {
        for selector in [LabelSelector::default(), web.clone(), any.clone()] {
            let mut visited = Vec::new();
            inv.visit_pods(namespace, &selector, |batch| {
                assert!(!batch.is_empty() && batch.len() <= VISIT_BATCH);
                visited.extend(batch.iter().map(|p| p.key.to_string()));
            });
            assert_eq!(
                visited,
                keys(&inv.pods_matching(namespace, &selector)),
                "{namespace:?} {selector:?}"
            );
        }
    }
    let mut all = 0;
    inv.visit_pods(None, &LabelSelector::default(), |batch| all += batch.len());
    assert_eq!(all, 2 * VISIT_YIELD_EVERY + 701);
}

/// Walking in steps (`visit_pods_after`, as a streamed list does, one frame per step) sees
/// exactly the pods of one whole visit, in order, whatever the step; a pod removed or added
/// between steps is seen only if the walk has not passed its place.
#[test]
fn walking_in_steps_sees_what_one_visit_sees() {
    let inv = Inventory::new();
    let mut records = Vec::new();
    for (ns, count) in [("a", 3), ("big", 700), ("mid", 10), ("z", 1)] {
        for i in 0..count {
            records.push(pod(&inv, ns, &format!("p{i:05}"), &[], "n"));
        }
    }
    inv.replace_pods(records);
    let walk = |namespace: Option<&str>, step: usize| {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let mut calls = 0;
            after = inv.visit_pods_after(namespace, after.as_ref(), step, |batch| {
                assert!(!batch.is_empty() && batch.len() <= VISIT_BATCH);
                calls += batch.len();
                seen.extend(batch.iter().map(|p| p.key.to_string()));
            });
            assert!(calls <= step.max(1), "at most a step's pods per call");
            if after.is_none() {
                return seen;
            }
        }
    };
    for namespace in [None, Some("a"), Some("big"), Some("z"), Some("none")] {
        let whole = keys(&inv.pods(namespace));
        for step in [0, 1, 3, 8, 9, 256, 10_000] {
            assert_eq!(walk(namespace, step), whole, "{namespace:?} step {step}");
        }
    }
    // Between steps: a pod behind the walk's position is not seen, one ahead of it is.
    let mut seen = Vec::new();
    let after = inv.visit_pods_after(None, None, 5, |b| {
        seen.extend(b.iter().map(|p| p.key.to_string()));
    });
    assert_eq!(
        after.as_ref().map(|k| k.to_string()).as_deref(),
        Some("big/p00001")
    );
    inv.upsert_pod(pod(&inv, "a", "p00000-late", &[], "n"));
    inv.upsert_pod(pod(&inv, "mid", "new", &[], "n"));
    inv.remove_pod("big", "p00002");
    let mut after = after;
    while after.is_some() {
        after = inv.visit_pods_after(None, after.as_ref(), 64, |b| {
            seen.extend(b.iter().map(|p| p.key.to_string()));
        });
    }
    assert!(!seen.contains(&"a/p00000-late".to_owned()));
    assert!(seen.contains(&"mid/new".to_owned()));
    assert!(!seen.contains(&"big/p00002".to_owned()));
    assert_eq!(seen.len(), 3 + 700 + 10 + 1);
}

/// A writer that waits during a long visit gets in at the visit's next pause, not after the
/// whole visit: the pod it adds (sorted after the pause) is visited, and the visit saw the
/// writer finish while it was still running.
#[test]
fn a_waiting_writer_gets_in_while_a_long_visit_runs() {
    let inv = Arc::new(Inventory::new());
    let records = (0..3 * VISIT_YIELD_EVERY)
        .map(|i| pod(&inv, "a", &format!("p{i:05}"), &[], "n"))
        .collect();
    inv.replace_pods(records);
    let late = pod(&inv, "zz", "late", &[], "n");
    let written = Arc::new(AtomicBool::new(false));
    let mut writer = None;
    let mut seen_written = false;
    let mut visited = Vec::new();
    inv.visit_pods(None, &LabelSelector::default(), |batch| {
        if writer.is_none() {
            let (target, late, written) = (inv.clone(), late.clone(), written.clone());
            writer = Some(std::thread::spawn(move || {
                target.upsert_pod(late);
                written.store(true, Ordering::SeqCst);
            }));
            // Wait (under the visit's read lock) until the writer is queued: a reader cannot
            // get in beside a waiting writer.
            let mut spins = 0u64;
            while let Some(guard) = inv.pods.try_read() {
                drop(guard);
                spins += 1;
                assert!(spins < 1 << 32, "the writer never queued");
                std::thread::yield_now();
            }
        }
        seen_written |= written.load(Ordering::SeqCst);
        visited.extend(batch.iter().map(|p| p.key.to_string()));
    });
    assert!(writer.is_some_and(|w| w.join().is_ok()));
    assert!(seen_written, "the writer only got in after the visit");
    assert_eq!(visited.len(), 3 * VISIT_YIELD_EVERY + 1);
    assert_eq!(visited.last().map(String::as_str), Some("zz/late"));
}

/// A selector's few matches (an HPA's) are visited in place under the read lock; many are
/// copied out first, so a writer is not held up while they are visited.
#[test]
fn a_visit_holds_the_lock_only_for_a_few_selected_pods() {
    let inv = Inventory::new();
    let records = (0..VISIT_YIELD_EVERY + 1)
        .map(|i| {
            let app = if i < 100 { "few" } else { "many" };
            pod(
                &inv,
                "a",
                &format!("p{i:05}"),
                &[("app", app), ("all", "yes")],
                "n",
            )
        })
        .collect();
    inv.replace_pods(records);
    let visit = |selector: &str| {
        let (mut pods, mut writable) = (0, Vec::new());
        inv.visit_pods(None, &LabelSelector::parse(selector).unwrap(), |batch| {
            pods += batch.len();
            writable.push(inv.pods.try_write().is_some());
        });
        (pods, writable)
    };
    let (pods, writable) = visit("app=few");
    assert_eq!(pods, 100);
    assert!(
        writable.iter().all(|w| !w),
        "visited in place, under the lock"
    );
    let (pods, writable) = visit("all=yes");
    assert_eq!(pods, VISIT_YIELD_EVERY + 1);
    assert!(writable.iter().all(|w| *w), "copied out: a writer gets in");
}

/// A label set's encoding is made once and shared by every holder of the set; another set
/// gets its own, and the forms are kept apart.
#[test]
fn a_label_set_is_encoded_once_per_form() {
    let interner = Interner::new();
    let a = interner.labels([("app", "web"), ("tier", "front")]);
    let b = interner.labels([("tier", "front"), ("app", "web")]);
    let c = interner.labels([("app", "db")]);
    let calls = std::cell::Cell::new(0);
    let encode = |l: &Labels| {
        calls.set(calls.get() + 1);
        l.iter()
            .flat_map(|(k, v)| [k, "=", v, ";"])
            .collect::<String>()
            .into_bytes()
    };
    assert_eq!(a.encoded(Encoding::Json, encode), b"app=web;tier=front;");
    assert_eq!(b.encoded(Encoding::Json, encode), b"app=web;tier=front;");
    assert_eq!(calls.get(), 1, "the shared set was encoded again");
    assert_eq!(c.encoded(Encoding::Json, encode), b"app=db;");
    assert_eq!(calls.get(), 2);
    assert_eq!(a.encoded(Encoding::Protobuf, |_| b"pb".to_vec()), b"pb");
    assert_eq!(a.encoded(Encoding::Json, encode), b"app=web;tier=front;");
    assert!(Labels::default().encoded(Encoding::Json, encode).is_empty());
}

#[test]
fn pods_new_after_the_first_list_record_their_node_once() {
    let inv = Inventory::new();
    let mut starts = inv.subscribe_pod_starts();
    // The first list's pods are not starts, nor pods the watch adds before it is in.
    inv.upsert_pod(pod(&inv, "default", "early", &[], "n0"));
    inv.replace_pods(vec![pod(&inv, "default", "listed", &[], "n1")]);
    assert!(inv.take_pod_starts().is_empty());
    assert!(!starts.has_changed().unwrap());
    // A pod that starts Running, two on one node: each node once.
    inv.upsert_pod(pod(&inv, "default", "a", &[], "n1"));
    inv.upsert_pod(pod(&inv, "default", "b", &[], "n1"));
    inv.upsert_pod(pod(&inv, "web", "c", &[], "n2"));
    assert!(starts.has_changed().unwrap());
    starts.mark_unchanged();
    let mut nodes: Vec<String> = inv
        .take_pod_starts()
        .iter()
        .map(|n| n.as_str().to_owned())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
    assert!(inv.take_pod_starts().is_empty());
    // An update of a known pod (labels) is not a start.
    inv.upsert_pod(pod(&inv, "default", "a", &[("app", "x")], "n1"));
    assert!(inv.take_pod_starts().is_empty());
    assert!(!starts.has_changed().unwrap());
    // A pod deleted and created again under its name is.
    inv.remove_pod("default", "a");
    inv.upsert_pod(pod(&inv, "default", "a", &[], "n3"));
    assert_eq!(inv.take_pod_starts(), [NodeName::from("n3")]);
}
