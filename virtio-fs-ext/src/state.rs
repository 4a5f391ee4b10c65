// SPDX-License-Identifier: Apache-2.0
//! The state a daemon hands to its successor (format version
//! [`frame::FORMAT_VERSION`]: one number for the whole blob).
//!
//! File descriptors are not part of the serialized data: they travel beside it
//! over SCM_RIGHTS, in one list, and every `*_fd` field here is an index into
//! that list. Everything in a received state is untrusted until checked:
//! [`DaemonState::check`] validates indices and ranges, the device and the file
//! system validate the rest when they rebuild themselves from it.

use serde::{Deserialize, Serialize};
use xvfs_fs::passthrough::state::FsState;
use xvfs_fs::SessionState;

use crate::config::{
    CacheMode, LogLevel, MigrationMode, MigrationOnError, PollMode, SandboxMode, SeccompAction,
};
use crate::frame::{self, FrameError};

/// The daemon's settings (from its command line) that the successor keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigState {
    pub shared_dir: String,
    pub cache: CacheMode,
    pub xattr: bool,
    pub readonly: bool,
    pub writeback: bool,
    pub allow_direct_io: bool,
    pub readdirplus: bool,
    pub sandbox: SandboxMode,
    pub seccomp: SeccompAction,
    /// Request queues offered.
    pub queues: u16,
    pub poll_mode: PollMode,
    pub poll_us: u64,
    /// `--poll-cpu-max`: percent of a CPU a worker may spend polling.
    pub poll_cpu_max: u8,
    /// `--syslog`: log to the system logger.
    pub syslog: bool,
    /// `--preserve-noatime`: keep O_NOATIME on the guest's opens.
    pub preserve_noatime: bool,
    pub queue_cpus: Vec<u32>,
    pub metrics_file: Option<String>,
    pub log_level: LogLevel,
    /// The `--socket-path` the daemon was started with (informational).
    pub socket_path: Option<String>,
    /// `--migration-mode`, `--migration-on-error`,
    /// `--migration-verify-handles`, `--migration-confirm-paths`.
    pub migration_mode: MigrationMode,
    pub migration_on_error: MigrationOnError,
    pub migration_verify_handles: bool,
    pub migration_confirm_paths: bool,
    /// `--xattrmap`, as given.
    pub xattrmap: Option<String>,
    /// `--no-device-nodes`.
    pub no_device_nodes: bool,
    /// `--no-setid`.
    pub no_setid: bool,
    /// `--killpriv-v2` (format version 5).
    pub killpriv_v2: bool,
    /// `--allow-mmap` (format version 6).
    pub allow_mmap: bool,
    /// `--announce-submounts` (format version 6).
    pub announce_submounts: bool,
    /// `--translate-uid` rules, as given (format version 6).
    pub translate_uid: Vec<String>,
    /// `--translate-gid` rules, as given (format version 6).
    pub translate_gid: Vec<String>,
    /// `--posix-acl` (format version 6).
    pub posix_acl: crate::config::Negotiation,
    /// `--security-label` (format version 6).
    pub security_label: crate::config::Negotiation,
    /// `-o posix_lock` (format version 6).
    pub posix_lock: bool,
    /// `-o flock` (format version 6).
    pub flock: bool,
    /// `--inode-file-handles` (format version 6).
    pub inode_file_handles: crate::config::FileHandles,
    /// `--tag` (format version 6).
    pub tag: Option<String>,
}

