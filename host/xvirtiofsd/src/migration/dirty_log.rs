// SPDX-License-Identifier: Apache-2.0
//! The dirty-page log of a VM live migration (VHOST_F_LOG_ALL with
//! VHOST_USER_PROTOCOL_F_LOG_SHMFD): a bitmap the front-end shares, one bit
//! per 4 KiB page of guest physical memory. While logging is on, every
//! guest page the daemon writes (reply buffers, the used ring) is marked, so
//! that QEMU sends it again; without it a page written after QEMU copied it
//! would reach the destination stale.

use std::fs::File;
use std::sync::atomic::{AtomicU8, Ordering};

use vm_memory::{FileOffset, MmapRegion};

/// Size of a logged page (`VHOST_LOG_PAGE`).
pub const LOG_PAGE: u64 = 0x1000;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("dirty log of {0} bytes is too large or empty")]
    Size(u64),
    #[error("cannot map the dirty log")]
    Map(#[source] vm_memory::mmap::MmapRegionError),
}

/// The mapped bitmap.
#[derive(Debug)]
pub struct DirtyLog {
    map: MmapRegion,
}

impl DirtyLog {
    /// Maps `size` bytes of `file` from `offset` (SET_LOG_BASE).
    pub fn map(file: File, size: u64, offset: u64) -> Result<DirtyLog, LogError> {
        let len = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0 && size <= 1 << 40 && offset.checked_add(size).is_some())
            .ok_or(LogError::Size(size))?;
        let map =
            MmapRegion::from_file(FileOffset::new(file, offset), len).map_err(LogError::Map)?;
        Ok(DirtyLog { map })
    }

    /// Marks every page of `[gpa, gpa + len)` dirty. Pages beyond the log
    /// (the front-end sized it to cover all guest memory) are not marked.
    pub fn mark(&self, gpa: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = gpa / LOG_PAGE;
        let last = gpa.saturating_add(len - 1) / LOG_PAGE;
        let size = self.map.size() as u64;
        for page in first..=last {
            let byte = page / 8;
            if byte >= size {
                return;
            }
            // SAFETY: `byte` is inside the mapping (checked above), which
            // lives as long as `self`; the front-end reads and clears the
            // bitmap concurrently, so every access is atomic.
            let cell = unsafe { AtomicU8::from_ptr(self.map.as_ptr().add(byte as usize)) };
            cell.fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }
}

/// What a queue worker logs, while logging is on.
#[derive(Debug, Clone)]
pub struct LogTarget {
    pub log: std::sync::Arc<DirtyLog>,
    /// Where writes to the used ring are logged (`log_guest_addr`, when the
    /// ring has VHOST_VRING_F_LOG) and how many bytes it spans.
    pub used: Option<(u64, u64)>,
}

impl LogTarget {
    /// Marks the used ring (after an element, the index or the avail event
    /// was written).
    pub fn mark_used(&self) {
        if let Some((gpa, len)) = self.used {
            self.log.mark(gpa, len);
        }
    }
}

/// Bytes of a split ring's used ring of `size` entries, avail event included.
pub fn used_ring_bytes(size: u16) -> u64 {
    4 + 8 * u64::from(size) + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(size: u64) -> (DirtyLog, File) {
        let f = crate::sys::memfd("xvfs-log-test").unwrap();
        f.set_len(size).unwrap();
        (DirtyLog::map(f.try_clone().unwrap(), size, 0).unwrap(), f)
    }

    fn bits(f: &File) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut b = vec![0u8; f.metadata().unwrap().len() as usize];
        f.read_exact_at(&mut b, 0).unwrap();
        b
    }

    #[test]
    fn pages_of_a_range_are_marked_and_nothing_else() {
        let (log, f) = log_of(4);
        log.mark(0x1000, 1); // page 1
        log.mark(0x2fff, 2); // pages 2 and 3
        log.mark(9 * 0x1000 + 5, 0x1000); // pages 9 and 10
        assert_eq!(bits(&f), vec![0b0000_1110, 0b0000_0110, 0, 0]);
    }

    #[test]
    fn beyond_the_log_nothing_is_written() {
        let (log, f) = log_of(1);
        log.mark(7 * 0x1000, 3 * 0x1000); // pages 7, 8, 9: only 7 fits
        log.mark(u64::MAX - 10, 100);
        assert_eq!(bits(&f), vec![0b1000_0000]);
    }

    #[test]
    fn an_empty_log_is_refused() {
        let f = crate::sys::memfd("xvfs-log-test").unwrap();
        assert!(matches!(DirtyLog::map(f, 0, 0), Err(LogError::Size(0))));
    }
}
