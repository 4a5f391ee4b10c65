// SPDX-License-Identifier: Apache-2.0
//! The device state a back-end hands QEMU for VM live migration
//! (VHOST_USER_PROTOCOL_F_DEVICE_STATE), and the one it accepts back.
//!
//! QEMU carries the bytes in its migration stream and hands them, unread, to
//! the destination back-end. Two formats are accepted:
//!
//! - ours (what xvirtiofsd writes): the envelope of [`crate::frame`] with
//!   magic `XVFSMIGR` and version [`MIGRATION_VERSION`], around the postcard
//!   encoding of [`MigrationStream`]: the FUSE session and the file system's
//!   inodes and handles, each inode described by where to find it;
//! - virtiofsd 1.11–1.14's (postcard of its `V1`/`V2` enum; see
//!   [`virtiofsd`]), so that a VM can move from a virtiofsd host to an
//!   xvirtiofsd host.
//!
//! The specification is `docs/migration.md` in the repository.

use serde::{Deserialize, Serialize};
use xvfs_fs::state::MigrationFs;
use xvfs_fs::SessionState;

use crate::frame::{self, FrameError};
use crate::parts::{self, PartError, PartKind};

pub mod virtiofsd;

/// Magic of our migration stream.
pub const MIGRATION_MAGIC: &[u8; 8] = b"XVFSMIGR";
/// The version this build writes (1: builds before release 0.2.0; 2:
/// release 0.2.0 and 0.3.0; 3: a list of parts, each with its own version,
/// read from 0.4.0 on and written from the release after it: a source
/// cannot ask what its destination reads, so a new format is read one
/// release before it is written). Each is pinned by a golden sample.
pub const MIGRATION_VERSION: u32 = 2;
/// The versions this build reads.
pub const MIGRATION_READS: std::ops::RangeInclusive<u32> = 2..=3;

/// The parts of version 3 (see [`crate::parts`]).
pub const PARTS_V3: &[PartKind] = &[
    PartKind {
        id: 1,
        name: "writer",
        version: 1,
    },
    PartKind {
        id: 2,
        name: "session",
        version: 1,
    },
    PartKind {
        id: 3,
        name: "fs",
        version: 1,
    },
];

/// Everything the destination needs, as of [`MIGRATION_VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationStream {
    /// `--version` of the source daemon.
    pub writer_version: String,
    /// The negotiated FUSE session (the guest does not INIT again).
    pub session: Option<SessionState>,
    /// Inodes and handles.
    pub fs: MigrationFs,
}

