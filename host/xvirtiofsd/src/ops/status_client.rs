// SPDX-License-Identifier: Apache-2.0
//! The client side of `xvirtiofsd status`: finding the running daemons,
//! asking each for its status, and printing it as a table, JSON, or in
//! Prometheus's text exposition format (the names in docs/metrics.md).
//! It reads the daemons' JSON and never touches a daemon's state.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::metrics::LATENCY_BUCKETS;

/// The control sockets in `dir` a status request may be sent to: the
/// default ones (`PID.sock`) and any socket beside which its daemon
/// recorded its first start (`CONTROL.args`, as a systemd unit's
/// `NAME.control` has). Other sockets there, a vhost-user socket among
/// them, are never connected to: a daemon waiting for its front-end
/// would take the connection for QEMU's.
pub fn find_controls(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_socket() {
            continue;
        }
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let default = name
            .strip_suffix(".sock")
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        // The record's name (upgrade::record::path_for, which depends on
        // this layer and so is not called from it).
        let mut record = path.clone().into_os_string();
        record.push(".args");
        if default || Path::new(&record).is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Why a control socket could not be asked, in words that say what to do.
pub fn explain(path: &Path, pid: Option<u32>, e: &io::Error) -> String {
    let p = path.display();
    match e.kind() {
        io::ErrorKind::NotFound => match pid {
            Some(pid) if crate::sys::process_running(pid) => format!(
                "{p} does not exist: process {pid} runs but has no control socket there \
                 (started with --control PATH or --no-control?); `xvirtiofsd status` lists \
                 the daemons it finds"
            ),
            Some(pid) => format!(
                "no daemon with pid {pid} is running ({p} does not exist); `xvirtiofsd \
                 status` lists the daemons it finds"
            ),
            None => format!("{p} does not exist: is the daemon running, with --control {p}?"),
        },
        io::ErrorKind::ConnectionRefused => format!(
            "{p}: no daemon answers there (it ended without removing its socket, which \
             may be deleted)"
        ),
        io::ErrorKind::PermissionDenied => {
            format!("{p}: permission denied (the control socket is root's: run as root)")
        }
        _ => format!("{p}: {e}"),
    }
}

/// The `status` request on a control socket, waiting at most `wait` for
/// the answer.
fn ask(path: &Path, wait: Duration) -> io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(wait))?;
    s.write_all(b"status\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A daemon's status as JSON, or why it gave none; `wait` bounds the wait
/// for its answer.
pub fn query(path: &Path, pid: Option<u32>, wait: Duration) -> Result<Value, String> {
    let text = ask(path, wait).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
            "{}: no answer in {} s: a daemon answers once its front-end (QEMU) has \
             connected; until then it waits for it",
            path.display(),
            wait.as_secs()
        ),
        _ => explain(path, pid, &e),
    })?;
    if text.trim().is_empty() {
        return Err(format!("{} answered nothing", path.display()));
    }
    serde_json::from_str(text.trim())
        .map_err(|e| format!("{}: not a status reply: {e}", path.display()))
}

/// The shared directory a daemon's record of its first start names
/// (`CONTROL.args`, a JSON list of its arguments).
pub fn recorded_shared_dir(control: &Path) -> Option<String> {
    let mut record = control.as_os_str().to_owned();
    record.push(".args");
    let text = std::fs::read_to_string(record).ok()?;
    let args: Vec<String> = serde_json::from_str(&text).ok()?;
    let mut it = args.iter();
    let mut found = None;
    while let Some(a) = it.next() {
        if a == "--shared-dir" {
            found = it.next().cloned();
        } else if let Some(d) = a.strip_prefix("--shared-dir=") {
            found = Some(d.to_string());
        } else if let Some(d) = a.split(',').find_map(|o| o.strip_prefix("source=")) {
            found = Some(d.to_string());
        }
    }
    found
}

/// The pid a default control socket (`PID.sock`) is named after, if that
/// process runs.
fn pid_of_name(control: &Path) -> Option<u32> {
    let name = control.file_name()?.to_str()?;
    let pid: u32 = name.strip_suffix(".sock")?.parse().ok()?;
    crate::sys::process_running(pid).then_some(pid)
}

