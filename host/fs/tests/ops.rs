// SPDX-License-Identifier: Apache-2.0
//! Functional tests: each FUSE operation against a temporary directory.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::*;
use xvfs_fs::abi::{self, fattr, init_flags, opcode, Wire};
use xvfs_fs::CachePolicy;

const ROOT: u64 = abi::ROOT_ID;

#[test]
fn init_negotiates() {
    let h = Harness::uninit(|_| {});
    let out: abi::InitOut = h.init(7, 41, u32::MAX, u32::MAX).parse();
    assert_eq!(out.major, 7);
    assert_eq!(out.minor, 41);
    assert_eq!(out.max_write, 1 << 20);
    assert_eq!(out.max_pages, 256);
    let flags = u64::from(out.flags) | u64::from(out.flags2) << 32;
    for f in [
        init_flags::ASYNC_READ,
        init_flags::BIG_WRITES,
        init_flags::ATOMIC_O_TRUNC,
        init_flags::DO_READDIRPLUS,
        init_flags::READDIRPLUS_AUTO,
        init_flags::PARALLEL_DIROPS,
        init_flags::MAX_PAGES,
        init_flags::INIT_EXT,
        init_flags::EXPORT_SUPPORT,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} missing");
    }
    for f in [
        init_flags::WRITEBACK_CACHE,
        init_flags::DONT_MASK,
        init_flags::HANDLE_KILLPRIV_V2,
        init_flags::POSIX_LOCKS,
        init_flags::SETXATTR_EXT,
        init_flags::SECURITY_CTX,
    ] {
        assert_eq!(flags & f, 0, "flag {f:#x} must be off");
    }
}

#[test]
fn init_only_grants_what_the_guest_offers() {
    let h = Harness::uninit(|_| {});
    let offered = (init_flags::ASYNC_READ | init_flags::MAX_PAGES) as u32;
    let out: abi::InitOut = h.init(7, 38, offered, 0).parse();
    assert_eq!(out.flags, offered);
    assert_eq!(out.flags2, 0);
    assert_eq!(out.minor, 38);
}

#[test]
fn init_writeback_and_xattr_follow_config() {
    let h = Harness::uninit(|c| {
        c.writeback = true;
        c.xattr = true;
    });
    let out: abi::InitOut = h.init(7, 41, u32::MAX, u32::MAX).parse();
    let flags = u64::from(out.flags);
    assert_ne!(flags & init_flags::WRITEBACK_CACHE, 0);
    assert_ne!(flags & init_flags::SETXATTR_EXT, 0);
    // Readonly never offers writeback.
    let h = Harness::uninit(|c| {
        c.writeback = true;
        c.readonly = true;
    });
    let out: abi::InitOut = h.init(7, 41, u32::MAX, u32::MAX).parse();
    assert_eq!(u64::from(out.flags) & init_flags::WRITEBACK_CACHE, 0);
}

#[test]
fn init_refuses_other_major_and_old_minor() {
    let h = Harness::uninit(|_| {});
    assert_eq!(h.init(8, 0, 0, 0).err(), libc::EPROTO);
    assert_eq!(h.init(6, 41, 0, 0).err(), libc::EPROTO);
    assert_eq!(h.init(7, 20, 0, 0).err(), libc::EPROTO);
    assert!(h.srv.session().is_none());
}

#[test]
fn compat_init_of_16_bytes() {
    let h = Harness::uninit(|_| {});
    let i = abi::InitIn {
        major: 7,
        minor: 31,
        max_readahead: 0,
        flags: init_flags::ASYNC_READ as u32,
        ..Default::default()
    };
    let r = h.req(opcode::INIT, 0, &i.to_bytes()[..16]);
    let out: abi::InitOut = r.parse();
    assert_eq!(out.minor, 31);
    assert_eq!(u64::from(out.flags), init_flags::ASYNC_READ);
}

#[test]
fn requests_before_init_fail() {
    let h = Harness::uninit(|_| {});
    assert_eq!(h.getattr(ROOT).err(), libc::EIO);
}

#[test]
fn destroy_ends_session() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), b"x").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    h.req(opcode::DESTROY, 0, &[]).ok();
    assert_eq!(h.getattr(ROOT).err(), libc::EIO);
    h.init(7, 41, u32::MAX, u32::MAX).ok();
    assert_eq!(h.getattr(e.nodeid).err(), libc::EBADF);
    assert_eq!(h.fs().inode_count(), 1);
}

#[test]
fn lookup_and_getattr() {
    let h = Harness::new();
    std::fs::write(h.dir.join("file"), b"hello").unwrap();
    let md = std::fs::metadata(h.dir.join("file")).unwrap();
    let e = h.lookup_ok(ROOT, "file");
    assert!(e.nodeid > ROOT);
    assert_eq!(e.attr.ino, md.ino());
    assert_eq!(e.attr.size, 5);
    assert_eq!(e.attr.mode, md.mode());
    assert_eq!(e.entry_valid, 1, "auto cache: 1 s");
    let a: abi::AttrOut = h.getattr(e.nodeid).parse();
    assert_eq!(a.attr, e.attr);
    let root: abi::AttrOut = h.getattr(ROOT).parse();
    assert_eq!(root.attr.mode & libc::S_IFMT, libc::S_IFDIR);
}

#[test]
fn cache_policy_timeouts() {
    for (policy, secs) in [
        (CachePolicy::Never, 0),
        (CachePolicy::Auto, 1),
        (CachePolicy::Metadata, 86400),
        (CachePolicy::Always, 86400),
    ] {
        let h = Harness::with(|c| c.cache = policy);
        std::fs::write(h.dir.join("f"), b"x").unwrap();
        let e = h.lookup_ok(ROOT, "f");
        assert_eq!(e.entry_valid, secs);
        assert_eq!(e.attr_valid, secs);
        let o: abi::OpenOut = h.open(e.nodeid, libc::O_RDONLY).parse();
        let want = match policy {
            CachePolicy::Never | CachePolicy::Metadata => abi::fopen::DIRECT_IO,
            CachePolicy::Auto => 0,
            CachePolicy::Always => abi::fopen::KEEP_CACHE,
        };
        assert_eq!(o.open_flags, want);
    }
}

