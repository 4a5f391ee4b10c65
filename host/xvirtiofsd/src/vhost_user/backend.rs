// SPDX-License-Identifier: Apache-2.0
//! The back-end channel (VHOST_USER_PROTOCOL_F_BACKEND_REQ): the socket the
//! front-end hands over with SET_BACKEND_REQ_FD, on which this daemon asks
//! it to map file ranges into the DAX window (SHMEM_MAP with the file's
//! descriptor, SHMEM_UNMAP). One request at a time, each sent with
//! NEED_REPLY and its reply awaited with a deadline, so that a front-end
//! that stops answering costs the guest an I/O error, not a hung worker.
//!
//! A reply that comes after its deadline is read and dropped before the
//! next request's own: the front-end answers in order. How many are owed
//! goes to a live-upgrade successor. When nobody knows (after a crash
//! restart: the dead process may have sent a request after its last
//! checkpoint), the next request first sends a probe, a request no
//! front-end knows (QEMU answers it with a failure, echoing its number),
//! and reads up to the probe's answer: whatever was owed came before.
//!
//! While the front-end stops the queues (GET_VRING_BASE, a reset) it reads
//! this channel only afterwards, so no reply is awaited then: a device
//! stop never waits out the deadline behind a map. A handover gives a
//! waiting request a moment to be answered, none when the front-end is
//! itself waiting for this daemon.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{BackendReq, VhostUserMMap, VhostUserMMapFlags};
use vm_memory::ByteValued;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::header::{FLAG_NEED_REPLY, FLAG_REPLY, FLAG_VERSION, HDR_SIZE};
use crate::sys;

/// How long a map or unmap may wait for the front-end's reply.
const REPLY_DEADLINE: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(5)
};

/// How often a wait for a reply looks whether it should give up.
const STOP_CHECK: Duration = Duration::from_millis(20);

/// The probe's request number: VHOST_USER_BACKEND_NONE, which no
/// front-end serves. QEMU answers it (NEED_REPLY) with 1 and logs
/// "Received unexpected msg type: 0.".
const PROBE: u32 = 0;

/// `give_up_at` when no wait gives up early.
const NEVER: u64 = u64::MAX;

/// The channel, empty until the front-end sends its end.
#[derive(Debug)]
pub struct BackendChannel {
    stream: Mutex<Option<UnixStream>>,
    /// The stream's descriptor (-1: none yet), readable while a request
    /// holds the stream's lock waiting for the front-end.
    fd: AtomicI32,
    /// Replies still to come for requests that gave up waiting; changed
    /// only under the stream's lock.
    late: AtomicU32,
    /// How many replies are still to come is not known: the next request
    /// first sends a probe and reads up to its answer.
    unsynced: AtomicBool,
    /// That probe is sent (its answer still to come).
    probe_sent: AtomicBool,
    /// When a waiting request gives up ([`NEVER`], or nanoseconds since
    /// [`epoch`]); meanwhile no request is sent.
    give_up_at: AtomicU64,
}

impl Default for BackendChannel {
    fn default() -> Self {
        BackendChannel {
            stream: Mutex::new(None),
            fd: AtomicI32::new(-1),
            late: AtomicU32::new(0),
            unsynced: AtomicBool::new(false),
            probe_sent: AtomicBool::new(false),
            give_up_at: AtomicU64::new(NEVER),
        }
    }
}

/// The instant `give_up_at` counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(NEVER - 1)
}

/// The request number of a reply.
fn reply_code(reply: &[u8]) -> u32 {
    u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]])
}

impl BackendChannel {
    /// Installs the channel the front-end sent (SET_BACKEND_REQ_FD): a
    /// new one, on which nothing is owed.
    pub fn set(&self, stream: UnixStream) {
        let mut guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        self.fd.store(stream.as_raw_fd(), Ordering::Release);
        self.late.store(0, Ordering::Relaxed);
        self.unsynced.store(false, Ordering::Relaxed);
        self.probe_sent.store(false, Ordering::Relaxed);
        *guard = Some(stream);
    }

