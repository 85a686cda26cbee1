//! What more than one fuzz target needs (included with `mod common;`; not a target itself:
//! the targets are listed in `Cargo.toml`).

use scraper::point::{NodeScrape, Sample};

/// The scrape with every timestamp equal to `from` (a default the parser filled in) replaced
/// by `to`, so two parses with different defaults can be compared.
pub fn with_default_time(mut scrape: NodeScrape<'_>, from: i64, to: i64) -> NodeScrape<'_> {
    let fix = |s: &mut Sample| {
        if s.timestamp_ns == from {
            s.timestamp_ns = to;
        }
    };
    if let Some(node) = &mut scrape.node {
        fix(node);
    }
    for c in &mut scrape.containers {
        fix(&mut c.sample);
    }
    scrape
}
