// SPDX-License-Identifier: Apache-2.0
//! Configuration and errors of a [`PassthroughFs`](super::PassthroughFs).

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::XattrMap;

/// `--inode-file-handles`: how inodes hold on to their files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandleMode {
    /// An `O_PATH` descriptor each.
    #[default]
    Never,
    /// A file handle where the file system gives one, else a descriptor.
    Prefer,
    /// A file handle always: a file without one cannot be looked up, and a
    /// shared directory without them fails start-up.
    Mandatory,
}

/// Whether a FUSE feature is offered (`--posix-acl`, `--security-label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offer {
    /// Not offered (POSIX ACLs: their attributes get EOPNOTSUPP).
    #[default]
    Never,
    /// Offered; served if the guest takes it.
    Auto,
    /// Offered, and a guest that does not take it is refused at INIT.
    Always,
}

/// How much the guest may cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Nothing: entry/attr timeouts 0, file I/O with FOPEN_DIRECT_IO.
    Never,
    /// Metadata for a day, data not at all (FOPEN_DIRECT_IO).
    Metadata,
    /// Metadata for 1 s; data cached while unchanged (close-to-open).
    #[default]
    Auto,
    /// Everything for a day; page cache kept across opens (FOPEN_KEEP_CACHE).
    Always,
}

impl CachePolicy {
    /// Entry and attribute timeout.
    pub fn timeout(self) -> Duration {
        match self {
            CachePolicy::Never => Duration::ZERO,
            CachePolicy::Auto => Duration::from_secs(1),
            CachePolicy::Metadata | CachePolicy::Always => Duration::from_secs(86400),
        }
    }
}

/// Configuration of a [`PassthroughFs`].
#[derive(Debug, Clone)]
pub struct Config {
    /// The shared directory.
    pub root_dir: PathBuf,
    /// Cache policy.
    pub cache: CachePolicy,
    /// Serve extended attributes (else the xattr requests get ENOSYS).
    pub xattr: bool,
    /// Refuse every change with EROFS.
    pub readonly: bool,
    /// Offer FUSE_WRITEBACK_CACHE.
    pub writeback: bool,
    /// Honour O_DIRECT from the guest (else it is dropped).
    pub allow_direct_io: bool,
    /// Keep O_NOATIME from the guest (else it is dropped, as virtiofsd does
    /// without `--preserve-noatime`: an unprivileged daemon would get EPERM
    /// for files it does not own).
    pub preserve_noatime: bool,
    /// Offer READDIRPLUS.
    pub readdirplus: bool,
    /// The most inodes plus open handles held at once (each holds a host
    /// descriptor); past it LOOKUP, CREATE, OPEN, ... get EMFILE. 0: no cap.
    pub max_open: usize,
    /// `--xattrmap`: how attribute names are translated (None: unchanged).
    pub xattrmap: Option<XattrMap>,
    /// `--no-device-nodes`: MKNOD of a character or block device gets EPERM.
    pub no_device_nodes: bool,
    /// `--no-setid`: the guest can make no setuid or setgid file (the bits
    /// are dropped from created files' modes and from chmod, and cleared
    /// after a chown; a directory keeps its setgid bit, which only makes
    /// new entries inherit its group).
    pub no_setid: bool,
    /// `--killpriv-v2`: offer FUSE_HANDLE_KILLPRIV_V2; the guest then asks
    /// this file system to clear setuid/setgid on write, truncate and
    /// open(O_TRUNC) instead of doing it with SETATTR itself, and the host
    /// kernel does it, the daemon's CAP_FSETID dropped for that call.
    pub killpriv_v2: bool,
    /// `--allow-mmap`: offer FUSE_DIRECT_IO_ALLOW_MMAP, so that the guest
    /// can mmap files opened for direct I/O (`--cache never|metadata`).
    pub allow_mmap: bool,
    /// `--announce-submounts`: a directory on another host mount than its
    /// parent is marked FUSE_ATTR_SUBMOUNT, and the guest mounts it as a
    /// submount of its own (own device number), if the guest offers
    /// FUSE_SUBMOUNTS.
    pub announce_submounts: bool,
    /// `--posix-acl`: FUSE_POSIX_ACL with DONT_MASK and SETXATTR_EXT.
    pub posix_acl: Offer,
    /// `--security-label`: FUSE_SECURITY_CTX; the security context a guest
    /// sends with a create is set on the new file.
    pub security_label: Offer,
    /// `--translate-uid`, `--translate-gid`: done by the FUSE layer.
    pub ids: crate::ids::Translation,
    /// `-o posix_lock`: offer FUSE_POSIX_LOCKS; the guest's record locks
    /// are held on the host (OFD locks), seen by other guests and host
    /// processes.
    pub posix_lock: bool,
    /// `-o flock`: offer FUSE_FLOCK_LOCKS; the guest's flock locks are held
    /// on the host.
    pub flock: bool,
    /// `--inode-file-handles` (needs CAP_DAC_READ_SEARCH).
    pub inode_file_handles: HandleMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root_dir: PathBuf::from("/"),
            cache: CachePolicy::Auto,
            xattr: false,
            readonly: false,
            writeback: false,
            allow_direct_io: true,
            readdirplus: true,
            preserve_noatime: false,
            max_open: 0,
            xattrmap: None,
            no_device_nodes: false,
            no_setid: false,
            killpriv_v2: false,
            allow_mmap: false,
            announce_submounts: false,
            ids: crate::ids::Translation::default(),
            posix_acl: Offer::Never,
            security_label: Offer::Never,
            posix_lock: false,
            flock: false,
            inode_file_handles: HandleMode::Never,
        }
    }
}

