// SPDX-License-Identifier: Apache-2.0
//! One virtio descriptor chain as the FUSE layer's request reader and reply writer.
//!
//! The chain is translated once into host-memory segments: the device-readable
//! ones (the request) and the device-writable ones (the reply). File data moves
//! between those segments and files with `preadv`/`pwritev`, never through an
//! intermediate buffer. Every descriptor comes from the guest and is checked:
//! a readable descriptor after a writable one, an address outside guest memory,
//! or a chain longer than the limits makes the whole chain invalid.

use std::io;
use std::os::fd::BorrowedFd;

use virtio_queue::desc::split::Descriptor;
use xvfs_fs::io::{ReplyWriter, RequestReader};

use crate::sys;
use crate::virtqueue::mem::{host_segments, GuestMemoryMmap};

/// Largest request or reply we accept (1 MiB of data plus headers, with room).
pub const MAX_CHAIN_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("device-readable descriptor after a device-writable one")]
    ReadableAfterWritable,
    #[error("descriptor address range outside guest memory")]
    OutOfMemory,
    #[error("descriptor chain longer than {MAX_CHAIN_BYTES} bytes")]
    TooLong,
}

/// Guest-memory segments, consumed front to back.
struct Segments {
    segs: Vec<(*mut u8, usize)>,
    /// Index of the current segment and offset inside it.
    idx: usize,
    off: usize,
    left: usize,
    total: usize,
}

impl Segments {
    fn new(segs: Vec<(*mut u8, usize)>) -> Self {
        let total = segs.iter().map(|s| s.1).sum();
        Segments {
            segs,
            idx: 0,
            off: 0,
            left: total,
            total,
        }
    }

    fn advance(&mut self, mut n: usize) {
        self.left -= n;
        while n > 0 {
            let room = self.segs[self.idx].1 - self.off;
            if n < room {
                self.off += n;
                return;
            }
            n -= room;
            self.idx += 1;
            self.off = 0;
        }
        // Skip empty segments so `idx` points at data (or the end).
        while self.idx < self.segs.len() && self.off == self.segs[self.idx].1 {
            self.idx += 1;
            self.off = 0;
        }
    }

    /// The next `len` bytes (at most what is left) as iovecs.
    fn iovecs(&self, len: usize) -> Vec<libc::iovec> {
        let mut out = Vec::new();
        let mut want = len.min(self.left);
        let mut idx = self.idx;
        let mut off = self.off;
        while want > 0 && idx < self.segs.len() {
            let (ptr, slen) = self.segs[idx];
            let take = (slen - off).min(want);
            if take > 0 {
                out.push(libc::iovec {
                    // SAFETY: off < slen, so the pointer stays inside the segment.
                    iov_base: unsafe { ptr.add(off) }.cast(),
                    iov_len: take,
                });
            }
            want -= take;
            idx += 1;
            off = 0;
        }
        out
    }

    /// Copies between a local buffer and the segments starting at absolute
    /// position `pos` (not moving the cursor). `to_guest` picks the direction.
    fn copy_at(&self, pos: usize, buf: *mut u8, len: usize, to_guest: bool) {
        let mut skip = pos;
        let mut done = 0;
        for &(ptr, slen) in &self.segs {
            if done == len {
                break;
            }
            if skip >= slen {
                skip -= slen;
                continue;
            }
            let take = (slen - skip).min(len - done);
            // SAFETY: the segment is valid guest memory for `slen` bytes while the
            // memory snapshot is held (see ChainIo); `buf` is valid for `len` bytes;
            // guest and local memory never overlap.
            unsafe {
                if to_guest {
                    std::ptr::copy_nonoverlapping(buf.add(done), ptr.add(skip), take);
                } else {
                    std::ptr::copy_nonoverlapping(ptr.add(skip), buf.add(done), take);
                }
            }
            done += take;
            skip = 0;
        }
    }
}

/// The request side of a chain.
pub struct ChainReader {
    segs: Segments,
}

