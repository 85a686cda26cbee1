//! HPA-shaped load at a fixed rate: `GET .../v1beta1/namespaces/ns-0/pods?labelSelector=...`
//! with the HPA's `Accept: application/vnd.kubernetes.protobuf, */*`, spread over
//! [`super::cluster::hpa_targets`] targets of ~100 pods, from many kept-alive connections,
//! open loop: request `k` of connection `c` is due at `start + (k * connections + c) / rate`,
//! and its latency counts from when it was due, so an answer that comes late is charged to the
//! requests queued behind it too (no coordinated omission). The phase ends on time: what was
//! due but not yet sent by then is counted as unsent, not sent late.
//!
//! Tokio's timer wakes a sleeper on the next millisecond tick after its deadline, so "from
//! due" also holds up to ~1 ms of the client's own timer. The run therefore also reports each
//! latency from when the request was sent, except where the connection was still waiting for
//! its previous answer when the request fell due (then the server made it late, and it counts
//! from due as before): the server's share without the timer's, still without coordinated
//! omission.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::bail;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::Client;
use super::cluster::{hpa_path, hpa_targets};

/// What the kube-controller-manager's HPA asks for.
pub const HPA_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";

/// One rate's outcome.
#[derive(Clone, Debug)]
pub struct RateRun {
    /// Requests per second asked for.
    pub rate: u32,
    /// Connections.
    pub connections: usize,
    /// Answered 200.
    pub ok: u64,
    /// Anything else, or a failed request.
    pub failed: u64,
    /// Requests due within the phase but never sent: the phase ended while the connection
    /// was still waiting for earlier answers (the server could not keep up with the rate).
    pub unsent: u64,
    /// 200s per second over the phase.
    pub achieved_per_s: f64,
    /// Latency from when each request was due, in ms.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Latency from the send (from due where the connection was behind), in ms: 50th, 99th and
    /// 99.9th percentiles.
    pub from_send_ms: [f64; 3],
    /// Protobuf bytes of one answer (the last one).
    pub bytes: usize,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// Checks every target once as JSON: a 200 listing `per_target` pods give or take one.
pub async fn check_targets(client: &mut Client, nodes: usize) -> anyhow::Result<usize> {
    let targets = hpa_targets(nodes);
    let per_target = nodes / targets;
    for t in 0..targets {
        let f = client.get(&hpa_path(t), b"\"window\":").await?;
        if !f.status.is_success() || f.marker_count.abs_diff(per_target) > 1 {
            bail!(
                "GET {}: {} with {} pods, not 200 with ~{per_target}",
                hpa_path(t),
                f.status,
                f.marker_count
            );
        }
    }
    Ok(per_target)
}

/// Drives `rate` requests per second over `connections` connections for `duration`.
pub async fn run_rate(
    addr: SocketAddr,
    front_proxy: &tls::Identity,
    nodes: usize,
    rate: u32,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<RateRun> {
    let targets = hpa_targets(nodes);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + duration;
    let mut tasks = JoinSet::new();
    for c in 0..connections {
        let mut client = Client::new(addr, front_proxy)?;
        tasks.spawn(async move {
            // Connect (and warm the review cache) before the clock starts.
            let _ = client.get("/apis/metrics.k8s.io/v1beta1", b"").await;
            let (mut latencies, mut from_sent) = (Vec::new(), Vec::new());
            let (mut failed, mut unsent, mut bytes) = (0u64, 0u64, 0usize);
            let mut previous_answered = start;
            for k in 0u64.. {
                let seq = k * connections as u64 + c as u64;
                let due = start + Duration::from_secs_f64(seq as f64 / f64::from(rate));
                if due >= end {
                    break;
                }
                if Instant::now() >= end {
                    unsent += 1;
                    continue;
                }
                tokio::time::sleep_until(due).await;
                let sent = if previous_answered > due {
                    due
                } else {
                    Instant::now()
                };
                let path = hpa_path((seq as usize) % targets);
                match client.get_accepting(&path, HPA_ACCEPT, b"", false).await {
                    Ok(f) if f.status.is_success() => {
                        latencies.push(due.elapsed());
                        from_sent.push(sent.elapsed());
                        bytes = f.bytes;
                    }
                    _ => failed += 1,
                }
                previous_answered = Instant::now();
            }
            (latencies, from_sent, failed, unsent, bytes)
        });
    }
    let (mut all, mut all_sent, mut failed, mut unsent, mut bytes) =
        (Vec::new(), Vec::new(), 0, 0, 0);
    while let Some(joined) = tasks.join_next().await {
        let (latencies, from_sent, f, u, b) = joined?;
        all.extend(latencies);
        all_sent.extend(from_sent);
        failed += f;
        unsent += u;
        bytes = bytes.max(b);
    }
    let took = start.elapsed().max(duration);
    all.sort();
    all_sent.sort();
    Ok(RateRun {
        rate,
        connections,
        ok: all.len() as u64,
        failed,
        unsent,
        achieved_per_s: all.len() as f64 / took.as_secs_f64(),
        p50_ms: percentile(&all, 0.50),
        p99_ms: percentile(&all, 0.99),
        p999_ms: percentile(&all, 0.999),
        max_ms: all.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        from_send_ms: [0.50, 0.99, 0.999].map(|q| percentile(&all_sent, q)),
        bytes,
    })
}
