// SPDX-License-Identifier: Apache-2.0
//! Crash restart: the holder keeps the descriptors of files with no name
//! left (`xvfs_fs::passthrough::Keeper`, see `keep.rs` there).
//!
//! A second socket between the holder and its serving process carries:
//!
//! | kind | from | payload | descriptors |
//! |---|---|---|---|
//! | KEEP (10) | serving process | one entry per descriptor | the files kept |
//! | LET_GO (11) | serving process | entries | none |
//! | KEPT (12) | holder, to a restarted process | one entry per descriptor | what it keeps |
//! | KEPT_END (13) | holder | number of KEPT entries sent (u64) | none |
//!
//! An entry is 16 bytes: kind (u64 little endian: 1 root, 2 node, 3 open
//! file) and id (u64). The holder sends everything it keeps (KEPT..., then
//! KEPT_END) to a restarted process before the checkpoint, and keeps it on:
//! only LET_GO or its own end closes a kept descriptor.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use log::warn;
use virtio_fs_ext::handover::{self, HandoverError, Msg, MAX_FDS_PER_MSG};
use xvfs_fs::passthrough::{Keeper, Kept};

pub const KEEP: u32 = 10;
pub const LET_GO: u32 = 11;
pub const KEPT: u32 = 12;
pub const KEPT_END: u32 = 13;

/// Most descriptors the holder keeps: two per journal slot (a node and an
/// open file), plus the serving processes' views of the root.
const MAX_KEPT: usize = (2 << 20) + 1024;
/// Entries per LET_GO message.
const LET_GO_BATCH: usize = 4096;

fn encode(what: &[Kept]) -> Vec<u8> {
    let mut out = Vec::with_capacity(what.len() * 16);
    for k in what {
        let (kind, id) = match *k {
            Kept::Root(m) => (1u64, m),
            Kept::Node(id) => (2, id),
            Kept::Handle(fh) => (3, fh),
        };
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

fn decode(payload: &[u8]) -> Result<Vec<Kept>, HandoverError> {
    if !payload.len().is_multiple_of(16) {
        return Err(HandoverError::Malformed("kept entry length"));
    }
    payload
        .chunks_exact(16)
        .map(|e| {
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&e[i..i + 8]);
                u64::from_le_bytes(b)
            };
            match (word(0), word(8)) {
                (1, m) => Ok(Kept::Root(m)),
                (2, id) => Ok(Kept::Node(id)),
                (3, fh) => Ok(Kept::Handle(fh)),
                _ => Err(HandoverError::Malformed("kept entry kind")),
            }
        })
        .collect()
}

/// Decodes a KEEP or KEPT message: one entry per descriptor.
fn entries(m: Msg) -> Result<Vec<(Kept, OwnedFd)>, HandoverError> {
    let what = decode(&m.payload)?;
    if what.len() != m.fds.len() {
        return Err(HandoverError::Malformed(
            "kept entries and descriptors differ",
        ));
    }
    Ok(what.into_iter().zip(m.fds).collect())
}

/// The serving side: hands descriptors to the holder.
#[derive(Debug)]
pub struct HolderKeeper {
    sock: Mutex<UnixStream>,
    /// The holder takes nothing any more (said once).
    lost: AtomicBool,
}

impl HolderKeeper {
    pub fn new(sock: UnixStream) -> Self {
        HolderKeeper {
            sock: Mutex::new(sock),
            lost: AtomicBool::new(false),
        }
    }

    fn send(&self, kind: u32, payload: &[u8], fds: &[RawFd]) {
        if self.lost.load(Ordering::Relaxed) {
            return;
        }
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = handover::send(&sock, kind, payload, fds) {
            self.lost.store(true, Ordering::Relaxed);
            warn!(
                "crash restart: the holder keeps no more files ({}); a file with no name \
                 left is lost in a crash from now on",
                crate::error_chain(&e)
            );
        }
    }

    /// What the holder kept for this (restarted) process: KEPT messages up
    /// to KEPT_END.
    pub fn receive(&self) -> Result<Vec<(Kept, OwnedFd)>, HandoverError> {
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        sock.set_read_timeout(Some(crate::upgrade::handover::STEP_TIMEOUT))?;
        let mut out = Vec::new();
        loop {
            let m = handover::recv(&sock)?;
            match m.kind {
                KEPT if out.len() + m.fds.len() <= MAX_KEPT => out.extend(entries(m)?),
                KEPT => return Err(HandoverError::Malformed("too many kept descriptors")),
                KEPT_END => {
                    let n = m.payload.get(..8).map(|b| {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(b);
                        u64::from_le_bytes(w)
                    });
                    if n != Some(out.len() as u64) {
                        return Err(HandoverError::Malformed("KEPT_END count"));
                    }
                    sock.set_read_timeout(None)?;
                    return Ok(out);
                }
                got => {
                    return Err(HandoverError::Unexpected {
                        got,
                        want: "KEPT or KEPT_END",
                    })
                }
            }
        }
    }
}

