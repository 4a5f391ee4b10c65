//! VM live migration of the inode and handle tables: a source describes them
//! (no descriptors), a destination on the same directory opens them again.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::passthrough::state::{Location, MigrationFs};
use xvfs_fs::passthrough::SaveOptions;

const ROOT: u64 = abi::ROOT_ID;

/// A source with a directory, a file in it (looked up twice, open for
/// writing with O_TRUNC), a symlink and an open directory.
struct Source {
    h: Harness,
    dir: u64,
    file: u64,
    fh: u64,
}

fn source() -> Source {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"payload").unwrap();
    std::os::unix::fs::symlink("d/f", h.dir.join("l")).unwrap();
    let dir = h.lookup_ok(ROOT, "d").nodeid;
    let file = h.lookup_ok(dir, "f").nodeid;
    h.lookup_ok(dir, "f");
    h.lookup_ok(ROOT, "l");
    h.opendir(dir);
    let fh = h
        .open(file, libc::O_RDWR | libc::O_TRUNC)
        .parse::<abi::OpenOut>()
        .fh;
    // Written after the open: the destination must not truncate it again.
    std::fs::write(h.dir.join("d/f"), b"payload").unwrap();
    Source { h, dir, file, fh }
}

/// A destination file system on the same directory (a fresh server).
fn destination(s: &Source) -> Harness {
    let d = Harness::uninit(|c| c.root_dir = s.h.dir.path.clone());
    d.init(7, 41, 0, 0);
    d
}

fn through_wire(st: &MigrationFs) -> MigrationFs {
    postcard::from_bytes(&postcard::to_stdvec(st).unwrap()).unwrap()
}

fn read(h: &Harness, node: u64, fh: u64) -> (i32, Vec<u8>) {
    let ri = abi::ReadIn {
        fh,
        size: 100,
        ..Default::default()
    };
    let r = h.req(opcode::READ, node, &ri.to_bytes());
    (-r.error, r.body)
}

#[test]
fn find_paths_round_trip_keeps_ids_counts_and_open_files() {
    let s = source();
    let st = through_wire(&s.h.fs().migration_state(SaveOptions {
        file_handles: false,
        verify_handles: true,
    }));
    assert_eq!(st.inodes.len(), 3);
    assert_eq!(st.handles.len(), 2);
    let f = st.inodes.iter().find(|i| i.id == s.file).unwrap();
    assert_eq!(
        f.location,
        Location::FullPath {
            path: b"d/f".to_vec()
        }
    );
    assert!(
        f.verify.is_some(),
        "--migration-verify-handles attaches a handle"
    );

    let d = destination(&s);
    let report = d.fs().load_migration(&st, true).unwrap();
    assert_eq!((report.inodes, report.handles), (3, 2));
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(d.fs().lookup_count(s.file), Some(2));
    // The open file reads through its handle, not truncated again.
    assert_eq!(read(&d, s.file, s.fh), (0, b"payload".to_vec()));
    // The same node for the same file; new ids do not collide.
    assert_eq!(d.lookup_ok(s.dir, "f").nodeid, s.file);
    std::fs::write(s.h.dir.join("new"), b"").unwrap();
    assert!(d.lookup_ok(ROOT, "new").nodeid > s.file);
}

#[test]
fn a_renamed_file_is_found_by_its_new_path() {
    let s = source();
    std::fs::rename(s.h.dir.join("d/f"), s.h.dir.join("moved")).unwrap();
    let st = s.h.fs().migration_state(SaveOptions::default());
    let f = st.inodes.iter().find(|i| i.id == s.file).unwrap();
    assert_eq!(
        f.location,
        Location::FullPath {
            path: b"moved".to_vec()
        }
    );
    let d = destination(&s);
    d.fs().load_migration(&st, true).unwrap();
    assert_eq!(read(&d, s.file, s.fh), (0, b"payload".to_vec()));
}

#[test]
fn file_handles_round_trip() {
    let s = source();
    let st = s.h.fs().migration_state(SaveOptions {
        file_handles: true,
        verify_handles: false,
    });
    let f = st.inodes.iter().find(|i| i.id == s.file).unwrap();
    assert!(
        matches!(f.location, Location::Handle(_)),
        "{:?}",
        f.location
    );
    let d = destination(&s);
    match d.fs().load_migration(&st, true) {
        Ok(_) => assert_eq!(read(&d, s.file, s.fh), (0, b"payload".to_vec())),
        // Without CAP_DAC_READ_SEARCH (an unprivileged test run) the kernel
        // refuses open_by_handle_at: the load must say so, not pretend.
        Err(e) => assert!(e.to_string().contains("not permitted"), "{e}"),
    }
}

#[test]
fn a_lost_file_aborts_or_answers_eio_for_it_alone() {
    let s = source();
    let st = s.h.fs().migration_state(SaveOptions::default());
    // Gone between the source's save and the destination's load.
    std::fs::remove_file(s.h.dir.join("d/f")).unwrap();
    let d = destination(&s);
    let err = d.fs().load_migration(&st, true).unwrap_err();
    assert!(
        err.to_string().contains(&format!("node {}", s.file)),
        "{err}"
    );

    let d = destination(&s);
    let report = d.fs().load_migration(&st, false).unwrap();
    assert_eq!(
        report.failed.len(),
        2,
        "the node and its open file: {report:?}"
    );
    assert_eq!(d.getattr(s.file).err(), libc::EIO);
    assert_eq!(read(&d, s.file, s.fh).0, libc::EIO);
    assert_eq!(d.getattr(s.dir).error, 0, "the rest is served");
    // The guest may still forget and release what it held.
    let rel = abi::ReleaseIn {
        fh: s.fh,
        ..Default::default()
    };
    assert_eq!(d.req(opcode::RELEASE, s.file, &rel.to_bytes()).error, 0);
}

#[test]
fn a_deleted_open_file_is_described_as_invalid() {
    let s = source();
    std::fs::remove_file(s.h.dir.join("d/f")).unwrap();
    let st = s.h.fs().migration_state(SaveOptions::default());
    let f = st.inodes.iter().find(|i| i.id == s.file).unwrap();
    assert!(
        matches!(f.location, Location::Invalid { .. }),
        "{:?}",
        f.location
    );
}

#[test]
fn hostile_states_are_refused() {
    let s = source();
    let mut st = s.h.fs().migration_state(SaveOptions::default());
    st.inodes[0].location = Location::FullPath {
        path: b"../../etc/passwd".to_vec(),
    };
    let d = destination(&s);
    assert!(d.fs().load_migration(&st, true).is_err(), "`..` is refused");
    let mut st = s.h.fs().migration_state(SaveOptions::default());
    st.inodes[1].id = st.inodes[0].id;
    assert!(d.fs().load_migration(&st, false).is_err(), "duplicate ids");
    let mut st = s.h.fs().migration_state(SaveOptions::default());
    st.inodes[0].id = ROOT;
    assert!(d.fs().load_migration(&st, false).is_err(), "the root id");
}
