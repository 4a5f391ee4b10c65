// SPDX-License-Identifier: Apache-2.0
//! The crash-restart journal: what a new serving process needs to continue
//! a crashed one's work, kept current in a shared memory file that outlives
//! the process (the holder owns it; see `docs/crash-restart.md`).
//!
//! The journal holds
//!
//! - the FUSE session (what INIT settled),
//! - every inode the guest holds: node id, lookup count, file type, host
//!   identity and how to find it again (a file handle where the file system
//!   gives one, else its parent node and name),
//! - every open handle: handle id, node, open flags,
//! - per request queue, the one request in flight (queues are served in
//!   order, one chain at a time): its ring position, head and FUSE unique,
//!   and for a request that changes something, its reply once known,
//! - counters for `status`: restarts, replayed requests, the last crash.
//!
//! Every word is an atomic: the writer is a live process, the reader the next
//! process after the writer died, and a slot is only ever written by the
//! thread that holds the table lock of its inode or handle. A slot is marked
//! "writing" while its fields change, so a slot the crash cut in half is
//! recognized and skipped (its node then answers EIO, never a wrong file).
//!
//! Nothing read back is trusted beyond its bounds: the layout is checked
//! against the file's size, and the state it yields goes through the same
//! checks as a VM live migration's ([`crate::PassthroughFs::load_journal`]).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::state::{
    FileHandle, Location, MigratedHandle, MigratedInode, MigrationFs, MAX_HANDLE_SZ,
};
use crate::sys;
use crate::SessionState;

mod requests;
pub use requests::{journaled, journaling, note_aux, replaying, InFlight, Phase};

/// First word of a journal: "XVFSJRN1".
pub const JOURNAL_MAGIC: u64 = u64::from_le_bytes(*b"XVFSJRN1");
/// Layout version.
pub const JOURNAL_VERSION: u64 = 1;

const HEADER_WORDS: usize = 64;
const NODE_WORDS: usize = 56;
const HANDLE_WORDS: usize = 4;
/// Largest reply kept for a request in flight.
pub const MAX_REPLY: usize = 512;
pub(super) const REQUEST_WORDS: usize = 6 + MAX_REPLY / 8;
const NAME_WORDS: usize = 32;
const FH_WORDS: usize = 16;
// A slot holds the longest file handle the kernel makes, and no longer one.
const _: () = assert!(FH_WORDS * 8 == MAX_HANDLE_SZ);
const POOLS: usize = 16;
/// Longest crash reason kept.
const REASON_BYTES: usize = 256;

// Header word indices.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_QUEUES: usize = 2;
const H_NODES: usize = 3;
const H_HANDLES: usize = 4;
const H_SESSION_MINOR: usize = 5;
const H_SESSION_FLAGS: usize = 6;
const H_NEXT_ID: usize = 7;
const H_NEXT_FH: usize = 8;
const H_RESTARTS: usize = 9;
const H_REPLAYED: usize = 10;
const H_CRASH_MS: usize = 11;
const H_REASON_LEN: usize = 12;
const H_HOLDER_PID: usize = 13;
const H_REASON: usize = 16; // 32 words

// Slot states.
const FREE: u64 = 0;
const WRITING: u64 = 1;
const VALID: u64 = 2;

