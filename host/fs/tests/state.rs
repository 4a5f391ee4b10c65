// SPDX-License-Identifier: Apache-2.0
//! Snapshot and restore of the inode and handle tables (live upgrade).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::state::{FsSnapshot, FsState};
use xvfs_fs::{PassthroughFs, PassthroughServer as Server};

const ROOT: u64 = abi::ROOT_ID;

/// What a successor process would receive over SCM_RIGHTS: duplicates.
fn dup_fds(s: &FsSnapshot) -> Vec<OwnedFd> {
    s.fds
        .iter()
        .map(|&fd| {
            // SAFETY: the snapshot's descriptors are open while the source file
            // system lives, which it does for the whole test.
            unsafe { BorrowedFd::borrow_raw(fd) }
                .try_clone_to_owned()
                .unwrap()
        })
        .collect()
}

/// An `O_PATH` descriptor of `path`, as a forged state might carry.
fn path_fd(path: &Path) -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .unwrap()
        .into()
}

/// Makes directory `d`, file `d/f` holding `content` and symlink `l` to it
/// in the share and looks each up once, as a guest would; returns their
/// entries (d, d/f, l).
fn hold_tree(h: &Harness, content: &[u8]) -> (abi::EntryOut, abi::EntryOut, abi::EntryOut) {
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), content).unwrap();
    std::os::unix::fs::symlink("d/f", h.dir.join("l")).unwrap();
    let d = h.lookup_ok(ROOT, "d");
    let f = h.lookup_ok(d.nodeid, "f");
    let l = h.lookup_ok(ROOT, "l");
    (d, f, l)
}

/// A file system restored from `state` on the configured directory.
fn restore_fs(
    cfg: xvfs_fs::passthrough::Config,
    state: &FsState,
    fds: Vec<OwnedFd>,
) -> Result<PassthroughFs, xvfs_fs::passthrough::Error> {
    let dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir)?;
    PassthroughFs::restore(cfg, dir, state, fds)
}

fn restored(h: &Harness, state: &FsState, fds: Vec<OwnedFd>) -> Server {
    let cfg = config_for(&h.dir.path);
    Server::new(restore_fs(cfg, state, fds).unwrap())
}

fn req(srv: &Server, op: u32, node: u64, body: &[u8]) -> (i32, Vec<u8>) {
    let hd = abi::InHeader {
        len: (abi::InHeader::SIZE + body.len()) as u32,
        opcode: op,
        unique: 99,
        nodeid: node,
        ..Default::default()
    };
    let req = cat(&[&hd.to_bytes(), body]);
    let mut r = xvfs_fs::io::SliceReader::new(&req);
    let mut w = xvfs_fs::io::VecWriter::new(ROOM);
    let n = srv.handle(&mut r, &mut w);
    let out = w.into_inner();
    assert_eq!(n, out.len());
    let oh = abi::OutHeader::from_bytes(&out).unwrap();
    assert_eq!(oh.len as usize, n);
    (-oh.error, out[16..].to_vec())
}

