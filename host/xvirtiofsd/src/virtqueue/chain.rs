// SPDX-License-Identifier: Apache-2.0
//! One virtio descriptor chain as the FUSE layer's request reader and reply writer.
//!
//! The chain is translated once into vm-memory [`VolatileSlice`]s of guest
//! memory: the device-readable ones (the request) and the device-writable ones
//! (the reply). Bytes are copied in and out with volatile accesses, since the
//! guest may change the same bytes at any time, and file data moves between
//! those slices and files with `preadv`/`pwritev` on the slices' own pointers,
//! never through an intermediate buffer. Every descriptor comes from the
//! guest and is checked: a readable descriptor after a writable one, an
//! address outside guest memory, or a chain longer than the limits makes the
//! whole chain invalid; [`refuse`] then answers it with an error when the
//! request's header and the reply's first descriptor are usable.
//!
//! The slices borrow the memory snapshot the chain was popped with (`'m`), so
//! no reader or writer can outlive the mapping it points into. A request that
//! waits (SETLKW) keeps the snapshot and its reply's guest ranges instead, and
//! makes its writer again with [`ChainWriter::over`] when it is answered.

use std::io;
use std::os::fd::BorrowedFd;

use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, VolatileSlice};
use xvfs_fs::io::{ReplyWriter, RequestReader};

use crate::sys;
use crate::virtqueue::mem::GuestMemoryMmap;

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

impl ChainError {
    /// What the guest is told when the chain can be answered ([`refuse`]).
    pub fn errno(&self) -> i32 {
        match self {
            ChainError::ReadableAfterWritable => libc::EINVAL,
            ChainError::OutOfMemory => libc::EFAULT,
            ChainError::TooLong => libc::E2BIG,
        }
    }
}

/// FUSE's request and reply headers: the reply header's size, and where
/// both keep the request's unique id.
const OUT_HEADER_LEN: usize = 16;
const UNIQUE: std::ops::Range<usize> = 8..16;

/// Answers a chain [`split_chain`] refused with error `errno`: a reply
/// header carrying the unique id of the request header in its first
/// descriptor, written to its first device-writable one. A buffer the
/// guest put in the DAX window, which is not mapped here, fails this way
/// (EFAULT) rather than as an empty reply the guest cannot tell from
/// success. Returns the guest range written, or None (nothing written)
/// when the header or that descriptor is short or outside guest memory.
pub fn refuse(
    mem: &GuestMemoryMmap,
    mut descs: impl Iterator<Item = Descriptor>,
    errno: i32,
) -> Option<(u64, u64)> {
    let first = descs
        .next()
        .filter(|d| !d.is_write_only() && d.len() as usize >= OUT_HEADER_LEN)?;
    let mut request = [0u8; OUT_HEADER_LEN];
    mem.read_slice(&mut request, first.addr()).ok()?;
    let to = descs
        .find(Descriptor::is_write_only)
        .filter(|d| d.len() as usize >= OUT_HEADER_LEN)?;
    let mut reply = [0u8; OUT_HEADER_LEN];
    reply[..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
    reply[4..8].copy_from_slice(&(-errno).to_ne_bytes());
    reply[UNIQUE].copy_from_slice(&request[UNIQUE]);
    mem.write_slice(&reply, to.addr()).ok()?;
    Some((to.addr().0, OUT_HEADER_LEN as u64))
}

/// Guest-memory slices, consumed front to back.
struct Segments<'m> {
    segs: Vec<VolatileSlice<'m>>,
    /// Index of the current slice and offset inside it.
    idx: usize,
    off: usize,
    left: usize,
    total: usize,
}