#[test]
fn lookup_missing_is_enoent() {
    let h = Harness::new();
    assert_eq!(h.lookup(ROOT, "nope").err(), libc::ENOENT);
    assert_eq!(h.fs().inode_count(), 1);
}

#[test]
fn lookup_dedups_and_counts() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"").unwrap();
    std::fs::hard_link(h.dir.join("a"), h.dir.join("b")).unwrap();
    let a1 = h.lookup_ok(ROOT, "a");
    let a2 = h.lookup_ok(ROOT, "a");
    let b = h.lookup_ok(ROOT, "b");
    assert_eq!(a1.nodeid, a2.nodeid);
    assert_eq!(a1.nodeid, b.nodeid, "hard links share a node");
    assert_eq!(h.fs().lookup_count(a1.nodeid), Some(3));
    assert_eq!(h.fs().inode_count(), 2);
}

#[test]
fn forget_drops_at_zero() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"").unwrap();
    let e = h.lookup_ok(ROOT, "a");
    h.lookup_ok(ROOT, "a");
    h.forget(e.nodeid, 1);
    assert_eq!(h.fs().lookup_count(e.nodeid), Some(1));
    h.getattr(e.nodeid).ok();
    h.forget(e.nodeid, 1);
    assert_eq!(h.fs().lookup_count(e.nodeid), None);
    assert_eq!(h.getattr(e.nodeid).err(), libc::EBADF);
    // A new lookup gets a fresh id (ids are never reused).
    let again = h.lookup_ok(ROOT, "a");
    assert!(again.nodeid > e.nodeid);
}

#[test]
fn batch_forget() {
    let h = Harness::new();
    let mut ids = Vec::new();
    for n in ["a", "b", "c"] {
        std::fs::write(h.dir.join(n), b"").unwrap();
        ids.push(h.lookup_ok(ROOT, n).nodeid);
    }
    let mut body = abi::BatchForgetIn { count: 3, dummy: 0 }.to_bytes();
    for id in &ids {
        body.extend(
            abi::ForgetOne {
                nodeid: *id,
                nlookup: 1,
            }
            .to_bytes(),
        );
    }
    let hd = h.header(opcode::BATCH_FORGET, 0, body.len());
    let (n, _) = h.raw(&cat(&[&hd.to_bytes(), &body]), 0);
    assert_eq!(n, 0);
    assert_eq!(h.fs().inode_count(), 1);
}

#[test]
fn root_is_never_forgotten() {
    let h = Harness::new();
    h.forget(ROOT, 1000);
    h.getattr(ROOT).ok();
    assert_eq!(h.lookup_ok(ROOT, ".").nodeid, ROOT);
}

#[test]
fn create_write_read_round_trip() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFREG);
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let w: abi::WriteOut = h.write(e.nodeid, fh, 10, &data).parse();
    assert_eq!(w.size as usize, data.len());
    let r = h.read(e.nodeid, fh, 10, 200_000);
    assert_eq!(r.ok(), &data[..]);
    assert_eq!(std::fs::read(h.dir.join("f")).unwrap()[10..], data[..]);
    // Past EOF: empty success.
    assert!(h.read(e.nodeid, fh, 1 << 30, 10).ok().is_empty());
    h.release(e.nodeid, fh).ok();
    assert_eq!(h.release(e.nodeid, fh).err(), libc::EBADF);
    assert_eq!(h.fs().handle_count(), 0);
}

#[test]
fn create_exclusive_and_existing() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    h.write(e.nodeid, fh, 0, b"data").ok();
    let r = h.create(
        ROOT,
        "f",
        0o644,
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
    );
    assert_eq!(r.err(), libc::EEXIST);
    // Without O_EXCL the existing file is opened (and O_TRUNC honoured).
    let r = h.create(
        ROOT,
        "f",
        0o644,
        libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
    );
    let e2 = abi::EntryOut::from_bytes(r.ok()).unwrap();
    assert_eq!(e2.nodeid, e.nodeid);
    assert_eq!(std::fs::metadata(h.dir.join("f")).unwrap().len(), 0);
    // A directory cannot be created over.
    std::fs::create_dir(h.dir.join("d")).unwrap();
    assert_eq!(
        h.create(ROOT, "d", 0o644, libc::O_RDWR | libc::O_CREAT)
            .err(),
        libc::EISDIR
    );
}

#[test]
fn mode_is_not_masked_twice() {
    let h = Harness::new();
    let r = h.create(ROOT, "f", 0o666, libc::O_RDWR | libc::O_CREAT);
    r.ok();
    let m = std::fs::metadata(h.dir.join("f"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o666);
    h.mkdir(ROOT, "d", 0o777).ok();
    let m = std::fs::metadata(h.dir.join("d"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o777);
}

#[test]
fn open_trunc_and_append() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), b"0123456789").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    let fh = h.open(e.nodeid, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    assert_eq!(h.read(e.nodeid, fh, 2, 3).ok(), b"234");
    let fh2 = h
        .open(e.nodeid, libc::O_WRONLY | libc::O_TRUNC)
        .parse::<abi::OpenOut>()
        .fh;
    assert_ne!(fh, fh2);
    assert_eq!(std::fs::metadata(h.dir.join("f")).unwrap().len(), 0);
    // Opening a directory with OPEN is refused.
    assert_eq!(h.open(ROOT, libc::O_RDONLY).err(), libc::EISDIR);
}

