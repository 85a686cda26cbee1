#!/usr/bin/env bash
# End-to-end checks on a real kind cluster, the same ones metrics-server's e2e suite runs
# (reference/metrics-server.md §6), plus an HPA that must reach ScalingActive=True.
#
# Needs: docker (a running engine), kind (>= 0.20), kubectl, curl, python3. Run from anywhere:
#   tests/conformance/kind.sh
# What it does:
#   1. creates a kind cluster "$CLUSTER" with metrics-server's topology: one control plane
#      (kube-apiserver --enable-aggregator-routing=true) and two workers, the second labelled
#      metrics-server-skip=true;
#   2. builds the image metrics-server-rs:dev from the Dockerfile and loads it into the nodes;
#   3. applies deploy/overlays/test (the base: RBAC, Service, Deployment, both APIServices;
#      plus --kubelet-insecure-tls and --node-selector=metrics-server-skip!=true);
#   4. waits for the Deployment and for v1beta1.metrics.k8s.io and v1.metrics.k8s.io Available;
#   5. starts the e2e workloads (a 50m CPU consumer, a 50Mi memory consumer, a pod with a
#      finished init container, a pod with two containers, a pod with a native sidecar) on the
#      first worker and checks, for both API versions: pod list, every node, CPU within 10m,
#      memory within 5Mi, container sets, the skipped node's 404, /readyz and /livez?verbose
#      bodies, the six metrics_server_* families on /metrics, kubectl top and get;
#   6. creates an HPA on a CPU consumer and waits for ScalingActive=True.
# The cluster is deleted on exit unless KEEP_CLUSTER=1.
#
# Environment:
#   CLUSTER       cluster name (default metrics-server-rs-e2e)
#   NODE_IMAGE    kindest/node image (default: kind's default)
#   IMAGE         image tag to build and load (default metrics-server-rs:dev; the test overlay
#                 uses this name, so change both together)
#   SKIP_BUILD=1  reuse an already built IMAGE
#   KEEP_CLUSTER=1  keep the cluster afterwards
#   KUBECTL, KIND, DOCKER  binaries to use
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CLUSTER="${CLUSTER:-metrics-server-rs-e2e}"
IMAGE="${IMAGE:-metrics-server-rs:dev}"
KUBECTL="${KUBECTL:-kubectl}"
KIND="${KIND:-kind}"
DOCKER="${DOCKER:-docker}"
WORK="$(mktemp -d)"
export KUBECONFIG="$WORK/kubeconfig"

log() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; FAILED=1; }
FAILED=0

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ] || [ "$FAILED" -ne 0 ]; then
    "$KUBECTL" -n kube-system logs -l k8s-app=metrics-server --tail=200 2>/dev/null || true
  fi
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  else
    echo "cluster kept: KUBECONFIG=$KUBECONFIG"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

for tool in "$DOCKER" "$KIND" "$KUBECTL" curl python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done

k() { "$KUBECTL" "$@"; }
raw() { k get --raw "$1"; }
# jq-free JSON access: json <expr over d> reads a document on stdin.
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

log "creating kind cluster $CLUSTER"
cat >"$WORK/kind.yaml" <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    kubeadmConfigPatches:
      - |
        kind: ClusterConfiguration
        apiServer:
          extraArgs:
            enable-aggregator-routing: "true"
  - role: worker
  - role: worker
    labels:
      metrics-server-skip: "true"
EOF
"$KIND" create cluster --name "$CLUSTER" --config "$WORK/kind.yaml" \
  ${NODE_IMAGE:+--image "$NODE_IMAGE"} --kubeconfig "$KUBECONFIG" --wait 120s

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "building $IMAGE"
  "$DOCKER" build -t "$IMAGE" "$ROOT"
fi
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

log "deploying deploy/overlays/test"
k apply -k "$ROOT/deploy/overlays/test"
k -n kube-system rollout status deployment/metrics-server --timeout=180s
for v in v1beta1 v1; do
  k wait --for=condition=Available "apiservice/$v.metrics.k8s.io" --timeout=180s
done
k get apiservice v1beta1.metrics.k8s.io v1.metrics.k8s.io

log "starting workloads"
CONSUMER=registry.k8s.io/e2e-test-images/resource-consumer:1.9
cat >"$WORK/workloads.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: cpu-consumer, namespace: default, labels: {app: cpu-consumer}}
spec:
  affinity: &skip
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: metrics-server-skip, operator: DoesNotExist}]
  containers:
    - name: cpu-consumer
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
      resources: {requests: {cpu: 100m}}
