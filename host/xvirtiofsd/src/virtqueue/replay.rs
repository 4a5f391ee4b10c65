// SPDX-License-Identifier: Apache-2.0
//! The queue worker's side of crash restart: every request that changes
//! something is recorded in the journal before the server acts and with its
//! reply after; after a crash, the request the predecessor had in flight is
//! answered exactly once (its recorded reply, or a replay the file system
//! resolves). See docs/crash-restart.md.

use xvfs_fs::journal::{self, InFlight, Journal, Phase};

use crate::virtqueue::chain::{ChainReader, ChainWriter};
use crate::FsServer as Server;

/// One queue's recorder.
#[derive(Debug)]
pub struct Recorder {
    journal: &'static Journal,
    queue: usize,
    /// Until the first chain is popped after a crash restart: what the
    /// crashed process had in flight on this queue.
    in_flight: Option<InFlight>,
}

impl Recorder {
    /// The recorder of virtqueue `queue`; `resumed` after a crash, with the
    /// ring continuing at `next_avail`.
    pub fn new(journal: &'static Journal, queue: usize, resumed: bool, next_avail: u16) -> Self {
        let in_flight = journal.in_flight(queue).filter(|_| resumed);
        if resumed {
            log::info!(
                "queue {queue}: resuming at the used index {next_avail}{}",
                in_flight.as_ref().map_or(String::new(), |f| format!(
                    "; last recorded request: opcode {} at {} ({:?})",
                    f.opcode, f.pos, f.phase
                ))
            );
        }
        Recorder {
            journal,
            queue,
            in_flight,
        }
    }

    /// Hands a request to the server; with a journal, records it first and
    /// its reply after, or answers the crashed predecessor's request in
    /// flight exactly once (its recorded reply, else a replay).
    pub fn handle(
        &mut self,
        server: &Server,
        pos: u16,
        head: u16,
        r: &mut ChainReader<'_>,
        w: &mut ChainWriter<'_>,
    ) -> usize {
        let in_flight = self.in_flight.take();
        let j = self.journal;
        // The FUSE header: len, opcode, unique (the server checks the rest).
        let mut hb = [0u8; 16];
        if !r.peek(&mut hb) {
            return server.handle(r, w);
        }
        let (opcode, unique) = header_ids(&hb);
        if !journal::journaled(opcode) {
            return server.handle(r, w);
        }
        let q = self.queue;
        let ours =
            |f: &InFlight| (f.pos, f.head, f.unique, f.opcode) == (pos, head, unique, opcode);
        match in_flight.filter(ours) {
            Some(f) => {
                j.count_replayed();
                if f.phase == Phase::Done
                    && xvfs_fs::io::ReplyWriter::write_all(w, &f.reply).is_ok()
                {
                    return f.reply.len();
                }
                let forget = matches!(
                    opcode,
                    xvfs_fs::abi::opcode::FORGET | xvfs_fs::abi::opcode::BATCH_FORGET
                );
                if forget {
                    // Applied or not, never twice: a count left too high only
                    // keeps a node a little longer.
                    j.idle(q);
                    return 0;
                }
                j.begin_replay(q);
            }
            None => {
                j.begin_request(q, pos, head, opcode, unique);
                crash_hook(j, opcode, HookPoint::Before);
            }
        }
        let n = server.handle(r, w);
        crash_hook(j, opcode, HookPoint::After);
        let reply = w.read_back(n.min(journal::MAX_REPLY));
        j.end_request(q, (reply.len() == n).then_some(&reply[..]));
        n
    }
}

/// Where [`crash_hook`] may strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookPoint {
    /// Recorded, before the file system acts.
    Before,
    /// The file system acted and wrote the reply, which is not yet
    /// recorded nor published.
    After,
}

/// Test hook (`fault-injection` builds only) for the crash-restart tests:
/// XVFS_CRASH_OPS=OPCODE:before|after,... arms one entry per serving
/// process: the one whose index is the number of restarts so far. The first
/// request of that opcode then aborts the process at that point, so every
/// entry strikes exactly once, in order.
#[cfg(feature = "fault-injection")]
fn crash_hook(j: &Journal, opcode: u32, at: HookPoint) {
    static ARMED: std::sync::OnceLock<Option<(u32, HookPoint)>> = std::sync::OnceLock::new();
    // Cheap after the first call: one load.
    let armed = ARMED.get_or_init(|| {
        let list = std::env::var("XVFS_CRASH_OPS").ok()?;
        let entry = list.split(',').nth(usize::try_from(j.restarts()).ok()?)?;
        let (op, point) = entry.split_once(':')?;
        let point = match point {
            "before" => HookPoint::Before,
            "after" => HookPoint::After,
            _ => return None,
        };
        Some((op.parse().ok()?, point))
    });
    if *armed == Some((opcode, at)) {
        // SAFETY: abort takes no arguments; this is the crash being tested.
        unsafe { libc::abort() };
    }
}

#[cfg(not(feature = "fault-injection"))]
fn crash_hook(_: &Journal, _: u32, _: HookPoint) {}

/// Opcode and unique of a FUSE request header's first 16 bytes.
fn header_ids(h: &[u8; 16]) -> (u32, u64) {
    let mut op = [0u8; 4];
    let mut unique = [0u8; 8];
    op.copy_from_slice(&h[4..8]);
    unique.copy_from_slice(&h[8..16]);
    (u32::from_ne_bytes(op), u64::from_ne_bytes(unique))
}
