// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The metrics file reports the host descriptors held for the guest against
//! the cap (`open_files`: held, max, refused_emfile).

mod common;

use common::*;
use xvirtiofsd::cli::LandlockMode;
use xvirtiofsd::ops::metrics_file::{MetricsWriter, WriterWalls};

#[test]
fn metrics_report_open_files() {
    let dir = scratch_dir("metrics-open");
    let path = dir.with_extension("metrics.json");
    let walls = WriterWalls {
        caps: 0,
        landlock: LandlockMode::Auto,
        seccomp: virtio_fs_ext::config::SeccompAction::Kill,
    };
    let w = MetricsWriter::open(&path, &walls).unwrap();
    let handle = w.start(Vec::new(), server_for(&dir));
    handle.finish();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let of = &v["open_files"];
    assert_eq!(of["held"], 1, "the root: {v}");
    assert_eq!(of["max"], 0, "{v}");
    assert_eq!(of["refused_emfile"], 0, "{v}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&dir);
}