---
apiVersion: v1
kind: Pod
metadata: {name: memory-consumer, namespace: default, labels: {app: memory-consumer}}
spec:
  affinity: *skip
  containers:
    - name: memory-consumer
      image: $CONSUMER
      command: [stress, -m, "1", --vm-bytes, 50M, --vm-hang, "0", -t, "600"]
      resources: {requests: {memory: 100Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: cmwithinitcontainer-consumer, namespace: default}
spec:
  affinity: *skip
  initContainers:
    - name: init-container
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=10, --millicores=50]
  containers:
    - name: cmwithinitcontainer-consumer
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
      resources: {requests: {cpu: 100m, memory: 100Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: sidecarpod-consumer, namespace: default}
spec:
  affinity: *skip
  containers:
    - name: sidecarpod-consumer
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
    - name: sidecar-container
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
---
apiVersion: v1
kind: Pod
metadata: {name: initsidecarpod-consumer, namespace: default}
spec:
  affinity: *skip
  initContainers:
    - name: init-sidecar
      image: $CONSUMER
      restartPolicy: Always
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
  containers:
    - name: initsidecarpod-consumer
      image: $CONSUMER
      command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
EOF
k apply -f "$WORK/workloads.yaml"
k wait --for=condition=Ready pod --all -n default --timeout=300s

# poll <seconds> <command...>: retries every 5 s until the command succeeds.
poll() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 5
  done
}

# pod_check <version> <pod> <python condition over d (PodMetrics)>
pod_check() {
  raw "/apis/metrics.k8s.io/$1/namespaces/default/pods/$2" 2>/dev/null | json "$3" | grep -qx True
}
cpu_m='int(c["usage"]["cpu"].rstrip("n"))/1e6 if c["usage"]["cpu"].endswith("n") else (int(c["usage"]["cpu"].rstrip("m")) if c["usage"]["cpu"].endswith("m") else float(c["usage"]["cpu"])*1000)'
mem_mi='(lambda q: int(q[:-2])*{"Ki":1/1024,"Mi":1,"Gi":1024}[q[-2:]] if q[-2:] in ("Ki","Mi","Gi") else int(q)/1048576)(c["usage"]["memory"])'

for v in v1beta1 v1; do
  log "checks for metrics.k8s.io/$v"
  n=$(raw "/apis/metrics.k8s.io/$v/pods" | json 'len(d["items"])')
  [ "$n" -gt 0 ] || fail "$v: pod list is empty"

  for node in $(k get nodes -l 'metrics-server-skip!=true' -o jsonpath='{.items[*].metadata.name}'); do
    raw "/apis/metrics.k8s.io/$v/nodes/$node" >/dev/null || fail "$v: node $node has no metrics"
  done
  for node in $(k get nodes -l 'metrics-server-skip=true' -o jsonpath='{.items[*].metadata.name}'); do
    if raw "/apis/metrics.k8s.io/$v/nodes/$node" >/dev/null 2>&1; then
      fail "$v: skipped node $node has metrics"
    fi
  done

  poll 60 pod_check "$v" cpu-consumer "len(d['containers'])==1 and (lambda c: abs(($cpu_m)-50)<=10)(d['containers'][0])" \
    || fail "$v: cpu-consumer not at 50m +- 10m"
  poll 60 pod_check "$v" memory-consumer "len(d['containers'])==1 and (lambda c: abs(($mem_mi)-50)<=5)(d['containers'][0])" \
    || fail "$v: memory-consumer not at 50Mi +- 5Mi"
  poll 60 pod_check "$v" cmwithinitcontainer-consumer \
    "[c['name'] for c in d['containers']]==['cmwithinitcontainer-consumer'] and all(($cpu_m)>0 and ($mem_mi)>0 for c in d['containers'])" \
    || fail "$v: init container pod should show only its app container, with usage"
  poll 60 pod_check "$v" sidecarpod-consumer \
    "sorted(c['name'] for c in d['containers'])==['sidecar-container','sidecarpod-consumer'] and all(($cpu_m)>0 and ($mem_mi)>0 for c in d['containers'])" \
    || fail "$v: two-container pod should show both, with usage"
  poll 60 pod_check "$v" initsidecarpod-consumer \
    "sorted(c['name'] for c in d['containers'])==['init-sidecar','initsidecarpod-consumer'] and all(($cpu_m)>0 and ($mem_mi)>0 for c in d['containers'])" \
    || fail "$v: native sidecar pod should show the sidecar and the app container, with usage"
