// SPDX-License-Identifier: Apache-2.0
//! Every encoded format a release writes and the versions it reads, in one
//! place: `xvirtiofsd --version` and `status` print this table, and the
//! golden samples under `virtio-fs-ext/tests/golden/` pin each version's
//! bytes (`tests/golden.rs`), so that a change to an encoding without a
//! version step fails a test at once.

use std::ops::RangeInclusive;

/// One format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// Short name, as in `status`.
    pub name: &'static str,
    /// What it carries.
    pub what: &'static str,
    /// The version this build writes.
    pub writes: u32,
    /// The versions this build reads.
    pub reads: RangeInclusive<u32>,
}

/// The formats of this build.
pub fn all() -> [Format; 3] {
    [
        Format {
            name: "state",
            what: "live-upgrade state and crash-restart checkpoint (handover protocol; writes the newest format the successor reads)",
            writes: crate::frame::FORMAT_VERSION,
            reads: crate::frame::MIN_FORMAT_VERSION..=crate::frame::FORMAT_VERSION,
        },
        Format {
            name: "migration",
            what: "VM migration device state (also reads virtiofsd 1.11-1.14's 1-2)",
            writes: crate::migration::MIGRATION_VERSION,
            reads: crate::migration::MIGRATION_READS,
        },
        Format {
            name: "journal",
            what: "crash-restart journal",
            writes: xvfs_fs::journal::JOURNAL_VERSION as u32,
            reads: xvfs_fs::journal::JOURNAL_VERSION as u32
                ..=xvfs_fs::journal::JOURNAL_VERSION as u32,
        },
    ]
}

/// The table as `--version` prints it, one line per format.
pub fn describe() -> String {
    all()
        .iter()
        .map(|f| {
            format!(
                "{} format {}, reads {}-{}: {}",
                f.name,
                f.writes,
                f.reads.start(),
                f.reads.end(),
                f.what
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_reads_what_it_writes() {
        for f in all() {
            assert!(f.reads.contains(&f.writes), "{f:?}");
        }
        assert_eq!(describe().lines().count(), 3);
    }
}
