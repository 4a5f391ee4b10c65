// SPDX-License-Identifier: Apache-2.0
//! VM live migration of the inode and handle tables: a source describes them
//! (no descriptors), a destination on the same directory opens them again.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::passthrough::SaveOptions;
use xvfs_fs::state::{
    FileHandle, Location, MigratedHandle, MigratedInode, MigrationFs, MAX_HANDLE_SZ,
};
use xvfs_fs::PassthroughFs;

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

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

/// virtiofsd numbers its handles from 0: a guest that holds handle 0 on a
/// virtiofsd source keeps it on this destination (found by the capture of
/// virtiofsd's own state, tests/vm/capture_virtiofsd_sample.sh).
#[test]
fn handle_0_from_virtiofsd_is_kept() {
    let s = source();
    let mut st = through_wire(&s.h.fs().migration_state(SaveOptions {
        file_handles: false,
        verify_handles: false,
    }));
    let h = st.handles.iter_mut().find(|h| h.fh == s.fh).unwrap();
    h.fh = 0;
    let d = destination(&s);
    let report = d.fs().load_migration(&st, true).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(read(&d, s.file, 0), (0, b"payload".to_vec()));
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

/// A directory node found by `name` in node `parent`.
fn dir_node(id: u64, parent: u64, name: &str) -> MigratedInode {
    MigratedInode {
        id,
        refs: 1,
        generation: 0,
        file_type: Some(libc::S_IFDIR),
        location: Location::Path {
            parent,
            name: name.as_bytes().to_vec(),
        },
        verify: None,
    }
}

fn state(inodes: Vec<MigratedInode>) -> MigrationFs {
    MigrationFs {
        next_id: inodes.iter().map(|m| m.id + 1).max().unwrap_or(2),
        next_fh: 1,
        inodes,
        handles: Vec::new(),
    }
}

/// Directory `d` in the directory `dir` holds open, through /proc (no path
/// grows with the depth, nothing recurses).
fn child(dir: &std::fs::File) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{}/d", dir.as_raw_fd()))
}

fn open_dir(p: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(p)
}

/// `n` directories `d` in `root`, each inside the one before.
fn make_chain(root: &std::path::Path, n: usize) {
    let mut dir = open_dir(root).unwrap();
    for _ in 0..n {
        std::fs::create_dir(child(&dir)).unwrap();
        dir = open_dir(&child(&dir)).unwrap();
    }
}

fn remove_chain(root: &std::path::Path) {
    let mut dirs = vec![open_dir(root).unwrap()];
    while let Ok(d) = open_dir(&child(&dirs[dirs.len() - 1])) {
        dirs.push(d);
    }
    dirs.pop();
    while let Some(parent) = dirs.pop() {
        std::fs::remove_dir(child(&parent)).unwrap();
    }
}

/// Room for `n` more descriptors than the test harness needs.
fn raise_fd_limit(n: u64) {
    // SAFETY: plain data; all zeroes is valid.
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    assert!(
        l.rlim_max >= n + 1024,
        "RLIMIT_NOFILE {} is too low",
        l.rlim_max
    );
    l.rlim_cur = l.rlim_max;
    // SAFETY: valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
}

#[test]
fn ten_thousand_nested_directories_listed_deepest_first_load_in_one_pass() {
    const N: u64 = 10_000;
    raise_fd_limit(N);
    let dir = TestDir::new("chain");
    make_chain(&dir.path, N as usize);
    // Node i + 2 is the directory at depth i; the deepest comes first, so
    // every node names a parent that comes later in the list.
    let inodes = (0..N)
        .rev()
        .map(|i| dir_node(i + 2, if i == 0 { ROOT } else { i + 1 }, "d"))
        .collect();
    let st = state(inodes);
    let fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let started = std::time::Instant::now();
    let report = fs.load_migration(&st, true).unwrap();
    let took = started.elapsed();
    assert_eq!(report.inodes, N as usize);
    assert!(report.failed.is_empty(), "{:?}", &report.failed[..1]);
    assert_eq!(fs.lookup_count(N + 1), Some(1), "the deepest directory");
    // One pass: a fraction of a second (the passes before took 26 s here).
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    drop(fs);
    remove_chain(&dir.path);
}

