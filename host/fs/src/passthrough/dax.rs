// SPDX-License-Identifier: Apache-2.0
//! [`Dax`] for [`PassthroughFs`]: the guest's DAX window. The device has a
//! shared-memory region (the window) that the VMM maps file ranges into
//! when asked ([`Mapper`], the vhost-user back-end channel's SHMEM_MAP and
//! SHMEM_UNMAP); the guest then reads and writes those files through its
//! own memory, with no FUSE round trip per access.
//!
//! Every range the guest asks for is checked: inside the window, aligned
//! to pages (its length too), a regular file of the share. The table of
//! what is mapped where lets a mapping be replaced (a read mapping upgraded
//! for writing, a window range reused after a failed removal) and dropped
//! at the end of a session; a mapping whose removal failed stays in it. The
//! VMM maps with a descriptor open for reading and writing whatever the
//! protection asked, so a read-only share gets no mapping at all. Only
//! ranges wholly inside a non-empty file are mapped (QEMU 11.1 refuses the
//! others, and would grow an empty file).
//!
//! Stores through the window are writes the host kernel never sees, so it
//! cannot clear a file's privileges as it does on a write: a writable
//! mapping clears them when it is made ([`kill_privileges`]), and a file
//! that has them gets no read mapping (QEMU maps that writable too).
//!
//! The window also knows the file systems (device numbers) its files are
//! on: QEMU adds each mapping to guest memory, backed by the mapped file,
//! and a region on one of them is a window chunk the daemon must never map
//! ([`PassthroughFs::is_window_file`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::table::lock;
use super::{err, Ctx, PassthroughFs};
use crate::filesystem::Dax;
use crate::state::MappingState;
use crate::sys;
use crate::sys::Stat;

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

/// The window: its size, the mapper and what is mapped (each mapping by
/// its window offset).
pub(super) struct Window {
    mapper: Arc<dyn Mapper>,
    size: u64,
    maps: Mutex<BTreeMap<u64, MappingState>>,
    /// The file systems of the share root and of every file a map was
    /// asked for (noted before the front-end hears of it). Never shrinks:
    /// a guest cannot make the daemon forget it, as it could forget a node.
    devices: Mutex<BTreeSet<u64>>,
    /// Whether `maps` is all the front-end has mapped. Not after a crash
    /// restart (the table died with the process): then a range the guest
    /// names but the table lacks may still be mapped in the front-end.
    complete: AtomicBool,
    /// A map or unmap was given up before the front-end answered (its
    /// deadline, or a device stop): the front-end may still carry it out,
    /// so `maps` is never complete again, even after a reset.
    abandoned: AtomicBool,
    counts: Counters,
}

/// What the window has done since the daemon started, and holds now.
/// Read without the table's lock, which a map holds while the front-end
/// answers (the metrics file and a checkpoint must not wait on QEMU).
#[derive(Debug, Default)]
struct Counters {
    mapped: AtomicU64,
    peak: AtomicU64,
    maps: AtomicU64,
    unmaps: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// The window's figures (`--metrics-file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct DaxCounts {
    /// The window's size in bytes.
    pub window: u64,
    /// Ranges mapped now.
    pub mapped: u64,
    /// The most ranges mapped at once (each is a guest-memory region of
    /// every vhost-user back-end: QEMU allows 512).
    pub peak: u64,
    /// Mappings made (SHMEM_MAP answered 0).
    pub maps: u64,
    /// Mappings removed (SHMEM_UNMAP sent: REMOVEMAPPING, replaced, session end).
    pub unmaps: u64,
    /// SETUPMAPPINGs refused here: outside the window or the file, a
    /// read-only share, not a regular file, a file whose privileges could
    /// not be cleared.
    pub refused: u64,
    /// Maps and unmaps the front-end refused or did not answer.
    pub failed: u64,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("size", &self.size).finish()
    }
}

/// The window's state for a successor (live upgrade, crash restart).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WindowState {
    /// The front-end's mappings, as far as the table knows them.
    pub mappings: Vec<MappingState>,
    /// Whether `mappings` is all the front-end has mapped.
    pub complete: bool,
    /// A map or unmap was given up before the front-end answered.
    pub abandoned: bool,
    /// The file systems whose files are window chunks in guest memory.
    pub devices: Vec<u64>,
}

