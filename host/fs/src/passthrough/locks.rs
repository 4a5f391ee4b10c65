// SPDX-License-Identifier: Apache-2.0
//! Locks held on the host for the guest (`-o posix_lock`, `-o flock`).
//!
//! Each lock owner of the guest gets, per file, an open file description of
//! its own, and its locks live there: POSIX record locks as OFD locks
//! (`F_OFD_SETLK`), flock locks with `flock(2)`. Both belong to the
//! description, so two owners in one guest conflict as two host processes
//! would, and other guests and host processes see the locks. Nothing here
//! waits (a SETLKW is tried again by its queue worker). A description is
//! closed, with its locks, when the guest drops its owner's locks: FLUSH
//! for POSIX ones (POSIX drops them on any close), RELEASE or LOCK_UN for
//! flock; and when the session ends.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::table::{lock, Handle, Inode};
use super::{err, Ctx, PassthroughFs};
use crate::filesystem::{Lock, LockKind, LockOwner, Locks};
use crate::sys;

/// The descriptions that hold locks: (node id, owner) → descriptor.
#[derive(Debug, Default)]
pub(crate) struct LockTable {
    map: Mutex<HashMap<(u64, LockOwner), OwnedFd>>,
    /// Entries in `map`, read without the mutex (FLUSH of a file nobody
    /// locked must not take it).
    count: AtomicUsize,
}

impl LockTable {
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn clear(&self) {
        let mut m = lock(&self.map);
        m.clear();
        self.count.store(0, Ordering::Relaxed);
    }

    /// Every entry, with its descriptor borrowed (for a live upgrade's
    /// snapshot; the queues are stopped).
    pub(crate) fn all(&self) -> Vec<(u64, LockOwner, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        lock(&self.map)
            .iter()
            .map(|(&(node, owner), fd)| (node, owner, fd.as_raw_fd()))
            .collect()
    }

    /// Adds an entry received from a predecessor; false if it is there.
    pub(crate) fn insert_new(&self, node: u64, owner: LockOwner, fd: OwnedFd) -> bool {
        let mut m = lock(&self.map);
        if m.contains_key(&(node, owner)) {
            return false;
        }
        m.insert((node, owner), fd);
        self.count.store(m.len(), Ordering::Relaxed);
        true
    }
}

/// The `struct flock` of a POSIX lock (`l_len` 0: to the end of the file).
fn flock_of(l: &Lock) -> libc::flock {
    let typ = match l.kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    };
    // SAFETY: `struct flock` is plain data; all zeroes is valid.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_type = typ as libc::c_short;
    f.l_whence = libc::SEEK_SET as libc::c_short;
    f.l_start = l.start as libc::off_t;
    f.l_len = if l.end == Lock::TO_END {
        0
    } else {
        (l.end - l.start + 1) as libc::off_t
    };
    f
}

/// Takes, changes or drops a lock on `fd`, never waiting: a conflict is
/// EAGAIN.
fn apply(fd: BorrowedFd<'_>, owner: LockOwner, l: &Lock) -> io::Result<()> {
    let r = if owner.flock {
        let op = match l.kind {
            LockKind::Read => libc::LOCK_SH,
            LockKind::Write => libc::LOCK_EX,
            LockKind::Unlock => libc::LOCK_UN,
        };
        sys::flock(fd, op | libc::LOCK_NB)
    } else {
        sys::fcntl_lock(fd, libc::F_OFD_SETLK, &mut flock_of(l))
    };
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) => err(libc::EAGAIN),
        _ => e,
    })
}

impl PassthroughFs {
    /// The handle `fh`, which must be open on `node`.
    fn lock_handle(
        &self,
        node: u64,
        fh: u64,
    ) -> io::Result<(std::sync::Arc<Inode>, std::sync::Arc<Handle>)> {
        let inode = self.inode(node)?;
        let h = self.handle(fh)?;
        if h.inode != node {
            return Err(err(libc::EBADF));
        }
        Ok((inode, h))
    }

    /// A new description of the file for one owner: read-write where the
    /// host allows it (one description must hold the owner's read and write
    /// locks alike), else with the guest's own access mode.
    fn lock_fd(&self, inode: &Inode, h: &Handle) -> io::Result<OwnedFd> {
        if inode.is_dir() {
            return self.reopen(inode, libc::O_RDONLY | libc::O_DIRECTORY);
        }
        self.reopen(inode, libc::O_RDWR | libc::O_NONBLOCK)
            .or_else(|_| self.reopen(inode, (h.flags & libc::O_ACCMODE) | libc::O_NONBLOCK))
    }

    /// Locks held for the guest now (descriptions with locks).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }
}

impl Locks for PassthroughFs {
    fn getlk(&self, _: Ctx, node: u64, fh: u64, owner: u64, l: Lock) -> io::Result<Lock> {
        let (inode, h) = self.lock_handle(node, fh)?;
        let key = (
            node,
            LockOwner {
                owner,
                flock: false,
            },
        );
        let mut f = flock_of(&l);
        // Asked through the owner's own description, whose locks never
        // conflict with it; else through a new one.
        let own = lock(&self.locks.map)
            .get(&key)
            .map(|fd| sys::fcntl_lock(fd.as_fd(), libc::F_OFD_GETLK, &mut f));
        match own {
            Some(r) => r?,
            None => {
                let fd = self.lock_fd(&inode, &h)?;
                sys::fcntl_lock(fd.as_fd(), libc::F_OFD_GETLK, &mut f)?;
            }
        }
        let kind = match i32::from(f.l_type) {
            libc::F_RDLCK => LockKind::Read,
            libc::F_WRLCK => LockKind::Write,
            _ => {
                return Ok(Lock {
                    kind: LockKind::Unlock,
                    ..l
                })
            }
        };
        let start = f.l_start.max(0) as u64;
        Ok(Lock {
            kind,
            start,
            end: if f.l_len <= 0 {
                Lock::TO_END
            } else {
                start.saturating_add(f.l_len as u64 - 1).min(Lock::TO_END)
            },
            // A host process or another guest: no pid of this guest.
            pid: 0,
        })
    }

    fn setlk(&self, _: Ctx, node: u64, fh: u64, owner: LockOwner, l: Lock) -> io::Result<()> {
        let (inode, h) = self.lock_handle(node, fh)?;
        let key = (node, owner);
        let mut map = lock(&self.locks.map);
        if let Some(fd) = map.get(&key) {
            apply(fd.as_fd(), owner, &l)?;
            if owner.flock && l.kind == LockKind::Unlock {
                map.remove(&key);
            }
        } else {
            if l.kind == LockKind::Unlock {
                return Ok(());
            }
            self.room(1)?;
            let fd = self.lock_fd(&inode, &h)?;
            apply(fd.as_fd(), owner, &l)?;
            map.insert(key, fd);
        }
        self.locks.count.store(map.len(), Ordering::Relaxed);
        Ok(())
    }

    fn unlock_owner(&self, node: u64, owner: LockOwner) {
        if self.locks.len() == 0 {
            return;
        }
        let mut map = lock(&self.locks.map);
        // Closing the description drops every lock it holds.
        map.remove(&(node, owner));
        self.locks.count.store(map.len(), Ordering::Relaxed);
    }
}
