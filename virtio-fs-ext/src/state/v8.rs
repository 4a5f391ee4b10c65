// SPDX-License-Identifier: Apache-2.0
//! State format 8 (release 0.3.0): a list of parts ([`crate::parts`]),
//! each with its own version and length, so that each can evolve on its
//! own.

use serde::{Deserialize, Serialize};

use super::{DaemonState, StateError};
use crate::parts::{self, part, PartKind};

const WRITER: usize = 0;
const SECURITY: usize = 1;
const SERVING: usize = 2;
const OPERATIONS: usize = 3;
const ENDPOINTS: usize = 4;
const DEVICE: usize = 5;
const FS: usize = 6;
const SESSION: usize = 7;
const DAX: usize = 8;

/// Every part of format 8, indexed by the constants above.
pub const PARTS: &[PartKind] = &[
    PartKind {
        id: 1,
        name: "writer",
        version: 1,
    },
    PartKind {
        id: 2,
        name: "settings.security",
        version: 1,
    },
    PartKind {
        id: 3,
        name: "settings.serving",
        version: 1,
    },
    PartKind {
        id: 4,
        name: "settings.operations",
        version: 1,
    },
    PartKind {
        id: 5,
        name: "endpoints",
        version: 1,
    },
    PartKind {
        id: 6,
        name: "device",
        version: 1,
    },
    PartKind {
        id: 7,
        name: "fs",
        version: 1,
    },
    PartKind {
        id: 8,
        name: "session",
        version: 1,
    },
    // Only with a DAX window; not optional: a reader that does not know
    // it could not serve the window's mappings. Version 2 added the
    // back-end channel's late replies, the table's completeness and the
    // mapped files' devices; version 1 is still read ([`DaxV1`]).
    PartKind {
        id: 9,
        name: "dax",
        version: 2,
    },
];

/// Older part versions this build still reads: (id, version).
const READS_OLDER: &[(u16, u16)] = &[(9, 1)];

/// The "dax" part, version 1 (no release wrote it: the window came after
/// 0.3.0). What it does not say is taken at its safest: the replies owed
/// on the channel are not known, nor is the table complete, and the devices
/// are those of the file system's nodes (see the successor's import).
#[derive(Debug, Serialize, Deserialize)]
struct DaxV1 {
    window: u64,
    channel_fd: Option<u32>,
    mappings: Vec<super::MappingState>,
}

impl From<DaxV1> for super::DaxState {
    fn from(d: DaxV1) -> Self {
        super::DaxState {
            window: d.window,
            channel_fd: d.channel_fd,
            mappings: d.mappings,
            late_replies: None,
            complete: false,
            abandoned: false,
            devices: Vec::new(),
        }
    }
}

/// Who wrote the state.
#[derive(Debug, Serialize, Deserialize)]
struct Writer {
    writer_version: String,
    writer_pid: u32,
    started_unix_ms: u64,
    upgrades: u32,
}

/// The descriptors (as indices) that are not the device's or the file
/// system's, and where the file system's begin.
#[derive(Debug, Serialize, Deserialize)]
struct Endpoints {
    vhost_socket_fd: u32,
    control_socket_fd: Option<u32>,
    control_path: Option<String>,
    log_fd: Option<u32>,
    pid_file_fds: Vec<u32>,
    fs_fd_base: u32,
}

/// Format 8's payload of `st`.
pub(super) fn encode(st: &DaemonState) -> Result<Vec<u8>, StateError> {
    let writer = Writer {
        writer_version: st.writer_version.clone(),
        writer_pid: st.writer_pid,
        started_unix_ms: st.started_unix_ms,
        upgrades: st.upgrades,
    };
    let endpoints = Endpoints {
        vhost_socket_fd: st.vhost_socket_fd,
        control_socket_fd: st.control_socket_fd,
        control_path: st.control_path.clone(),
        log_fd: st.log_fd,
        pid_file_fds: st.pid_file_fds.clone(),
        fs_fd_base: st.fs_fd_base,
    };
    let mut list = vec![
        part(PARTS[WRITER], &writer)?,
        part(PARTS[SECURITY], &st.settings.security)?,
        part(PARTS[SERVING], &st.settings.serving)?,
        part(PARTS[OPERATIONS], &st.settings.operations)?,
        part(PARTS[ENDPOINTS], &endpoints)?,
        part(PARTS[DEVICE], &st.device)?,
        part(PARTS[FS], &st.fs)?,
        part(PARTS[SESSION], &st.session)?,
    ];
    if let Some(d) = &st.dax {
        list.push(part(PARTS[DAX], d)?);
    }
    Ok(parts::encode(&list)?)
}

