//! Conformance: the real kubectl (v1.32, which speaks only `metrics.k8s.io/v1beta1`, and v1.37,
//! which prefers `metrics.k8s.io/v1`) against a simulated cluster whose control plane proxies
//! `metrics.k8s.io` to the server, as kube-aggregator does. Each test starts one cluster
//! and runs its checks with both kubectl releases; the numbers are compared with what the
//! simulated kubelets report.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use conformance::cluster::workload::{
    CPU_CONSUMER, CPU_CONSUMER_CORES, E2E_NAMESPACE, INIT_CONTAINER_POD, MEMORY_CONSUMER,
    MEMORY_CONSUMER_BYTES, NATIVE_SIDECAR_POD, SIDECAR_POD,
};
use conformance::cluster::{Cluster, ClusterConfig, Kubectl};
use conformance::kubelet::{Fault, SimNode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const MIB: f64 = 1024.0 * 1024.0;

async fn start(config: ClusterConfig) -> Cluster {
    for k in Kubectl::ALL {
        if let Err(e) = k.require() {
            panic!("{e}");
        }
    }
    Cluster::start(config, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("starting the cluster: {e}"))
}

/// Polls `f` every 500 ms until it returns `Ok`, or panics after `timeout` with the last error.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// `kubectl args`, its stdout; an error with both streams when it fails.
async fn kubectl(c: &Cluster, k: Kubectl, args: &[&str]) -> Result<String, String> {
    c.kubectl(k, args)
        .await
        .map_err(|e| e.to_string())?
        .ok()
        .map_err(|e| format!("{k} {}: {e}", args.join(" ")))
}

/// `kubectl get --raw path` as JSON.
async fn raw(c: &Cluster, k: Kubectl, path: &str) -> Result<Value, String> {
    let out = kubectl(c, k, &["get", "--raw", path]).await?;
    serde_json::from_str(&out).map_err(|e| format!("{k} get --raw {path}: {e}: {out}"))
}

/// The rows of a kubectl table (the header checked against `header`), split on whitespace.
fn rows(out: &str, header: &[&str]) -> Result<Vec<Vec<String>>, String> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let first: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    if first != header {
        return Err(format!("header {first:?}, want {header:?}:\n{out}"));
    }
    Ok(lines
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect())
}

/// A Kubernetes quantity as a number (`50m` = 0.05, `12Mi` = 12582912, `7338891n`).
fn quantity(s: &str) -> f64 {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("quantity {s:?}"));
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => MIB,
        "Gi" => MIB * 1024.0,
        "Ti" => MIB * MIB,
        other if other.starts_with(['e', 'E']) => 10f64.powi(other[1..].parse().unwrap()),
        other => panic!("quantity suffix {other:?} in {s:?}"),
    };
    n * scale
}

/// RFC 3339 with second precision (`2026-11-29T16:04:46Z`, as metav1.Time writes it) as Unix ms.
fn unix_ms(ts: &str) -> i64 {
    let b = ts.as_bytes();
    assert!(ts.len() == 20 && b[19] == b'Z', "timestamp {ts:?}");
    let ns = scraper::kubelet::summary::rfc3339_ns(ts);
    ns.unwrap_or_else(|| panic!("timestamp {ts:?}")) / 1_000_000
}

/// The pods the server must list: every pod on a scraped node, as (namespace, name).
fn expected_pods(c: &Cluster) -> BTreeSet<(String, String)> {
    let scraped: BTreeSet<String> = c.scraped_node_names().into_iter().collect();
    c.pods()
        .into_iter()
        .filter(|(_, _, node)| scraped.contains(node))
        .map(|(ns, name, _)| (ns, name))
        .collect()
}

fn listed_pods(list: &Value) -> Vec<(String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["namespace"].as_str().unwrap().to_owned(),
                p["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn listed_nodes(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until the server lists every pod of the scraped nodes and every scraped node.
async fn wait_complete(c: &Cluster) {
    let timeout = c.config().resolution * 4 + Duration::from_secs(20);
    eventually(
        "every scraped node and pod to have metrics",
        timeout,
        || async {
            let want_pods = expected_pods(c);
            let pods = raw(c, Kubectl::V1_37, "/apis/metrics.k8s.io/v1/pods").await?;
            let got: BTreeSet<_> = listed_pods(&pods).into_iter().collect();
            if got != want_pods {
                let missing: Vec<_> = want_pods.difference(&got).collect();
                let extra: Vec<_> = got.difference(&want_pods).collect();
                return Err(format!("pods missing {missing:?}, unexpected {extra:?}"));
            }
            let nodes = raw(c, Kubectl::V1_37, "/apis/metrics.k8s.io/v1/nodes").await?;
            if listed_nodes(&nodes) != c.scraped_node_names() {
                return Err(format!("nodes {:?}", listed_nodes(&nodes)));
            }
            Ok(())
        },
    )
    .await;
}

/// The node's CPU rate in cores and its working set at `at_ms`, as its kubelet reports them.
fn node_usage(model: &SimNode, at_ms: i64) -> (f64, f64) {
    let stats = model.stats_at(at_ms);
    let cores = model.system_cpu_cores
        + model
            .pods
            .iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.created_ms <= at_ms)
            .map(|c| c.cpu_cores_at(at_ms))
            .sum::<f64>();
    (cores, stats.memory_working_set_bytes as f64)
}

fn assert_close(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: got {got}, want {want} ± {tolerance}"
    );
}

