// SPDX-License-Identifier: Apache-2.0
//! virtiofsd's device state (1.11 to 1.14), as a destination reads it.
//!
//! virtiofsd writes the postcard encoding of an enum with two variants (the
//! format version): `V1 { inodes, next_inode, handles, next_handle,
//! negotiated_opts }` and `V2 { v1, mount_paths }`. Each inode carries its
//! node id, lookup count, a location (the root; a parent node id and a name;
//! a path from the shared directory; a file handle; or "the source could not
//! find it") and, with `--migration-verify-handles`, the file handle the
//! destination must find. Each handle carries its id, its node and the
//! `open(2)` flags to open it with. The types below are written from that
//! description; they only need to match postcard's encoding of it (variant
//! indices in declaration order, integers as varints, strings and byte
//! vectors length-prefixed).
//!
//! A source writes it too ([`encode`], `--migration-target virtiofsd`), so
//! that a VM can move back to a virtiofsd host: version 1, which every
//! virtiofsd from 1.11 on reads. virtiofsd counts, in a node's reference
//! count, one reference per node located by a name in it (the destination
//! drops one per child it finds); the writer adds them.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use xvfs_fs::state::{FileHandle, Location, MigratedHandle, MigratedInode, MigrationFs};

use super::{MigrationStream, Received};
use crate::bounded::{self, BoundError, Refused};

#[derive(Debug, Serialize, Deserialize)]
enum Stream {
    V1(V1),
    V2(V2),
}

#[derive(Debug, Serialize, Deserialize)]
struct V1 {
    inodes: Vec<Inode>,
    next_inode: u64,
    handles: Vec<Handle>,
    next_handle: u64,
    negotiated_opts: NegotiatedOpts,
}

#[derive(Debug, Serialize, Deserialize)]
struct V2 {
    v1: V1,
    /// Source mount id → path of that mount inside the shared directory.
    mount_paths: HashMap<u64, String>,
}

/// What virtiofsd's INIT settled for options a destination must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NegotiatedOpts {
    pub writeback: bool,
    pub announce_submounts: bool,
    pub posix_acl: bool,
    pub sup_group_extension: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Inode {
    id: u64,
    refcount: u64,
    location: InodeLocation,
    file_handle: Option<SourceHandle>,
}

#[derive(Debug, Serialize, Deserialize)]
enum InodeLocation {
    RootNode,
    Path { parent: u64, filename: String },
    Invalid,
    FullPath { filename: String },
    FileHandle { handle: SourceHandle },
}

#[derive(Debug, Serialize, Deserialize)]
struct SourceHandle {
    mnt_id: u64,
    handle_type: i32,
    /// At most `MAX_HANDLE_SZ` bytes: a longer one fails the decoding.
    /// (A boxed slice, not a vector: an inode is the entry of a stream
    /// that builds the most per byte read, see [`crate::bounded`].)
    #[serde(deserialize_with = "handle_bytes")]
    handle: Box<[u8]>,
}

fn handle_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<[u8]>, D::Error> {
    xvfs_fs::state::handle_bytes(d).map(Vec::into_boxed_slice)
}

#[derive(Debug, Serialize, Deserialize)]
struct Handle {
    id: u64,
    inode: u64,
    source: HandleSource,
}

#[derive(Debug, Serialize, Deserialize)]
enum HandleSource {
    OpenInode { flags: i32 },
}

impl From<SourceHandle> for FileHandle {
    fn from(h: SourceHandle) -> FileHandle {
        FileHandle {
            handle_type: h.handle_type,
            bytes: h.handle.into_vec(),
        }
    }
}

/// Decodes a virtiofsd stream; `None` when `blob` is not one (or has bytes
/// after its end); an error when it claims more than it holds (see
/// [`crate::bounded`]: virtiofsd's format has no envelope, and nothing
/// but its size to go by).
pub(super) fn decode(blob: &[u8]) -> Result<Option<Received>, BoundError> {
    let budget = bounded::Budget::for_input(blob.len());
    let (stream, rest): (Stream, _) = match bounded::take_from_bytes(blob, &budget) {
        Ok(s) => s,
        Err(Refused::Bound(b)) => return Err(b),
        Err(Refused::Decode(_)) => return Ok(None),
    };
    if !rest.is_empty() {
        return Ok(None);
    }
    let (v1, version) = match stream {
        Stream::V1(v1) => (v1, 1),
        Stream::V2(v2) => (v2.v1, 2),
    };
    // virtiofsd's count includes one reference per node found by name in
    // it; ours is the guest's lookups only (at least one: a directory the
    // guest forgot but whose children it holds stays).
    let mut children: HashMap<u64, u64> = HashMap::new();
    for i in &v1.inodes {
        if let InodeLocation::Path { parent, .. } = &i.location {
            *children.entry(*parent).or_default() += 1;
        }
    }
    let inodes = v1
        .inodes
        .into_iter()
        .filter_map(|i| {
            let within = children.get(&i.id).copied().unwrap_or(0);
            convert_inode(i).map(|mut m| {
                m.refs = m.refs.saturating_sub(within).max(1);
                m
            })
        })
        .collect();
    let handles = v1
        .handles
        .into_iter()
        .map(|h| {
            let HandleSource::OpenInode { flags } = h.source;
            MigratedHandle {
                fh: h.id,
                inode: h.inode,
                flags,
            }
        })
        .collect();
    Ok(Some(Received::Virtiofsd {
        fs: MigrationFs {
            next_id: v1.next_inode,
            next_fh: v1.next_handle,
            inodes,
            handles,
        },
        opts: v1.negotiated_opts,
        version,
    }))
}