/// Which way bytes move between a local buffer and guest memory.
enum Copy<'b> {
    FromGuest(&'b mut [u8]),
    ToGuest(&'b [u8]),
}

impl<'m> Segments<'m> {
    fn new(segs: Vec<VolatileSlice<'m>>) -> Self {
        let total = segs.iter().map(VolatileSlice::len).sum();
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
            let room = self.segs[self.idx].len() - self.off;
            if n < room {
                self.off += n;
                return;
            }
            n -= room;
            self.idx += 1;
            self.off = 0;
        }
        // Skip empty slices so `idx` points at data (or the end).
        while self.idx < self.segs.len() && self.off == self.segs[self.idx].len() {
            self.idx += 1;
            self.off = 0;
        }
    }

    /// The next `len` bytes (at most what is left) as iovecs, each the
    /// pointer and length of a slice's part (`writable`: the device writes
    /// into them).
    fn iovecs(&self, len: usize, writable: bool) -> Vec<libc::iovec> {
        let mut out = Vec::with_capacity(self.segs.len() - self.idx);
        let mut want = len.min(self.left);
        let mut idx = self.idx;
        let mut off = self.off;
        while want > 0 && idx < self.segs.len() {
            let seg = &self.segs[idx];
            let take = (seg.len() - off).min(want);
            // In range: off + take <= seg.len().
            if let Some(s) = seg.subslice(off, take).ok().filter(|_| take > 0) {
                let base = if writable {
                    s.ptr_guard_mut().as_ptr()
                } else {
                    s.ptr_guard().as_ptr().cast_mut()
                };
                out.push(libc::iovec {
                    iov_base: base.cast(),
                    iov_len: take,
                });
            }
            want -= take;
            idx += 1;
            off = 0;
        }
        out
    }

    /// Copies between a local buffer and the slices starting at absolute
    /// position `pos` (not moving the cursor); the caller has checked that
    /// the buffer fits.
    fn copy_at(&self, pos: usize, mut copy: Copy<'_>) {
        let len = match &copy {
            Copy::FromGuest(b) => b.len(),
            Copy::ToGuest(b) => b.len(),
        };
        let mut skip = pos;
        let mut done = 0;
        for seg in &self.segs {
            if done == len {
                break;
            }
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            let take = (seg.len() - skip).min(len - done);
            if let Ok(s) = seg.subslice(skip, take) {
                match &mut copy {
                    Copy::FromGuest(b) => {
                        s.copy_to(&mut b[done..done + take]);
                    }
                    Copy::ToGuest(b) => s.copy_from(&b[done..done + take]),
                }
            }
            done += take;
            skip = 0;
        }
    }
}

/// The request side of a chain.
pub struct ChainReader<'m> {
    segs: Segments<'m>,
}

/// The reply side of a chain.
pub struct ChainWriter<'m> {
    segs: Segments<'m>,
    /// The device-writable descriptors as guest ranges (address, length):
    /// what a migration's dirty log must mark.
    guest: Vec<(u64, u64)>,
}

impl<'m> ChainWriter<'m> {
    /// A writer over the guest ranges `guest` of `mem` (a waiting request's
    /// reply, [`ChainWriter::guest_ranges`] of the writer it was popped with).
    pub fn over(mem: &'m GuestMemoryMmap, guest: Vec<(u64, u64)>) -> Result<Self, ChainError> {
        let mut segs = Vec::new();
        for &(addr, len) in &guest {
            slices(mem, addr, len, &mut segs)?;
        }
        Ok(ChainWriter {
            segs: Segments::new(segs),
            guest,
        })
    }

    /// A writer with no room: replies written to it are lost.
    pub fn empty() -> Self {
        ChainWriter {
            segs: Segments::new(Vec::new()),
            guest: Vec::new(),
        }
    }

    /// The device-writable descriptors as guest ranges (address, length).
    pub fn guest_ranges(&self) -> &[(u64, u64)] {
        &self.guest
    }

    /// The first `len` bytes written (at most what was written), read back
    /// (the crash-restart journal keeps small replies).
    pub fn read_back(&self, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len.min(self.written())];
        self.segs.copy_at(0, Copy::FromGuest(&mut buf));
        buf
    }
}

impl ChainReader<'_> {
    /// Copies the first `buf.len()` bytes without consuming them; false
    /// when the request is shorter.
    pub fn peek(&self, buf: &mut [u8]) -> bool {
        if buf.len() > self.segs.left {
            return false;
        }
        let pos = self.segs.total - self.segs.left;
        self.segs.copy_at(pos, Copy::FromGuest(buf));
        true
    }
}

/// Appends the slices of guest range `addr`..`addr + len` (one per memory
/// region it crosses).
fn slices<'m>(
    mem: &'m GuestMemoryMmap,
    addr: u64,
    len: u64,
    out: &mut Vec<VolatileSlice<'m>>,
) -> Result<(), ChainError> {
    let len = usize::try_from(len).map_err(|_| ChainError::TooLong)?;
    for s in mem.get_slices(GuestAddress(addr), len) {
        out.push(s.map_err(|_| ChainError::OutOfMemory)?);
    }
    Ok(())
}

