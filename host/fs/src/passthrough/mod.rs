// SPDX-License-Identifier: Apache-2.0
//! A file system that passes every operation through to a host directory.
//!
//! # Confinement
//!
//! The guest is hostile. Nothing it sends can reach outside `root_dir`:
//!
//! - every inode is held as an `O_PATH | O_NOFOLLOW` descriptor, and a name is
//!   only ever resolved as a single component, relative to its parent's
//!   descriptor (`*at()` calls), so there is no path walk to redirect;
//! - names with `/` or NUL, empty names, `.` and `..` are refused by the
//!   FUSE layer before a request reaches this file system (LOOKUP of `..` at
//!   the root gives the root);
//! - symlinks are never followed: lookups use `O_NOFOLLOW`, attributes are read
//!   with `AT_SYMLINK_NOFOLLOW`, and only regular files and directories are ever
//!   re-opened through `/proc/self/fd` (re-opening a symlink's `O_PATH`
//!   descriptor there would follow it); READLINK returns the text only;
//! - only regular files and directories are ever opened for I/O, so device
//!   nodes a guest may create never reach a host driver through this daemon;
//! - renames and links are descriptor-relative, so concurrent renames cannot
//!   move an operation outside the tree.
//!
//! No path is opened by absolute name after [`PassthroughFs::new`], which opens
//! `root_dir` and `/proc/self/fd` before the daemon enters its sandbox.
//!
//! # Credentials and modes
//!
//! See [`creds`]: creation runs under the caller's fs uid/gid when the process
//! is root. FUSE_DONT_MASK is not negotiated, so the guest kernel has already
//! applied the caller's umask to every mode; [`PassthroughFs::new`] therefore
//! sets the process umask to 0 so the host does not mask a second time.

mod config;
mod crash;
mod creds;
mod dax;
mod extended;
mod files;
mod handles;
mod keep;
mod locks;
mod migrate;
mod nodes;
mod session;
mod table;
mod upgrade;
mod xattrmap;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use self::creds::CredGuard;
pub use self::dax::{DaxCounts, Mapper, WindowState, MAP_ALIGNMENT_LOG2};
pub use self::keep::{Keeper, Kept, KeptFiles};
pub use self::migrate::{LoadReport, SaveOptions};
use self::table::{lock, Handle, HandleTable, Inode, InodeTable};
pub use self::xattrmap::{XattrMap, XattrMapError};
use crate::abi::init_flags;
use crate::sys;

pub use self::config::{CachePolicy, Config, Error, HandleMode, Offer, SharedDir};

use crate::filesystem::{Context as Ctx, SetTime};
pub use crate::filesystem::{DirEntry, Entry, XattrReply};

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// Replaying a request whose outcome the crash left unknown
/// (`docs/crash-restart.md`): `errno` means the crashed process had done it,
/// so it is the success the guest was owed.
fn replayed(res: io::Result<()>, errno: i32) -> io::Result<()> {
    match res {
        Err(e) if e.raw_os_error() == Some(errno) && crate::journal::replaying().is_some() => {
            Ok(())
        }
        r => r,
    }
}

/// The `struct linux_dirent64` records of a `getdents64()` buffer, in
/// order; an impossible record length is EIO (and ends the records).
fn dirents(buf: &[u8]) -> impl Iterator<Item = io::Result<DirEntry<'_>>> {
    let mut pos = 0;
    let mut broken = false;
    std::iter::from_fn(move || {
        let rec = buf.get(pos..).filter(|r| r.len() >= 19 && !broken)?;
        // u64 ino, i64 off, u16 reclen, u8 type, NUL-terminated name.
        let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap_or_default());
        let off = u64::from_ne_bytes(rec[8..16].try_into().unwrap_or_default());
        let reclen = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
        let Some(rec) = rec.get(..reclen).filter(|_| reclen >= 19) else {
            broken = true;
            return Some(Err(err(libc::EIO)));
        };
        pos += reclen;
        let raw = &rec[19..];
        Some(Ok(DirEntry {
            ino,
            off,
            typ: u32::from(rec[18]),
            name: &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())],
        }))
    })
}