/// Why a journal cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Sizing or mapping the memory file failed.
    #[error("cannot size or map the journal")]
    Map(#[source] io::Error),
    /// The file is not a journal of this layout.
    #[error("journal is not ours or of another layout ({0})")]
    Layout(&'static str),
}

/// A slot pool: the slots of one table shard, with a free list.
#[derive(Debug, Default)]
struct Pool {
    free: Vec<u32>,
    next: u32,
    end: u32,
}

/// The journal, mapped.
#[derive(Debug)]
pub struct Journal {
    words: &'static [AtomicU64],
    pub(super) queues: usize,
    nodes: usize,
    handles: usize,
    node_pools: Vec<Mutex<Pool>>,
    handle_pools: Vec<Mutex<Pool>>,
}

/// Slot "none".
pub const NO_SLOT: u32 = u32::MAX;

fn total_words(queues: usize, nodes: usize, handles: usize) -> usize {
    HEADER_WORDS + queues * REQUEST_WORDS + nodes * NODE_WORDS + handles * HANDLE_WORDS
}

fn pools(n: usize) -> Vec<Mutex<Pool>> {
    let per = n.div_ceil(POOLS);
    (0..POOLS)
        .map(|i| {
            let start = (i * per).min(n) as u32;
            let end = ((i + 1) * per).min(n) as u32;
            Mutex::new(Pool {
                free: Vec::new(),
                next: start,
                end,
            })
        })
        .collect()
}

fn lock(m: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn pack(bytes: &[u8], words: &[AtomicU64]) {
    for (i, w) in words.iter().enumerate() {
        let mut b = [0u8; 8];
        let from = (i * 8).min(bytes.len());
        let to = (i * 8 + 8).min(bytes.len());
        b[..to - from].copy_from_slice(&bytes[from..to]);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        if to == bytes.len() {
            break;
        }
    }
}

pub(super) fn unpack(words: &[AtomicU64], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(words.len() * 8);
    for w in words {
        out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The tables a journal holds (see [`Journal::tables`]).
#[derive(Debug, Clone)]
pub struct JournalTables {
    /// Nodes and handles, as a VM live migration would describe them.
    pub fs: MigrationFs,
    /// Node id → host (device, inode): the file re-opened must be this one.
    pub keys: HashMap<u64, (u64, u64)>,
    /// Node id → its journal slot.
    pub node_slots: HashMap<u64, u32>,
    /// Handle id → its journal slot.
    pub handle_slots: HashMap<u64, u32>,
    /// Node id → the parent node and name it was last known by (also for
    /// nodes found by file handle).
    pub names: HashMap<u64, (u64, Vec<u8>)>,
}

/// How a node can be found again.
#[derive(Debug, Clone, Default)]
pub struct NodeOrigin<'a> {
    /// Its file handle, if the file system gives one.
    pub handle: Option<(i32, &'a [u8])>,
    /// Its parent node and name.
    pub parent: Option<(u64, &'a [u8])>,
}

impl Journal {
    /// Size in bytes of a journal for these capacities.
    pub fn size_for(queues: usize, nodes: usize, handles: usize) -> u64 {
        (total_words(queues, nodes, handles) * 8) as u64
    }

    /// Sizes `fd` (a fresh memory file) and lays a new journal out in it.
    pub fn create(
        fd: BorrowedFd<'_>,
        queues: usize,
        nodes: usize,
        handles: usize,
    ) -> Result<Journal, JournalError> {
        sys::ftruncate(fd, Self::size_for(queues, nodes, handles)).map_err(JournalError::Map)?;
        let j = Self::map(fd, queues, nodes, handles)?;
        let h = j.header();
        h[H_VERSION].store(JOURNAL_VERSION, Ordering::Relaxed);
        h[H_QUEUES].store(queues as u64, Ordering::Relaxed);
        h[H_NODES].store(nodes as u64, Ordering::Relaxed);
        h[H_HANDLES].store(handles as u64, Ordering::Relaxed);
        h[H_MAGIC].store(JOURNAL_MAGIC, Ordering::Release);
        Ok(j)
    }

    /// Maps an existing journal (a predecessor's), checking its layout.
    pub fn open(fd: BorrowedFd<'_>) -> Result<Journal, JournalError> {
        let len = sys::stat_fd(fd).map_err(JournalError::Map)?.st_size as u64;
        if len < (HEADER_WORDS * 8) as u64 {
            return Err(JournalError::Layout("shorter than its header"));
        }
        let head = Self::map(fd, 0, 0, 0)?;
        let h = head.header();
        if h[H_MAGIC].load(Ordering::Acquire) != JOURNAL_MAGIC {
            return Err(JournalError::Layout("bad magic"));
        }
        if h[H_VERSION].load(Ordering::Relaxed) != JOURNAL_VERSION {
            return Err(JournalError::Layout("unknown version"));
        }
        let q = h[H_QUEUES].load(Ordering::Relaxed);
        let n = h[H_NODES].load(Ordering::Relaxed);
        let hs = h[H_HANDLES].load(Ordering::Relaxed);
        if q > 64 || n > 1 << 24 || hs > 1 << 24 {
            return Err(JournalError::Layout("capacities out of range"));
        }
        let (q, n, hs) = (q as usize, n as usize, hs as usize);
        if Self::size_for(q, n, hs) != len {
            return Err(JournalError::Layout("size does not match its capacities"));
        }
        let j = Self::map(fd, q, n, hs)?;
        j.rebuild_free_lists();
        Ok(j)
    }

    fn map(
        fd: BorrowedFd<'_>,
        queues: usize,
        nodes: usize,
        handles: usize,
    ) -> Result<Journal, JournalError> {
        let words = total_words(queues, nodes, handles);
        let ptr = sys::map_shared(fd.as_fd(), words * 8).map_err(JournalError::Map)?;
        // SAFETY: `ptr` is a fresh shared mapping of `words * 8` bytes, page
        // aligned, never unmapped (the journal lives as long as the
        // process), and only ever accessed through these atomics.
        let words = unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicU64>(), words) };
        Ok(Journal {
            words,
            queues,
            nodes,
            handles,
            node_pools: pools(nodes),
            handle_pools: pools(handles),
        })
    }

    fn header(&self) -> &[AtomicU64] {
        &self.words[..HEADER_WORDS]
    }

    pub(super) fn request_words(&self, q: usize) -> &[AtomicU64] {
        let at = HEADER_WORDS + q * REQUEST_WORDS;
        &self.words[at..at + REQUEST_WORDS]
    }

    fn node(&self, slot: u32) -> &[AtomicU64] {
        let at = HEADER_WORDS + self.queues * REQUEST_WORDS + slot as usize * NODE_WORDS;
        &self.words[at..at + NODE_WORDS]
    }

    fn handle(&self, slot: u32) -> &[AtomicU64] {
        let at = HEADER_WORDS
            + self.queues * REQUEST_WORDS
            + self.nodes * NODE_WORDS
            + slot as usize * HANDLE_WORDS;
        &self.words[at..at + HANDLE_WORDS]
    }

    /// Number of request queues it has slots for.
    pub fn queues(&self) -> usize {
        self.queues
    }

    fn rebuild_free_lists(&self) {
        let rebuild = |pools: &[Mutex<Pool>], used: &dyn Fn(u32) -> bool| {
            for p in pools {
                let mut p = lock(p);
                let (start, end) = (p.next, p.end);
                p.free = (start..end).rev().filter(|&s| !used(s)).collect();
                p.next = end;
            }
        };
        rebuild(&self.node_pools, &|s| {
            self.node(s)[0].load(Ordering::Relaxed) != FREE
        });
        rebuild(&self.handle_pools, &|s| {
            self.handle(s)[0].load(Ordering::Relaxed) != FREE
        });
    }

    fn alloc(pools: &[Mutex<Pool>], shard: usize) -> u32 {
        for i in 0..POOLS {
            let mut p = lock(&pools[(shard + i) % POOLS]);
            if let Some(s) = p.free.pop() {
                return s;
            }
            if p.next < p.end {
                p.next += 1;
                return p.next - 1;
            }
        }
        NO_SLOT
    }

    fn release(pools: &[Mutex<Pool>], slot: u32, per: usize) {
        if let Some(p) = pools.get(slot as usize / per.max(1)) {
            lock(p).free.push(slot);
        }
    }

    // ----- session and counters -----

    /// Records the FUSE session (None: ended).
    pub fn set_session(&self, s: Option<SessionState>) {
        let h = self.header();
        h[H_SESSION_MINOR].store(0, Ordering::Release);
        if let Some(s) = s {
            h[H_SESSION_FLAGS].store(s.flags, Ordering::Relaxed);
            h[H_SESSION_MINOR].store(u64::from(s.minor), Ordering::Release);
        }
    }

    /// The recorded session.
    pub fn session(&self) -> Option<SessionState> {
        let h = self.header();
        match h[H_SESSION_MINOR].load(Ordering::Acquire) {
            0 => None,
            m => Some(SessionState {
                minor: u32::try_from(m).unwrap_or(0),
                flags: h[H_SESSION_FLAGS].load(Ordering::Relaxed),
            }),
        }
    }

    /// Records the holder's pid (for `status`).
    pub fn set_holder_pid(&self, pid: u32) {
        self.header()[H_HOLDER_PID].store(u64::from(pid), Ordering::Relaxed);
    }

    /// The holder's pid.
    pub fn holder_pid(&self) -> u32 {
        u32::try_from(self.header()[H_HOLDER_PID].load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Restarts so far (the holder counts them).
    pub fn restarts(&self) -> u64 {
        self.header()[H_RESTARTS].load(Ordering::Relaxed)
    }

    /// Requests replayed after restarts so far.
    pub fn replayed(&self) -> u64 {
        self.header()[H_REPLAYED].load(Ordering::Relaxed)
    }

    /// Counts one replayed request.
    pub fn count_replayed(&self) {
        self.header()[H_REPLAYED].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a crash (the holder, before it starts the next process).
    pub fn record_crash(&self, unix_ms: u64, reason: &str) {
        let h = self.header();
        h[H_RESTARTS].fetch_add(1, Ordering::Relaxed);
        h[H_CRASH_MS].store(unix_ms, Ordering::Relaxed);
        let r = &reason.as_bytes()[..reason.len().min(REASON_BYTES)];
        pack(r, &h[H_REASON..H_REASON + REASON_BYTES / 8]);
        h[H_REASON_LEN].store(r.len() as u64, Ordering::Release);
    }

    /// The last crash: when (Unix ms) and why.
    pub fn last_crash(&self) -> Option<(u64, String)> {
        let h = self.header();
        let ms = h[H_CRASH_MS].load(Ordering::Relaxed);
        if ms == 0 {
            return None;
        }
        let len = (h[H_REASON_LEN].load(Ordering::Acquire) as usize).min(REASON_BYTES);
        let b = unpack(&h[H_REASON..H_REASON + REASON_BYTES / 8], len);
        Some((ms, String::from_utf8_lossy(&b).into_owned()))
    }

    // ----- inodes -----

    /// Records a new node (called under its table lock); returns its slot
    /// ([`NO_SLOT`] when the journal is full: the node is then lost on a
    /// crash, and the caller refuses it).
    pub fn add_node(
        &self,
        shard: usize,
        id: u64,
        key: (u64, u64),
        file_type: u32,
        origin: &NodeOrigin<'_>,
    ) -> u32 {
        let slot = Self::alloc(&self.node_pools, shard);
        if slot == NO_SLOT {
            return slot;
        }
        let w = self.node(slot);
        // Never a stale id beside WRITING (see `tables`).
        w[1].store(0, Ordering::Relaxed);
        w[0].store(WRITING, Ordering::Release);
        w[1].store(id, Ordering::Relaxed);
        w[2].store(1, Ordering::Relaxed);
        w[3].store(key.0, Ordering::Relaxed);
        w[4].store(key.1, Ordering::Relaxed);
        self.set_origin(w, file_type, origin);
        self.header()[H_NEXT_ID].fetch_max(id + 1, Ordering::Relaxed);
        w[0].store(VALID, Ordering::Release);
        slot
    }

    fn set_origin(&self, w: &[AtomicU64], file_type: u32, o: &NodeOrigin<'_>) {
        let (ht, hb) = o
            .handle
            .filter(|h| h.1.len() <= FH_WORDS * 8)
            .unwrap_or((0, &[]));
        let (parent, name) = o
            .parent
            .filter(|p| p.1.len() <= NAME_WORDS * 8)
            .unwrap_or((0, &[]));
        w[5].store(
            u64::from(file_type) | (hb.len() as u64) << 32 | (name.len() as u64) << 48,
            Ordering::Relaxed,
        );
        w[6].store(ht as u32 as u64, Ordering::Relaxed);
        w[7].store(parent, Ordering::Relaxed);
        pack(hb, &w[8..8 + FH_WORDS]);
        pack(name, &w[8 + FH_WORDS..8 + FH_WORDS + NAME_WORDS]);
    }

    /// A node's lookup count changed.
    pub fn set_refs(&self, slot: u32, refs: u64) {
        if (slot as usize) < self.nodes {
            self.node(slot)[2].store(refs, Ordering::Release);
        }
    }

    /// A node is gone.
    pub fn remove_node(&self, slot: u32) {
        if (slot as usize) < self.nodes {
            self.node(slot)[0].store(FREE, Ordering::Release);
            Self::release(&self.node_pools, slot, self.nodes.div_ceil(POOLS));
        }
    }

    /// A node was renamed or unlinked: where it is now (None: nowhere known).
    pub fn move_node(&self, slot: u32, file_type: u32, to: Option<(u64, &[u8])>) {
        if (slot as usize) >= self.nodes {
            return;
        }
        let w = self.node(slot);
        let meta = w[5].load(Ordering::Relaxed);
        let hlen = ((meta >> 32) & 0xffff) as usize;
        let handle = unpack(&w[8..8 + FH_WORDS], hlen);
        let ht = w[6].load(Ordering::Relaxed) as u32 as i32;
        w[0].store(WRITING, Ordering::Release);
        let origin = NodeOrigin {
            handle: (hlen > 0).then_some((ht, &handle[..])),
            parent: to,
        };
        self.set_origin(w, file_type, &origin);
        w[0].store(VALID, Ordering::Release);
    }

    // ----- handles -----

    /// Records an open handle (called under its table lock).
    pub fn add_handle(&self, shard: usize, fh: u64, inode: u64, flags: i32) -> u32 {
        let slot = Self::alloc(&self.handle_pools, shard);
        if slot == NO_SLOT {
            return slot;
        }
        let w = self.handle(slot);
        w[0].store(WRITING, Ordering::Release);
        w[1].store(fh, Ordering::Relaxed);
        w[2].store(inode, Ordering::Relaxed);
        w[3].store(flags as u32 as u64, Ordering::Relaxed);
        self.header()[H_NEXT_FH].fetch_max(fh + 1, Ordering::Relaxed);
        w[0].store(VALID, Ordering::Release);
        slot
    }

    /// A handle was released.
    pub fn remove_handle(&self, slot: u32) {
        if (slot as usize) < self.handles {
            self.handle(slot)[0].store(FREE, Ordering::Release);
            Self::release(&self.handle_pools, slot, self.handles.div_ceil(POOLS));
        }
    }

    /// Forgets every node and handle (a new session, or before a rebuild).
    pub fn clear_tables(&self) {
        for s in 0..self.nodes as u32 {
            self.node(s)[0].store(FREE, Ordering::Relaxed);
        }
        for s in 0..self.handles as u32 {
            self.handle(s)[0].store(FREE, Ordering::Relaxed);
        }
        for (pools, n) in [
            (&self.node_pools, self.nodes),
            (&self.handle_pools, self.handles),
        ] {
            for (i, p) in pools.iter().enumerate() {
                let per = n.div_ceil(POOLS);
                let mut p = lock(p);
                p.free.clear();
                p.next = (i * per).min(n) as u32;
            }
        }
    }

    /// The tables as a migration-style state for the next process, with
    /// each node's host identity (which the file it opens must have) and
    /// the slots of nodes and handles (which the restored ones keep).
    pub fn tables(&self) -> JournalTables {
        let h = self.header();
        let mut inodes = Vec::new();
        let mut keys = HashMap::new();
        let mut node_slots = HashMap::new();
        let mut handle_slots = HashMap::new();
        let mut names = HashMap::new();
        for s in 0..self.nodes as u32 {
            let w = self.node(s);
            let state = w[0].load(Ordering::Acquire);
            let id = w[1].load(Ordering::Relaxed);
            if state == FREE || id == 0 || keys.contains_key(&id) {
                continue;
            }
            let meta = w[5].load(Ordering::Relaxed);
            let hlen = ((meta >> 32) & 0xffff) as usize;
            let nlen = (meta >> 48) as usize;
            let location = if state != VALID {
                // Cut in half by the crash: never guess, the node answers EIO.
                Location::Invalid {
                    why: "the crash interrupted its journal entry".into(),
                }
            } else if hlen > MAX_HANDLE_SZ {
                Location::Invalid {
                    why: format!("its journal entry has a file handle of {hlen} bytes"),
                }
            } else if hlen > 0 {
                Location::Handle(FileHandle {
                    handle_type: w[6].load(Ordering::Relaxed) as u32 as i32,
                    bytes: unpack(&w[8..8 + FH_WORDS], hlen),
                })
            } else if nlen > 0 && nlen <= NAME_WORDS * 8 {
                Location::Path {
                    parent: w[7].load(Ordering::Relaxed),
                    name: unpack(&w[8 + FH_WORDS..8 + FH_WORDS + NAME_WORDS], nlen),
                }
            } else {
                Location::Invalid {
                    why: "no file handle and no known name".into(),
                }
            };
            keys.insert(
                id,
                (w[3].load(Ordering::Relaxed), w[4].load(Ordering::Relaxed)),
            );
            node_slots.insert(id, s);
            if state == VALID && nlen > 0 && nlen <= NAME_WORDS * 8 {
                names.insert(
                    id,
                    (
                        w[7].load(Ordering::Relaxed),
                        unpack(&w[8 + FH_WORDS..8 + FH_WORDS + NAME_WORDS], nlen),
                    ),
                );
            }
            inodes.push(MigratedInode {
                id,
                refs: w[2].load(Ordering::Acquire).max(1),
                generation: 0,
                file_type: Some(meta as u32),
                location,
                verify: None,
            });
        }
        let mut handles = Vec::new();
        for s in 0..self.handles as u32 {
            let w = self.handle(s);
            let fh = w[1].load(Ordering::Relaxed);
            if w[0].load(Ordering::Acquire) != VALID || handle_slots.contains_key(&fh) {
                continue;
            }
            handle_slots.insert(fh, s);
            handles.push(MigratedHandle {
                fh: w[1].load(Ordering::Relaxed),
                inode: w[2].load(Ordering::Relaxed),
                flags: w[3].load(Ordering::Relaxed) as u32 as i32,
            });
        }
        let fs = MigrationFs {
            next_id: h[H_NEXT_ID].load(Ordering::Relaxed),
            next_fh: h[H_NEXT_FH].load(Ordering::Relaxed),
            inodes,
            handles,
        };
        JournalTables {
            fs,
            keys,
            node_slots,
            handle_slots,
            names,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn memfd(name: &str) -> OwnedFd {
        let path = std::env::temp_dir().join(format!("xvfs-{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        OwnedFd::from(f)
    }

    #[test]
    fn a_second_mapping_reads_what_the_first_wrote() {
        let fd = memfd("journal-a");
        let j = Box::leak(Box::new(Journal::create(fd.as_fd(), 2, 100, 50).unwrap()));
        j.set_session(Some(SessionState {
            minor: 38,
            flags: 7,
        }));
        let a = j.add_node(
            3,
            5,
            (1, 77),
            libc::S_IFREG,
            &NodeOrigin {
                handle: Some((1, b"abcdefghij")),
                parent: Some((1, b"f")),
            },
        );
        let b = j.add_node(
            3,
            6,
            (1, 78),
            libc::S_IFDIR,
            &NodeOrigin {
                handle: None,
                parent: Some((1, b"d")),
            },
        );
        let gone = j.add_node(4, 7, (1, 79), libc::S_IFREG, &NodeOrigin::default());
        j.set_refs(a, 4);
        j.remove_node(gone);
        j.move_node(b, libc::S_IFDIR, Some((5, b"e")));
        j.add_handle(0, 9, 5, libc::O_RDWR);
        j.begin_request(1, 10, 3, 16, 99);
        note_aux(1234);
        j.end_request(1, Some(b"reply"));

        let k = Journal::open(fd.as_fd()).unwrap();
        assert_eq!(
            k.session(),
            Some(SessionState {
                minor: 38,
                flags: 7
            })
        );
        let t = k.tables();
        let (fs, keys) = (t.fs, t.keys);
        assert_eq!(fs.inodes.len(), 2);
        assert_eq!(fs.next_id, 8);
        assert_eq!(fs.next_fh, 10);
        let n5 = fs.inodes.iter().find(|i| i.id == 5).unwrap();
        assert_eq!(n5.refs, 4);
        assert!(matches!(&n5.location, Location::Handle(h) if h.bytes == b"abcdefghij"));
        let n6 = fs.inodes.iter().find(|i| i.id == 6).unwrap();
        assert_eq!(
            n6.location,
            Location::Path {
                parent: 5,
                name: b"e".to_vec()
            }
        );
        assert_eq!(keys[&6], (1, 78));
        assert_eq!(fs.handles[0].fh, 9);
        let r = k.in_flight(1).unwrap();
        assert_eq!(
            (r.phase, r.pos, r.head, r.opcode, r.unique, r.aux),
            (Phase::Done, 10, 3, 16, 99, 1234)
        );
        assert_eq!(r.reply, b"reply");
        assert!(k.in_flight(0).is_none());
        // The free slot is handed out again, the used ones are not.
        let c = k.add_node(4, 8, (1, 80), libc::S_IFREG, &NodeOrigin::default());
        assert_eq!(c, gone);
    }

    #[test]
    fn a_file_handle_longer_than_max_handle_sz_is_not_read_back() {
        let fd = memfd("journal-c");
        let j = Journal::create(fd.as_fd(), 1, 10, 10).unwrap();
        let origin = NodeOrigin {
            handle: Some((1, &[7u8; MAX_HANDLE_SZ])),
            parent: Some((1, b"f")),
        };
        let slot = j.add_node(0, 5, (1, 77), libc::S_IFREG, &origin);
        let longest = j.tables().fs.inodes[0].location.clone();
        let Location::Handle(h) = longest else {
            panic!("{longest:?}");
        };
        assert_eq!(h.bytes.len(), MAX_HANDLE_SZ);
        // A damaged entry says its handle is longer: the node is lost, not
        // found by name or by a handle cut short.
        let meta = &j.node(slot)[5];
        let longer = (MAX_HANDLE_SZ as u64 + 1) << 32;
        meta.store(
            meta.load(Ordering::Relaxed) & !(0xffff << 32) | longer,
            Ordering::Relaxed,
        );
        let t = j.tables();
        let Location::Invalid { why } = &t.fs.inodes[0].location else {
            panic!("{:?}", t.fs.inodes[0].location);
        };
        assert_eq!(why, "its journal entry has a file handle of 129 bytes");
    }

    #[test]
    fn a_foreign_or_resized_file_is_refused() {
        let fd = memfd("journal-b");
        Journal::create(fd.as_fd(), 1, 10, 10).unwrap();
        sys::ftruncate(fd.as_fd(), Journal::size_for(1, 10, 10) + 8).unwrap();
        assert!(Journal::open(fd.as_fd()).is_err());
        sys::ftruncate(fd.as_fd(), 0).unwrap();
        sys::ftruncate(fd.as_fd(), 4096).unwrap();
        assert!(Journal::open(fd.as_fd()).is_err());
    }
}
