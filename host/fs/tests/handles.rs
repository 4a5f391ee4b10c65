// SPDX-License-Identifier: Apache-2.0
//! `--inode-file-handles`: inodes held as file handles, opened for each use;
//! `prefer` falls back to descriptors, `mandatory` fails where the file
//! system has no handles.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::fd::{BorrowedFd, OwnedFd};

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::passthrough::{Config, HandleMode, SharedDir};
use xvfs_fs::PassthroughFs;

const ROOT: u64 = abi::ROOT_ID;

fn with_handles(mode: HandleMode) -> Harness {
    Harness::with(|c| c.inode_file_handles = mode)
}

fn readlink(h: &Harness, node: u64) -> Vec<u8> {
    h.req(opcode::READLINK, node, &[]).ok().to_vec()
}

#[test]
fn prefer_holds_inodes_as_handles_and_every_operation_works() {
    let h = with_handles(HandleMode::Prefer);
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"payload").unwrap();
    std::os::unix::fs::symlink("d/f", h.dir.join("l")).unwrap();
    let d = h.lookup_ok(ROOT, "d");
    let f = h.lookup_ok(d.nodeid, "f");
    let l = h.lookup_ok(ROOT, "l");
    assert_eq!(h.fs().file_handle_count(), 3, "no O_PATH descriptor held");
    // The same file looked up again is the same node.
    assert_eq!(h.lookup_ok(d.nodeid, "f").nodeid, f.nodeid);
    assert_eq!(h.getattr(f.nodeid).error, 0);
    assert_eq!(readlink(&h, l.nodeid), b"d/f");
    let fh = h.open(f.nodeid, libc::O_RDWR).parse::<abi::OpenOut>().fh;
    assert_eq!(h.read(f.nodeid, fh, 0, 7).ok(), b"payload");
    assert_eq!(h.write(f.nodeid, fh, 7, b"!").error, 0);
    assert_eq!(std::fs::read(h.dir.join("d/f")).unwrap(), b"payload!");
    assert!(h.list_dir(d.nodeid, 4096, false).contains(&"f".to_string()));
    // Creating in, renaming within and linking into a directory held as a
    // handle.
    let (g, gfh) = h.create_ok(d.nodeid, "g");
    assert_eq!(h.release(g.nodeid, gfh).error, 0);
    let r = abi::RenameIn { newdir: ROOT };
    let body = cat(&[&r.to_bytes(), &cname("g"), &cname("g2")]);
    assert_eq!(h.req(opcode::RENAME, d.nodeid, &body).error, 0);
    assert!(h.dir.join("g2").exists());
    assert_eq!(
        h.lookup_ok(ROOT, "g2").nodeid,
        g.nodeid,
        "renamed, same node"
    );
    let link = abi::LinkIn {
        oldnodeid: f.nodeid,
    };
    let body = cat(&[&link.to_bytes(), &cname("f-link")]);
    assert_eq!(h.req(opcode::LINK, ROOT, &body).error, 0);
    assert_eq!(std::fs::read(h.dir.join("f-link")).unwrap(), b"payload!");
    assert_eq!(h.mkdir(d.nodeid, "sub", 0o755).error, 0);
    assert!(h.dir.join("d/sub").is_dir());
    assert_eq!(h.req(opcode::UNLINK, ROOT, &cname("f-link")).error, 0);
    // Gone on the host while the guest holds it: an error, not another
    // file (its handle no longer opens).
    std::fs::remove_file(h.dir.join("g2")).unwrap();
    assert_ne!(h.getattr(g.nodeid).error, 0);
    // The open file goes on through its own descriptor.
    assert_eq!(h.read(f.nodeid, fh, 0, 3).ok(), b"pay");
}

/// What a successor process would receive over SCM_RIGHTS: duplicates.
fn dup_fds(fds: &[std::os::fd::RawFd]) -> Vec<OwnedFd> {
    fds.iter()
        .map(|&fd| {
            // SAFETY: the snapshot's descriptors are open while it lives.
            unsafe { BorrowedFd::borrow_raw(fd) }
                .try_clone_to_owned()
                .unwrap()
        })
        .collect()
}

#[test]
fn inodes_held_as_handles_are_handed_over_by_a_live_upgrade() {
    let h = with_handles(HandleMode::Prefer);
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"x").unwrap();
    std::fs::write(h.dir.join("gone"), b"y").unwrap();
    let d = h.lookup_ok(ROOT, "d");
    let f = h.lookup_ok(d.nodeid, "f");
    let gone = h.lookup_ok(ROOT, "gone");
    let gfh = h
        .open(gone.nodeid, libc::O_RDONLY)
        .parse::<abi::OpenOut>()
        .fh;
    std::fs::remove_file(h.dir.join("gone")).unwrap();
    let snap = h.fs().snapshot();
    // Every inode travels as a descriptor (the deleted one too, its file
    // being open), and the successor holds them as it is told to.
    assert_eq!(snap.state.inodes.len(), 3);
    for mode in [HandleMode::Never, HandleMode::Prefer] {
        let cfg = Config {
            inode_file_handles: mode,
            ..config_for(&h.dir.path)
        };
        let dir = SharedDir::open(&cfg.root_dir).unwrap();
        let fs = PassthroughFs::restore(cfg, dir, &snap.state, dup_fds(&snap.fds)).unwrap();
        assert_eq!(fs.inode_count(), 4);
        let want = if mode == HandleMode::Never { 0 } else { 3 };
        assert_eq!(fs.file_handle_count(), want, "{mode:?}");
        let srv = xvfs_fs::PassthroughServer::new(fs);
        srv.restore_session(h.srv.session().unwrap()).unwrap();
        for node in [d.nodeid, f.nodeid, gone.nodeid] {
            let hd = abi::InHeader {
                len: (abi::InHeader::SIZE + 16) as u32,
                opcode: opcode::GETATTR,
                unique: 9,
                nodeid: node,
                ..Default::default()
            };
            let req = cat(&[&hd.to_bytes(), &[0u8; 16]]);
            let mut w = xvfs_fs::io::VecWriter::new(ROOM);
            srv.handle(&mut xvfs_fs::io::SliceReader::new(&req), &mut w);
            let out = w.into_inner();
            let oh = abi::OutHeader::from_bytes(&out).unwrap();
            assert_eq!(oh.error, 0, "{mode:?}: GETATTR of node {node}");
        }
    }
    assert_eq!(h.release(gone.nodeid, gfh).error, 0);
}

#[test]
fn mandatory_needs_handles_and_prefer_does_without() {
    // procfs gives no file handles.
    let cfg = |mode| Config {
        inode_file_handles: mode,
        ..config_for(std::path::Path::new("/proc/sys/kernel"))
    };
    let e = PassthroughFs::new(cfg(HandleMode::Mandatory)).unwrap_err();
    assert!(
        e.to_string().contains("--inode-file-handles=mandatory"),
        "{e}"
    );
    let fs = PassthroughFs::new(cfg(HandleMode::Prefer)).unwrap();
    let h = Harness::from_fs(TestDir::new("procfs"), fs);
    h.init(7, 41, u32::MAX, u32::MAX).ok();
    let e = h.lookup_ok(ROOT, "ostype");
    assert_eq!(h.getattr(e.nodeid).error, 0);
    assert_eq!(h.fs().file_handle_count(), 0, "held as a descriptor");
    // Where handles work, mandatory holds every inode as one.
    let h = with_handles(HandleMode::Mandatory);
    std::fs::write(h.dir.join("a"), b"a").unwrap();
    h.lookup_ok(ROOT, "a");
    assert_eq!(h.fs().file_handle_count(), 1);
}
