// SPDX-License-Identifier: Apache-2.0
//! The DAX window's side of the device: which guest-memory regions are
//! chunks of the window, and the back-end channel while the queues stop.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use log::{debug, warn};

use super::Device;
use crate::virtqueue::mem::Region;

/// How long a handover lets a map or unmap wait for the front-end's
/// answer before it gives up (the request then fails, and its reply is
/// owed to the successor): the front-end answers within microseconds
/// unless it is itself waiting for this daemon.
const HANDOVER_GRACE: Duration = Duration::from_millis(100);

impl Device {
    /// A memory region as the front-end describes it. With a DAX window,
    /// one backed by a file on a file system of the share's mapped files
    /// is a chunk of the window (QEMU adds each of its mappings to guest
    /// memory), which the table records but never maps. What decides is
    /// the window's record of those file systems, which the guest cannot
    /// make it drop, so a live upgrade's successor and a restarted process
    /// decide the same.
    pub(in crate::vhost_user) fn region(
        &self,
        gpa: u64,
        size: u64,
        user_addr: u64,
        mmap_offset: u64,
        file: File,
    ) -> Region {
        let window = self.cfg.dax.as_ref().map(|(size, _)| *size);
        let window_chunk = window.is_some() && self.server.fs().is_window_file(file.as_fd());
        if window_chunk {
            debug!("guest memory: {size:#x} bytes at {gpa:#x} are a DAX window chunk (not mapped)");
            if window.is_some_and(|w| size > w) {
                warn!(
                    "guest memory: {size:#x} bytes at {gpa:#x} are backed by a file on the shared \
                     directory's file system: with --dax-window they cannot be told from the \
                     window and are not served (back guest RAM with memfd)"
                );
            }
        }
        Region {
            gpa,
            size,
            user_addr,
            mmap_offset,
            file: Arc::new(file),
            window_chunk,
        }
    }

    /// Runs `stop` (stopping queues for the front-end) with the DAX
    /// back-end channel told: the front-end reads that channel only once
    /// this message is answered, so a worker's map must not wait for it.
    pub(super) fn while_front_end_stops<T>(&mut self, stop: impl FnOnce(&mut Self) -> T) -> T {
        self.stopping_channel(Duration::ZERO, stop)
    }

    /// As [`Device::quiesce`], for a handover: a map or unmap waiting for
    /// the front-end gets [`HANDOVER_GRACE`] to be answered, none when the
    /// front-end is itself waiting for this daemon (`front_end_waits`: a
    /// message is unread on the connection), which it would be until the
    /// successor answers. One that gives up fails; its reply is owed, and
    /// the successor is told (the state's `dax` part).
    pub fn quiesce_for_handover(&mut self, front_end_waits: bool) {
        let grace = if front_end_waits {
            Duration::ZERO
        } else {
            HANDOVER_GRACE
        };
        self.stopping_channel(grace, Self::quiesce);
    }

    fn stopping_channel<T>(&mut self, grace: Duration, stop: impl FnOnce(&mut Self) -> T) -> T {
        let channel = self.cfg.dax.as_ref().map(|(_, ch)| Arc::clone(ch));
        if let Some(ch) = &channel {
            ch.give_up_after(grace);
        }
        let r = stop(self);
        if let Some(ch) = &channel {
            ch.set_front_end_stopping(false);
        }
        r
    }
}
