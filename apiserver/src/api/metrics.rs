//! `metrics_server_api_metric_freshness_seconds` (metrics-server `pkg/api/monitoring.go`):
//! a histogram with buckets `1 * 1.364^k`, k = 0..19, one observation per returned item.
//!
//! A hand-rolled collector so that the exposed HELP text is exactly metrics-server's
//! (prometheus-client's own metrics append a period) and so that a 150,000-item list records
//! its observations with one merge instead of 150,000 lock round trips.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// The metric name.
pub const NAME: &str = "metrics_server_api_metric_freshness_seconds";
/// The HELP text.
pub const HELP: &str = "[ALPHA] Freshness of metrics exported";
const BUCKETS: usize = 20;

/// The histogram.
#[derive(Debug)]
pub struct Freshness {
    bounds: [f64; BUCKETS],
    /// Per-bucket (non-cumulative) counts; the last one is `+Inf`.
    counts: [AtomicU64; BUCKETS + 1],
    count: AtomicU64,
    sum_bits: AtomicU64,
}

/// Observations gathered while answering one request, merged once.
#[derive(Debug)]
pub struct Batch<'a> {
    histogram: &'a Freshness,
    counts: [u64; BUCKETS + 1],
    sum: f64,
}

impl Freshness {
    /// An empty histogram with Go's `prometheus.ExponentialBuckets(1, 1.364, 20)`.
    pub fn new() -> Self {
        let mut bounds = [0.0; BUCKETS];
        let mut b = 1.0f64;
        for slot in &mut bounds {
            *slot = b;
            b *= 1.364;
        }
        Freshness {
            bounds,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Starts a batch of observations.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            histogram: self,
            counts: [0; BUCKETS + 1],
            sum: 0.0,
        }
    }

    /// The bucket of an observation of `seconds`: the first bound at or above it, else
    /// `+Inf`. (A branch-free count of the bounds below it was measured: 3x the
    /// instructions of this scan.)
    fn bucket(&self, seconds: f64) -> usize {
        self.bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS)
    }

    /// Total observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Default for Freshness {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch<'_> {
    /// Records `now - timestamp` in seconds.
    pub fn observe(&mut self, now_ns: i64, timestamp_ns: i64) {
        let seconds = now_ns.saturating_sub(timestamp_ns) as f64 / 1e9;
        self.counts[self.histogram.bucket(seconds)] += 1;
        self.sum += seconds;
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let n: u64 = self.counts.iter().sum();
        if n == 0 {
            return;
        }
        let h = self.histogram;
        for (slot, c) in h.counts.iter().zip(self.counts) {
            if c > 0 {
                slot.fetch_add(c, Ordering::Relaxed);
            }
        }
        let _ = h
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + self.sum).to_bits())
            });
        h.count.fetch_add(n, Ordering::Relaxed);
    }
}

impl Collector for Freshness {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(self.counts.iter())
            .map(|(b, c)| (*b, c.load(Ordering::Relaxed)))
            .collect();
        buckets.push((f64::MAX, self.counts[BUCKETS].load(Ordering::Relaxed)));
        let sum = f64::from_bits(self.sum_bits.load(Ordering::Relaxed));
        let metric = encoder.encode_descriptor(NAME, HELP, None, MetricType::Histogram)?;
        let mut metric = metric;
        metric.encode_histogram::<NoLabelSet>(sum, self.count(), &buckets, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's bucket for an age: the first `1.364^k` (k < 20) at or above it, else `+Inf`.
    fn go_bucket(seconds: f64) -> usize {
        (0..BUCKETS)
            .find(|&k| seconds <= 1.364f64.powi(k as i32))
            .unwrap_or(BUCKETS)
    }

    /// A batch counts every observation in its bucket (bounds included in their own, as Go's
    /// `le`), and merges them once at its end.
    #[test]
    fn a_batch_counts_every_observation_in_its_bucket() {
        const S: i64 = 1_000_000_000;
        let now = 1_700_000_000 * S;
        let pairs = [
            (now, now),
            (now, now),
            (now, now - S + 1),
            (now, now - S),
            (now, now - S - 1),
            (now, now - S - 1),
            (now + S, now - S - 1),
            (now + S, now - 15 * S),
            (now + S, now - 15 * S),
            (now, now - 15 * S),
            (now, now - 90_000 * S),
            (now, now + 3 * S),
            (now, now - 1_364_000_000),
            (now, now - 1_364_000_001),
        ];
        let h = Freshness::new();
        let mut expected = [0u64; BUCKETS + 1];
        {
            let mut batch = h.batch();
            for (now, timestamp) in pairs {
                batch.observe(now, timestamp);
                expected[go_bucket((now - timestamp) as f64 / 1e9)] += 1;
            }
            assert_eq!(h.count(), 0, "merged only when the batch ends");
        }
        assert_eq!(h.count(), pairs.len() as u64);
        let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(counts, expected);
        assert!(expected.iter().filter(|c| **c > 0).count() >= 5);
    }
}
