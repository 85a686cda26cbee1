//! `/metrics/resource` parser: the Prometheus text exposition format as the kubelet serves it.
//!
//! Mirrors metrics-server's `pkg/scraper/client/resource/decode.go` (reference §3.4): only the
//! node and container CPU and memory families and `container_start_time_seconds` are read,
//! matched by exact family name; everything else is skipped after a cheap check that the line
//! looks like a metric line or a comment, so an HTML error page or garbage fails the node.
//!
//! The parser is hand-written for speed: the body is UTF-8 validated once, lines are found
//! with `memchr`, and label values are borrowed from the body (`Cow::Owned` only when a value
//! has escapes). The only allocations are the output `Vec` and the index that merges the
//! families of one container.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

use memchr::{memchr, memchr2};

use super::{ParseError, ParseErrorKind};
use crate::point::{ContainerSample, NodeScrape, Sample};

#[cfg(test)]
pub(super) mod tests;

/// Parses a `/metrics/resource` body.
///
/// Samples without a timestamp get `default_timestamp_ns` (metrics-server uses the request
/// start time). A sample whose value is NaN, infinite or negative is skipped; a container
/// series without its `namespace`, `pod` or `container` label is skipped. A syntax error
/// anywhere, or a negative timestamp on a series that is read, fails the whole body, as
/// metrics-server's `decodeBatch` does.
pub fn parse(body: &[u8], default_timestamp_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
    let text =
        std::str::from_utf8(body).map_err(|e| error(ParseErrorKind::Utf8, e.valid_up_to()))?;
    let mut parser = Parser {
        text,
        bytes: body,
        default_timestamp_ns,
        node: Sample {
            timestamp_ns: default_timestamp_ns,
            ..Sample::default()
        },
        containers: Containers::default(),
    };
    let mut start = 0;
    while start < body.len() {
        let newline = memchr(b'\n', &body[start..]).map_or(body.len(), |i| start + i);
        let mut end = newline;
        if end > start && body[end - 1] == b'\r' {
            end -= 1;
        }
        parser.line(start, end)?;
        start = newline + 1;
    }
    let node = parser.node;
    let has_node = node.cpu_usage_ns_total.unwrap_or(0) != 0
        || node.memory_working_set_bytes.unwrap_or(0) != 0;
    Ok(NodeScrape {
        node: has_node.then_some(node),
        containers: parser.containers.list,
    })
}

/// The families that are read; everything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    NodeCpu,
    NodeMemory,
    ContainerCpu,
    ContainerMemory,
    ContainerStart,
    Other,
}

impl Family {
    fn of(name: &[u8]) -> Family {
        match name {
            b"node_cpu_usage_seconds_total" => Family::NodeCpu,
            b"node_memory_working_set_bytes" => Family::NodeMemory,
            b"container_cpu_usage_seconds_total" => Family::ContainerCpu,
            b"container_memory_working_set_bytes" => Family::ContainerMemory,
            b"container_start_time_seconds" => Family::ContainerStart,
            _ => Family::Other,
        }
    }
}

/// The three labels that identify a container series.
#[derive(Default)]
struct Labels<'a> {
    namespace: Option<Cow<'a, str>>,
    pod: Option<Cow<'a, str>>,
    container: Option<Cow<'a, str>>,
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    default_timestamp_ns: i64,
    node: Sample,
    containers: Containers<'a>,
}

