// SPDX-License-Identifier: Apache-2.0
//! The state a daemon hands to its successor: format
//! [`frame::FORMAT_VERSION`] as a whole, and a version on each part.
//!
//! Format 8's payload is a list of parts, each `(id, version, optional,
//! bytes)` in postcard: a part is decoded by the decoder of its own
//! version, must use all of its bytes, and must be known unless marked
//! optional (then a reader that does not know it skips it). So a part can
//! evolve on its own, and nothing is ever misread: a version or a length
//! stands in front of every part. Format 7 (release 0.2.0) is one flat
//! structure ([`v7`]): read, and written for a successor that reads no
//! newer when the state holds nothing it cannot carry.
//!
//! File descriptors are not part of the serialized data: they travel beside it
//! over SCM_RIGHTS, in one list, and every `*_fd` field here is an index into
//! that list. Everything in a received state is untrusted until checked:
//! [`DaemonState::check`] validates indices and ranges, the device and the file
//! system validate the rest when they rebuild themselves from it.

pub mod v7;
pub mod v8;

use serde::{Deserialize, Serialize};
use xvfs_fs::state::FsState;
pub use xvfs_fs::state::MappingState;
use xvfs_fs::SessionState;

use crate::frame::{self, FrameError};
use crate::settings::Settings;

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

/// The DAX window (`--dax-window`): its size, the front-end's back-end
/// channel and what the front-end has mapped where (format 8's "dax" part,
/// version 2; version 1 had the first three fields only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaxState {
    /// The window's size, as the front-end sized the device's region.
    pub window: u64,
    /// Index of the back-end channel (SET_BACKEND_REQ_FD), once sent.
    pub channel_fd: Option<u32>,
    pub mappings: Vec<MappingState>,
    /// Replies the front-end still owes on the channel for requests that
    /// gave up waiting: read and dropped before the next request's own.
    /// None: not known (a crash-restart checkpoint is older than the last
    /// request); the next request first finds the channel's end.
    pub late_replies: Option<u32>,
    /// Whether `mappings` is all the front-end has mapped.
    pub complete: bool,
    /// A request was given up before the front-end answered: the table is
    /// not complete again after a device reset either.
    pub abandoned: bool,
    /// The file systems (device numbers) of the share's files the window
    /// maps: a guest-memory region backed by a file on one of them is a
    /// window chunk, never mapped by the daemon.
    pub devices: Vec<u64>,
}

