//! Parse throughput of the two kubelet payload parsers (`cargo bench -p benches --bench parse`),
//! and what inflating a `/metrics/resource` body adds when the kubelet gzipped it (as it does
//! when asked, at Go's default level; `inflate/...`, time per body of its plain size).
//!
//! Criterion reports time per parse and MB/s (`Throughput::Bytes`). For instruction counts,
//! run one payload in a loop without criterion under callgrind:
//! `PARSE_ONLY=resource/70-pods-fixture PARSE_ITERS=100 valgrind --tool=callgrind <bench binary>`.

use std::hint::black_box;

use std::io::Write;

use benches::Payload;
use criterion::{Criterion, Throughput};
use scraper::kubelet::client::gzip::gunzip;

fn parse(c: &mut Criterion, payloads: &[Payload]) {
    let mut group = c.benchmark_group("parse");
    for payload in payloads {
        group.throughput(Throughput::Bytes(payload.body.len() as u64));
        group.bench_function(&payload.name, |b| {
            b.iter(|| payload.source.parse(black_box(&payload.body), 0))
        });
    }
    group.finish();
}

fn inflate(c: &mut Criterion, payloads: &[Payload]) {
    let mut group = c.benchmark_group("inflate");
    for payload in payloads.iter().filter(|p| p.name.starts_with("resource/")) {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&payload.body).expect("gzip to memory");
        let gzipped = encoder.finish().expect("gzip to memory");
        assert_eq!(
            gunzip(&gzipped, usize::MAX).ok().flatten().as_deref(),
            Some(&payload.body[..])
        );
        group.throughput(Throughput::Bytes(payload.body.len() as u64));
        group.bench_function(&payload.name, |b| {
            b.iter(|| gunzip(black_box(&gzipped), usize::MAX))
        });
    }
    group.finish();
}

fn main() {
    let payloads = match Payload::parse_set() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot read testdata/kubelet: {e}");
            std::process::exit(1);
        }
    };
    for p in &payloads {
        // A payload that does not parse would make the numbers meaningless.
        assert!(p.parse_containers() > 0, "{} does not parse", p.name);
    }
    if let Ok(only) = std::env::var("PARSE_ONLY") {
        let iters: usize = std::env::var("PARSE_ITERS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(100);
        let Some(payload) = payloads.iter().find(|p| p.name == only) else {
            eprintln!("unknown payload {only}; one of:");
            for p in &payloads {
                eprintln!("  {}", p.name);
            }
            std::process::exit(2);
        };
        let mut containers = 0;
        for _ in 0..iters {
            containers += black_box(payload).parse_containers();
        }
        println!(
            "{}: {} bytes, {iters} parses, {containers} containers",
            payload.name,
            payload.body.len()
        );
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    parse(&mut criterion, &payloads);
    inflate(&mut criterion, &payloads);
    criterion.final_summary();
}
