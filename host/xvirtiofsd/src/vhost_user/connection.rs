// SPDX-License-Identifier: Apache-2.0
//! The connection to the front-end (QEMU): message framing over its Unix
//! socket, with any file descriptors attached to the header. Each message is
//! read as a 12-byte header (request, flags, payload size) plus payload; the
//! [`Device`] handles it and the reply, if any, goes back here.
//!
//! Between two messages the loop also watches the handover interrupt and the
//! device's worker supervisor: a queue worker that ends on a fault is reaped
//! here, on the control thread.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use log::{debug, warn};
use vhost::vhost_user::message::{
    FrontendReq, VhostUserU64, MAX_ATTACHED_FD_ENTRIES, MAX_MSG_SIZE,
};
use vm_memory::ByteValued;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::device::Device;
use super::error::{Result, VhostUserError};
use super::header::{FLAG_NEED_REPLY, FLAG_REPLY, FLAG_VERSION, HDR_SIZE};

/// One connection to a front-end.
pub struct Connection {
    stream: UnixStream,
}

struct Message {
    request: u32,
    flags: u32,
    body: Vec<u8>,
    fds: Vec<File>,
}

/// Why [`Connection::serve`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum ServeEnd {
    /// The front-end closed the connection.
    Disconnected,
    /// The interrupt descriptor became readable (a handover was requested);
    /// no message is half-read.
    Interrupted,
}

impl Connection {
    pub fn new(stream: UnixStream) -> Self {
        Connection { stream }
    }

    /// Adopts an already connected socket (handed over by a predecessor).
    pub fn from_fd(fd: OwnedFd) -> Self {
        Connection {
            stream: UnixStream::from(fd),
        }
    }

    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    fn recv(&mut self) -> Result<Message> {
        let mut hdr = [0u8; HDR_SIZE];
        let mut rawfds = [-1 as RawFd; MAX_ATTACHED_FD_ENTRIES];
        let mut iov = [libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: HDR_SIZE,
        }];
        // SAFETY: the iovec points at `hdr`, valid for HDR_SIZE bytes; received fds
        // are written into `rawfds` and immediately owned below.
        let (n, nfds) = unsafe { self.stream.recv_with_fds(&mut iov, &mut rawfds) }
            .map_err(|e| VhostUserError::Socket(io::Error::from_raw_os_error(e.errno())))?;
        let fds: Vec<File> = rawfds[..nfds]
            .iter()
            // SAFETY: each fd was just received over SCM_RIGHTS and belongs to us alone.
            .map(|&fd| unsafe { File::from_raw_fd(fd) })
            .collect();
        if n == 0 {
            return Err(VhostUserError::Disconnected);
        }
        if n < HDR_SIZE {
            self.stream
                .read_exact(&mut hdr[n..])
                .map_err(eof_is_disconnect)?;
        }
        let request = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let flags = u32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let size = u32::from_ne_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
        if size as usize > MAX_MSG_SIZE {
            return Err(VhostUserError::TooLarge(size));
        }
        let mut body = vec![0u8; size as usize];
        self.stream
            .read_exact(&mut body)
            .map_err(eof_is_disconnect)?;
        Ok(Message {
            request,
            flags,
            body,
            fds,
        })
    }

    fn send(&mut self, request: u32, payload: &[u8]) -> Result<()> {
        let mut msg = Vec::with_capacity(HDR_SIZE + payload.len());
        msg.extend_from_slice(&request.to_ne_bytes());
        msg.extend_from_slice(&(FLAG_VERSION | FLAG_REPLY).to_ne_bytes());
        msg.extend_from_slice(&(payload.len() as u32).to_ne_bytes());
        msg.extend_from_slice(payload);
        self.stream.write_all(&msg).map_err(VhostUserError::Socket)
    }

    /// Waits until a message arrives; meanwhile reaps the workers that ended
    /// on a fault. True when `interrupt` became readable.
    fn wait(&mut self, dev: &mut Device, interrupt: Option<BorrowedFd<'_>>) -> Result<bool> {
        loop {
            let supervisor = dev.supervisor();
            let mut fds = vec![self.stream.as_fd(), supervisor.as_fd()];
            fds.extend(interrupt);
            let ready = crate::sys::poll_readable(&fds, -1).map_err(VhostUserError::Socket)?;
            if ready[1] {
                let _ = crate::sys::eventfd_drain(supervisor.as_fd());
                dev.reap_faults();
            }
            if ready.get(2).copied().unwrap_or(false) {
                return Ok(true);
            }
            if ready[0] {
                return Ok(false);
            }
        }
    }

    /// Serves messages until the front-end disconnects or `interrupt` becomes
    /// readable between two messages.
    /// `after` runs after each message is handled, before its reply (a
    /// crash-restart checkpoint must hold what the front-end is told).
    pub fn serve(
        &mut self,
        dev: &mut Device,
        interrupt: Option<BorrowedFd<'_>>,
        after: &mut dyn FnMut(&Device),
    ) -> Result<ServeEnd> {
        loop {
            if self.wait(dev, interrupt)? {
                return Ok(ServeEnd::Interrupted);
            }
            let msg = match self.recv() {
                Ok(m) => m,
                Err(VhostUserError::Disconnected) => return Ok(ServeEnd::Disconnected),
                Err(e) => return Err(e),
            };
            if msg.flags & 0x3 != FLAG_VERSION || msg.flags & !0xf != 0 {
                return Err(VhostUserError::BadFlags(msg.flags));
            }
            let need_reply = msg.flags & FLAG_NEED_REPLY != 0;
            let req = match FrontendReq::try_from(msg.request) {
                Ok(r) => r,
                Err(_) => {
                    warn!("vhost-user: unknown request {}", msg.request);
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(1).as_slice())?;
                    }
                    continue;
                }
            };
            debug!(
                "vhost-user: {req:?} ({} bytes, {} fds)",
                msg.body.len(),
                msg.fds.len()
            );
            let result = dev.handle(req, &msg.body, msg.fds);
            after(dev);
            match result {
                Ok(Some(reply)) => self.send(msg.request, &reply)?,
                Ok(None) => {
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(0).as_slice())?;
                    }
                }
                Err(e) => {
                    warn!("vhost-user: {req:?} failed: {}", crate::error_chain(&e));
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(1).as_slice())?;
                    } else if expects_reply(req) {
                        // The front-end waits for a reply we cannot give: answer zeros
                        // rather than leave it blocked.
                        self.send(msg.request, &[0u8; 8])?;
                    }
                }
            }
        }
    }
}

/// Requests whose reply is part of the protocol, not an ack.
fn expects_reply(req: FrontendReq) -> bool {
    matches!(
        req,
        FrontendReq::GET_FEATURES
            | FrontendReq::GET_PROTOCOL_FEATURES
            | FrontendReq::GET_QUEUE_NUM
            | FrontendReq::GET_MAX_MEM_SLOTS
            | FrontendReq::GET_VRING_BASE
            | FrontendReq::SET_LOG_BASE
            | FrontendReq::SET_DEVICE_STATE_FD
            | FrontendReq::CHECK_DEVICE_STATE
            | FrontendReq::GET_CONFIG
    )
}

fn eof_is_disconnect(e: io::Error) -> VhostUserError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        VhostUserError::Disconnected
    } else {
        VhostUserError::Socket(e)
    }
}
