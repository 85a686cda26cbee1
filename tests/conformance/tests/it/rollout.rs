//! A rolling update of a two-replica server while clients keep asking: `kubectl top pod -A`
//! and `kubectl top node` with kubectl 1.32 and 1.37, and the HPA's namespaced, label-selected
//! pod list through the aggregator. Replica 0 is restarted (its endpoint removed, graceful
//! shutdown, a new pod on a new port), then, once the new pod is ready, replica 1. No request
//! may fail, and nothing served before the rollout may be missing from any answer after it:
//! a replica that reports ready before it has scraped every node would drop pods and nodes
//! from the answers routed to it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use conformance::aggregator::ReadinessProbe;
use conformance::cluster::{Cluster, ClusterConfig, Kubectl};
use conformance::controlplane::User;
use conformance::objects::Kind;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The HPA controller's identity (kube-controller-manager with `--use-service-account-credentials`).
const HPA_USER: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
const HPA_TOKEN: &str = "hpa-token";
/// Pacing between one client's iterations (not a synchronisation).
const PACE: Duration = Duration::from_millis(100);

/// What an answer lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    /// `kubectl top pod -A`: (namespace, name).
    AllPods,
    /// `kubectl top node`: nodes with metrics.
    Nodes,
    /// The HPA's list: pod names in its namespace matching its selector.
    SelectedPods,
}

/// One answer a client got.
struct Answer {
    client: &'static str,
    what: What,
    /// Whether the request began after the rollout started.
    during_rollout: bool,
    /// When it was answered, seconds since the record began.
    at_s: f64,
    /// What it listed, or why it failed.
    result: Result<BTreeSet<String>, String>,
}

/// Every answer so far, and a counter that moves with each.
struct Record {
    answers: Mutex<Vec<Answer>>,
    count: watch::Sender<usize>,
    rollout: AtomicBool,
    began: Instant,
}

impl Record {
    fn new() -> Self {
        Record {
            answers: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
            rollout: AtomicBool::new(false),
            began: Instant::now(),
        }
    }

    /// Seconds since the record began.
    fn now_s(&self) -> f64 {
        self.began.elapsed().as_secs_f64()
    }

    /// Requests from now on count as during the rollout; when that was.
    fn start_rollout(&self) -> f64 {
        self.rollout.store(true, Ordering::SeqCst);
        self.now_s()
    }

    /// Records one answer, given now.
    fn answered(
        &self,
        client: &'static str,
        what: What,
        during_rollout: bool,
        result: Result<BTreeSet<String>, String>,
    ) {
        self.push(Answer {
            client,
            what,
            during_rollout,
            at_s: self.now_s(),
            result,
        });
    }

    fn push(&self, answer: Answer) {
        let n = {
            let mut answers = self.answers.lock();
            answers.push(answer);
            answers.len()
        };
        self.count.send_replace(n);
    }

    fn len(&self) -> usize {
        self.answers.lock().len()
    }

    /// The fewest answers any client got at index `since` or later.
    fn fewest_since(&self, clients: &[&str], since: usize) -> usize {
        let answers = self.answers.lock();
        clients
            .iter()
            .map(|c| {
                answers
                    .iter()
                    .skip(since)
                    .filter(|a| a.client == *c)
                    .count()
            })
            .min()
            .unwrap_or(0)
    }

    /// Waits until every client has `n` more answers after the first `since`.
    async fn wait_each(&self, clients: &[&str], since: usize, n: usize, what: &str) {
        let mut count = self.count.subscribe();
        let waited = tokio::time::timeout(
            Duration::from_secs(60),
            count.wait_for(|_| self.fewest_since(clients, since) >= n),
        )
        .await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "timed out waiting for {n} answers per client {what}"
        );
    }
}

/// Consecutive answers of one client and kind that lacked something.
struct Run {
    from_s: f64,
    to_s: f64,
    answers: usize,
    /// The most items missing from one answer.
    most: usize,
    /// What the first answer lacked.
    example: BTreeSet<String>,
    /// Whether the latest answer still lacked something.
    open: bool,
}

impl Run {
    fn new(at_s: f64, gone: BTreeSet<String>) -> Self {
        Run {
            from_s: at_s,
            to_s: at_s,
            answers: 1,
            most: gone.len(),
            example: gone,
            open: true,
        }
    }

