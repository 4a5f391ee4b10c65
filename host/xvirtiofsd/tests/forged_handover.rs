// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A live-upgrade successor trusts neither the peer on the control socket nor
//! the settings it receives (issue 12): an unprivileged peer is refused on
//! both sides, and a state whose shared directory or sandbox differs from
//! the successor's own command line is refused. The running daemon keeps
//! serving in every case.
//!
//! The old daemon runs in this process; the successor is the real binary
//! started with `--handover-from`. Needs root, to play an unprivileged peer.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use xvirtiofsd::vhost_user::DeviceConfig;

const NOBODY: u32 = 65534;

fn getattr_ok(vmm: &mut Vmm) {
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "the running daemon keeps serving");
}

/// A successor (the real binary, in a process of its own: it enters its
/// sandbox and drops capabilities before it asks for the state, which a
/// test process must not do) that must fail; returns its standard error.
fn take_over_err(control: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .arg("--handover-from")
        .arg(control)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("run xvirtiofsd");
    assert_eq!(out.status.code(), Some(3), "exit status 3 (set-up failed)");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a Python snippet as uid 65534.
fn as_nobody(script: &str, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 as nobody")
}

#[test]
fn forged_handovers_are_refused_and_the_daemon_serves_on() {
    // SAFETY: geteuid has no arguments.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
    let dir = scratch_dir("forged");
    let other = scratch_dir("forged-other");
    let control_path = dir.with_extension("ctl.sock");
    let serve = serve_refusing_handovers(handover_config(&dir), control_path.clone(), Some(0o666));
    let mut vmm = Vmm::start_serving(&dir, DeviceConfig::new(2), serve);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    getattr_ok(&mut vmm);
    let d = dir.to_str().unwrap();
    let none = ["--sandbox", "none", "--seccomp", "none"];

    // Another shared directory than the running daemon's.
    let o = other.to_str().unwrap();
    let e = take_over_err(&control_path, &[&["--shared-dir", o][..], &none].concat());
    assert!(e.contains("shared directory"), "{e}");
    getattr_ok(&mut vmm);

    // The successor's own sandbox and seccomp (defaults) differ from the
    // state's: the state cannot switch them off.
    let e = take_over_err(&control_path, &["--shared-dir", d]);
    assert!(e.contains("sandbox") && e.contains("seccomp"), "{e}");
    getattr_ok(&mut vmm);
    let e = take_over_err(
        &control_path,
        &[&["--shared-dir", d, "--readonly"][..], &none].concat(),
    );
    assert!(e.contains("readonly"), "{e}");
    getattr_ok(&mut vmm);

    // An unprivileged process asking the running daemon for a handover.
    let mut asker = as_nobody(
        "import socket,sys\n\
         s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
         s.sendall(b'handover\\n'); s.settimeout(10)\n\
         print(s.recv(100).decode().strip())",
        &[control_path.to_str().unwrap()],
    );
    let mut answer = String::new();
    asker
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut answer)
        .unwrap();
    asker.wait().unwrap();
    assert_eq!(answer.trim(), "error: not trusted");
    getattr_ok(&mut vmm);

    // An unprivileged process listening where the operator pointed the
    // successor: the successor sends it nothing and gives up.
    let fake_dir = scratch_dir("forged-fake");
    std::fs::set_permissions(&fake_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = fake_dir.join("fake.sock");
    let mut listener = as_nobody(
        "import socket,sys\n\
         s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\n\
         print('listening', flush=True)\n\
         c,_=s.accept(); c.settimeout(5)\n\
         try:\n  n=len(c.recv(100))\nexcept Exception:\n  n=-1\n\
         print('received', n, flush=True)",
        &[fake.to_str().unwrap()],
    );
    let mut out = listener.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    let e = take_over_err(&fake, &[&["--shared-dir", d][..], &none].concat());
    assert!(e.contains("uid 65534") && e.contains("not trusted"), "{e}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    listener.wait().unwrap();
    assert_eq!(rest.trim(), "received 0", "the successor sent nothing");
    getattr_ok(&mut vmm);

    vmm.shutdown().expect("clean disconnect");
    let _ = std::fs::remove_file(&control_path);
    let _ = std::fs::remove_dir_all(&fake_dir);
    let _ = std::fs::remove_dir_all(&other);
    let _ = std::fs::remove_dir_all(&dir);
}
