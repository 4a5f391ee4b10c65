// SPDX-License-Identifier: Apache-2.0
//! The FUSE request dispatcher.
//!
//! [`Server::handle`] reads one request from a [`RequestReader`], checks it,
//! runs it against a [`FileSystem`] and writes the reply to a
//! [`ReplyWriter`]. Every request byte is untrusted:
//!
//! - the header's `len` must equal the bytes the transport holds, extensions
//!   (`total_extlen`) must fit inside, and each body must be exactly its
//!   structures plus its names — anything else gets `EINVAL`;
//! - names must be NUL-terminated, non-empty, at most 255 bytes, without `/`,
//!   and not `.` or `..` (LOOKUP accepts those two: `..` at the root is the
//!   root);
//! - a reply that does not fit the guest's buffer is replaced by an `EINVAL`
//!   error before any side effect, or by nothing when not even an out header
//!   fits;
//! - FORGET, BATCH_FORGET and INTERRUPT never get a reply;
//! - a SETLKW whose lock is held is not answered: [`Server::serve`] hands
//!   it back as a [`LockWait`] for its caller to keep and try again
//!   ([`Server::retry_lock`]) or end ([`Server::end_wait`]).
//!
//! The server owns the session: it negotiates INIT (protocol version, flags —
//! the intersection of what the guest offers and what the file system's
//! [`Capabilities`] allow —, `max_write`, `max_pages`), ends it on DESTROY,
//! and saves and validates it for live upgrade ([`Server::session`],
//! [`Server::restore_session`]).
//!
//! Malformed requests are logged through a rate limiter. Nothing here panics on
//! guest input.

use super::abi::{self, init_flags, opcode, Wire};
use super::file_ops;
use super::io::{ReplyWriter, RequestReader};
use super::lock_events::{LockEvent, LockEvents, Wake};
use super::locks::{self, LockWait};
use super::ops;
use super::session::{Session, SessionError, SessionState};
use super::wire::{need, reply_error, reply_ok, Body, Error, OpResult, Req};
use crate::filesystem::{Capabilities, FileSystem};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub use super::file_ops::MAX_WRITE;
pub use super::wire::{NAME_MAX, PATH_MAX};

/// `max_pages` announced in INIT.
pub const MAX_PAGES: u16 = 256;
/// Largest request body other than WRITE data (xattr values are at most 64 KiB).
pub const MAX_BODY: usize = 256 * 1024;

/// INIT flags this server knows how to speak (the file system's
/// [`Capabilities::init_flags`] are masked with these).
pub const SERVER_INIT_FLAGS: u64 = {
    use init_flags::*;
    ASYNC_READ
        | ATOMIC_O_TRUNC
        | EXPORT_SUPPORT
        | BIG_WRITES
        | PARALLEL_DIROPS
        | MAX_PAGES
        | INIT_EXT
        | DO_READDIRPLUS
        | READDIRPLUS_AUTO
        | WRITEBACK_CACHE
        | SETXATTR_EXT
        | DIRECT_IO_ALLOW_MMAP
        | CACHE_SYMLINKS
        | AUTO_INVAL_DATA
        | HANDLE_KILLPRIV_V2
        | MAP_ALIGNMENT
        | HAS_INODE_DAX
        | SUBMOUNTS
        | POSIX_ACL
        | DONT_MASK
        | SECURITY_CTX
        | POSIX_LOCKS
        | FLOCK_LOCKS
};

/// Most FUSE_INTERRUPTs remembered for waiting locks (the oldest is
/// forgotten first).
const MAX_INTERRUPTS: usize = 256;

/// What became of a request.
#[derive(Debug)]
pub enum Outcome {
    /// Answered with this many reply bytes (0: no reply, as for FORGET).
    Replied(usize),
    /// A SETLKW waiting for its lock, unanswered.
    Waiting(LockWait),
}

/// The FUSE server: `Send + Sync`, called concurrently by every queue worker.
#[derive(Debug)]
pub struct Server<F> {
    fs: F,
    caps: Capabilities,
    session: Session,
    /// Every request is answered with this errno (0: served normally).
    refuse: std::sync::atomic::AtomicI32,
    /// SETLKW requests waiting now (INTERRUPTs are kept only then).
    waits: AtomicUsize,
    /// `unique` of each FUSE_INTERRUPT received while locks wait.
    interrupted: Mutex<VecDeque<u64>>,
    /// What may let a waiting SETLKW through, for the workers that keep them.
    lock_events: LockEvents,
    /// Held around a request that may let go of locks while SETLKW wait,
    /// and by a worker around a round of trying its waiting ones again.
    lock_gate: Mutex<()>,
}

