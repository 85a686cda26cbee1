//! `/metrics/resource` parser: the Prometheus text exposition format as the kubelet serves it.
//!
//! Mirrors metrics-server's `pkg/scraper/client/resource/decode.go` (reference §3.4): only the
//! node and container CPU and memory families and `container_start_time_seconds` are read,
//! matched by exact family name; everything else is skipped after a cheap check that the line
//! looks like a metric line or a comment, so an HTML error page or garbage fails the node.
//!
//! The parser is hand-written for speed (see `BENCHMARKS.md`, section Parse): the body is
//! UTF-8 validated once (SIMD), lines are found with `memchr`, a line's family is picked by
//! the bytes that tell the names apart, bytes are classified by table (`lex`), digit runs
//! are read eight bytes at a time, decimals of up to 19 digits are rounded exactly without
//! the standard library's parser, and label values are borrowed from
//! the body (`Cow::Owned` only when a value has escapes). A series that repeats the label
//! text of the container expected next is merged without parsing its labels (and, when
//! its value and timestamp end the line, read without first searching for the line's end),
//! a label set in the kubelet's exact shape is read by three prefix compares, and a
//! container that comes in the kubelet's order is new without a lookup. The only
//! allocations are the output `Vec`, the label-text `Vec` and, for a body out of the
//! kubelet's order, the hash index that merges the families of one container.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use foldhash::fast::RandomState;

use memchr::memchr;

use super::{ParseError, ParseErrorKind};
use crate::point::{ContainerSample, NodeScrape, Sample};

#[cfg(test)]
pub(super) mod fuzz;
mod lex;
#[cfg(test)]
mod tests;

use lex::{
    LABEL, LABEL_START, NAME, NAME_START, find_quote, is, is_blank, parse_float, skip_blanks,
    timestamp_and_line_end, timestamp_ns,
};

