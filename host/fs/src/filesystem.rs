// SPDX-License-Identifier: Apache-2.0
//! The file system seam: what the FUSE server asks of a file system.
//!
//! [`FileSystem`] has one method per FUSE operation, in five families
//! ([`Session`], [`Nodes`], [`Files`], [`Locks`], [`Extended`]), with typed arguments
//! (node ids, a [`Context`], `&CStr` names, [`SetAttr`]) and typed replies
//! ([`Entry`], [`Stat`], [`Opened`], [`XattrReply`], ...). Every method but the
//! hooks defaults to `ENOSYS`. The server has checked every argument's shape
//! before calling (names are single components, bodies have the right size);
//! the file system checks meaning (does the node exist, may the caller do it).
//!
//! File data never goes through an intermediate buffer the server owns: READ
//! hands the file system a [`DataSink`] (the guest's reply buffer) and WRITE a
//! [`DataSource`] (the guest's request buffer). A host file is copied with
//! `preadv`/`pwritev` straight into or out of guest memory
//! ([`DataSink::copy_from_fd`], [`DataSource::copy_to_fd`]); an in-memory file
//! system uses the slice variants.
//!
//! This module imports nothing of the crate. Flag words (INIT flags, FOPEN_*
//! flags) carry the FUSE ABI's values ([`crate::abi`]).

use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Host attributes of a file (`struct stat64`).
pub type Stat = libc::stat64;

/// A time to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The current time.
    Now,
    /// This time (`nsec` as the guest sent it: may be out of range).
    At {
        /// Seconds since the epoch.
        sec: u64,
        /// Nanoseconds.
        nsec: u32,
    },
}

/// What SETATTR changes; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// The handle the change comes through (ftruncate of an open file).
    pub fh: Option<u64>,
    /// Permission bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<SetTime>,
    /// Modification time.
    pub mtime: Option<SetTime>,
}

/// Node id of the root directory.
pub const ROOT_ID: u64 = 1;

/// Caller identity from the request header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    /// uid of the calling guest process.
    pub uid: u32,
    /// gid of the calling guest process.
    pub gid: u32,
    /// pid of the calling guest process.
    pub pid: u32,
    /// The guest asks the file system to clear setuid/setgid (and file
    /// capabilities) as the host kernel does for an unprivileged writer
    /// (FUSE_HANDLE_KILLPRIV_V2: WRITE_KILL_SUIDGID, OPEN_KILL_SUIDGID,
    /// FATTR_KILL_SUIDGID). Only ever set when that was negotiated.
    pub kill_priv: bool,
    /// The caller's umask, for the file system to apply when no default ACL
    /// of the parent takes its place (FUSE_DONT_MASK negotiated; else 0:
    /// the guest kernel applied it to the mode).
    pub umask: u32,
    /// SETXATTR of `system.posix_acl_access`: clear the setgid bit first
    /// (FUSE_SETXATTR_ACL_KILL_SGID: the caller is not in the file's group).
    pub acl_kill_sgid: bool,
}

/// An entry handed to the guest: a node id and the file's attributes. Each one
/// returned counts as one lookup, undone by [`Nodes::forget`].
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Node id (0 never; [`ROOT_ID`] for the root).
    pub inode: u64,
    /// Generation of the node id.
    pub generation: u64,
    /// Attributes.
    pub attr: Stat,
    /// A directory on another mount than its parent's, announced to the
    /// guest (FUSE_ATTR_SUBMOUNT).
    pub submount: bool,
}

/// An open file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// Handle id.
    pub fh: u64,
    /// FOPEN_* flags for the guest ([`crate::abi::fopen`]).
    pub flags: u32,
}

/// A directory entry.
#[derive(Debug, Clone, Copy)]
pub struct DirEntry<'a> {
    /// Inode number.
    pub ino: u64,
    /// Offset of the next entry.
    pub off: u64,
    /// `d_type`.
    pub typ: u32,
    /// Name, without NUL.
    pub name: &'a [u8],
}

/// What a lock request asks for (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Shared (a read lock; `LOCK_SH` for flock).
    Read,
    /// Exclusive (a write lock; `LOCK_EX`).
    Write,
    /// None: unlock (GETLK's answer when nothing conflicts).
    Unlock,
}

/// A byte-range lock, as FUSE gives it: `start..=end`, with `end`
/// [`Lock::TO_END`] for "to the end of the file" (flock locks are whole-file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock {
    /// Shared, exclusive or none.
    pub kind: LockKind,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// The holder's process id as the file system sees it (GETLK; 0 when
    /// it is not a process of this guest).
    pub pid: u32,
}