/// One line of the table of running daemons.
pub fn table_line(path: &Path, status: &Result<Value, String>) -> String {
    match status {
        Err(why) if why.contains("no answer in") => format!(
            "{:<8} {:<10} {:<14} {} {}",
            pid_of_name(path).map_or("-".into(), |p| p.to_string()),
            "waiting",
            "-",
            path.display(),
            recorded_shared_dir(path).unwrap_or_else(|| "?".into()),
        ),
        Ok(v) => format!(
            "{:<8} {:<10} {:<14} {} {}",
            v["pid"].as_u64().unwrap_or(0),
            uptime(v["uptime_s"].as_u64().unwrap_or(0)),
            v["version"].as_str().unwrap_or("?"),
            path.display(),
            v["shared_dir"].as_str().unwrap_or("?"),
        ),
        Err(why) => format!("-        -          -              {why}"),
    }
}

/// The heading of [`table_line`]'s table (UPTIME `waiting`: the daemon
/// waits for its front-end and answers no status yet).
pub const TABLE_HEADING: &str = "PID      UPTIME     VERSION        CONTROL SHARED-DIR";

fn uptime(s: u64) -> String {
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A family of the exposition: name, type and help line.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

/// Per-queue counters: (status field, metric, help).
const QUEUE_COUNTERS: [(&str, &str, &str); 8] = [
    (
        "requests",
        "xvirtiofsd_queue_requests_total",
        "FUSE requests completed",
    ),
    (
        "bytes",
        "xvirtiofsd_queue_bytes_total",
        "Bytes of requests and replies",
    ),
    (
        "bad_chains",
        "xvirtiofsd_queue_bad_chains_total",
        "Descriptor chains refused before the FUSE layer",
    ),
    (
        "ring_faults",
        "xvirtiofsd_queue_ring_faults_total",
        "Times the guest broke the ring and the queue stopped",
    ),
    (
        "notifications",
        "xvirtiofsd_queue_notifications_total",
        "Interrupts sent to the guest",
    ),
    (
        "found_by_poll",
        "xvirtiofsd_queue_found_by_poll_total",
        "Batches found by busy-polling the ring",
    ),
    (
        "found_by_wakeup",
        "xvirtiofsd_queue_found_by_wakeup_total",
        "Batches found after sleeping on the kick",
    ),
    (
        "sleeps",
        "xvirtiofsd_queue_sleeps_total",
        "Times the worker slept on the kick eventfd",
    ),
];

fn header(out: &mut String, f: &Family) {
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
}

/// A label value as the exposition format quotes it.
fn quoted(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn queues(v: &Value) -> &[Value] {
    v["queues"].as_array().map_or(&[], Vec::as_slice)
}

/// The daemons' statuses (control socket, JSON) in Prometheus's text
/// exposition format (version 0.0.4): every sample labelled with its
/// daemon's `control` socket, and per-queue ones with `queue`.
pub fn prometheus(daemons: &[(String, Value)]) -> String {
    let mut out = String::new();
    let per_daemon = [
        (
            Family {
                name: "xvirtiofsd_info",
                kind: "gauge",
                help: "Always 1; the labels name the daemon's build",
            },
            None,
        ),
        (
            Family {
                name: "xvirtiofsd_uptime_seconds",
                kind: "gauge",
                help: "Seconds since the daemon started serving",
            },
            Some("uptime_s"),
        ),
        (
            Family {
                name: "xvirtiofsd_upgrades_total",
                kind: "counter",
                help: "Live upgrades this connection went through",
            },
            Some("upgrades"),
        ),
    ];
    for (family, field) in &per_daemon {
        header(&mut out, family);
        for (control, v) in daemons {
            let c = quoted(control);
            match field {
                None => {
                    let _ = writeln!(
                        out,
                        "{}{{control={c},version={},commit={},pid=\"{}\"}} 1",
                        family.name,
                        quoted(v["version"].as_str().unwrap_or("")),
                        quoted(v["commit"].as_str().unwrap_or("")),
                        v["pid"].as_u64().unwrap_or(0)
                    );
                }
                Some(f) => {
                    let _ = writeln!(
                        out,
                        "{}{{control={c}}} {}",
                        family.name,
                        v[f].as_u64().unwrap_or(0)
                    );
                }
            }
        }
    }
    for (field, name, help) in QUEUE_COUNTERS {
        header(
            &mut out,
            &Family {
                name,
                kind: "counter",
                help,
            },
        );
        each_queue(&mut out, daemons, |q| {
            format!("{name}{{LABELS}} {}", q[field].as_u64().unwrap_or(0))
        });
    }
    let polling = [
        Family {
            name: "xvirtiofsd_queue_poll_seconds_total",
            kind: "counter",
            help: "Time spent busy-polling the ring",
        },
        Family {
            name: "xvirtiofsd_queue_polling",
            kind: "gauge",
            help: "1 while the adaptive policy polls this queue, else 0",
        },
    ];
    header(&mut out, &polling[0]);
    each_queue(&mut out, daemons, |q| {
        let us = q["poll_us"].as_u64().unwrap_or(0);
        format!("{}{{LABELS}} {}", polling[0].name, us as f64 / 1e6)
    });
    header(&mut out, &polling[1]);
    each_queue(&mut out, daemons, |q| {
        let on = q["polling"].as_bool().unwrap_or(false);
        format!("{}{{LABELS}} {}", polling[1].name, u8::from(on))
    });
    latency(&mut out, daemons);
    crash_restart(&mut out, daemons);
    out
}

/// The labels of one queue of the daemon at `control`.
fn queue_labels(control: &str, q: &Value) -> String {
    format!(
        "control={},queue=\"{}\"",
        quoted(control),
        q["queue"].as_u64().unwrap_or(0)
    )
}

/// Writes one line per queue of every daemon; `line` puts `{LABELS}` where
/// the labels go.
fn each_queue(out: &mut String, daemons: &[(String, Value)], line: impl Fn(&Value) -> String) {
    for (control, v) in daemons {
        for q in queues(v) {
            let labels = queue_labels(control, q);
            let _ = writeln!(
                out,
                "{}",
                line(q).replace("{LABELS}", &format!("{{{labels}}}"))
            );
        }
    }
}

/// The latency histogram: bucket `i` of the daemon counts requests of
/// less than 2^i µs, the last one all slower ones. The daemon keeps no sum
/// of latencies, so there is no `_sum` sample.
fn latency(out: &mut String, daemons: &[(String, Value)]) {
    let name = "xvirtiofsd_queue_latency_seconds";
    header(
        out,
        &Family {
            name,
            kind: "histogram",
            help: "Service time of requests (pop to used ring), in log2 buckets; no _sum",
        },
    );
    for (control, v) in daemons {
        for q in queues(v) {
            let labels = queue_labels(control, q);
            let counts: Vec<u64> = q["latency_log2_us"]
                .as_array()
                .map(|a| a.iter().map(|c| c.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default();
            let mut seen = 0u64;
            for (i, c) in counts.iter().enumerate().take(LATENCY_BUCKETS - 1) {
                seen += c;
                let le = (1u64 << i) as f64 / 1e6;
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {seen}");
            }
            let total: u64 = counts.iter().sum();
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
            let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
        }
    }
}

/// With --crash-restart: the holder's counts.
fn crash_restart(out: &mut String, daemons: &[(String, Value)]) {
    let families = [
        (
            "restarts",
            "xvirtiofsd_crash_restarts_total",
            "Serving processes started after a crash",
        ),
        (
            "replayed",
            "xvirtiofsd_crash_replayed_total",
            "Requests in flight at a crash answered after it",
        ),
    ];
    for (field, name, help) in families {
        let with: Vec<_> = daemons
            .iter()
            .filter(|(_, v)| v["crash_restart"].is_object())
            .collect();
        if with.is_empty() {
            continue;
        }
        header(
            out,
            &Family {
                name,
                kind: "counter",
                help,
            },
        );
        for (control, v) in with {
            let n = v["crash_restart"][field].as_u64().unwrap_or(0);
            let _ = writeln!(out, "{name}{{control={}}} {n}", quoted(control));
        }
    }
}

#[cfg(test)]
mod tests;
