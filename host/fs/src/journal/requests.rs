// SPDX-License-Identifier: Apache-2.0
//! The journal's request slots: the one request in flight per queue, and the
//! thread-local state through which the file system notes what a replay
//! needs and learns that it is replaying.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{pack, unpack, Journal, MAX_REPLY};

/// State of a request slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request recorded.
    Idle,
    /// Started; its outcome is unknown.
    Intent,
    /// Finished; the reply is recorded.
    Done,
}

/// The request a queue had in flight, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// Intent or done.
    pub phase: Phase,
    /// Avail-ring position the chain was popped from.
    pub pos: u16,
    /// Head descriptor index.
    pub head: u16,
    /// FUSE opcode.
    pub opcode: u32,
    /// FUSE unique.
    pub unique: u64,
    /// What the file system noted before acting (see [`note_aux`]).
    pub aux: u64,
    /// The reply (Done only).
    pub reply: Vec<u8>,
}

thread_local! {
    /// The request slot of the queue this thread serves, and whether the
    /// request being handled is a replay of one whose outcome is unknown.
    static CURRENT: Cell<Option<(&'static AtomicU64, bool)>> = const { Cell::new(None) };
}

/// Notes a value the file system needs to resolve a replay (e.g. a file's
/// size before an append) in the current request's slot.
/// A replay keeps what the first attempt noted.
pub fn note_aux(v: u64) {
    if let Some((aux, false)) = CURRENT.get() {
        aux.store(v, Ordering::Release);
    }
}

/// When replaying a request whose outcome is unknown: what was noted.
pub fn replaying() -> Option<u64> {
    match CURRENT.get() {
        Some((aux, true)) => Some(aux.load(Ordering::Acquire)),
        _ => None,
    }
}

/// Whether this thread's request is journaled and a first attempt (worth
/// noting anything for a replay).
pub fn journaling() -> bool {
    matches!(CURRENT.get(), Some((_, false)))
}

/// Whether a request of `opcode` is journaled: every one that changes
/// something (a replay of a read-only one simply runs it again).
pub fn journaled(opcode: u32) -> bool {
    use crate::abi::opcode::*;
    matches!(
        opcode,
        FORGET
            | BATCH_FORGET
            | SETATTR
            | SYMLINK
            | MKNOD
            | MKDIR
            | UNLINK
            | RMDIR
            | RENAME
            | RENAME2
            | LINK
            | OPEN
            | OPENDIR
            | CREATE
            | TMPFILE
            | WRITE
            | RELEASE
            | RELEASEDIR
            | SETXATTR
            | REMOVEXATTR
            | FALLOCATE
            | COPY_FILE_RANGE
            | INIT
            | DESTROY
    )
}

impl Journal {
    // ----- requests in flight -----

    /// Starts recording a request of queue `q` (taken from ring position
    /// `pos`); this thread's file-system calls may [`note_aux`] until
    /// [`Journal::end_request`].
    pub fn begin_request(&'static self, q: usize, pos: u16, head: u16, opcode: u32, unique: u64) {
        let Some(w) = (q < self.queues).then(|| self.request_words(q)) else {
            return;
        };
        w[0].store(0, Ordering::Release);
        w[1].store(
            u64::from(pos) | u64::from(head) << 16 | u64::from(opcode) << 32,
            Ordering::Relaxed,
        );
        w[2].store(unique, Ordering::Relaxed);
        w[3].store(0, Ordering::Relaxed);
        w[0].store(1, Ordering::Release);
        CURRENT.set(Some((&w[3], false)));
    }

    /// Marks this thread as replaying the request recorded for queue `q`
    /// (outcome unknown): the file system resolves ambiguities.
    pub fn begin_replay(&'static self, q: usize) {
        if q < self.queues {
            CURRENT.set(Some((&self.request_words(q)[3], true)));
        }
    }

    /// Records the reply of the request in flight on queue `q` (None: too
    /// large to keep; a replay then re-executes it as if unknown).
    pub fn end_request(&self, q: usize, reply: Option<&[u8]>) {
        CURRENT.take();
        if q >= self.queues {
            return;
        }
        let w = self.request_words(q);
        if let Some(r) = reply.filter(|r| r.len() <= MAX_REPLY) {
            pack(r, &w[6..]);
            w[4].store(r.len() as u64, Ordering::Relaxed);
            w[0].store(2, Ordering::Release);
        }
    }

    /// Clears the request slot of queue `q` (nothing in flight).
    pub fn idle(&self, q: usize) {
        CURRENT.take();
        if q < self.queues {
            self.request_words(q)[0].store(0, Ordering::Release);
        }
    }

    /// What queue `q` had in flight.
    pub fn in_flight(&self, q: usize) -> Option<InFlight> {
        if q >= self.queues {
            return None;
        }
        let w = self.request_words(q);
        let phase = match w[0].load(Ordering::Acquire) {
            1 => Phase::Intent,
            2 => Phase::Done,
            _ => return None,
        };
        let a = w[1].load(Ordering::Relaxed);
        let len = (w[4].load(Ordering::Relaxed) as usize).min(MAX_REPLY);
        Some(InFlight {
            phase,
            pos: a as u16,
            head: (a >> 16) as u16,
            opcode: (a >> 32) as u32,
            unique: w[2].load(Ordering::Relaxed),
            aux: w[3].load(Ordering::Relaxed),
            reply: if phase == Phase::Done {
                unpack(&w[6..], len)
            } else {
                Vec::new()
            },
        })
    }
}
