// SPDX-License-Identifier: Apache-2.0
//! `status`'s client side: which sockets it asks, and the Prometheus text.

use super::*;
use std::os::unix::net::UnixListener;

fn sample() -> Value {
    let mut buckets = vec![0u64; LATENCY_BUCKETS];
    buckets[2] = 3;
    buckets[10] = 1;
    serde_json::json!({
        "version": "0.4.0~dev+abc", "commit": "abc", "pid": 42, "uptime_s": 7,
        "upgrades": 2, "shared_dir": "/srv/a\"b",
        "queues": [
            {"queue": 0, "requests": 4, "bytes": 100, "bad_chains": 0, "ring_faults": 0,
             "notifications": 4, "found_by_poll": 1, "found_by_wakeup": 3, "poll_us": 1500,
             "sleeps": 3, "polling": true, "latency_log2_us": buckets},
            {"queue": 1, "requests": 0, "bytes": 0, "bad_chains": 0, "ring_faults": 0,
             "notifications": 0, "found_by_poll": 0, "found_by_wakeup": 0, "poll_us": 0,
             "sleeps": 0, "polling": false, "latency_log2_us": vec![0u64; LATENCY_BUCKETS]}
        ],
        "crash_restart": {"holder_pid": 41, "restarts": 1, "replayed": 5}
    })
}

/// Every line is a comment or `name{labels} value` with a number value,
/// and each family's samples follow its one TYPE line.
fn check_exposition(text: &str) {
    let mut types = std::collections::HashSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(types.insert(name.clone()), "TYPE twice: {name}");
            current = name;
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "value of {line}");
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with(&current),
            "{name} outside its family {current}"
        );
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "{name}"
        );
        assert!(series.ends_with('}'), "{line}");
    }
}

#[test]
fn prometheus_text_has_every_family_and_valid_lines() {
    let text = prometheus(&[("/run/xvirtiofsd/42.sock".into(), sample())]);
    check_exposition(&text);
    for want in [
        "xvirtiofsd_info{control=\"/run/xvirtiofsd/42.sock\",version=\"0.4.0~dev+abc\",commit=\"abc\",pid=\"42\"} 1",
        "xvirtiofsd_uptime_seconds{control=\"/run/xvirtiofsd/42.sock\"} 7",
        "xvirtiofsd_upgrades_total{control=\"/run/xvirtiofsd/42.sock\"} 2",
        "xvirtiofsd_queue_requests_total{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\"} 4",
        "xvirtiofsd_queue_poll_seconds_total{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\"} 0.0015",
        "xvirtiofsd_queue_polling{control=\"/run/xvirtiofsd/42.sock\",queue=\"1\"} 0",
        "xvirtiofsd_queue_latency_seconds_bucket{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\",le=\"0.000002\"} 0",
        "xvirtiofsd_queue_latency_seconds_bucket{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\",le=\"0.000004\"} 3",
        "xvirtiofsd_queue_latency_seconds_bucket{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\",le=\"+Inf\"} 4",
        "xvirtiofsd_queue_latency_seconds_count{control=\"/run/xvirtiofsd/42.sock\",queue=\"0\"} 4",
        "xvirtiofsd_crash_restarts_total{control=\"/run/xvirtiofsd/42.sock\"} 1",
        "xvirtiofsd_crash_replayed_total{control=\"/run/xvirtiofsd/42.sock\"} 5",
    ] {
        assert!(text.lines().any(|l| l == want), "missing {want}\n{text}");
    }
}

#[test]
fn every_metric_name_is_documented() {
    let doc = include_str!("../../../../../docs/metrics.md");
    let text = prometheus(&[("c".into(), sample())]);
    for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = line.split(' ').next().unwrap();
        assert!(
            doc.contains(&format!("`{name}")),
            "{name} not in docs/metrics.md"
        );
    }
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(quoted("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
}

#[test]
fn only_control_sockets_are_asked() {
    let d = std::env::temp_dir().join(format!("xvfs-find-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let _default = UnixListener::bind(d.join("4242.sock")).unwrap();
    let _unit = UnixListener::bind(d.join("data.control")).unwrap();
    std::fs::write(d.join("data.control.args"), "[]").unwrap();
    // A vhost-user socket waiting for QEMU: never connected to.
    let _vhost = UnixListener::bind(d.join("share.sock")).unwrap();
    std::fs::write(d.join("77.sock"), "a file, not a socket").unwrap();
    let found = find_controls(&d).unwrap();
    assert_eq!(found, [d.join("4242.sock"), d.join("data.control")]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_stopped_daemon_is_explained() {
    let e = io::Error::from(io::ErrorKind::NotFound);
    // No process has pid u32::MAX - 1.
    let why = explain(
        Path::new("/run/xvirtiofsd/4294967294.sock"),
        Some(u32::MAX - 1),
        &e,
    );
    assert!(
        why.contains("no daemon with pid 4294967294 is running"),
        "{why}"
    );
    assert!(why.contains("`xvirtiofsd status` lists"), "{why}");
    let why = explain(
        Path::new("/x.sock"),
        None,
        &io::Error::from(io::ErrorKind::ConnectionRefused),
    );
    assert!(why.contains("no daemon answers"), "{why}");
}