/// The window offsets of the mappings in `maps` that overlap
/// `start..end`. The table's mappings do not overlap one another, so of
/// those that start before `end`, the later one starts the later it ends.
fn overlapping(maps: &BTreeMap<u64, MappingState>, start: u64, end: u64) -> Vec<u64> {
    maps.range(..end)
        .rev()
        .take_while(|(&at, m)| at.saturating_add(m.len) > start)
        .map(|(&at, _)| at)
        .collect()
}

impl Window {
    /// Unmaps every mapping that overlaps `start..end`. One the front-end
    /// does not unmap stays in the table: the front-end may still have it.
    fn clear_range(&self, maps: &mut BTreeMap<u64, MappingState>, start: u64, end: u64) {
        for at in overlapping(maps, start, end) {
            let Some(len) = maps.get(&at).map(|m| m.len) else {
                continue;
            };
            match self.unmap(at, len) {
                Ok(()) => {
                    maps.remove(&at);
                }
                Err(e) => log::warn!("DAX: unmapping {len:#x} at {at:#x} of the window: {e}"),
            }
        }
    }

    /// Notes the table's size after a change.
    fn recount(&self, maps: &BTreeMap<u64, MappingState>) {
        let n = maps.len() as u64;
        self.counts.mapped.store(n, Ordering::Relaxed);
        self.counts.peak.fetch_max(n, Ordering::Relaxed);
    }

    /// Notes a request the front-end may answer after all.
    fn check_abandoned(&self, r: &io::Result<()>) {
        if r.as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::TimedOut)
        {
            self.abandoned.store(true, Ordering::Relaxed);
            self.complete.store(false, Ordering::Relaxed);
        }
    }

    fn unmap(&self, at: u64, len: u64) -> io::Result<()> {
        let r = self.mapper.unmap(at, len);
        self.check_abandoned(&r);
        let c = if r.is_ok() {
            &self.counts.unmaps
        } else {
            &self.counts.failed
        };
        c.fetch_add(1, Ordering::Relaxed);
        r
    }
}

impl PassthroughFs {
    /// Serves SETUPMAPPING and REMOVEMAPPING through `mapper` for a window
    /// of `size` bytes (a multiple of the page size).
    pub fn attach_mapper(&mut self, mapper: Arc<dyn Mapper>, size: u64) {
        let root = self.inodes.root().key.0;
        self.dax = Some(Window {
            mapper,
            size,
            maps: Mutex::new(BTreeMap::new()),
            devices: Mutex::new(BTreeSet::from([root])),
            complete: AtomicBool::new(true),
            abandoned: AtomicBool::new(false),
            counts: Counters::default(),
        });
    }

    /// The window's figures, if a window is served.
    pub fn dax_counts(&self) -> Option<DaxCounts> {
        let w = self.dax.as_ref()?;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Some(DaxCounts {
            window: w.size,
            mapped: get(&w.counts.mapped),
            peak: get(&w.counts.peak),
            maps: get(&w.counts.maps),
            unmaps: get(&w.counts.unmaps),
            refused: get(&w.counts.refused),
            failed: get(&w.counts.failed),
        })
    }

    /// Whether a DAX window is served.
    pub fn has_dax_window(&self) -> bool {
        self.dax.is_some()
    }

    /// Whether `fd` is a file on a file system of the share's mapped files
    /// (or of its root). With a window, a memory region the front-end backs
    /// with such a file is taken for a chunk of the window (QEMU adds every
    /// mapping to guest memory), never for guest RAM, and must not be
    /// mapped: a host process or the guest may shrink the file under it,
    /// and a touch would then be SIGBUS in the daemon. Decided by what the
    /// window noted, which the guest cannot make it drop (a node, which
    /// the guest can forget, would not do). Guest RAM backed by a file on
    /// the share's file system is therefore not served with a window.
    pub fn is_window_file(&self, fd: BorrowedFd<'_>) -> bool {
        let Some(w) = &self.dax else {
            return false;
        };
        // A descriptor that cannot be examined is not mapped either.
        sys::stat_fd(fd).map_or(true, |st| lock(&w.devices).contains(&st.st_dev))
    }