/// A SETATTR time for `utimensat()`.
fn timespec(t: Option<SetTime>) -> io::Result<libc::timespec> {
    let (tv_sec, tv_nsec) = match t {
        None => (0, libc::UTIME_OMIT),
        Some(SetTime::Now) => (0, libc::UTIME_NOW),
        Some(SetTime::At { nsec, .. }) if nsec >= 1_000_000_000 => {
            return Err(err(libc::EINVAL));
        }
        Some(SetTime::At { sec, nsec }) => (sec as i64, nsec.into()),
    };
    Ok(libc::timespec { tv_sec, tv_nsec })
}

/// The passthrough file system. `Send + Sync`: all state is behind sharded
/// locks or atomics.
#[derive(Debug)]
pub struct PassthroughFs {
    cfg: Config,
    proc_self_fd: OwnedFd,
    inodes: InodeTable,
    handles: HandleTable,
    /// INIT flags negotiated by the server (0 outside a session).
    negotiated: AtomicU64,
    /// Requests refused with EMFILE at [`Config::max_open`].
    refused_emfile: AtomicU64,
    switch_creds: bool,
    /// Nodes and handles a VM live migration could not bring along: the
    /// guest gets EIO for them until it forgets or releases them.
    lost: std::sync::Mutex<Lost>,
    /// Locks held for the guest (`-o posix_lock`, `-o flock`).
    locks: locks::LockTable,
    /// `--inode-file-handles`: a descriptor of each mount handles are
    /// opened on.
    mounts: handles::Mounts,
    /// `--inode-file-handles=prefer` found handles unusable: descriptors.
    handles_off: std::sync::atomic::AtomicBool,
    /// Crash restart: where files that lose their name are kept
    /// (`keep.rs`), and what was kept.
    keeper: Option<Arc<dyn Keeper>>,
    kept: std::sync::Mutex<keep::KeptSet>,
    /// Anything was ever kept or marked (a fast path for the others).
    any_kept: std::sync::atomic::AtomicBool,
    /// Every node and open file is kept, not only those that lose their
    /// name (`--crash-restart-keep all`).
    keep_all: bool,
    /// Kept by a crashed process and not wanted any more: let go once a
    /// keeper is attached.
    kept_rest: Vec<Kept>,
    /// Other processes' views of the share root (a live upgrade
    /// predecessor's, crashed processes'; their sandbox mounts of it), on
    /// which deleted files this process took over are.
    foreign_roots: Vec<OwnedFd>,
    /// The DAX window, when the daemon serves one (`dax.rs`).
    dax: Option<dax::Window>,
}

/// See [`PassthroughFs::lost`]: node id → lookup count, handle ids.
#[derive(Debug, Default)]
struct Lost {
    inodes: std::collections::HashMap<u64, u64>,
    handles: std::collections::HashSet<u64>,
}

impl PassthroughFs {
    /// Opens `cfg.root_dir` and `/proc/self/fd`, and sets the process umask to
    /// 0 (see the module documentation). Call before entering a sandbox.
    pub fn new(cfg: Config) -> Result<Self, Error> {
        let dir = SharedDir::open(&cfg.root_dir)?;
        let fs = Self::at(cfg, dir);
        fs.check_file_handles()?;
        Ok(fs)
    }

    /// A file system on `dir`, opened by the caller (from inside its
    /// sandbox), with the file-handle check of [`PassthroughFs::new`].
    pub fn on(cfg: Config, dir: SharedDir) -> Result<Self, Error> {
        let fs = Self::at(cfg, dir);
        fs.check_file_handles()?;
        Ok(fs)
    }

