// SPDX-License-Identifier: Apache-2.0
//! A hostile guest: malformed requests and escape attempts.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};

const ROOT: u64 = abi::ROOT_ID;

fn error_of(out: &[u8]) -> i32 {
    -abi::OutHeader::from_bytes(out).unwrap().error
}

#[test]
fn header_length_that_lies() {
    let h = Harness::new();
    let body = cname("x");
    for delta in [-1i64, 1, 1000, -41] {
        let mut hd = h.header(opcode::LOOKUP, ROOT, body.len());
        hd.len = (i64::from(hd.len) + delta) as u32;
        let (n, out) = h.raw(&cat(&[&hd.to_bytes(), &body]), ROOM);
        assert_eq!(n, 16);
        assert_eq!(error_of(&out), libc::EINVAL);
        assert_eq!(abi::OutHeader::from_bytes(&out).unwrap().unique, hd.unique);
    }
}

#[test]
fn truncated_header() {
    let h = Harness::new();
    let hd = h.header(opcode::GETATTR, ROOT, 0).to_bytes();
    for cut in [0, 1, 16, 39] {
        let (n, out) = h.raw(&hd[..cut], ROOM);
        assert_eq!(n, 16);
        assert_eq!(error_of(&out), libc::EINVAL);
    }
    // No room for even an out header: no reply at all.
    let (n, _) = h.raw(&hd[..10], 15);
    assert_eq!(n, 0);
}

#[test]
fn truncated_body() {
    let h = Harness::new();
    // GETATTR with half its getattr_in.
    let r = h.req(opcode::GETATTR, ROOT, &[0u8; 8]);
    assert_eq!(r.err(), libc::EINVAL);
    // WRITE shorter than write_in.
    let r = h.req(opcode::WRITE, ROOT, &[0u8; 20]);
    assert_eq!(r.err(), libc::EINVAL);
    // INIT too short.
    let r = h.req(opcode::INIT, 0, &[7, 0, 0, 0]);
    assert_eq!(r.err(), libc::EINVAL);
}

#[test]
fn unknown_and_unsupported_opcodes() {
    let h = Harness::new();
    for op in [
        0,
        7,
        19,
        opcode::GETLK,
        opcode::SETLK,
        opcode::SETLKW,
        opcode::BMAP,
        opcode::IOCTL,
        opcode::POLL,
        opcode::SETUPMAPPING,
        opcode::REMOVEMAPPING,
        4096,
        u32::MAX,
    ] {
        assert_eq!(h.req(op, ROOT, &[0u8; 48]).err(), libc::ENOSYS, "op {op}");
    }
}

#[test]
fn interrupt_and_forget_get_no_reply() {
    let h = Harness::new();
    let hd = h.header(opcode::INTERRUPT, 0, 8);
    let (n, _) = h.raw(&cat(&[&hd.to_bytes(), &[0u8; 8]]), ROOM);
    assert_eq!(n, 0);
    // Malformed FORGETs are dropped silently too.
    let hd = h.header(opcode::FORGET, ROOT, 3);
    let (n, _) = h.raw(&cat(&[&hd.to_bytes(), &[1u8; 3]]), ROOM);
    assert_eq!(n, 0);
    let mut hd = h.header(opcode::FORGET, ROOT, 8);
    hd.len += 5;
    let (n, _) = h.raw(&cat(&[&hd.to_bytes(), &[1u8; 8]]), ROOM);
    assert_eq!(n, 0);
    // FORGET of an unknown node is harmless.
    h.forget(987_654, 5);
}

#[test]
fn batch_forget_count_that_lies() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"").unwrap();
    let e = h.lookup_ok(ROOT, "a");
    let mut body = abi::BatchForgetIn {
        count: 1_000_000,
        dummy: 0,
    }
    .to_bytes();
    body.extend(
        abi::ForgetOne {
            nodeid: e.nodeid,
            nlookup: 1,
        }
        .to_bytes(),
    );
    let hd = h.header(opcode::BATCH_FORGET, 0, body.len());
    let (n, _) = h.raw(&cat(&[&hd.to_bytes(), &body]), ROOM);
    assert_eq!(n, 0);
    assert_eq!(h.fs().lookup_count(e.nodeid), Some(1), "nothing applied");
}

