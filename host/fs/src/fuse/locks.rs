// SPDX-License-Identifier: Apache-2.0
//! POSIX record locks and flock (`-o posix_lock`, `-o flock`): GETLK, SETLK
//! and SETLKW, served by the file system on the host, where other guests
//! and host processes see them.
//!
//! SETLKW never blocks a queue worker: when another owner holds the lock,
//! the request is not answered but handed back as a [`LockWait`]; the
//! worker keeps its descriptor chain, serves other requests, and asks again
//! ([`Server::retry_lock`](super::server::Server::retry_lock)) until the
//! lock is granted, a FUSE_INTERRUPT names the request, or the ring stops
//! (both answered EINTR, as a signal ends a wait on the host). It asks
//! again at once when this server lets go of a lock on the same node, and
//! on its own, ever less often, for locks held elsewhere
//! ([`super::lock_events`]).

use super::abi::{self, flags, init_flags, opcode, FileLock, LkIn, LkOut, Wire};
use super::io::ReplyWriter;
use super::wire::{reply_ok, Body, Error, OpResult, Req};
use crate::filesystem::{FileSystem, Lock, LockKind, LockOwner};

/// A SETLKW that has to wait: what is needed to ask again.
#[derive(Debug, Clone, Copy)]
pub struct LockWait {
    pub(crate) h: abi::InHeader,
    pub(crate) lk: LkIn,
}

impl LockWait {
    /// The request's `unique`.
    pub fn unique(&self) -> u64 {
        self.h.unique
    }

    /// The node whose lock it waits for.
    pub fn node(&self) -> u64 {
        self.h.nodeid
    }
}

/// The guest's `fuse_file_lock`, checked: a known type, `start <= end`,
/// both within `OFFSET_MAX`. A flock lock is the whole file.
fn lock_of(l: &FileLock, flock: bool) -> Result<Lock, Error> {
    let kind = match l.typ as i32 {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return Err(Error::Errno(libc::EINVAL)),
    };
    if flock {
        return Ok(Lock {
            kind,
            start: 0,
            end: Lock::TO_END,
            pid: l.pid,
        });
    }
    if l.start > Lock::TO_END || l.end > Lock::TO_END || l.end < l.start {
        return Err(Error::Errno(libc::EINVAL));
    }
    Ok(Lock {
        kind,
        start: l.start,
        end: l.end,
        pid: l.pid,
    })
}

fn file_lock(l: &Lock) -> FileLock {
    let typ = match l.kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    };
    FileLock {
        start: l.start,
        end: l.end,
        typ: typ as u32,
        pid: l.pid,
    }
}

/// The lock kinds a request may use: those negotiated (ENOSYS otherwise,
/// which also tells the guest kernel to keep such locks local).
fn negotiated<F: FileSystem>(q: &Req<'_, F>, flock: bool) -> Result<(), Error> {
    let flag = if flock {
        init_flags::FLOCK_LOCKS
    } else {
        init_flags::POSIX_LOCKS
    };
    if q.session.has(flag) {
        Ok(())
    } else {
        Err(Error::Errno(libc::ENOSYS))
    }
}

pub(crate) fn getlk<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let a: LkIn = b.only()?;
    if a.lk_flags & flags::LK_FLOCK != 0 {
        // flock(2) has no "test" operation.
        return Err(Error::Errno(libc::EINVAL));
    }
    negotiated(q, false)?;
    let lock = lock_of(&a.lk, false)?;
    let found = q.fs.getlk(q.ctx(), q.h.nodeid, a.fh, a.owner, lock)?;
    let out = LkOut {
        lk: file_lock(&found),
    };
    reply_ok(w, q.h.unique, &[&out.to_bytes()])
}

pub(crate) fn setlk<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let a: LkIn = b.only()?;
    take(q, &a, w)
}

/// SETLK, SETLKW and each new try of a waiting SETLKW: a SETLKW that finds
/// the lock held ends in [`Error::Blocked`], with nothing written.
pub(crate) fn take<F: FileSystem>(q: &Req<'_, F>, a: &LkIn, w: &mut dyn ReplyWriter) -> OpResult {
    let flock = a.lk_flags & flags::LK_FLOCK != 0;
    negotiated(q, flock)?;
    let lock = lock_of(&a.lk, flock)?;
    let owner = LockOwner {
        owner: a.owner,
        flock,
    };
    match q.fs.setlk(q.ctx(), q.h.nodeid, a.fh, owner, lock) {
        Ok(()) => q.reply_empty(w),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && q.h.opcode == opcode::SETLKW => {
            Err(Error::Blocked(Box::new(*a)))
        }
        Err(e) => Err(e.into()),
    }
}

/// FLUSH: the guest closed a descriptor of the file; POSIX says every
/// record lock its owner holds on the file goes with it.
pub(crate) fn flushed<F: FileSystem>(q: &Req<'_, F>, lock_owner: u64) {
    if q.session.has(init_flags::POSIX_LOCKS) {
        q.fs.unlock_owner(
            q.h.nodeid,
            LockOwner {
                owner: lock_owner,
                flock: false,
            },
        );
    }
}

/// RELEASE: the guest's last reference to an open file it flocked.
pub(crate) fn released<F: FileSystem>(q: &Req<'_, F>, release_flags: u32, lock_owner: u64) {
    if release_flags & flags::RELEASE_FLOCK_UNLOCK != 0 && q.session.has(init_flags::FLOCK_LOCKS) {
        q.fs.unlock_owner(
            q.h.nodeid,
            LockOwner {
                owner: lock_owner,
                flock: true,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fl(typ: i32, start: u64, end: u64) -> FileLock {
        FileLock {
            start,
            end,
            typ: typ as u32,
            pid: 7,
        }
    }

    #[test]
    fn locks_are_checked_and_round_trip() {
        let l = lock_of(&fl(libc::F_WRLCK, 10, 19), false).unwrap();
        assert_eq!(
            (l.kind, l.start, l.end, l.pid),
            (LockKind::Write, 10, 19, 7)
        );
        assert_eq!(file_lock(&l), fl(libc::F_WRLCK, 10, 19));
        let whole = lock_of(&fl(libc::F_RDLCK, 5, 6), true).unwrap();
        assert_eq!(
            (whole.start, whole.end),
            (0, Lock::TO_END),
            "flock: whole file"
        );
        for bad in [
            fl(9, 0, 1),
            fl(libc::F_RDLCK, 5, 4),
            fl(libc::F_RDLCK, 0, u64::MAX),
            fl(libc::F_RDLCK, u64::MAX, u64::MAX),
        ] {
            assert!(lock_of(&bad, false).is_err(), "{bad:?}");
        }
        assert!(lock_of(&fl(libc::F_UNLCK, 0, Lock::TO_END), false).is_ok());
    }
}