    /// A file system on a shared directory opened earlier (a live
    /// upgrade's successor opens it before entering its sandbox, where the
    /// path is no longer visible). `cfg.root_dir` is not opened again.
    pub fn at(cfg: Config, dir: SharedDir) -> Self {
        sys::umask(0);
        PassthroughFs {
            switch_creds: sys::geteuid() == 0,
            cfg,
            proc_self_fd: dir.proc_self_fd,
            inodes: InodeTable::new(dir.root, dir.key),
            handles: HandleTable::default(),
            negotiated: AtomicU64::new(0),
            refused_emfile: AtomicU64::new(0),
            lost: std::sync::Mutex::new(Lost::default()),
            locks: locks::LockTable::default(),
            mounts: handles::Mounts::default(),
            handles_off: std::sync::atomic::AtomicBool::new(false),
            keeper: None,
            dax: None,
            kept: std::sync::Mutex::new(keep::KeptSet::default()),
            any_kept: std::sync::atomic::AtomicBool::new(false),
            keep_all: false,
            kept_rest: Vec::new(),
            foreign_roots: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of inodes known to the guest, the root included.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Number of open handles.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    /// Inodes held as file handles now (`--inode-file-handles`).
    pub fn file_handle_count(&self) -> usize {
        self.inodes
            .all()
            .iter()
            .filter(|i| i.handle().is_some())
            .count()
    }

    /// Lookup count of node `id` (None if unknown).
    pub fn lookup_count(&self, id: u64) -> Option<u64> {
        self.inodes.get(id).map(|i| i.refs())
    }

    fn lost_lock(&self) -> std::sync::MutexGuard<'_, Lost> {
        lock(&self.lost)
    }

    fn negotiated(&self, flag: u64) -> bool {
        self.negotiated.load(Ordering::Relaxed) & flag != 0
    }

    // ----- helpers -----

    fn inode(&self, id: u64) -> io::Result<Arc<Inode>> {
        self.inodes
            .get(id)
            .ok_or_else(|| self.missing(|l| l.inodes.contains_key(&id)))
    }

    pub(crate) fn handle(&self, fh: u64) -> io::Result<Arc<Handle>> {
        self.handles
            .get(fh)
            .ok_or_else(|| self.missing(|l| l.handles.contains(&fh)))
    }

    /// The error for an unknown node or handle: EIO for one a migration
    /// lost (the guest still holds it), EBADF otherwise.
    fn missing(&self, lost: impl FnOnce(&Lost) -> bool) -> io::Error {
        if lost(&self.lost_lock()) {
            err(libc::EIO)
        } else {
            err(libc::EBADF)
        }
    }

    fn writable(&self) -> io::Result<()> {
        if self.cfg.readonly {
            Err(err(libc::EROFS))
        } else {
            Ok(())
        }
    }

    fn creds(&self, ctx: Ctx) -> io::Result<CredGuard> {
        CredGuard::switch(self.switch_creds, ctx.uid, ctx.gid)
    }

    /// While the guard lives, this thread lacks CAP_FSETID when the guest
    /// asked to clear setuid/setgid (KILLPRIV_V2): the host kernel then
    /// clears them on the write, truncate or open(O_TRUNC), as for an
    /// unprivileged writer, with the file capabilities.
    fn kill_priv(&self, ctx: Ctx) -> io::Result<Option<sys::CapsGuard>> {
        if ctx.kill_priv && self.cfg.killpriv_v2 {
            sys::without_fsetid().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Re-opens a regular file or directory through `/proc/self/fd`. Never for
    /// anything else: a symlink would be followed, a device would be opened.
    fn reopen(&self, inode: &Inode, flags: i32) -> io::Result<OwnedFd> {
        if !inode.is_reg() && !inode.is_dir() {
            return Err(err(libc::ENXIO));
        }
        let inode_fd = inode.fd()?;
        let name = sys::fd_name(inode_fd.as_raw_fd());
        sys::openat(
            self.proc_self_fd.as_fd(),
            &name,
            flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL),
            0,
        )
    }

    fn do_lookup(&self, parent: &Inode, name: &CStr) -> io::Result<Entry> {
        let fd = sys::openat(
            parent.fd()?.as_fd(),
            name,
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )?;
        // (Not `..`: the parent of a submount's root is no submount.)
        let submount = self.negotiated(init_flags::SUBMOUNTS)
            && !matches!(name.to_bytes(), b"." | b"..")
            && sys::mount_of(fd.as_fd())? != sys::mount_of(parent.fd()?.as_fd())?;
        let mut e = self.insert_fd(fd, Some((parent.id, name.to_bytes())))?;
        e.submount = submount && e.attr.st_mode & libc::S_IFMT == libc::S_IFDIR;
        Ok(e)
    }

    /// Registers the `O_PATH` descriptor `fd` (one lookup), reached through
    /// `origin` (parent and name) if by name.
    fn insert_fd(&self, fd: OwnedFd, origin: table::Origin<'_>) -> io::Result<Entry> {
        let st = sys::stat_fd(fd.as_fd())?;
        let created = std::cell::Cell::new(false);
        let inode = self
            .inodes
            .lookup_or_insert(
                fd,
                (st.st_dev, st.st_ino),
                st.st_mode & libc::S_IFMT,
                || self.room(1).is_ok(),
                |fd| {
                    created.set(true);
                    self.hold(fd, st.st_dev, st.st_mode & libc::S_IFMT)
                },
                origin,
            )?
            .ok_or_else(|| err(libc::EMFILE))?;
        if created.get() {
            self.new_node(&inode);
        }
        Ok(Entry {
            inode: inode.id,
            generation: inode.generation,
            attr: st,
            submount: false,
        })
    }

    /// Registers the inode behind an open regular file (CREATE, TMPFILE).
    fn insert_open_file(&self, file: &OwnedFd, origin: table::Origin<'_>) -> io::Result<Entry> {
        let name = sys::fd_name(file.as_raw_fd());
        let path = sys::openat(self.proc_self_fd.as_fd(), &name, libc::O_PATH, 0)?;
        self.insert_fd(path, origin)
    }

    /// The permission bits of a new or chmod-ed file of type `kind`, with
    /// setuid/setgid dropped under [`Config::no_setid`].
    fn guest_mode(&self, kind: u32, mode: u32) -> u32 {
        let mut m = mode & 0o7777;
        if self.cfg.no_setid {
            m &= if kind == libc::S_IFDIR {
                !libc::S_ISUID
            } else {
                !(libc::S_ISUID | libc::S_ISGID)
            };
        }
        m
    }

    fn dir(&self, id: u64) -> io::Result<Arc<Inode>> {
        let p = self.inode(id)?;
        if p.is_dir() {
            Ok(p)
        } else {
            Err(err(libc::ENOTDIR))
        }
    }

    /// Whether `n` more inodes or handles fit under [`Config::max_open`];
    /// EMFILE (counted) otherwise.
    fn room(&self, n: usize) -> io::Result<()> {
        let max = self.cfg.max_open;
        if max == 0 || self.held() + n <= max {
            return Ok(());
        }
        self.refused_emfile.fetch_add(1, Ordering::Relaxed);
        Err(err(libc::EMFILE))
    }

    /// Host descriptors held for the guest: inodes, open handles and the
    /// descriptions that hold its locks.
    fn held(&self) -> usize {
        self.inodes.len() + self.handles.len() + self.locks.len()
    }

    /// [`Config::max_open`].
    pub fn max_open(&self) -> usize {
        self.cfg.max_open
    }

    /// Inodes plus open handles held now, and requests refused with EMFILE
    /// at the cap so far (for metrics).
    pub fn open_counts(&self) -> (usize, u64) {
        (self.held(), self.refused_emfile.load(Ordering::Relaxed))
    }
}