    /// The channel's descriptor, if the front-end sent one (a successor
    /// takes it over; borrowed for as long as this channel lives).
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.load(Ordering::Acquire)).filter(|&fd| fd >= 0)
    }

    /// The replies the front-end still owes for requests that gave up
    /// (None: not known). Exact only while no request is under way (after
    /// the queues stopped for a handover).
    pub fn owed_replies(&self) -> Option<u32> {
        (!self.unsynced.load(Ordering::Relaxed)).then(|| self.late.load(Ordering::Relaxed))
    }

    /// Takes over what a predecessor's channel was owed ([`owed_replies`]).
    ///
    /// [`owed_replies`]: BackendChannel::owed_replies
    pub fn restore_owed(&self, owed: Option<u32>) {
        let _guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        self.late.store(owed.unwrap_or(0), Ordering::Relaxed);
        self.unsynced.store(owed.is_none(), Ordering::Relaxed);
        self.probe_sent.store(false, Ordering::Relaxed);
    }

    /// Tells the channel that the front-end is stopping the queues (true)
    /// or done with that (false): meanwhile no request is sent, and one
    /// waiting gives up at once (its reply counts as late).
    pub fn set_front_end_stopping(&self, stopping: bool) {
        if stopping {
            self.give_up_after(Duration::ZERO);
        } else {
            self.give_up_at.store(NEVER, Ordering::Release);
        }
    }

    /// As `set_front_end_stopping(true)`, the waiting request giving up
    /// only after `grace` (a handover: the front-end may be about to
    /// answer). `set_front_end_stopping(false)` ends it.
    pub fn give_up_after(&self, grace: Duration) {
        let at = nanos(Instant::now() + grace);
        self.give_up_at.store(at, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.give_up_at.load(Ordering::Acquire) != NEVER
    }

    fn gives_up(&self, now: Instant) -> bool {
        let at = self.give_up_at.load(Ordering::Acquire);
        at != NEVER && nanos(now) >= at
    }

    /// Sends `req` with `body` (and `fd`) and waits for its reply: Ok when
    /// the front-end answered 0.
    fn request(&self, req: BackendReq, body: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = guard.as_ref() else {
            return Err(io::Error::other("the front-end gave no back-end channel"));
        };
        if self.stopping() {
            return Err(io::Error::other(
                "the front-end is stopping the device: no back-end request is sent",
            ));
        }
        if self.unsynced.load(Ordering::Relaxed) {
            self.sync(s)?;
        }
        let code = u32::from(req);
        send(s, code, body, fd)?;
        // Replies come in order: first those the earlier requests gave up on.
        while self.late.load(Ordering::Relaxed) > 0 {
            if reply_code(&self.await_reply(s)?) != PROBE {
                self.late.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let reply = loop {
            let r = self.await_reply(s)?;
            if reply_code(&r) != PROBE {
                break r;
            }
        };
        let word =
            |i: usize| u32::from_ne_bytes([reply[i], reply[i + 1], reply[i + 2], reply[i + 3]]);
        if word(0) != code || word(4) & !0x3 != FLAG_REPLY || word(8) != 8 {
            // Some count is off: which reply is whose is no longer known
            // (this request's outcome neither), until a probe finds out.
            self.unsynced.store(true, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "back-end channel: unexpected reply (request {}, flags {:#x}, size {})",
                    word(0),
                    word(4),
                    word(8)
                ),
            ));
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&reply[HDR_SIZE..]);
        match u64::from_ne_bytes(v) {
            0 => Ok(()),
            _ => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }

    /// Finds the channel's end when the replies owed are not known: sends
    /// the probe (once) and drops every reply up to its answer. Until it
    /// comes no request is sent, so nothing is owed after it.
    fn sync(&self, s: &UnixStream) -> io::Result<()> {
        if !self.probe_sent.load(Ordering::Relaxed) {
            send(s, PROBE, &[], None)?;
            self.probe_sent.store(true, Ordering::Relaxed);
        }
        loop {
            let mut reply = [0u8; HDR_SIZE + 8];
            self.read_by(s, &mut reply).map_err(|e| {
                io::Error::other(format!(
                    "back-end channel: the replies owed are not all in yet ({e})"
                ))
            })?;
            if reply_code(&reply) == PROBE {
                break;
            }
        }
        self.late.store(0, Ordering::Relaxed);
        self.probe_sent.store(false, Ordering::Relaxed);
        self.unsynced.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// One reply from `s`; when none comes in time it is counted as late,
    /// to be dropped before the next request's own.
    fn await_reply(&self, s: &UnixStream) -> io::Result<[u8; HDR_SIZE + 8]> {
        let mut reply = [0u8; HDR_SIZE + 8];
        self.read_by(s, &mut reply).inspect_err(|e| {
            if e.kind() == io::ErrorKind::TimedOut {
                self.late.fetch_add(1, Ordering::Relaxed);
            }
        })?;
        Ok(reply)
    }

    /// Reads exactly `buf` from `s`, giving up after [`REPLY_DEADLINE`],
    /// or before any byte came once the channel gives up waiting (the
    /// front-end stops the device, or a handover's grace has passed; what
    /// has come by then is still taken).
    fn read_by(&self, mut s: &UnixStream, buf: &mut [u8]) -> io::Result<()> {
        let deadline = Instant::now() + REPLY_DEADLINE;
        let mut got = 0;
        while got < buf.len() {
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the front-end did not answer on the back-end channel",
                ));
            }
            let giving_up = got == 0 && self.gives_up(now);
            let slice = if giving_up {
                0
            } else {
                left.min(STOP_CHECK).as_millis().max(1) as i32
            };
            if !sys::poll_readable(&[s.as_fd()], slice)?[0] {
                if giving_up {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the front-end is stopping the device and reads no back-end request",
                    ));
                }
                continue;
            }
            match s.read(&mut buf[got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Sends request `code` with `body` (and `fd`), NEED_REPLY set, in one
/// message.
fn send(s: &UnixStream, code: u32, body: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut msg = Vec::with_capacity(HDR_SIZE + body.len());
    msg.extend_from_slice(&code.to_ne_bytes());
    msg.extend_from_slice(&(FLAG_VERSION | FLAG_NEED_REPLY).to_ne_bytes());
    msg.extend_from_slice(&(body.len() as u32).to_ne_bytes());
    msg.extend_from_slice(body);
    let fds: Vec<i32> = fd.iter().map(AsRawFd::as_raw_fd).collect();
    let sent = s
        .send_with_fds(&[&msg[..]], &fds)
        .map_err(io::Error::from)?;
    if sent != msg.len() {
        return Err(io::Error::other("short write on the back-end channel"));
    }
    Ok(())
}

impl xvfs_fs::passthrough::Mapper for BackendChannel {
    fn map(
        &self,
        fd: BorrowedFd<'_>,
        file_offset: u64,
        window_offset: u64,
        len: u64,
        writable: bool,
    ) -> io::Result<()> {
        let m = VhostUserMMap {
            shmid: 0,
            fd_offset: file_offset,
            shm_offset: window_offset,
            len,
            flags: if writable {
                VhostUserMMapFlags::WRITABLE.bits()
            } else {
                VhostUserMMapFlags::default().bits()
            },
            ..Default::default()
        };
        self.request(BackendReq::SHMEM_MAP, m.as_slice(), Some(fd))
    }

    fn unmap(&self, window_offset: u64, len: u64) -> io::Result<()> {
        let m = VhostUserMMap {
            shmid: 0,
            shm_offset: window_offset,
            len,
            ..Default::default()
        };
        self.request(BackendReq::SHMEM_UNMAP, m.as_slice(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use xvfs_fs::passthrough::Mapper;

    /// The front-end's reads of one request (header and body).
    fn take_request(s: &mut UnixStream) -> u32 {
        let mut hdr = [0u8; HDR_SIZE];
        s.read_exact(&mut hdr).expect("header");
        let mut body = vec![0u8; u32::from_ne_bytes(hdr[8..12].try_into().unwrap()) as usize];
        s.read_exact(&mut body).expect("body");
        u32::from_ne_bytes(hdr[..4].try_into().unwrap())
    }

    fn answer(s: &mut UnixStream, req: u32, value: u64) {
        let mut m = req.to_ne_bytes().to_vec();
        m.extend_from_slice(&(FLAG_VERSION | FLAG_REPLY).to_ne_bytes());
        m.extend_from_slice(&8u32.to_ne_bytes());
        m.extend_from_slice(&value.to_ne_bytes());
        s.write_all(&m).expect("reply");
    }

    #[test]
    fn a_late_reply_is_not_taken_for_the_next_requests() {
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let ch = BackendChannel::default();
        ch.set(ours);
        let unmap = u32::from(BackendReq::SHMEM_UNMAP);
        // No answer in time: an error, and one reply still to come.
        let r = ch.unmap(0, 4096);
        assert_eq!(r.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
        assert_eq!(take_request(&mut theirs), unmap);
        // It comes late, a refusal; the next request is answered 0.
        answer(&mut theirs, unmap, 1);
        answer(&mut theirs, unmap, 0);
        ch.unmap(4096, 4096)
            .expect("the second reply is the second request's");
        assert_eq!(take_request(&mut theirs), unmap);
        // And the one after that waits for its own.
        let r = ch.unmap(0, 4096);
        assert_eq!(r.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
        answer(&mut theirs, unmap, 0);
        answer(&mut theirs, unmap, 1);
        assert_eq!(
            ch.unmap(0, 4096).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO)),
            "its own refusal, not the late success"
        );
        assert_eq!(take_request(&mut theirs), unmap);
        assert_eq!(ch.owed_replies(), Some(0));
    }

    /// After a crash restart nobody knows how many replies are owed: the
    /// first request finds out with a probe, and every reply before the
    /// probe's answer is dropped, whatever it says.
    #[test]
    fn a_probe_finds_the_end_of_replies_nobody_counted() {
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let ch = BackendChannel::default();
        ch.set(ours);
        ch.restore_owed(None);
        assert_eq!(ch.owed_replies(), None);
        let map = u32::from(BackendReq::SHMEM_MAP);
        let unmap = u32::from(BackendReq::SHMEM_UNMAP);
        // Two replies the dead process never read, one of them late.
        answer(&mut theirs, map, 0);
        let t = std::thread::spawn(move || {
            assert_eq!(take_request(&mut theirs), PROBE, "the probe first");
            answer(&mut theirs, unmap, 0);
            answer(&mut theirs, PROBE, 1);
            assert_eq!(take_request(&mut theirs), unmap);
            answer(&mut theirs, unmap, 1);
            theirs
        });
        assert_eq!(
            ch.unmap(0, 4096).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO)),
            "its own answer, not one of the stale successes"
        );
        let mut theirs = t.join().expect("front-end");
        assert_eq!(ch.owed_replies(), Some(0));
        // A reply for another request than the one sent: the count is off,
        // and the next request probes again.
        answer(&mut theirs, map, 0);
        let r = ch.unmap(0, 4096);
        assert_eq!(r.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
        assert_eq!(ch.owed_replies(), None);
    }

    /// A handover gives a waiting request a moment: an answer that comes
    /// then is taken; none, and it gives up then, not at the deadline.
    #[test]
    fn a_handover_gives_a_waiting_request_a_grace() {
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let ch = std::sync::Arc::new(BackendChannel::default());
        ch.set(ours);
        let unmap = u32::from(BackendReq::SHMEM_UNMAP);
        let c = std::sync::Arc::clone(&ch);
        let t = std::thread::spawn(move || c.unmap(0, 4096));
        assert_eq!(take_request(&mut theirs), unmap);
        ch.give_up_after(Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(30));
        answer(&mut theirs, unmap, 0);
        t.join()
            .expect("request")
            .expect("answered within the grace");
        ch.set_front_end_stopping(false);

        let c = std::sync::Arc::clone(&ch);
        let t = std::thread::spawn(move || c.unmap(0, 4096));
        assert_eq!(take_request(&mut theirs), unmap);
        let started = Instant::now();
        ch.give_up_after(Duration::from_millis(50));
        let r = t.join().expect("request");
        assert_eq!(r.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
        assert!(
            started.elapsed() < REPLY_DEADLINE,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(ch.owed_replies(), Some(1));
    }
}
