// SPDX-License-Identifier: Apache-2.0
//! The SETLKW requests a queue worker keeps waiting for their locks.

use std::sync::Arc;
use std::time::Instant;

use xvfs_fs::fuse::LockWait;

use crate::virtqueue::chain::ChainWriter;
use crate::virtqueue::mem::GuestMemoryMmap;

/// A SETLKW waiting for its lock: its chain stays off the used ring. It
/// keeps the memory snapshot it was popped with and its reply's guest
/// ranges, and makes its writer again ([`Waiting::writer`]) to answer.
pub(super) struct Waiting {
    pub(super) wait: LockWait,
    pub(super) head: u16,
    /// The device-writable descriptors (guest address, length).
    pub(super) reply: Vec<(u64, u64)>,
    pub(super) request_bytes: usize,
    pub(super) started: Instant,
    pub(super) mem: Arc<GuestMemoryMmap>,
}

impl Waiting {
    /// The reply's writer, over the snapshot the chain was popped with (the
    /// ranges were translated in it once, so they translate again; should
    /// they not, the reply is empty, as a malformed chain's).
    pub(super) fn writer(&self) -> ChainWriter<'_> {
        ChainWriter::over(&self.mem, self.reply.clone()).unwrap_or_else(|_| ChainWriter::empty())
    }
}

/// The SETLKW requests a worker keeps waiting: at most one per descriptor
/// chain head (the device owns a chain until it puts it on the used ring,
/// so a guest that makes a waiting head available again corrupted its
/// ring), and at most `max` in all, the ring size: each one costs an
/// fcntl(2) each time they are tried again (see
/// [`LOCK_RETRY`](super::LOCK_RETRY)). With heads unique the ring size
/// already bounds the list; `max` keeps it bounded on its own. The list
/// keeps the order they came in, which is the order they are tried in.
pub(super) struct WaitList {
    pub(super) list: Vec<Waiting>,
    /// Whether each head (by index) waits in `list`.
    heads: Vec<bool>,
    max: usize,
}

impl WaitList {
    pub(super) fn new(size: u16) -> WaitList {
        WaitList {
            list: Vec::new(),
            heads: vec![false; usize::from(size)],
            max: usize::from(size),
        }
    }

    /// Lowers the bound (tests: a ring cannot hold more waiting heads than
    /// its size, so the bound is reached only below it).
    #[cfg(test)]
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.list.len() >= self.max
    }

    /// Whether chain `head` waits here.
    pub(super) fn holds(&self, head: u16) -> bool {
        self.heads.get(usize::from(head)).copied().unwrap_or(false)
    }

    /// Adds `p`, whose head must be in range, not waiting, and the list
    /// not full (see [`WaitList::holds`], [`WaitList::is_full`]).
    pub(super) fn push(&mut self, p: Waiting) {
        if let Some(h) = self.heads.get_mut(usize::from(p.head)) {
            *h = true;
        }
        self.list.push(p);
    }

    /// Removes entry `i` (the others keep their order).
    pub(super) fn remove(&mut self, i: usize) -> Waiting {
        let p = self.list.remove(i);
        if let Some(h) = self.heads.get_mut(usize::from(p.head)) {
            *h = false;
        }
        p
    }

    /// Removes the last entry.
    pub(super) fn pop(&mut self) -> Option<Waiting> {
        let p = self.list.pop()?;
        if let Some(h) = self.heads.get_mut(usize::from(p.head)) {
            *h = false;
        }
        Some(p)
    }
}
