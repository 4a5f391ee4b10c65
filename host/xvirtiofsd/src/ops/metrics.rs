// SPDX-License-Identifier: Apache-2.0
//! Per-queue counters, updated by each queue's own worker without locks
//! (relaxed atomics: one writer per queue, readers only want a recent value),
//! and their JSON rendering for `--metrics-file` and the control socket.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Latency histogram buckets: bucket `i` counts requests that took less than
/// `2^i` µs (the last bucket takes everything slower).
pub const LATENCY_BUCKETS: usize = 24;

/// Counters of one virtqueue.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Requests completed.
    pub requests: AtomicU64,
    /// Bytes the guest sent (device-readable) plus bytes of replies written.
    pub bytes: AtomicU64,
    /// Chains rejected before reaching the FUSE layer.
    pub bad_chains: AtomicU64,
    /// Times the guest corrupted the ring and the queue was marked broken.
    pub ring_faults: AtomicU64,
    /// Interrupts sent to the guest.
    pub notifications: AtomicU64,
    /// Batches found while busy-polling the ring.
    pub found_by_poll: AtomicU64,
    /// Batches found after sleeping on the kick eventfd (or at re-arm).
    pub found_by_wakeup: AtomicU64,
    /// Nanoseconds spent busy-polling.
    pub poll_ns: AtomicU64,
    /// Times the worker slept on the kick eventfd.
    pub sleeps: AtomicU64,
    /// Whether the adaptive policy currently polls (1) or not (0).
    pub polling: AtomicU64,
    /// Service latency (pop to used-ring publish), log2 µs buckets.
    pub latency: [AtomicU64; LATENCY_BUCKETS],
}

impl QueueStats {
    /// Records one completed request.
    pub fn record(&self, bytes: u64, nanos: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let micros = nanos / 1000;
        let bucket = (64 - micros.leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn get(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    /// The latency below which `q` (0..1) of the requests completed, in µs
    /// (upper bound of the bucket).
    pub fn latency_quantile_us(&self, q: f64) -> Option<u64> {
        let counts: Vec<u64> = self.latency.iter().map(Self::get).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let target = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Some(1u64 << i);
            }
        }
        Some(1u64 << (LATENCY_BUCKETS - 1))
    }

    /// This queue's counters as a report (one JSON object).
    pub fn report(&self, index: usize) -> QueueReport {
        QueueReport {
            queue: index,
            requests: Self::get(&self.requests),
            bytes: Self::get(&self.bytes),
            bad_chains: Self::get(&self.bad_chains),
            ring_faults: Self::get(&self.ring_faults),
            notifications: Self::get(&self.notifications),
            found_by_poll: Self::get(&self.found_by_poll),
            found_by_wakeup: Self::get(&self.found_by_wakeup),
            poll_us: Self::get(&self.poll_ns) / 1000,
            sleeps: Self::get(&self.sleeps),
            polling: Self::get(&self.polling) != 0,
            latency_us: LatencyQuantiles {
                p50: self.latency_quantile_us(0.5),
                p90: self.latency_quantile_us(0.9),
                p99: self.latency_quantile_us(0.99),
            },
            latency_log2_us: self.latency.iter().map(Self::get).collect(),
        }
    }

    /// One JSON object for this queue.
    pub fn to_json(&self, index: usize) -> String {
        serde_json::to_string(&self.report(index)).unwrap_or_default()
    }
}

/// Latency quantiles in µs (`null` before the first request).
#[derive(Debug, Clone, Serialize)]
pub struct LatencyQuantiles {
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
}

/// One queue's counters, as the status reply and the metrics file show them.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    pub queue: usize,
    pub requests: u64,
    pub bytes: u64,
    pub bad_chains: u64,
    pub ring_faults: u64,
    pub notifications: u64,
    pub found_by_poll: u64,
    pub found_by_wakeup: u64,
    pub poll_us: u64,
    pub sleeps: u64,
    pub polling: bool,
    pub latency_us: LatencyQuantiles,
    pub latency_log2_us: Vec<u64>,
}

/// Every queue's report, in queue order.
pub fn queue_reports(stats: &[std::sync::Arc<QueueStats>]) -> Vec<QueueReport> {
    stats.iter().enumerate().map(|(i, s)| s.report(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_log2_microseconds() {
        let s = QueueStats::default();
        s.record(10, 500); // < 1 µs -> bucket 0
        s.record(10, 3_000); // 3 µs -> bucket 2 (< 4 µs)
        s.record(10, 1_000_000); // 1000 µs -> bucket 10 (< 1024 µs)
        assert_eq!(s.latency[0].load(Ordering::Relaxed), 1);
        assert_eq!(s.latency[2].load(Ordering::Relaxed), 1);
        assert_eq!(s.latency[10].load(Ordering::Relaxed), 1);
        assert_eq!(s.requests.load(Ordering::Relaxed), 3);
        assert_eq!(s.bytes.load(Ordering::Relaxed), 30);
        assert_eq!(s.latency_quantile_us(0.5), Some(4));
        assert_eq!(s.latency_quantile_us(1.0), Some(1024));
    }

    #[test]
    fn json_has_every_counter() {
        let s = QueueStats::default();
        s.record(4096, 2_000);
        let j = s.to_json(1);
        for key in [
            "\"queue\":1",
            "\"requests\":1",
            "\"bytes\":4096",
            "found_by_poll",
            "found_by_wakeup",
            "poll_us",
            "\"p50\":4",
            "latency_log2_us",
        ] {
            assert!(j.contains(key), "{key} missing from {j}");
        }
        assert_eq!(QueueStats::default().to_json(0).matches("null").count(), 3);
    }
}
