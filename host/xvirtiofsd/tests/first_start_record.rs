// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The record of the first start's options (issue 29): a daemon started
//! fresh writes its command line to CONTROL.args, mode 0600, before it
//! serves; `xvirtiofsd upgrade` refuses a new daemon command line whose
//! security options (capabilities included) differ from it, with one line
//! and exit status 1, before it starts anything, and the running daemon
//! serves on. The real binary, with --sandbox none (no root needed).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Running {
    child: Child,
    dir: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn upgrade(control: &Path, daemon_args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .arg("upgrade")
        .arg("--control")
        .arg(control)
        .arg("--timeout=5")
        .arg("--")
        .args(daemon_args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

#[test]
fn a_fresh_start_records_its_options_and_upgrade_holds_successors_to_them() {
    let dir = std::env::temp_dir().join(format!("xvfs-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    let s = |p: &str| dir.join(p).display().to_string();
    let args = [
        format!("--shared-dir={}", s("share")),
        format!("--socket-path={}", s("v.sock")),
        format!("--control={}", s("c.sock")),
        "--sandbox=none".to_string(),
        "--seccomp=none".to_string(),
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut r = Running { child, dir };
    let record = r.dir.join("c.sock.args");
    wait_for(&r.dir.join("v.sock"));
    wait_for(&record);

    let md = std::fs::metadata(&record).unwrap();
    assert_eq!(md.mode() & 0o777, 0o600, "the record is private");
    let argv: Vec<String> = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(argv[1..], args[..], "the command line, as given");

    // What an attacker wrote into the serving process's cmdline.
    let (code, err) = upgrade(
        &r.dir.join("c.sock"),
        &[
            "--shared-dir=/",
            "--sandbox=none",
            "--seccomp=none",
            "--modcaps=+sys_admin",
            &args[1],
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    for what in ["--shared-dir", "--modcaps", "sys_admin", "keeps serving"] {
        assert!(err.contains(what), "{what}: {err}");
    }
    assert!(
        r.child.try_wait().unwrap().is_none(),
        "the daemon serves on"
    );
    let after: Vec<String> = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(after, argv, "the record is unchanged");
}

/// With --crash-restart the process started is the holder: its record and
/// the control socket its serving process binds by default are both named
/// after the holder's pid (issue 45), so that `upgrade` on that socket
/// finds the record and holds the new daemon's options to it. Needs root
/// (the default directory, /run/xvirtiofsd).
#[test]
fn under_crash_restart_the_default_control_socket_finds_the_record() {
    use std::io::{BufRead, BufReader};
    // SAFETY: geteuid has no arguments.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
    let dir = std::env::temp_dir().join(format!("xvfs-record-cr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    let s = |p: &str| dir.join(p).display().to_string();
    let args = [
        "--crash-restart".to_string(),
        format!("--shared-dir={}", s("share")),
        format!("--socket-path={}", s("v.sock")),
        "--sandbox=none".to_string(),
        "--seccomp=none".to_string(),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The serving process says where its control socket is.
    let (tx, rx) = std::sync::mpsc::channel();
    let log = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in log.lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once(", control ") {
                let _ = tx.send(rest.trim_end_matches(')').to_string());
            }
        }
    });
    let holder = child.id();
    let default = PathBuf::from(format!("/run/xvirtiofsd/{holder}.sock"));
    // Dropped last: the files once the holder has ended.
    let _cleanup = RemoveOnDrop(vec![default.clone(), default.with_extension("sock.args")]);
    let _r = Holder(Running { child, dir });
    let control = PathBuf::from(
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the serving process names its control socket"),
    );
    wait_for(&control);
    wait_for(&default.with_extension("sock.args"));

    // The new daemon's options are refused by the record's check, before
    // anything is started.
    let (code, err) = upgrade(
        &control,
        &[
            "--crash-restart",
            "--shared-dir=/",
            "--sandbox=none",
            "--seccomp=none",
            &args[2],
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("differ from the first start's") && err.contains("--shared-dir"),
        "the record beside {} is checked: {err}",
        control.display()
    );
    assert_eq!(control, default, "named after the holder, as its record");
}

/// A crash-restart holder, ended with SIGTERM, which it passes on to its
/// serving process (SIGKILL would leave that one behind: its parent-death
/// signal went with its capabilities).
struct Holder(Running);

impl Drop for Holder {
    fn drop(&mut self) {
        let child = &mut self.0.child;
        // SAFETY: kill takes integers; the holder is this test's child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Removes files (a test's leftovers in a shared directory) when dropped.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}
