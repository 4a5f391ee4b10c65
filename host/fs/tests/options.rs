// SPDX-License-Identifier: Apache-2.0
//! virtiofsd options with a protocol meaning (issue 13): what each one
//! changes in the FUSE session, against a temporary directory.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::CString;

use common::*;
use xvfs_fs::abi::{self, init_flags};

const ROOT: u64 = abi::ROOT_ID;

fn negotiated(h: &Harness, offered: u64) -> u64 {
    let out: abi::InitOut = h
        .init(7, 41, offered as u32, (offered >> 32) as u32)
        .parse();
    u64::from(out.flags) | u64::from(out.flags2) << 32
}

#[test]
fn allow_mmap_offers_direct_io_allow_mmap_only_when_asked() {
    for cache in [xvfs_fs::CachePolicy::Never, xvfs_fs::CachePolicy::Metadata] {
        let h = Harness::uninit(|c| c.cache = cache);
        let f = negotiated(&h, u64::MAX);
        assert_eq!(
            f & init_flags::DIRECT_IO_ALLOW_MMAP,
            0,
            "{cache:?}: off by default"
        );
        let h = Harness::uninit(|c| {
            c.cache = cache;
            c.allow_mmap = true;
        });
        let f = negotiated(&h, u64::MAX);
        assert_ne!(
            f & init_flags::DIRECT_IO_ALLOW_MMAP,
            0,
            "{cache:?}: --allow-mmap"
        );
        let f = negotiated(&h, !init_flags::DIRECT_IO_ALLOW_MMAP);
        assert_eq!(
            f & init_flags::DIRECT_IO_ALLOW_MMAP,
            0,
            "only if the guest offers it"
        );
    }
}

/// A tmpfs mounted on `dir`, unmounted when dropped.
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(dir: std::path::PathBuf) -> Mounted {
        std::fs::create_dir_all(&dir).unwrap();
        let c = |s: &str| CString::new(s).unwrap();
        let (src, path, fstype) = (c("xvfs-test"), c(dir.to_str().unwrap()), c("tmpfs"));
        // SAFETY: valid NUL-terminated strings; tmpfs takes no data here.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                path.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Mounted(dir)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let path = CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    }
}

fn submount_flag(e: &abi::EntryOut) -> bool {
    e.attr.flags & abi::ATTR_SUBMOUNT != 0
}

#[test]
fn announce_submounts_marks_directories_on_other_mounts() {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the file-system tests run as root (mount)");
    let h = Harness::uninit(|c| c.announce_submounts = true);
    let _m = Mounted::tmpfs(h.dir.join("mnt"));
    std::fs::create_dir(h.dir.join("plain")).unwrap();
    std::fs::create_dir(h.dir.join("mnt/inner")).unwrap();
    std::fs::write(h.dir.join("file"), b"x").unwrap();
    assert_ne!(negotiated(&h, u64::MAX) & init_flags::SUBMOUNTS, 0);
    let mnt = h.lookup_ok(ROOT, "mnt");
    assert!(submount_flag(&mnt), "the mount point is announced");
    assert!(!submount_flag(&h.lookup_ok(ROOT, "plain")));
    assert!(!submount_flag(&h.lookup_ok(ROOT, "file")));
    assert!(
        !submount_flag(&h.lookup_ok(mnt.nodeid, "inner")),
        "a directory on the same mount as its parent is not"
    );

    // Not announced by default, nor to a guest that cannot make submounts.
    let h2 = Harness::uninit(|_| {});
    let _m2 = Mounted::tmpfs(h2.dir.join("mnt"));
    assert_eq!(negotiated(&h2, u64::MAX) & init_flags::SUBMOUNTS, 0);
    assert!(!submount_flag(&h2.lookup_ok(ROOT, "mnt")));
    let h3 = Harness::uninit(|c| c.announce_submounts = true);
    let _m3 = Mounted::tmpfs(h3.dir.join("mnt"));
    negotiated(&h3, !init_flags::SUBMOUNTS);
    assert!(!submount_flag(&h3.lookup_ok(ROOT, "mnt")));
}

