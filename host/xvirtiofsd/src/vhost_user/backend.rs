// SPDX-License-Identifier: Apache-2.0
//! The back-end channel (VHOST_USER_PROTOCOL_F_BACKEND_REQ): the socket the
//! front-end hands over with SET_BACKEND_REQ_FD, on which this daemon asks
//! it to map file ranges into the DAX window (SHMEM_MAP with the file's
//! descriptor, SHMEM_UNMAP). One request at a time, each sent with
//! NEED_REPLY and its reply awaited with a deadline, so that a front-end
//! that stops answering costs the guest an I/O error, not a hung worker.
//! A reply that comes after its deadline is read and dropped before the
//! next request's own: the front-end answers in order. While the front-end
//! stops the queues (GET_VRING_BASE, a reset) it reads this channel only
//! afterwards, so no reply is awaited then: a device stop never waits out
//! the deadline behind a map.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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

/// How often a wait for a reply looks whether the front-end began to stop
/// the queues.
const STOP_CHECK: Duration = Duration::from_millis(20);

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
    /// The front-end is stopping the queues and reads nothing here.
    stopping: AtomicBool,
}

impl Default for BackendChannel {
    fn default() -> Self {
        BackendChannel {
            stream: Mutex::new(None),
            fd: AtomicI32::new(-1),
            late: AtomicU32::new(0),
            stopping: AtomicBool::new(false),
        }
    }
}

impl BackendChannel {
    /// Installs the channel the front-end sent (SET_BACKEND_REQ_FD).
    pub fn set(&self, stream: UnixStream) {
        let mut guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        self.fd.store(stream.as_raw_fd(), Ordering::Release);
        self.late.store(0, Ordering::Relaxed);
        *guard = Some(stream);
    }

    /// The channel's descriptor, if the front-end sent one (a successor
    /// takes it over; borrowed for as long as this channel lives).
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.load(Ordering::Acquire)).filter(|&fd| fd >= 0)
    }

    /// Tells the channel that the front-end is stopping the queues (true)
    /// or done with that (false): meanwhile no request is sent, and one
    /// waiting gives up at once (its reply counts as late).
    pub fn set_front_end_stopping(&self, stopping: bool) {
        self.stopping.store(stopping, Ordering::Release);
    }

    /// Reads and drops what is waiting on the channel (a reply to a
    /// request whose sender died), giving the front-end a moment to answer
    /// one still in progress. Returns the bytes dropped.
    pub fn drain(&self) -> io::Result<usize> {
        let guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut s) = guard.as_ref() else {
            return Ok(0);
        };
        self.late.store(0, Ordering::Relaxed);
        let mut dropped = 0;
        let mut buf = [0u8; 256];
        while sys::poll_readable(&[s.as_fd()], 100)?[0] {
            match s.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => dropped += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(dropped)
    }

    /// Sends `req` with `body` (and `fd`) and waits for its reply: Ok when
    /// the front-end answered 0.
    fn request(&self, req: BackendReq, body: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = guard.as_ref() else {
            return Err(io::Error::other("the front-end gave no back-end channel"));
        };
        if self.stopping.load(Ordering::Acquire) {
            return Err(stopping_error());
        }
        let code = u32::from(req);
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
        // Replies come in order: first those the earlier requests gave up on.
        while self.late.load(Ordering::Relaxed) > 0 {
            self.await_reply(s)?;
            self.late.fetch_sub(1, Ordering::Relaxed);
        }
        let reply = self.await_reply(s)?;
        let word =
            |i: usize| u32::from_ne_bytes([reply[i], reply[i + 1], reply[i + 2], reply[i + 3]]);
        if word(0) != code || word(4) & !0x3 != FLAG_REPLY || word(8) != 8 {
            return Err(io::Error::other(format!(
                "back-end channel: unexpected reply (request {}, flags {:#x}, size {})",
                word(0),
                word(4),
                word(8)
            )));
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&reply[HDR_SIZE..]);
        match u64::from_ne_bytes(v) {
            0 => Ok(()),
            _ => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }

    /// One reply from `s`; when none comes in time it is counted as late,
    /// to be dropped before the next request's own.
    fn await_reply(&self, s: &UnixStream) -> io::Result<[u8; HDR_SIZE + 8]> {
        let mut reply = [0u8; HDR_SIZE + 8];
        read_by(s, &mut reply, &self.stopping).inspect_err(|e| {
            if e.kind() == io::ErrorKind::TimedOut {
                self.late.fetch_add(1, Ordering::Relaxed);
            }
        })?;
        Ok(reply)
    }
}

fn stopping_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the front-end is stopping the device and reads no back-end request",
    )
}

/// Reads exactly `buf` from `s`, giving up after [`REPLY_DEADLINE`], or
/// before any byte came once `stopping` is set.
fn read_by(mut s: &UnixStream, buf: &mut [u8], stopping: &AtomicBool) -> io::Result<()> {
    let deadline = std::time::Instant::now() + REPLY_DEADLINE;
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the front-end did not answer on the back-end channel",
            ));
        }
        if got == 0 && stopping.load(Ordering::Acquire) {
            return Err(stopping_error());
        }
        let slice = left.min(STOP_CHECK).as_millis().max(1) as i32;
        if !sys::poll_readable(&[s.as_fd()], slice)?[0] {
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
    }
}