#[test]
fn extension_length_larger_than_body() {
    let h = Harness::new();
    let body = cname("x");
    let mut hd = h.header(opcode::LOOKUP, ROOT, body.len());
    hd.total_extlen = 100;
    let (_, out) = h.raw(&cat(&[&hd.to_bytes(), &body]), ROOM);
    assert_eq!(error_of(&out), libc::EINVAL);
}

#[test]
fn extension_bytes_are_skipped() {
    let h = Harness::new();
    std::fs::write(h.dir.join("x"), b"").unwrap();
    // A name padded to 8 bytes by one extension unit.
    let body = cat(&[&cname("x"), &[0xffu8; 8]]);
    let mut hd = h.header(opcode::LOOKUP, ROOT, body.len());
    hd.total_extlen = 1;
    let (_, out) = h.raw(&cat(&[&hd.to_bytes(), &body]), ROOM);
    assert_eq!(error_of(&out), 0);
}

#[test]
fn names_with_slash() {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"").unwrap();
    assert_eq!(h.lookup(ROOT, "d/f").err(), libc::EINVAL);
    assert_eq!(h.lookup(ROOT, "/etc").err(), libc::EINVAL);
    assert_eq!(h.mkdir(ROOT, "a/b", 0o755).err(), libc::EINVAL);
    assert_eq!(
        h.create(ROOT, "../x", 0o644, libc::O_RDWR | libc::O_CREAT)
            .err(),
        libc::EINVAL
    );
    assert_eq!(
        h.req(opcode::UNLINK, ROOT, &cname("d/f")).err(),
        libc::EINVAL
    );
    assert!(h.dir.join("d/f").exists());
}

#[test]
fn dot_and_dotdot_names() {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    for n in [".", ".."] {
        assert_eq!(h.mkdir(ROOT, n, 0o755).err(), libc::EINVAL);
        assert_eq!(h.req(opcode::UNLINK, ROOT, &cname(n)).err(), libc::EINVAL);
        assert_eq!(h.req(opcode::RMDIR, ROOT, &cname(n)).err(), libc::EINVAL);
        let r = abi::RenameIn { newdir: ROOT };
        assert_eq!(
            h.req(
                opcode::RENAME,
                ROOT,
                &cat(&[&r.to_bytes(), &cname("d"), &cname(n)])
            )
            .err(),
            libc::EINVAL
        );
    }
    assert!(h.dir.join("d").is_dir());
}

#[test]
fn dotdot_from_root_stays_in_root() {
    let h = Harness::new();
    let up = h.lookup_ok(ROOT, "..");
    assert_eq!(up.nodeid, ROOT);
    let again = h.lookup_ok(up.nodeid, "..");
    assert_eq!(again.nodeid, ROOT);
    // From a subdirectory, ".." is its parent: the root.
    std::fs::create_dir(h.dir.join("sub")).unwrap();
    let sub = h.lookup_ok(ROOT, "sub");
    assert_eq!(h.lookup_ok(sub.nodeid, "..").nodeid, ROOT);
    assert_eq!(h.lookup_ok(sub.nodeid, ".").nodeid, sub.nodeid);
    // Nothing above the root is reachable by name either.
    let root_name = h
        .dir
        .path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(h.lookup(ROOT, &root_name).err(), libc::ENOENT);
}

#[test]
fn names_without_nul_or_empty_or_long() {
    let h = Harness::new();
    assert_eq!(h.req(opcode::LOOKUP, ROOT, b"abc").err(), libc::EINVAL);
    assert_eq!(h.req(opcode::LOOKUP, ROOT, b"").err(), libc::EINVAL);
    assert_eq!(h.req(opcode::LOOKUP, ROOT, b"\0").err(), libc::EINVAL);
    let long = "x".repeat(256);
    assert_eq!(h.lookup(ROOT, &long).err(), libc::ENAMETOOLONG);
    assert_eq!(h.lookup(ROOT, &"y".repeat(255)).err(), libc::ENOENT);
    // Trailing bytes after the name.
    assert_eq!(h.req(opcode::LOOKUP, ROOT, b"a\0b").err(), libc::EINVAL);
    assert_eq!(h.req(opcode::LOOKUP, ROOT, b"a\0\0").err(), libc::EINVAL);
    // SYMLINK without a target, or with an empty one.
    assert_eq!(h.req(opcode::SYMLINK, ROOT, b"l\0").err(), libc::EINVAL);
    assert_eq!(h.req(opcode::SYMLINK, ROOT, b"l\0\0").err(), libc::EINVAL);
    // RENAME with one name only.
    let r = abi::RenameIn { newdir: ROOT };
    assert_eq!(
        h.req(opcode::RENAME, ROOT, &cat(&[&r.to_bytes(), b"a\0"]))
            .err(),
        libc::EINVAL
    );
}