/// A format-8 payload as this build's state.
pub(super) fn decode(payload: &[u8]) -> Result<DaemonState, StateError> {
    let p = parts::decode_reading(payload, PARTS, READS_OLDER)?;
    let writer: Writer = p.take(WRITER)?;
    let endpoints: Endpoints = p.take(ENDPOINTS)?;
    Ok(DaemonState {
        writer_version: writer.writer_version,
        writer_pid: writer.writer_pid,
        started_unix_ms: writer.started_unix_ms,
        upgrades: writer.upgrades,
        settings: crate::settings::Settings {
            security: p.take(SECURITY)?,
            serving: p.take(SERVING)?,
            operations: p.take(OPERATIONS)?,
        },
        vhost_socket_fd: endpoints.vhost_socket_fd,
        control_socket_fd: endpoints.control_socket_fd,
        control_path: endpoints.control_path,
        log_fd: endpoints.log_fd,
        pid_file_fds: endpoints.pid_file_fds,
        device: p.take(DEVICE)?,
        fs: p.take(FS)?,
        session: p.take(SESSION)?,
        fs_fd_base: endpoints.fs_fd_base,
        dax: match p.version(DAX) {
            Some(1) => Some(p.take::<DaxV1>(DAX)?.into()),
            _ => p.take_if_there(DAX)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::{Part, PartError};

    fn parts_of(st: &DaemonState) -> Vec<Part> {
        postcard::from_bytes(&encode(st).unwrap()).unwrap()
    }

    fn decode_parts(list: &[Part]) -> Result<DaemonState, StateError> {
        decode(&parts::encode(list).unwrap())
    }

    #[test]
    fn every_part_is_there_in_its_version() {
        let st = super::super::tests::sample();
        let list = parts_of(&st);
        assert_eq!(list.len(), PARTS.len() - 1, "all but the window's");
        for (p, k) in list.iter().zip(PARTS) {
            assert_eq!((p.id, p.version, p.optional), (k.id, k.version, false));
        }
        let with_dax = parts_of(&super::super::tests::sample_with_dax());
        assert_eq!(with_dax.len(), PARTS.len());
        assert_eq!(with_dax[DAX].id, PARTS[DAX].id);
        assert_eq!(decode_parts(&list).unwrap(), st);
        let mut newer = parts_of(&st);
        newer[SERVING].version = 2;
        let e = decode_parts(&newer).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert_eq!(
            chain,
            "state part: settings.serving version 2 is not supported (this build reads 1)"
        );
        let mut missing = parts_of(&st);
        missing.remove(FS);
        assert!(matches!(
            decode_parts(&missing),
            Err(StateError::Part(PartError::Missing("fs")))
        ));
    }

    /// A window's part of version 1 is read, what it lacks at its safest.
    #[test]
    fn the_first_dax_part_is_still_read() {
        let st = super::super::tests::sample_with_dax();
        let mut list = parts_of(&st);
        let d = st.dax.clone().unwrap();
        let v1 = DaxV1 {
            window: d.window,
            channel_fd: d.channel_fd,
            mappings: d.mappings.clone(),
        };
        list[DAX] = Part {
            version: 1,
            ..part(PARTS[DAX], &v1).unwrap()
        };
        let got = decode_parts(&list).unwrap().dax.unwrap();
        assert_eq!(got.mappings, d.mappings);
        assert_eq!(
            got.late_replies, None,
            "the channel's replies are not known"
        );
        assert!(!got.complete && got.devices.is_empty());
        list[DAX].version = 3;
        assert!(decode_parts(&list).is_err(), "a later version is not");
    }

    #[test]
    fn an_unknown_value_in_a_part_is_refused_not_defaulted() {
        let st = super::super::tests::sample();
        let mut list = parts_of(&st);
        // The serving part begins with the cache mode (Always is variant 3).
        assert_eq!(list[SERVING].bytes[0], 3);
        list[SERVING].bytes[0] = 9;
        let e = decode_parts(&list).unwrap_err();
        assert!(
            matches!(
                e,
                StateError::Part(PartError::Decode {
                    name: "settings.serving",
                    ..
                })
            ),
            "{e:?}"
        );
    }
}