fn owner(h: &Harness, name: &str) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(h.dir.join(name)).unwrap();
    (md.uid(), md.gid())
}

fn translated(uid: &[&str], gid: &[&str]) -> Harness {
    let v = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let t = xvfs_fs::ids::Translation::parse(&v(uid), &v(gid)).unwrap();
    Harness::with(|c| c.ids = t)
}

#[test]
fn translate_uid_and_gid_map_callers_owners_and_attributes() {
    use abi::{fattr, opcode, Wire};
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the file-system tests run as root (owners)");
    let h = translated(
        &["map:1000:5000:10", "squash-host:7000:99:5"],
        &["guest:1000:6000:10"],
    );
    // Created as guest 1001:1002: the host owner is 5001:6002.
    h.uid.set(1001);
    h.gid.set(1002);
    let made: abi::EntryOut = h.mkdir(ROOT, "made", 0o755).parse();
    assert_eq!(owner(&h, "made"), (5001, 6002));
    // The guest sees the uid mapped back (map: both ways); the gid rule is
    // one-way, so it sees the host's gid.
    assert_eq!((made.attr.uid, made.attr.gid), (1001, 6002));
    // A new owner from the guest is translated too.
    h.uid.set(0);
    h.gid.set(0);
    let set = abi::SetattrIn {
        valid: fattr::UID | fattr::GID,
        uid: 1005,
        gid: 1003,
        ..Default::default()
    };
    let a: abi::AttrOut = h.req(opcode::SETATTR, made.nodeid, &set.to_bytes()).parse();
    assert_eq!(owner(&h, "made"), (5005, 6003));
    assert_eq!(a.attr.uid, 1005);
    // Host IDs a squash-host rule covers are all one guest ID.
    std::fs::write(h.dir.join("host"), b"x").unwrap();
    std::os::unix::fs::chown(h.dir.join("host"), Some(7003), Some(0)).unwrap();
    assert_eq!(h.lookup_ok(ROOT, "host").attr.uid, 99);
    // IDs no rule covers stay as they are.
    std::os::unix::fs::chown(h.dir.join("host"), Some(4242), Some(4243)).unwrap();
    let a: abi::AttrOut = h.getattr(h.lookup_ok(ROOT, "host").nodeid).parse();
    assert_eq!((a.attr.uid, a.attr.gid), (4242, 4243));
}

#[test]
fn forbid_guest_refuses_creating_as_or_giving_to_those_ids() {
    use abi::{fattr, opcode, Wire};
    let h = translated(&["forbid-guest:0:1"], &[]);
    h.uid.set(0);
    assert_eq!(h.mkdir(ROOT, "as-root", 0o755).err(), libc::EPERM);
    assert!(!h.dir.join("as-root").exists());
    h.uid.set(1000);
    let e: abi::EntryOut = h.mkdir(ROOT, "as-1000", 0o755).parse();
    assert_eq!(owner(&h, "as-1000").0, 1000);
    let give = abi::SetattrIn {
        valid: fattr::UID,
        uid: 0,
        ..Default::default()
    };
    assert_eq!(
        h.req(opcode::SETATTR, e.nodeid, &give.to_bytes()).err(),
        libc::EPERM
    );
    assert_eq!(owner(&h, "as-1000").0, 1000);
    // Reading as a forbidden ID is not refused.
    h.uid.set(0);
    let a: abi::AttrOut = h.getattr(e.nodeid).parse();
    assert_eq!(a.attr.uid, 1000);
}