#[test]
fn snapshot_restore_round_trip() {
    let h = Harness::new();
    let (d, f, l) = hold_tree(&h, b"payload");
    h.lookup_ok(d.nodeid, "f");
    let fh = h.open(f.nodeid, libc::O_RDWR).parse::<abi::OpenOut>().fh;
    let dfh = h.opendir(d.nodeid);

    let snap = h.fs().snapshot();
    assert_eq!(snap.state.inodes.len(), 3);
    assert_eq!(snap.state.handles.len(), 2);
    assert_eq!(snap.fds.len(), 5);
    let session = h.srv.session();
    assert!(session.is_some());

    // Through the wire format the daemon uses.
    let bytes = postcard::to_stdvec(&snap.state).unwrap();
    let state: FsState = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(state, snap.state);
    let srv = restored(&h, &state, dup_fds(&snap));
    srv.restore_session(session.unwrap()).unwrap();
    let fs2 = srv.fs();
    assert_eq!(srv.session(), h.srv.session());
    assert_eq!(fs2.inode_count(), 4);
    assert_eq!(fs2.handle_count(), 2);
    assert_eq!(fs2.lookup_count(f.nodeid), Some(2));

    // Same node ids, same files.
    let (e, body) = req(&srv, opcode::GETATTR, f.nodeid, &[0u8; 16]);
    assert_eq!(e, 0);
    assert_eq!(
        abi::AttrOut::from_bytes(&body).unwrap().attr.ino,
        f.attr.ino
    );
    let (e, body) = req(&srv, opcode::READLINK, l.nodeid, &[]);
    assert_eq!((e, body.as_slice()), (0, &b"d/f"[..]));
    // Open handles survive.
    let ri = abi::ReadIn {
        fh,
        size: 100,
        ..Default::default()
    };
    let (e, body) = req(&srv, opcode::READ, f.nodeid, &ri.to_bytes());
    assert_eq!((e, body.as_slice()), (0, &b"payload"[..]));
    let ri = abi::ReadIn {
        fh: dfh,
        size: 4096,
        ..Default::default()
    };
    let (e, body) = req(&srv, opcode::READDIR, d.nodeid, &ri.to_bytes());
    assert_eq!(e, 0);
    assert!(parse_dirents(&body, false).iter().any(|x| x.0 == "f"));
    // A new lookup dedups against restored inodes.
    let (e, body) = req(&srv, opcode::LOOKUP, d.nodeid, &cname("f"));
    assert_eq!(e, 0);
    assert_eq!(abi::EntryOut::from_bytes(&body).unwrap().nodeid, f.nodeid);
    assert_eq!(fs2.lookup_count(f.nodeid), Some(3));
    // New ids do not collide with restored ones.
    std::fs::write(h.dir.join("new"), b"").unwrap();
    let (_, body) = req(&srv, opcode::LOOKUP, ROOT, &cname("new"));
    let n = abi::EntryOut::from_bytes(&body).unwrap().nodeid;
    assert!(n > f.nodeid && n > l.nodeid && n > d.nodeid);
    // And new handles do not collide either.
    let (_, body) = req(
        &srv,
        opcode::OPEN,
        f.nodeid,
        &abi::OpenIn::default().to_bytes(),
    );
    let fh2 = abi::OpenOut::from_bytes(&body).unwrap().fh;
    assert!(fh2 > fh && fh2 > dfh);
}

#[test]
fn restore_rejects_inconsistent_state() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"").unwrap();
    std::fs::write(h.dir.join("b"), b"").unwrap();
    let a = h.lookup_ok(ROOT, "a");
    h.lookup_ok(ROOT, "b");
    let fh = h.open(a.nodeid, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    let _ = fh;
    let snap = h.fs().snapshot();
    let cfg = || config_for(&h.dir.path);
    let try_restore = |s: &FsState, fds| restore_fs(cfg(), s, fds).map(drop);

    assert!(try_restore(&snap.state, dup_fds(&snap)).is_ok());

    let mut s = snap.state.clone();
    s.inodes[1].id = s.inodes[0].id;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "duplicate id");

    let mut s = snap.state.clone();
    s.inodes[0].id = ROOT;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "root id");

    let mut s = snap.state.clone();
    s.inodes[0].fd_index = 77;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "fd index");

    let mut s = snap.state.clone();
    s.inodes[1].fd_index = s.inodes[0].fd_index;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "fd used twice");

    let mut s = snap.state.clone();
    // Reordered entries that keep their own descriptors are fine...
    s.inodes.swap(0, 1);
    assert!(try_restore(&s, dup_fds(&snap)).is_ok());
    // ...but a descriptor of another file is refused.
    let (i0, i1) = (s.inodes[0].fd_index, s.inodes[1].fd_index);
    s.inodes[0].fd_index = i1;
    s.inodes[1].fd_index = i0;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "dev/ino mismatch");

    let mut s = snap.state.clone();
    s.inodes[0].refs = 0;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "zero count");

    let mut s = snap.state.clone();
    s.inodes[0].file_type = libc::S_IFDIR;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "type");

    let mut s = snap.state.clone();
    s.handles[0].inode = 555;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "handle node");

    let mut s = snap.state.clone();
    s.handles[0].flags = libc::O_RDWR;
    assert!(
        try_restore(&s, dup_fds(&snap)).is_err(),
        "handle access mode"
    );

    let mut s = snap.state.clone();
    s.root_ino ^= 1;
    assert!(try_restore(&s, dup_fds(&snap)).is_err(), "other root");

    let srv = restored(&h, &snap.state, dup_fds(&snap));
    let bad = xvfs_fs::SessionState {
        minor: 41,
        flags: u64::MAX,
    };
    assert!(srv.restore_session(bad).is_err(), "session flags");
    assert!(srv.session().is_none());

    let mut fds = dup_fds(&snap);
    fds.push(fds[0].try_clone().unwrap());
    assert!(try_restore(&snap.state, fds).is_err(), "extra descriptor");

    let mut fds = dup_fds(&snap);
    fds.pop();
    assert!(try_restore(&snap.state, fds).is_err(), "missing descriptor");

    // An inode descriptor that is not O_PATH.
    let mut fds = dup_fds(&snap);
    let idx = snap.state.inodes[0].fd_index as usize;
    fds[idx] = std::fs::File::open(h.dir.join("a")).unwrap().into();
    let mut s = snap.state.clone();
    s.inodes[0].file_type = libc::S_IFREG;
    assert!(try_restore(&s, fds).is_err(), "not O_PATH");
}