impl Lock {
    /// `end` of a lock that reaches the end of the file (`OFFSET_MAX`).
    pub const TO_END: u64 = i64::MAX as u64;
}

/// Who holds a lock: the guest's lock owner and whether it is a flock
/// (whole-file, `flock(2)`) rather than a POSIX record lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockOwner {
    /// The guest's `lock_owner` (its process's files for POSIX locks, its
    /// open file for flock).
    pub owner: u64,
    /// A flock lock.
    pub flock: bool,
}

/// Result of GETXATTR or LISTXATTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrReply {
    /// The size of the value (the guest asked with size 0).
    Size(u32),
    /// The value.
    Value(Vec<u8>),
}

/// File system statistics (`struct statfs64`).
pub type StatFs = libc::statfs64;

/// What a file system can do; read once by the server when it is built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// INIT flags ([`crate::abi::init_flags`]) the file system can serve; the
    /// server negotiates the intersection with what the guest offers.
    pub init_flags: u64,
    /// Serve the xattr requests (else they get `ENOSYS` before parsing).
    pub xattr: bool,
    /// Serve READDIRPLUS (else `ENOSYS`).
    pub readdirplus: bool,
    /// Refuse WRITE with `EROFS` before touching anything.
    pub readonly: bool,
    /// Entry and attribute timeout handed to the guest.
    pub timeout: Duration,
    /// INIT flags without which the session is refused (EPROTO).
    pub required_init_flags: u64,
    /// UID/GID translation between guest and host (identity by default).
    pub ids: crate::ids::Translation,
    /// log2 of the alignment of DAX mappings in the file and the window
    /// (FUSE_MAP_ALIGNMENT), when [`crate::abi::init_flags::MAP_ALIGNMENT`]
    /// is among `init_flags`.
    pub map_alignment: u16,
}

/// Where READ data goes (the reply buffer in guest memory).
pub trait DataSink {
    /// Bytes the sink still takes.
    fn room(&self) -> usize;
    /// Copies up to `len` bytes of `fd` at `offset` (preadv-like, no staging).
    /// Returns how many were copied (0 at end of file).
    fn copy_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize>;
    /// Copies as much of `buf` as fits; returns how much.
    fn copy_from_slice(&mut self, buf: &[u8]) -> io::Result<usize>;
}

/// Where WRITE data comes from (the request buffer in guest memory).
pub trait DataSource {
    /// Bytes not yet consumed.
    fn remaining(&self) -> usize;
    /// Writes up to `len` bytes to `fd` at `offset` (pwritev-like, no staging);
    /// returns how many were written and consumed.
    fn copy_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize>;
    /// Fills `buf` with the next `buf.len()` bytes (fails if fewer remain).
    fn copy_to_slice(&mut self, buf: &mut [u8]) -> io::Result<()>;
}

fn nosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Everything the FUSE server asks of a file system: one method per FUSE
/// operation, in six families, each a trait of its own so that a file
/// system implements each family where those operations live. Every method
/// but [`Session::capabilities`] and the hooks defaults to `ENOSYS`. Called
/// concurrently by every queue worker.
pub trait FileSystem: Session + Nodes + Files + Locks + Extended + Dax {}

impl<T: Session + Nodes + Files + Locks + Extended + Dax> FileSystem for T {}

/// The session: what the file system offers, and the FUSE session starting,
/// resuming and ending. Part of [`FileSystem`].
#[allow(unused_variables)]
pub trait Session: Send + Sync {
    /// What this file system supports.
    fn capabilities(&self) -> Capabilities;

    /// A session starts (INIT) with the `negotiated` flags: forget everything
    /// of an earlier session.
    fn init(&self, negotiated: u64) {}

    /// A session saved by an earlier process resumes (live upgrade): keep the
    /// tables, apply the `negotiated` flags.
    fn resume(&self, negotiated: u64) {}

    /// The session ends (DESTROY): drop every node but the root and every
    /// handle.
    fn destroy(&self) {}

    /// The session the server now speaks (None: none), after INIT, DESTROY
    /// or a resume: for a file system that records it (crash restart).
    fn session_changed(&self, session: Option<crate::SessionState>) {}
}

/// Names and attributes: the nodes of the tree and their names (LOOKUP to
/// LINK), and what the whole file system reports (STATFS, ACCESS, SYNCFS). Part
/// of [`FileSystem`].
#[allow(unused_variables)]
pub trait Nodes: Session {
    /// LOOKUP `name` in `parent` (`.` and `..` included).
    fn lookup(&self, ctx: Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        nosys()
    }