/// Everything a successor needs (every format decodes into this).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The command line's settings.
    pub settings: Settings,
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
    /// The DAX window, if the daemon serves one (format 8's "dax" part).
    pub dax: Option<DaxState>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state envelope")]
    Frame(#[from] FrameError),
    #[error("state payload does not decode (a value this build does not know, or a truncated or malformed field)")]
    Decode(#[from] postcard::Error),
    #[error("state payload claims more than it holds")]
    Bound(#[from] crate::bounded::BoundError),
    #[error("state payload has {0} bytes after its end")]
    Trailing(usize),
    #[error("state refers to descriptor {index}, but only {count} were received")]
    FdIndex { index: u32, count: usize },
    #[error("state is inconsistent: {0}")]
    Invalid(String),
    #[error("state part")]
    Part(#[from] crate::parts::PartError),
    #[error("state format {version} cannot carry this state: {why}")]
    Unrepresentable { version: u32, why: String },
    #[error("this build cannot write state format {0} (it writes {MIN_WRITE}-{FORMAT_VERSION})", FORMAT_VERSION = frame::FORMAT_VERSION, MIN_WRITE = frame::MIN_FORMAT_VERSION)]
    CannotWrite(u32),
}

impl From<crate::bounded::Refused> for StateError {
    fn from(e: crate::bounded::Refused) -> Self {
        match e {
            crate::bounded::Refused::Bound(b) => StateError::Bound(b),
            crate::bounded::Refused::Decode(d) => StateError::Decode(d),
        }
    }
}

impl DaemonState {
    /// Serializes into a framed blob of the current format version.
    pub fn encode(&self) -> Result<Vec<u8>, StateError> {
        self.encode_as(frame::FORMAT_VERSION)
    }

    /// Serializes as format `version` (an older one for a successor that
    /// reads no newer), or says why that format cannot carry this state.
    pub fn encode_as(&self, version: u32) -> Result<Vec<u8>, StateError> {
        let payload = match version {
            7 => v7::encode(self)?,
            8 => v8::encode(self)?,
            other => return Err(StateError::CannotWrite(other)),
        };
        Ok(frame::encode(version, &payload))
    }

    /// Whether format `version` can carry this state (the settings decide:
    /// checked before a handover pauses the guest).
    pub fn representable_as(settings: &Settings, version: u32) -> Result<(), StateError> {
        match version {
            7 => v7::config(settings)
                .map(|_| ())
                .map_err(|why| StateError::Unrepresentable { version, why }),
            8 => Ok(()),
            other => Err(StateError::CannotWrite(other)),
        }
    }

    /// Parses a framed blob of any format this build reads. An unknown enum
    /// value, a truncated field or trailing bytes are refused.
    pub fn decode(blob: &[u8]) -> Result<DaemonState, StateError> {
        let (version, payload) = frame::decode(blob)?;
        match version {
            7 => v7::decode(payload),
            8 => v8::decode(payload),
            other => Err(StateError::Frame(FrameError::Version(other))),
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
        if let Some(d) = &self.dax {
            check_dax(d, &idx)?;
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

/// A received window: its channel's index, and mappings that are page
/// aligned, inside the window and apart from each other.
fn check_dax(d: &DaxState, idx: &dyn Fn(u32) -> Result<(), StateError>) -> Result<(), StateError> {
    if let Some(i) = d.channel_fd {
        idx(i)?;
    }
    let bad = |what: &str| StateError::Invalid(format!("DAX window: {what}"));
    if d.window == 0 || !d.window.is_power_of_two() {
        return Err(bad("size"));
    }
    // Each is a request given up waiting (5 s, or a device stop): more
    // than this is no front-end's debt, and the successor would wait
    // for each.
    if d.late_replies.is_some_and(|n| n > 1 << 20) {
        return Err(bad("replies owed on the back-end channel"));
    }
    let mut maps: Vec<&MappingState> = d.mappings.iter().collect();
    maps.sort_by_key(|m| m.window_offset);
    let page = |v: u64| v.is_multiple_of(4096);
    let mut end_of_last = 0;
    for m in maps {
        let end = m.window_offset.checked_add(m.len);
        if m.len == 0 || !page(m.window_offset) || !page(m.len) || !page(m.file_offset) {
            return Err(bad("a mapping not aligned to pages"));
        }
        if end.is_none_or(|e| e > d.window) || m.file_offset.checked_add(m.len).is_none() {
            return Err(bad("a mapping outside the window"));
        }
        if m.window_offset < end_of_last {
            return Err(bad("overlapping mappings"));
        }
        end_of_last = end.unwrap_or(u64::MAX);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{CacheMode, CrashRestartKeep};
    use crate::parts::PartError;
    use crate::settings::{Operations, Security, Serving};
    use xvfs_fs::state::FsState;

    pub(crate) fn sample() -> DaemonState {
        DaemonState {
            writer_version: "v".into(),
            writer_pid: 7,
            started_unix_ms: 9,
            upgrades: 0,
            settings: Settings {
                security: Security {
                    shared_dir: "/s".into(),
                    ..Default::default()
                },
                serving: Serving {
                    cache: CacheMode::Always,
                    queues: 1,
                    ..Default::default()
                },
                operations: Operations::default(),
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
            dax: None,
        }
    }

    /// [`sample`] with a DAX window: one descriptor, two mappings.
    pub(crate) fn sample_with_dax() -> DaemonState {
        DaemonState {
            dax: Some(DaxState {
                window: 1 << 26,
                channel_fd: Some(0),
                mappings: vec![
                    MappingState {
                        window_offset: 0,
                        node: 5,
                        file_offset: 2 << 20,
                        len: 2 << 20,
                        writable: true,
                    },
                    MappingState {
                        window_offset: 4 << 20,
                        node: 6,
                        file_offset: 0,
                        len: 2 << 20,
                        writable: false,
                    },
                ],
                late_replies: Some(1),
                complete: false,
                abandoned: true,
                devices: vec![2049],
            }),
            ..sample()
        }
    }

    #[test]
    fn a_window_travels_in_format_8_only_and_is_checked() {
        let st = sample_with_dax();
        let blob = st.encode().expect("encode");
        assert_eq!(DaemonState::decode(&blob).expect("decode"), st);
        let one_fd = |i: u32| {
            if i < 1 {
                Ok(())
            } else {
                Err(StateError::FdIndex { index: i, count: 1 })
            }
        };
        check_dax(st.dax.as_ref().unwrap(), &one_fd).expect("a sound window");
        let e = st.encode_as(7).unwrap_err();
        assert!(e.to_string().contains("DAX"), "{e}");
        let bad = |f: &dyn Fn(&mut DaxState)| {
            let mut d = sample_with_dax().dax.unwrap();
            f(&mut d);
            check_dax(&d, &one_fd).unwrap_err().to_string()
        };
        assert!(bad(&|d| d.channel_fd = Some(3)).contains("descriptor 3"));
        assert!(bad(&|d| d.window = 3 << 20).contains("size"));
        assert!(bad(&|d| d.mappings[1].window_offset = 1 << 20).contains("overlapping"));
        assert!(bad(&|d| d.mappings[1].window_offset = (1 << 26) - 4096).contains("outside"));
        assert!(bad(&|d| d.mappings[0].file_offset = u64::MAX - 4095).contains("outside"));
        assert!(bad(&|d| d.mappings[0].len = 100).contains("aligned"));
        assert!(bad(&|d| d.mappings[0].len = 0).contains("aligned"));
        assert!(bad(&|d| d.late_replies = Some(u32::MAX)).contains("owed"));
    }

    fn payload(st: &DaemonState) -> Vec<u8> {
        frame::decode(&st.encode().expect("encode"))
            .expect("frame")
            .1
            .to_vec()
    }

    #[test]
    fn round_trip_in_every_format_this_build_writes() {
        let st = sample();
        for v in frame::MIN_FORMAT_VERSION..=frame::FORMAT_VERSION {
            let blob = st.encode_as(v).expect("encode");
            assert_eq!(frame::decode(&blob).expect("frame").0, v);
            assert_eq!(
                DaemonState::decode(&blob).expect("decode"),
                st,
                "format {v}"
            );
        }
        let e = st.encode_as(frame::FORMAT_VERSION + 1).unwrap_err();
        assert!(matches!(e, StateError::CannotWrite(_)), "{e:?}");
    }

    /// A rollback to release 0.2.0 (format 7) is refused when the state
    /// holds a setting that format cannot carry, naming it.
    #[test]
    fn what_an_older_format_cannot_carry_is_refused_by_name() {
        let mut st = sample();
        st.settings.operations.crash_restart_keep = CrashRestartKeep::All;
        let e = st.encode_as(7).unwrap_err();
        assert!(e.to_string().contains("--crash-restart-keep all"), "{e}");
        assert!(DaemonState::representable_as(&st.settings, 7).is_err());
        assert!(DaemonState::representable_as(&st.settings, 8).is_ok());
        assert!(DaemonState::decode(&st.encode().unwrap()).is_ok());
    }

    #[test]
    fn other_versions_are_refused() {
        let p = payload(&sample());
        for v in [1, 6, frame::FORMAT_VERSION + 1] {
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
        for v in frame::MIN_FORMAT_VERSION..=frame::FORMAT_VERSION {
            let blob = sample().encode_as(v).expect("encode");
            let p = frame::decode(&blob).expect("frame").1;
            let short =
                DaemonState::decode(&frame::encode(v, &p[..p.len() - 1])).expect_err("truncated");
            assert!(
                matches!(
                    short,
                    StateError::Decode(_)
                        | StateError::Bound(_)
                        | StateError::Part(PartError::List(_) | PartError::ListBound(_))
                ),
                "{v}: {short:?}"
            );
            let mut long = p.to_vec();
            long.push(0);
            let long = DaemonState::decode(&frame::encode(v, &long)).expect_err("trailing byte");
            assert!(
                matches!(
                    long,
                    StateError::Trailing(1) | StateError::Part(PartError::ListTrailing(1))
                ),
                "{v}: {long:?}"
            );
        }
    }
}
