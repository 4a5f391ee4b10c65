// SPDX-License-Identifier: Apache-2.0
//! The handover protocol between a running daemon (the *old* one) and its
//! successor (the *new* one), over a connected Unix stream socket.
//!
//! Every message is one `sendmsg`: an 8-byte header (kind, payload length, both
//! little endian), the payload, and optionally file descriptors (SCM_RIGHTS,
//! at most [`MAX_FDS_PER_MSG`]) attached to it.
//!
//! ```text
//! new → old  HELLO   "xvirtiofsd <version>"        (sent on the control socket
//!                                                   after the "handover" command)
//! old → new  CHUNK   part of the framed state blob (repeated)
//! old → new  FDS     u32 count, with that many fds (repeated, ≤ 253 each)
//! old → new  END     u32 blob length, u32 fd count
//! new → old  READY   (state restored, workers not yet started)
//!        or  FAILED  reason
//! old → new  COMMIT  (the old daemon stops for good; the new one serves)
//!        or  ABORT   reason (the old daemon resumes; the new one exits)
//! ```
//!
//! The old daemon has stopped every queue at a request boundary before the
//! first CHUNK and resumes them itself on any failure before READY. After
//! sending COMMIT it exits; the new daemon starts its queues only after COMMIT
//! (or after the old daemon's end of the socket closes following READY).

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

pub const HELLO: u32 = 1;
pub const CHUNK: u32 = 2;
pub const FDS: u32 = 3;
pub const END: u32 = 4;
pub const READY: u32 = 5;
pub const FAILED: u32 = 6;
pub const COMMIT: u32 = 7;
pub const ABORT: u32 = 8;

