//! HPA-shaped load at a fixed rate: `GET .../v1beta1/namespaces/ns-0/pods?labelSelector=...`
//! with the HPA's `Accept: application/vnd.kubernetes.protobuf, */*`, spread over
//! [`super::cluster::hpa_targets`] targets of ~100 pods, from many kept-alive connections,
//! open loop: request `k` of connection `c` is due at `start + (k * connections + c) / rate`,
//! and its latency counts from when it was due, so an answer that comes late is charged to the
//! requests queued behind it too (no coordinated omission). The phase ends on time: what was
//! due but not yet sent by then is counted as unsent, not sent late.
//!
//! How the schedule is kept is [`Arrivals`]: by each connection's task on Tokio's timer
//! (`ticks`), or by a thread of its own (`even`).
//!
//! "From due" includes the client's own delays. The run therefore also reports each latency
//! from when the request was sent, except where the connection was still waiting for its
//! previous answer when the request fell due (then the server made it late, and it counts
//! from due as before): the server's share without the client's, still without coordinated
//! omission.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{Client, Protocol};
use super::cluster::{hpa_path, hpa_targets};

/// What the kube-controller-manager's HPA asks for.
pub const HPA_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";

/// One rate's outcome.
#[derive(Clone, Debug)]
pub struct RateRun {
    /// Requests per second asked for.
    pub rate: u32,
    /// Clients, each with one request in flight at a time.
    pub clients: usize,
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
    /// Lists answered beside the requests ([`Transport::list_beside`]), and their median
    /// time in ms.
    pub lists_beside: (usize, f64),
}

/// The `q` quantile of `sorted`, in ms.
pub fn percentile(sorted: &[Duration], q: f64) -> f64 {
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

/// How the requests' due times are kept (`--hpa-arrivals`, named as
/// [`super::parse_choice`] reads it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrivals {
    /// Each connection's task sleeps to its requests' due times on Tokio's timer, which wakes
    /// a sleeper on the next millisecond tick after its deadline: at 10,000/s the requests of
    /// a millisecond go out together, ten at once, and the server takes them in one wake-up.
    #[default]
    Ticks,
    /// A thread of its own, the pacer, sleeps to each due time (with a timer slack of 1 ns,
    /// not the kernel's default 50 us) and hands the request to its connection's task: the
    /// requests arrive as spread as the schedule says (one every 100 us at 10,000/s), as from
    /// a crowd of independent clients, each on a wake-up of its own (the pacer's wake-ups are
    /// the load client's cost, on the same cores).
    Even,
}

/// The schedule: request `seq` is due at `start + seq / rate` until `end`.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    start: Instant,
    end: Instant,
    rate: u32,
}

impl Schedule {
    /// When request `seq` is due; `None` past the end.
    fn due(&self, seq: u64) -> Option<Instant> {
        let due = self.start + Duration::from_secs_f64(seq as f64 / f64::from(self.rate));
        (due < self.end).then_some(due)
    }
}

/// Where one connection's requests come from.
enum Due {
    /// Its own: request `k` of connection `c` of `connections`, on Tokio's timer.
    Ticks {
        schedule: Schedule,
        c: u64,
        connections: u64,
        k: u64,
    },
    /// The pacer's queue.
    Even(mpsc::UnboundedReceiver<(u64, Instant)>),
}

impl Due {
    /// The next request: its sequence number and due time, once it is due.
    async fn next(&mut self) -> Option<(u64, Instant)> {
        match self {
            Due::Ticks {
                schedule,
                c,
                connections,
                k,
            } => {
                let seq = *k * *connections + *c;
                let due = schedule.due(seq)?;
                *k += 1;
                tokio::time::sleep_until(due).await;
                Some((seq, due))
            }
            Due::Even(queue) => queue.recv().await,
        }
    }
}

/// Hands request `seq` to connection `seq % connections` when it is due, until the schedule
/// ends; then closes the queues, which ends the connections' tasks once they have drained them.
fn pace(schedule: Schedule, queues: &[mpsc::UnboundedSender<(u64, Instant)>]) {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let connections = queues.len() as u64;
    if connections == 0 {
        return;
    }
    for seq in 0u64.. {
        let Some(due) = schedule.due(seq) else {
            break;
        };
        let wait = due
            .into_std()
            .saturating_duration_since(std::time::Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        if queues[(seq % connections) as usize]
            .send((seq, due))
            .is_err()
        {
            break;
        }
    }
}

/// The format of the list asked beside the HPA-shaped requests (`--hpa-list-beside`, named
/// as [`super::parse_choice`] reads it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    /// kubectl's default (`application/vnd.kubernetes.protobuf, */*`): every pod selected
    /// before the first byte.
    #[default]
    Protobuf,
    /// `application/json`, streamed as the pods are read.
    Json,
}

impl ListFormat {
    fn accept(self) -> &'static str {
        match self {
            ListFormat::Protobuf => HPA_ACCEPT,
            ListFormat::Json => "application/json",
        }
    }
}