impl Keeper for HolderKeeper {
    fn keep(&self, files: &[(Kept, BorrowedFd<'_>)]) {
        for batch in files.chunks(MAX_FDS_PER_MSG) {
            let what: Vec<Kept> = batch.iter().map(|f| f.0).collect();
            let fds: Vec<RawFd> = batch.iter().map(|f| f.1.as_raw_fd()).collect();
            self.send(KEEP, &encode(&what), &fds);
        }
    }

    fn let_go(&self, what: &[Kept]) {
        for batch in what.chunks(LET_GO_BATCH) {
            self.send(LET_GO, &encode(batch), &[]);
        }
    }
}

/// The holder side: what it keeps, across serving processes.
#[derive(Debug, Default)]
pub struct KeptStore {
    files: HashMap<Kept, OwnedFd>,
    /// A KEEP beyond `MAX_KEPT` was refused (said once).
    full: bool,
}

impl KeptStore {
    /// Applies a KEEP or LET_GO from the serving process; anything else is
    /// an error.
    pub fn apply(&mut self, m: Msg) -> Result<(), HandoverError> {
        match m.kind {
            KEEP => {
                for (what, fd) in entries(m)? {
                    if self.files.len() >= MAX_KEPT && !self.files.contains_key(&what) {
                        if !self.full {
                            warn!("crash restart: {MAX_KEPT} files kept; no more are");
                            self.full = true;
                        }
                        continue;
                    }
                    self.files.insert(what, fd);
                }
                Ok(())
            }
            LET_GO if m.fds.is_empty() => {
                for what in decode(&m.payload)? {
                    self.files.remove(&what);
                }
                Ok(())
            }
            got => Err(HandoverError::Unexpected {
                got,
                want: "KEEP or LET_GO",
            }),
        }
    }

    /// Number of descriptors kept.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Sends a restarted process everything kept (it stays kept here).
    pub fn send_all(&self, peer: &UnixStream) -> Result<(), HandoverError> {
        let all: Vec<(&Kept, &OwnedFd)> = self.files.iter().collect();
        for batch in all.chunks(MAX_FDS_PER_MSG) {
            let what: Vec<Kept> = batch.iter().map(|f| *f.0).collect();
            let fds: Vec<RawFd> = batch.iter().map(|f| f.1.as_raw_fd()).collect();
            handover::send(peer, KEPT, &encode(&what), &fds)?;
        }
        handover::send(peer, KEPT_END, &(all.len() as u64).to_le_bytes(), &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn kept_files_reach_a_restarted_process_and_let_go_closes_them() {
        let (serving, holder) = UnixStream::pair().unwrap();
        let keeper = HolderKeeper::new(serving.try_clone().unwrap());
        let (a, b, r) = (devnull(), devnull(), devnull());
        keeper.keep(&[
            (Kept::Root(7), r.as_fd()),
            (Kept::Node(5), a.as_fd()),
            (Kept::Handle(9), b.as_fd()),
        ]);
        keeper.let_go(&[Kept::Handle(9)]);
        let mut store = KeptStore::default();
        store.apply(handover::recv(&holder).unwrap()).unwrap();
        assert_eq!(store.len(), 3);
        store.apply(handover::recv(&holder).unwrap()).unwrap();
        assert_eq!(store.len(), 2);
        store.send_all(&holder).unwrap();
        let mut got: Vec<Kept> = keeper.receive().unwrap().into_iter().map(|f| f.0).collect();
        got.sort_by_key(|k| format!("{k:?}"));
        assert_eq!(got, vec![Kept::Node(5), Kept::Root(7)]);
    }

    #[test]
    fn a_malformed_keep_is_refused() {
        let (serving, holder) = UnixStream::pair().unwrap();
        let fd = devnull();
        // Two entries, one descriptor.
        let payload = encode(&[Kept::Node(1), Kept::Node(2)]);
        handover::send(&serving, KEEP, &payload, &[fd.as_raw_fd()]).unwrap();
        handover::send(&serving, KEEP, &[1, 2, 3], &[]).unwrap();
        let mut bad = encode(&[Kept::Node(1)]);
        bad[0] = 4;
        handover::send(&serving, KEEP, &bad, &[fd.as_raw_fd()]).unwrap();
        handover::send(&serving, KEPT, &[], &[]).unwrap();
        let mut store = KeptStore::default();
        for _ in 0..4 {
            assert!(store.apply(handover::recv(&holder).unwrap()).is_err());
        }
        assert!(store.is_empty());
    }

    #[test]
    fn a_wrong_kept_end_count_is_refused() {
        let (serving, holder) = UnixStream::pair().unwrap();
        let keeper = HolderKeeper::new(serving);
        handover::send(&holder, KEPT_END, &3u64.to_le_bytes(), &[]).unwrap();
        assert!(keeper.receive().is_err());
    }
}
