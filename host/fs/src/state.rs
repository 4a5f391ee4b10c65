// SPDX-License-Identifier: Apache-2.0
//! Serializable state of a [`PassthroughFs`](crate::PassthroughFs), for live
//! upgrade.
//!
//! The FUSE session is not part of it: the server saves that
//! ([`Server::session`](crate::Server::session)).
//!
//! Only plain data lives here; descriptors travel beside it (over SCM_RIGHTS)
//! and are referred to by index. Everything read back is untrusted:
//! [`PassthroughFs::restore`](crate::PassthroughFs::restore) checks every field
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

/// One range of the DAX window mapped to a file (`--dax-window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingState {
    /// Where in the window.
    pub window_offset: u64,
    /// The file's node id.
    pub node: u64,
    /// Where in the file.
    pub file_offset: u64,
    /// Bytes mapped.
    pub len: u64,
    /// Mapped for writing.
    pub writable: bool,
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

/// A description that holds locks of one guest lock owner (`-o posix_lock`,
/// `-o flock`): the locks travel with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// Node id of the file.
    pub inode: u64,
    /// The guest's lock owner.
    pub owner: u64,
    /// flock locks (else POSIX record locks).
    pub flock: bool,
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
    /// Descriptions holding locks (format version 6).
    pub locks: Vec<LockState>,
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
    /// Descriptors among `fds` opened for the snapshot (of inodes held as
    /// file handles), closed with it.
    pub opened: std::sync::Arc<Vec<std::os::fd::OwnedFd>>,
}

/// Longest file handle the kernel makes (`MAX_HANDLE_SZ`): a longer one
/// in a received state is refused while it is decoded.
pub const MAX_HANDLE_SZ: usize = crate::sys::MAX_HANDLE_SZ;

/// A file handle (`name_to_handle_at(2)`): stable across hosts that mount
/// the same file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHandle {
    /// `handle_type`.
    pub handle_type: i32,
    /// `f_handle`, at most [`MAX_HANDLE_SZ`] bytes.
    #[serde(deserialize_with = "handle_bytes")]
    pub bytes: Vec<u8>,
}

/// Deserializes the bytes of a file handle as any `Vec<u8>` (the encoding
/// is unchanged), refusing more than [`MAX_HANDLE_SZ`]: as soon as the
/// length says so where the format gives it, else at the first byte too
/// many.
pub fn handle_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_seq(HandleBytes)
}

struct HandleBytes;

impl<'de> serde::de::Visitor<'de> for HandleBytes {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a file handle of at most {MAX_HANDLE_SZ} bytes")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        use serde::de::Error;
        let hint = seq.size_hint().unwrap_or(0);
        if hint > MAX_HANDLE_SZ {
            return Err(A::Error::invalid_length(hint, &self));
        }
        let mut bytes = Vec::with_capacity(hint);
        while let Some(b) = seq.next_element::<u8>()? {
            if bytes.len() == MAX_HANDLE_SZ {
                return Err(A::Error::invalid_length(MAX_HANDLE_SZ + 1, &self));
            }
            bytes.push(b);
        }
        Ok(bytes)
    }
}

/// How the destination of a VM live migration finds an inode again (no
/// descriptor can cross hosts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Location {
    /// A name (one component) inside the directory of another node.
    Path {
        /// Node id of the directory (1: the shared directory).
        parent: u64,
        /// The name.
        name: Vec<u8>,
    },
    /// A path relative to the shared directory.
    FullPath {
        /// Components separated by `/`, no leading `/`.
        path: Vec<u8>,
    },
    /// A file handle, opened with `open_by_handle_at(2)`.
    Handle(FileHandle),
    /// The source could not describe it (e.g. deleted while the guest held
    /// it); the destination decides (abort, or EIO for this node).
    Invalid {
        /// Why, for the destination's log.
        why: String,
    },
}

/// One inode the guest holds, for VM live migration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedInode {
    /// Node id.
    pub id: u64,
    /// Guest lookup count.
    pub refs: u64,
    /// Generation.
    pub generation: u64,
    /// `st_mode & S_IFMT`, when the source knows it.
    pub file_type: Option<u32>,
    /// How to find it.
    pub location: Location,
    /// With `--migration-verify-handles`: the source's file handle, which the
    /// file the destination opens must have.
    pub verify: Option<FileHandle>,
}

/// One open file or directory, for VM live migration: re-opened on the
/// destination with the flags it was opened with (never O_TRUNC/O_CREAT).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedHandle {
    /// Handle id.
    pub fh: u64,
    /// Node id of the file.
    pub inode: u64,
    /// `open(2)` flags.
    pub flags: i32,
}

/// The file system's part of a VM live migration stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationFs {
    /// Next node id to hand out.
    pub next_id: u64,
    /// Next handle id to hand out.
    pub next_fh: u64,
    /// Inodes, root excluded.
    pub inodes: Vec<MigratedInode>,
    /// Open handles.
    pub handles: Vec<MigratedHandle>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(len: usize) -> FileHandle {
        FileHandle {
            handle_type: 1,
            bytes: vec![7; len],
        }
    }

    #[test]
    fn a_file_handle_decodes_up_to_max_handle_sz_bytes() {
        for len in [0, 8, MAX_HANDLE_SZ] {
            let blob = postcard::to_stdvec(&handle(len)).unwrap();
            // The encoding is that of a plain `Vec<u8>`.
            let plain = postcard::to_stdvec(&(1i32, vec![7u8; len])).unwrap();
            assert_eq!(blob, plain);
            assert_eq!(
                postcard::from_bytes::<FileHandle>(&blob).unwrap(),
                handle(len)
            );
        }
    }

    #[test]
    fn a_longer_file_handle_is_refused_while_decoding() {
        let blob = postcard::to_stdvec(&handle(MAX_HANDLE_SZ + 1)).unwrap();
        assert!(postcard::from_bytes::<FileHandle>(&blob).is_err());
        // A length prefix far beyond the input is refused before anything
        // is read or allocated: handle_type 1, then 2^32 - 1 bytes.
        let huge = [2, 0xff, 0xff, 0xff, 0xff, 0x0f, 7];
        assert!(postcard::from_bytes::<FileHandle>(&huge).is_err());
        // Inside a migration state too.
        let st = MigratedInode {
            id: 2,
            refs: 1,
            generation: 0,
            file_type: None,
            location: Location::Handle(handle(MAX_HANDLE_SZ + 1)),
            verify: None,
        };
        let blob = postcard::to_stdvec(&st).unwrap();
        assert!(postcard::from_bytes::<MigratedInode>(&blob).is_err());
        let st = MigratedInode {
            location: Location::FullPath {
                path: b"f".to_vec(),
            },
            verify: Some(handle(MAX_HANDLE_SZ + 1)),
            ..st
        };
        let blob = postcard::to_stdvec(&st).unwrap();
        assert!(postcard::from_bytes::<MigratedInode>(&blob).is_err());
    }
}
