//! `/stats/summary` parser: the kubelet's JSON stats (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`).
//!
//! serde into borrowed structs that name only what a metrics server needs; every other field
//! (network, fs, psi, io, systemContainers, ...) is skipped. Every numeric field and
//! every `cpu`/`memory` object may be absent or `null`. Mirrors the field choice of
//! metrics-server v0.5's `pkg/scraper/client/summary` decoder, with presence kept explicit so
//! the store decides what is valid. [`attach_rates`] lends a summary's rates to a
//! `/metrics/resource` scrape at warm-up.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use foldhash::fast::RandomState;
use memchr::memchr;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{ParseError, ParseErrorKind};
use crate::point::{ContainerSample, NodeScrape, Sample};

#[cfg(test)]
mod tests;

/// Parses a `/stats/summary` body.
///
/// A sample's timestamp is its `cpu.time`, else its `memory.time`, else `request_time_ns`.
/// A node whose CPU and memory values are all zero or absent (a known kubelet problem on
/// some cgroup v2 hosts) yields `node: None`; its pods are still returned. Pods without a
/// `podRef` name or namespace and containers without a name are skipped.
pub fn parse(body: &[u8], request_time_ns: i64) -> Result<NodeScrape<'_>, ParseError> {
    // One UTF-8 check of the whole body is cheaper than serde_json's check of every string.
    let text = std::str::from_utf8(body).map_err(|e| ParseError {
        kind: ParseErrorKind::Utf8,
        offset: e.valid_up_to(),
    })?;
    let summary: Summary<'_> = serde_json::from_str(text).map_err(|e| ParseError {
        kind: ParseErrorKind::Json,
        offset: offset_of(body, e.line(), e.column()),
    })?;
    let node = summary
        .node
        .map(|n| sample(n.cpu, n.memory, n.swap, None, request_time_ns))
        .filter(|s| {
            s.cpu_usage_ns_total.unwrap_or(0) != 0
                || s.cpu_nanocores.unwrap_or(0) != 0
                || s.memory_working_set_bytes.unwrap_or(0) != 0
        });
    let pods = summary.pods.unwrap_or_default();
    let count = pods
        .iter()
        .map(|p| p.containers.as_ref().map_or(0, Vec::len))
        .sum();
    let mut containers = Vec::with_capacity(count);
    for pod in pods {
        let Some(PodRef {
            name: Some(Str(pod_name)),
            namespace: Some(Str(namespace)),
        }) = pod.pod_ref
        else {
            continue;
        };
        for c in pod.containers.unwrap_or_default() {
            let Some(Str(name)) = c.name else {
                continue;
            };
            containers.push(ContainerSample {
                namespace: namespace.clone(),
                pod: pod_name.clone(),
                container: name,
                sample: sample(c.cpu, c.memory, c.swap, c.start_time, request_time_ns),
            });
        }
    }
    Ok(NodeScrape { node, containers })
}

/// How far apart the timestamps of one sample can read in the two endpoints: the summary's
/// `time` is a `metav1.Time`, whole seconds, where `/metrics/resource` has milliseconds.
/// (With the CRI stats provider each request samples anew: the two are milliseconds apart.)
const SAME_SAMPLE_NS: i64 = 1_000_000_000;

/// What [`attach_rates`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attached {
    /// Series that got the kubelet's rate.
    pub rates: usize,
    /// Series the summary has a newer sample of: the kubelet refreshed them between the two
    /// requests, and a new read of `/metrics/resource` would have their rates.
    pub newer: usize,
}

/// Attaches the kubelet's own CPU rates (`usageNanoCores`) from a summary of a node to the
/// samples of a `/metrics/resource` scrape of the same node taken just before it, so the
/// store can serve those series at once, before a second sample gives a rate of its own.
///
/// A series gets a rate only when the summary's sample of it is the same sample, the two
/// timestamps within [`SAME_SAMPLE_NS`] of each other (a kubelet refreshes a series every
/// housekeeping interval, 10 s by default, so two different samples are further apart); a
/// series the summary has no rate for (a container on its first sample) keeps none.
pub fn attach_rates(resource: &mut NodeScrape<'_>, summary: &NodeScrape<'_>) -> Attached {
    let mut attached = Attached::default();
    let mut attach = |sample: &mut Sample, rates: &Sample| {
        let Some(nanocores) = rates.cpu_nanocores else {
            return;
        };
        if sample.timestamp_ns.abs_diff(rates.timestamp_ns) < SAME_SAMPLE_NS.unsigned_abs() {
            sample.cpu_nanocores = Some(nanocores);
            attached.rates += 1;
        } else if rates.timestamp_ns > sample.timestamp_ns {
            attached.newer += 1;
        }
    };
    if let (Some(node), Some(rates)) = (&mut resource.node, &summary.node) {
        attach(node, rates);
    }
    let rates: HashMap<(&str, &str, &str), &Sample, RandomState> = summary
        .containers
        .iter()
        .filter(|c| c.sample.cpu_nanocores.is_some())
        .map(|c| ((&*c.namespace, &*c.pod, &*c.container), &c.sample))
        .collect();
    if !rates.is_empty() {
        for c in &mut resource.containers {
            if let Some(rates) = rates.get(&(&*c.namespace, &*c.pod, &*c.container)) {
                attach(&mut c.sample, rates);
            }
        }
    }
    attached
}