    /// FORGET: drop `count` lookups of `node`. Also BATCH_FORGET, per node.
    fn forget(&self, node: u64, count: u64) {}

    /// GETATTR.
    fn getattr(&self, ctx: Context, node: u64) -> io::Result<Stat> {
        nosys()
    }

    /// STATX: what `statx(2)` gives (birth time included); `flags` are the
    /// guest's `AT_STATX_*` sync flags, `mask` the fields it asks for.
    fn statx(&self, ctx: Context, node: u64, flags: u32, mask: u32) -> io::Result<libc::statx> {
        nosys()
    }

    /// SETATTR.
    fn setattr(&self, ctx: Context, node: u64, attr: &SetAttr) -> io::Result<Stat> {
        nosys()
    }

    /// READLINK.
    fn readlink(&self, ctx: Context, node: u64) -> io::Result<Vec<u8>> {
        nosys()
    }

    /// SYMLINK `name` -> `target` in `parent`.
    fn symlink(&self, ctx: Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        nosys()
    }

    /// MKNOD.
    fn mknod(
        &self,
        ctx: Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
    ) -> io::Result<Entry> {
        nosys()
    }

    /// MKDIR.
    fn mkdir(&self, ctx: Context, parent: u64, name: &CStr, mode: u32) -> io::Result<Entry> {
        nosys()
    }

    /// UNLINK.
    fn unlink(&self, ctx: Context, parent: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }

    /// RMDIR.
    fn rmdir(&self, ctx: Context, parent: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }

    /// RENAME and RENAME2 (`flags`: RENAME_NOREPLACE, RENAME_EXCHANGE, ...).
    fn rename(
        &self,
        ctx: Context,
        parent: u64,
        name: &CStr,
        newparent: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        nosys()
    }

    /// LINK `node` as `newname` in `newparent`.
    fn link(&self, ctx: Context, node: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        nosys()
    }

    /// STATFS.
    fn statfs(&self, ctx: Context, node: u64) -> io::Result<StatFs> {
        nosys()
    }

    /// ACCESS.
    fn access(&self, ctx: Context, node: u64, mask: u32) -> io::Result<()> {
        nosys()
    }

    /// SYNCFS.
    fn syncfs(&self, ctx: Context, node: u64) -> io::Result<()> {
        nosys()
    }
}

/// Open files and directories: opening, data in and out, syncing, closing, and
/// reading directories. Part of [`FileSystem`].
#[allow(unused_variables)]
pub trait Files: Session {
    /// OPEN with guest `flags`.
    fn open(&self, ctx: Context, node: u64, flags: u32) -> io::Result<Opened> {
        nosys()
    }

    /// CREATE `name` in `parent` and open it.
    fn create(
        &self,
        ctx: Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        nosys()
    }

    /// TMPFILE: an unnamed file in `parent`, open.
    fn tmpfile(
        &self,
        ctx: Context,
        parent: u64,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        nosys()
    }

    /// READ up to `size` bytes (already capped to the sink's room) of handle
    /// `fh` at `offset` into `sink`. A short count is not an error; an error
    /// after some data was copied should be reported as the short count.
    fn read(
        &self,
        ctx: Context,
        node: u64,
        fh: u64,
        offset: u64,
        size: usize,
        sink: &mut dyn DataSink,
    ) -> io::Result<usize> {
        nosys()
    }

    /// WRITE all of `source` (exactly `size` bytes) to handle `fh` at
    /// `offset`; returns how many were written.
    fn write(
        &self,
        ctx: Context,
        node: u64,
        fh: u64,
        offset: u64,
        size: usize,
        source: &mut dyn DataSource,
    ) -> io::Result<usize> {
        nosys()
    }

    /// RELEASE.
    fn release(&self, ctx: Context, node: u64, fh: u64) -> io::Result<()> {
        nosys()
    }

    /// FLUSH.
    fn flush(&self, ctx: Context, node: u64, fh: u64) -> io::Result<()> {
        nosys()
    }

    /// FSYNC.
    fn fsync(&self, ctx: Context, node: u64, fh: u64, datasync: bool) -> io::Result<()> {
        nosys()
    }

    /// OPENDIR.
    fn opendir(&self, ctx: Context, node: u64, flags: u32) -> io::Result<Opened> {
        nosys()
    }