impl<'a> Parser<'a> {
    /// Handles one line, `bytes[start..end]`, without its line terminator.
    fn line(&mut self, start: usize, end: usize) -> Result<(), ParseError> {
        let b = self.bytes;
        let mut pos = skip_blanks(b, start, end);
        if pos == end || b[pos] == b'#' {
            return Ok(());
        }
        if !is_name_start(b[pos]) {
            return Err(error(ParseErrorKind::Syntax, pos));
        }
        let name_start = pos;
        pos += 1;
        while pos < end && is_name_char(b[pos]) {
            pos += 1;
        }
        if pos == end || !matches!(b[pos], b'{' | b' ' | b'\t') {
            return Err(error(ParseErrorKind::Syntax, pos));
        }
        let family = Family::of(&b[name_start..pos]);
        if family == Family::Other {
            return Ok(());
        }

        pos = skip_blanks(b, pos, end);
        let mut labels = Labels::default();
        if pos < end && b[pos] == b'{' {
            pos = self.labels(pos + 1, end, &mut labels)?;
            pos = skip_blanks(b, pos, end);
        }

        let value_start = pos;
        while pos < end && !is_blank(b[pos]) {
            pos += 1;
        }
        if pos == value_start {
            return Err(error(ParseErrorKind::Syntax, pos));
        }
        let value: f64 = self
            .text
            .get(value_start..pos)
            .and_then(|s| s.parse().ok())
            .ok_or(error(ParseErrorKind::Value, value_start))?;

        pos = skip_blanks(b, pos, end);
        let timestamp_ns = if pos < end {
            let ts_start = pos;
            while pos < end && !is_blank(b[pos]) {
                pos += 1;
            }
            let ns = timestamp_ns(&b[ts_start..pos])
                .ok_or(error(ParseErrorKind::Timestamp, ts_start))?;
            pos = skip_blanks(b, pos, end);
            if pos != end {
                return Err(error(ParseErrorKind::Syntax, pos));
            }
            ns
        } else {
            self.default_timestamp_ns
        };

        // NaN, infinities and negative values cannot be CPU, memory or a start time.
        if !value.is_finite() || value < 0.0 {
            return Ok(());
        }
        match family {
            Family::NodeCpu => {
                self.node.cpu_usage_ns_total = Some(seconds_to_ns(value));
                self.node.timestamp_ns = timestamp_ns;
            }
            Family::NodeMemory => {
                self.node.memory_working_set_bytes = Some(value as u64);
                self.node.timestamp_ns = timestamp_ns;
            }
            Family::ContainerCpu | Family::ContainerMemory | Family::ContainerStart => {
                let Labels {
                    namespace: Some(namespace),
                    pod: Some(pod),
                    container: Some(container),
                } = labels
                else {
                    return Ok(());
                };
                let default_ns = self.default_timestamp_ns;
                let sample = self
                    .containers
                    .slot(family, namespace, pod, container, default_ns);
                match family {
                    Family::ContainerCpu => {
                        sample.cpu_usage_ns_total = Some(seconds_to_ns(value));
                        sample.timestamp_ns = timestamp_ns;
                    }
                    Family::ContainerMemory => {
                        sample.memory_working_set_bytes = Some(value as u64);
                        sample.timestamp_ns = timestamp_ns;
                    }
                    // `time.Unix(0, int64(value*1e9))`; the sample's own timestamp is the
                    // start time again on some kubelets and is ignored.
                    _ => sample.start_time_ns = Some((value * 1e9) as i64),
                }
            }
            Family::Other => {}
        }
        Ok(())
    }

    /// Parses the label set after its `{` up to and including the `}`; returns the position
    /// after the `}`.
    fn labels(
        &self,
        mut pos: usize,
        end: usize,
        labels: &mut Labels<'a>,
    ) -> Result<usize, ParseError> {
        let b = self.bytes;
        loop {
            pos = skip_blanks(b, pos, end);
            if pos == end {
                return Err(error(ParseErrorKind::Labels, pos));
            }
            if b[pos] == b'}' {
                return Ok(pos + 1);
            }
            if !is_label_start(b[pos]) {
                return Err(error(ParseErrorKind::Labels, pos));
            }
            let name_start = pos;
            pos += 1;
            while pos < end && is_label_char(b[pos]) {
                pos += 1;
            }
            let name = &b[name_start..pos];
            pos = skip_blanks(b, pos, end);
            if pos == end || b[pos] != b'=' {
                return Err(error(ParseErrorKind::Labels, pos));
            }
            pos = skip_blanks(b, pos + 1, end);
            if pos == end || b[pos] != b'"' {
                return Err(error(ParseErrorKind::Labels, pos));
            }
            let (value, after) = self.label_value(pos + 1, end)?;
            match name {
                b"namespace" => labels.namespace = Some(value),
                b"pod" => labels.pod = Some(value),
                b"container" => labels.container = Some(value),
                _ => {}
            }
            pos = skip_blanks(b, after, end);
            if pos == end {
                return Err(error(ParseErrorKind::Labels, pos));
            }
            match b[pos] {
                b',' => pos += 1,
                b'}' => return Ok(pos + 1),
                _ => return Err(error(ParseErrorKind::Labels, pos)),
            }
        }
    }