/// The reply side of a chain.
pub struct ChainWriter {
    segs: Segments,
    /// The device-writable descriptors as guest ranges (address, length):
    /// what a migration's dirty log must mark.
    guest: Vec<(u64, u64)>,
}

impl ChainWriter {
    /// The device-writable descriptors as guest ranges (address, length).
    pub fn guest_ranges(&self) -> &[(u64, u64)] {
        &self.guest
    }

    /// The first `len` bytes written (at most what was written), read back
    /// (the crash-restart journal keeps small replies).
    pub fn read_back(&self, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len.min(self.written())];
        self.segs.copy_at(0, buf.as_mut_ptr(), buf.len(), false);
        buf
    }
}

impl ChainReader {
    /// Copies the first `buf.len()` bytes without consuming them; false
    /// when the request is shorter.
    pub fn peek(&self, buf: &mut [u8]) -> bool {
        if buf.len() > self.segs.left {
            return false;
        }
        let pos = self.segs.total - self.segs.left;
        self.segs.copy_at(pos, buf.as_mut_ptr(), buf.len(), false);
        true
    }
}

/// Splits a descriptor chain into its reader and writer.
///
/// The pointers inside are valid only while `mem` (the snapshot the chain was
/// popped with) is alive; the caller keeps it for the request's lifetime.
pub fn split_chain(
    mem: &GuestMemoryMmap,
    descs: impl Iterator<Item = Descriptor>,
) -> Result<(ChainReader, ChainWriter), ChainError> {
    let mut readable = Vec::new();
    let mut writable = Vec::new();
    let mut guest = Vec::new();
    let mut total: u64 = 0;
    for d in descs {
        total += u64::from(d.len());
        if total > MAX_CHAIN_BYTES {
            return Err(ChainError::TooLong);
        }
        let target = if d.is_write_only() {
            guest.push((d.addr().0, u64::from(d.len())));
            &mut writable
        } else {
            if !writable.is_empty() {
                return Err(ChainError::ReadableAfterWritable);
            }
            &mut readable
        };
        if !host_segments(mem, d.addr().0, u64::from(d.len()), target) {
            return Err(ChainError::OutOfMemory);
        }
    }
    Ok((
        ChainReader {
            segs: Segments::new(readable),
        },
        ChainWriter {
            segs: Segments::new(writable),
            guest,
        },
    ))
}

impl RequestReader for ChainReader {
    fn remaining(&self) -> usize {
        self.segs.left
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.segs.left {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let pos = self.segs.total - self.segs.left;
        self.segs.copy_at(pos, buf.as_mut_ptr(), buf.len(), false);
        self.segs.advance(buf.len());
        Ok(())
    }

    fn write_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let iov = self.segs.iovecs(len);
        if iov.is_empty() {
            return Ok(0);
        }
        // SAFETY: the iovecs point into guest memory held alive by the caller's
        // snapshot, within the descriptor lengths checked in split_chain.
        let n = unsafe { sys::pwritev(fd, &iov, offset) }?;
        self.segs.advance(n);
        Ok(n)
    }
}

impl ReplyWriter for ChainWriter {
    fn remaining(&self) -> usize {
        self.segs.left
    }

    fn written(&self) -> usize {
        self.segs.total - self.segs.left
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.len() > self.segs.left {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let pos = self.written();
        self.segs
            .copy_at(pos, buf.as_ptr() as *mut u8, buf.len(), true);
        self.segs.advance(buf.len());
        Ok(())
    }

    fn read_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let iov = self.segs.iovecs(len);
        if iov.is_empty() {
            return Ok(0);
        }
        // SAFETY: as in write_to_fd; these segments are device-writable.
        let n = unsafe { sys::preadv(fd, &iov, offset) }?;
        self.segs.advance(n);
        Ok(n)
    }

    fn overwrite(&mut self, pos: usize, buf: &[u8]) -> io::Result<()> {
        let end = pos
            .checked_add(buf.len())
            .ok_or(io::ErrorKind::InvalidInput)?;
        if end > self.written() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        self.segs
            .copy_at(pos, buf.as_ptr() as *mut u8, buf.len(), true);
        Ok(())
    }
}