    /// READDIR of handle `fh` from `offset`: hands entries to `add` until it
    /// returns false (no room left) or the directory ends. `size` is the room
    /// in the reply. An error after some entries were added is dropped.
    fn readdir(
        &self,
        ctx: Context,
        node: u64,
        fh: u64,
        offset: u64,
        size: usize,
        add: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> io::Result<()> {
        nosys()
    }

    /// The LOOKUP part of READDIRPLUS for the entry `name` of `parent`: None
    /// for `.`, `..` and failures (the guest then gets an empty entry).
    fn readdirplus_lookup(&self, ctx: Context, parent: u64, name: &[u8]) -> Option<Entry> {
        None
    }

    /// RELEASEDIR.
    fn releasedir(&self, ctx: Context, node: u64, fh: u64) -> io::Result<()> {
        nosys()
    }

    /// FSYNCDIR.
    fn fsyncdir(&self, ctx: Context, node: u64, fh: u64, datasync: bool) -> io::Result<()> {
        nosys()
    }
}

/// POSIX and flock locks on open files (GETLK, SETLK, SETLKW). Part of [`FileSystem`].
#[allow(unused_variables)]
pub trait Locks: Session {
    /// GETLK: the first lock of another owner that conflicts with `lock`
    /// on `node` (opened as `fh`), or `lock` with [`LockKind::Unlock`].
    fn getlk(&self, ctx: Context, node: u64, fh: u64, owner: u64, lock: Lock) -> io::Result<Lock> {
        nosys()
    }

    /// SETLK: takes, changes or drops `owner`'s lock on `node` at once,
    /// never waiting: EAGAIN while another owner holds a conflicting one
    /// (SETLKW then asks again later).
    fn setlk(
        &self,
        ctx: Context,
        node: u64,
        fh: u64,
        owner: LockOwner,
        lock: Lock,
    ) -> io::Result<()> {
        nosys()
    }

    /// Drops every lock `owner` holds on `node`: POSIX locks when the
    /// owner closes any descriptor of the file (FLUSH), flock locks when
    /// the last reference to the guest's open file goes (RELEASE).
    fn unlock_owner(&self, node: u64, owner: LockOwner) {}
}

/// Beyond the POSIX core: extended attributes and security contexts, space
/// allocation, seeking data and holes, copying between files. Part of
/// [`FileSystem`].
#[allow(unused_variables)]
pub trait Extended: Session {
    /// FUSE_SECURITY_CTX: sets the security context `value` (attribute
    /// `attr`, a `security.` name) the guest's security module gave the
    /// file `node` it has just created, whatever its type.
    fn set_security_context(
        &self,
        ctx: Context,
        node: u64,
        attr: &CStr,
        value: &[u8],
    ) -> io::Result<()> {
        nosys()
    }

    /// SETXATTR.
    fn setxattr(
        &self,
        ctx: Context,
        node: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        nosys()
    }

    /// GETXATTR (`size` 0: ask for the size).
    fn getxattr(&self, ctx: Context, node: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        nosys()
    }

    /// LISTXATTR (`size` 0: ask for the size).
    fn listxattr(&self, ctx: Context, node: u64, size: u32) -> io::Result<XattrReply> {
        nosys()
    }

    /// REMOVEXATTR.
    fn removexattr(&self, ctx: Context, node: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }

    /// FALLOCATE.
    fn fallocate(
        &self,
        ctx: Context,
        node: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        nosys()
    }

    /// LSEEK; returns the new offset.
    fn lseek(&self, ctx: Context, node: u64, fh: u64, offset: u64, whence: u32) -> io::Result<u64> {
        nosys()
    }

    /// COPY_FILE_RANGE; returns how many bytes were copied.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        ctx: Context,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        nosys()
    }
}

/// The DAX window (a shared-memory region of the device that the guest maps
/// file ranges into): FUSE_SETUPMAPPING and FUSE_REMOVEMAPPING. Part of
/// [`FileSystem`]; without a window every method is `ENOSYS`.
#[allow(unused_variables)]
pub trait Dax: Session {
    /// SETUPMAPPING: map `len` bytes of `node` at `file_offset` into the
    /// window at `window_offset`, writable if `writable`, replacing any
    /// mapping of that window range.
    fn setupmapping(
        &self,
        ctx: Context,
        node: u64,
        file_offset: u64,
        len: u64,
        writable: bool,
        window_offset: u64,
    ) -> io::Result<()> {
        nosys()
    }

    /// REMOVEMAPPING: unmap each (window offset, length) of `ranges`, each
    /// one a mapping made before.
    fn removemapping(&self, ctx: Context, ranges: &[(u64, u64)]) -> io::Result<()> {
        nosys()
    }
}