fn sample(
    cpu: Option<Cpu>,
    memory: Option<Memory>,
    swap: Option<Swap>,
    start_time_ns: Option<i64>,
    request_time_ns: i64,
) -> Sample {
    let cpu = cpu.unwrap_or_default();
    let memory = memory.unwrap_or_default();
    Sample {
        timestamp_ns: cpu.time.or(memory.time).unwrap_or(request_time_ns),
        cpu_usage_ns_total: cpu.usage_core_nano_seconds,
        cpu_nanocores: cpu.usage_nano_cores,
        memory_working_set_bytes: memory.working_set_bytes,
        start_time_ns,
        swap_bytes: swap.and_then(|s| s.swap_usage_bytes),
    }
}

/// Turns serde_json's 1-based line and column into a byte offset into `body`.
fn offset_of(body: &[u8], line: usize, column: usize) -> usize {
    if line == 0 {
        return body.len();
    }
    let mut line_start = 0;
    for _ in 1..line {
        match memchr(b'\n', &body[line_start..]) {
            Some(i) => line_start += i + 1,
            None => return body.len(),
        }
    }
    (line_start + column.saturating_sub(1)).min(body.len())
}

#[derive(Deserialize)]
struct Summary<'a> {
    #[serde(default)]
    node: Option<NodeStats>,
    #[serde(borrow, default)]
    pods: Option<Vec<PodStats<'a>>>,
}

#[derive(Deserialize)]
struct NodeStats {
    #[serde(default)]
    cpu: Option<Cpu>,
    #[serde(default)]
    memory: Option<Memory>,
    #[serde(default)]
    swap: Option<Swap>,
}

#[derive(Deserialize)]
struct PodStats<'a> {
    #[serde(borrow, default, rename = "podRef")]
    pod_ref: Option<PodRef<'a>>,
    #[serde(borrow, default)]
    containers: Option<Vec<ContainerStats<'a>>>,
}

#[derive(Deserialize)]
struct PodRef<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ContainerStats<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(default, rename = "startTime", deserialize_with = "time")]
    start_time: Option<i64>,
    #[serde(default)]
    cpu: Option<Cpu>,
    #[serde(default)]
    memory: Option<Memory>,
    #[serde(default)]
    swap: Option<Swap>,
}

/// `SwapStats` (kubelet 1.30+): `swapUsageBytes` is a gauge like the working set.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Swap {
    #[serde(default)]
    swap_usage_bytes: Option<u64>,
}

/// `CPUStats`: `usageNanoCores` is the kubelet's own rate, `usageCoreNanoSeconds` the
/// cumulative counter.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Cpu {
    #[serde(default, deserialize_with = "time")]
    time: Option<i64>,
    #[serde(default)]
    usage_nano_cores: Option<u64>,
    #[serde(default)]
    usage_core_nano_seconds: Option<u64>,
}

/// `MemoryStats`, only the working set.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Memory {
    #[serde(default, deserialize_with = "time")]
    time: Option<i64>,
    #[serde(default)]
    working_set_bytes: Option<u64>,
}

/// A JSON string borrowed from the body when it has no escapes (serde's `Cow` impl alone
/// always copies).
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(StrVisitor(std::marker::PhantomData))
    }
}

/// A `metav1.Time` (RFC 3339, or `null`) as Unix ns.
fn time<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let Some(Str(s)) = Option::<Str<'_>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    rfc3339_ns(&s)
        .map(Some)
        .ok_or_else(|| de::Error::custom("invalid or out of range RFC 3339 time"))
}

/// Parses an RFC 3339 date-time (`2023-11-10T06:20:52Z`, `...52.123456789+02:00`) into Unix
/// nanoseconds, as Go's `time.Parse(time.RFC3339, s)` accepts it: fractional seconds of any
/// length (digits past nanoseconds are truncated), `Z` or a `±hh:mm` offset, no leap second.
/// `None` when malformed or outside the `i64` nanosecond range (years 1678 to 2262).
pub fn rfc3339_ns(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > crate::clock::days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }

    let mut pos = 19;
    let mut frac_ns: i64 = 0;
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            if pos - start < 9 {
                frac_ns = frac_ns * 10 + i64::from(b[pos] - b'0');
            }
            pos += 1;
        }
        let n = pos - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            frac_ns *= 10;
        }
    }

    let offset_s = match b.get(pos)? {
        b'Z' | b'z' if pos + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if pos + 6 == b.len() && b[pos + 3] == b':' => {
            let h = digits(&b[pos + 1..pos + 3])?;
            let m = digits(&b[pos + 4..pos + 6])?;
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };

    let seconds = crate::clock::days_from_civil(year, month, day) * 86_400
        + hour * 3600
        + minute * 60
        + second
        - offset_s;
    seconds.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
    })
}