#[test]
fn mkdir_and_readdir() {
    let h = Harness::new();
    let d = h.mkdir(ROOT, "dir", 0o755).parse::<abi::EntryOut>();
    assert_eq!(d.attr.mode & libc::S_IFMT, libc::S_IFDIR);
    let mut want = vec![".".to_string(), "..".to_string()];
    for i in 0..50 {
        let n = format!("entry-{i:03}");
        std::fs::write(h.dir.join("dir").join(&n), b"").unwrap();
        want.push(n);
    }
    want.sort();
    assert_eq!(h.list_dir(d.nodeid, 4096, false), want);
    // A tiny buffer still makes progress, one entry at a time.
    assert_eq!(h.list_dir(d.nodeid, 40, false), want);
}

#[test]
fn readdir_types() {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("sub")).unwrap();
    std::fs::write(h.dir.join("file"), b"").unwrap();
    let fh = h.opendir(ROOT);
    let ents = h.readdir(ROOT, fh, 0, 4096, false);
    let ty = |n: &str| ents.iter().find(|e| e.0 == n).unwrap().3;
    assert_eq!(ty("sub"), u32::from(libc::DT_DIR));
    assert_eq!(ty("file"), u32::from(libc::DT_REG));
}

#[test]
fn readdirplus_looks_up_entries() {
    let h = Harness::new();
    std::fs::write(h.dir.join("file"), b"abc").unwrap();
    let fh = h.opendir(ROOT);
    let ents = h.readdir(ROOT, fh, 0, 8192, true);
    let mut seen_file = false;
    for (name, ino, _, _, entry) in &ents {
        let entry = entry.unwrap();
        if name == "." || name == ".." {
            assert_eq!(entry.nodeid, 0, "no lookup for {name}");
        } else {
            seen_file = true;
            assert_eq!(entry.attr.ino, *ino);
            assert_eq!(entry.attr.size, 3);
            assert_eq!(h.fs().lookup_count(entry.nodeid), Some(1));
        }
    }
    assert!(seen_file);
    // Too small for one direntplus: nothing is looked up, and nothing leaks.
    let r = h.req(
        opcode::READDIRPLUS,
        ROOT,
        &abi::ReadIn {
            fh,
            size: 100,
            ..Default::default()
        }
        .to_bytes(),
    );
    assert!(r.ok().is_empty());
    assert_eq!(h.fs().inode_count(), 2);
}

#[test]
fn readdirplus_off_is_enosys() {
    let h = Harness::with(|c| c.readdirplus = false);
    let fh = h.opendir(ROOT);
    let ri = abi::ReadIn {
        fh,
        size: 4096,
        ..Default::default()
    };
    assert_eq!(
        h.req(opcode::READDIRPLUS, ROOT, &ri.to_bytes()).err(),
        libc::ENOSYS
    );
}

fn rename2(h: &Harness, old: &str, new: &str, flags: u32) -> Reply {
    let r = abi::Rename2In {
        newdir: ROOT,
        flags,
        padding: 0,
    };
    h.req(
        opcode::RENAME2,
        ROOT,
        &cat(&[&r.to_bytes(), &cname(old), &cname(new)]),
    )
}

#[test]
fn rename_and_rename2_flags() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"A").unwrap();
    std::fs::write(h.dir.join("b"), b"B").unwrap();
    let r = abi::RenameIn { newdir: ROOT };
    h.req(
        opcode::RENAME,
        ROOT,
        &cat(&[&r.to_bytes(), &cname("a"), &cname("c")]),
    )
    .ok();
    assert!(!h.dir.join("a").exists());
    assert_eq!(std::fs::read(h.dir.join("c")).unwrap(), b"A");

    assert_eq!(
        rename2(&h, "c", "b", abi::flags::RENAME_NOREPLACE).err(),
        libc::EEXIST
    );
    rename2(&h, "c", "b", abi::flags::RENAME_EXCHANGE).ok();
    assert_eq!(std::fs::read(h.dir.join("b")).unwrap(), b"A");
    assert_eq!(std::fs::read(h.dir.join("c")).unwrap(), b"B");
    assert_eq!(
        rename2(&h, "c", "z", abi::flags::RENAME_WHITEOUT).err(),
        libc::EINVAL
    );
    assert_eq!(rename2(&h, "c", "z", 1 << 10).err(), libc::EINVAL);
    rename2(&h, "c", "z", abi::flags::RENAME_NOREPLACE).ok();
    assert!(h.dir.join("z").exists());
}

#[test]
fn rename_keeps_node_ids() {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("f"), b"x").unwrap();
    let f = h.lookup_ok(ROOT, "f");
    let d = h.lookup_ok(ROOT, "d");
    let r = abi::RenameIn { newdir: d.nodeid };
    h.req(
        opcode::RENAME,
        ROOT,
        &cat(&[&r.to_bytes(), &cname("f"), &cname("g")]),
    )
    .ok();
    assert_eq!(h.lookup_ok(d.nodeid, "g").nodeid, f.nodeid);
    h.getattr(f.nodeid).ok();
}

#[test]
fn link_and_unlink() {
    let h = Harness::new();
    std::fs::write(h.dir.join("a"), b"x").unwrap();
    let a = h.lookup_ok(ROOT, "a");
    let l = abi::LinkIn {
        oldnodeid: a.nodeid,
    };
    let e: abi::EntryOut = h
        .req(opcode::LINK, ROOT, &cat(&[&l.to_bytes(), &cname("b")]))
        .parse();
    assert_eq!(e.nodeid, a.nodeid);
    assert_eq!(e.attr.nlink, 2);
    h.req(opcode::UNLINK, ROOT, &cname("a")).ok();
    assert_eq!(h.lookup(ROOT, "a").err(), libc::ENOENT);
    let a2: abi::AttrOut = h.getattr(a.nodeid).parse();
    assert_eq!(a2.attr.nlink, 1);
    // Directories cannot be linked.
    std::fs::create_dir(h.dir.join("d")).unwrap();
    let d = h.lookup_ok(ROOT, "d");
    let l = abi::LinkIn {
        oldnodeid: d.nodeid,
    };
    assert_eq!(
        h.req(opcode::LINK, ROOT, &cat(&[&l.to_bytes(), &cname("d2")]))
            .err(),
        libc::EPERM
    );
}

