// SPDX-License-Identifier: Apache-2.0
//! POSIX record locks and flock (`-o posix_lock`, `-o flock`): held on the
//! host, conflicting between guest owners and with host processes, released
//! as the guest kernel asks, and SETLKW waiting without a reply.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use common::*;
use xvfs_fs::abi::{self, flags, init_flags, opcode, Wire};
use xvfs_fs::io::{SliceReader, VecWriter};
use xvfs_fs::server::Outcome;

const ROOT: u64 = abi::ROOT_ID;
const TO_END: u64 = i64::MAX as u64;

fn lk(fh: u64, owner: u64, typ: i32, start: u64, end: u64, flock: bool) -> Vec<u8> {
    abi::LkIn {
        fh,
        owner,
        lk: abi::FileLock {
            start,
            end,
            typ: typ as u32,
            pid: 0,
        },
        lk_flags: if flock { flags::LK_FLOCK } else { 0 },
        padding: 0,
    }
    .to_bytes()
    .to_vec()
}

fn locking() -> Harness {
    Harness::with(|c| {
        c.posix_lock = true;
        c.flock = true;
    })
}

/// A file `name` in the share, created and opened by the guest: (node, fh).
fn file(h: &Harness, name: &str) -> (u64, u64) {
    let (e, fh) = h.create_ok(ROOT, name);
    (e.nodeid, fh)
}

/// A descriptor of the host's own (another process, as far as the locks
/// held for the guest are concerned: a description of its own).
fn host_fd(h: &Harness, name: &str) -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(h.dir.join(name))
        .unwrap()
        .into()
}

/// The lock the host sees over `start..start+len` (F_OFD_GETLK), as its type.
fn host_sees(fd: &OwnedFd, start: i64, len: i64) -> i32 {
    // SAFETY: plain data; all zeroes is valid.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_type = libc::F_WRLCK as i16;
    f.l_whence = libc::SEEK_SET as i16;
    f.l_start = start;
    f.l_len = len;
    // SAFETY: valid descriptor and struct.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut f) };
    assert_eq!(r, 0);
    i32::from(f.l_type)
}

fn host_flock(fd: &OwnedFd, op: i32) -> i32 {
    // SAFETY: valid descriptor.
    let r = unsafe { libc::flock(fd.as_raw_fd(), op | libc::LOCK_NB) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn flush(h: &Harness, node: u64, fh: u64, owner: u64) -> Reply {
    let f = abi::FlushIn {
        fh,
        unused: 0,
        padding: 0,
        lock_owner: owner,
    };
    h.req(opcode::FLUSH, node, &f.to_bytes())
}

#[test]
fn posix_locks_conflict_between_owners_and_the_host_sees_them() {
    let h = locking();
    let out: abi::InitOut = h.init(7, 41, u32::MAX, u32::MAX).parse();
    let both = init_flags::POSIX_LOCKS | init_flags::FLOCK_LOCKS;
    assert_eq!(u64::from(out.flags) & both, both);
    let (node, fh) = file(&h, "f");
    let (_, fh2) = file(&h, "f");
    let (a, b) = (0xa, 0xb);
    assert_eq!(
        h.req(opcode::SETLK, node, &lk(fh, a, libc::F_WRLCK, 0, 99, false))
            .error,
        0
    );
    // Another owner (through another open file, or the same one) conflicts.
    for f in [fh, fh2] {
        let r = h.req(opcode::SETLK, node, &lk(f, b, libc::F_WRLCK, 50, 60, false));
        assert_eq!(r.error, -libc::EAGAIN);
        let r = h.req(opcode::SETLK, node, &lk(f, b, libc::F_RDLCK, 50, 60, false));
        assert_eq!(
            r.error,
            -libc::EAGAIN,
            "a read lock conflicts with a write lock"
        );
    }
    // Beyond the range it does not.
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh2, b, libc::F_WRLCK, 100, TO_END, false)
        )
        .error,
        0
    );
    // GETLK: B sees A's lock; A does not see its own.
    let got: abi::LkOut = h
        .req(
            opcode::GETLK,
            node,
            &lk(fh2, b, libc::F_WRLCK, 50, 60, false),
        )
        .parse();
    assert_eq!(
        (got.lk.typ as i32, got.lk.start, got.lk.end),
        (libc::F_WRLCK, 0, 99)
    );
    let got: abi::LkOut = h
        .req(opcode::GETLK, node, &lk(fh, a, libc::F_WRLCK, 0, 99, false))
        .parse();
    assert_eq!(got.lk.typ as i32, libc::F_UNLCK);
    // A host process sees both, and B's reaches the end of the file.
    let host = host_fd(&h, "f");
    assert_eq!(host_sees(&host, 10, 1), libc::F_WRLCK);
    assert_eq!(host_sees(&host, 1 << 40, 1), libc::F_WRLCK);
    assert_eq!(h.fs().lock_count(), 2);
    // A closes a descriptor of the file: all its record locks go.
    assert_eq!(flush(&h, node, fh2, a).error, 0);
    assert_eq!(host_sees(&host, 10, 1), libc::F_UNLCK);
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, b, libc::F_WRLCK, 50, 60, false)
        )
        .error,
        0
    );
    // B unlocks part of its range: the rest stays.
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, b, libc::F_UNLCK, 0, 1 << 41, false)
        )
        .error,
        0
    );
    assert_eq!(host_sees(&host, 1 << 40, 1), libc::F_UNLCK);
    assert_eq!(host_sees(&host, 1 << 42, 1), libc::F_WRLCK);
    // A host lock is seen by the guest.
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, b, libc::F_UNLCK, 0, TO_END, false)
        )
        .error,
        0
    );
    assert_eq!(host_sees(&host, 0, 0), libc::F_UNLCK);
    // SAFETY: plain data; all zeroes is valid.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_type = libc::F_RDLCK as i16;
    f.l_start = 5;
    f.l_len = 5;
    // SAFETY: valid descriptor and struct.
    let r = unsafe { libc::fcntl(host.as_raw_fd(), libc::F_OFD_SETLK, &mut f) };
    assert_eq!(r, 0);
    let r = h.req(opcode::SETLK, node, &lk(fh, a, libc::F_WRLCK, 0, 7, false));
    assert_eq!(r.error, -libc::EAGAIN);
    let got: abi::LkOut = h
        .req(opcode::GETLK, node, &lk(fh, a, libc::F_WRLCK, 0, 7, false))
        .parse();
    assert_eq!(
        (got.lk.typ as i32, got.lk.start, got.lk.end, got.lk.pid),
        (libc::F_RDLCK, 5, 9, 0)
    );
    assert_eq!(
        h.req(opcode::SETLK, node, &lk(fh, a, libc::F_RDLCK, 0, 7, false))
            .error,
        0
    );
}

