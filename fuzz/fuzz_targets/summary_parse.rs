//! `/stats/summary` (JSON) parser: `scraper::kubelet::summary::parse`, and its RFC 3339
//! reader `rfc3339_ns` against the API's writer `apiserver::api::time::rfc3339`.
//!
//! Beyond "no panic": errors point inside the body; the request time only fills samples
//! whose `cpu.time` and `memory.time` are absent (it never changes the outcome); a node
//! sample is kept only with a non-zero CPU or memory value; and RFC 3339 parse -> write ->
//! parse keeps the instant (to the second, the writer's precision), canonical `...Z` strings
//! are written back byte for byte.

#![no_main]

mod common;

use apiserver::api::time::rfc3339;
use libfuzzer_sys::fuzz_target;
use scraper::kubelet::summary::{parse, rfc3339_ns};
use scraper::point::NodeScrape;

/// Two request times; a body time equal to one of them is detected and skipped below.
const REQUEST_A: i64 = 1_700_000_000_123_456_789;
const REQUEST_B: i64 = -3;

fn check(scrape: &NodeScrape<'_>) {
    if let Some(node) = &scrape.node {
        assert!(
            node.cpu_usage_ns_total.unwrap_or(0) != 0
                || node.cpu_nanocores.unwrap_or(0) != 0
                || node.memory_working_set_bytes.unwrap_or(0) != 0,
            "a node sample without CPU or memory"
        );
        assert_eq!(node.start_time_ns, None, "a node has no start time");
    }
}

/// parse -> write -> parse: the same second; a canonical string comes back unchanged.
fn check_rfc3339(s: &str) {
    let Some(ns) = rfc3339_ns(s) else {
        return;
    };
    let written = rfc3339(ns);
    let written = std::str::from_utf8(&written).expect("the writer writes ASCII");
    let floored = ns.div_euclid(1_000_000_000).checked_mul(1_000_000_000);
    assert_eq!(
        rfc3339_ns(written),
        floored,
        "{s:?} -> {ns} -> {written:?} does not read back to the second"
    );
    let b = s.as_bytes();
    if b.len() == 20 && b[10] == b'T' && b[19] == b'Z' {
        assert_eq!(written, s, "a canonical time is not written back as read");
    }
}

fuzz_target!(|data: &[u8]| {
    // Time strings alone, so the date grammar is reached without a JSON document around it.
    if let Ok(s) = std::str::from_utf8(data)
        && s.len() < 64
    {
        check_rfc3339(s);
    }

    let a = parse(data, REQUEST_A);
    let b = parse(data, REQUEST_B);
    match (a, b) {
        (Ok(sa), Ok(sb)) => {
            check(&sa);
            check(&sb);
            // A body time equal to the other run's request time makes the comparison
            // ambiguous: skip it then.
            let has = |scrape: &NodeScrape<'_>, t: i64| {
                scrape
                    .node
                    .iter()
                    .chain(scrape.containers.iter().map(|c| &c.sample))
                    .any(|s| s.timestamp_ns == t)
            };
            let ambiguous = has(&sa, REQUEST_B) || has(&sb, REQUEST_A);
            if !ambiguous {
                assert_eq!(common::with_default_time(sa, REQUEST_A, REQUEST_B), sb);
            }
        }
        (Err(ea), Err(eb)) => {
            assert_eq!(ea, eb);
            assert!(ea.offset <= data.len(), "error offset past the end");
        }
        (a, b) => panic!("the request time changed the outcome: {a:?} vs {b:?}"),
    }
});