#[test]
fn symlink_pointing_outside_does_not_escape() {
    let h = Harness::new();
    let outside = TestDir::new("outside");
    std::fs::write(outside.join("secret"), b"top secret").unwrap();
    std::os::unix::fs::symlink(&outside.path, h.dir.join("escdir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), h.dir.join("escfile")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../etc", h.dir.join("rel")).unwrap();

    // The lookup gives the link itself, not its target.
    let l = h.lookup_ok(ROOT, "escfile");
    assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_ne!(l.attr.size, 10);
    // It cannot be opened, read, truncated or chmodded through.
    assert_eq!(h.open(l.nodeid, libc::O_RDONLY).err(), libc::ENXIO);
    assert_eq!(h.open(l.nodeid, libc::O_RDWR).err(), libc::ENXIO);
    let t = abi::SetattrIn {
        valid: abi::fattr::SIZE,
        size: 0,
        ..Default::default()
    };
    assert_ne!(h.req(opcode::SETATTR, l.nodeid, &t.to_bytes()).error, 0);
    let m = abi::SetattrIn {
        valid: abi::fattr::MODE,
        mode: 0o777,
        ..Default::default()
    };
    assert_ne!(h.req(opcode::SETATTR, l.nodeid, &m.to_bytes()).error, 0);
    assert_eq!(
        std::fs::read(outside.join("secret")).unwrap(),
        b"top secret"
    );
    // READLINK returns the text only.
    let t = h.req(opcode::READLINK, l.nodeid, &[]);
    assert_eq!(
        t.ok(),
        outside.join("secret").as_os_str().as_encoded_bytes()
    );

    // A symlinked directory cannot be walked, listed or created in.
    let d = h.lookup_ok(ROOT, "escdir");
    assert_eq!(h.lookup(d.nodeid, "secret").err(), libc::ENOTDIR);
    assert_eq!(
        h.req(
            opcode::OPENDIR,
            d.nodeid,
            &abi::OpenIn::default().to_bytes()
        )
        .err(),
        libc::ENOTDIR
    );
    assert_eq!(h.mkdir(d.nodeid, "x", 0o755).err(), libc::ENOTDIR);
    assert_eq!(
        h.create(d.nodeid, "y", 0o644, libc::O_RDWR | libc::O_CREAT)
            .err(),
        libc::ENOTDIR
    );
    assert!(!outside.join("x").exists() && !outside.join("y").exists());
    let r = h.lookup_ok(ROOT, "rel");
    assert_eq!(h.lookup(r.nodeid, "passwd").err(), libc::ENOTDIR);
}

#[test]
fn create_over_symlink_does_not_follow() {
    let h = Harness::new();
    let outside = TestDir::new("outside2");
    std::os::unix::fs::symlink(outside.join("new"), h.dir.join("trap")).unwrap();
    let r = h.create(ROOT, "trap", 0o644, libc::O_RDWR | libc::O_CREAT);
    assert_eq!(r.err(), libc::ELOOP);
    assert!(!outside.join("new").exists());
    // Nothing leaked in the inode table.
    assert_eq!(h.fs().inode_count(), 1);
}

#[test]
fn hard_link_of_symlink_stays_a_symlink() {
    let h = Harness::new();
    let outside = TestDir::new("outside3");
    std::fs::write(outside.join("s"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.join("s"), h.dir.join("l")).unwrap();
    let l = h.lookup_ok(ROOT, "l");
    let li = abi::LinkIn {
        oldnodeid: l.nodeid,
    };
    let r = h.req(opcode::LINK, ROOT, &cat(&[&li.to_bytes(), &cname("l2")]));
    if r.error == 0 {
        let e = abi::EntryOut::from_bytes(&r.body).unwrap();
        assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    }
    assert!(h
        .dir
        .join("l2")
        .symlink_metadata()
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(true));
}

#[test]
fn reply_buffer_too_small() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), b"0123456789").unwrap();
    // Room for an error, not for an entry: EINVAL, and no lookup is counted.
    let r = h
        .req_room(opcode::LOOKUP, ROOT, &cname("f"), 40)
        .expect("error reply");
    assert_eq!(r.err(), libc::EINVAL);
    assert_eq!(h.fs().inode_count(), 1);
    // No room at all: nothing.
    assert!(h.req_room(opcode::LOOKUP, ROOT, &cname("f"), 8).is_none());
    assert!(h.req_room(opcode::GETATTR, ROOT, &[0u8; 16], 0).is_none());
    // READ into a small buffer returns what fits.
    let e = h.lookup_ok(ROOT, "f");
    let fh = h.open(e.nodeid, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    let r = h.read_room(e.nodeid, fh, 0, 10, 16 + 4);
    assert_eq!(r.ok(), b"0123");
    // OPEN without room: no handle is left behind.
    assert!(h
        .req_room(
            opcode::OPEN,
            e.nodeid,
            &abi::OpenIn::default().to_bytes(),
            20
        )
        .is_some_and(|r| r.error == -libc::EINVAL));
    assert_eq!(h.fs().handle_count(), 1);
}