impl<F: FileSystem> Server<F> {
    /// A server for `fs`, with no session yet.
    pub fn new(fs: F) -> Server<F> {
        let mut caps = fs.capabilities();
        caps.init_flags &= SERVER_INIT_FLAGS;
        Server {
            fs,
            caps,
            session: Session::default(),
            refuse: std::sync::atomic::AtomicI32::new(0),
            waits: AtomicUsize::new(0),
            interrupted: Mutex::new(VecDeque::new()),
            lock_events: LockEvents::default(),
            lock_gate: Mutex::new(()),
        }
    }

    /// Answers every request from now on with `errno`, touching nothing
    /// (a crash-restart holder that gave up: the guest gets errors, never
    /// a hang). FORGET and the like still get no reply.
    pub fn refuse_all(&self, errno: i32) {
        self.refuse
            .store(errno, std::sync::atomic::Ordering::Relaxed);
    }

    /// The file system.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// INIT flags this server and file system can negotiate.
    pub fn supported_init_flags(&self) -> u64 {
        self.caps.init_flags
    }

    /// The negotiated session, if INIT was done (save it for live upgrade).
    pub fn session(&self) -> Option<SessionState> {
        self.session.get()
    }

    /// Resumes a session saved by an earlier process. Refuses a minor version
    /// this server does not speak and flags this configuration does not
    /// support; on error nothing changes.
    pub fn restore_session(&self, s: SessionState) -> Result<(), SessionError> {
        s.validate(self.caps.init_flags)?;
        self.session.start(s);
        self.fs.resume(s.flags);
        self.fs.session_changed(Some(s));
        Ok(())
    }

    /// Handles one request; returns the number of reply bytes written (0: no
    /// reply, as for FORGET). For a caller that cannot keep a request
    /// waiting: a SETLKW whose lock is held is answered EINTR at once.
    pub fn handle(&self, r: &mut dyn RequestReader, w: &mut dyn ReplyWriter) -> usize {
        match self.serve(r, w) {
            Outcome::Replied(n) => n,
            Outcome::Waiting(wait) => self.end_wait(wait, w, libc::EINTR),
        }
    }

    /// Tries a waiting SETLKW again: `Some(reply bytes)` once it is
    /// answered (granted, failed, or EINTR after a FUSE_INTERRUPT named
    /// it), None while the lock is still held.
    pub fn retry_lock(&self, wait: &LockWait, w: &mut dyn ReplyWriter) -> Option<usize> {
        if self.take_interrupt(wait.unique()) {
            return Some(self.end_wait(*wait, w, libc::EINTR));
        }
        let q = Req {
            fs: &self.fs,
            caps: &self.caps,
            session: &self.session,
            h: &wait.h,
            ext: &[],
        };
        let n = match locks::take(&q, &wait.lk, w) {
            Err(Error::Blocked(_)) => return None,
            Ok(n) => n,
            Err(e) => reply_error(w, wait.unique(), e.errno()),
        };
        self.waits.fetch_sub(1, Ordering::Relaxed);
        Some(n)
    }

    /// Ends a waiting SETLKW with EINTR if a FUSE_INTERRUPT named it
    /// (`Some(reply bytes)`), without trying its lock again.
    pub fn take_interrupted(&self, wait: &LockWait, w: &mut dyn ReplyWriter) -> Option<usize> {
        self.take_interrupt(wait.unique())
            .then(|| self.end_wait(*wait, w, libc::EINTR))
    }