#[test]
fn symlink_and_readlink() {
    let h = Harness::new();
    let e: abi::EntryOut = h
        .req(
            opcode::SYMLINK,
            ROOT,
            &cat(&[&cname("lnk"), &cname("some/target")]),
        )
        .parse();
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(h.req(opcode::READLINK, e.nodeid, &[]).ok(), b"some/target");
    assert_eq!(
        std::fs::read_link(h.dir.join("lnk")).unwrap().to_str(),
        Some("some/target")
    );
    // READLINK of a non-symlink.
    assert_eq!(h.req(opcode::READLINK, ROOT, &[]).err(), libc::EINVAL);
}

#[test]
fn rmdir() {
    let h = Harness::new();
    std::fs::create_dir(h.dir.join("d")).unwrap();
    std::fs::write(h.dir.join("d/f"), b"").unwrap();
    assert_eq!(
        h.req(opcode::RMDIR, ROOT, &cname("d")).err(),
        libc::ENOTEMPTY
    );
    std::fs::remove_file(h.dir.join("d/f")).unwrap();
    h.req(opcode::RMDIR, ROOT, &cname("d")).ok();
    assert!(!h.dir.join("d").exists());
}

#[test]
fn mknod_fifo() {
    let h = Harness::new();
    let m = abi::MknodIn {
        mode: libc::S_IFIFO | 0o600,
        rdev: 0,
        umask: 0,
        padding: 0,
    };
    let e: abi::EntryOut = h
        .req(opcode::MKNOD, ROOT, &cat(&[&m.to_bytes(), &cname("p")]))
        .parse();
    assert_eq!(e.attr.mode, libc::S_IFIFO | 0o600);
    // Special files are never opened by the server.
    assert_eq!(h.open(e.nodeid, libc::O_RDONLY).err(), libc::ENXIO);
    let m = abi::MknodIn {
        mode: libc::S_IFDIR | 0o600,
        ..m
    };
    assert_eq!(
        h.req(opcode::MKNOD, ROOT, &cat(&[&m.to_bytes(), &cname("q")]))
            .err(),
        libc::EINVAL
    );
}

fn setattr(h: &Harness, node: u64, a: abi::SetattrIn) -> Reply {
    h.req(opcode::SETATTR, node, &a.to_bytes())
}

#[test]
fn setattr_truncate_by_path_and_handle() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), vec![7u8; 1000]).unwrap();
    let e = h.lookup_ok(ROOT, "f");
    let a: abi::AttrOut = setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::SIZE,
            size: 10,
            ..Default::default()
        },
    )
    .parse();
    assert_eq!(a.attr.size, 10);
    let fh = h.open(e.nodeid, libc::O_RDWR).parse::<abi::OpenOut>().fh;
    let a: abi::AttrOut = setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::SIZE | fattr::FH,
            fh,
            size: 4096,
            ..Default::default()
        },
    )
    .parse();
    assert_eq!(a.attr.size, 4096);
    assert_eq!(std::fs::metadata(h.dir.join("f")).unwrap().len(), 4096);
    assert_eq!(
        setattr(
            &h,
            ROOT,
            abi::SetattrIn {
                valid: fattr::SIZE,
                ..Default::default()
            }
        )
        .err(),
        libc::EISDIR
    );
}

#[test]
fn setattr_mode_owner_times() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), b"").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    let a: abi::AttrOut = setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::MODE | fattr::ATIME | fattr::MTIME,
            mode: 0o600,
            atime: 1_000_000,
            atimensec: 5,
            mtime: 2_000_000,
            mtimensec: 6,
            ..Default::default()
        },
    )
    .parse();
    assert_eq!(a.attr.mode & 0o7777, 0o600);
    assert_eq!((a.attr.atime, a.attr.atimensec), (1_000_000, 5));
    assert_eq!((a.attr.mtime, a.attr.mtimensec), (2_000_000, 6));
    let a: abi::AttrOut = setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::MTIME_NOW,
            ..Default::default()
        },
    )
    .parse();
    assert!(a.attr.mtime > 2_000_000);
    assert_eq!(a.attr.atime, 1_000_000, "atime untouched");
    assert_eq!(
        setattr(
            &h,
            e.nodeid,
            abi::SetattrIn {
                valid: fattr::ATIME,
                atimensec: 2_000_000_000,
                ..Default::default()
            }
        )
        .err(),
        libc::EINVAL
    );
    if unsafe_free_is_root() {
        let a: abi::AttrOut = setattr(
            &h,
            e.nodeid,
            abi::SetattrIn {
                valid: fattr::UID | fattr::GID,
                uid: 1234,
                gid: 5678,
                ..Default::default()
            },
        )
        .parse();
        assert_eq!((a.attr.uid, a.attr.gid), (1234, 5678));
    }
}

