// SPDX-License-Identifier: Apache-2.0
//! State format 8 (release 0.3.0): a list of parts, each with its own
//! version and length, so that each can evolve on its own.
//!
//! ```text
//! payload = postcard Vec<Part>
//! Part    = { id: u16, version: u16, optional: bool, bytes: Vec<u8> }
//! ```
//!
//! A known part must come in the version this build reads and use all of
//! its bytes; an unknown part is skipped when marked optional (something a
//! reader may ignore) and refused otherwise; every part this build needs
//! must be there, once. A later part version adds a decoder here and keeps
//! the old one for as long as the compatibility policy says.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{DaemonState, StateError};

#[derive(Debug, Serialize, Deserialize)]
struct Part {
    id: u16,
    version: u16,
    optional: bool,
    bytes: Vec<u8>,
}

const WRITER: usize = 0;
const SECURITY: usize = 1;
const SERVING: usize = 2;
const OPERATIONS: usize = 3;
const ENDPOINTS: usize = 4;
const DEVICE: usize = 5;
const FS: usize = 6;
const SESSION: usize = 7;

/// One kind of part.
#[derive(Debug, Clone, Copy)]
pub struct PartKind {
    pub id: u16,
    pub name: &'static str,
    /// The version this build writes and reads.
    pub version: u16,
}

/// Every part of format 8, indexed by the constants above.
pub const PARTS: [PartKind; 8] = [
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
];

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

fn part<T: Serialize>(which: usize, value: &T) -> Result<Part, StateError> {
    Ok(Part {
        id: PARTS[which].id,
        version: PARTS[which].version,
        optional: false,
        bytes: postcard::to_stdvec(value)?,
    })
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
    let parts = vec![
        part(WRITER, &writer)?,
        part(SECURITY, &st.settings.security)?,
        part(SERVING, &st.settings.serving)?,
        part(OPERATIONS, &st.settings.operations)?,
        part(ENDPOINTS, &endpoints)?,
        part(DEVICE, &st.device)?,
        part(FS, &st.fs)?,
        part(SESSION, &st.session)?,
    ];
    Ok(postcard::to_stdvec(&parts)?)
}

/// The parts of a payload by kind, each checked for its version.
fn sort(parts: &[Part]) -> Result<[Option<&Part>; PARTS.len()], StateError> {
    let mut found = [None; PARTS.len()];
    for p in parts {
        let Some(i) = PARTS.iter().position(|k| k.id == p.id) else {
            if p.optional {
                continue;
            }
            return Err(StateError::UnknownPart(p.id));
        };
        let kind = PARTS[i];
        if found[i].is_some() {
            return Err(StateError::Invalid(format!(
                "part {} appears twice",
                kind.name
            )));
        }
        if p.version != kind.version {
            return Err(StateError::PartVersion {
                name: kind.name,
                version: p.version,
                reads: kind.version,
            });
        }
        found[i] = Some(p);
    }
    Ok(found)
}

/// A format-8 payload as this build's state.
pub(super) fn decode(payload: &[u8]) -> Result<DaemonState, StateError> {
    let (parts, rest): (Vec<Part>, _) = postcard::take_from_bytes(payload)?;
    if !rest.is_empty() {
        return Err(StateError::Trailing(rest.len()));
    }
    let found = sort(&parts)?;
    let writer: Writer = take(&found, WRITER)?;
    let endpoints: Endpoints = take(&found, ENDPOINTS)?;
    Ok(DaemonState {
        writer_version: writer.writer_version,
        writer_pid: writer.writer_pid,
        started_unix_ms: writer.started_unix_ms,
        upgrades: writer.upgrades,
        settings: crate::settings::Settings {
            security: take(&found, SECURITY)?,
            serving: take(&found, SERVING)?,
            operations: take(&found, OPERATIONS)?,
        },
        vhost_socket_fd: endpoints.vhost_socket_fd,
        control_socket_fd: endpoints.control_socket_fd,
        control_path: endpoints.control_path,
        log_fd: endpoints.log_fd,
        pid_file_fds: endpoints.pid_file_fds,
        device: take(&found, DEVICE)?,
        fs: take(&found, FS)?,
        session: take(&found, SESSION)?,
        fs_fd_base: endpoints.fs_fd_base,
    })
}

/// Part `which`, decoded; all of its bytes used.
fn take<T: DeserializeOwned>(
    found: &[Option<&Part>; PARTS.len()],
    which: usize,
) -> Result<T, StateError> {
    let name = PARTS[which].name;
    let p = found[which].ok_or(StateError::MissingPart(name))?;
    let (value, rest) = postcard::take_from_bytes(&p.bytes)
        .map_err(|source| StateError::PartDecode { name, source })?;
    if !rest.is_empty() {
        return Err(StateError::Invalid(format!(
            "part {name} has {} bytes after its end",
            rest.len()
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts_of(st: &DaemonState) -> Vec<Part> {
        let payload = encode(st).unwrap();
        postcard::from_bytes(&payload).unwrap()
    }

    fn decode_parts(parts: &[Part]) -> Result<DaemonState, StateError> {
        decode(&postcard::to_stdvec(parts).unwrap())
    }

    #[test]
    fn each_part_is_checked_on_its_own() {
        let st = super::super::tests::sample();
        assert_eq!(decode_parts(&parts_of(&st)).unwrap(), st);

        let mut newer = parts_of(&st);
        newer[SERVING].version = 2;
        let e = decode_parts(&newer).unwrap_err().to_string();
        assert!(
            e.contains("settings.serving version 2") && e.contains("reads 1"),
            "{e}"
        );

        let mut missing = parts_of(&st);
        missing.remove(FS);
        assert!(matches!(
            decode_parts(&missing),
            Err(StateError::MissingPart("fs"))
        ));

        let mut twice = parts_of(&st);
        twice.push(part(DEVICE, &st.device).unwrap());
        assert!(matches!(decode_parts(&twice), Err(StateError::Invalid(_))));

        let mut padded = parts_of(&st);
        padded[WRITER].bytes.push(0);
        assert!(matches!(decode_parts(&padded), Err(StateError::Invalid(_))));

        let mut unknown = parts_of(&st);
        unknown.push(Part {
            id: 99,
            version: 1,
            optional: true,
            bytes: vec![1, 2],
        });
        assert_eq!(
            decode_parts(&unknown).unwrap(),
            st,
            "an optional unknown part is skipped"
        );
        unknown.last_mut().unwrap().optional = false;
        assert!(matches!(
            decode_parts(&unknown),
            Err(StateError::UnknownPart(99))
        ));
    }

    #[test]
    fn an_unknown_value_in_a_part_is_refused_not_defaulted() {
        let st = super::super::tests::sample();
        let mut parts = parts_of(&st);
        // The serving part begins with the cache mode (Always is variant 3).
        assert_eq!(parts[SERVING].bytes[0], 3);
        parts[SERVING].bytes[0] = 9;
        let e = decode_parts(&parts).unwrap_err();
        assert!(
            matches!(
                e,
                StateError::PartDecode {
                    name: "settings.serving",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