/// Parses a `/metrics/resource` body.
///
/// Samples without a timestamp get `default_timestamp_ns` (metrics-server uses the request
/// start time). A sample whose value is NaN, infinite or negative is skipped; a container
/// series without its `namespace`, `pod` or `container` label is skipped. A syntax error
/// anywhere, or a negative timestamp on a series that is read, fails the whole body, as
/// metrics-server's `decodeBatch` does.
pub fn parse(body: &[u8], default_timestamp_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
    // SIMD validation (~4x fewer instructions than the standard library's on a kubelet
    // body); the standard library's only says where an invalid body goes wrong.
    let text = match simdutf8::basic::from_utf8(body) {
        Ok(text) => text,
        Err(_) => {
            let invalid = std::str::from_utf8(body)
                .err()
                .map_or(0, |e| e.valid_up_to());
            return Err(error(ParseErrorKind::Utf8, invalid));
        }
    };
    let mut parser = Parser {
        text,
        bytes: body,
        default_timestamp_ns,
        node: Sample {
            timestamp_ns: default_timestamp_ns,
            ..Sample::default()
        },
        containers: Containers::with_capacity(body.len()),
    };
    let mut start = 0;
    while start < body.len() {
        if let Some(next) = parser.expected_line(start) {
            start = next;
            continue;
        }
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

#[cfg(test)]
thread_local! {
    /// Tests set it to read every line by the general path alone, to compare the fast
    /// paths ([`Parser::expected_line`], [`Parser::kubelet_labels`]) with it.
    static GENERAL_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Lines [`Parser::expected_line`] read, for tests to check that their bodies reach it.
    static FAST_LINES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn general_only() -> bool {
    GENERAL_ONLY.with(std::cell::Cell::get)
}

#[cfg(not(test))]
#[inline(always)]
const fn general_only() -> bool {
    false
}

#[cfg(test)]
fn count_fast_line() {
    FAST_LINES.with(|n| n.set(n.get() + 1));
}

#[cfg(not(test))]
#[inline(always)]
fn count_fast_line() {}

/// The families that are read; everything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    NodeCpu,
    NodeMemory,
    NodeSwap,
    ContainerCpu,
    ContainerMemory,
    ContainerStart,
    ContainerSwap,
    Other,
}

impl Family {
    /// A container family: its series name a container by their labels.
    #[inline(always)]
    fn is_container(self) -> bool {
        matches!(
            self,
            Family::ContainerCpu
                | Family::ContainerMemory
                | Family::ContainerStart
                | Family::ContainerSwap
        )
    }
}

/// NaN, infinities and negative values cannot be CPU, memory or a start time: such a
/// sample is skipped, not recorded.
#[inline(always)]
fn usable(value: f64) -> bool {
    value.is_finite() && value >= 0.0
}

/// The family a line starts with and the length of its name, when it is one that is read
/// or one of the kubelet's pod families, which are not (`Other`): the exact name followed by
/// `{`, a space or a tab. Every line is looked at here, so the candidate is picked by the
/// bytes that tell the names apart and then compared whole, with its length known to the
/// compiler (inline compares, no `memcmp` call per candidate).
#[inline(always)]
fn known_family(line: &[u8]) -> Option<(Family, usize)> {
    if let Some(rest) = line.strip_prefix(b"container_") {
        match rest {
            [b'c', ..] => exact(
                line,
                b"container_cpu_usage_seconds_total",
                Family::ContainerCpu,
            ),
            [b'm', ..] => exact(
                line,
                b"container_memory_working_set_bytes",
                Family::ContainerMemory,
            ),
            [b's', b't', ..] => exact(
                line,
                b"container_start_time_seconds",
                Family::ContainerStart,
            ),
            [b's', b'w', ..] => exact(line, b"container_swap_usage_bytes", Family::ContainerSwap),
            _ => None,
        }
    } else if let Some(rest) = line.strip_prefix(b"node_") {
        match rest {
            [b'c', ..] => exact(line, b"node_cpu_usage_seconds_total", Family::NodeCpu),
            [b'm', ..] => exact(line, b"node_memory_working_set_bytes", Family::NodeMemory),
            [b's', ..] => exact(line, b"node_swap_usage_bytes", Family::NodeSwap),
            _ => None,
        }
    } else if let Some(rest) = line.strip_prefix(b"pod_") {
        // The kubelet's pod families (1.29 on), not read: known, so that their lines need
        // no scan of the name (a third of the lines of a 1.36 body).
        match rest {
            [b'c', ..] => exact(line, b"pod_cpu_usage_seconds_total", Family::Other),
            [b'm', ..] => exact(line, b"pod_memory_working_set_bytes", Family::Other),
            [b's', ..] => exact(line, b"pod_swap_usage_bytes", Family::Other),
            _ => None,
        }
    } else {
        None
    }
}

/// `family` when `line` starts with exactly `name`, followed by `{` or a blank.
#[inline(always)]
fn exact<const N: usize>(line: &[u8], name: &[u8; N], family: Family) -> Option<(Family, usize)> {
    let head: &[u8; N] = line.get(..N)?.try_into().ok()?;
    let terminated = matches!(line.get(N), Some(b'{' | b' ' | b'\t'));
    (terminated && head == name).then_some((family, N))
}

/// Which label a label name is.
enum Label {
    Namespace,
    Pod,
    Container,
    Other,
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
        let Some((family, name_len)) = known_family(&b[pos..end]) else {
            return self.skipped_line(pos, end);
        };
        if family == Family::Other {
            return self.skipped_after_name(pos + name_len, end);
        }
        pos = skip_blanks(b, pos + name_len, end);

        let is_container = family.is_container();
        if is_container {
            self.containers.start_series(family);
        }
        let mut labels = Labels::default();
        let mut known = None;
        let mut span: &'a [u8] = &[];
        if pos < end && b[pos] == b'{' {
            // The kubelet prints the same label text for a container in every family: when
            // it matches the expected container's, the labels need no parsing.
            known = if is_container {
                self.containers.expected(&b[pos..end])
            } else {
                None
            };
            let open = pos;
            pos = match known {
                Some(idx) => pos + self.containers.spans[idx].len(),
                None => match self.kubelet_labels(pos, end) {
                    Some((kubelet, after)) => {
                        labels = kubelet;
                        after
                    }
                    None => self.labels(pos + 1, end, &mut labels)?,
                },
            };
            span = &b[open..pos];
            pos = skip_blanks(b, pos, end);
        }

        // The value: a plain decimal (rounded by the fast path, or where it ends), else the
        // token up to the next blank; the standard parser reads what the fast path did not.
        let value_start = pos;
        let (rounded, value_end) =
            parse_float(b, pos, end).unwrap_or_else(|| (None, token_end(b, pos, end)));
        pos = value_end;
        let value = match rounded {
            Some(value) => value,
            None if pos == value_start => return Err(error(ParseErrorKind::Syntax, pos)),
            None => self
                .text
                .get(value_start..pos)
                .and_then(|s| s.parse().ok())
                .ok_or(error(ParseErrorKind::Value, value_start))?,
        };

        pos = skip_blanks(b, pos, end);
        let timestamp_ns = if pos < end {
            let (ns, ts_end) =
                timestamp_ns(b, pos, end).ok_or(error(ParseErrorKind::Timestamp, pos))?;
            pos = skip_blanks(b, ts_end, end);
            if pos != end {
                return Err(error(ParseErrorKind::Syntax, pos));
            }
            ns
        } else {
            self.default_timestamp_ns
        };

        if !usable(value) {
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
            // A gauge beside memory; its timestamp does not move the sample's (CPU and
            // memory define the window, as in metrics-server).
            Family::NodeSwap => self.node.swap_bytes = Some(value as u64),
            Family::ContainerCpu
            | Family::ContainerMemory
            | Family::ContainerStart
            | Family::ContainerSwap => {
                let idx = match (known, labels) {
                    (Some(idx), _) => idx,
                    (
                        None,
                        Labels {
                            namespace: Some(namespace),
                            pod: Some(pod),
                            container: Some(container),
                        },
                    ) => self.containers.find_or_insert(
                        (namespace, pod, container),
                        span,
                        self.default_timestamp_ns,
                    ),
                    // A container series without its identifying labels is skipped.
                    _ => return Ok(()),
                };
                self.record(family, idx, value, timestamp_ns);
            }
            Family::Other => {}
        }
        Ok(())
    }

    /// The kubelet's usual line, read without first searching for its end: a container
    /// family's name, the label text of the container expected next ([`Containers::expected`]),
    /// blanks, a plain decimal that the fast path rounds, blanks, a timestamp, and the line's
    /// end (`\n`, `\r\n` or the body's). Returns where the next line starts, or `None` (and
    /// nothing recorded) for any other line, which [`Parser::line`] then reads whole: what
    /// this reads is what that would read, and it fails nothing itself. None of the bytes
    /// it reads before the timestamp's end can be a newline (a name, label text that was a
    /// line's, blanks, digits), so it stays within the line. A real kubelet's memory and
    /// swap series take this path (120 of a 30-pod 1.36 body's 356 lines; its start times
    /// have no timestamp, and the first family introduces the containers), and each saves
    /// the `memchr` call that found its end (~85 instructions) and the general path's checks.
    #[inline(always)]
    fn expected_line(&mut self, start: usize) -> Option<usize> {
        let b = self.bytes;
        if b[start] != b'c' || general_only() {
            return None;
        }
        let (family, name_len) = known_family(&b[start..])?;
        let open = start + name_len;
        if !family.is_container() || b.get(open) != Some(&b'{') {
            return None;
        }
        self.containers.start_series(family);
        let idx = self.containers.expected(&b[open..])?;
        let value_start = skip_blanks(b, open + self.containers.spans[idx].len(), b.len());
        let (rounded, value_end) = parse_float(b, value_start, b.len())?;
        let value = rounded?;
        // A value that ends the body has no timestamp after it: no digit there, `None`.
        let stamp = skip_blanks(b, value_end, b.len());
        let (timestamp_ns, next) = timestamp_and_line_end(b, stamp)?;
        if usable(value) {
            self.record(family, idx, value, timestamp_ns);
        }
        count_fast_line();
        Some(next)
    }

    /// Records a container family's [`usable`] value for container `idx`.
    #[inline(always)]
    fn record(&mut self, family: Family, idx: usize, value: f64, timestamp_ns: i64) {
        let sample = self.containers.sample(idx);
        match family {
            Family::ContainerCpu => {
                sample.cpu_usage_ns_total = Some(seconds_to_ns(value));
                sample.timestamp_ns = timestamp_ns;
            }
            Family::ContainerMemory => {
                sample.memory_working_set_bytes = Some(value as u64);
                sample.timestamp_ns = timestamp_ns;
            }
            Family::ContainerSwap => sample.swap_bytes = Some(value as u64),
            // `time.Unix(0, int64(value*1e9))`; the sample's own timestamp is the start time
            // again on some kubelets and is ignored.
            _ => sample.start_time_ns = Some((value * 1e9) as i64),
        }
    }

    /// Checks a line of a family that is not read, from its first byte to `end`, without
    /// parsing its labels: a metric name followed by `{` or a blank, the start of a number
    /// right after the name when it has no labels, and a number at the end (its value, or
    /// its timestamp). So a plain-text error page served with 200 (`Internal Server Error`)
    /// fails the node, as metrics-server's parser fails it on the value, instead of reading
    /// as a body of families that are not read, with no node and no pod in it. The checks
    /// look at a byte or two where the line is well formed (a digit ends it), so the lines
    /// skipped cost little more than before.
    fn skipped_line(&self, start: usize, end: usize) -> Result<(), ParseError> {
        let b = self.bytes;
        if !is(NAME_START, b[start]) {
            return Err(error(ParseErrorKind::Syntax, start));
        }
        let mut pos = start + 1;
        while pos < end && is(NAME, b[pos]) {
            pos += 1;
        }
        self.skipped_after_name(pos, end)
    }

    /// [`Parser::skipped_line`] after the metric name, which ends at `pos`.
    fn skipped_after_name(&self, pos: usize, end: usize) -> Result<(), ParseError> {
        let b = self.bytes;
        if pos == end || !matches!(b[pos], b'{' | b' ' | b'\t') {
            return Err(error(ParseErrorKind::Syntax, pos));
        }
        if b[pos] != b'{' {
            let value = skip_blanks(b, pos, end);
            let starts_number = b.get(value).is_some_and(|&c| {
                c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.' | b'N' | b'n' | b'I' | b'i')
            });
            if value == end || !starts_number {
                return Err(error(ParseErrorKind::Value, value));
            }
        }
        let mut last_end = end;
        while last_end > pos && is_blank(b[last_end - 1]) {
            last_end -= 1;
        }
        if last_end > pos && b[last_end - 1].is_ascii_digit() {
            return Ok(());
        }
        // Not a digit at the end: the last token must still be a number (`NaN`, `+Inf`).
        let mut last = last_end;
        while last > pos && !is_blank(b[last - 1]) {
            last -= 1;
        }
        // `last == pos`: the label set runs to the end of the line, with no value after it.
        let number = self
            .text
            .get(last..last_end)
            .is_some_and(|t| t.parse::<f64>().is_ok());
        if last == pos || !number {
            return Err(error(ParseErrorKind::Value, last));
        }
        Ok(())
    }

    /// The label set at `b[open..end]` when it is exactly as the kubelet prints a container
    /// series' (`{container="…",namespace="…",pod="…"}`, the names sorted, no blanks, no
    /// escapes), and the position after its `}`; `None` for any other (which
    /// [`Parser::labels`] then reads, to the same values when it is one of these): three
    /// prefix compares and three quote searches instead of the general loop (the first
    /// family's ~60 label sets of a 30-pod body).
    #[inline(always)]
    fn kubelet_labels(&self, open: usize, end: usize) -> Option<(Labels<'a>, usize)> {
        if general_only() {
            return None;
        }
        let (container, pos) = self.quoted(b"{container=\"", open, end)?;
        let (namespace, pos) = self.quoted(b"\",namespace=\"", pos, end)?;
        let (pod, pos) = self.quoted(b"\",pod=\"", pos, end)?;
        let close = pos.checked_add(2).filter(|&close| close <= end)?;
        (&self.bytes[pos..close] == b"\"}").then_some((
            Labels {
                namespace: Some(Cow::Borrowed(namespace)),
                pod: Some(Cow::Borrowed(pod)),
                container: Some(Cow::Borrowed(container)),
            },
            close,
        ))
    }

    /// `prefix` at `b[pos..]`, then a label value without escapes up to its closing quote:
    /// the value and the position of that quote.
    #[inline(always)]
    fn quoted<const N: usize>(
        &self,
        prefix: &[u8; N],
        pos: usize,
        end: usize,
    ) -> Option<(&'a str, usize)> {
        let start = pos.checked_add(N).filter(|&start| start <= end)?;
        if &self.bytes[pos..start] != prefix {
            return None;
        }
        let quote = find_quote(self.bytes, start, end)?;
        if self.bytes[quote] != b'"' {
            return None;
        }
        Some((self.text.get(start..quote)?, quote))
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
            let rest = &b[pos..end];
            let (key, value_start) = if rest.starts_with(b"container=\"") {
                (Label::Container, pos + 11)
            } else if rest.starts_with(b"namespace=\"") {
                (Label::Namespace, pos + 11)
            } else if rest.starts_with(b"pod=\"") {
                (Label::Pod, pos + 5)
            } else {
                if !is(LABEL_START, b[pos]) {
                    return Err(error(ParseErrorKind::Labels, pos));
                }
                let name_start = pos;
                pos += 1;
                while pos < end && is(LABEL, b[pos]) {
                    pos += 1;
                }
                let key = match &b[name_start..pos] {
                    b"namespace" => Label::Namespace,
                    b"pod" => Label::Pod,
                    b"container" => Label::Container,
                    _ => Label::Other,
                };
                pos = skip_blanks(b, pos, end);
                if pos == end || b[pos] != b'=' {
                    return Err(error(ParseErrorKind::Labels, pos));
                }
                pos = skip_blanks(b, pos + 1, end);
                if pos == end || b[pos] != b'"' {
                    return Err(error(ParseErrorKind::Labels, pos));
                }
                (key, pos + 1)
            };
            let (value, after) = self.label_value(value_start, end)?;
            match key {
                Label::Namespace => labels.namespace = Some(value),
                Label::Pod => labels.pod = Some(value),
                Label::Container => labels.container = Some(value),
                Label::Other => {}
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
        let Some(mut pos) = find_quote(b, start, end) else {
            return Err(unclosed);
        };
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
            let Some(next) = find_quote(b, pos, end) else {
                return Err(unclosed);
            };
            owned.push_str(slice(pos, next)?);
            pos = next;
            if b[pos] == b'"' {
                return Ok((Cow::Owned(owned), pos + 1));
            }
        }
    }
}

/// Core-seconds to core-nanoseconds exactly as Go's `uint64(value * 1e9)`.
/// Where the token that starts at `pos` ends: the next blank, or `end`.
fn token_end(b: &[u8], mut pos: usize, end: usize) -> usize {
    while pos < end && !is_blank(b[pos]) {
        pos += 1;
    }
    pos
}

fn seconds_to_ns(value: f64) -> u64 {
    (value * 1e9) as u64
}
fn error(kind: ParseErrorKind, offset: usize) -> ParseError {
    ParseError { kind, offset }
}
type Key<'a> = (Cow<'a, str>, Cow<'a, str>, Cow<'a, str>);