/// kubectl 1.37's `top node --show-swap` and `top pod --show-swap` read `usage.swap`, which is
/// served only where the kubelet reported swap: node-001 has swap on, node-000 not.
async fn show_swap(c: &Cluster) {
    let (with, without) = (ClusterConfig::node_name(1), ClusterConfig::node_name(0));
    let k = Kubectl::V1_37;
    let nodes = raw(c, k, "/apis/metrics.k8s.io/v1/nodes").await.unwrap();
    let usage = |name: &str| {
        let items = nodes["items"].as_array().unwrap();
        let node = items
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .unwrap();
        node["usage"].clone()
    };
    let swap = quantity(
        usage(&with)["swap"]
            .as_str()
            .expect("node-001 reports swap"),
    );
    assert!(swap > 0.0, "{}", usage(&with));
    assert!(usage(&without).get("swap").is_none(), "{}", usage(&without));

    let header = [
        "NAME",
        "CPU(cores)",
        "CPU(%)",
        "MEMORY(bytes)",
        "MEMORY(%)",
        "SWAP(bytes)",
        "SWAP(%)",
    ];
    let out = kubectl(c, k, &["top", "node", "--show-swap"])
        .await
        .unwrap();
    let table = rows(&out, &header).unwrap();
    let row = |name: &str| table.iter().find(|r| r[0] == name).unwrap();
    assert_close("node-001 swap", quantity(&row(&with)[5]), swap, MIB);
    let pct: f64 = row(&with)[6].trim_end_matches('%').parse().unwrap();
    let capacity = conformance::cluster::SWAP_CAPACITY as f64;
    assert_close("node-001 swap%", pct, 100.0 * swap / capacity, 1.0);
    assert_eq!(row(&without)[5..], ["<unknown>", "<unknown>"], "{out}");

    // Pods: the sum of their containers' swap, as the API serves it.
    let pods = raw(c, k, "/apis/metrics.k8s.io/v1/pods").await.unwrap();
    let out = kubectl(c, k, &["top", "pod", "-A", "--show-swap"])
        .await
        .unwrap();
    let header = [
        "NAMESPACE",
        "NAME",
        "CPU(cores)",
        "MEMORY(bytes)",
        "SWAP(bytes)",
    ];
    let table = rows(&out, &header).unwrap();
    let mut swapping = 0;
    for pod in pods["items"].as_array().unwrap() {
        let (ns, name) = (&pod["metadata"]["namespace"], &pod["metadata"]["name"]);
        let containers = pod["containers"].as_array().unwrap();
        let served: f64 = containers
            .iter()
            .filter_map(|c| c["usage"]["swap"].as_str())
            .map(quantity)
            .sum();
        swapping += usize::from(served > 0.0);
        let row = table.iter().find(|r| r[0] == *ns && r[1] == *name).unwrap();
        assert_close(&format!("{ns}/{name} swap"), quantity(&row[4]), served, MIB);
    }
    assert!(
        swapping > 0,
        "some pods on node-001 use swap:
{out}"
    );
    // Without the flag, the columns of every other kubectl.
    let out = kubectl(c, k, &["top", "pod", "-A"]).await.unwrap();
    rows(&out, &header[..4]).unwrap();
}