    /// The eventfd signalled whenever something may let a waiting SETLKW
    /// through (see [`super::lock_events`]): poll it edge-triggered, never
    /// read it. None if it could not be made.
    pub fn lock_events_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.lock_events.fd()
    }

    /// Which waiting SETLKW to try again now, from what happened since
    /// event number `seen` (updated). A caller starts from
    /// [`Server::lock_events_last`].
    pub fn lock_events_since(&self, seen: &mut u64) -> Wake {
        self.lock_events.since(seen)
    }

    /// The number of the last lock event.
    pub fn lock_events_last(&self) -> u64 {
        self.lock_events.last()
    }

    /// Held by a worker while it tries its waiting SETLKW again: a request
    /// that lets go of a lock meanwhile waits for the round to end, so the
    /// round sees the lock held throughout or free throughout, and the
    /// oldest request it tries gets a lock freed before it began.
    pub fn lock_gate(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock_gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs what request `h`, answered with `result`, may have let go of,
    /// for the SETLKW requests that wait (nothing while none does).
    fn note_lock_events(&self, h: &abi::InHeader, result: &OpResult) {
        if self.waits.load(Ordering::Relaxed) == 0 {
            return;
        }
        let event = match h.opcode {
            opcode::SETLK | opcode::SETLKW if result.is_ok() => LockEvent::Released(h.nodeid),
            opcode::FLUSH | opcode::RELEASE | opcode::RELEASEDIR => LockEvent::Released(h.nodeid),
            opcode::INTERRUPT => LockEvent::Interrupted,
            opcode::INIT | opcode::DESTROY => LockEvent::All,
            _ => return,
        };
        self.lock_events.note(event);
    }

    /// Ends a waiting SETLKW with `errno` (EINTR when its ring stops).
    pub fn end_wait(&self, wait: LockWait, w: &mut dyn ReplyWriter, errno: i32) -> usize {
        self.waits.fetch_sub(1, Ordering::Relaxed);
        reply_error(w, wait.unique(), errno)
    }

    fn take_interrupt(&self, unique: u64) -> bool {
        let mut v = self.interrupted.lock().unwrap_or_else(|p| p.into_inner());
        match v.iter().position(|&u| u == unique) {
            Some(i) => {
                v.remove(i);
                true
            }
            None => false,
        }
    }

    /// FUSE_INTERRUPT: remembered for a waiting SETLKW (nothing else here
    /// waits, so with none waiting it is dropped).
    fn interrupt(&self, mut b: Body<'_>) -> OpResult {
        let i: abi::InterruptIn = b.take()?;
        if self.waits.load(Ordering::Relaxed) > 0 {
            let mut v = self.interrupted.lock().unwrap_or_else(|p| p.into_inner());
            if v.len() == MAX_INTERRUPTS {
                v.pop_front();
            }
            v.push_back(i.unique);
        }
        Ok(0)
    }

    /// Handles one request, or hands back a SETLKW that has to wait.
    pub fn serve(&self, r: &mut dyn RequestReader, w: &mut dyn ReplyWriter) -> Outcome {
        let mut hb = [0u8; abi::InHeader::SIZE];
        if r.read_exact(&mut hb).is_err() {
            guest_warn!(
                "FUSE request of {} bytes is shorter than its header",
                r.remaining()
            );
            return Outcome::Replied(reply_error(w, 0, libc::EINVAL));
        }
        let h = abi::InHeader::from_bytes(&hb).unwrap_or_default();
        let no_reply = matches!(
            h.opcode,
            opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT
        );
        let refuse = self.refuse.load(std::sync::atomic::Ordering::Relaxed);
        if refuse != 0 {
            return Outcome::Replied(if no_reply {
                0
            } else {
                reply_error(w, h.unique, refuse)
            });
        }
        let gate = (self.waits.load(Ordering::Relaxed) > 0 && may_release_locks(h.opcode))
            .then(|| self.lock_gate());
        let result = self.handle_checked(&h, r, w);
        self.note_lock_events(&h, &result);
        drop(gate);
        Outcome::Replied(match result {
            Ok(n) => n,
            Err(Error::Blocked(lk)) => {
                self.waits.fetch_add(1, Ordering::Relaxed);
                return Outcome::Waiting(LockWait { h, lk: *lk });
            }
            Err(e) => {
                if e.is_protocol() {
                    guest_warn!(
                        "bad FUSE request (opcode {}, unique {}): {}",
                        h.opcode,
                        h.unique,
                        e
                    );
                } else {
                    log::trace!("opcode {} unique {}: {}", h.opcode, h.unique, e);
                }
                if no_reply {
                    0
                } else {
                    reply_error(w, h.unique, e.errno())
                }
            }
        })
    }

    fn handle_checked(
        &self,
        h: &abi::InHeader,
        r: &mut dyn RequestReader,
        w: &mut dyn ReplyWriter,
    ) -> OpResult {
        let held = abi::InHeader::SIZE + r.remaining();
        if h.len as usize != held {
            guest_warn!(
                "FUSE header length {} but {} bytes received (opcode {})",
                h.len,
                held,
                h.opcode
            );
            return Err(Error::Errno(libc::EINVAL));
        }
        let ext = usize::from(h.total_extlen) * 8;
        let body_len = r.remaining().checked_sub(ext).ok_or(Error::Truncated)?;
        if h.opcode != opcode::INIT && self.session.get().is_none() {
            return Err(Error::NotInitialized);
        }
        let mut q = Req {
            fs: &self.fs,
            caps: &self.caps,
            session: &self.session,
            h,
            ext: &[],
        };
        if h.opcode == opcode::WRITE {
            return file_ops::write(&q, r, body_len, w);
        }
        if body_len + ext > MAX_BODY {
            return Err(Error::Errno(libc::E2BIG));
        }
        let mut body = vec![0u8; body_len + ext];
        r.read_exact(&mut body).map_err(|_| Error::Truncated)?;
        let (body, extensions) = body.split_at(body_len);
        q.ext = extensions;
        if let Some(payload) = min_reply(h.opcode) {
            need(w, payload)?;
        }
        self.dispatch(&q, Body { b: body }, w)
    }

    /// The table: one function per opcode.
    fn dispatch(&self, q: &Req<'_, F>, b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        match q.h.opcode {
            opcode::INIT => self.init(q.h, b, w),
            opcode::DESTROY => self.destroy(q.h, b, w),
            opcode::LOOKUP => ops::lookup(q, b, w),
            opcode::FORGET => ops::forget(q, b),
            opcode::BATCH_FORGET => ops::batch_forget(q, b),
            opcode::INTERRUPT => self.interrupt(b),
            opcode::GETATTR => ops::getattr(q, b, w),
            opcode::STATX => ops::statx(q, b, w),
            opcode::SETATTR => ops::setattr(q, b, w),
            opcode::READLINK => ops::readlink(q, b, w),
            opcode::SYMLINK => ops::symlink(q, b, w),
            opcode::MKNOD => ops::mknod(q, b, w),
            opcode::MKDIR => ops::mkdir(q, b, w),
            opcode::UNLINK => ops::unlink(q, b, w),
            opcode::RMDIR => ops::rmdir(q, b, w),
            opcode::RENAME | opcode::RENAME2 => ops::rename(q, b, w),
            opcode::LINK => ops::link(q, b, w),
            opcode::STATFS => ops::statfs(q, b, w),
            opcode::ACCESS => ops::access(q, b, w),
            opcode::SYNCFS => ops::syncfs(q, b, w),
            opcode::SETXATTR => ops::setxattr(q, b, w),
            opcode::GETXATTR => ops::getxattr(q, b, w),
            opcode::LISTXATTR => ops::listxattr(q, b, w),
            opcode::REMOVEXATTR => ops::removexattr(q, b, w),
            opcode::OPEN => file_ops::open(q, b, w),
            opcode::OPENDIR => file_ops::opendir(q, b, w),
            opcode::CREATE => file_ops::create(q, b, w),
            opcode::TMPFILE => file_ops::tmpfile(q, b, w),
            opcode::READ => file_ops::read(q, b, w),
            opcode::READDIR => file_ops::readdir(q, b, w, false),
            opcode::READDIRPLUS => file_ops::readdir(q, b, w, true),
            opcode::RELEASE => file_ops::release(q, b, w),
            opcode::RELEASEDIR => file_ops::releasedir(q, b, w),
            opcode::FLUSH => file_ops::flush(q, b, w),
            opcode::FSYNC | opcode::FSYNCDIR => file_ops::fsync(q, b, w),
            opcode::FALLOCATE => file_ops::fallocate(q, b, w),
            opcode::LSEEK => file_ops::lseek(q, b, w),
            opcode::COPY_FILE_RANGE => file_ops::copy_file_range(q, b, w),
            opcode::GETLK => locks::getlk(q, b, w),
            opcode::SETLK | opcode::SETLKW => locks::setlk(q, b, w),
            opcode::SETUPMAPPING => file_ops::setupmapping(q, b, w),
            opcode::REMOVEMAPPING => file_ops::removemapping(q, b, w),
            // BMAP, IOCTL, POLL, NOTIFY_REPLY and anything unknown.
            _ => Err(Error::Errno(libc::ENOSYS)),
        }
    }

    fn destroy(&self, h: &abi::InHeader, b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        b.end()?;
        self.session.end();
        self.fs.destroy();
        self.fs.session_changed(None);
        reply_ok(w, h.unique, &[])
    }

    fn init(&self, h: &abi::InHeader, b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        use abi::*;
        let i = parse_init(b)?;
        if i.major != KERNEL_VERSION || i.minor < MIN_KERNEL_MINOR_VERSION {
            log::warn!(
                "guest speaks FUSE {}.{}; this server needs 7.{}..",
                i.major,
                i.minor,
                MIN_KERNEL_MINOR_VERSION
            );
            return Err(Error::Errno(libc::EPROTO));
        }
        let mut kernel = u64::from(i.flags);
        if kernel & init_flags::INIT_EXT != 0 {
            kernel |= u64::from(i.flags2) << 32;
        }
        let mut flags = kernel & self.caps.init_flags;
        // POSIX ACLs need the guest to leave the umask to us and to send
        // setxattr flags: all three, or none.
        let acl = init_flags::POSIX_ACL | init_flags::DONT_MASK | init_flags::SETXATTR_EXT;
        if self.caps.init_flags & init_flags::POSIX_ACL != 0 && flags & acl != acl {
            flags &= !(init_flags::POSIX_ACL | init_flags::DONT_MASK);
        }
        let missing = self.caps.required_init_flags & !flags;
        if missing != 0 {
            log::error!(
                "the guest does not offer INIT flags {missing:#x} this daemon was told to \
                 require (--posix-acl=always, --security-label=always): INIT refused"
            );
            return Err(Error::Errno(libc::EPROTO));
        }
        let minor = i.minor.min(KERNEL_MINOR_VERSION);
        let out = InitOut {
            major: KERNEL_VERSION,
            minor,
            max_readahead: i.max_readahead,
            flags: flags as u32,
            max_background: 64,
            congestion_threshold: 48,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: if flags & init_flags::MAX_PAGES != 0 {
                MAX_PAGES
            } else {
                0
            },
            map_alignment: if flags & init_flags::MAP_ALIGNMENT != 0 {
                self.caps.map_alignment
            } else {
                0
            },
            flags2: (flags >> 32) as u32,
            max_stack_depth: 0,
            unused: [0; 6],
        };
        need(w, InitOut::SIZE)?;
        // A new INIT forgets everything of an earlier session.
        self.session.end();
        self.fs.init(flags);
        self.session.start(SessionState { minor, flags });
        self.fs.session_changed(Some(SessionState { minor, flags }));
        log::info!(
            "FUSE session started: protocol 7.{minor}, flags {flags:#x} (guest offered {kernel:#x})"
        );
        reply_ok(w, h.unique, &[&out.to_bytes()])
    }
}