fn unsafe_free_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn creation_uses_caller_ids() {
    if !unsafe_free_is_root() {
        return;
    }
    let h = Harness::new();
    std::fs::set_permissions(&h.dir.path, PermissionsExt::from_mode(0o755)).unwrap();
    let d = h.mkdir(ROOT, "shared", 0o777).parse::<abi::EntryOut>();
    h.uid.set(1234);
    h.gid.set(4321);
    let e = h.mkdir(d.nodeid, "mine", 0o755).parse::<abi::EntryOut>();
    assert_eq!((e.attr.uid, e.attr.gid), (1234, 4321));
    let r = h.create(d.nodeid, "file", 0o644, libc::O_RDWR | libc::O_CREAT);
    let e = abi::EntryOut::from_bytes(r.ok()).unwrap();
    assert_eq!((e.attr.uid, e.attr.gid), (1234, 4321));
    // The host checks permission as the caller: root's 0755 directory is closed.
    assert_eq!(h.mkdir(ROOT, "nope", 0o755).err(), libc::EACCES);
    // And the thread got its own ids back.
    h.uid.set(0);
    h.gid.set(0);
    let e = h.mkdir(ROOT, "rootdir", 0o755).parse::<abi::EntryOut>();
    assert_eq!((e.attr.uid, e.attr.gid), (0, 0));
}

#[test]
fn statfs() {
    let h = Harness::new();
    let s: abi::StatfsOut = h.req(opcode::STATFS, ROOT, &[]).parse();
    assert!(s.st.bsize > 0);
    assert!(s.st.namelen >= 255);
    assert!(s.st.blocks >= s.st.bfree);
}

#[test]
fn access() {
    let h = Harness::new();
    let a = abi::AccessIn {
        mask: libc::R_OK as u32,
        padding: 0,
    };
    h.req(opcode::ACCESS, ROOT, &a.to_bytes()).ok();
    if unsafe_free_is_root() {
        std::fs::write(h.dir.join("secret"), b"").unwrap();
        std::fs::set_permissions(h.dir.join("secret"), PermissionsExt::from_mode(0o600)).unwrap();
        let e = h.lookup_ok(ROOT, "secret");
        h.uid.set(1000);
        h.gid.set(1000);
        assert_eq!(
            h.req(opcode::ACCESS, e.nodeid, &a.to_bytes()).err(),
            libc::EACCES
        );
    }
}

#[test]
fn xattr_off_is_enosys() {
    let h = Harness::new();
    let g = abi::GetxattrIn {
        size: 0,
        padding: 0,
    };
    assert_eq!(
        h.req(
            opcode::GETXATTR,
            ROOT,
            &cat(&[&g.to_bytes(), &cname("user.x")])
        )
        .err(),
        libc::ENOSYS
    );
    assert_eq!(
        h.req(opcode::LISTXATTR, ROOT, &g.to_bytes()).err(),
        libc::ENOSYS
    );
    assert_eq!(
        h.req(opcode::REMOVEXATTR, ROOT, &cname("user.x")).err(),
        libc::ENOSYS
    );
}

#[test]
fn xattr_round_trip() {
    let h = Harness::with(|c| c.xattr = true);
    std::fs::write(h.dir.join("f"), b"").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    let s = abi::SetxattrIn {
        size: 5,
        flags: 0,
        setxattr_flags: 0,
        padding: 0,
    };
    let r = h.req(
        opcode::SETXATTR,
        e.nodeid,
        &cat(&[&s.to_bytes(), &cname("user.test"), b"value"]),
    );
    if r.error == -libc::EOPNOTSUPP {
        eprintln!("temp dir has no user xattrs; skipping");
        return;
    }
    r.ok();
    let g = |size| abi::GetxattrIn { size, padding: 0 }.to_bytes();
    let sz: abi::GetxattrOut = h
        .req(
            opcode::GETXATTR,
            e.nodeid,
            &cat(&[&g(0), &cname("user.test")]),
        )
        .parse();
    assert_eq!(sz.size, 5);
    let v = h.req(
        opcode::GETXATTR,
        e.nodeid,
        &cat(&[&g(64), &cname("user.test")]),
    );
    assert_eq!(v.ok(), b"value");
    let v = h.req(
        opcode::GETXATTR,
        e.nodeid,
        &cat(&[&g(2), &cname("user.test")]),
    );
    assert_eq!(v.err(), libc::ERANGE);
    let l = h.req(opcode::LISTXATTR, e.nodeid, &g(1024));
    assert!(l.ok().split(|&b| b == 0).any(|n| n == b"user.test"));
    // XATTR_CREATE on an existing name.
    let s2 = abi::SetxattrIn {
        flags: libc::XATTR_CREATE as u32,
        ..s
    };
    assert_eq!(
        h.req(
            opcode::SETXATTR,
            e.nodeid,
            &cat(&[&s2.to_bytes(), &cname("user.test"), b"value"])
        )
        .err(),
        libc::EEXIST
    );
    h.req(opcode::REMOVEXATTR, e.nodeid, &cname("user.test"))
        .ok();
    assert_eq!(
        h.req(
            opcode::GETXATTR,
            e.nodeid,
            &cat(&[&g(64), &cname("user.test")])
        )
        .err(),
        libc::ENODATA
    );
}

#[test]
fn lseek_data_and_hole() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "sparse");
    h.write(e.nodeid, fh, 1 << 20, b"data").ok();
    let l = |off, whence: i32| {
        h.req(
            opcode::LSEEK,
            e.nodeid,
            &abi::LseekIn {
                fh,
                offset: off,
                whence: whence as u32,
                padding: 0,
            }
            .to_bytes(),
        )
    };
    let data: abi::LseekOut = l(0, libc::SEEK_DATA).parse();
    assert!(data.offset <= 1 << 20);
    let hole: abi::LseekOut = l(1 << 20, libc::SEEK_HOLE).parse();
    assert!(hole.offset >= (1 << 20) + 4);
    assert_eq!(l(0, libc::SEEK_CUR).err(), libc::EINVAL);
    assert_eq!(l(1 << 30, libc::SEEK_DATA).err(), libc::ENXIO);
}

