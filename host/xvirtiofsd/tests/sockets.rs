// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Sockets are created with their final mode (whatever the inherited umask),
//! their group is set without following a symlink, and the control-socket
//! directory is private and this user's (issue 12). Needs root (chown).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Mutex;

/// The umask is the process's: the tests that set it, or that bind and
/// create directories under it, take turns.
static UMASK: Mutex<()> = Mutex::new(());

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xvfs-sock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sockets_get_their_mode_at_bind_and_the_group_on_the_socket_itself() {
    let _turn = UMASK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask takes an integer; a wide-open inherited mask.
    unsafe { libc::umask(0) };
    let d = scratch("mode");
    let ctl = d.join("ctl.sock");
    let _c = xvirtiofsd::ops::control::bind(&ctl).unwrap();
    assert_eq!(std::fs::metadata(&ctl).unwrap().mode() & 0o7777, 0o600);

    let vs = d.join("vhost.sock");
    let _v = xvirtiofsd::socket::bind(&vs, 0o770, Some(65534)).unwrap();
    let md = std::fs::metadata(&vs).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o770);
    assert_eq!(md.gid(), 65534);

    // The mask in force before is back.
    // SAFETY: as above; reads and restores the mask.
    let now = unsafe { libc::umask(0) };
    assert_eq!(now, 0);

    // A symlink planted at the path is neither followed nor replaced.
    let target = d.join("target");
    std::fs::write(&target, b"x").unwrap();
    let link = d.join("planted.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(xvirtiofsd::socket::bind(&link, 0o700, Some(65534)).is_err());
    assert_eq!(std::fs::metadata(&target).unwrap().gid(), 0);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_control_directory_is_created_private_and_must_be_ours() {
    let _turn = UMASK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask takes an integer.
    unsafe { libc::umask(0) };
    let d = scratch("dir");
    let fresh = d.join("run");
    xvirtiofsd::socket::private_dir(&fresh).unwrap();
    assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o7777, 0o700);
    xvirtiofsd::socket::private_dir(&fresh).unwrap();

    let theirs = d.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    assert!(
        xvirtiofsd::socket::private_dir(&theirs).is_err(),
        "other owner"
    );

    let open = d.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(
        xvirtiofsd::socket::private_dir(&open).is_err(),
        "world-writable"
    );

    let link = d.join("link");
    std::os::unix::fs::symlink(&fresh, &link).unwrap();
    assert!(xvirtiofsd::socket::private_dir(&link).is_err(), "symlink");
    std::fs::remove_dir_all(&d).unwrap();
}