/// Requests that may let go of a lock (see [`Server::lock_gate`]).
fn may_release_locks(op: u32) -> bool {
    matches!(
        op,
        opcode::SETLK | opcode::SETLKW | opcode::FLUSH | opcode::RELEASE | opcode::RELEASEDIR
    )
}

/// The INIT body: at least the 16-byte compat structure, at most the full one.
fn parse_init(b: Body<'_>) -> Result<abi::InitIn, Error> {
    use abi::{InitIn, COMPAT_INIT_IN_SIZE};
    if b.b.len() < COMPAT_INIT_IN_SIZE {
        return Err(Error::Truncated);
    }
    if b.b.len() > InitIn::SIZE {
        return Err(Error::Trailing(b.b.len() - InitIn::SIZE));
    }
    let mut raw = [0u8; InitIn::SIZE];
    raw[..b.b.len()].copy_from_slice(b.b);
    Ok(InitIn::from_bytes(&raw).unwrap_or_default())
}

/// Ops with side effects check their reply fits before acting.
fn min_reply(op: u32) -> Option<usize> {
    use abi::{AttrOut, EntryOut, InitOut, OpenOut};
    match op {
        opcode::LOOKUP | opcode::MKNOD | opcode::MKDIR | opcode::SYMLINK | opcode::LINK => {
            Some(EntryOut::SIZE)
        }
        opcode::CREATE | opcode::TMPFILE => Some(EntryOut::SIZE + OpenOut::SIZE),
        opcode::OPEN | opcode::OPENDIR => Some(OpenOut::SIZE),
        opcode::GETATTR | opcode::SETATTR => Some(AttrOut::SIZE),
        opcode::STATX => Some(abi::StatxOut::SIZE),
        opcode::INIT => Some(InitOut::SIZE),
        // No reply at all: these arrive without a writable descriptor (the
        // guest's hiprio queue) and must still take effect.
        opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT => None,
        _ => Some(0),
    }
}

const _: () = assert!(crate::filesystem::ROOT_ID == abi::ROOT_ID);