/// The containers seen so far, merged across families.
///
/// The kubelet prints every family in the same series order with the same label text, so
/// the n-th series of a family is usually the n-th container: its label text is compared
/// first (one `memcmp`, and the labels need no parsing). A series that misses is looked up
/// by its labels: while every container so far came in strictly ascending order of
/// (container, namespace, pod), the order the kubelet's registry sorts a family's series
/// in, a key above the last is new without a lookup; the first key out of that order builds
/// the hash index, which serves every lookup after it.
struct Containers<'a> {
    list: Vec<ContainerSample<'a>>,
    /// The label text (`{...}`) each container was first seen with.
    spans: Vec<&'a [u8]>,
    /// Built at the first key out of order. Keyed by kubelet-controlled strings: a randomly
    /// seeded hasher, so no node can pick label values that collide.
    index: Option<HashMap<Key<'a>, usize, RandomState>>,
    /// The container the next series of `hint_family` is expected to be.
    hint: usize,
    hint_family: Family,
}

/// The order the kubelet prints a family's series in: by label value, label names sorted.
fn kubelet_order<'k>(key: &'k Key<'_>) -> (&'k str, &'k str, &'k str) {
    let (namespace, pod, container) = key;
    (container, namespace, pod)
}

impl<'a> Containers<'a> {
    /// Sized for a kubelet body of `body_len` bytes: a container takes ~400 bytes (three
    /// series of ~130), so this rarely grows and never over-reserves by much.
    fn with_capacity(body_len: usize) -> Self {
        let capacity = (body_len / 512).min(4096);
        Containers {
            list: Vec::with_capacity(capacity),
            spans: Vec::with_capacity(capacity),
            index: None,
            hint: 0,
            hint_family: Family::Other,
        }
    }