#[test]
fn parents_that_name_each_other_fail_without_looping() {
    let dir = TestDir::new("cycle");
    for d in ["a", "e"] {
        std::fs::create_dir(dir.join(d)).unwrap();
    }
    let st = state(vec![
        // 2 and 3 are each other's parent; 4 is its own; 5 lies under the
        // cycle; 6 is fine.
        dir_node(2, 3, "a"),
        dir_node(3, 2, "b"),
        dir_node(4, 4, "c"),
        dir_node(5, 2, "d"),
        dir_node(6, ROOT, "e"),
    ]);
    let fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let report = fs.load_migration(&st, false).unwrap();
    assert_eq!(report.inodes, 1);
    let why = "its parent directory is not part of the state";
    let want: Vec<String> = (2..=5).map(|id| format!("node {id}: {why}")).collect();
    assert_eq!(report.failed, want);
    assert_eq!(fs.lookup_count(6), Some(1));

    let fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let err = fs.load_migration(&st, true).unwrap_err().to_string();
    assert!(
        err.contains(&format!("node 2: {why} (4 of 5 nodes not found)")),
        "{err}"
    );
}

#[test]
fn a_child_of_a_lost_parent_says_so() {
    let dir = TestDir::new("lostparent");
    std::fs::create_dir(dir.join("a")).unwrap();
    // The child comes first, its parent (gone from the share) after it.
    let st = state(vec![dir_node(3, 2, "b"), dir_node(2, ROOT, "gone")]);
    let fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let report = fs.load_migration(&st, false).unwrap();
    assert_eq!(report.failed.len(), 2);
    assert!(
        report.failed[0].starts_with("node 2: cannot open"),
        "{:?}",
        report.failed
    );
    assert_eq!(report.failed[1], "node 3: its parent 2 was not found");
}

#[test]
fn more_nodes_and_open_files_than_max_open_are_refused_before_any_work() {
    let dir = TestDir::new("maxopen");
    for d in ["a", "b", "c"] {
        std::fs::create_dir(dir.join(d)).unwrap();
    }
    let nodes = vec![dir_node(2, ROOT, "a"), dir_node(3, ROOT, "b")];
    let mut st = state(nodes.clone());
    st.handles.push(MigratedHandle {
        fh: 1,
        inode: 2,
        flags: libc::O_RDONLY | libc::O_DIRECTORY,
    });
    st.next_fh = 2;
    let capped = |max_open| {
        let mut cfg = config_for(&dir.path);
        cfg.max_open = max_open;
        PassthroughFs::new(cfg).unwrap()
    };
    // Exactly at the cap: loaded.
    let report = capped(3).load_migration(&st, true).unwrap();
    assert_eq!((report.inodes, report.handles), (2, 1));

    let mut over = st.clone();
    over.inodes.push(dir_node(4, ROOT, "c"));
    over.next_id = 5;
    for abort in [true, false] {
        let fs = capped(3);
        let err = fs.load_migration(&over, abort).unwrap_err().to_string();
        assert!(
            err.contains("3 nodes and 1 open files are more than the 3 this process may hold"),
            "{err}"
        );
        assert_eq!(fs.lookup_count(2), None, "nothing was loaded");
    }
    // 0: no cap.
    assert_eq!(capped(0).load_migration(&over, true).unwrap().inodes, 3);
}

#[test]
fn a_file_handle_longer_than_max_handle_sz_is_refused() {
    let dir = TestDir::new("longhandle");
    std::fs::create_dir(dir.join("a")).unwrap();
    let long = FileHandle {
        handle_type: 1,
        bytes: vec![0; MAX_HANDLE_SZ + 1],
    };
    let mut by_handle = dir_node(3, ROOT, "");
    by_handle.location = Location::Handle(long.clone());
    let mut verified = dir_node(2, ROOT, "a");
    verified.verify = Some(long);
    for bad in [by_handle, verified] {
        let st = state(vec![dir_node(4, ROOT, "a"), bad]);
        let fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
        let err = fs.load_migration(&st, false).unwrap_err().to_string();
        assert!(
            err.contains("file handle of 129 bytes (at most 128)"),
            "{err}"
        );
        assert_eq!(fs.lookup_count(4), None, "nothing was loaded");
    }
}