/// Node and pod metrics through `kubectl top`, `kubectl get --raw` on every path of both
/// versions, and `kubectl get` Tables, for kubectl 1.32 and 1.37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_get_raw_and_tables() {
    let c = start(ClusterConfig {
        nodes: 3,
        pods_per_node: 6,
        containers: 3,
        seed: 7,
        // node-001 has swap on; node-000 does not.
        swap_nodes: vec![ClusterConfig::node_name(1)],
        ..ClusterConfig::default()
    })
    .await;
    wait_complete(&c).await;
    show_swap(&c).await;
    let scraped = c.scraped_node_names();
    let skipped: Vec<String> = c
        .node_names()
        .into_iter()
        .filter(|n| c.is_skipped(n))
        .collect();
    assert_eq!(skipped.len(), 1, "the default topology skips one node");
    let want_pods = expected_pods(&c);
    // A label selector that matches a Deployment's pods in one namespace.
    let (sel_ns, sel_app) = c
        .objects()
        .all(conformance::objects::Kind::Pod)
        .iter()
        .find_map(|p| {
            let ns = p["metadata"]["namespace"].as_str()?;
            let app = p["metadata"]["labels"]["app"].as_str()?;
            (ns != E2E_NAMESPACE).then(|| (ns.to_owned(), app.to_owned()))
        })
        .unwrap();
    let sel_pods: BTreeSet<String> = c
        .objects()
        .all(conformance::objects::Kind::Pod)
        .iter()
        .filter(|p| p["metadata"]["namespace"] == sel_ns.as_str())
        .filter(|p| p["metadata"]["labels"]["app"] == sel_app.as_str())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();

    for k in Kubectl::ALL {
        // kubectl top node: every node; scraped ones with usage close to their kubelet's,
        // the skipped one without metrics.
        let out = kubectl(&c, k, &["top", "node"]).await.unwrap();
        let now = conformance::cluster::wall_ms();
        let table = rows(
            &out,
            &["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        )
        .unwrap();
        let by_name: BTreeMap<&str, &Vec<String>> =
            table.iter().map(|r| (r[0].as_str(), r)).collect();
        for node in &scraped {
            let row = by_name
                .get(node.as_str())
                .unwrap_or_else(|| panic!("{k}: {node} missing:\n{out}"));
            let (cores, memory) = node_usage(&c.node_model(node).unwrap(), now);
            assert_close(
                &format!("{k} {node} cpu"),
                quantity(&row[1]),
                cores,
                cores * 0.1,
            );
            assert_close(
                &format!("{k} {node} memory"),
                quantity(&row[3]),
                memory,
                memory * 0.1,
            );
            // 4 allocatable cores.
            let pct: f64 = row[2].trim_end_matches('%').parse().unwrap();
            assert_close(&format!("{k} {node} cpu%"), pct, cores * 25.0, 2.0);
        }
        for node in &skipped {
            if let Some(row) = by_name.get(node.as_str()) {
                assert!(row[1..].iter().all(|v| v == "<unknown>"), "{k}:\n{out}");
            }
        }

        // kubectl top node NAME.
        let out = kubectl(&c, k, &["top", "node", &scraped[1]]).await.unwrap();
        let table = rows(
            &out,
            &["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        )
        .unwrap();
        assert_eq!(table.len(), 1, "{k}:\n{out}");
        assert_eq!(table[0][0], scraped[1]);

        // --sort-by=cpu|memory on nodes.
        for (sort, col) in [("cpu", 1), ("memory", 3)] {
            let out = kubectl(&c, k, &["top", "node", &format!("--sort-by={sort}")])
                .await
                .unwrap();
            let table = rows(
                &out,
                &["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
            )
            .unwrap();
            let values: Vec<f64> = table
                .iter()
                .filter(|r| r[col] != "<unknown>")
                .map(|r| quantity(&r[col]))
                .collect();
            assert_eq!(values.len(), scraped.len(), "{k}:\n{out}");
            assert!(
                values.windows(2).all(|w| w[0] >= w[1]),
                "{k} --sort-by={sort}:\n{out}"
            );
        }

        // kubectl top pod -A: exactly the pods of scraped nodes.
        let out = kubectl(&c, k, &["top", "pod", "-A"]).await.unwrap();
        let table = rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
        let got: BTreeSet<(String, String)> =
            table.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        assert_eq!(got, want_pods, "{k} top pod -A:\n{out}");
        let cpu = table
            .iter()
            .find(|r| r[1] == CPU_CONSUMER)
            .map(|r| quantity(&r[2]))
            .unwrap();
        assert_close(&format!("{k} cpu-consumer"), cpu, CPU_CONSUMER_CORES, 0.005);

        // --sort-by on pods, across all namespaces.
        for (sort, col) in [("cpu", 2), ("memory", 3)] {
            let out = kubectl(&c, k, &["top", "pod", "-A", &format!("--sort-by={sort}")])
                .await
                .unwrap();
            let table = rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
            let values: Vec<f64> = table.iter().map(|r| quantity(&r[col])).collect();
            assert_eq!(values.len(), want_pods.len(), "{k}:\n{out}");
            assert!(
                values.windows(2).all(|w| w[0] >= w[1]),
                "{k} top pod --sort-by={sort}:\n{out}"
            );
        }

        // top pod -n NS -l SELECTOR.
        let out = kubectl(
            &c,
            k,
            &["top", "pod", "-n", &sel_ns, "-l", &format!("app={sel_app}")],
        )
        .await
        .unwrap();
        let table = rows(&out, &["NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
        let got: BTreeSet<String> = table.iter().map(|r| r[0].clone()).collect();
        let want: BTreeSet<String> = sel_pods
            .iter()
            .filter(|p| want_pods.contains(&(sel_ns.clone(), (*p).clone())))
            .cloned()
            .collect();
        assert!(!want.is_empty());
        assert_eq!(
            got, want,
            "{k} top pod -n {sel_ns} -l app={sel_app}:\n{out}"
        );

        // --containers: one row per container; the finished init container is not there, the
        // native sidecar is.
        let out = kubectl(&c, k, &["top", "pod", "-n", E2E_NAMESPACE, "--containers"])
            .await
            .unwrap();
        let table = rows(&out, &["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
        let containers = |pod: &str| -> BTreeSet<String> {
            table
                .iter()
                .filter(|r| r[0] == pod)
                .map(|r| r[1].clone())
                .collect()
        };
        assert_eq!(
            containers(INIT_CONTAINER_POD),
            BTreeSet::from([INIT_CONTAINER_POD.to_owned()]),
            "{k}:\n{out}"
        );
        assert_eq!(
            containers(SIDECAR_POD),
            BTreeSet::from([SIDECAR_POD.to_owned(), "sidecar-container".to_owned()]),
            "{k}:\n{out}"
        );
        assert_eq!(
            containers(NATIVE_SIDECAR_POD),
            BTreeSet::from([
                NATIVE_SIDECAR_POD.to_owned(),
                "sidecar-container".to_owned()
            ]),
            "{k}:\n{out}"
        );

        // kubectl get nodes.metrics.k8s.io / pods.metrics.k8s.io: the server's Table.
        let out = kubectl(&c, k, &["get", "nodes.metrics.k8s.io"])
            .await
            .unwrap();
        let table = rows(&out, &["NAME", "CPU", "MEMORY", "WINDOW"]).unwrap();
        let names: Vec<String> = table.iter().map(|r| r[0].clone()).collect();
        assert_eq!(names, scraped, "{k}:\n{out}");
        let out = kubectl(&c, k, &["get", "pods.metrics.k8s.io", "-n", E2E_NAMESPACE])
            .await
            .unwrap();
        let table = rows(&out, &["NAME", "CPU", "MEMORY", "WINDOW"]).unwrap();
        let sidecar = table.iter().find(|r| r[0] == SIDECAR_POD).unwrap();
        // The Table's pod usage is the sum of its containers: 2 x 50m.
        assert_close(&format!("{k} table cpu"), quantity(&sidecar[1]), 0.1, 0.01);
        let names: BTreeSet<String> = table.iter().map(|r| r[0].clone()).collect();
        let want: BTreeSet<String> = want_pods
            .iter()
            .filter(|(ns, _)| ns == E2E_NAMESPACE)
            .map(|(_, n)| n.clone())
            .collect();
        assert_eq!(names, want, "{k}:\n{out}");

        // Discovery: the group lists both versions, v1 preferred.
        let group = raw(&c, k, "/apis/metrics.k8s.io/").await.unwrap();
        assert_eq!(group["kind"], "APIGroup");
        let versions: Vec<&str> = group["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["v1", "v1beta1"], "{group}");
        assert_eq!(
            group["preferredVersion"]["groupVersion"],
            "metrics.k8s.io/v1"
        );

        for v in ["v1beta1", "v1"] {
            let base = format!("/apis/metrics.k8s.io/{v}");
            let gv = format!("metrics.k8s.io/{v}");
            let list = raw(&c, k, &base).await.unwrap();
            assert_eq!(list["kind"], "APIResourceList");
            assert_eq!(list["groupVersion"], gv.as_str());
            let resources: BTreeMap<&str, &Value> = list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["name"].as_str().unwrap(), r))
                .collect();
            assert_eq!(resources["nodes"]["kind"], "NodeMetrics");
            assert_eq!(resources["nodes"]["namespaced"], false);
            assert_eq!(resources["pods"]["kind"], "PodMetrics");
            assert_eq!(resources["pods"]["namespaced"], true);
            assert_eq!(resources["pods"]["singularName"], "");
            assert_eq!(
                resources["pods"]["verbs"],
                serde_json::json!(["get", "list"])
            );

            let nodes = raw(&c, k, &format!("{base}/nodes")).await.unwrap();
            assert_eq!(nodes["kind"], "NodeMetricsList");
            assert_eq!(nodes["apiVersion"], gv.as_str());
            assert_eq!(listed_nodes(&nodes), scraped, "{v}");
            for item in nodes["items"].as_array().unwrap() {
                assert!(quantity(item["usage"]["cpu"].as_str().unwrap()) > 0.0);
                assert!(quantity(item["usage"]["memory"].as_str().unwrap()) > 0.0);
                assert!(item["window"].as_str().unwrap().ends_with('s'), "{item}");
                unix_ms(item["timestamp"].as_str().unwrap());
            }

            let node = raw(&c, k, &format!("{base}/nodes/{}", scraped[0]))
                .await
                .unwrap();
            assert_eq!(node["kind"], "NodeMetrics");
            assert_eq!(node["apiVersion"], gv.as_str());
            assert_eq!(node["metadata"]["name"], scraped[0].as_str());
            assert_eq!(
                node["metadata"]["labels"]["kubernetes.io/hostname"],
                scraped[0].as_str()
            );

            let pods = raw(&c, k, &format!("{base}/pods")).await.unwrap();
            assert_eq!(pods["kind"], "PodMetricsList");
            assert_eq!(pods["apiVersion"], gv.as_str());
            let listed = listed_pods(&pods);
            let mut sorted = listed.clone();
            sorted.sort();
            assert_eq!(listed, sorted, "{v} pods sorted by namespace, name");
            assert_eq!(
                listed.into_iter().collect::<BTreeSet<_>>(),
                want_pods,
                "{v}"
            );

            let ns_pods = raw(&c, k, &format!("{base}/namespaces/{E2E_NAMESPACE}/pods"))
                .await
                .unwrap();
            let listed: BTreeSet<_> = listed_pods(&ns_pods).into_iter().collect();
            let want: BTreeSet<_> = want_pods
                .iter()
                .filter(|(ns, _)| ns == E2E_NAMESPACE)
                .cloned()
                .collect();
            assert_eq!(listed, want, "{v}");

            let selected = raw(
                &c,
                k,
                &format!("{base}/namespaces/{sel_ns}/pods?labelSelector=app%3D{sel_app}"),
            )
            .await
            .unwrap();
            let listed: BTreeSet<String> =
                listed_pods(&selected).into_iter().map(|(_, n)| n).collect();
            assert_eq!(
                listed.len(),
                sel_pods
                    .iter()
                    .filter(|p| want_pods.contains(&(sel_ns.clone(), (*p).clone())))
                    .count(),
                "{v} labelSelector"
            );

            let pod = raw(
                &c,
                k,
                &format!("{base}/namespaces/{E2E_NAMESPACE}/pods/{CPU_CONSUMER}"),
            )
            .await
            .unwrap();
            assert_eq!(pod["kind"], "PodMetrics");
            assert_eq!(pod["apiVersion"], gv.as_str());
            assert_eq!(pod["metadata"]["namespace"], E2E_NAMESPACE);
            assert_eq!(pod["metadata"]["labels"]["app"], CPU_CONSUMER);
            assert_eq!(pod["containers"][0]["name"], "cpu-consumer");

            // kubectl explain: the control plane serves the server's OpenAPI v3 document
            // as kube-aggregator does; a usage is a map of Quantity, as from metrics-server.
            let out = kubectl(
                &c,
                k,
                &[
                    "explain",
                    "podmetrics.containers",
                    &format!("--api-version={gv}"),
                ],
            )
            .await
            .unwrap();
            assert!(out.contains("KIND:       PodMetrics"), "{k} {v}:\n{out}");
            assert!(
                out.contains(&format!("VERSION:    {v}\n")),
                "{k} {v}:\n{out}"
            );
            assert!(
                out.contains("usage\t<map[string]Quantity> -required-"),
                "{k} {v}:\n{out}"
            );
            let out = kubectl(
                &c,
                k,
                &["explain", "nodemetrics", &format!("--api-version={gv}")],
            )
            .await
            .unwrap();
            assert!(
                out.contains("NodeMetrics sets resource usage metrics of a node."),
                "{k} {v}:\n{out}"
            );
            // The metadata is Kubernetes' own ObjectMeta, every field of it, as from
            // metrics-server (whose document carries apimachinery's schemas).
            let out = kubectl(
                &c,
                k,
                &[
                    "explain",
                    "podmetrics.metadata.managedFields",
                    &format!("--api-version={gv}"),
                ],
            )
            .await
            .unwrap();
            assert!(
                out.contains("FIELD: managedFields <[]ManagedFieldsEntry>"),
                "{k} {v}:\n{out}"
            );
            assert!(out.contains("fieldsV1\t<FieldsV1>"), "{k} {v}:\n{out}");
        }
    }
    c.stop().await.unwrap();
}

/// Every request in kubectl's `-v=8` log (client-go logs the request line and headers, then
/// the response headers; 1.32 as plain lines, 1.37 structured): (URL, Accept, Content-Type).
fn exchanges(stderr: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for line in stderr.lines() {
        let url = line
            .split("] GET ")
            .nth(1)
            .or_else(|| line.split("verb=\"GET\" url=\"").nth(1))
            .map(|u| u.split('"').next().unwrap_or(u).trim().to_owned());
        if let Some(url) = url {
            out.push((url, String::new(), String::new()));
        } else if let Some(last) = out.last_mut() {
            if let Some(v) = line.split("Accept: ").nth(1) {
                last.1 = v.trim().to_owned();
            } else if let Some(v) = line.split("Content-Type: ").nth(1) {
                last.2 = v.trim().to_owned();
            }
        }
    }
    out
}

/// The (Accept, Content-Type) of the PodMetricsList request in a `kubectl top pod -v=8` log.
fn pod_list_exchange(stderr: &str) -> Option<(String, String)> {
    exchanges(stderr)
        .into_iter()
        .find(|(url, _, _)| url.contains("/apis/metrics.k8s.io/") && url.contains("/pods"))
        .map(|(_, accept, content_type)| (accept, content_type))
}

/// A canonical quantity string in billionths (`4710169n`, `5m`, `12240Ki`, `1k`, `3`).
fn nano_units(q: &str) -> u128 {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (digits, suffix) = q.split_at(split);
    let n: u128 = digits.parse().unwrap_or_else(|_| panic!("quantity {q}"));
    let scale: u128 = match suffix {
        "n" => 1,
        "u" => 1_000,
        "m" => 1_000_000,
        "" => 1_000_000_000,
        "k" => 1_000_000_000_000,
        "M" => 1_000_000_000_000_000,
        "G" => 1_000_000_000_000_000_000,
        "Ki" => 1_000_000_000 << 10,
        "Mi" => 1_000_000_000 << 20,
        "Gi" => 1_000_000_000 << 30,
        "Ti" => 1_000_000_000 << 40,
        _ => panic!("quantity {q}"),
    };
    n * scale
}

/// `kubectl top`'s cells for a usage: CPU `ceil(milli)m`, memory `floor(MiB)Mi`.
fn top_cells(cpu_nano: u128, memory_nano: u128) -> (String, String) {
    let memory_bytes = memory_nano / 1_000_000_000;
    (
        format!("{}m", cpu_nano.div_ceil(1_000_000)),
        format!("{}Mi", memory_bytes >> 20),
    )
}

/// `kubectl top pod -A` rows as JSON says they should be: (namespace, name, cpu, memory),
/// each pod the sum of its containers.
fn top_pods_from_json(list: &Value) -> BTreeSet<(String, String, String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let (cpu, memory) =
                p["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .fold((0u128, 0u128), |(c, m), x| {
                        (
                            c + nano_units(x["usage"]["cpu"].as_str().unwrap()),
                            m + nano_units(x["usage"]["memory"].as_str().unwrap()),
                        )
                    });
            let (cpu, memory) = top_cells(cpu, memory);
            (
                p["metadata"]["namespace"].as_str().unwrap().to_owned(),
                p["metadata"]["name"].as_str().unwrap().to_owned(),
                cpu,
                memory,
            )
        })
        .collect()
}

/// `kubectl top` asks for protobuf by default (`--use-protocol-buffers=true`): through the
/// simulated aggregator it gets protobuf, and shows the numbers the JSON answer holds, and
/// the same as with `--use-protocol-buffers=false`, for kubectl 1.32 (v1beta1) and 1.37 (v1).
///
/// Both releases' generated metrics clientset sends `Accept:
/// application/vnd.kubernetes.protobuf,application/json` when the flag is false (it only drops
/// `*/*`), so a server that has protobuf serves protobuf either way, as metrics-server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_protobuf_matches_json() {
    let c = start(ClusterConfig {
        nodes: 3,
        pods_per_node: 6,
        containers: 3,
        seed: 11,
        ..ClusterConfig::default()
    })
    .await;
    wait_complete(&c).await;
    let (sel_ns, sel_app) = c
        .objects()
        .all(conformance::objects::Kind::Pod)
        .iter()
        .find_map(|p| {
            let ns = p["metadata"]["namespace"].as_str()?;
            let app = p["metadata"]["labels"]["app"].as_str()?;
            (ns != E2E_NAMESPACE).then(|| (ns.to_owned(), app.to_owned()))
        })
        .unwrap();
    let selector = format!("app={sel_app}");
    let commands: [Vec<&str>; 5] = [
        vec!["top", "node"],
        vec!["top", "node", "--sort-by=cpu"],
        vec!["top", "pod", "-A"],
        vec!["top", "pod", "-n", E2E_NAMESPACE, "--containers"],
        // The HPA's shape: one namespace and a label selector.
        vec!["top", "pod", "-n", &sel_ns, "-l", &selector],
    ];
    for k in Kubectl::ALL {
        let version = if k == Kubectl::V1_32 { "v1beta1" } else { "v1" };
        // What kubectl asks for and gets, by the flag.
        for (extra, want_accept) in [
            (None, "application/vnd.kubernetes.protobuf, */*"),
            (
                Some("--use-protocol-buffers=false"),
                "application/vnd.kubernetes.protobuf,application/json",
            ),
        ] {
            let mut args = vec!["top", "pod", "-A", "-v=8"];
            args.extend(extra);
            let out = c.kubectl(k, &args).await.unwrap();
            assert!(out.success, "{k} {}: {}", args.join(" "), out.stderr);
            assert_eq!(
                pod_list_exchange(&out.stderr),
                Some((
                    want_accept.to_owned(),
                    "application/vnd.kubernetes.protobuf".to_owned()
                )),
                "{k} {}:\n{}",
                args.join(" "),
                out.stderr
            );
        }
        // `kubectl top pod -A` (decoded from protobuf) shows what the JSON answer holds. The
        // workloads move with every scrape: retry until both reads fall between two scrapes.
        eventually(
            &format!("{k} top pod -A to match the JSON list"),
            Duration::from_secs(60),
            || async {
                let json = raw(&c, k, &format!("/apis/metrics.k8s.io/{version}/pods")).await?;
                let out = kubectl(&c, k, &["top", "pod", "-A"]).await?;
                let shown: BTreeSet<(String, String, String, String)> =
                    rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"])?
                        .into_iter()
                        .map(|r| (r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone()))
                        .collect();
                let want = top_pods_from_json(&json);
                if shown == want {
                    Ok(())
                } else {
                    Err(format!("shown:\n{out}\nwant from JSON: {want:?}"))
                }
            },
        )
        .await;
        // Every command shows the same with and without the flag.
        for args in &commands {
            let json_args: Vec<&str> = args
                .iter()
                .copied()
                .chain(["--use-protocol-buffers=false"])
                .collect();
            eventually(
                &format!("{k} {} to agree with the flag off", args.join(" ")),
                Duration::from_secs(60),
                || async {
                    let proto = kubectl(&c, k, args).await?;
                    let json = kubectl(&c, k, &json_args).await?;
                    if proto.lines().count() < 2 {
                        return Err(format!("no rows:\n{proto}"));
                    }
                    if proto == json {
                        Ok(())
                    } else {
                        Err(format!("default:\n{proto}\nflag off:\n{json}"))
                    }
                },
            )
            .await;
        }
        // `kubectl get --raw` still gets JSON.
        let list = raw(&c, k, &format!("/apis/metrics.k8s.io/{version}/pods"))
            .await
            .unwrap();
        assert_eq!(list["kind"], "PodMetricsList");
    }
    c.stop().await.unwrap();
}

/// A container's usage in a PodMetrics: (cpu cores, memory bytes).
fn container_usage(pod: &Value, name: &str) -> Option<(f64, f64)> {
    pod["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| {
            (
                quantity(c["usage"]["cpu"].as_str().unwrap()),
                quantity(c["usage"]["memory"].as_str().unwrap()),
            )
        })
}

fn container_names(pod: &Value) -> BTreeSet<String> {
    pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

const READYZ: &str = "[+]ping ok
[+]log ok
[+]poststarthook/max-in-flight-filter ok
[+]poststarthook/storage-object-count-tracker-hook ok
[+]metric-storage-ready ok
[+]metric-informer-sync ok
[+]metadata-informer-sync ok
[+]shutdown ok
readyz check passed
";

const LIVEZ: &str = "[+]ping ok
[+]log ok
[+]poststarthook/max-in-flight-filter ok
[+]poststarthook/storage-object-count-tracker-hook ok
[+]metric-collection-timely ok
[+]metadata-informer-sync ok
livez check passed
";

/// The checks of metrics-server's e2e suite (metrics-server.md §6.3), asserted for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_server_e2e_checks() {
    let c = start(ClusterConfig {
        nodes: 3,
        pods_per_node: 3,
        seed: 11,
        ..ClusterConfig::default()
    })
    .await;
    wait_complete(&c).await;
    let scraped = c.scraped_node_names();

    for k in Kubectl::ALL {
        let v = k.metrics_version();
        let pod_path =
            |name: &str| format!("/apis/metrics.k8s.io/{v}/namespaces/{E2E_NAMESPACE}/pods/{name}");

        // 1. The pod list is not empty; 2. every scraped node answers.
        let pods = raw(&c, k, &format!("/apis/metrics.k8s.io/{v}/pods"))
            .await
            .unwrap();
        assert!(!pods["items"].as_array().unwrap().is_empty());
        for node in &scraped {
            let m = raw(&c, k, &format!("/apis/metrics.k8s.io/{v}/nodes/{node}"))
                .await
                .unwrap();
            assert_eq!(m["metadata"]["name"], node.as_str());
        }

        // 3. The cpu-consumer burns 50m: one container, within 10%.
        let pod = raw(&c, k, &pod_path(CPU_CONSUMER)).await.unwrap();
        assert_eq!(
            container_names(&pod),
            BTreeSet::from(["cpu-consumer".to_owned()])
        );
        let (cpu, _) = container_usage(&pod, "cpu-consumer").unwrap();
        assert_close(
            &format!("{k} cpu-consumer cores"),
            cpu,
            CPU_CONSUMER_CORES,
            CPU_CONSUMER_CORES * 0.1,
        );

        // 4. The memory-consumer holds 50 MiB: one container, within 5 MiB of 50 MiB and of
        // what its kubelet reported at the metric's timestamp.
        let pod = raw(&c, k, &pod_path(MEMORY_CONSUMER)).await.unwrap();
        assert_eq!(
            container_names(&pod),
            BTreeSet::from(["memory-consumer".to_owned()])
        );
        let (_, memory) = container_usage(&pod, "memory-consumer").unwrap();
        assert_close(
            &format!("{k} memory-consumer MiB"),
            memory / MIB,
            MEMORY_CONSUMER_BYTES as f64 / MIB,
            5.0,
        );
        let at = unix_ms(pod["timestamp"].as_str().unwrap());
        let (_, sim) = c.pod_model(E2E_NAMESPACE, MEMORY_CONSUMER).unwrap();
        let reported = sim.containers[0].memory_bytes(at + 500) as f64;
        assert_close(
            &format!("{k} memory vs kubelet"),
            memory,
            reported,
            5.0 * MIB,
        );
        // And for every container of every generic pod on the first node.
        let all = raw(&c, k, &format!("/apis/metrics.k8s.io/{v}/pods"))
            .await
            .unwrap();
        let model = c.node_model(&scraped[0]).unwrap();
        let mut compared = 0;
        for item in all["items"].as_array().unwrap() {
            let Some(sim) = model.pods.iter().find(|p| {
                item["metadata"]["namespace"] == p.namespace.as_str()
                    && item["metadata"]["name"] == p.name.as_str()
            }) else {
                continue;
            };
            let at = unix_ms(item["timestamp"].as_str().unwrap());
            for container in &sim.containers {
                let (_, memory) = container_usage(item, &container.name)
                    .unwrap_or_else(|| panic!("{k}: {} missing in {item}", container.name));
                let reported = container.memory_bytes(at + 500) as f64;
                assert_close(
                    &format!("{k} {}/{} memory", sim.name, container.name),
                    memory,
                    reported,
                    5.0 * MIB,
                );
                compared += 1;
            }
        }
        assert!(compared >= 5, "compared {compared} containers");

        // 5. The pod with a finished init container shows only its app container, with usage.
        let pod = raw(&c, k, &pod_path(INIT_CONTAINER_POD)).await.unwrap();
        assert_eq!(
            container_names(&pod),
            BTreeSet::from([INIT_CONTAINER_POD.to_owned()])
        );
        let (cpu, memory) = container_usage(&pod, INIT_CONTAINER_POD).unwrap();
        assert!(cpu > 0.0 && memory > 0.0, "{pod}");

        // 6. Two regular containers and 7. a native sidecar: both, each with usage.
        for (name, containers) in [
            (SIDECAR_POD, [SIDECAR_POD, "sidecar-container"]),
            (
                NATIVE_SIDECAR_POD,
                [NATIVE_SIDECAR_POD, "sidecar-container"],
            ),
        ] {
            let pod = raw(&c, k, &pod_path(name)).await.unwrap();
            assert_eq!(
                container_names(&pod),
                containers.iter().map(|s| (*s).to_owned()).collect(),
                "{k} {name}"
            );
            for container in containers {
                let (cpu, memory) = container_usage(&pod, container).unwrap();
                assert!(cpu > 0.0 && memory > 0.0, "{k} {name}/{container}: {pod}");
            }
        }

        // 11. Nodes excluded by --node-selector answer 404.
        let skipped: Vec<String> = c
            .node_names()
            .into_iter()
            .filter(|n| c.is_skipped(n))
            .collect();
        assert_eq!(skipped.len(), 1, "the default topology skips one node");
        for node in skipped {
            let out = c
                .kubectl(
                    k,
                    &[
                        "get",
                        "--raw",
                        &format!("/apis/metrics.k8s.io/{v}/nodes/{node}"),
                    ],
                )
                .await
                .unwrap();
            assert!(!out.success, "{k}: {node} has metrics: {}", out.stdout);
            assert!(
                out.stderr.contains("NotFound") || out.stderr.contains("not found"),
                "{k}: {}",
                out.stderr
            );
            let out = c.kubectl(k, &["top", "node", &node]).await.unwrap();
            assert!(!out.success, "{k} top node {node}: {}", out.stdout);
        }
    }

    // 8, 9. /readyz?verbose and /livez?verbose, anonymously as the kubelet probes.
    let (status, body) = c.server_get("/readyz?verbose", false).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, READYZ);
    let (status, body) = c.server_get("/livez?verbose", false).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, LIVEZ);

    // 10. /metrics: exactly the six metrics_server_* families.
    let (status, body) = c.server_get("/metrics", true).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let families: BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("metrics_server_"))
        .collect();
    assert_eq!(
        families,
        BTreeSet::from([
            "metrics_server_api_metric_freshness_seconds",
            "metrics_server_kubelet_last_request_time_seconds",
            "metrics_server_kubelet_request_duration_seconds",
            "metrics_server_kubelet_request_total",
            "metrics_server_manager_tick_duration_seconds",
            "metrics_server_storage_points",
        ]),
        "{body}"
    );
    // /metrics is not always-allowed: anonymous callers are refused.
    let (status, _) = c.server_get("/metrics", false).await.unwrap();
    assert!(
        status == 401 || status == 403,
        "anonymous /metrics: {status}"
    );
    c.stop().await.unwrap();
}

