// SPDX-License-Identifier: Apache-2.0
//! The two ends of one request as the file system sees them.
//!
//! The transport (virtio descriptor chains in the daemon, byte buffers in tests and
//! in the fuzzer) implements these traits; the FUSE layer only ever talks to them.
//! Every byte behind a [`RequestReader`] is untrusted guest input.

use std::io;
use std::os::fd::BorrowedFd;

/// The device-readable part of a request: the bytes the guest sent.
pub trait RequestReader {
    /// Bytes not yet consumed.
    fn remaining(&self) -> usize;

    /// Copies exactly `buf.len()` bytes and consumes them.
    /// Fails with `UnexpectedEof` (consuming nothing) when fewer remain.
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()>;

    /// Writes up to `len` of the remaining bytes to `fd` at `offset` (pwritev-like,
    /// without staging them in a buffer where the transport can avoid it).
    /// Returns how many were written; those are consumed.
    fn write_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize>;
}

/// The device-writable part of a request: where the reply goes.
pub trait ReplyWriter {
    /// Room left for the reply.
    fn remaining(&self) -> usize;

    /// Bytes written so far.
    fn written(&self) -> usize;

    /// Appends `buf`; fails with `WriteZero` (writing nothing) when it does not fit.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;

    /// Reads up to `len` bytes from `fd` at `offset` (preadv-like) straight into the
    /// reply, after what was written so far. Returns how many were read (0 at EOF).
    fn read_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize>;

    /// Overwrites bytes already written, starting at `pos` (used to fill in the
    /// reply header once the length of a zero-copy read is known).
    fn overwrite(&mut self, pos: usize, buf: &[u8]) -> io::Result<()>;
}

/// A [`RequestReader`] over a byte slice (tests, fuzzing).
#[derive(Debug)]
pub struct SliceReader<'a> {
    buf: &'a [u8],
}

impl<'a> SliceReader<'a> {
    /// Reads from `buf`, front to back.
    pub fn new(buf: &'a [u8]) -> Self {
        SliceReader { buf }
    }
}

impl RequestReader for SliceReader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let (head, tail) = self
            .buf
            .split_at_checked(buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(head);
        self.buf = tail;
        Ok(())
    }

    fn write_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let len = len.min(self.buf.len());
        let n = crate::sys::pwrite(fd, &self.buf[..len], offset)?;
        self.buf = &self.buf[n..];
        Ok(n)
    }
}

/// A [`ReplyWriter`] that appends to a vector, up to a capacity limit (tests,
/// fuzzing).
#[derive(Debug)]
pub struct VecWriter {
    buf: Vec<u8>,
    limit: usize,
}

impl VecWriter {
    /// A writer that accepts at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        VecWriter {
            buf: Vec::new(),
            limit,
        }
    }

    /// What was written.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the written bytes.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

impl ReplyWriter for VecWriter {
    fn remaining(&self) -> usize {
        self.limit - self.buf.len()
    }

    fn written(&self) -> usize {
        self.buf.len()
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.len() > self.remaining() {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        self.buf.extend_from_slice(buf);
        Ok(())
    }

    fn read_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let len = len.min(self.remaining());
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        let res = crate::sys::pread(fd, &mut self.buf[start..], offset);
        let n = *res.as_ref().unwrap_or(&0);
        self.buf.truncate(start + n);
        res
    }

    fn overwrite(&mut self, pos: usize, buf: &[u8]) -> io::Result<()> {
        let end = pos
            .checked_add(buf.len())
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.buf[pos..end].copy_from_slice(buf);
        Ok(())
    }
}