/// SCM_MAX_FD of Linux.
pub const MAX_FDS_PER_MSG: usize = 253;
/// Largest payload of one message.
pub const MAX_MSG: usize = 1 << 20;
const CHUNK_SIZE: usize = 256 << 10;
/// Upper bound on descriptors in one handover.
pub const MAX_TOTAL_FDS: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("handover socket")]
    Io(#[from] io::Error),
    #[error("the peer closed the handover socket")]
    Closed,
    #[error("unexpected handover message {got} (expected {want})")]
    Unexpected { got: u32, want: &'static str },
    #[error("handover message of {0} bytes is too large")]
    TooLarge(usize),
    #[error("handover message is malformed: {0}")]
    Malformed(&'static str),
    #[error("the new daemon failed: {0}")]
    PeerFailed(String),
    #[error("the old daemon aborted the handover: {0}")]
    Aborted(String),
}

/// One received message.
#[derive(Debug)]
pub struct Msg {
    pub kind: u32,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// HELLO's payload: who the successor is and, from release 0.2.0 on, the
/// state formats it reads (`... reads-state A-B`), so that a predecessor
/// that writes none of them refuses before it stops anything.
pub fn hello_payload(version: &str, pid: u32) -> String {
    format!(
        "xvirtiofsd {version} pid {pid} reads-state {}-{}",
        crate::frame::MIN_FORMAT_VERSION,
        crate::frame::FORMAT_VERSION
    )
}

/// The state formats a HELLO's sender reads: what it says (`reads-state
/// A-B`), or for release 0.2.0, which said only `xvirtiofsd 0.2.0 pid N`,
/// the format that release reads (7). None for anything else (a build
/// before 0.2.0, or garbage): the sender then checks what it receives
/// itself.
pub fn hello_reads_state(payload: &[u8]) -> Option<std::ops::RangeInclusive<u32>> {
    let text = std::str::from_utf8(payload).ok()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    if let Some(i) = words.iter().position(|w| *w == "reads-state") {
        let (a, b) = words.get(i + 1)?.split_once('-')?;
        let (a, b) = (a.parse().ok()?, b.parse().ok()?);
        return (a <= b).then_some(a..=b);
    }
    match words.as_slice() {
        ["xvirtiofsd", version, ..] if version.split(['+', '-']).next() == Some("0.2.0") => {
            Some(7..=7)
        }
        _ => None,
    }
}

/// Sends one message with `fds` attached.
pub fn send(s: &UnixStream, kind: u32, payload: &[u8], fds: &[RawFd]) -> Result<(), HandoverError> {
    if payload.len() > MAX_MSG {
        return Err(HandoverError::TooLarge(payload.len()));
    }
    if fds.len() > MAX_FDS_PER_MSG {
        return Err(HandoverError::Malformed(
            "too many descriptors in one message",
        ));
    }
    let mut buf = Vec::with_capacity(8 + payload.len());
    buf.extend_from_slice(&kind.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    let n = s
        .send_with_fds(&[&buf[..]], fds)
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    if n < buf.len() {
        let mut w = s;
        w.write_all(&buf[n..])?;
    }
    Ok(())
}

/// Receives one message (and the descriptors attached to it).
pub fn recv(s: &UnixStream) -> Result<Msg, HandoverError> {
    let mut hdr = [0u8; 8];
    let mut raw = [-1 as RawFd; MAX_FDS_PER_MSG];
    let mut iov = [libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: hdr.len(),
    }];
    // SAFETY: the iovec points at `hdr`, valid for 8 bytes; received fds land in
    // `raw` and are owned right below.
    let (n, nfds) = unsafe { s.recv_with_fds(&mut iov, &mut raw) }
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    let fds: Vec<OwnedFd> = raw[..nfds]
        .iter()
        // SAFETY: each fd was just received and belongs to nobody else.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if n == 0 {
        return Err(HandoverError::Closed);
    }
    let mut r = s;
    if n < hdr.len() {
        r.read_exact(&mut hdr[n..]).map_err(closed)?;
    }
    let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    if len > MAX_MSG {
        return Err(HandoverError::TooLarge(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(closed)?;
    Ok(Msg { kind, payload, fds })
}

fn closed(e: io::Error) -> HandoverError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        HandoverError::Closed
    } else {
        HandoverError::Io(e)
    }
}

/// Receives a message of kind `want`; FAILED and ABORT become errors.
pub fn expect(s: &UnixStream, want: u32, name: &'static str) -> Result<Msg, HandoverError> {
    let m = recv(s)?;
    match m.kind {
        k if k == want => Ok(m),
        FAILED => Err(HandoverError::PeerFailed(text(&m.payload))),
        ABORT => Err(HandoverError::Aborted(text(&m.payload))),
        got => Err(HandoverError::Unexpected { got, want: name }),
    }
}

pub fn text(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Old side: sends the blob in chunks, then the descriptors in batches, then END.
pub fn send_state(s: &UnixStream, blob: &[u8], fds: &[RawFd]) -> Result<(), HandoverError> {
    for chunk in blob.chunks(CHUNK_SIZE) {
        send(s, CHUNK, chunk, &[])?;
    }
    for batch in fds.chunks(MAX_FDS_PER_MSG) {
        send(s, FDS, &(batch.len() as u32).to_le_bytes(), batch)?;
    }
    let mut end = Vec::with_capacity(8);
    end.extend_from_slice(&(blob.len() as u32).to_le_bytes());
    end.extend_from_slice(&(fds.len() as u32).to_le_bytes());
    send(s, END, &end, &[])
}

/// New side: receives what [`send_state`] sent, checking every count.
pub fn recv_state(s: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>), HandoverError> {
    let first = recv(s)?;
    recv_state_after(s, first)
}

/// As [`recv_state`], whose first message `first` the caller has already
/// received (a reader that takes other messages on the same socket too).
pub fn recv_state_after(
    s: &UnixStream,
    first: Msg,
) -> Result<(Vec<u8>, Vec<OwnedFd>), HandoverError> {
    let mut blob = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut next = Some(first);
    loop {
        let m = match next.take() {
            Some(m) => m,
            None => recv(s)?,
        };
        match m.kind {
            CHUNK => {
                if !m.fds.is_empty() {
                    return Err(HandoverError::Malformed("descriptors on a state chunk"));
                }
                if blob.len() + m.payload.len()
                    > crate::frame::MAX_PAYLOAD + crate::frame::HEADER_LEN
                {
                    return Err(HandoverError::TooLarge(blob.len() + m.payload.len()));
                }
                blob.extend_from_slice(&m.payload);
            }
            FDS => {
                let count = le_u32(&m.payload, 0)? as usize;
                if count != m.fds.len() {
                    return Err(HandoverError::Malformed("descriptor batch count"));
                }
                if fds.len() + count > MAX_TOTAL_FDS {
                    return Err(HandoverError::Malformed("too many descriptors"));
                }
                fds.extend(m.fds);
            }
            END => {
                let (blob_len, fd_count) = (le_u32(&m.payload, 0)?, le_u32(&m.payload, 4)?);
                if blob_len as usize != blob.len() || fd_count as usize != fds.len() {
                    return Err(HandoverError::Malformed(
                        "END counts do not match what arrived",
                    ));
                }
                return Ok((blob, fds));
            }
            ABORT => return Err(HandoverError::Aborted(text(&m.payload))),
            got => {
                return Err(HandoverError::Unexpected {
                    got,
                    want: "CHUNK, FDS or END",
                })
            }
        }
    }
}

fn le_u32(p: &[u8], off: usize) -> Result<u32, HandoverError> {
    p.get(off..off + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(HandoverError::Malformed("short payload"))
}

#[cfg(test)]
mod hello_tests {
    use super::*;

    #[test]
    fn hello_says_which_states_its_sender_reads() {
        let p = hello_payload("0.2.0", 7);
        let want = crate::frame::MIN_FORMAT_VERSION..=crate::frame::FORMAT_VERSION;
        assert_eq!(hello_reads_state(p.as_bytes()), Some(want));
        assert_eq!(hello_reads_state(b"xvirtiofsd 0.1.0 pid 7"), None);
        assert_eq!(hello_reads_state(b"xvirtiofsd 0.2.0 pid 7"), Some(7..=7));
        assert_eq!(hello_reads_state(b"xvirtiofsd 0.2.0+ci pid 7"), Some(7..=7));
        assert_eq!(hello_reads_state(b"xvirtiofsd 0.2.1 pid 7"), None);
        assert_eq!(hello_reads_state(b"reads-state 9-3"), None);
        assert_eq!(hello_reads_state(b"reads-state x"), None);
        assert_eq!(hello_reads_state(&[0xff, 0xfe]), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn state_and_many_descriptors_cross_in_batches() {
        let (a, b) = UnixStream::pair().expect("pair");
        let files: Vec<std::fs::File> = (0..600)
            .map(|_| std::fs::File::open("/dev/null").expect("open"))
            .collect();
        let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        let blob: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        let blob2 = blob.clone();
        let t = std::thread::spawn(move || recv_state(&b));
        send_state(&a, &blob2, &raw).expect("send");
        let (got, fds) = t.join().expect("thread").expect("recv");
        assert_eq!(got, blob);
        assert_eq!(fds.len(), 600);
    }

    #[test]
    fn a_state_whose_first_message_was_taken_is_received_whole() {
        let (a, b) = UnixStream::pair().expect("pair");
        let f = std::fs::File::open("/dev/null").expect("open");
        send(&a, 14, &7u64.to_le_bytes(), &[]).expect("send");
        send_state(&a, b"state", &[f.as_raw_fd()]).expect("send");
        assert_eq!(recv(&b).expect("recv").kind, 14, "another message first");
        let first = recv(&b).expect("recv");
        let (blob, fds) = recv_state_after(&b, first).expect("state");
        assert_eq!((blob.as_slice(), fds.len()), (&b"state"[..], 1));
    }

    #[test]
    fn counts_that_lie_are_refused() {
        let (a, b) = UnixStream::pair().expect("pair");
        send(&a, CHUNK, b"abc", &[]).expect("send");
        let mut end = 5u32.to_le_bytes().to_vec();
        end.extend_from_slice(&0u32.to_le_bytes());
        send(&a, END, &end, &[]).expect("send");
        assert!(matches!(recv_state(&b), Err(HandoverError::Malformed(_))));

        let f = std::fs::File::open("/dev/null").expect("open");
        send(&a, FDS, &2u32.to_le_bytes(), &[f.as_raw_fd()]).expect("send");
        assert!(matches!(recv_state(&b), Err(HandoverError::Malformed(_))));

        send(&a, READY, b"", &[]).expect("send");
        assert!(matches!(
            recv_state(&b),
            Err(HandoverError::Unexpected { .. })
        ));
        drop(a);
        assert!(matches!(recv_state(&b), Err(HandoverError::Closed)));
    }

    #[test]
    fn failed_and_abort_become_errors() {
        let (a, b) = UnixStream::pair().expect("pair");
        send(&a, FAILED, b"no memory", &[]).expect("send");
        match expect(&b, READY, "READY") {
            Err(HandoverError::PeerFailed(r)) => assert_eq!(r, "no memory"),
            other => panic!("{other:?}"),
        }
    }
}