    fn extend(&mut self, at_s: f64, gone: &BTreeSet<String>) {
        self.to_s = at_s;
        self.answers += 1;
        self.most = self.most.max(gone.len());
    }
}

/// The rows of a kubectl table under `header`; no rows when it printed nothing.
fn rows(out: &str, header: &[&str]) -> Result<Vec<Vec<String>>, String> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return Ok(Vec::new());
    };
    let first: Vec<&str> = first.split_whitespace().collect();
    if first != header {
        return Err(format!("header {first:?}, want {header:?}:\n{out}"));
    }
    Ok(lines
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect())
}

/// One kubectl run, parsed.
async fn kubectl(c: &Cluster, k: Kubectl, what: What) -> Result<BTreeSet<String>, String> {
    let args: &[&str] = match what {
        What::AllPods => &["top", "pod", "-A"],
        What::Nodes => &["top", "node"],
        What::SelectedPods => unreachable!("the HPA list is not a kubectl run"),
    };
    let out = c.kubectl(k, args).await.map_err(|e| e.to_string())?.ok()?;
    match what {
        What::AllPods => Ok(
            rows(&out, &["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"])?
                .into_iter()
                .map(|r| format!("{}/{}", r[0], r[1]))
                .collect(),
        ),
        // A node without metrics is printed with `<unknown>` values.
        _ => Ok(rows(
            &out,
            &["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        )?
        .into_iter()
        .filter(|r| r.get(1).is_some_and(|v| v != "<unknown>"))
        .map(|r| r[0].clone())
        .collect()),
    }
}

/// Runs `kubectl top pod -A` and `kubectl top node` with `k` until `done`.
async fn kubectl_loop(c: Arc<Cluster>, k: Kubectl, record: Arc<Record>, done: CancellationToken) {
    let client = match k {
        Kubectl::V1_32 => "kubectl 1.32",
        Kubectl::V1_37 => "kubectl 1.37",
    };
    while !done.is_cancelled() {
        for what in [What::AllPods, What::Nodes] {
            let during_rollout = record.rollout.load(Ordering::SeqCst);
            let result = kubectl(&c, k, what).await;
            record.answered(client, what, during_rollout, result);
        }
        if !pace(&done).await {
            break;
        }
    }
}

/// Waits [`PACE`] between a client's iterations; false once `done`.
async fn pace(done: &CancellationToken) -> bool {
    tokio::select! {
        () = done.cancelled() => false,
        () = tokio::time::sleep(PACE) => true,
    }
}

/// The HPA's list of the pods of one Deployment, through the aggregator, until `done`.
async fn hpa_loop(
    c: Arc<Cluster>,
    namespace: String,
    app: String,
    record: Arc<Record>,
    done: CancellationToken,
) {
    let cp = c.control_plane();
    let client = conformance::https::client::<Empty<Bytes>>(
        &tls::client::Verify::Roots(vec![cp.cluster_ca().cert().clone()]),
        None,
    )
    .unwrap();
    let url = format!(
        "{}/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?labelSelector=app%3D{app}",
        cp.url()
    );
    while !done.is_cancelled() {
        let during_rollout = record.rollout.load(Ordering::SeqCst);
        let req = Request::get(&url)
            .header("authorization", format!("Bearer {HPA_TOKEN}"))
            .header("accept", "application/json")
            .header(
                "user-agent",
                format!(
                    "kube-controller-manager/v1.37.0 (linux/amd64) kubernetes/0000000/{HPA_USER}"
                ),
            )
            .body(Empty::new())
            .unwrap();
        let result = async {
            let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status != StatusCode::OK {
                return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
            }
            let list: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            Ok(list["items"]
                .as_array()
                .ok_or("no items")?
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                .collect())
        }
        .await;
        record.answered("hpa", What::SelectedPods, during_rollout, result);
        if !pace(&done).await {
            break;
        }
    }
}

/// Polls replica `index` directly until it lists every pod of `pods` and every node of
/// `nodes` (before the rollout, so that the baseline is the whole cluster).
async fn wait_complete(
    c: &Cluster,
    index: usize,
    pods: &BTreeSet<String>,
    nodes: &BTreeSet<String>,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = |path: &'static str, pods: bool| async move {
            let (status, body) = c.replica_get(index, path, true).await.ok()?;
            let list: Value = serde_json::from_str(&body).ok()?;
            (status == StatusCode::OK).then_some(())?;
            Some(
                list["items"]
                    .as_array()?
                    .iter()
                    .map(|i| {
                        let name = i["metadata"]["name"].as_str().unwrap_or("");
                        if pods {
                            let ns = i["metadata"]["namespace"].as_str().unwrap_or("");
                            format!("{ns}/{name}")
                        } else {
                            name.to_owned()
                        }
                    })
                    .collect::<BTreeSet<String>>(),
            )
        };
        let got_pods = listed("/apis/metrics.k8s.io/v1/pods", true).await;
        let got_nodes = listed("/apis/metrics.k8s.io/v1/nodes", false).await;
        if got_pods.as_ref() == Some(pods) && got_nodes.as_ref() == Some(nodes) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica {index} never served the whole cluster: pods {got_pods:?}, nodes {got_nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `metrics.k8s.io` pod lists replica `index` answered with 200 (its own counter).
async fn pod_lists_served(c: &Cluster, index: usize) -> u64 {
    let (status, body) = c.replica_get(index, "/metrics", true).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    body.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("verb=\"LIST\"")
                && l.contains("group=\"metrics.k8s.io\"")
                && l.contains("resource=\"pods\"")
                && l.contains("code=\"200\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_drops_no_request_and_no_metrics() {
    for k in Kubectl::ALL {
        if let Err(e) = k.require() {
            panic!("{e}");
        }
    }
    let started = Instant::now();
    let c = Arc::new(
        Cluster::start(
            ClusterConfig {
                nodes: 4,
                pods_per_node: 5,
                seed: 11,
                replicas: 2,
                readiness: ReadinessProbe {
                    period: Duration::from_millis(200),
                    ..ReadinessProbe::default()
                },
                // Requests routed just before the endpoint went away still get answers.
                server_args: vec!["--shutdown-delay-duration=1s".to_owned()],
                // A crash-looping container hides its pod for a cycle whatever the rollout
                // does; this test is about the rollout.
                container_restarts: false,
                ..ClusterConfig::default()
            },
            CancellationToken::new(),
        )
        .await
        .unwrap(),
    );
    c.control_plane().add_token(
        HPA_TOKEN,
        User::new(
            HPA_USER,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
            ],
        ),
    );

    // The whole cluster, as every replica must serve it.
    let scraped: BTreeSet<String> = c.scraped_node_names().into_iter().collect();
    let all_pods: BTreeSet<String> = c
        .pods()
        .into_iter()
        .filter(|(_, _, node)| scraped.contains(node))
        .map(|(ns, name, _)| format!("{ns}/{name}"))
        .collect();
    // The HPA's target: the Deployment with the most pods on scraped nodes.
    let mut deployments: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for p in c.objects().all(Kind::Pod) {
        let (Some(ns), Some(name), Some(app), Some(node)) = (
            p["metadata"]["namespace"].as_str(),
            p["metadata"]["name"].as_str(),
            p["metadata"]["labels"]["app"].as_str(),
            p["spec"]["nodeName"].as_str(),
        ) else {
            continue;
        };
        if scraped.contains(node) && p["metadata"]["labels"]["pod-template-hash"].is_string() {
            deployments
                .entry((ns.to_owned(), app.to_owned()))
                .or_default()
                .insert(name.to_owned());
        }
    }
    let ((hpa_ns, hpa_app), hpa_pods) = deployments
        .into_iter()
        .max_by_key(|(_, pods)| pods.len())
        .unwrap();
    for i in 0..c.replicas() {
        wait_complete(&c, i, &all_pods, &scraped).await;
    }
    let ready_s = started.elapsed().as_secs_f64();

    // The clients.
    let record = Arc::new(Record::new());
    let done = CancellationToken::new();
    let mut loops = JoinSet::new();
    for k in Kubectl::ALL {
        loops.spawn(kubectl_loop(c.clone(), k, record.clone(), done.clone()));
    }
    loops.spawn(hpa_loop(
        c.clone(),
        hpa_ns.clone(),
        hpa_app.clone(),
        record.clone(),
        done.clone(),
    ));
    let clients = ["kubectl 1.32", "kubectl 1.37", "hpa"];
    record.wait_each(&clients, 0, 2, "before the rollout").await;

    // The rollout: replica 0, then, once its new pod is ready, replica 1. After each new pod
    // is ready, every client is answered a few more times (half of them by the new pod, and
    // all of them while the other replica restarts).
    let rollout_s = record.start_rollout();
    let mut timeline: Vec<(f64, String)> = Vec::new();
    for i in 0..c.replicas() {
        timeline.push((record.now_s(), format!("restart replica {i}")));
        c.restart_replica(i).await.unwrap();
        timeline.push((
            record.now_s(),
            format!(
                "replica {i} exited and started again at {}",
                c.replica_addr(i).unwrap()
            ),
        ));
        c.wait_replica_ready(i).await.unwrap();
        timeline.push((record.now_s(), format!("replica {i} ready")));
        let since = record.len();
        record
            .wait_each(&clients, since, 4, &format!("after replica {i} is ready"))
            .await;
    }
    timeline.push((record.now_s(), "rollout done".to_owned()));
    done.cancel();
    while let Some(joined) = loops.join_next().await {
        joined.unwrap();
    }

    // What was served before the rollout, per kind of answer; it must be the whole cluster.
    let answers = std::mem::take(&mut *record.answers.lock());
    let mut baseline: BTreeMap<What, BTreeSet<String>> = BTreeMap::new();
    let mut failures = Vec::new();
    for a in answers.iter().filter(|a| !a.during_rollout) {
        match &a.result {
            Ok(seen) => baseline
                .entry(a.what)
                .or_default()
                .extend(seen.iter().cloned()),
            Err(e) => failures.push(format!(
                "{:+.1}s {} {:?}: {e}",
                a.at_s - rollout_s,
                a.client,
                a.what
            )),
        }
    }
    assert_eq!(baseline.get(&What::AllPods), Some(&all_pods));
    assert_eq!(baseline.get(&What::Nodes), Some(&scraped));
    assert_eq!(baseline.get(&What::SelectedPods), Some(&hpa_pods));

    // Every answer after the rollout began: a success that lists all of it. Answers with
    // something missing are reported as runs per client and kind.
    let mut runs: BTreeMap<(&str, What), Vec<Run>> = BTreeMap::new();
    let mut after = 0;
    for a in answers.iter().filter(|a| a.during_rollout) {
        after += 1;
        let gone: BTreeSet<String> = match &a.result {
            Ok(seen) => baseline[&a.what].difference(seen).cloned().collect(),
            Err(e) => {
                failures.push(format!(
                    "{:+.1}s {} {:?}: {e}",
                    a.at_s - rollout_s,
                    a.client,
                    a.what
                ));
                continue;
            }
        };
        let client_runs = runs.entry((a.client, a.what)).or_default();
        match client_runs.last_mut() {
            Some(run) if run.open && !gone.is_empty() => run.extend(a.at_s - rollout_s, &gone),
            Some(run) if run.open => run.open = false,
            _ if !gone.is_empty() => client_runs.push(Run::new(a.at_s - rollout_s, gone)),
            _ => {}
        }
    }
    let baseline = &baseline;
    let missing: Vec<String> = runs
        .iter()
        .flat_map(|((client, what), runs)| {
            runs.iter().map(move |r| {
                format!(
                    "{client} {what:?}: {} answers from {:+.1}s to {:+.1}s lacked up to {} of \
                     {}, e.g. {:?}",
                    r.answers,
                    r.from_s,
                    r.to_s,
                    r.most,
                    baseline[what].len(),
                    r.example.iter().take(4).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    let timeline: Vec<String> = timeline
        .iter()
        .map(|(t, e)| format!("{:+.1}s {e}", t - rollout_s))
        .collect();
    eprintln!(
        "cluster ready and complete after {ready_s:.1}s; {} answers before the rollout, {after} \
         during it; HPA target {hpa_ns}/app={hpa_app} ({} pods)\n{}",
        answers.len() - after,
        hpa_pods.len(),
        timeline.join("\n")
    );
    assert!(
        failures.is_empty() && missing.is_empty(),
        "{} failed requests, {} runs of answers with metrics missing\ntimeline:\n{}\nfailed:\n{}\nmissing:\n{}",
        failures.len(),
        missing.len(),
        timeline.join("\n"),
        failures.join("\n"),
        missing.join("\n")
    );
    // The new pods did serve: replica 0 alone while replica 1 restarted.
    for i in 0..c.replicas() {
        assert!(
            pod_lists_served(&c, i).await > 0,
            "replica {i} served no pod list"
        );
    }
    Arc::try_unwrap(c)
        .expect("every client is done")
        .stop()
        .await
        .unwrap();
}
