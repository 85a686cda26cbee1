//! `/metrics` on a large cluster (`cargo bench -p benches --bench selfmetrics`): the whole
//! Prometheus text of a server that has scraped 1,000 and 5,000 nodes (~15 lines per node in
//! the two per-node families), drained frame by frame as a client reads it. Criterion reports
//! time per exposition and MB/s (`Throughput::Bytes`).
//!
//! `registry_only/...` is the registry's part alone (the process, request and scrape-loop
//! families), to tell what the per-node families cost.

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use apiserver::selfmetrics;
use criterion::{Criterion, Throughput};
use http_body::Body as _;
use prometheus_client::registry::Registry;

/// Bytes of the whole body of a `/metrics` response.
fn drain(response: http::Response<apiserver::body::Body>) -> usize {
    let mut body = pin!(response.into_body());
    let mut cx = Context::from_waker(Waker::noop());
    let mut bytes = 0;
    while let Poll::Ready(Some(Ok(frame))) = body.as_mut().poll_frame(&mut cx) {
        bytes += frame.data_ref().map_or(0, |d| d.len());
    }
    bytes
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("selfmetrics");
    for nodes in [1_000, 5_000] {
        let mut registry = Registry::default();
        let metrics = scraper::metrics::Metrics::new(&mut registry, Duration::from_secs(15));
        selfmetrics::register_process_metrics(&mut registry);
        for i in 0..nodes {
            let node = format!("node-{i:05}");
            for ms in [3, 40, 700] {
                metrics.observe_request(&node, Duration::from_millis(ms), true, 1.7e9 + 0.5);
            }
        }
        let series = metrics.node_series();
        let bytes = drain(selfmetrics::response(&registry, Some(&series), None));
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(format!("prometheus/{nodes}-nodes"), |b| {
            b.iter(|| {
                drain(selfmetrics::response(
                    black_box(&registry),
                    Some(&series),
                    None,
                ))
            })
        });
        let bytes = drain(selfmetrics::response(&registry, None, None));
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(format!("registry_only/{nodes}-nodes"), |b| {
            b.iter(|| drain(selfmetrics::response(black_box(&registry), None, None)))
        });
    }
    group.finish();
    c.final_summary();
}