#[test]
fn fallocate_extends() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    let f = abi::FallocateIn {
        fh,
        offset: 0,
        length: 65536,
        mode: 0,
        padding: 0,
    };
    h.req(opcode::FALLOCATE, e.nodeid, &f.to_bytes()).ok();
    assert_eq!(std::fs::metadata(h.dir.join("f")).unwrap().len(), 65536);
}

#[test]
fn copy_file_range() {
    let h = Harness::new();
    let (a, fa) = h.create_ok(ROOT, "a");
    let (b, fb) = h.create_ok(ROOT, "b");
    h.write(a.nodeid, fa, 0, b"0123456789").ok();
    let c = abi::CopyFileRangeIn {
        fh_in: fa,
        off_in: 2,
        nodeid_out: b.nodeid,
        fh_out: fb,
        off_out: 1,
        len: 5,
        flags: 0,
    };
    let w: abi::WriteOut = h
        .req(opcode::COPY_FILE_RANGE, a.nodeid, &c.to_bytes())
        .parse();
    assert_eq!(w.size, 5);
    assert_eq!(std::fs::read(h.dir.join("b")).unwrap(), b"\x0023456");
    let c = abi::CopyFileRangeIn { flags: 1, ..c };
    assert_eq!(
        h.req(opcode::COPY_FILE_RANGE, a.nodeid, &c.to_bytes())
            .err(),
        libc::EINVAL
    );
}

#[test]
fn flush_fsync_syncfs() {
    let h = Harness::new();
    let (e, fh) = h.create_ok(ROOT, "f");
    h.write(e.nodeid, fh, 0, b"x").ok();
    let f = abi::FlushIn {
        fh,
        ..Default::default()
    };
    h.req(opcode::FLUSH, e.nodeid, &f.to_bytes()).ok();
    for flags in [0, abi::flags::FSYNC_FDATASYNC] {
        let s = abi::FsyncIn {
            fh,
            fsync_flags: flags,
            padding: 0,
        };
        h.req(opcode::FSYNC, e.nodeid, &s.to_bytes()).ok();
    }
    h.req(opcode::SYNCFS, ROOT, &abi::SyncfsIn::default().to_bytes())
        .ok();
    let dfh = h.opendir(ROOT);
    let s = abi::FsyncIn {
        fh: dfh,
        fsync_flags: 0,
        padding: 0,
    };
    h.req(opcode::FSYNCDIR, ROOT, &s.to_bytes()).ok();
    let bad = abi::FsyncIn { fh: 999_999, ..s };
    assert_eq!(
        h.req(opcode::FSYNC, ROOT, &bad.to_bytes()).err(),
        libc::EBADF
    );
}

#[test]
fn tmpfile() {
    let h = Harness::new();
    let c = abi::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o600,
        umask: 0,
        open_flags: 0,
    };
    let r = h.req(opcode::TMPFILE, ROOT, &cat(&[&c.to_bytes(), &cname("/")]));
    if r.error == -libc::EOPNOTSUPP {
        return;
    }
    let e = abi::EntryOut::from_bytes(r.ok()).unwrap();
    let o = abi::OpenOut::from_bytes(&r.ok()[abi::EntryOut::SIZE..]).unwrap();
    assert_eq!(e.attr.nlink, 0);
    h.write(e.nodeid, o.fh, 0, b"tmp").ok();
    assert_eq!(h.read(e.nodeid, o.fh, 0, 10).ok(), b"tmp");
    assert_eq!(std::fs::read_dir(&h.dir.path).unwrap().count(), 0);
}

#[test]
fn readonly_refuses_changes() {
    let h = Harness::with(|c| c.readonly = true);
    std::fs::write(h.dir.join("f"), b"ro").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    assert_eq!(h.mkdir(ROOT, "d", 0o755).err(), libc::EROFS);
    assert_eq!(
        h.create(ROOT, "g", 0o644, libc::O_RDWR | libc::O_CREAT)
            .err(),
        libc::EROFS
    );
    assert_eq!(h.open(e.nodeid, libc::O_WRONLY).err(), libc::EROFS);
    assert_eq!(
        h.open(e.nodeid, libc::O_RDONLY | libc::O_TRUNC).err(),
        libc::EROFS
    );
    assert_eq!(h.req(opcode::UNLINK, ROOT, &cname("f")).err(), libc::EROFS);
    assert_eq!(
        setattr(
            &h,
            e.nodeid,
            abi::SetattrIn {
                valid: fattr::MODE,
                mode: 0o777,
                ..Default::default()
            }
        )
        .err(),
        libc::EROFS
    );
    let fh = h.open(e.nodeid, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    assert_eq!(h.read(e.nodeid, fh, 0, 10).ok(), b"ro");
    assert_eq!(h.write(e.nodeid, fh, 0, b"x").err(), libc::EROFS);
    assert_eq!(std::fs::read(h.dir.join("f")).unwrap(), b"ro");
}

#[test]
fn concurrent_lookups_and_forgets_balance() {
    let h = Harness::new();
    for i in 0..8 {
        std::fs::write(h.dir.path.join(format!("f{i}")), b"").unwrap();
    }
    let srv = &h.srv;
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for round in 0..200 {
                    let name = format!("f{}", (round + t) % 8);
                    let body = cname(&name);
                    let hd = abi::InHeader {
                        len: (abi::InHeader::SIZE + body.len()) as u32,
                        opcode: opcode::LOOKUP,
                        unique: round,
                        nodeid: ROOT,
                        ..Default::default()
                    };
                    let req = cat(&[&hd.to_bytes(), &body]);
                    let mut r = xvfs_fs::io::SliceReader::new(&req);
                    let mut w = xvfs_fs::io::VecWriter::new(4096);
                    srv.handle(&mut r, &mut w);
                    let e = abi::EntryOut::from_bytes(&w.as_slice()[16..]).unwrap();
                    let f = cat(&[
                        &abi::InHeader {
                            len: 48,
                            opcode: opcode::FORGET,
                            nodeid: e.nodeid,
                            ..Default::default()
                        }
                        .to_bytes(),
                        &abi::ForgetIn { nlookup: 1 }.to_bytes(),
                    ]);
                    let mut r = xvfs_fs::io::SliceReader::new(&f);
                    let mut w = xvfs_fs::io::VecWriter::new(4096);
                    assert_eq!(srv.handle(&mut r, &mut w), 0);
                }
            });
        }
    });
    assert_eq!(h.fs().inode_count(), 1, "every lookup was forgotten");
}

