//! The state a daemon hands to its successor (format version 1).
//!
//! File descriptors are not part of the serialized data: they travel beside it
//! over SCM_RIGHTS, in one list, and every `*_fd` field here is an index into
//! that list. Everything in a received state is untrusted until checked:
//! [`DaemonState::check`] validates indices and ranges, the device and the file
//! system validate the rest when they rebuild themselves from it.

use serde::{Deserialize, Serialize};
use xvfs_fs::passthrough::state::FsState;
use xvfs_fs::SessionState;

use crate::frame::{self, FrameError};

/// The daemon's settings (from its command line) that the successor keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigState {
    pub shared_dir: String,
    /// 0 never, 1 auto, 2 metadata, 3 always.
    pub cache: u8,
    pub xattr: bool,
    pub readonly: bool,
    pub writeback: bool,
    pub allow_direct_io: bool,
    pub readdirplus: bool,
    /// 0 namespace, 1 chroot, 2 none.
    pub sandbox: u8,
    /// 0 none, 1 kill, 2 log, 3 trap.
    pub seccomp: u8,
    /// Request queues offered.
    pub queues: u16,
    /// 0 never, 1 always, 2 adaptive.
    pub poll_mode: u8,
    pub poll_us: u64,
    pub queue_cpus: Vec<u32>,
    pub metrics_file: Option<String>,
    /// 0 error … 4 trace, 5 off.
    pub log_level: u8,
    /// The `--socket-path` the daemon was started with (informational).
    pub socket_path: Option<String>,
}

/// One guest memory region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionState {
    pub gpa: u64,
    pub size: u64,
    pub user_addr: u64,
    pub mmap_offset: u64,
    pub fd: u32,
}

/// One virtqueue as the front-end configured it, with where it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VringState {
    pub size: u16,
    pub desc_va: u64,
    pub avail_va: u64,
    pub used_va: u64,
    pub addr_set: bool,
    /// Next avail index to process.
    pub next_avail: u16,
    /// Next used index to publish (equal to the guest's used->idx when stopped).
    pub next_used: u16,
    pub enabled: bool,
    pub started: bool,
    pub kick_fd: Option<u32>,
    pub call_fd: Option<u32>,
    pub err_fd: Option<u32>,
}

/// The vhost-user device: every negotiated value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    pub acked_features: u64,
    pub acked_protocol: u64,
    pub owner: bool,
    pub max_queues: u32,
    pub regions: Vec<RegionState>,
    pub vrings: Vec<VringState>,
}

/// Everything, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonState {
    /// `--version` of the daemon that wrote it.
    pub writer_version: String,
    /// Its pid (the successor joins its cgroups).
    pub writer_pid: u32,
    /// Unix time (ms) the first daemon of this connection started: uptime
    /// survives upgrades.
    pub started_unix_ms: u64,
    /// How many upgrades this connection has been through before this one.
    pub upgrades: u32,
    pub config: ConfigState,
    /// Index of the connected vhost-user socket.
    pub vhost_socket_fd: u32,
    /// Index of the listening control socket, if any.
    pub control_socket_fd: Option<u32>,
    /// Path of the control socket (for `status`).
    pub control_path: Option<String>,
    /// Index of the daemon's log (standard error) descriptor.
    pub log_fd: Option<u32>,
    /// Indices of inherited pid files (libvirt's): the successor locks them
    /// and writes its pid once this daemon has exited.
    pub pid_file_fds: Vec<u32>,
    pub device: DeviceState,
    pub fs: FsState,
    /// The negotiated FUSE session, if INIT was done (saved by the server).
    pub session: Option<SessionState>,
    /// Index of the first file-system descriptor: `fs`'s fd indices are
    /// relative to it.
    pub fs_fd_base: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state envelope")]
    Frame(#[from] FrameError),
    #[error("state payload does not decode")]
    Decode(#[from] postcard::Error),
    #[error("state refers to descriptor {index}, but only {count} were received")]
    FdIndex { index: u32, count: usize },
    #[error("state is inconsistent: {0}")]
    Invalid(String),
}

impl DaemonState {
    /// Serializes into a framed blob of the current format version.
    pub fn encode(&self) -> Result<Vec<u8>, StateError> {
        let payload = postcard::to_stdvec(self)?;
        Ok(frame::encode(frame::FORMAT_VERSION, &payload))
    }

    /// Parses a framed blob of any supported version.
    pub fn decode(blob: &[u8]) -> Result<DaemonState, StateError> {
        let (version, payload) = frame::decode(blob)?;
        match version {
            1 => Ok(postcard::from_bytes(payload)?),
            v => Err(StateError::Frame(FrameError::Version(v))),
        }
    }

    /// Checks every descriptor index and the ranges the device relies on.
    pub fn check(&self, fd_count: usize) -> Result<(), StateError> {
        let idx = |i: u32| {
            if (i as usize) < fd_count {
                Ok(())
            } else {
                Err(StateError::FdIndex {
                    index: i,
                    count: fd_count,
                })
            }
        };
        idx(self.vhost_socket_fd)?;
        for i in [self.control_socket_fd, self.log_fd].into_iter().flatten() {
            idx(i)?;
        }
        for &i in &self.pid_file_fds {
            idx(i)?;
        }
        for r in &self.device.regions {
            idx(r.fd)?;
            if r.size == 0 || r.gpa.checked_add(r.size).is_none() {
                return Err(StateError::Invalid("memory region size".into()));
            }
        }
        if self.device.vrings.len() != self.device.max_queues as usize
            || self.device.max_queues == 0
            || self.device.max_queues > 17
        {
            return Err(StateError::Invalid("number of vrings".into()));
        }
        for v in &self.device.vrings {
            for i in [v.kick_fd, v.call_fd, v.err_fd].into_iter().flatten() {
                idx(i)?;
            }
            if v.size != 0 && !v.size.is_power_of_two() {
                return Err(StateError::Invalid("vring size".into()));
            }
        }
        let fs_fds = self
            .fs
            .inodes
            .iter()
            .map(|i| i.fd_index)
            .chain(self.fs.handles.iter().map(|h| h.fd_index));
        for i in fs_fds {
            let abs = self
                .fs_fd_base
                .checked_add(i)
                .ok_or_else(|| StateError::Invalid("file-system descriptor index".into()))?;
            idx(abs)?;
        }
        Ok(())
    }
}
