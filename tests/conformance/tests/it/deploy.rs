//! The deploy manifests: `kubectl kustomize` renders the base and the overlays (kubectl 1.32
//! and 1.37), and the rendered objects carry what the aggregator, RBAC and the kubelet probes
//! need (metrics-server.md §7, aggregation-contract.md §1.1).
//!
//! Offline, `kubectl apply/create --dry-run=client` still needs a server for discovery, so the
//! rendered YAML is turned into JSON with `kubectl annotate --local -o json` (no server) and
//! checked here structurally.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kubectls() -> Vec<PathBuf> {
    let v137 = root().join("_output/kubectl-1.37/bin/kubectl");
    assert!(
        v137.exists(),
        "kubectl 1.37 missing: run tests/conformance/install-kubectl.sh"
    );
    vec![PathBuf::from("/usr/bin/kubectl"), v137]
}

fn run(kubectl: &Path, home: &Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new(kubectl)
        .env("HOME", home)
        .env("KUBECONFIG", home.join("none"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{kubectl:?} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every object `kubectl kustomize <dir>` renders, as JSON.
fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let path = root().join(dir);
    let yaml = run(
        kubectl,
        home.path(),
        &["kustomize", path.to_str().unwrap()],
        None,
    );
    let json = run(
        kubectl,
        home.path(),
        &[
            "annotate",
            "--local",
            "-f",
            "-",
            "-o",
            "json",
            "rendered=true",
        ],
        Some(&yaml),
    );
    serde_json::Deserializer::from_slice(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} not rendered"))
}

fn matches(selector: &Value, labels: &Value) -> bool {
    let Some(want) = selector.as_object() else {
        return false;
    };
    !want.is_empty() && want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn binds_service_account(binding: &Value) -> bool {
    binding["subjects"]
        == json!([{"kind": "ServiceAccount", "name": "metrics-server", "namespace": "kube-system"}])
}

#[test]
fn base_renders_what_the_aggregator_and_rbac_need() {
    for kubectl in kubectls() {
        let objects = render(&kubectl, "deploy");
        let mut kinds: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "APIService/v1.metrics.k8s.io",
                "APIService/v1beta1.metrics.k8s.io",
                "ClusterRole/system:aggregated-metrics-reader",
                "ClusterRole/system:metrics-server",
                "ClusterRoleBinding/metrics-server:system:auth-delegator",
                "ClusterRoleBinding/system:metrics-server",
                "Deployment/metrics-server",
                "RoleBinding/metrics-server-auth-reader",
                "Service/metrics-server",
                "ServiceAccount/metrics-server",
            ],
            "{kubectl:?}"
        );

        // APIServices: both versions on one Service, v1 preferred.
        let beta = find(&objects, "APIService", "v1beta1.metrics.k8s.io");
        let ga = find(&objects, "APIService", "v1.metrics.k8s.io");
        for (a, version) in [(beta, "v1beta1"), (ga, "v1")] {
            assert_eq!(a["apiVersion"], "apiregistration.k8s.io/v1");
            assert_eq!(a["spec"]["group"], "metrics.k8s.io");
            assert_eq!(a["spec"]["version"], version);
            assert_eq!(
                a["spec"]["service"],
                json!({"name": "metrics-server", "namespace": "kube-system"})
            );
            assert_eq!(a["spec"]["insecureSkipTLSVerify"], true);
            assert_eq!(a["spec"]["groupPriorityMinimum"], 100);
        }
        assert!(ga["spec"]["versionPriority"].as_i64() >= beta["spec"]["versionPriority"].as_i64());

        // RBAC (metrics-server.md §7.2).
        let reader = find(&objects, "ClusterRole", "system:aggregated-metrics-reader");
        for role in ["view", "edit", "admin"] {
            assert_eq!(
                reader["metadata"]["labels"]
                    [format!("rbac.authorization.k8s.io/aggregate-to-{role}")],
                "true"
            );
        }
        assert_eq!(
            reader["rules"],
            json!([{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}])
        );
        let own = find(&objects, "ClusterRole", "system:metrics-server");
        assert_eq!(
            own["rules"],
            json!([
                {"apiGroups": [""], "resources": ["nodes/metrics", "nodes/stats"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
            ])
        );
        let auth_reader = find(&objects, "RoleBinding", "metrics-server-auth-reader");
        assert_eq!(auth_reader["metadata"]["namespace"], "kube-system");
        assert_eq!(auth_reader["roleRef"]["kind"], "Role");
        assert_eq!(
            auth_reader["roleRef"]["name"],
            "extension-apiserver-authentication-reader"
        );
        let delegator = find(
            &objects,
            "ClusterRoleBinding",
            "metrics-server:system:auth-delegator",
        );
        assert_eq!(delegator["roleRef"]["name"], "system:auth-delegator");
        let own_binding = find(&objects, "ClusterRoleBinding", "system:metrics-server");
        assert_eq!(own_binding["roleRef"]["name"], "system:metrics-server");
        for b in [auth_reader, delegator, own_binding] {
            assert!(binds_service_account(b), "{b}");
        }

        // Deployment and Service fit together.
        let deploy = find(&objects, "Deployment", "metrics-server");
        let pod = &deploy["spec"]["template"];
        let labels = &pod["metadata"]["labels"];
        assert!(matches(&deploy["spec"]["selector"]["matchLabels"], labels));
        let service = find(&objects, "Service", "metrics-server");
        assert_eq!(service["metadata"]["namespace"], "kube-system");
        assert!(matches(&service["spec"]["selector"], labels));
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": "https", "appProtocol": "https"}])
        );
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "metrics-server");
        assert_eq!(spec["priorityClassName"], "system-cluster-critical");
        assert_eq!(
            deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
        let c = &spec["containers"][0];
        assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
        assert_eq!(
            c["ports"],
            json!([{"name": "https", "containerPort": 10250, "protocol": "TCP"}])
        );
        for arg in [
            "--cert-dir=/tmp",
            "--secure-port=10250",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            "--kubelet-use-node-status-port",
            "--metric-resolution=15s",
            "--shutdown-delay-duration=5s",
        ] {
            assert!(c["args"].as_array().unwrap().contains(&json!(arg)), "{arg}");
        }
        for (probe, path, period) in [
            ("readinessProbe", "/readyz", 2),
            ("livenessProbe", "/livez", 10),
        ] {
            let p = &c[probe];
            assert_eq!(
                p["httpGet"],
                json!({"path": path, "port": "https", "scheme": "HTTPS"}),
                "{probe}"
            );
            assert_eq!(
                (p["periodSeconds"].as_i64(), p["failureThreshold"].as_i64()),
                (Some(period), Some(3)),
                "{probe}"
            );
        }
        // Probed from the start: /readyz itself says when the cluster is served.
        assert_eq!(c["readinessProbe"]["initialDelaySeconds"], json!(null));
        assert_eq!(
            c["securityContext"],
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                   "readOnlyRootFilesystem": true, "runAsNonRoot": true, "runAsUser": 65534,
                   "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "20m", "memory": "64Mi"})
        );
        assert_eq!(c["image"], "metrics-server-rs:dev");
        // --cert-dir=/tmp must be writable under a read-only root: an emptyDir at /tmp.
        let mount = &c["volumeMounts"][0];
        assert_eq!(mount["mountPath"], "/tmp");
        let volume = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        assert_eq!(volume["emptyDir"], json!({}));
    }
}

#[test]
fn ha_overlay_spreads_two_replicas_with_a_budget() {
    for kubectl in kubectls() {
        let objects = render(&kubectl, "deploy/overlays/ha");
        let deploy = find(&objects, "Deployment", "metrics-server");
        assert_eq!(deploy["spec"]["replicas"], 2);
        assert_eq!(
            deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            1
        );
        let labels = &deploy["spec"]["template"]["metadata"]["labels"];
        let terms = &deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(terms.as_array().map(Vec::len), Some(1));
        assert_eq!(terms[0]["topologyKey"], "kubernetes.io/hostname");
        assert!(matches(&terms[0]["labelSelector"]["matchLabels"], labels));
        // The base is intact underneath.
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"],
            65534
        );
        let pdb = find(&objects, "PodDisruptionBudget", "metrics-server");
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["metadata"]["namespace"], "kube-system");
        assert_eq!(pdb["spec"]["minAvailable"], 1);
        assert!(matches(&pdb["spec"]["selector"]["matchLabels"], labels));
        assert_eq!(objects.len(), 11);
    }
}

#[test]
fn test_overlay_adds_the_kind_flags() {
    for kubectl in kubectls() {
        let objects = render(&kubectl, "deploy/overlays/test");
        let c = &find(&objects, "Deployment", "metrics-server")["spec"]["template"]["spec"]["containers"]
            [0];
        let args = c["args"].as_array().unwrap();
        assert!(args.contains(&json!("--kubelet-insecure-tls")));
        assert!(args.contains(&json!("--node-selector=metrics-server-skip!=true")));
        assert!(args.contains(&json!("--metric-resolution=15s")));
        assert_eq!(c["imagePullPolicy"], "Never");
    }
}

#[test]
fn root_apiservice_yaml_is_the_base_copy() {
    let top = std::fs::read(root().join("apiservice.yaml")).unwrap();
    let base = std::fs::read(root().join("deploy/base/apiservice.yaml")).unwrap();
    assert!(
        top == base,
        "apiservice.yaml and deploy/base/apiservice.yaml differ"
    );
}
