// SPDX-License-Identifier: Apache-2.0
//! [`Dax`] for [`PassthroughFs`]: the guest's DAX window. The device has a
//! shared-memory region (the window) that the VMM maps file ranges into
//! when asked ([`Mapper`], the vhost-user back-end channel's SHMEM_MAP and
//! SHMEM_UNMAP); the guest then reads and writes those files through its
//! own memory, with no FUSE round trip per access.
//!
//! Every range the guest asks for is checked: inside the window, aligned
//! to pages, a regular file of the share. The table of what is mapped
//! where lets a mapping be replaced (a read mapping upgraded for writing,
//! a window range reused after a failed removal) and dropped at the end
//! of a session. The VMM maps with a descriptor open for reading and
//! writing whatever the protection asked, so a read-only share gets no
//! mapping at all.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};

use super::table::lock;
use super::{err, Ctx, PassthroughFs};
use crate::filesystem::Dax;

/// Maps file ranges into the DAX window (the daemon's back-end channel to
/// the VMM).
pub trait Mapper: Send + Sync {
    /// Maps `len` bytes of `fd` at `file_offset` into the window at
    /// `window_offset` (writable if `writable`).
    fn map(
        &self,
        fd: BorrowedFd<'_>,
        file_offset: u64,
        window_offset: u64,
        len: u64,
        writable: bool,
    ) -> io::Result<()>;

    /// Unmaps the mapping made at `window_offset` with length `len`.
    fn unmap(&self, window_offset: u64, len: u64) -> io::Result<()>;
}

/// The alignment of mappings in the file and the window: a page.
pub const MAP_ALIGNMENT_LOG2: u16 = 12;

/// One mapping in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    node: u64,
    file_offset: u64,
    len: u64,
    writable: bool,
}

/// The window: its size, the mapper and what is mapped (by window offset).
pub(super) struct Window {
    mapper: Arc<dyn Mapper>,
    size: u64,
    maps: Mutex<BTreeMap<u64, Mapping>>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("size", &self.size).finish()
    }
}

impl Window {
    /// Unmaps every mapping that overlaps `start..end`.
    fn clear_range(&self, maps: &mut BTreeMap<u64, Mapping>, start: u64, end: u64) {
        let hit: Vec<(u64, u64)> = maps
            .range(..end)
            .filter(|(&at, m)| at + m.len > start)
            .map(|(&at, m)| (at, m.len))
            .collect();
        for (at, len) in hit {
            maps.remove(&at);
            if let Err(e) = self.mapper.unmap(at, len) {
                log::warn!("DAX: unmapping {len:#x} at {at:#x} of the window: {e}");
            }
        }
    }
}

impl PassthroughFs {
    /// Serves SETUPMAPPING and REMOVEMAPPING through `mapper` for a window
    /// of `size` bytes (a multiple of the page size).
    pub fn attach_mapper(&mut self, mapper: Arc<dyn Mapper>, size: u64) {
        self.dax = Some(Window {
            mapper,
            size,
            maps: Mutex::new(BTreeMap::new()),
        });
    }

    /// Whether a DAX window is served.
    pub fn has_dax_window(&self) -> bool {
        self.dax.is_some()
    }

    /// Drops every mapping (the session ends).
    pub(super) fn unmap_all(&self) {
        if let Some(w) = &self.dax {
            let mut maps = lock(&w.maps);
            w.clear_range(&mut maps, 0, u64::MAX);
        }
    }

    fn window(&self) -> io::Result<&Window> {
        self.dax.as_ref().ok_or_else(|| err(libc::ENOSYS))
    }
}

fn aligned(v: u64) -> bool {
    v & ((1 << MAP_ALIGNMENT_LOG2) - 1) == 0
}

impl Dax for PassthroughFs {
    fn setupmapping(
        &self,
        _: Ctx,
        node: u64,
        file_offset: u64,
        len: u64,
        writable: bool,
        window_offset: u64,
    ) -> io::Result<()> {
        let w = self.window()?;
        let end = window_offset
            .checked_add(len)
            .ok_or_else(|| err(libc::EINVAL))?;
        if len == 0 || end > w.size || !aligned(window_offset) || !aligned(file_offset) {
            return Err(err(libc::EINVAL));
        }
        file_offset
            .checked_add(len)
            .ok_or_else(|| err(libc::EINVAL))?;
        if self.cfg.readonly {
            return Err(err(libc::EROFS));
        }
        let inode = self.inode(node)?;
        if !inode.is_reg() {
            return Err(err(libc::EINVAL));
        }
        let fd = self.reopen(&inode, libc::O_RDWR)?;
        let mut maps = lock(&w.maps);
        w.clear_range(&mut maps, window_offset, end);
        w.mapper
            .map(fd.as_fd(), file_offset, window_offset, len, writable)?;
        maps.insert(
            window_offset,
            Mapping {
                node,
                file_offset,
                len,
                writable,
            },
        );
        Ok(())
    }

    fn removemapping(&self, _: Ctx, ranges: &[(u64, u64)]) -> io::Result<()> {
        let w = self.window()?;
        let mut maps = lock(&w.maps);
        let mut res = Ok(());
        for &(at, len) in ranges {
            match maps.get(&at) {
                Some(m) if m.len == len => {
                    maps.remove(&at);
                    if let Err(e) = w.mapper.unmap(at, len) {
                        res = res.and(Err(e));
                    }
                }
                _ => res = res.and(Err(err(libc::EINVAL))),
            }
        }
        res
    }
}
