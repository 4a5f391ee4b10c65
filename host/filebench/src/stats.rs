// SPDX-License-Identifier: Apache-2.0
//! Per-flowop statistics, Filebench's summary lines, and the figures of the
//! JSON result.

use crate::ast::FlowopKind;

const SUB: u64 = 16;
const BUCKETS: usize = 16 + 60 * SUB as usize;

/// Log-linear latency histogram (16 sub-buckets per power of two, ~6 %).
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as u64;
    let sub = (ns >> (e - 4)) & (SUB - 1);
    ((SUB + (e - 4) * SUB + sub) as usize).min(BUCKETS - 1)
}

fn bucket_mid(idx: usize) -> f64 {
    let idx = idx as u64;
    if idx < SUB {
        return idx as f64;
    }
    let e = (idx - SUB) / SUB + 4;
    let sub = (idx - SUB) % SUB;
    let lo = (SUB + sub) << (e - 4);
    let width = 1u64 << (e - 4);
    lo as f64 + width as f64 / 2.0
}

impl Histogram {
    pub fn add(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
    }

    /// The `q` quantile (0..=1) in ns (bucket midpoint); 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_mid(i);
            }
        }
        0.0
    }

    /// Non-empty buckets as (low ns, count) for `enable lathist`.
    pub fn rows(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (bucket_mid(i), *c))
            .collect()
    }
}

/// Counters of one flowop (one thread, or merged).
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    pub ops: u64,
    pub bytes: u64,
    pub lat_sum_ns: u128,
    pub lat_min_ns: u64,
    pub lat_max_ns: u64,
    pub hist: Histogram,
}

impl OpStats {
    pub fn record(&mut self, ns: u64, bytes: u64) {
        if self.ops == 0 || ns < self.lat_min_ns {
            self.lat_min_ns = ns;
        }
        self.lat_max_ns = self.lat_max_ns.max(ns);
        self.ops += 1;
        self.bytes += bytes;
        self.lat_sum_ns += ns as u128;
        self.hist.add(ns);
    }

    pub fn merge(&mut self, o: &OpStats) {
        if o.ops == 0 {
            return;
        }
        if self.ops == 0 || o.lat_min_ns < self.lat_min_ns {
            self.lat_min_ns = o.lat_min_ns;
        }
        self.lat_max_ns = self.lat_max_ns.max(o.lat_max_ns);
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.lat_sum_ns += o.lat_sum_ns;
        self.hist.merge(&o.hist);
    }
}

/// The figures of one flowop over a run.
#[derive(Debug, Clone)]
pub struct FlowopResult {
    pub name: String,
    pub kind: FlowopKind,
    pub ops: u64,
    pub bytes: u64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    pub ms_per_op: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub hist: Histogram,
}

/// The `IO Summary:` figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub ops: u64,
    pub ops_per_s: f64,
    pub rd_per_s: f64,
    pub wr_per_s: f64,
    pub bytes: u64,
    pub mb_per_s: f64,
    pub ms_per_op: f64,
}

const MB: f64 = 1024.0 * 1024.0;

impl FlowopResult {
    pub fn new(name: &str, kind: FlowopKind, s: &OpStats, elapsed_s: f64) -> Self {
        let el = elapsed_s.max(1e-9);
        let ms = |ns: f64| ns / 1e6;
        FlowopResult {
            name: name.to_string(),
            kind,
            ops: s.ops,
            bytes: s.bytes,
            ops_per_s: s.ops as f64 / el,
            mb_per_s: s.bytes as f64 / MB / el,
            ms_per_op: if s.ops == 0 {
                0.0
            } else {
                ms(s.lat_sum_ns as f64 / s.ops as f64)
            },
            min_ms: ms(s.lat_min_ns as f64),
            max_ms: ms(s.lat_max_ns as f64),
            p50_ms: ms(s.hist.quantile(0.50)),
            p90_ms: ms(s.hist.quantile(0.90)),
            p95_ms: ms(s.hist.quantile(0.95)),
            p99_ms: ms(s.hist.quantile(0.99)),
            p999_ms: ms(s.hist.quantile(0.999)),
            hist: s.hist.clone(),
        }
    }

    /// Filebench's per-flowop line.
    pub fn line(&self) -> String {
        format!(
            "{:<20} {}ops {:8.0}ops/s {:5.1}mb/s {:8.3}ms/op [{:.3}ms - {:.3}ms]",
            self.name,
            self.ops,
            self.ops_per_s,
            self.mb_per_s,
            self.ms_per_op,
            self.min_ms,
            self.max_ms
        )
    }
}

/// Adds up the flowops that Filebench counts in its IO summary.
pub fn summarize(flowops: &[FlowopResult], elapsed_s: f64) -> Summary {
    let el = elapsed_s.max(1e-9);
    let mut s = Summary::default();
    let mut lat_ms_sum = 0.0;
    let (mut rd, mut wr) = (0u64, 0u64);
    for f in flowops.iter().filter(|f| f.kind.is_io_summary()) {
        s.ops += f.ops;
        s.bytes += f.bytes;
        lat_ms_sum += f.ms_per_op * f.ops as f64;
        if f.kind.is_read() {
            rd += f.ops;
        }
        if f.kind.is_write() {
            wr += f.ops;
        }
    }
    s.ops_per_s = s.ops as f64 / el;
    s.rd_per_s = rd as f64 / el;
    s.wr_per_s = wr as f64 / el;
    s.mb_per_s = s.bytes as f64 / MB / el;
    s.ms_per_op = if s.ops == 0 {
        0.0
    } else {
        lat_ms_sum / s.ops as f64
    };
    s
}

impl Summary {
    /// Filebench's `IO Summary:` line.
    pub fn line(&self) -> String {
        format!(
            "IO Summary: {} ops {:.3} ops/s {:.0}/{:.0} rd/wr {:5.1}mb/s {:.3}ms/op",
            self.ops, self.ops_per_s, self.rd_per_s, self.wr_per_s, self.mb_per_s, self.ms_per_op
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_within_bucket_precision() {
        let mut h = Histogram::default();
        for ns in 1..=100_000u64 {
            h.add(ns * 10);
        }
        for (q, want) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = h.quantile(q);
            assert!((got - want).abs() / want < 0.07, "q{q}: {got} vs {want}");
        }
        assert_eq!(Histogram::default().quantile(0.5), 0.0);
    }

    #[test]
    fn summary_counts_io_flowops_only() {
        let mut a = OpStats::default();
        a.record(1_000_000, 4096);
        a.record(3_000_000, 4096);
        let mut b = OpStats::default();
        b.record(5_000_000, 0);
        let fl = vec![
            FlowopResult::new("rd", FlowopKind::Read, &a, 2.0),
            FlowopResult::new("lim", FlowopKind::EventLimit, &b, 2.0),
        ];
        let s = summarize(&fl, 2.0);
        assert_eq!(s.ops, 2);
        assert_eq!(s.bytes, 8192);
        assert!((s.ops_per_s - 1.0).abs() < 1e-9);
        assert!((s.ms_per_op - 2.0).abs() < 1e-9);
        assert_eq!(
            s.line(),
            "IO Summary: 2 ops 1.000 ops/s 1/0 rd/wr   0.0mb/s 2.000ms/op"
        );
    }
}
