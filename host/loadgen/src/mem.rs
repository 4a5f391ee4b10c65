// SPDX-License-Identifier: Apache-2.0
//! Guest memory: one memfd, mapped shared here and handed to the back-end
//! with SET_MEM_TABLE. Guest physical address 0 is the start of the memfd.
//!
//! The back-end (another process) reads and writes this memory concurrently,
//! so nothing here hands out Rust references to it except atomics: bytes are
//! copied in and out through raw pointers, and ring indices are accessed as
//! `AtomicU16`. All the `unsafe` of the crate's memory access lives here.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::AtomicU16;

/// Errors of setting up guest memory.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// memfd_create failed.
    #[error("memfd_create")]
    Memfd(#[source] io::Error),
    /// Sizing the memfd failed.
    #[error("sizing the memfd to {0} bytes")]
    Size(usize, #[source] io::Error),
    /// mmap failed.
    #[error("mapping {0} bytes of guest memory")]
    Mmap(usize, #[source] io::Error),
}

/// A shared mapping of a memfd.
pub struct GuestMem {
    file: File,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping lives as long as `GuestMem` and is only accessed through
// raw-pointer copies and atomics, which are fine from any thread (concurrent
// writers to the same bytes are the protocol's business, as in any virtqueue).
unsafe impl Send for GuestMem {}
// SAFETY: as above; no method hands out a non-atomic reference.
unsafe impl Sync for GuestMem {}

impl GuestMem {
    /// Creates a memfd of `len` bytes (rounded up to 2 MiB) and maps it.
    pub fn new(len: usize) -> Result<GuestMem, MemError> {
        let len = len.div_ceil(2 << 20) * (2 << 20);
        // SAFETY: the name is a valid NUL-terminated string; the result is checked.
        let fd = unsafe { libc::memfd_create(c"xvfs-loadgen-guest".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(MemError::Memfd(io::Error::last_os_error()));
        }
        // SAFETY: fd was just created and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)
            .map_err(|e| MemError::Size(len, e))?;
        // SAFETY: a fresh shared mapping of a file we own, checked below; the
        // kernel picks the address so it overlaps nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemError::Mmap(len, io::Error::last_os_error()));
        }
        Ok(GuestMem {
            file,
            base: p.cast(),
            len,
        })
    }

    /// The memfd (for SET_MEM_TABLE).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Where the mapping sits in this process (the "userspace address" of
    /// vhost-user, which vring addresses are given in).
    pub fn host_addr(&self) -> u64 {
        self.base as u64
    }

    fn check(&self, gpa: u64, len: usize) -> usize {
        let off = usize::try_from(gpa).unwrap_or(usize::MAX);
        assert!(
            off <= self.len && len <= self.len - off,
            "guest access {gpa:#x}+{len} outside {} bytes",
            self.len
        );
        off
    }

    /// Copies `data` to guest address `gpa`.
    ///
    /// # Panics
    /// When the range is outside guest memory (a bug in the caller's layout).
    pub fn write(&self, gpa: u64, data: &[u8]) {
        let off = self.check(gpa, data.len());
        // SAFETY: the range is inside the mapping (checked); source and
        // destination cannot overlap since `data` is not guest memory handed
        // out by us (we never give out references into the mapping).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(off), data.len()) }
    }

    /// Copies guest memory at `gpa` into `out`.
    ///
    /// # Panics
    /// When the range is outside guest memory.
    pub fn read(&self, gpa: u64, out: &mut [u8]) {
        let off = self.check(gpa, out.len());
        // SAFETY: the range is inside the mapping (checked); `out` is ordinary memory.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), out.as_mut_ptr(), out.len()) }
    }

    /// Fills `len` bytes at `gpa` with `byte`.
    pub fn fill(&self, gpa: u64, byte: u8, len: usize) {
        let off = self.check(gpa, len);
        // SAFETY: the range is inside the mapping (checked).
        unsafe { std::ptr::write_bytes(self.base.add(off), byte, len) }
    }

    /// Reads a little-endian u16 (plain load; order it with fences or use `u16_at`).
    #[cfg(test)]
    pub fn read_u16(&self, gpa: u64) -> u16 {
        let mut b = [0u8; 2];
        self.read(gpa, &mut b);
        u16::from_le_bytes(b)
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, gpa: u64) -> u32 {
        let mut b = [0u8; 4];
        self.read(gpa, &mut b);
        u32::from_le_bytes(b)
    }

    /// Writes a little-endian u16.
    pub fn write_u16(&self, gpa: u64, v: u16) {
        self.write(gpa, &v.to_le_bytes());
    }

    /// The 16-bit ring field at `gpa` as an atomic (ring indices and event
    /// words). Little-endian host assumed (x86-64, aarch64), as virtio 1.0
    /// rings are little-endian.
    ///
    /// # Panics
    /// When `gpa` is outside guest memory or not 2-byte aligned.
    pub fn u16_at(&self, gpa: u64) -> &AtomicU16 {
        let off = self.check(gpa, 2);
        assert_eq!(off % 2, 0, "unaligned ring field {gpa:#x}");
        // SAFETY: in bounds and aligned (checked); the mapping outlives `&self`;
        // AtomicU16 has the layout of u16 and every access through it is atomic,
        // which is what a location shared with another process needs.
        unsafe { &*self.base.add(off).cast::<AtomicU16>() }
    }
}

impl Drop for GuestMem {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; no reference into
        // the mapping outlives `self` (atomics borrow `&self`).
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn round_trips_and_rounds_up() {
        let m = GuestMem::new(4096).expect("mem");
        assert_eq!(m.len(), 2 << 20);
        m.write(100, b"hello");
        let mut b = [0u8; 5];
        m.read(100, &mut b);
        assert_eq!(&b, b"hello");
        m.u16_at(200).store(0xbeef, Ordering::Release);
        assert_eq!(m.read_u16(200), 0xbeef);
        m.write_u16(202, 7);
        assert_eq!(m.read_u32(200), 0x0007_beef);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_panics() {
        let m = GuestMem::new(4096).expect("mem");
        m.write((2 << 20) - 2, b"abc");
    }
}
