//! Serializable state of a [`PassthroughFs`](super::PassthroughFs), for live
//! upgrade.
//!
//! The FUSE session is not part of it: the server saves that
//! ([`Server::session`](crate::Server::session)).
//!
//! Only plain data lives here; descriptors travel beside it (over SCM_RIGHTS)
//! and are referred to by index. Everything read back is untrusted:
//! [`PassthroughFs::restore`](super::PassthroughFs::restore) checks every field
//! against the descriptors it is handed.

use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

/// One inode (the root excluded; it is reopened from the configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeState {
    /// Node id.
    pub id: u64,
    /// Host device.
    pub dev: u64,
    /// Host inode number.
    pub ino: u64,
    /// Guest lookup count.
    pub refs: u64,
    /// Generation.
    pub generation: u64,
    /// `st_mode & S_IFMT`.
    pub file_type: u32,
    /// Index of its `O_PATH` descriptor in the descriptor list.
    pub fd_index: u32,
}

/// One open file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleState {
    /// Handle id.
    pub fh: u64,
    /// Node id of the file.
    pub inode: u64,
    /// `open(2)` flags.
    pub flags: i32,
    /// Index of its descriptor in the descriptor list.
    pub fd_index: u32,
}

/// Everything needed to rebuild the tables, minus the descriptors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsState {
    /// Host device of the root directory.
    pub root_dev: u64,
    /// Host inode number of the root directory.
    pub root_ino: u64,
    /// Next node id to hand out.
    pub next_id: u64,
    /// Inodes, root excluded.
    pub inodes: Vec<InodeState>,
    /// Open handles.
    pub handles: Vec<HandleState>,
}

/// A snapshot: the state and, in parallel, the raw descriptors its
/// `fd_index` fields refer to.
///
/// The descriptors are borrowed from the live file system: they stay valid only
/// while it lives and no request runs (stop the queues first).
#[derive(Debug, Clone)]
pub struct FsSnapshot {
    /// Serializable part.
    pub state: FsState,
    /// Descriptors, indexed by `fd_index`.
    pub fds: Vec<RawFd>,
}