/// The command line's defaults (`xvirtiofsd --shared-dir ""` on a host
/// with at most 2 CPUs, where the poll window defaults to 0): fixtures
/// spell out only what they change (`..Default::default()`).
/// `settings::tests` in xvirtiofsd checks this against the parser.
impl Default for ConfigState {
    fn default() -> Self {
        use crate::config::{FileHandles, MigrationMode, MigrationOnError, Negotiation};
        ConfigState {
            shared_dir: String::new(),
            cache: CacheMode::Auto,
            xattr: false,
            readonly: false,
            writeback: false,
            allow_direct_io: false,
            readdirplus: true,
            sandbox: SandboxMode::Namespace,
            seccomp: SeccompAction::Kill,
            queues: 16,
            poll_mode: PollMode::Adaptive,
            poll_us: 0,
            poll_cpu_max: 100,
            syslog: false,
            preserve_noatime: false,
            queue_cpus: Vec::new(),
            metrics_file: None,
            log_level: LogLevel::Info,
            socket_path: None,
            migration_mode: MigrationMode::FindPaths,
            migration_on_error: MigrationOnError::Abort,
            migration_verify_handles: false,
            migration_confirm_paths: false,
            xattrmap: None,
            no_device_nodes: false,
            no_setid: false,
            killpriv_v2: false,
            allow_mmap: false,
            announce_submounts: false,
            translate_uid: Vec::new(),
            translate_gid: Vec::new(),
            posix_acl: Negotiation::Never,
            security_label: Negotiation::Never,
            posix_lock: false,
            flock: false,
            inode_file_handles: FileHandles::Never,
            tag: None,
        }
    }
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

/// Everything, as of [`frame::FORMAT_VERSION`].
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
    #[error("state payload does not decode (a value this build does not know, or a truncated or malformed field)")]
    Decode(#[from] postcard::Error),
    #[error("state payload has {0} bytes after its end")]
    Trailing(usize),
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

    /// Parses a framed blob of the current format version. An unknown enum
    /// value, a truncated field or trailing bytes are refused.
    pub fn decode(blob: &[u8]) -> Result<DaemonState, StateError> {
        let (version, payload) = frame::decode(blob)?;
        if version != frame::FORMAT_VERSION {
            return Err(StateError::Frame(FrameError::Version(version)));
        }
        let (state, rest) = postcard::take_from_bytes(payload)?;
        if !rest.is_empty() {
            return Err(StateError::Trailing(rest.len()));
        }
        Ok(state)
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

#[cfg(test)]
mod tests {
    use super::*;
    use xvfs_fs::passthrough::state::FsState;

    fn sample() -> DaemonState {
        DaemonState {
            writer_version: "v".into(),
            writer_pid: 7,
            started_unix_ms: 9,
            upgrades: 0,
            config: ConfigState {
                shared_dir: "/s".into(),
                cache: CacheMode::Always,
                queues: 1,
                ..Default::default()
            },
            vhost_socket_fd: 0,
            control_socket_fd: None,
            control_path: None,
            log_fd: None,
            pid_file_fds: Vec::new(),
            device: DeviceState {
                acked_features: 0,
                acked_protocol: 0,
                owner: true,
                max_queues: 2,
                regions: Vec::new(),
                vrings: Vec::new(),
            },
            fs: FsState {
                root_dev: 1,
                root_ino: 2,
                next_id: 3,
                inodes: Vec::new(),
                handles: Vec::new(),
                locks: Vec::new(),
            },
            session: None,
            fs_fd_base: 1,
        }
    }

    fn payload(st: &DaemonState) -> Vec<u8> {
        postcard::to_stdvec(st).expect("encode")
    }

    #[test]
    fn round_trip() {
        let st = sample();
        let blob = st.encode().expect("encode");
        assert_eq!(DaemonState::decode(&blob).expect("decode"), st);
    }

    #[test]
    fn unknown_enum_value_is_refused_not_defaulted() {
        let mut p = payload(&sample());
        // writer_version "v" (2 bytes), writer_pid, started_unix_ms,
        // upgrades (1 byte each), shared_dir "/s" (3 bytes): then `cache`.
        let at = 2 + 1 + 1 + 1 + 3;
        assert_eq!(p[at], 3, "CacheMode::Always is variant 3");
        p[at] = 9;
        let err = DaemonState::decode(&frame::encode(frame::FORMAT_VERSION, &p))
            .expect_err("an unknown cache mode must be refused");
        assert!(matches!(err, StateError::Decode(_)), "{err:?}");
    }

    #[test]
    fn other_versions_are_refused() {
        let p = payload(&sample());
        for v in [1, frame::FORMAT_VERSION + 1] {
            let err = DaemonState::decode(&frame::encode(v, &p)).expect_err("version");
            assert!(
                matches!(err, StateError::Frame(FrameError::Version(got)) if got == v),
                "{err:?}"
            );
            let cause = std::error::Error::source(&err).map(|c| c.to_string());
            assert!(
                cause
                    .as_deref()
                    .is_some_and(|c| c.contains("format version")),
                "{cause:?}"
            );
        }
    }

    #[test]
    fn truncated_or_padded_payload_is_refused() {
        let p = payload(&sample());
        let short = DaemonState::decode(&frame::encode(frame::FORMAT_VERSION, &p[..p.len() - 1]))
            .expect_err("truncated");
        assert!(matches!(short, StateError::Decode(_)), "{short:?}");
        let mut long = p.clone();
        long.push(0);
        let long = DaemonState::decode(&frame::encode(frame::FORMAT_VERSION, &long))
            .expect_err("trailing byte");
        assert!(matches!(long, StateError::Trailing(1)), "{long:?}");
    }
}