    /// The window's state for a successor. Without `with_mappings` (a
    /// crash-restart checkpoint, taken while a map may be waiting on the
    /// front-end with the table locked) the mappings are left out: nothing
    /// here waits for a map in progress.
    pub fn window_state(&self, with_mappings: bool) -> Option<WindowState> {
        let w = self.dax.as_ref()?;
        Some(WindowState {
            mappings: if with_mappings {
                lock(&w.maps).values().copied().collect()
            } else {
                Vec::new()
            },
            complete: w.complete.load(Ordering::Relaxed),
            abandoned: w.abandoned.load(Ordering::Relaxed),
            devices: lock(&w.devices).iter().copied().collect(),
        })
    }

    /// Takes over a predecessor's window (the front-end still has its
    /// mappings): each mapping must lie inside the window apart from the
    /// others. A node the guest has forgotten since is no reason to refuse
    /// (the front-end keeps the mapping all the same); a node that is not
    /// a regular file is. When the state may be short of the truth
    /// (`unsure`: a crash restart's checkpoint, which leaves the mappings
    /// out, or a state that did not carry the rest), the table is not
    /// complete and the devices of every node known are added.
    pub fn restore_window(&self, st: &WindowState, unsure: bool) -> io::Result<()> {
        let w = self.window()?;
        let mut table = lock(&w.maps);
        for m in &st.mappings {
            let end = m.window_offset.checked_add(m.len);
            let overlap = !overlapping(&table, m.window_offset, end.unwrap_or(u64::MAX)).is_empty();
            if end.is_none_or(|e| e > w.size) || overlap || m.len == 0 || !aligned(m.len) {
                return Err(invalid(format!(
                    "DAX mapping at {:#x} outside the window or overlapping",
                    m.window_offset
                )));
            }
            if self.inodes.get(m.node).is_some_and(|i| !i.is_reg()) {
                return Err(invalid(format!(
                    "DAX mapping of node {}: not a regular file",
                    m.node
                )));
            }
            table.insert(m.window_offset, *m);
        }
        w.recount(&table);
        let mut devices = lock(&w.devices);
        devices.extend(st.devices.iter().copied());
        if unsure {
            devices.extend(self.inodes.all().iter().map(|i| i.key.0));
        }
        w.complete.store(st.complete && !unsure, Ordering::Relaxed);
        w.abandoned.store(st.abandoned, Ordering::Relaxed);
        Ok(())
    }