#[test]
fn statx_gives_the_birth_time_and_the_same_attributes_as_getattr() {
    let h = Harness::new();
    std::fs::write(h.dir.join("f"), b"12345").unwrap();
    let f = h.lookup_ok(abi::ROOT_ID, "f");
    let sin = abi::StatxIn {
        sx_mask: libc::STATX_BASIC_STATS | libc::STATX_BTIME,
        ..Default::default()
    };
    let out = h
        .req(opcode::STATX, f.nodeid, &sin.to_bytes())
        .parse::<abi::StatxOut>();
    let sx = out.stat;
    assert_eq!((sx.ino, sx.size), (f.attr.ino, 5));
    assert_eq!(u32::from(sx.mode), f.attr.mode);
    assert_eq!(sx.mtime.tv_sec as u64, f.attr.mtime);
    // The host's own birth time, where its file system records one.
    let host = std::fs::metadata(h.dir.join("f")).unwrap();
    match host.created() {
        Ok(born) => {
            assert!(sx.mask & libc::STATX_BTIME != 0, "mask {:#x}", sx.mask);
            let secs = born
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            assert_eq!(sx.btime.tv_sec as u64, secs);
        }
        Err(_) => assert_eq!(sx.mask & libc::STATX_BTIME, 0),
    }
    // A wrong size is refused, an unknown node is EBADF.
    assert_eq!(
        h.req(opcode::STATX, f.nodeid, &[0u8; 8]).err(),
        libc::EINVAL
    );
    assert_eq!(
        h.req(opcode::STATX, 999, &sin.to_bytes()).err(),
        libc::EBADF
    );
}