/// What users meet when things change: a kubelet that goes down takes only its node and
/// pods away (and they come back), a deleted pod disappears, a new node appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_down_pod_deleted_node_added() {
    let c = start(ClusterConfig {
        nodes: 3,
        pods_per_node: 4,
        seed: 23,
        node_labels: Vec::new(),
        node_selector: String::new(),
        e2e_workloads: false,
        ..ClusterConfig::default()
    })
    .await;
    wait_complete(&c).await;
    let nodes = c.node_names();
    let down = nodes[1].clone();
    let pods_of = |node: &str| -> BTreeSet<(String, String)> {
        c.pods()
            .into_iter()
            .filter(|(_, _, n)| n == node)
            .map(|(ns, name, _)| (ns, name))
            .collect()
    };
    let down_pods = pods_of(&down);
    let all_pods = expected_pods(&c);
    let (victim_ns, victim, _) = c
        .pods()
        .into_iter()
        .find(|(_, _, n)| *n == nodes[0])
        .unwrap();
    let resolution = c.config().resolution;
    let slow = resolution * 6 + Duration::from_secs(20);

    // All at once: a kubelet goes down, a pod is deleted, a node joins.
    c.set_kubelet_fault(&down, Fault::Down).unwrap();
    assert!(c.delete_pod(&victim_ns, &victim));
    let added = c
        .add_node("node-new", &[("pool", "burst")], 3)
        .await
        .unwrap();
    let added_pods: BTreeSet<(String, String)> = added
        .iter()
        .map(|p| (p.namespace().to_owned(), p.name().to_owned()))
        .collect();

    for k in Kubectl::ALL {
        eventually(
            &format!("{k}: {victim} to disappear"),
            resolution * 2,
            || async {
                let pods = raw(
                    &c,
                    k,
                    &format!("/apis/metrics.k8s.io/{}/pods", k.metrics_version()),
                )
                .await?;
                let listed = listed_pods(&pods);
                if listed.iter().any(|(_, n)| *n == victim) {
                    return Err(format!("{victim} still listed"));
                }
                Ok(())
            },
        )
        .await;
        let out = c
            .kubectl(
                k,
                &[
                    "get",
                    "--raw",
                    &format!(
                        "/apis/metrics.k8s.io/{}/namespaces/{victim_ns}/pods/{victim}",
                        k.metrics_version()
                    ),
                ],
            )
            .await
            .unwrap();
        assert!(
            !out.success && out.stderr.contains("not found"),
            "{k}: {out:?}"
        );
    }

    // The down node and its pods go away, the new node and its pods come; the others stay.
    let mut want_nodes: Vec<String> = nodes.iter().filter(|n| **n != down).cloned().collect();
    want_nodes.push("node-new".to_owned());
    want_nodes.sort();
    let mut want_pods: BTreeSet<(String, String)> =
        all_pods.difference(&down_pods).cloned().collect();
    want_pods.remove(&(victim_ns.clone(), victim.clone()));
    want_pods.extend(added_pods.iter().cloned());
    eventually(
        "the down node to go and the new node to come",
        slow,
        || async {
            let nodes = raw(&c, Kubectl::V1_37, "/apis/metrics.k8s.io/v1/nodes").await?;
            let pods = raw(&c, Kubectl::V1_37, "/apis/metrics.k8s.io/v1/pods").await?;
            let got_nodes = listed_nodes(&nodes);
            let got_pods: BTreeSet<_> = listed_pods(&pods).into_iter().collect();
            // Nodes that stay up never vanish meanwhile.
            for n in nodes_that_stay(&want_nodes) {
                assert!(got_nodes.contains(&n), "{n} vanished: {got_nodes:?}");
            }
            if got_nodes != want_nodes || got_pods != want_pods {
                return Err(format!("nodes {got_nodes:?}, pods {got_pods:?}"));
            }
            Ok(())
        },
    )
    .await;
    for k in Kubectl::ALL {
        let out = kubectl(&c, k, &["top", "node"]).await.unwrap();
        let table = rows(
            &out,
            &["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        )
        .unwrap();
        for row in &table {
            let known = row[1] != "<unknown>";
            assert_eq!(known, want_nodes.contains(&row[0]), "{k}:\n{out}");
        }
        assert!(table.iter().any(|r| r[0] == "node-new"), "{k}:\n{out}");
        let out = kubectl(&c, k, &["top", "pod", "-A"]).await.unwrap();
        let table = rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
        let got: BTreeSet<(String, String)> =
            table.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        assert_eq!(got, want_pods, "{k}:\n{out}");
    }

    // The kubelet comes back: so do its node and pods.
    c.set_kubelet_fault(&down, Fault::Healthy).unwrap();
    let mut back_nodes = want_nodes.clone();
    back_nodes.push(down.clone());
    back_nodes.sort();
    let back_pods: BTreeSet<_> = want_pods.union(&down_pods).cloned().collect();
    eventually("the node to come back", slow, || async {
        let nodes = raw(&c, Kubectl::V1_32, "/apis/metrics.k8s.io/v1beta1/nodes").await?;
        let pods = raw(&c, Kubectl::V1_32, "/apis/metrics.k8s.io/v1beta1/pods").await?;
        let got_nodes = listed_nodes(&nodes);
        let got_pods: BTreeSet<_> = listed_pods(&pods).into_iter().collect();
        if got_nodes != back_nodes || got_pods != back_pods {
            return Err(format!("nodes {got_nodes:?}, pods {got_pods:?}"));
        }
        Ok(())
    })
    .await;
    c.stop().await.unwrap();
}

/// The nodes that were healthy from the start (not the new one).
fn nodes_that_stay(want: &[String]) -> Vec<String> {
    want.iter().filter(|n| *n != "node-new").cloned().collect()
}

/// The newest proxied answer for `path`: its Content-Encoding as the client got it.
fn last_encoding(c: &Cluster, path: &str) -> Option<String> {
    c.control_plane()
        .aggregator()
        .proxied()
        .into_iter()
        .rev()
        .find(|p| p.path == path)
        .unwrap_or_else(|| panic!("{path} was never proxied"))
        .content_encoding
}

/// Answers larger than 128 KiB come back gzip through the aggregator (which passes the
/// encoding through, as kube-aggregator does), and kubectl, whose Go transport asks for gzip
/// and decompresses, reads them as before; small answers stay identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_are_gzip_and_kubectl_reads_them() {
    // Large enough that kubectl top's protobuf answer passes 128 KiB too, not only the JSON.
    let c = start(ClusterConfig {
        nodes: 10,
        pods_per_node: 100,
        containers: 3,
        seed: 11,
        ..ClusterConfig::default()
    })
    .await;
    wait_complete(&c).await;
    let want_pods = expected_pods(&c);
    assert!(want_pods.len() > 600, "{}", want_pods.len());
    for k in Kubectl::ALL {
        // kubectl 1.32 lists v1beta1, 1.37 v1.
        let version = match k {
            Kubectl::V1_32 => "v1beta1",
            _ => "v1",
        };
        let pods = format!("/apis/metrics.k8s.io/{version}/pods");
        let out = kubectl(&c, k, &["top", "pod", "-A"]).await.unwrap();
        let table = rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]).unwrap();
        let got: BTreeSet<(String, String)> =
            table.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        assert_eq!(got, want_pods, "{k} top pod -A");
        assert_eq!(
            last_encoding(&c, &pods).as_deref(),
            Some("gzip"),
            "{k} {pods}"
        );

        for v in ["v1beta1", "v1"] {
            let path = format!("/apis/metrics.k8s.io/{v}/pods");
            let list = raw(&c, k, &path).await.unwrap();
            let got: BTreeSet<_> = listed_pods(&list).into_iter().collect();
            assert_eq!(got, want_pods, "{k} get --raw {path}");
            assert_eq!(
                last_encoding(&c, &path).as_deref(),
                Some("gzip"),
                "{k} {path}"
            );
        }
        // A small answer: identity.
        let path = "/apis/metrics.k8s.io/v1beta1/nodes";
        let nodes = raw(&c, k, path).await.unwrap();
        assert_eq!(listed_nodes(&nodes), c.scraped_node_names());
        assert_eq!(last_encoding(&c, path), None, "{k} {path}");
    }
    c.stop().await.unwrap();
}