/// The shared directory and `/proc/self/fd`, opened (`O_PATH`): what a
/// [`PassthroughFs`](super::PassthroughFs) needs from host paths.
#[derive(Debug)]
pub struct SharedDir {
    pub(super) root: OwnedFd,
    pub(super) proc_self_fd: OwnedFd,
    pub(super) key: (u64, u64),
    /// Files proven inside the share before a live upgrade's pause
    /// ([`SharedDir::preload`]), by device and inode, each held open so
    /// that no other file can take its inode number meanwhile.
    pub(super) preloaded: HashMap<(u64, u64), OwnedFd>,
    /// Other processes' views of the share root among those (their
    /// sandbox mounts of it, on which the deleted files they hand over are).
    pub(super) roots: Vec<OwnedFd>,
}

impl SharedDir {
    /// Opens `path` (the shared directory) and `/proc/self/fd`.
    pub fn open(path: &Path) -> Result<SharedDir, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let open_path_dir = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(p)
                .map(OwnedFd::from)
        };
        let root = open_path_dir(path).map_err(|source| Error::OpenRoot {
            path: path.to_path_buf(),
            source,
        })?;
        let proc_self_fd = open_path_dir(Path::new("/proc/self/fd")).map_err(Error::OpenProc)?;
        SharedDir::from_parts(root, proc_self_fd)
    }

    /// The shared directory from descriptors opened by the caller: `root`
    /// (a directory, typically "/" of a sandbox the process has entered)
    /// and `proc_self_fd` (a `/proc/self/fd` directory).
    pub fn from_parts(root: OwnedFd, proc_self_fd: OwnedFd) -> Result<SharedDir, Error> {
        let st = crate::sys::stat_fd(std::os::fd::AsFd::as_fd(&root)).map_err(Error::StatRoot)?;
        Ok(SharedDir {
            root,
            proc_self_fd,
            key: (st.st_dev, st.st_ino),
            preloaded: HashMap::new(),
            roots: Vec::new(),
        })
    }

    /// Device and inode number of the shared directory.
    pub fn key(&self) -> (u64, u64) {
        self.key
    }
}

/// Errors of construction and restore.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The shared directory could not be opened.
    #[error("cannot open the shared directory {path:?}")]
    OpenRoot {
        /// The configured path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// `/proc/self/fd` could not be opened.
    #[error("cannot open /proc/self/fd")]
    OpenProc(#[source] io::Error),
    /// The shared directory could not be examined.
    #[error("cannot stat the shared directory")]
    StatRoot(#[source] io::Error),
    /// A restored state is inconsistent or does not match its descriptors.
    #[error("invalid saved state: {0}")]
    InvalidState(String),
    /// `--inode-file-handles=mandatory` on a file system whose file
    /// handles cannot be made or opened.
    #[error("--inode-file-handles=mandatory: the shared directory gives no usable file handle (its file system has none, or CAP_DAC_READ_SEARCH is missing)")]
    FileHandles(#[source] io::Error),
}