#[test]
fn write_size_that_lies() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    let wi = abi::WriteIn {
        fh,
        size: 100,
        ..Default::default()
    };
    let r = h.req(opcode::WRITE, e.nodeid, &cat(&[&wi.to_bytes(), b"short"]));
    assert_eq!(r.err(), libc::EINVAL);
    let wi = abi::WriteIn { size: 1, ..wi };
    let r = h.req(opcode::WRITE, e.nodeid, &cat(&[&wi.to_bytes(), b"long"]));
    assert_eq!(r.err(), libc::EINVAL);
    assert_eq!(std::fs::metadata(h.dir.join("f")).unwrap().len(), 0);
}

#[test]
fn bad_handles_and_nodes() {
    let h = Harness::new();
    assert_eq!(h.read(ROOT, 424_242, 0, 10).err(), libc::EBADF);
    assert_eq!(h.write(ROOT, 424_242, 0, b"x").err(), libc::EBADF);
    assert_eq!(h.getattr(0).err(), libc::EBADF);
    assert_eq!(h.getattr(u64::MAX).err(), libc::EBADF);
    assert_eq!(h.lookup(12345, "x").err(), libc::EBADF);
    // A file is not a directory.
    std::fs::write(h.dir.join("f"), b"").unwrap();
    let f = h.lookup_ok(ROOT, "f");
    assert_eq!(h.lookup(f.nodeid, "x").err(), libc::ENOTDIR);
    // READDIR on a file handle fails cleanly.
    let fh = h.open(f.nodeid, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    let ri = abi::ReadIn {
        fh,
        size: 4096,
        ..Default::default()
    };
    assert_eq!(
        h.req(opcode::READDIR, f.nodeid, &ri.to_bytes()).err(),
        libc::ENOTDIR
    );
}

#[test]
fn huge_read_size_is_clamped() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    h.write(e.nodeid, fh, 0, &[1u8; 300]).ok();
    let r = h.read(e.nodeid, fh, 0, u32::MAX);
    assert_eq!(r.ok().len(), 300);
    // An offset near u64::MAX does not overflow.
    assert_ne!(h.read(e.nodeid, fh, u64::MAX - 2, 100).error, 1);
}

#[test]
fn garbage_requests_never_break_the_invariant() {
    // A tiny deterministic fuzz: random bodies for every opcode.
    let h = Harness::with(|c| c.xattr = true);
    std::fs::write(h.dir.join("f"), b"data").unwrap();
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let op = (rnd() % 53) as u32;
        if op == opcode::INIT || op == opcode::DESTROY {
            continue;
        }
        let len = (rnd() % 200) as usize;
        let body: Vec<u8> = (0..len).map(|_| (rnd() % 4) as u8).collect();
        let node = rnd() % 4;
        let room = (rnd() % 400) as usize;
        let _ = h.req_room(op, node, &body, room);
    }
    h.getattr(ROOT).ok();
}