done

log "health and self-metrics of every replica"
expected_readyz='[+]ping ok
[+]log ok
[+]poststarthook/max-in-flight-filter ok
[+]poststarthook/storage-object-count-tracker-hook ok
[+]metric-storage-ready ok
[+]metric-informer-sync ok
[+]metadata-informer-sync ok
[+]shutdown ok
readyz check passed'
expected_livez='[+]ping ok
[+]log ok
[+]poststarthook/max-in-flight-filter ok
[+]poststarthook/storage-object-count-tracker-hook ok
[+]metric-collection-timely ok
[+]metadata-informer-sync ok
livez check passed'
expected_families='metrics_server_api_metric_freshness_seconds
metrics_server_kubelet_last_request_time_seconds
metrics_server_kubelet_request_duration_seconds
metrics_server_kubelet_request_total
metrics_server_manager_tick_duration_seconds
metrics_server_storage_points'
k config view --raw --minify -o jsonpath='{.users[0].user.client-certificate-data}' | base64 -d >"$WORK/admin.crt"
k config view --raw --minify -o jsonpath='{.users[0].user.client-key-data}' | base64 -d >"$WORK/admin.key"
port=20250
for pod in $(k -n kube-system get pods -l k8s-app=metrics-server -o jsonpath='{.items[*].metadata.name}'); do
  k -n kube-system port-forward "pod/$pod" "$port:10250" >/dev/null 2>&1 &
  pf=$!
  sleep 2
  # /readyz and /livez are always allowed (anonymous, as kubelet probes are).
  got=$(curl -sk "https://127.0.0.1:$port/readyz?verbose")
  [ "$(printf '%s' "$got" | sed 's/[[:space:]]*$//')" = "$expected_readyz" ] || fail "$pod /readyz?verbose: $got"
  got=$(curl -sk "https://127.0.0.1:$port/livez?verbose")
  [ "$(printf '%s' "$got" | sed 's/[[:space:]]*$//')" = "$expected_livez" ] || fail "$pod /livez?verbose: $got"
  # /metrics needs authorization: the admin client certificate (system:masters).
  got=$(curl -sk --cert "$WORK/admin.crt" --key "$WORK/admin.key" "https://127.0.0.1:$port/metrics" \
    | sed -n 's/^# TYPE \(metrics_server_[a-z_]*\) .*/\1/p' | sort -u)
  [ "$got" = "$expected_families" ] || fail "$pod /metrics families: $got"
  kill "$pf" 2>/dev/null || true
  wait "$pf" 2>/dev/null || true
  port=$((port + 1))
done

log "kubectl top and get"
k top node || fail "kubectl top node"
k top pod -A || fail "kubectl top pod -A"
k top pod -n default --containers --sort-by=cpu || fail "kubectl top pod --containers"
k top pod -n default -l app=cpu-consumer || fail "kubectl top pod -l"
k get nodes.metrics.k8s.io || fail "kubectl get nodes.metrics.k8s.io"
k get pods.metrics.k8s.io -n default || fail "kubectl get pods.metrics.k8s.io"
raw /apis/metrics.k8s.io/ | json '[v["version"] for v in d["versions"]]' | grep -qx "\['v1', 'v1beta1'\]" \
  || fail "/apis/metrics.k8s.io/ should list v1 then v1beta1"

log "HPA"
cat >"$WORK/hpa.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: hpa-target, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: hpa-target}}
  template:
    metadata: {labels: {app: hpa-target}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions: [{key: metrics-server-skip, operator: DoesNotExist}]
      containers:
        - name: hpa-target
          image: $CONSUMER
          command: [./consume-cpu/consume-cpu, --duration-sec=600, --millicores=50]
          resources: {requests: {cpu: 100m}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: hpa-target, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: hpa-target}
  minReplicas: 1
  maxReplicas: 3
  metrics:
    - type: Resource
      resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
EOF
k apply -f "$WORK/hpa.yaml"
k -n default rollout status deployment/hpa-target --timeout=180s
k -n default wait --for=condition=ScalingActive hpa/hpa-target --timeout=240s \
  || fail "HPA did not reach ScalingActive=True: $(k -n default describe hpa hpa-target)"
k -n default get hpa hpa-target

if [ "$FAILED" -ne 0 ]; then
  log "FAILED"
  exit 1
fi
log "all checks passed"
