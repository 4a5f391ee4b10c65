// SPDX-License-Identifier: Apache-2.0
//! The other end of a Unix socket, as the kernel's socket diagnostics
//! (`NETLINK_SOCK_DIAG`, `UNIX_DIAG_PEER`) name it: the inode of the peer
//! socket, which `/proc/PID/fd` shows as `socket:[inode]` in whichever
//! process holds it. Unlike `SO_PEERCRED` (the process that called
//! `listen`, numbered in the caller's PID namespace) it names the socket
//! that accepted this connection, whoever holds it now.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{cvt, cvt_size};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `UDIAG_SHOW_PEER` (linux/unix_diag.h).
const UDIAG_SHOW_PEER: u32 = 0x4;
/// `UNIX_DIAG_PEER` (linux/unix_diag.h).
const UNIX_DIAG_PEER: u16 = 2;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// The size of `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// The size of `struct unix_diag_msg`.
const UNIX_DIAG_MSG: usize = 16;

/// `struct unix_diag_req`.
#[repr(C)]
struct UnixDiagReq {
    family: u8,
    protocol: u8,
    pad: u16,
    states: u32,
    ino: u32,
    show: u32,
    cookie: [u32; 2],
}

/// A `struct nlmsghdr` with a `struct unix_diag_req` behind it.
#[repr(C)]
struct Request {
    nlh: libc::nlmsghdr,
    req: UnixDiagReq,
}

/// The inode of the socket at the other end of the Unix stream socket
/// `fd`; 0 while there is none yet (a connection the listener has not
/// accepted) or any more.
pub fn unix_peer_inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: an all-zero stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    let ino = u32::try_from(st.st_ino)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket inode out of range"))?;
    // SAFETY: socket takes integers; the result is checked and owned below.
    let nl = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    })?;
    // SAFETY: nl was just returned by socket and is owned by nobody else.
    let nl = unsafe { OwnedFd::from_raw_fd(nl) };
    let request = Request {
        nlh: libc::nlmsghdr {
            nlmsg_len: std::mem::size_of::<Request>() as u32,
            nlmsg_type: SOCK_DIAG_BY_FAMILY,
            nlmsg_flags: libc::NLM_F_REQUEST as u16,
            nlmsg_seq: 1,
            nlmsg_pid: 0,
        },
        req: UnixDiagReq {
            family: libc::AF_UNIX as u8,
            protocol: 0,
            pad: 0,
            states: u32::MAX,
            ino,
            show: UDIAG_SHOW_PEER,
            // INET_DIAG_NOCOOKIE: look the socket up by inode alone.
            cookie: [u32::MAX; 2],
        },
    };
    // SAFETY: `request` is a plain repr(C) value of that many bytes.
    cvt_size(unsafe {
        libc::send(
            nl.as_raw_fd(),
            (&request as *const Request).cast(),
            std::mem::size_of::<Request>(),
            0,
        )
    })?;
    let mut buf = [0u8; 4096];
    // SAFETY: buf is valid for writes of its length.
    let n = cvt_size(unsafe { libc::recv(nl.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) })?;
    parse_reply(&buf[..n])
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The peer inode in the kernel's answer: one `nlmsghdr`, then either an
/// error or a `unix_diag_msg` followed by attributes.
fn parse_reply(b: &[u8]) -> io::Result<u64> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed socket diagnostics reply",
        )
    };
    let len = u32_at(b, 0).ok_or_else(bad)? as usize;
    let kind = u16_at(b, 4).ok_or_else(bad)?;
    let msg = b.get(..len).ok_or_else(bad)?;
    if kind == NLMSG_ERROR {
        let errno = u32_at(msg, NLMSG_HDR).ok_or_else(bad)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(bad());
    }
    let mut at = NLMSG_HDR + UNIX_DIAG_MSG;
    while at + 4 <= msg.len() {
        let alen = usize::from(u16_at(msg, at).ok_or_else(bad)?);
        let atype = u16_at(msg, at + 2).ok_or_else(bad)?;
        if alen < 4 {
            return Err(bad());
        }
        if atype == UNIX_DIAG_PEER {
            return Ok(u64::from(u32_at(msg, at + 4).ok_or_else(bad)?));
        }
        at += (alen + 3) & !3;
    }
    // No peer attribute: nothing at the other end.
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn inode(s: &UnixStream) -> u64 {
        std::fs::File::from(s.as_fd().try_clone_to_owned().unwrap())
            .metadata()
            .unwrap()
            .ino()
    }

    #[test]
    fn names_the_accepted_end_once_accepted() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(unix_peer_inode(a.as_fd()).unwrap(), inode(&b));
        let dir = std::env::temp_dir().join(format!("xvfs-diag-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let l = UnixListener::bind(dir.join("s")).unwrap();
        let c = UnixStream::connect(dir.join("s")).unwrap();
        assert_eq!(unix_peer_inode(c.as_fd()).unwrap(), 0, "not accepted yet");
        let (s, _) = l.accept().unwrap();
        assert_eq!(unix_peer_inode(c.as_fd()).unwrap(), inode(&s));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn replies_are_parsed_defensively() {
        assert!(parse_reply(&[]).is_err());
        assert!(parse_reply(&[200, 0, 0, 0, 20, 0]).is_err());
        let mut err = vec![0u8; 20];
        err[0] = 20;
        err[4] = NLMSG_ERROR as u8;
        err[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(
            parse_reply(&err).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        let mut none = vec![0u8; 36];
        none[0] = 36;
        none[4] = SOCK_DIAG_BY_FAMILY as u8;
        none[32] = 2; // an attribute shorter than its header
        assert!(parse_reply(&none).is_err());
    }
}