#[test]
fn empty_snapshot_before_init() {
    let h = Harness::uninit(|_| {});
    let snap = h.fs().snapshot();
    assert!(h.srv.session().is_none());
    assert!(snap.state.inodes.is_empty() && snap.fds.is_empty());
    let srv = restored(&h, &snap.state, Vec::new());
    let (e, _) = req(&srv, opcode::GETATTR, ROOT, &[0u8; 16]);
    assert_eq!(e, libc::EIO, "still waiting for INIT");
}

/// A forged state naming a file or directory outside the shared directory
/// with its true device and inode is refused: the descriptor itself is
/// checked to lie inside the share.
#[test]
fn restore_refuses_descriptors_outside_the_share() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"in").unwrap();
    std::fs::write(h.dir.join("gone"), b"deleted but open").unwrap();
    let d = h.lookup_ok(ROOT, "d");
    h.lookup_ok(d.nodeid, "f");
    h.lookup_ok(ROOT, "gone");
    std::fs::remove_file(h.dir.join("gone")).unwrap();
    let snap = h.fs().snapshot();
    let cfg = || config_for(&h.dir.path);
    let try_restore = |s: &FsState, fds| restore_fs(cfg(), s, fds).map(drop);
    // Inside: a directory, a file below it, an unlinked file still open.
    assert!(try_restore(&snap.state, dup_fds(&snap)).is_ok());

    let outside = TestDir::new("outside");
    std::fs::create_dir(outside.join("d")).unwrap();
    std::fs::write(outside.join("d/secret"), b"out").unwrap();
    // A sibling whose name starts with the share's path.
    let sibling = PathBuf::from(format!("{}x", h.dir.path.display()));
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(sibling.join("f"), b"out").unwrap();
    let forge = |path: &Path, file_type: u32| {
        let md = std::fs::symlink_metadata(path).unwrap();
        let mut s = snap.state.clone();
        let mut fds = dup_fds(&snap);
        let i = &mut s.inodes[0];
        fds[i.fd_index as usize] = path_fd(path);
        (i.dev, i.ino, i.file_type) = (md.dev(), md.ino(), file_type);
        let e = try_restore(&s, fds).unwrap_err().to_string();
        assert!(
            e.contains("not inside the shared directory"),
            "{path:?}: {e}"
        );
    };
    forge(&outside.join("d/secret"), libc::S_IFREG);
    forge(&outside.join("d"), libc::S_IFDIR);
    forge(&sibling.join("f"), libc::S_IFREG);
    forge(Path::new("/etc/passwd"), libc::S_IFREG);
    forge(Path::new("/"), libc::S_IFDIR);
    std::fs::remove_dir_all(&sibling).unwrap();
}

/// A successor's preload (descriptors sent while the predecessor serves)
/// proves the share's files before the pause, keeps nothing from outside
/// it, and the restore then still refuses a forged descriptor from outside.
#[test]
fn preload_proves_the_share_and_nothing_outside_it() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    hold_tree(&h, b"in");
    let cfg = config_for(&h.dir.path);
    let outside = TestDir::new("outside");
    std::fs::write(outside.join("secret"), b"out").unwrap();
    let mut preloaded = h.fs().preload_fds();
    assert_eq!(
        preloaded.len(),
        4,
        "the root and one descriptor per inode the guest holds"
    );
    // A predecessor that slipped in a file outside, and one not O_PATH.
    preloaded.push(path_fd(&outside.join("secret")));
    preloaded.push(std::fs::File::open(h.dir.join("d/f")).unwrap().into());
    let mut dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    assert_eq!(dir.preload(&cfg.root_dir, preloaded), 4);

    // The real state restores on the preloaded directory and serves.
    let snap = h.fs().snapshot();
    let fs = PassthroughFs::restore(cfg.clone(), dir, &snap.state, dup_fds(&snap)).unwrap();
    assert_eq!(fs.inode_count(), 4);

    // A forged state naming the outside file is refused although the
    // preload was sent it.
    let mut dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    let secret = outside.join("secret");
    dir.preload(&cfg.root_dir, vec![path_fd(&secret)]);
    let md = std::fs::symlink_metadata(&secret).unwrap();
    let mut s = snap.state.clone();
    let mut fds = dup_fds(&snap);
    let i = s
        .inodes
        .iter_mut()
        .find(|i| i.file_type == libc::S_IFREG)
        .unwrap();
    fds[i.fd_index as usize] = path_fd(&secret);
    (i.dev, i.ino) = (md.dev(), md.ino());
    let e = PassthroughFs::restore(cfg, dir, &s, fds)
        .map(drop)
        .unwrap_err();
    assert!(
        e.to_string().contains("not inside the shared directory"),
        "{e}"
    );
}