/// SETLKW through [`Server::serve`], as a queue worker calls it.
fn setlkw(h: &Harness, node: u64, body: &[u8]) -> (Outcome, Vec<u8>, u64) {
    let hd = h.header(opcode::SETLKW, node, body.len());
    let req = cat(&[&hd.to_bytes(), body]);
    let mut w = VecWriter::new(ROOM);
    let o = h.srv.serve(&mut SliceReader::new(&req), &mut w);
    (o, w.into_inner(), hd.unique)
}

fn error_of(out: &[u8]) -> i32 {
    abi::OutHeader::from_bytes(out).unwrap().error
}

#[test]
fn setlkw_waits_unanswered_until_granted_or_interrupted() {
    let h = locking();
    let (node, fh) = file(&h, "w");
    let (a, b) = (1, 2);
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, a, libc::F_WRLCK, 0, TO_END, false)
        )
        .error,
        0
    );
    // Free: granted at once.
    let (o, out, _) = setlkw(&h, node, &lk(fh, a, libc::F_WRLCK, 0, 9, false));
    assert!(matches!(o, Outcome::Replied(n) if n == out.len()));
    assert_eq!(error_of(&out), 0);
    // Held: no reply; asked again, still held.
    let (o, out, unique) = setlkw(&h, node, &lk(fh, b, libc::F_WRLCK, 0, 9, false));
    let Outcome::Waiting(wait) = o else {
        panic!("SETLKW of a held lock answered: {o:?}")
    };
    assert!(out.is_empty(), "nothing written while it waits");
    assert_eq!(wait.unique(), unique);
    let mut w = VecWriter::new(ROOM);
    assert_eq!(h.srv.retry_lock(&wait, &mut w), None);
    // Released: granted on the next try, with its own unique.
    assert_eq!(flush(&h, node, fh, a).error, 0);
    let mut w = VecWriter::new(ROOM);
    let n = h.srv.retry_lock(&wait, &mut w).expect("granted");
    let out = w.into_inner();
    assert_eq!(n, out.len());
    let oh = abi::OutHeader::from_bytes(&out).unwrap();
    assert_eq!((oh.error, oh.unique), (0, unique));
    // Held again by B: A waits, a FUSE_INTERRUPT naming it ends the wait.
    let (o, _, unique) = setlkw(&h, node, &lk(fh, a, libc::F_RDLCK, 5, 5, false));
    let Outcome::Waiting(wait) = o else {
        panic!("not waiting: {o:?}")
    };
    let other = abi::InterruptIn {
        unique: unique + 1000,
    };
    assert!(h
        .req_room(opcode::INTERRUPT, 0, &other.to_bytes(), ROOM)
        .is_none());
    let mut w = VecWriter::new(ROOM);
    assert_eq!(
        h.srv.retry_lock(&wait, &mut w),
        None,
        "another request's interrupt"
    );
    let i = abi::InterruptIn { unique };
    assert!(h
        .req_room(opcode::INTERRUPT, 0, &i.to_bytes(), ROOM)
        .is_none());
    let mut w = VecWriter::new(ROOM);
    assert!(h.srv.retry_lock(&wait, &mut w).is_some());
    assert_eq!(error_of(&w.into_inner()), -libc::EINTR);
    // A caller that cannot keep a request gets EINTR at once; so does one
    // whose ring stops.
    let r = h.req(opcode::SETLKW, node, &lk(fh, a, libc::F_WRLCK, 0, 0, false));
    assert_eq!(r.error, -libc::EINTR);
    let (o, _, _) = setlkw(&h, node, &lk(fh, a, libc::F_WRLCK, 0, 0, false));
    let Outcome::Waiting(wait) = o else {
        panic!("not waiting: {o:?}")
    };
    let mut w = VecWriter::new(ROOM);
    h.srv.end_wait(wait, &mut w, libc::EINTR);
    assert_eq!(error_of(&w.into_inner()), -libc::EINTR);
    // An error other than a conflict is the answer of the try.
    let (o, _, _) = setlkw(&h, node, &lk(fh, a, libc::F_WRLCK, 0, 0, false));
    let Outcome::Waiting(wait) = o else {
        panic!("not waiting: {o:?}")
    };
    assert_eq!(h.release(node, fh).error, 0);
    let mut w = VecWriter::new(ROOM);
    assert!(h.srv.retry_lock(&wait, &mut w).is_some());
    assert_eq!(
        error_of(&w.into_inner()),
        -libc::EBADF,
        "its file was closed"
    );
}