    /// Reads a quoted label value starting after its opening quote; returns the value and the
    /// position after the closing quote. Unescapes `\\`, `\"` and `\n` like Prometheus'
    /// `lvalReplacer`; any other backslash pair is kept as written.
    fn label_value(&self, start: usize, end: usize) -> Result<(Cow<'a, str>, usize), ParseError> {
        let b = self.bytes;
        let unclosed = error(ParseErrorKind::Labels, end);
        let slice = |from: usize, to: usize| self.text.get(from..to).ok_or(unclosed);
        let Some(i) = memchr2(b'"', b'\\', &b[start..end]) else {
            return Err(unclosed);
        };
        let mut pos = start + i;
        if b[pos] == b'"' {
            return Ok((Cow::Borrowed(slice(start, pos)?), pos + 1));
        }
        let mut owned = String::with_capacity(pos - start + 16);
        owned.push_str(slice(start, pos)?);
        loop {
            // b[pos] is a backslash.
            match b.get(pos + 1).filter(|_| pos + 1 < end) {
                Some(b'n') => {
                    owned.push('\n');
                    pos += 2;
                }
                Some(b'\\') => {
                    owned.push('\\');
                    pos += 2;
                }
                Some(b'"') => {
                    owned.push('"');
                    pos += 2;
                }
                Some(_) => {
                    owned.push('\\');
                    pos += 1;
                }
                None => return Err(unclosed),
            }
            let Some(i) = memchr2(b'"', b'\\', &b[pos..end]) else {
                return Err(unclosed);
            };
            owned.push_str(slice(pos, pos + i)?);
            pos += i;
            if b[pos] == b'"' {
                return Ok((Cow::Owned(owned), pos + 1));
            }
        }
    }
}

/// Core-seconds to core-nanoseconds exactly as Go's `uint64(value * 1e9)`.
fn seconds_to_ns(value: f64) -> u64 {
    (value * 1e9) as u64
}

/// A Prometheus timestamp (integer Unix ms) in Unix ns. `None` when it is not an integer,
/// negative, or out of range.
fn timestamp_ns(token: &[u8]) -> Option<i64> {
    let digits = match token.first()? {
        b'+' => &token[1..],
        b'-' => return None,
        _ => token,
    };
    if digits.is_empty() {
        return None;
    }
    let mut ms: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        ms = ms.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    ms.checked_mul(1_000_000)
}

fn error(kind: ParseErrorKind, offset: usize) -> ParseError {
    ParseError { kind, offset }
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn skip_blanks(b: &[u8], mut pos: usize, end: usize) -> usize {
    while pos < end && is_blank(b[pos]) {
        pos += 1;
    }
    pos
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

fn is_label_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

type Key<'a> = (Cow<'a, str>, Cow<'a, str>, Cow<'a, str>);

/// The containers seen so far, merged across families.
///
/// The kubelet prints every family in the same series order, so the n-th series of a family
/// is usually the n-th container: that guess is checked first and the hash index is only
/// consulted when it misses (and when a container is new).
struct Containers<'a> {
    list: Vec<ContainerSample<'a>>,
    index: HashMap<Key<'a>, usize, BuildHasherDefault<FxHasher>>,
    hint: usize,
    hint_family: Family,
}

impl Default for Containers<'_> {
    fn default() -> Self {
        Containers {
            list: Vec::new(),
            index: HashMap::default(),
            hint: 0,
            hint_family: Family::Other,
        }
    }
}

impl<'a> Containers<'a> {
    fn slot(
        &mut self,
        family: Family,
        namespace: Cow<'a, str>,
        pod: Cow<'a, str>,
        container: Cow<'a, str>,
        default_timestamp_ns: i64,
    ) -> &mut Sample {
        if family != self.hint_family {
            self.hint_family = family;
            self.hint = 0;
        }
        let hit = self
            .list
            .get(self.hint)
            .is_some_and(|c| c.container == container && c.pod == pod && c.namespace == namespace);
        let idx = if hit {
            self.hint
        } else {
            match self.index.entry((namespace, pod, container)) {
                Entry::Occupied(o) => *o.get(),
                Entry::Vacant(v) => {
                    let (namespace, pod, container) = v.key().clone();
                    let idx = self.list.len();
                    self.list.push(ContainerSample {
                        namespace,
                        pod,
                        container,
                        sample: Sample {
                            timestamp_ns: default_timestamp_ns,
                            ..Sample::default()
                        },
                    });
                    v.insert(idx);
                    idx
                }
            }
        };
        self.hint = idx + 1;
        &mut self.list[idx].sample
    }
}

/// The Firefox/rustc "Fx" hash: a multiply-rotate over 8-byte words. Keys are a few short
/// label values from one size-bounded kubelet body, so SipHash's flooding resistance buys
/// little here and its cost is per container.
#[derive(Default)]
struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}