/// An ACL with one named-user entry (uid `who`, rwx), in the kernel's
/// `system.posix_acl_*` format (version 2; tags USER_OBJ, USER, GROUP_OBJ,
/// MASK, OTHER).
fn acl_xattr(who: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 7, who),
        (0x04, 4, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn setxattr(h: &Harness, node: u64, name: &str, value: &[u8], kill_sgid: bool) -> Reply {
    use abi::{opcode, Wire};
    let s = abi::SetxattrIn {
        size: value.len() as u32,
        flags: 0,
        setxattr_flags: if kill_sgid {
            abi::SETXATTR_ACL_KILL_SGID
        } else {
            0
        },
        padding: 0,
    };
    h.req(
        opcode::SETXATTR,
        node,
        &cat(&[&s.to_bytes(), &cname(name), value]),
    )
}

#[test]
fn posix_acl_negotiates_all_three_flags_or_none_and_always_requires_them() {
    use xvfs_fs::passthrough::Offer;
    let acl = init_flags::POSIX_ACL | init_flags::DONT_MASK | init_flags::SETXATTR_EXT;
    let h = Harness::uninit(|c| c.posix_acl = Offer::Auto);
    assert_eq!(negotiated(&h, u64::MAX) & acl, acl);
    let h = Harness::uninit(|c| c.posix_acl = Offer::Auto);
    let f = negotiated(&h, !init_flags::DONT_MASK);
    assert_eq!(
        f & (init_flags::POSIX_ACL | init_flags::DONT_MASK),
        0,
        "all three or none"
    );
    let h = Harness::uninit(|c| c.posix_acl = Offer::Always);
    let r = h.init(7, 41, !(init_flags::POSIX_ACL as u32), u32::MAX);
    assert_eq!(
        r.err(),
        libc::EPROTO,
        "always: a guest without POSIX_ACL is refused"
    );
    let h = Harness::uninit(|_| {});
    assert_eq!(
        negotiated(&h, u64::MAX) & acl & !init_flags::SETXATTR_EXT,
        0
    );
}

#[test]
fn acl_attributes_need_posix_acl_and_umask_yields_to_default_acls() {
    use std::os::unix::fs::PermissionsExt;
    use xvfs_fs::passthrough::Offer;
    let mode = |h: &Harness, p: &str| {
        std::fs::metadata(h.dir.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    // Without --posix-acl: the ACL attributes are not served.
    let h = Harness::with(|c| c.xattr = true);
    let d: abi::EntryOut = h.mkdir(ROOT, "d", 0o777).parse();
    assert_eq!(
        setxattr(
            &h,
            d.nodeid,
            "system.posix_acl_access",
            &acl_xattr(1000),
            false
        )
        .err(),
        libc::EOPNOTSUPP
    );

    let h = Harness::with(|c| {
        c.xattr = true;
        c.posix_acl = Offer::Always;
    });
    // No default ACL: the umask the guest sent applies (0o022 from mkdir).
    let d: abi::EntryOut = h.mkdir(ROOT, "d", 0o777).parse();
    assert_eq!(mode(&h, "d"), 0o755);
    // A default ACL takes the umask's place.
    setxattr(
        &h,
        d.nodeid,
        "system.posix_acl_default",
        &acl_xattr(1000),
        false,
    )
    .ok();
    h.mkdir(d.nodeid, "sub", 0o777).ok();
    // 0777 within the default ACL: owner rw- (USER_OBJ), group bits the
    // mask rwx, other r--; no umask.
    assert_eq!(mode(&h, "d/sub"), 0o674, "mode from the default ACL");
    let got = std::process::Command::new("getfacl")
        .args(["-n", h.dir.join("d/sub").to_str().unwrap()])
        .output();
    if let Ok(out) = got {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("user:1000:rwx"), "{text}");
    }
    // SETXATTR_ACL_KILL_SGID clears setgid before the access ACL is set.
    std::fs::set_permissions(h.dir.join("d"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    setxattr(
        &h,
        d.nodeid,
        "system.posix_acl_access",
        &acl_xattr(1000),
        true,
    )
    .ok();
    assert_eq!(mode(&h, "d") & libc::S_ISGID, 0);
}

/// A request with extensions `ext` after `body`.
fn req_ext(h: &Harness, op: u32, node: u64, body: &[u8], ext: &[u8]) -> Reply {
    use abi::Wire;
    assert_eq!(ext.len() % 8, 0);
    let mut hd = h.header(op, node, body.len() + ext.len());
    hd.total_extlen = (ext.len() / 8) as u16;
    let (_, out) = h.raw(&cat(&[&hd.to_bytes(), body, ext]), ROOM);
    let oh = abi::OutHeader::from_bytes(&out).unwrap();
    Reply {
        error: oh.error,
        unique: oh.unique,
        body: out[abi::OutHeader::SIZE..].to_vec(),
        written: out.len(),
    }
}

/// The kernel's security-context extension: one context.
fn secctx_ext(attr: &str, value: &[u8]) -> Vec<u8> {
    let mut body = (value.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(attr.as_bytes());
    body.push(0);
    body.extend_from_slice(value);
    let size = (8 + body.len()).next_multiple_of(8);
    let mut v = (size as u32).to_le_bytes().to_vec();
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&body);
    v.resize(size, 0);
    v
}

fn xattr_of(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings; the buffer is writable for its length.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

#[test]
fn security_label_sets_the_guests_context_on_what_it_creates() {
    use abi::{opcode, Wire};
    use xvfs_fs::passthrough::Offer;
    let h = Harness::uninit(|c| {
        c.xattr = true;
        c.security_label = Offer::Auto;
    });
    assert_ne!(negotiated(&h, u64::MAX) & init_flags::SECURITY_CTX, 0);
    // (A security.* name no security module of the host claims: root sets
    // it as a plain attribute.)
    let label = "security.xvfs-test";
    let mk = abi::MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let r = req_ext(
        &h,
        opcode::MKDIR,
        ROOT,
        &cat(&[&mk.to_bytes(), &cname("d")]),
        &secctx_ext(label, b"ctx-dir\0"),
    );
    assert_eq!(r.error, 0);
    assert_eq!(
        xattr_of(&h.dir.join("d"), label).as_deref(),
        Some(&b"ctx-dir\0"[..])
    );
    // A symlink is labelled itself, not its target.
    let r = req_ext(
        &h,
        opcode::SYMLINK,
        ROOT,
        &cat(&[&cname("l"), &cname("d")]),
        &secctx_ext(label, b"ctx-link"),
    );
    assert_eq!(r.error, 0);
    assert_eq!(
        xattr_of(&h.dir.join("l"), label).as_deref(),
        Some(&b"ctx-link"[..])
    );
    assert_eq!(
        xattr_of(&h.dir.join("d"), label).as_deref(),
        Some(&b"ctx-dir\0"[..])
    );
    // CREATE: labelled and open.
    let c = abi::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        umask: 0,
        open_flags: 0,
    };
    let r = req_ext(
        &h,
        opcode::CREATE,
        ROOT,
        &cat(&[&c.to_bytes(), &cname("f")]),
        &secctx_ext(label, b"ctx-file"),
    );
    assert_eq!(r.error, 0);
    assert_eq!(
        xattr_of(&h.dir.join("f"), label).as_deref(),
        Some(&b"ctx-file"[..])
    );
    // An extension with no context: created, not labelled.
    let none = [8u32.to_le_bytes(), 0u32.to_le_bytes()].concat();
    let r = req_ext(
        &h,
        opcode::MKDIR,
        ROOT,
        &cat(&[&mk.to_bytes(), &cname("plain")]),
        &none,
    );
    assert_eq!(r.error, 0);
    assert_eq!(xattr_of(&h.dir.join("plain"), label), None);
    // security.capability is refused, and nothing is created.
    let r = req_ext(
        &h,
        opcode::MKDIR,
        ROOT,
        &cat(&[&mk.to_bytes(), &cname("cap")]),
        &secctx_ext("security.capability", b"x"),
    );
    assert_eq!(r.error, -libc::EPERM);
    assert!(!h.dir.join("cap").exists());
    // A context the host refuses to set (a value over the 64 KiB xattr
    // limit): the new directory is removed and the create fails.
    let big = vec![b'x'; 70_000];
    let r = req_ext(
        &h,
        opcode::MKDIR,
        ROOT,
        &cat(&[&mk.to_bytes(), &cname("big")]),
        &secctx_ext(label, &big),
    );
    assert_ne!(r.error, 0);
    assert!(
        !h.dir.join("big").exists(),
        "a file that cannot be labelled is not kept"
    );
}