#[test]
fn flock_is_whole_file_and_goes_with_the_guests_open_file() {
    let h = locking();
    let (node, fh) = file(&h, "fl");
    let (_, fh2) = file(&h, "fl");
    let host = host_fd(&h, "fl");
    let (x, y) = (0x1000, 0x2000);
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, x, libc::F_WRLCK, 0, TO_END, true)
        )
        .error,
        0
    );
    assert_eq!(host_flock(&host, libc::LOCK_SH), libc::EWOULDBLOCK);
    let r = h.req(
        opcode::SETLK,
        node,
        &lk(fh2, y, libc::F_RDLCK, 0, TO_END, true),
    );
    assert_eq!(r.error, -libc::EAGAIN);
    // flock and POSIX locks are apart, as on the host.
    assert_eq!(
        h.req(opcode::SETLK, node, &lk(fh2, y, libc::F_WRLCK, 0, 9, false))
            .error,
        0
    );
    // GETLK has no flock form.
    let r = h.req(
        opcode::GETLK,
        node,
        &lk(fh, x, libc::F_WRLCK, 0, TO_END, true),
    );
    assert_eq!(r.error, -libc::EINVAL);
    // Downgrade, then the open file's last close drops it.
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, x, libc::F_RDLCK, 0, TO_END, true)
        )
        .error,
        0
    );
    assert_eq!(host_flock(&host, libc::LOCK_SH), 0);
    assert_eq!(host_flock(&host, libc::LOCK_UN), 0);
    assert_eq!(host_flock(&host, libc::LOCK_EX), libc::EWOULDBLOCK);
    let rel = abi::ReleaseIn {
        fh,
        flags: 0,
        release_flags: flags::RELEASE_FLOCK_UNLOCK,
        lock_owner: x,
    };
    assert_eq!(h.req(opcode::RELEASE, node, &rel.to_bytes()).error, 0);
    assert_eq!(host_flock(&host, libc::LOCK_EX), 0);
    assert_eq!(host_flock(&host, libc::LOCK_UN), 0);
    // LOCK_UN of a flock: nothing is left held for it.
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh2, y, libc::F_WRLCK, 0, TO_END, true)
        )
        .error,
        0
    );
    assert_eq!(h.fs().lock_count(), 2);
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh2, y, libc::F_UNLCK, 0, TO_END, true)
        )
        .error,
        0
    );
    assert_eq!(h.fs().lock_count(), 1, "the POSIX lock of y stays");
}

