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