/// Where a received stream came from, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// From xvirtiofsd.
    Ours(MigrationStream),
    /// From virtiofsd: no FUSE session in it, only what its INIT settled
    /// for options the destination must match.
    Virtiofsd {
        fs: MigrationFs,
        opts: virtiofsd::NegotiatedOpts,
        /// Its format version (1 or 2).
        version: u32,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("migration stream envelope")]
    Frame(#[from] FrameError),
    #[error(
        "migration stream version {0} is not supported (this build reads versions {first} to {last})",
        first = MIGRATION_READS.start(),
        last = MIGRATION_READS.end()
    )]
    Version(u32),
    #[error("migration stream part")]
    Part(#[from] PartError),
    #[error(
        "migration stream does not decode (a value this build does not know, or a truncated field)"
    )]
    Decode(#[from] postcard::Error),
    #[error("migration stream claims more than it holds")]
    Bound(#[from] crate::bounded::BoundError),
    #[error("migration stream has {0} bytes after its end")]
    Trailing(usize),
    #[error("migration stream is neither xvirtiofsd's nor virtiofsd's ({0} bytes)")]
    Unknown(usize),
}

impl From<crate::bounded::Refused> for MigrationError {
    fn from(e: crate::bounded::Refused) -> Self {
        match e {
            crate::bounded::Refused::Bound(b) => MigrationError::Bound(b),
            crate::bounded::Refused::Decode(d) => MigrationError::Decode(d),
        }
    }
}

impl MigrationStream {
    /// Serializes into our framed format, version [`MIGRATION_VERSION`].
    pub fn encode(&self) -> Result<Vec<u8>, MigrationError> {
        self.encode_as(MIGRATION_VERSION)
    }

    /// Serializes as `version` (one of [`MIGRATION_READS`]).
    pub fn encode_as(&self, version: u32) -> Result<Vec<u8>, MigrationError> {
        let payload = match version {
            2 => postcard::to_stdvec(self)?,
            3 => parts::encode(&[
                parts::part(PARTS_V3[0], &self.writer_version)?,
                parts::part(PARTS_V3[1], &self.session)?,
                parts::part(PARTS_V3[2], &self.fs)?,
            ])?,
            other => return Err(MigrationError::Version(other)),
        };
        Ok(frame::encode_with(MIGRATION_MAGIC, version, &payload))
    }
}

/// Decodes a received stream: ours (by its magic, version checked), else
/// virtiofsd's. What either builds is bounded by the stream's size
/// ([`crate::bounded`]).
pub fn decode(blob: &[u8]) -> Result<Received, MigrationError> {
    if !blob.starts_with(MIGRATION_MAGIC) {
        return virtiofsd::decode(blob)?.ok_or(MigrationError::Unknown(blob.len()));
    }
    let (version, payload) = frame::decode_with(MIGRATION_MAGIC, blob, 0..=u32::MAX)?;
    let stream = match version {
        2 => {
            let budget = crate::bounded::Budget::for_input(payload.len());
            let (stream, rest) = crate::bounded::take_from_bytes(payload, &budget)?;
            if !rest.is_empty() {
                return Err(MigrationError::Trailing(rest.len()));
            }
            stream
        }
        3 => {
            let p = parts::decode(payload, PARTS_V3)?;
            MigrationStream {
                writer_version: p.take(0)?,
                session: p.take(1)?,
                fs: p.take(2)?,
            }
        }
        other => return Err(MigrationError::Version(other)),
    };
    Ok(Received::Ours(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvfs_fs::state::{Location, MigratedHandle, MigratedInode};

    pub(crate) fn sample_fs() -> MigrationFs {
        MigrationFs {
            next_id: 5,
            next_fh: 3,
            inodes: vec![
                MigratedInode {
                    id: 2,
                    refs: 3,
                    generation: 0,
                    file_type: Some(libc::S_IFDIR),
                    location: Location::FullPath {
                        path: b"dir".to_vec(),
                    },
                    verify: None,
                },
                MigratedInode {
                    id: 4,
                    refs: 1,
                    generation: 0,
                    file_type: Some(libc::S_IFREG),
                    location: Location::Path {
                        parent: 2,
                        name: b"f".to_vec(),
                    },
                    verify: None,
                },
            ],
            handles: vec![MigratedHandle {
                fh: 2,
                inode: 4,
                flags: libc::O_RDWR,
            }],
        }
    }

    fn sample() -> MigrationStream {
        MigrationStream {
            writer_version: "0.1.0".into(),
            session: Some(SessionState {
                minor: 41,
                flags: 1 << 16,
            }),
            fs: sample_fs(),
        }
    }

    #[test]
    fn round_trip_in_every_version_read() {
        for v in MIGRATION_READS {
            let blob = sample().encode_as(v).unwrap();
            assert_eq!(
                decode(&blob).unwrap(),
                Received::Ours(sample()),
                "version {v}"
            );
        }
        assert!(MIGRATION_READS.contains(&MIGRATION_VERSION));
    }

    #[test]
    fn another_version_is_refused_with_its_number() {
        let newer = MIGRATION_READS.end() + 1;
        let payload = postcard::to_stdvec(&sample()).unwrap();
        let blob = frame::encode_with(MIGRATION_MAGIC, newer, &payload);
        let err = decode(&blob).unwrap_err();
        assert!(matches!(err, MigrationError::Version(v) if v == newer));
        assert_eq!(
            err.to_string(),
            format!("migration stream version {newer} is not supported (this build reads versions 2 to 3)")
        );
    }

    #[test]
    fn a_part_of_version_3_is_checked_on_its_own() {
        let blob = sample().encode_as(3).unwrap();
        let (_, payload) = frame::decode_with(MIGRATION_MAGIC, &blob, 3..=3).unwrap();
        let mut list: Vec<parts::Part> = postcard::from_bytes(payload).unwrap();
        list[2].version = 2;
        let spoilt = frame::encode_with(MIGRATION_MAGIC, 3, &parts::encode(&list).unwrap());
        let err = decode(&spoilt).unwrap_err();
        assert!(
            matches!(
                err,
                MigrationError::Part(PartError::Version {
                    name: "fs",
                    version: 2,
                    reads: 1
                })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_file_handle_longer_than_max_handle_sz_does_not_decode() {
        use xvfs_fs::state::{FileHandle, MAX_HANDLE_SZ};
        let with_handle = |len: usize| {
            let mut s = sample();
            s.fs.inodes[1].location = Location::Handle(FileHandle {
                handle_type: 1,
                bytes: vec![1; len],
            });
            s.encode().unwrap()
        };
        assert!(decode(&with_handle(MAX_HANDLE_SZ)).is_ok());
        assert!(matches!(
            decode(&with_handle(MAX_HANDLE_SZ + 1)),
            Err(MigrationError::Decode(_))
        ));
    }

    #[test]
    fn damage_and_garbage_are_refused() {
        let mut blob = sample().encode().unwrap();
        let last = blob.len() - 1;
        blob[last] ^= 0x55;
        assert!(matches!(
            decode(&blob),
            Err(MigrationError::Frame(FrameError::Checksum))
        ));
        assert!(matches!(
            decode(b"\x07garbage"),
            Err(MigrationError::Unknown(8))
        ));
        assert!(matches!(decode(b""), Err(MigrationError::Unknown(0))));
    }
}