#[test]
fn locks_need_their_option_and_every_field_is_checked() {
    // Without the options: not offered, and refused (the guest then keeps
    // its locks local).
    let h = Harness::uninit(|_| {});
    let out: abi::InitOut = h.init(7, 41, u32::MAX, u32::MAX).parse();
    assert_eq!(
        u64::from(out.flags) & (init_flags::POSIX_LOCKS | init_flags::FLOCK_LOCKS),
        0
    );
    let (node, fh) = file(&h, "n");
    for (op, fl) in [
        (opcode::SETLK, false),
        (opcode::GETLK, false),
        (opcode::SETLKW, true),
    ] {
        let r = h.req(op, node, &lk(fh, 1, libc::F_WRLCK, 0, 0, fl));
        assert_eq!(r.error, -libc::ENOSYS, "opcode {op}");
    }
    // posix_lock alone: flock is still refused.
    let h = Harness::with(|c| c.posix_lock = true);
    let (node, fh) = file(&h, "n");
    let (other, _) = file(&h, "m");
    let r = h.req(opcode::SETLK, node, &lk(fh, 1, libc::F_WRLCK, 0, 0, true));
    assert_eq!(r.error, -libc::ENOSYS);
    for (body, errno) in [
        (lk(fh, 1, libc::F_WRLCK, 9, 8, false), libc::EINVAL),
        (lk(fh, 1, 7, 0, 0, false), libc::EINVAL),
        (lk(fh, 1, libc::F_WRLCK, 0, u64::MAX, false), libc::EINVAL),
        (lk(fh + 100, 1, libc::F_WRLCK, 0, 0, false), libc::EBADF),
    ] {
        assert_eq!(h.req(opcode::SETLK, node, &body).error, -errno, "{body:?}");
    }
    // A handle of another file.
    let r = h.req(opcode::SETLK, other, &lk(fh, 1, libc::F_WRLCK, 0, 0, false));
    assert_eq!(r.error, -libc::EBADF);
    // Short and long bodies.
    let body = lk(fh, 1, libc::F_WRLCK, 0, 0, false);
    assert_eq!(h.req(opcode::SETLK, node, &body[..40]).error, -libc::EINVAL);
    let long = cat(&[&body, &[0; 8]]);
    assert_eq!(h.req(opcode::SETLK, node, &long).error, -libc::EINVAL);
    assert_eq!(h.fs().lock_count(), 0);
}

#[test]
fn locks_survive_a_live_upgrade_snapshot() {
    let h = locking();
    let (node, fh) = file(&h, "u");
    assert_eq!(
        h.req(opcode::SETLK, node, &lk(fh, 5, libc::F_WRLCK, 0, 9, false))
            .error,
        0
    );
    assert_eq!(
        h.req(
            opcode::SETLK,
            node,
            &lk(fh, 6, libc::F_WRLCK, 0, TO_END, true)
        )
        .error,
        0
    );
    let snap = h.fs().snapshot();
    assert_eq!(snap.state.locks.len(), 2);
    let fds: Vec<OwnedFd> = snap
        .fds
        .iter()
        .map(|&fd| {
            // SAFETY: open while `h` lives.
            unsafe { BorrowedFd::borrow_raw(fd) }
                .try_clone_to_owned()
                .unwrap()
        })
        .collect();
    let mut cfg = config_for(&h.dir.path);
    cfg.posix_lock = true;
    cfg.flock = true;
    let dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    let fs = xvfs_fs::PassthroughFs::restore(cfg.clone(), dir, &snap.state, fds).unwrap();
    assert_eq!(fs.lock_count(), 2);
    // A state naming a lock twice, or a node it does not have, is refused.
    let mut twice = snap.state.clone();
    twice.locks.push(twice.locks[0].clone());
    let fds = |n: usize| -> Vec<OwnedFd> {
        (0..n)
            .map(|i| {
                // SAFETY: open while `h` lives.
                unsafe { BorrowedFd::borrow_raw(snap.fds[i.min(snap.fds.len() - 1)]) }
                    .try_clone_to_owned()
                    .unwrap()
            })
            .collect()
    };
    let mut t = twice.clone();
    t.locks.last_mut().unwrap().fd_index = snap.fds.len() as u32;
    let dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    let e = xvfs_fs::PassthroughFs::restore(cfg.clone(), dir, &t, fds(snap.fds.len() + 1));
    assert!(e.is_err_and(|e| e.to_string().contains("saved twice")));
    let mut t = snap.state.clone();
    t.locks[0].inode = 999;
    let dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    let e = xvfs_fs::PassthroughFs::restore(cfg, dir, &t, fds(snap.fds.len()));
    assert!(e.is_err_and(|e| e.to_string().contains("unknown node")));
    // The predecessor's tables go (as with its process); the locks stay
    // with the successor's descriptions.
    assert_eq!(h.req(opcode::DESTROY, 0, &[]).error, 0);
    let host = host_fd(&h, "u");
    assert_eq!(host_sees(&host, 0, 1), libc::F_WRLCK);
    assert_eq!(host_flock(&host, libc::LOCK_SH), libc::EWOULDBLOCK);
}
