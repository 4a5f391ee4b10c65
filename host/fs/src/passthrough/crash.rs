// SPDX-License-Identifier: Apache-2.0
//! Crash restart: the tables are journaled ([`crate::journal`]) while the
//! process serves, and a new process rebuilds them from a crashed one's
//! journal. Rebuilding goes through the checks of a VM live migration's load
//! (every node opened anew, inside the share, no two ids for one file), plus
//! one: each node must open the very file it named before (same device and
//! inode number), else it answers EIO rather than serve another file.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::BorrowedFd;

use super::migrate::LoadReport;
use super::{Error, KeptFiles, PassthroughFs};
use crate::journal::Journal;
use crate::sys;

impl PassthroughFs {
    /// Journals every change from now on; the nodes and handles already
    /// held (a live upgrade's) are journaled now.
    pub fn attach_journal(&mut self, j: &'static Journal) {
        self.inodes.attach_journal(j, &HashMap::new());
        self.handles.attach_journal(j, &HashMap::new());
    }

    /// Rebuilds the tables a crashed process left in `j`, and journals on
    /// in it. Nodes that cannot be found again answer EIO until the guest
    /// forgets them (as after a migration with `--migration-on-error
    /// guest-error`). Files with no name left come from `kept`, the
    /// descriptors the keeper held (`keep.rs`).
    pub fn recover(
        &mut self,
        j: &'static Journal,
        mut kept: KeptFiles,
    ) -> Result<LoadReport, Error> {
        let t = j.tables();
        let report = self.load_tables(&t.fs, false, &t.keys, Some(&mut kept))?;
        self.adopt_kept(
            report.kept_nodes.clone(),
            report.kept_handles.clone(),
            &mut kept,
        );
        for (id, &slot) in &t.node_slots {
            if self.inodes.get(*id).is_none() {
                j.remove_node(slot);
            }
        }
        for (fh, &slot) in &t.handle_slots {
            if self.handles.get(*fh).is_none() {
                j.remove_handle(slot);
            }
        }
        self.inodes.attach_journal(j, &t.node_slots);
        self.handles.attach_journal(j, &t.handle_slots);
        Ok(report)
    }

    /// After a rename: the journal's name of the node now at `dir`/`name`
    /// (if the guest holds it) follows it, so that a file system without
    /// file handles finds it again after a crash.
    pub(super) fn journal_moved(&self, dir: u64, dir_fd: BorrowedFd<'_>, name: &CStr) {
        let Some(j) = self.inodes.journal() else {
            return;
        };
        let Ok(st) = sys::fstatat(dir_fd, name, libc::AT_SYMLINK_NOFOLLOW) else {
            return;
        };
        if let Some(inode) = self.inodes.by_key((st.st_dev, st.st_ino)) {
            j.move_node(inode.slot(), inode.file_type, Some((dir, name.to_bytes())));
        }
    }

    /// The journal, if one is attached.
    pub fn journal(&self) -> Option<&'static Journal> {
        self.inodes.journal()
    }
}