/// How the HPA-shaped requests reach the server.
#[derive(Clone, Copy, Debug)]
pub struct Transport {
    /// Clients, each with one request in flight at a time.
    pub clients: usize,
    /// HTTP/1.1 (a connection per client) or h2.
    pub protocol: Protocol,
    /// For h2, the connections the clients' streams are multiplexed over (the aggregator
    /// keeps one per backend).
    pub h2_connections: usize,
    /// A cluster-wide list (this path, in this format) asked again and again while the
    /// phase runs, as `kubectl top pods -A` beside the HPA: over h2 another stream of the
    /// first connection (the aggregator multiplexes both), over HTTP/1.1 a connection of its
    /// own.
    pub list_beside: Option<(&'static str, ListFormat)>,
}

impl Transport {
    /// The connections this makes.
    pub fn connections(&self) -> usize {
        match self.protocol {
            Protocol::Http1 => self.clients,
            Protocol::H2 => self.h2_connections.clamp(1, self.clients.max(1)),
        }
    }
}

/// Drives `rate` requests per second from `transport`'s clients for `duration`, the
/// arrivals kept as `arrivals` says.
pub async fn run_rate(
    addr: SocketAddr,
    front_proxy: &tls::Identity,
    nodes: usize,
    rate: u32,
    transport: Transport,
    duration: Duration,
    arrivals: Arrivals,
) -> anyhow::Result<RateRun> {
    let clients = transport.clients;
    let targets = hpa_targets(nodes);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + duration;
    let schedule = Schedule { start, end, rate };
    let mut tasks = JoinSet::new();
    let mut queues = Vec::new();
    let mut shared = match transport.protocol {
        Protocol::Http1 => Vec::new(),
        Protocol::H2 => (0..transport.connections())
            .map(|_| Client::speaking(addr, front_proxy, Protocol::H2))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    for c in 0..clients {
        let shared_count = shared.len();
        let mut client = match shared.get_mut(c % shared_count.max(1)) {
            Some(connection) => connection.share().await?,
            None => Client::new(addr, front_proxy)?,
        };
        let mut due = match arrivals {
            Arrivals::Ticks => Due::Ticks {
                schedule,
                c: c as u64,
                connections: clients as u64,
                k: 0,
            },
            Arrivals::Even => {
                let (queue, due) = mpsc::unbounded_channel();
                queues.push(queue);
                Due::Even(due)
            }
        };
        tasks.spawn(async move {
            // Connect (and warm the review cache) before the clock starts.
            let _ = client.get("/apis/metrics.k8s.io/v1beta1", b"").await;
            let (mut latencies, mut from_sent) = (Vec::new(), Vec::new());
            let (mut failed, mut unsent, mut bytes) = (0u64, 0u64, 0usize);
            let mut previous_answered = start;
            while let Some((seq, due)) = due.next().await {
                if Instant::now() >= end {
                    unsent += 1;
                    continue;
                }
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
    let beside = match transport.list_beside {
        Some((path, format)) => {
            let mut client = match shared.first_mut() {
                Some(connection) => connection.share().await?,
                None => Client::new(addr, front_proxy)?,
            };
            Some(tokio::spawn(async move {
                let _ = client.get("/apis/metrics.k8s.io/v1beta1", b"").await;
                let mut times = Vec::new();
                tokio::time::sleep_until(start).await;
                while Instant::now() < end {
                    let f = client
                        .get_accepting(path, format.accept(), b"", false)
                        .await?;
                    if !f.status.is_success() {
                        bail!("GET {path} beside the HPA-shaped requests: {}", f.status);
                    }
                    times.push(f.total);
                }
                anyhow::Ok(times)
            }))
        }
        None => None,
    };
    let pacer = match arrivals {
        Arrivals::Ticks => None,
        Arrivals::Even => Some(
            std::thread::Builder::new()
                .name("hpa-pacer".into())
                .spawn(move || pace(schedule, &queues))
                .context("starting the pacer thread")?,
        ),
    };
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
    if pacer.is_some_and(|pacer| pacer.join().is_err()) {
        bail!("the pacer thread panicked");
    }
    let lists_beside = match beside {
        Some(task) => {
            let mut times = task.await??;
            times.sort();
            let median = times.get(times.len() / 2).copied().unwrap_or_default();
            (times.len(), median.as_secs_f64() * 1000.0)
        }
        None => (0, 0.0),
    };
    let took = start.elapsed().max(duration);
    all.sort();
    all_sent.sort();
    Ok(RateRun {
        rate,
        clients,
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
        lists_beside,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_hands_each_request_once_to_its_connection_in_order_and_never_early() {
        let start = Instant::now() + Duration::from_millis(20);
        let schedule = Schedule {
            start,
            end: start + Duration::from_millis(50),
            rate: 10_000,
        };
        let connections = 4u64;
        let (queues, receivers): (Vec<_>, Vec<_>) = (0..connections)
            .map(|_| mpsc::unbounded_channel::<(u64, Instant)>())
            .unzip();
        let readers: Vec<_> = receivers
            .into_iter()
            .map(|mut queue| {
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some((seq, due)) = queue.blocking_recv() {
                        got.push((seq, due, Instant::now()));
                    }
                    got
                })
            })
            .collect();
        pace(schedule, &queues);
        drop(queues);
        let mut seqs = Vec::new();
        for (c, reader) in readers.into_iter().enumerate() {
            let got = reader.join().expect("reader");
            assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "out of order");
            for (seq, due, received) in got {
                assert_eq!(
                    seq % connections,
                    c as u64,
                    "request {seq} on connection {c}"
                );
                assert_eq!(Some(due), schedule.due(seq));
                assert!(
                    received >= due,
                    "request {seq} handed over before it was due"
                );
                seqs.push(seq);
            }
        }
        seqs.sort_unstable();
        // 50 ms at 10,000/s: requests 0 to 499, each once.
        assert_eq!(seqs, (0..500).collect::<Vec<_>>());
    }
}