    /// Called for every container series: a new family starts again at the first container.
    fn start_series(&mut self, family: Family) {
        if family != self.hint_family {
            self.hint_family = family;
            self.hint = 0;
        }
    }

    /// The expected container, if `rest` (the line from its `{`) starts with its label text.
    #[inline(always)]
    fn expected(&self, rest: &[u8]) -> Option<usize> {
        let span = self.spans.get(self.hint)?;
        rest.starts_with(span).then_some(self.hint)
    }

    fn find_or_insert(&mut self, key: Key<'a>, span: &'a [u8], default_timestamp_ns: i64) -> usize {
        let index = match &mut self.index {
            Some(index) => index,
            None => {
                let ascending = self.list.last().is_none_or(|last| {
                    (&*last.container, &*last.namespace, &*last.pod) < kubelet_order(&key)
                });
                if ascending {
                    return self.push(key, span, default_timestamp_ns);
                }
                let mut index = HashMap::with_capacity_and_hasher(
                    self.list.len().max(self.list.capacity()),
                    RandomState::default(),
                );
                for (idx, c) in self.list.iter().enumerate() {
                    index.insert(
                        (c.namespace.clone(), c.pod.clone(), c.container.clone()),
                        idx,
                    );
                }
                self.index.insert(index)
            }
        };
        match index.entry(key) {
            Entry::Occupied(o) => *o.get(),
            Entry::Vacant(v) => {
                let idx = self.list.len();
                let key = v.key().clone();
                v.insert(idx);
                self.push(key, span, default_timestamp_ns)
            }
        }
    }

    /// Appends a new container; returns its index.
    fn push(&mut self, key: Key<'a>, span: &'a [u8], default_timestamp_ns: i64) -> usize {
        let (namespace, pod, container) = key;
        self.list.push(ContainerSample {
            namespace,
            pod,
            container,
            sample: Sample {
                timestamp_ns: default_timestamp_ns,
                ..Sample::default()
            },
        });
        self.spans.push(span);
        self.list.len() - 1
    }

    /// The sample of container `idx`; the next series is expected to be the next container.
    fn sample(&mut self, idx: usize) -> &mut Sample {
        self.hint = idx + 1;
        &mut self.list[idx].sample
    }
}