/// A host attribute of `path`, read directly (not through the map).
fn host_xattr(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are valid C strings; `buf` is writable for its length.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

#[test]
fn xattrmap_renames_guards_and_hides() {
    let map = xvfs_fs::passthrough::XattrMap::parse(":map:user.:user.virtiofs.:").unwrap();
    let h = Harness::with(|c| {
        c.xattr = true;
        c.xattrmap = Some(map);
    });
    std::fs::write(h.dir.join("f"), b"").unwrap();
    let e = h.lookup_ok(ROOT, "f");
    let set = |name: &str, value: &[u8]| {
        let s = abi::SetxattrIn {
            size: value.len() as u32,
            ..Default::default()
        };
        h.req(
            opcode::SETXATTR,
            e.nodeid,
            &cat(&[&s.to_bytes(), &cname(name), value]),
        )
    };
    let r = set("user.a", b"v");
    if r.error == -libc::EOPNOTSUPP {
        eprintln!("temp dir has no user xattrs; skipping");
        return;
    }
    r.ok();
    // Stored on the host under the prefix, and read back under the guest's name.
    assert_eq!(
        host_xattr(&h.dir.join("f"), "user.virtiofs.user.a"),
        Some(b"v".to_vec())
    );
    assert_eq!(host_xattr(&h.dir.join("f"), "user.a"), None);
    let g = |size| abi::GetxattrIn { size, padding: 0 }.to_bytes();
    let v = h.req(
        opcode::GETXATTR,
        e.nodeid,
        &cat(&[&g(64), &cname("user.a")]),
    );
    assert_eq!(v.ok(), b"v");
    // The guest cannot reach the host's prefixed names directly: its own
    // `user.virtiofs.x` is itself prefixed.
    set("user.virtiofs.x", b"w").ok();
    assert_eq!(host_xattr(&h.dir.join("f"), "user.virtiofs.x"), None);
    assert_eq!(
        host_xattr(&h.dir.join("f"), "user.virtiofs.user.virtiofs.x"),
        Some(b"w".to_vec())
    );
    h.req(opcode::REMOVEXATTR, e.nodeid, &cname("user.virtiofs.x"))
        .ok();
    // A host attribute outside the mapping is hidden from the guest's list.
    let p = std::ffi::CString::new(h.dir.join("f").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and a value buffer of the length given.
    let rc = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            c"user.plain".as_ptr(),
            b"h".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(rc, 0);
    let l = h.req(opcode::LISTXATTR, e.nodeid, &g(1024));
    assert_eq!(l.ok(), b"user.a\0");
    let sz: abi::GetxattrOut = h.req(opcode::LISTXATTR, e.nodeid, &g(0)).parse();
    assert_eq!(sz.size, 7);
    assert_eq!(
        h.req(opcode::LISTXATTR, e.nodeid, &g(3)).err(),
        libc::ERANGE
    );
    h.req(opcode::REMOVEXATTR, e.nodeid, &cname("user.a")).ok();
    assert_eq!(host_xattr(&h.dir.join("f"), "user.virtiofs.user.a"), None);
}

#[test]
fn no_device_nodes_refuses_devices_but_not_fifos() {
    let h = Harness::with(|c| c.no_device_nodes = true);
    let mknod = |name: &str, mode: u32| {
        let m = abi::MknodIn {
            mode,
            rdev: (1 << 8) | 3, // 1:3, /dev/null
            umask: 0,
            padding: 0,
        };
        h.req(opcode::MKNOD, ROOT, &cat(&[&m.to_bytes(), &cname(name)]))
    };
    assert_eq!(mknod("c", libc::S_IFCHR | 0o666).err(), libc::EPERM);
    assert_eq!(mknod("b", libc::S_IFBLK | 0o666).err(), libc::EPERM);
    assert!(!h.dir.join("c").exists() && !h.dir.join("b").exists());
    let e: abi::EntryOut = mknod("p", libc::S_IFIFO | 0o600).parse();
    assert_eq!(e.attr.mode, libc::S_IFIFO | 0o600);
}

#[test]
fn no_setid_drops_the_bits_on_create_chmod_and_chown() {
    let h = Harness::with(|c| c.no_setid = true);
    let mode = |name: &str| {
        std::fs::metadata(h.dir.join(name))
            .unwrap()
            .permissions()
            .mode()
    };
    h.create(ROOT, "f", libc::S_IFREG | 0o6755, libc::O_RDWR)
        .ok();
    assert_eq!(
        mode("f") & 0o7777,
        0o755 & !0o022,
        "created without setuid/setgid"
    );
    let e = h.lookup_ok(ROOT, "f");
    setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::MODE,
            mode: 0o4755,
            ..Default::default()
        },
    )
    .ok();
    assert_eq!(mode("f") & 0o7777, 0o755, "chmod u+s dropped");
    // A setuid file made on the host loses the bit when the guest chowns it.
    std::fs::set_permissions(h.dir.join("f"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    setattr(
        &h,
        e.nodeid,
        abi::SetattrIn {
            valid: fattr::UID,
            uid: 1000,
            ..Default::default()
        },
    )
    .ok();
    assert_eq!(mode("f") & 0o7777, 0o755, "cleared after chown");
    // A directory may keep setgid (it only passes the group on), never setuid.
    let m = abi::MkdirIn {
        mode: 0o6775,
        umask: 0,
    };
    let d: abi::EntryOut = h
        .req(opcode::MKDIR, ROOT, &cat(&[&m.to_bytes(), &cname("d")]))
        .parse();
    let chmod = abi::SetattrIn {
        valid: fattr::MODE,
        mode: 0o6775,
        ..Default::default()
    };
    setattr(&h, d.nodeid, chmod).ok();
    assert_eq!(mode("d") & 0o7777, 0o2775);
}

/// FUSE_HANDLE_KILLPRIV_V2: a write, a truncate or an open(O_TRUNC) the
/// guest marks KILL_SUIDGID clears setuid/setgid (the daemon, root with
/// CAP_FSETID, acts without it); unmarked, or without --killpriv-v2, the
/// bits stay, as they do for a privileged writer.
#[test]
fn killpriv_v2_clears_setuid_where_the_guest_asks() {
    use abi::flags;
    assert_eq!(unsafe_geteuid(), 0, "the file-system tests run as root");
    let h = Harness::with(|c| c.killpriv_v2 = true);
    let suid = |name: &str| {
        std::fs::write(h.dir.join(name), b"data").unwrap();
        std::fs::set_permissions(h.dir.join(name), std::fs::Permissions::from_mode(0o6755))
            .unwrap();
        h.lookup_ok(ROOT, name).nodeid
    };
    let mode = |name: &str| {
        std::fs::metadata(h.dir.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    let open = |node: u64, flags: i32, kill: bool| {
        let o = abi::OpenIn {
            flags: flags as u32,
            open_flags: if kill { flags::OPEN_KILL_SUIDGID } else { 0 },
        };
        h.req(opcode::OPEN, node, &o.to_bytes())
    };
    let write = |node: u64, fh: u64, kill: bool| {
        let wi = abi::WriteIn {
            fh,
            size: 1,
            write_flags: if kill { flags::WRITE_KILL_SUIDGID } else { 0 },
            ..Default::default()
        };
        h.req(opcode::WRITE, node, &cat(&[&wi.to_bytes(), b"x"]))
    };

    let a = suid("a");
    let fh = open(a, libc::O_RDWR, false).parse::<abi::OpenOut>().fh;
    write(a, fh, false).ok();
    assert_eq!(mode("a"), 0o6755, "an unmarked write keeps the bits");
    write(a, fh, true).ok();
    assert_eq!(mode("a"), 0o755, "a marked write clears them");

    let b = suid("b");
    setattr(
        &h,
        b,
        abi::SetattrIn {
            valid: fattr::SIZE | fattr::KILL_SUIDGID,
            size: 1,
            ..Default::default()
        },
    )
    .ok();
    assert_eq!(mode("b"), 0o755, "a marked truncate clears them");

    let c = suid("c");
    open(c, libc::O_RDWR | libc::O_TRUNC, true).ok();
    assert_eq!(mode("c"), 0o755, "a marked open(O_TRUNC) clears them");

    // Not negotiated: the flag means nothing.
    let plain = Harness::new();
    std::fs::write(plain.dir.join("p"), b"data").unwrap();
    std::fs::set_permissions(plain.dir.join("p"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let p = plain.lookup_ok(ROOT, "p").nodeid;
    let o = abi::OpenIn {
        flags: libc::O_RDWR as u32,
        open_flags: 0,
    };
    let fh = plain
        .req(opcode::OPEN, p, &o.to_bytes())
        .parse::<abi::OpenOut>()
        .fh;
    let wi = abi::WriteIn {
        fh,
        size: 1,
        write_flags: flags::WRITE_KILL_SUIDGID,
        ..Default::default()
    };
    plain
        .req(opcode::WRITE, p, &cat(&[&wi.to_bytes(), b"x"]))
        .ok();
    let m = std::fs::metadata(plain.dir.join("p"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        m & 0o7777,
        0o4755,
        "without --killpriv-v2 the daemon keeps them"
    );
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}