/// One inode; the root is found by the destination itself (`None`).
fn convert_inode(i: Inode) -> Option<MigratedInode> {
    let location = match i.location {
        InodeLocation::RootNode => return None,
        InodeLocation::Path { parent, filename } => Location::Path {
            parent,
            name: filename.into_bytes(),
        },
        InodeLocation::FullPath { filename } => Location::FullPath {
            path: filename.into_bytes(),
        },
        InodeLocation::FileHandle { handle } => Location::Handle(handle.into()),
        InodeLocation::Invalid => Location::Invalid {
            why: "virtiofsd (the source) could not find it".into(),
        },
    };
    Some(MigratedInode {
        id: i.id,
        refs: i.refcount,
        generation: 0,
        file_type: None,
        location,
        verify: i.file_handle.map(FileHandle::from),
    })
}

impl NegotiatedOpts {
    /// What a FUSE session with INIT flags `flags` settled.
    pub fn from_flags(flags: u64) -> NegotiatedOpts {
        use xvfs_fs::abi::init_flags as f;
        NegotiatedOpts {
            writeback: flags & f::WRITEBACK_CACHE != 0,
            announce_submounts: flags & f::SUBMOUNTS != 0,
            posix_acl: flags & f::POSIX_ACL != 0,
            sup_group_extension: flags & f::CREATE_SUPP_GROUP != 0,
        }
    }
}

/// The reference count virtiofsd gives the root before the guest's own.
const ROOT_REFS: u64 = 2;

