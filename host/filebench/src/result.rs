//! The JSON result file: the workload, its variables, and per run the
//! summary, CPU time and per-flowop ops, bytes and latency percentiles.
//!
//! ```json
//! {"tool": "xfilebench", "version": "0.1.0", "workload": "w.f", "error": null,
//!  "vars": {"dir": "/tmp"},
//!  "runs": [{"line": 30, "elapsed_s": 5.0, "end": "timeout", "error": null, "threads": 1,
//!            "summary": {"ops": 10, "ops_per_s": 2.0, "rd_per_s": 2.0, "wr_per_s": 0.0,
//!                        "bytes": 40960, "mb_per_s": 0.0078, "ms_per_op": 0.1},
//!            "cpu": {"user_s": 0.1, "sys_s": 0.2, "ns_per_op": 30000000.0},
//!            "flowops": [{"name": "read1", "type": "read", "ops": 10, "...": "..."}]}],
//!  "summary": {"...": "the last run's"}}
//! ```

use crate::engine::RunResult;
use crate::json::Json;
use crate::stats::Summary;

fn summary_json(s: &Summary) -> Json {
    Json::obj(vec![
        ("ops", Json::Int(s.ops)),
        ("ops_per_s", Json::Num(s.ops_per_s)),
        ("rd_per_s", Json::Num(s.rd_per_s)),
        ("wr_per_s", Json::Num(s.wr_per_s)),
        ("bytes", Json::Int(s.bytes)),
        ("mb_per_s", Json::Num(s.mb_per_s)),
        ("ms_per_op", Json::Num(s.ms_per_op)),
    ])
}

fn run_json(r: &RunResult) -> Json {
    let cpu_s = r.cpu_user_s + r.cpu_sys_s;
    let ns_per_op = if r.summary.ops == 0 {
        0.0
    } else {
        cpu_s * 1e9 / r.summary.ops as f64
    };
    let flowops = r
        .flowops
        .iter()
        .map(|f| {
            Json::obj(vec![
                ("name", Json::str(&f.name)),
                ("type", Json::str(f.kind.name())),
                ("ops", Json::Int(f.ops)),
                ("bytes", Json::Int(f.bytes)),
                ("ops_per_s", Json::Num(f.ops_per_s)),
                ("mb_per_s", Json::Num(f.mb_per_s)),
                ("ms_per_op", Json::Num(f.ms_per_op)),
                ("min_ms", Json::Num(f.min_ms)),
                ("p50_ms", Json::Num(f.p50_ms)),
                ("p90_ms", Json::Num(f.p90_ms)),
                ("p95_ms", Json::Num(f.p95_ms)),
                ("p99_ms", Json::Num(f.p99_ms)),
                ("p999_ms", Json::Num(f.p999_ms)),
                ("max_ms", Json::Num(f.max_ms)),
            ])
        })
        .collect();
    Json::obj(vec![
        ("line", Json::Int(r.line as u64)),
        ("elapsed_s", Json::Num(r.elapsed_s)),
        ("end", Json::str(&r.end)),
        (
            "error",
            r.error.as_ref().map(Json::str).unwrap_or(Json::Null),
        ),
        ("threads", Json::Int(r.threads as u64)),
        ("summary", summary_json(&r.summary)),
        (
            "cpu",
            Json::obj(vec![
                ("user_s", Json::Num(r.cpu_user_s)),
                ("sys_s", Json::Num(r.cpu_sys_s)),
                ("ns_per_op", Json::Num(ns_per_op)),
            ]),
        ),
        ("flowops", Json::Arr(flowops)),
    ])
}

/// The whole result document.
pub fn document(
    workload: &str,
    vars: &std::collections::BTreeMap<String, String>,
    seed: u64,
    runs: &[RunResult],
    error: Option<&str>,
) -> Json {
    Json::obj(vec![
        ("tool", Json::str("xfilebench")),
        ("version", Json::str(env!("CARGO_PKG_VERSION"))),
        ("workload", Json::str(workload)),
        ("seed", Json::Int(seed)),
        ("error", error.map(Json::str).unwrap_or(Json::Null)),
        (
            "vars",
            Json::Obj(
                vars.iter()
                    .map(|(k, v)| (k.clone(), Json::str(v)))
                    .collect(),
            ),
        ),
        ("runs", Json::Arr(runs.iter().map(run_json).collect())),
        (
            "summary",
            runs.last()
                .map(|r| summary_json(&r.summary))
                .unwrap_or(Json::Null),
        ),
    ])
}
