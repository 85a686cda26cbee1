#!/usr/bin/env python3
"""Writes a PodMetricsList shaped like a real cluster's, for gzip comparisons.

The encode bench's list compresses ~35x because every pod has the same usage and
sequential names; a real one compresses ~11x (metrics-server's 30,000-pod list: 13.7 MB
identity, 1.26 MB gzip). This one has what makes real lists less regular: Deployment and
StatefulSet names from a vocabulary, random ReplicaSet hashes and pod suffixes, 1-3
containers with varied names, per-node scrape timestamps and windows, varied usage.

    python3 benches/pod_metrics_list.py OUT.json [PODS=30000] [NODES=1000]

Then compare: ENCODE_FILE=OUT.json ENCODE_GZIP=<level> target/release/deps/encode-<hash>
against zlib (python3 -c "import zlib; ...", or gzip -1).
"""

import json
import random
import sys

ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' rand.String uses


def rand_string(rng, n):
    return "".join(rng.choice(ALNUM) for _ in range(n))


def main():
    out = sys.argv[1]
    pods = int(sys.argv[2]) if len(sys.argv) > 2 else 30_000
    nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000
    rng = random.Random(42)
    words = ["api", "web", "worker", "billing", "search", "checkout", "auth", "cart",
             "frontend", "backend", "ingest", "redis", "kafka", "postgres", "metrics",
             "gateway", "payments", "orders", "catalog", "notify", "scheduler", "cache"]
    teams = ["team-" + w for w in ["alpha", "beta", "gamma", "delta", "core", "data", "infra",
                                   "ml", "platform", "growth", "edge", "ops"]]
    namespaces = ["kube-system", "monitoring", "logging", "istio-system", "cert-manager"] + [
        f"{t}-{env}" for t in teams for env in ("prod", "staging", "dev")]
    sidecars = ["istio-proxy", "linkerd-proxy", "fluent-bit", "vault-agent", "cloudsql-proxy"]
    apps = []
    for i in range(pods // 8):
        name = "-".join(rng.sample(words, rng.choice([1, 2, 2, 3])))
        apps.append((rng.choice(namespaces), name, rng.random() < 0.15, rand_string(rng, 10)))
    node_ts = [1_715_611_601 + rng.randrange(15) for _ in range(nodes)]
    items = []
    seen = set()
    while len(items) < pods:
        ns, app, stateful, rs_hash = rng.choice(apps)
        if stateful:
            name = f"{app}-{rng.randrange(12)}"
        else:
            name = f"{app}-{rs_hash}-{rand_string(rng, 5)}"
        if (ns, name) in seen:
            continue
        seen.add((ns, name))
        node = rng.randrange(nodes)
        labels = {"app": app}
        if stateful:
            labels["statefulset.kubernetes.io/pod-name"] = name
        else:
            labels["pod-template-hash"] = rs_hash
        containers = [app.split("-")[0]] + rng.sample(sidecars, rng.choice([0, 1, 1, 2]))
        ts = node_ts[node]
        items.append({
            "metadata": {
                "name": name,
                "namespace": ns,
                "creationTimestamp": "2024-05-13T14:46:48Z",
                "labels": labels,
            },
            "timestamp": f"2024-05-13T14:46:{ts % 60:02d}Z",
            "window": f"{15 + rng.randrange(3)}.{rng.randrange(1000):03d}s",
            "containers": [
                {"name": c, "usage": {
                    "cpu": f"{rng.randrange(10_000, 900_000_000)}n",
                    "memory": f"{rng.randrange(4_000, 4_000_000)}Ki"}}
                for c in containers
            ],
        })
    items.sort(key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    doc = {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
           "items": items}
    with open(out, "w") as f:
        f.write(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
