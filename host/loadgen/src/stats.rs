// SPDX-License-Identifier: Apache-2.0
//! Per-thread counters and latency samples, merged into one summary.
//!
//! Latencies are kept exactly (one u32 of nanoseconds per operation, about
//! 4 MB per million operations) and percentiles use the nearest-rank method:
//! the p-th percentile of n sorted samples is sample number ceil(p/100 * n).

/// What one client thread counted during the measured window.
#[derive(Debug, Default, Clone)]
pub struct ThreadStats {
    /// Operations completed (one op may be several FUSE requests).
    pub ops: u64,
    /// Payload bytes moved (READ/WRITE data).
    pub bytes: u64,
    /// FUSE requests completed.
    pub requests: u64,
    /// Directory entries returned (READDIRPLUS).
    pub entries: u64,
    /// Kicks written to the kick eventfd.
    pub kicks: u64,
    /// Times the thread slept on the call eventfd.
    pub sleeps: u64,
    /// Operation latencies in nanoseconds.
    pub lat_ns: Vec<u32>,
}

impl ThreadStats {
    /// Records one operation of `ns` nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.ops += 1;
        self.lat_ns.push(u32::try_from(ns).unwrap_or(u32::MAX));
    }

    /// Adds another thread's counts.
    pub fn merge(&mut self, o: ThreadStats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.requests += o.requests;
        self.entries += o.entries;
        self.kicks += o.kicks;
        self.sleeps += o.sleeps;
        self.lat_ns.extend(o.lat_ns);
    }
}

/// Nearest-rank percentile of sorted samples; `None` when empty.
pub fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // The epsilon keeps 99.9% of 1000 at rank 999 despite 0.999 * 1000 > 999.
    let rank = ((p / 100.0) * n as f64 - 1e-9).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Latency figures in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Smallest sample.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest sample.
    pub max_us: f64,
}

/// Sorts the samples in place and summarises them; `None` when empty.
pub fn latency(samples: &mut [u32]) -> Option<Latency> {
    samples.sort_unstable();
    let us = |v: Option<u32>| f64::from(v.unwrap_or(0)) / 1000.0;
    let sum: u64 = samples.iter().map(|&v| u64::from(v)).sum();
    let n = samples.len();
    if n == 0 {
        return None;
    }
    Some(Latency {
        min_us: us(samples.first().copied()),
        mean_us: sum as f64 / n as f64 / 1000.0,
        p50_us: us(percentile(samples, 50.0)),
        p90_us: us(percentile(samples, 90.0)),
        p99_us: us(percentile(samples, 99.0)),
        p999_us: us(percentile(samples, 99.9)),
        max_us: us(samples.last().copied()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 99.9), Some(100));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.9), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
        // 1000 samples: p99.9 is the 999th, not the maximum.
        let w: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile(&w, 99.9), Some(999));
        // Even count: the median is the lower middle (nearest rank).
        assert_eq!(percentile(&[1, 2, 3, 4], 50.0), Some(2));
    }

    #[test]
    fn summary_sorts_and_converts() {
        let mut v = vec![3000, 1000, 2000, 4000];
        let l = latency(&mut v).expect("samples");
        assert_eq!(v, [1000, 2000, 3000, 4000]);
        assert_eq!(l.min_us, 1.0);
        assert_eq!(l.max_us, 4.0);
        assert_eq!(l.mean_us, 2.5);
        assert_eq!(l.p50_us, 2.0);
        assert_eq!(l.p999_us, 4.0);
        assert!(latency(&mut []).is_none());
    }

    #[test]
    fn record_saturates_and_merge_adds() {
        let mut a = ThreadStats::default();
        a.record(5_000_000_000);
        assert_eq!(a.lat_ns, [u32::MAX]);
        let mut b = ThreadStats {
            bytes: 10,
            kicks: 2,
            ..Default::default()
        };
        b.record(7);
        a.merge(b);
        assert_eq!((a.ops, a.bytes, a.kicks), (2, 10, 2));
        assert_eq!(a.lat_ns.len(), 2);
    }
}