/// Splits a descriptor chain into its reader and writer, over the memory
/// snapshot `mem` the chain was popped with.
pub fn split_chain<'m>(
    mem: &'m GuestMemoryMmap,
    descs: impl Iterator<Item = Descriptor>,
) -> Result<(ChainReader<'m>, ChainWriter<'m>), ChainError> {
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
        slices(mem, d.addr().0, u64::from(d.len()), target)?;
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

impl RequestReader for ChainReader<'_> {
    fn remaining(&self) -> usize {
        self.segs.left
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.segs.left {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let pos = self.segs.total - self.segs.left;
        let n = buf.len();
        self.segs.copy_at(pos, Copy::FromGuest(buf));
        self.segs.advance(n);
        Ok(())
    }

    fn write_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let iov = self.segs.iovecs(len, false);
        if iov.is_empty() {
            return Ok(0);
        }
        // SAFETY: each iovec is part of a slice of guest memory, which the
        // slices' borrow of the memory snapshot keeps mapped for the call; the kernel
        // only reads it (the guest may change it meanwhile: the file then
        // gets some mix of old and new bytes, as with any racing writer).
        let n = unsafe { sys::pwritev(fd, &iov, offset) }?;
        self.segs.advance(n);
        Ok(n)
    }
}

impl ReplyWriter for ChainWriter<'_> {
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
        self.segs.copy_at(pos, Copy::ToGuest(buf));
        self.segs.advance(buf.len());
        Ok(())
    }

    fn read_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let iov = self.segs.iovecs(len, true);
        if iov.is_empty() {
            return Ok(0);
        }
        // SAFETY: each iovec is part of a device-writable slice of guest
        // memory, kept mapped for the call by the slices' borrow of the snapshot; the
        // kernel writes file data into it and nothing else of this process
        // aliases it.
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
        self.segs.copy_at(pos, Copy::ToGuest(buf));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    use virtio_bindings::bindings::virtio_ring::VRING_DESC_F_WRITE;
    use vm_memory::{Bytes, GuestAddress};

    use super::*;

    const WRITE: u16 = VRING_DESC_F_WRITE as u16;

    /// Two regions, 0x0..0x1000 and 0x1000..0x2000 (adjacent, so one range
    /// crosses them), and nothing at 0x2000 and above.
    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x1000), 0x1000)])
            .unwrap()
    }

    #[test]
    fn a_request_and_its_reply_cross_memory_regions() {
        let mem = memory();
        mem.write_slice(b"0123456789", GuestAddress(0xffb)).unwrap();
        let descs = [
            Descriptor::new(0xffb, 10, 0, 0),
            Descriptor::new(0x1ffa, 4, WRITE, 0),
            Descriptor::new(0xffe, 4, WRITE, 0),
        ];
        let (mut r, mut w) = split_chain(&mem, descs.into_iter()).unwrap();
        let mut head = [0u8; 3];
        assert!(r.peek(&mut head));
        assert_eq!(&head, b"012");
        let mut all = [0u8; 10];
        r.read_exact(&mut all).unwrap();
        assert_eq!(&all, b"0123456789");
        assert_eq!(RequestReader::remaining(&r), 0);

        w.write_all(b"abcdef").unwrap();
        w.overwrite(3, b"D").unwrap();
        assert_eq!(w.read_back(16), b"abcDef");
        assert!(w.write_all(b"xyz").is_err(), "2 bytes of room left");
        let mut got = [0u8; 4];
        mem.read_slice(&mut got, GuestAddress(0x1ffa)).unwrap();
        assert_eq!(&got, b"abcD");
        assert_eq!(w.guest_ranges(), &[(0x1ffa, 4), (0xffe, 4)]);
    }

    #[test]
    fn file_data_moves_through_the_slices_pointers() {
        let mem = memory();
        let mut file = tempfile();
        file.write_all(b"host file data!!").unwrap();
        let descs = [Descriptor::new(0xff8, 16, WRITE, 0)];
        let (_, mut w) = split_chain(&mem, descs.into_iter()).unwrap();
        assert_eq!(w.read_from_fd(file.as_fd(), 16, 0).unwrap(), 16);
        let mut got = [0u8; 16];
        mem.read_slice(&mut got, GuestAddress(0xff8)).unwrap();
        assert_eq!(&got, b"host file data!!");

        mem.write_slice(b"guest bytes", GuestAddress(0xffc))
            .unwrap();
        let descs = [Descriptor::new(0xffc, 11, 0, 0)];
        let (mut r, _) = split_chain(&mem, descs.into_iter()).unwrap();
        assert_eq!(r.write_to_fd(file.as_fd(), 11, 0).unwrap(), 11);
        let mut back = String::new();
        file.rewind().unwrap();
        file.read_to_string(&mut back).unwrap();
        assert_eq!(back, "guest bytesata!!");
    }

    #[test]
    fn a_waiting_reply_is_written_through_a_writer_made_again() {
        let mem = memory();
        let descs = [Descriptor::new(0x800, 8, WRITE, 0)];
        let (_, w) = split_chain(&mem, descs.into_iter()).unwrap();
        let ranges = w.guest_ranges().to_vec();
        drop(w);
        let mut again = ChainWriter::over(&mem, ranges).unwrap();
        again.write_all(b"granted").unwrap();
        let mut got = [0u8; 7];
        mem.read_slice(&mut got, GuestAddress(0x800)).unwrap();
        assert_eq!(&got, b"granted");
        assert!(ChainWriter::empty().write_all(b"x").is_err());
    }

    #[test]
    fn a_chain_the_guest_got_wrong_is_refused() {
        let mem = memory();
        let outside = [Descriptor::new(0x1ff0, 0x20, 0, 0)];
        assert_eq!(
            split_chain(&mem, outside.into_iter()).err(),
            Some(ChainError::OutOfMemory)
        );
        let order = [Descriptor::new(0, 4, WRITE, 0), Descriptor::new(8, 4, 0, 0)];
        assert_eq!(
            split_chain(&mem, order.into_iter()).err(),
            Some(ChainError::ReadableAfterWritable)
        );
        let long = (0..1025).map(|_| Descriptor::new(0, 0x1000, 0, 0));
        assert_eq!(split_chain(&mem, long).err(), Some(ChainError::TooLong));
        let wraps = [Descriptor::new(u64::MAX - 2, 8, 0, 0)];
        assert_eq!(
            split_chain(&mem, wraps.into_iter()).err(),
            Some(ChainError::OutOfMemory)
        );
    }

    #[test]
    fn a_refused_chain_is_answered_with_an_error_when_it_can_be() {
        let mem = memory();
        let mut request = [0u8; 40];
        request[8..16].copy_from_slice(&0x1234_5678_9abc_u64.to_ne_bytes());
        mem.write_slice(&request, GuestAddress(0x100)).unwrap();
        // The reply's data buffer outside memory (a DAX window chunk).
        let chain = [
            Descriptor::new(0x100, 40, 0, 0),
            Descriptor::new(0x800, 16, WRITE, 0),
            Descriptor::new(0x10_0000, 4096, WRITE, 0),
        ];
        let e = split_chain(&mem, chain.into_iter()).err().expect("refused");
        assert_eq!(
            refuse(&mem, chain.into_iter(), e.errno()),
            Some((0x800, 16))
        );
        let mut reply = [0u8; 16];
        mem.read_slice(&mut reply, GuestAddress(0x800)).unwrap();
        assert_eq!(u32::from_ne_bytes(reply[..4].try_into().unwrap()), 16);
        assert_eq!(
            i32::from_ne_bytes(reply[4..8].try_into().unwrap()),
            -libc::EFAULT
        );
        assert_eq!(reply[8..], request[8..16], "the request's unique id");

        // Nothing to answer with: no header, no room, or the header outside.
        for chain in [
            vec![Descriptor::new(0x800, 16, WRITE, 0)],
            vec![
                Descriptor::new(0x100, 8, 0, 0),
                Descriptor::new(0x800, 16, WRITE, 0),
            ],
            vec![
                Descriptor::new(0x100, 40, 0, 0),
                Descriptor::new(0x800, 8, WRITE, 0),
            ],
            vec![Descriptor::new(0x100, 40, 0, 0)],
            vec![
                Descriptor::new(0x10_0000, 40, 0, 0),
                Descriptor::new(0x800, 16, WRITE, 0),
            ],
            vec![
                Descriptor::new(0x100, 40, 0, 0),
                Descriptor::new(0x10_0000, 16, WRITE, 0),
            ],
        ] {
            assert_eq!(refuse(&mem, chain.into_iter(), libc::EFAULT), None);
        }
    }

    fn tempfile() -> std::fs::File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("xvfs-chain-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
