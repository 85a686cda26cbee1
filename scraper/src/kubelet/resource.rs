//! `/metrics/resource` parser (Prometheus text exposition format). Owned by the parser work.

use super::ParseError;
use crate::point::NodeScrape;

/// Parses a `/metrics/resource` body.
pub fn parse(body: &[u8], default_timestamp_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
    let _ = (body, default_timestamp_ns);
    Ok(NodeScrape::default())
}