/// `stream` in virtiofsd's format (version 1), for a destination that runs
/// virtiofsd 1.11 to 1.14. Refused, naming the node, when a node is found
/// by file handle (virtiofsd reads those only with its own mount ids) or
/// by a name that is not UTF-8 (virtiofsd's names are strings).
pub fn encode(stream: &MigrationStream) -> Result<Vec<u8>, String> {
    let fs = &stream.fs;
    let mut children: HashMap<u64, u64> = HashMap::new();
    for m in &fs.inodes {
        if let Location::Path { parent, .. } = &m.location {
            *children.entry(*parent).or_default() += 1;
        }
    }
    let text = |id: u64, b: &[u8]| {
        String::from_utf8(b.to_vec())
            .map_err(|_| format!("node {id}: its name is not UTF-8, which virtiofsd cannot read"))
    };
    let root_id = xvfs_fs::abi::ROOT_ID;
    let mut inodes = vec![Inode {
        id: root_id,
        refcount: ROOT_REFS + children.get(&root_id).copied().unwrap_or(0),
        location: InodeLocation::RootNode,
        file_handle: None,
    }];
    for m in &fs.inodes {
        let location = match &m.location {
            Location::Path { parent, name } => InodeLocation::Path {
                parent: *parent,
                filename: text(m.id, name)?,
            },
            Location::FullPath { path } => InodeLocation::FullPath {
                filename: text(m.id, path)?,
            },
            Location::Invalid { .. } => InodeLocation::Invalid,
            Location::Handle(_) => {
                return Err(format!(
                    "node {}: found by file handle, which virtiofsd reads only from its own \
                     mounts (use --migration-mode find-paths)",
                    m.id
                ))
            }
        };
        inodes.push(Inode {
            id: m.id,
            refcount: m.refs + children.get(&m.id).copied().unwrap_or(0),
            location,
            file_handle: None,
        });
    }
    let handles = fs
        .handles
        .iter()
        .map(|h| Handle {
            id: h.fh,
            inode: h.inode,
            source: HandleSource::OpenInode { flags: h.flags },
        })
        .collect();
    let v1 = V1 {
        inodes,
        next_inode: fs.next_id,
        handles,
        next_handle: fs.next_fh,
        negotiated_opts: NegotiatedOpts::from_flags(stream.session.map_or(0, |s| s.flags)),
    };
    postcard::to_stdvec(&Stream::V1(v1)).map_err(|e| format!("virtiofsd's format: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream as virtiofsd 1.14 writes it (built from this module's own
    /// mirror of its types, then checked byte by byte where the encoding
    /// is fixed).
    fn v2_stream() -> Vec<u8> {
        let v1 = V1 {
            inodes: vec![
                Inode {
                    id: 1,
                    refcount: 2,
                    location: InodeLocation::RootNode,
                    file_handle: None,
                },
                Inode {
                    id: 3,
                    refcount: 1,
                    location: InodeLocation::Path {
                        parent: 1,
                        filename: "a".into(),
                    },
                    file_handle: Some(SourceHandle {
                        mnt_id: 9,
                        handle_type: 1,
                        handle: vec![1, 2].into(),
                    }),
                },
                Inode {
                    id: 4,
                    refcount: 5,
                    location: InodeLocation::Invalid,
                    file_handle: None,
                },
            ],
            next_inode: 5,
            handles: vec![Handle {
                id: 7,
                inode: 3,
                source: HandleSource::OpenInode { flags: 2 },
            }],
            next_handle: 8,
            negotiated_opts: NegotiatedOpts {
                writeback: true,
                ..NegotiatedOpts::default()
            },
        };
        postcard::to_stdvec(&Stream::V2(V2 {
            v1,
            mount_paths: HashMap::new(),
        }))
        .unwrap()
    }

    #[test]
    fn the_encoding_is_postcards_positional_one() {
        let b = v2_stream();
        // Variant V2 = 1, then 3 inodes; the root: id 1, refcount 2,
        // RootNode = 0, no file handle = 0.
        assert_eq!(&b[..6], &[1, 3, 1, 2, 0, 0]);
        // The second: id 3, refcount 1, Path = 1, parent 1, "a", Some(handle).
        assert_eq!(&b[6..13], &[3, 1, 1, 1, 1, b'a', 1]);
    }

    #[test]
    fn a_v2_stream_becomes_our_state() {
        let Some(Received::Virtiofsd { fs, opts, version }) = decode(&v2_stream()).unwrap() else {
            panic!("not decoded");
        };
        assert_eq!(version, 2);
        assert!(opts.writeback);
        assert_eq!((fs.next_id, fs.next_fh), (5, 8));
        assert_eq!(fs.inodes.len(), 2, "the root is not carried");
        assert_eq!(
            fs.inodes[0].location,
            Location::Path {
                parent: 1,
                name: b"a".to_vec()
            }
        );
        assert_eq!(
            fs.inodes[0].verify,
            Some(FileHandle {
                handle_type: 1,
                bytes: vec![1, 2]
            })
        );
        assert!(matches!(fs.inodes[1].location, Location::Invalid { .. }));
        assert_eq!(fs.inodes[1].refs, 5);
        assert_eq!(
            fs.handles,
            vec![MigratedHandle {
                fh: 7,
                inode: 3,
                flags: 2
            }]
        );
    }

    #[test]
    fn a_file_handle_longer_than_max_handle_sz_is_not_a_stream() {
        use xvfs_fs::state::MAX_HANDLE_SZ;
        let stream = |len: usize| {
            let inode = Inode {
                id: 3,
                refcount: 1,
                location: InodeLocation::FileHandle {
                    handle: SourceHandle {
                        mnt_id: 9,
                        handle_type: 1,
                        handle: vec![1; len].into(),
                    },
                },
                file_handle: None,
            };
            let v1 = V1 {
                inodes: vec![inode],
                next_inode: 4,
                handles: Vec::new(),
                next_handle: 1,
                negotiated_opts: NegotiatedOpts::default(),
            };
            postcard::to_stdvec(&Stream::V1(v1)).unwrap()
        };
        assert!(decode(&stream(MAX_HANDLE_SZ)).unwrap().is_some());
        assert!(decode(&stream(MAX_HANDLE_SZ + 1)).unwrap().is_none());
    }

    #[test]
    fn trailing_bytes_or_truncation_are_not_a_stream() {
        let mut b = v2_stream();
        b.push(0);
        assert!(decode(&b).unwrap().is_none());
        let b = v2_stream();
        assert!(decode(&b[..b.len() - 1]).unwrap().is_none());
    }

    /// What we write for virtiofsd reads back as the same nodes and open
    /// files through the reader written from virtiofsd's description, with
    /// the root first and one reference per child found by name added to
    /// its parent.
    #[test]
    fn what_we_write_for_virtiofsd_is_its_version_1() {
        use xvfs_fs::SessionState;
        let mut fs = super::super::tests::sample_fs();
        fs.inodes.push(MigratedInode {
            id: 6,
            refs: 1,
            generation: 0,
            file_type: Some(libc::S_IFREG),
            location: Location::Invalid { why: "gone".into() },
            verify: None,
        });
        let stream = MigrationStream {
            writer_version: "0.3.0".into(),
            session: Some(SessionState {
                minor: 41,
                flags: xvfs_fs::abi::init_flags::WRITEBACK_CACHE,
            }),
            fs,
        };
        let blob = encode(&stream).unwrap();
        assert_eq!(blob[0], 0, "variant V1");
        let (Stream::V1(v1), rest) = postcard::take_from_bytes::<Stream>(&blob).unwrap() else {
            panic!("not V1");
        };
        assert!(rest.is_empty());
        // The root: 2 + its one child by name ("dir" is a full path).
        assert_eq!((v1.inodes[0].id, v1.inodes[0].refcount), (1, 2));
        assert!(matches!(v1.inodes[0].location, InodeLocation::RootNode));
        // "dir" (id 2, 3 lookups) holds "f" (id 4): 4 references.
        let refs: HashMap<u64, u64> = v1.inodes.iter().map(|i| (i.id, i.refcount)).collect();
        assert_eq!((refs[&2], refs[&4], refs[&6]), (4, 1, 1));
        let Some(Received::Virtiofsd { fs, opts, version }) = decode(&blob).unwrap() else {
            panic!("not read back");
        };
        assert_eq!(version, 1);
        assert!(opts.writeback && !opts.posix_acl);
        assert_eq!((fs.next_id, fs.next_fh), (5, 3));
        assert_eq!(fs.handles, stream.fs.handles);
        let locations: Vec<_> = fs
            .inodes
            .iter()
            .map(|i| (i.id, i.location.clone()))
            .collect();
        let want: Vec<_> = stream
            .fs
            .inodes
            .iter()
            .map(|i| match &i.location {
                Location::Invalid { .. } => (
                    i.id,
                    Location::Invalid {
                        why: "virtiofsd (the source) could not find it".into(),
                    },
                ),
                l => (i.id, l.clone()),
            })
            .collect();
        assert_eq!(locations, want);
        let refs_back: Vec<u64> = fs.inodes.iter().map(|i| i.refs).collect();
        let refs_ours: Vec<u64> = stream.fs.inodes.iter().map(|i| i.refs).collect();
        assert_eq!(refs_back, refs_ours, "lookup counts survive the round trip");
    }

    #[test]
    fn what_virtiofsd_cannot_read_is_refused_naming_the_node() {
        let mut fs = super::super::tests::sample_fs();
        fs.inodes[1].location = Location::Path {
            parent: 2,
            name: vec![0xff, 0xfe],
        };
        let stream = |fs| MigrationStream {
            writer_version: "x".into(),
            session: None,
            fs,
        };
        let e = encode(&stream(fs)).unwrap_err();
        assert!(e.contains("node 4") && e.contains("UTF-8"), "{e}");
        let mut fs = super::super::tests::sample_fs();
        fs.inodes[0].location = Location::Handle(FileHandle {
            handle_type: 1,
            bytes: vec![1; 8],
        });
        let e = encode(&stream(fs)).unwrap_err();
        assert!(e.contains("node 2") && e.contains("find-paths"), "{e}");
    }
}

#[cfg(test)]
mod bounds {
    use super::*;
    use crate::bounded::{honest, BYTES_PER_INPUT_BYTE};

    /// virtiofsd's streams of an honest source stay inside the bound, even
    /// one whose every inode is lost (the smallest entry there is).
    #[test]
    fn honest_streams_stay_inside_the_bound() {
        for lost in [false, true] {
            let stream = MigrationStream {
                writer_version: "x".into(),
                session: None,
                fs: honest::migration_fs(lost),
            };
            let b = encode(&stream).unwrap();
            let r = honest::ratio::<Stream>(&b);
            eprintln!("virtiofsd stream (lost: {lost}): {r:.2} bytes built per input byte");
            assert!(r <= BYTES_PER_INPUT_BYTE as f64, "lost {lost}: {r:.2}");
            assert!(decode(&b).unwrap().is_some());
        }
        // The densest entry an honest source writes: a lost inode (id of
        // three bytes, one reference, no handle), six bytes.
        let lost = Inode {
            id: 100_000,
            refcount: 1,
            location: InodeLocation::Invalid,
            file_handle: None,
        };
        let size = postcard::to_stdvec(&lost).unwrap().len();
        assert_eq!(size, 6);
        let r = std::mem::size_of::<Inode>() as f64 / size as f64;
        eprintln!("virtiofsd lost inode: {r:.2} bytes built per input byte");
        assert!(r <= BYTES_PER_INPUT_BYTE as f64, "{r:.2}");
    }
}
