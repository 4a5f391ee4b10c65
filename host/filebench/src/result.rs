// SPDX-License-Identifier: Apache-2.0
//! The JSON result file: the workload, its variables, and per run the
//! summary, CPU time and per-flowop ops, bytes and latency percentiles.
//! Serialized with `serde_json`; a non-finite figure is written as `null`.
//!
//! ```json
//! {"tool": "xfilebench", "version": "0.1.0", "workload": "w.f", "seed": 1, "error": null,
//!  "vars": {"dir": "/tmp"},
//!  "runs": [{"line": 30, "elapsed_s": 5.0, "took_s": 5.0, "end": "timeout", "error": null, "threads": 1,
//!            "summary": {"ops": 10, "ops_per_s": 2.0, "rd_per_s": 2.0, "wr_per_s": 0.0,
//!                        "bytes": 40960, "mb_per_s": 0.0078, "ms_per_op": 0.1},
//!            "cpu": {"user_s": 0.1, "sys_s": 0.2, "ns_per_op": 30000000.0},
//!            "flowops": [{"name": "read1", "type": "read", "ops": 10, "...": "..."}]}],
//!  "summary": {"...": "the last run's"}}
//! ```

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::RunResult;
use crate::stats::{FlowopResult, Summary};

/// The whole result document.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    tool: &'static str,
    version: &'static str,
    workload: &'a str,
    seed: u64,
    error: Option<&'a str>,
    vars: &'a BTreeMap<String, String>,
    runs: Vec<RunDoc<'a>>,
    summary: Option<SummaryDoc>,
}

#[derive(Debug, Serialize)]
struct SummaryDoc {
    ops: u64,
    ops_per_s: f64,
    rd_per_s: f64,
    wr_per_s: f64,
    bytes: u64,
    mb_per_s: f64,
    ms_per_op: f64,
}

#[derive(Debug, Serialize)]
struct CpuDoc {
    user_s: f64,
    sys_s: f64,
    ns_per_op: f64,
}

#[derive(Debug, Serialize)]
struct FlowopDoc<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    ops: u64,
    bytes: u64,
    ops_per_s: f64,
    mb_per_s: f64,
    ms_per_op: f64,
    min_ms: f64,
    p50_ms: f64,
    p90_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Serialize)]
struct RunDoc<'a> {
    line: usize,
    /// What the figures are divided by (Filebench's whole seconds for a
    /// run that ended itself, unless --exact).
    elapsed_s: f64,
    /// How long the run took.
    took_s: f64,
    end: &'a str,
    error: Option<&'a str>,
    threads: usize,
    summary: SummaryDoc,
    cpu: CpuDoc,
    flowops: Vec<FlowopDoc<'a>>,
}

impl From<&Summary> for SummaryDoc {
    fn from(s: &Summary) -> Self {
        SummaryDoc {
            ops: s.ops,
            ops_per_s: s.ops_per_s,
            rd_per_s: s.rd_per_s,
            wr_per_s: s.wr_per_s,
            bytes: s.bytes,
            mb_per_s: s.mb_per_s,
            ms_per_op: s.ms_per_op,
        }
    }
}

impl<'a> From<&'a FlowopResult> for FlowopDoc<'a> {
    fn from(f: &'a FlowopResult) -> Self {
        FlowopDoc {
            name: &f.name,
            kind: f.kind.name(),
            ops: f.ops,
            bytes: f.bytes,
            ops_per_s: f.ops_per_s,
            mb_per_s: f.mb_per_s,
            ms_per_op: f.ms_per_op,
            min_ms: f.min_ms,
            p50_ms: f.p50_ms,
            p90_ms: f.p90_ms,
            p95_ms: f.p95_ms,
            p99_ms: f.p99_ms,
            p999_ms: f.p999_ms,
            max_ms: f.max_ms,
        }
    }
}

impl<'a> From<&'a RunResult> for RunDoc<'a> {
    fn from(r: &'a RunResult) -> Self {
        let cpu_s = r.cpu_user_s + r.cpu_sys_s;
        let ns_per_op = if r.summary.ops == 0 {
            0.0
        } else {
            cpu_s * 1e9 / r.summary.ops as f64
        };
        RunDoc {
            line: r.line,
            elapsed_s: r.elapsed_s,
            took_s: r.took_s,
            end: &r.end,
            error: r.error.as_deref(),
            threads: r.threads,
            summary: SummaryDoc::from(&r.summary),
            cpu: CpuDoc {
                user_s: r.cpu_user_s,
                sys_s: r.cpu_sys_s,
                ns_per_op,
            },
            flowops: r.flowops.iter().map(FlowopDoc::from).collect(),
        }
    }
}

/// The whole result document.
pub fn document<'a>(
    workload: &'a str,
    vars: &'a BTreeMap<String, String>,
    seed: u64,
    runs: &'a [RunResult],
    error: Option<&'a str>,
) -> Document<'a> {
    Document {
        tool: "xfilebench",
        version: env!("CARGO_PKG_VERSION"),
        workload,
        seed,
        error,
        vars,
        runs: runs.iter().map(RunDoc::from).collect(),
        summary: runs.last().map(|r| SummaryDoc::from(&r.summary)),
    }
}

impl Document<'_> {
    /// Pretty-printed JSON text, ending with a newline.
    pub fn render(&self) -> Result<String, serde_json::Error> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_and_nulls() {
        let vars = BTreeMap::from([("dir".to_string(), "/t\"mp".to_string())]);
        let doc = document("w.f", &vars, 7, &[], Some("bad"));
        let v: serde_json::Value = serde_json::from_str(&doc.render().unwrap()).unwrap();
        assert_eq!(v["tool"], "xfilebench");
        assert_eq!(v["seed"], 7);
        assert_eq!(v["error"], "bad");
        assert_eq!(v["vars"]["dir"], "/t\"mp");
        assert_eq!(v["runs"], serde_json::json!([]));
        assert!(v["summary"].is_null());
    }
}