/// With a cap on inodes plus open handles, 10,000 OPENs (and LOOKUPs, and
/// CREATEs) past it get EMFILE while the fs keeps serving what it holds; the
/// refusals are counted; a snapshot of the full tables restores (a live
/// upgrade still works at the cap), and the restored fs enforces the cap.
#[test]
fn opens_past_the_cap_get_emfile_and_the_tables_still_restore() {
    const CAP: usize = 64;
    let h = Harness::with(|c| c.max_open = CAP);
    for i in 0..40 {
        std::fs::write(h.dir.join(&format!("f{i}")), b"x").unwrap();
    }
    let f0 = h.lookup_ok(ROOT, "f0");
    let (mut opened, mut emfile) = (0, 0);
    for _ in 0..10_000 {
        let r = h.open(f0.nodeid, libc::O_RDONLY);
        if r.error == 0 {
            opened += 1;
        } else {
            assert_eq!(r.err(), libc::EMFILE);
            emfile += 1;
        }
    }
    // The root and f0 are held besides the handles.
    assert_eq!(opened, CAP - 2, "the cap is reached exactly");
    assert_eq!(emfile, 10_000 - (CAP - 2));
    assert_eq!(h.lookup(ROOT, "f1").err(), libc::EMFILE, "a new inode");
    assert_eq!(h.lookup(ROOT, "f0").error, 0, "a known inode needs no fd");
    let (n, refused) = h.fs().open_counts();
    assert_eq!(n, CAP);
    assert_eq!(refused, emfile as u64 + 1);
    // What it holds still serves.
    let (e, _) = req(&h.srv, opcode::GETATTR, f0.nodeid, &[0u8; 16]);
    assert_eq!(e, 0);

    let snap = h.fs().snapshot();
    let mut cfg = config_for(&h.dir.path);
    cfg.max_open = CAP;
    let restored = Server::new(restore_fs(cfg, &snap.state, dup_fds(&snap)).unwrap());
    restored.restore_session(h.srv.session().unwrap()).unwrap();
    assert_eq!(restored.fs().open_counts().0, CAP);
    let open = abi::OpenIn {
        flags: libc::O_RDONLY as u32,
        ..Default::default()
    };
    let (e, _) = req(&restored, opcode::OPEN, f0.nodeid, &open.to_bytes());
    assert_eq!(e, libc::EMFILE, "the restored fs keeps the cap");
}

/// A deleted file has no path to prove: it is accepted only on a mount
/// through which a file of the share was proven (the predecessor's mount
/// of the share; a confined predecessor opens nothing elsewhere). With the
/// guest holding nothing but an unlinked file, the predecessor's preload
/// (which carries the share's root) proves that mount; without it the
/// restore refuses rather than take the file on trust.
#[test]
fn a_deleted_file_is_accepted_only_on_a_proven_mount() {
    let h = Harness::new();
    std::fs::write(h.dir.join("gone"), b"deleted but open").unwrap();
    h.lookup_ok(ROOT, "gone");
    std::fs::remove_file(h.dir.join("gone")).unwrap();
    let snap = h.fs().snapshot();
    assert_eq!(snap.state.inodes.len(), 1);
    let cfg = config_for(&h.dir.path);
    let e = restore_fs(cfg.clone(), &snap.state, dup_fds(&snap))
        .map(drop)
        .unwrap_err();
    assert!(
        e.to_string().contains("no file of the share was proven"),
        "{e}"
    );

    let mut dir = xvfs_fs::passthrough::SharedDir::open(&cfg.root_dir).unwrap();
    let preload = h.fs().preload_fds();
    assert!(
        dir.preload(&cfg.root_dir, preload) >= 1,
        "the root is proven"
    );
    let fs = PassthroughFs::restore(cfg, dir, &snap.state, dup_fds(&snap)).unwrap();
    assert_eq!(fs.inode_count(), 2);
}