    /// Forgets every mapping without unmapping it: the front-end dropped
    /// them itself (a device reset).
    pub fn forget_mappings(&self) {
        if let Some(w) = &self.dax {
            let mut maps = lock(&w.maps);
            maps.clear();
            w.recount(&maps);
            w.complete
                .store(!w.abandoned.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Drops every mapping (the session ends).
    pub(super) fn unmap_all(&self) {
        if let Some(w) = &self.dax {
            let mut maps = lock(&w.maps);
            w.clear_range(&mut maps, 0, u64::MAX);
            w.recount(&maps);
        }
    }

    fn window(&self) -> io::Result<&Window> {
        self.dax.as_ref().ok_or_else(|| err(libc::ENOSYS))
    }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Whether `len` bytes at `offset` lie inside a file of `size` bytes.
/// QEMU 11.1 refuses a mapping that reaches past the end of the file, and
/// it would grow an empty file to the mapping's end (`file_ram_alloc`), so
/// an empty file is never mapped.
fn within_file(size: i64, offset: u64, len: u64) -> bool {
    u64::try_from(size)
        .is_ok_and(|size| size > 0 && offset.checked_add(len).is_some_and(|end| end <= size))
}

fn aligned(v: u64) -> bool {
    v & ((1 << MAP_ALIGNMENT_LOG2) - 1) == 0
}

/// The mode bits a write by an unprivileged writer clears (the kernel's
/// `should_remove_suid`): set-user-ID, and set-group-ID with group execute
/// (without it the bit means mandatory locking, not privilege).
fn setid_bits(mode: u32) -> u32 {
    let mut bits = mode & libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        bits |= libc::S_ISGID;
    }
    bits
}

/// Whether the file carries capabilities (`security.capability`).
fn has_capabilities(fd: BorrowedFd<'_>) -> io::Result<bool> {
    match sys::fgetxattr(fd, c"security.capability", &mut []) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What a write does to a file's privileges, for a mapping about to be
/// made of `fd` (whose attributes are `st`): a writable one clears them as
/// the host kernel does on a write by an unprivileged writer (set-user-ID,
/// set-group-ID with group execute, the file capabilities), since nobody
/// can tell who will store through it; a read-only one of a privileged file
/// is refused (EPERM), because QEMU 11.1 maps every range writable and a
/// hostile guest could store through it all the same. A privilege that
/// cannot be cleared refuses the mapping.
fn kill_privileges(fd: BorrowedFd<'_>, st: &Stat, writable: bool) -> io::Result<()> {
    let bits = setid_bits(st.st_mode);
    let caps = has_capabilities(fd)?;
    if bits == 0 && !caps {
        return Ok(());
    }
    if !writable {
        log::debug!("DAX: no read mapping of a file with set-ID bits or capabilities");
        return Err(err(libc::EPERM));
    }
    if bits != 0 {
        sys::fchmod(fd, st.st_mode & 0o7777 & !bits)?;
    }
    if caps {
        match sys::fremovexattr(fd, c"security.capability") {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => return Err(e),
            _ => {}
        }
    }
    Ok(())
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
        let fd = self
            .mappable(w, node, file_offset, len, window_offset)
            .and_then(|(fd, st)| kill_privileges(fd.as_fd(), &st, writable).map(|()| (fd, st)))
            .inspect_err(|_| {
                w.counts.refused.fetch_add(1, Ordering::Relaxed);
            })
            .map(|(fd, st)| {
                // Before the front-end can announce the chunk in guest memory.
                lock(&w.devices).insert(st.st_dev);
                fd
            })?;
        let end = window_offset + len;
        let mut maps = lock(&w.maps);
        w.clear_range(&mut maps, window_offset, end);
        if !w.complete.load(Ordering::Relaxed) {
            // Refused when nothing is mapped there: that is fine.
            let _ = w.mapper.unmap(window_offset, len);
        }
        let r = w
            .mapper
            .map(fd.as_fd(), file_offset, window_offset, len, writable);
        w.check_abandoned(&r);
        match &r {
            Ok(()) => {
                w.counts.maps.fetch_add(1, Ordering::Relaxed);
                // The front-end maps nothing over another mapping: any entry
                // left there (its removal failed) was not one.
                for at in overlapping(&maps, window_offset, end) {
                    maps.remove(&at);
                }
                maps.insert(
                    window_offset,
                    MappingState {
                        window_offset,
                        node,
                        file_offset,
                        len,
                        writable,
                    },
                );
            }
            Err(_) => {
                w.counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        w.recount(&maps);
        r
    }

    fn removemapping(&self, _: Ctx, ranges: &[(u64, u64)]) -> io::Result<()> {
        let w = self.window()?;
        let mut maps = lock(&w.maps);
        let mut res = Ok(());
        for &(at, len) in ranges {
            match maps.get(&at) {
                // One the front-end does not remove stays known: the guest
                // may ask again, and a map there first removes it.
                Some(m) if m.len == len => match w.unmap(at, len) {
                    Ok(()) => {
                        maps.remove(&at);
                    }
                    Err(e) => res = res.and(Err(e)),
                },
                None if !w.complete.load(Ordering::Relaxed) => {
                    if let Err(e) = w.unmap(at, len) {
                        res = res.and(Err(e));
                    }
                }
                _ => res = res.and(Err(err(libc::EINVAL))),
            }
        }
        w.recount(&maps);
        res
    }
}

impl PassthroughFs {
    /// SETUPMAPPING's checks: a descriptor of the file to map and its
    /// attributes, or why `len` bytes of `node` at `file_offset` may not go
    /// to `window_offset`. The length is whole pages, as every mapping of
    /// the front-end's is (a successor refuses any other).
    fn mappable(
        &self,
        w: &Window,
        node: u64,
        file_offset: u64,
        len: u64,
        window_offset: u64,
    ) -> io::Result<(OwnedFd, Stat)> {
        let end = window_offset
            .checked_add(len)
            .ok_or_else(|| err(libc::EINVAL))?;
        let pages = aligned(window_offset) && aligned(file_offset) && aligned(len);
        if len == 0 || end > w.size || !pages {
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
        let st = sys::fstatat(fd.as_fd(), c"", libc::AT_EMPTY_PATH)?;
        if !within_file(st.st_size, file_offset, len) {
            log::debug!(
                "DAX: node {node}: {len:#x} at {file_offset:#x} is not inside the file \
                 ({:#x} bytes); QEMU maps only whole ranges of a file",
                st.st_size
            );
            return Err(err(libc::EIO));
        }
        Ok((fd, st))
    }
}
