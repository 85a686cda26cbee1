//! `/metrics/resource` (Prometheus text) parser: `scraper::kubelet::resource::parse`.
//!
//! Beyond "no panic": errors point inside the body; a success yields one entry per
//! (namespace, pod, container); every timestamp is either the default or a parsed
//! millisecond timestamp (a multiple of 10^6 ns, never negative); the default timestamp
//! only fills samples that had none; and CRLF line ends parse like LF ones.

#![no_main]

mod common;

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use scraper::kubelet::resource::parse;
use scraper::point::{NodeScrape, Sample};

/// Not a multiple of 10^6, so it can never be mistaken for a parsed timestamp.
const DEFAULT_A: i64 = 1_700_000_000_123_456_789;
const DEFAULT_B: i64 = 7;

fn check_sample(s: &Sample, default: i64) {
    assert!(
        s.timestamp_ns == default || (s.timestamp_ns >= 0 && s.timestamp_ns % 1_000_000 == 0),
        "timestamp {} is neither the default nor a parsed millisecond timestamp",
        s.timestamp_ns
    );
    if let Some(start) = s.start_time_ns {
        assert!(start >= 0, "negative start time {start}");
    }
    // The Prometheus source has no kubelet-computed rate.
    assert_eq!(s.cpu_nanocores, None);
}

fn check(scrape: &NodeScrape<'_>, default: i64) {
    if let Some(node) = &scrape.node {
        check_sample(node, default);
        assert!(
            node.cpu_usage_ns_total.unwrap_or(0) != 0
                || node.memory_working_set_bytes.unwrap_or(0) != 0,
            "a node sample without CPU or memory"
        );
    }
    let mut seen = HashSet::new();
    for c in &scrape.containers {
        check_sample(&c.sample, default);
        assert!(
            seen.insert((&c.namespace, &c.pod, &c.container)),
            "container {}/{}/{} listed twice",
            c.namespace,
            c.pod,
            c.container
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let a = parse(data, DEFAULT_A);
    let b = parse(data, DEFAULT_B);
    match (&a, &b) {
        (Ok(sa), Ok(sb)) => {
            check(sa, DEFAULT_A);
            check(sb, DEFAULT_B);
            assert_eq!(
                &common::with_default_time(sa.clone(), DEFAULT_A, DEFAULT_B),
                sb
            );
        }
        (Err(ea), Err(eb)) => {
            assert_eq!(ea, eb);
            assert!(ea.offset <= data.len(), "error offset past the end");
        }
        _ => panic!("the default timestamp changed the outcome: {a:?} vs {b:?}"),
    }

    // CRLF: the same lines, the same result (error offsets move, kinds do not).
    if !data.contains(&b'\r') && data.contains(&b'\n') {
        let mut crlf = Vec::with_capacity(data.len() * 2);
        for &c in data {
            if c == b'\n' {
                crlf.push(b'\r');
            }
            crlf.push(c);
        }
        match (&a, parse(&crlf, DEFAULT_A)) {
            (Ok(lf), Ok(cr)) => assert_eq!(lf, &cr),
            (Err(lf), Err(cr)) => assert_eq!(lf.kind, cr.kind),
            (lf, cr) => panic!("CRLF changed the outcome: {lf:?} vs {cr:?}"),
        }
    }
});
