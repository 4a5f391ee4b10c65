// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "fault-injection")]
//! The sandbox holds a compromised daemon (issue 29), in each lifecycle:
//! fresh start, after a live upgrade, after a crash restart. Run with
//! `cargo test -p xvirtiofsd --features fault-injection --test escape`
//! (`make test` does). Needs root.
//!
//! The daemon is the real binary of a `fault-injection` build, serving a
//! front-end played by this test over its vhost-user socket. Per lifecycle:
//! - the attacker inside the serving process (`src/attack.rs`, armed by
//!   `XVFS_ATTACK=1`, triggered by SIGUSR2) tries `..` from every directory
//!   descriptor to a host file outside the share and to /proc/sys, the
//!   same by absolute path, a connection to a host socket and a signal to
//!   a host process: every attempt must be refused;
//! - every directory descriptor in `/proc/PID/fd` of the serving process
//!   is the share or a directory inside it;
//! - the guest holds a directory, the host moves it out of the share (same
//!   file system) next to a secret file, and the guest sends LOOKUP ".."
//!   from it (as a hostile guest driver, or a guest reconnecting an
//!   exported handle, does): it gets an error, and the secret is never
//!   reached.
//!
//! Control: with `--sandbox none` (which opens the share by host path and
//! says in its warning that only the file-system layer confines paths) the
//! same LOOKUP ".." reaches the outside directory, so the test can see an
//! escape when there is one.

mod common;

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const FUSE_FORGET_NONE: u64 = 0;

struct Setup {
    dir: PathBuf,
    share: PathBuf,
    outside: PathBuf,
    ctl: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    _host_socket: UnixListener,
    victim: Child,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = scratch_dir(&format!("escape-{name}"));
        let share = dir.join("share");
        let outside = dir.join("outside");
        std::fs::create_dir_all(share.join("a/held")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "host secret\n").unwrap();
        let host_socket = UnixListener::bind(dir.join("host.sock")).unwrap();
        let victim = Command::new("sleep").arg("120").spawn().unwrap();
        Setup {
            ctl: dir.join("ctl.sock"),
            sock: dir.join("vhost.sock"),
            log: dir.join("daemon.log"),
            dir,
            share,
            outside,
            _host_socket: host_socket,
            victim,
        }
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut a = vec![
            format!("--shared-dir={}", self.share.display()),
            format!("--socket-path={}", self.sock.display()),
            format!("--control={}", self.ctl.display()),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn attacker_env(&self, cmd: &mut Command) {
        cmd.env("XVFS_ATTACK", "1")
            .env("XVFS_ATTACK_TARGET", self.outside.join("secret"))
            .env("XVFS_ATTACK_SOCKET", self.dir.join("host.sock"))
            .env("XVFS_ATTACK_VICTIM", self.victim.id().to_string());
    }

    fn start(&self, extra: &[&str]) -> Running {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"));
        cmd.args(self.args(extra))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.attacker_env(&mut cmd);
        let child = Running(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.sock.exists() {
            assert!(Instant::now() < deadline, "daemon did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn serving_pid(&self) -> u32 {
        let s = xvirtiofsd::ops::control::query_status(&self.ctl).expect("status");
        let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap();
        v["serving_pid"].as_u64().expect("serving_pid") as u32
    }
}

/// The daemon started; killed (the supervisor passes SIGKILL's effect on:
/// its child dies with it) when the test ends, passed or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connect(s: &Setup) -> Vmm {
    let mut vmm = Vmm::connect(&s.sock, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    vmm
}

/// LOOKUP `name` in `parent`: (error, node id, inode number).
fn lookup(vmm: &mut Vmm, parent: u64, name: &str) -> (i32, u64, u64) {
    let arg = format!("{name}\0");
    let (err, e) = vmm.fuse(1, FUSE_LOOKUP, parent, arg.as_bytes());
    if err != 0 || e.len() < 48 {
        return (err, FUSE_FORGET_NONE, 0);
    }
    let nodeid = u64::from_ne_bytes(e[0..8].try_into().unwrap());
    let ino = u64::from_ne_bytes(e[40..48].try_into().unwrap());
    (err, nodeid, ino)
}

/// Signals the attacker in the serving process and returns its report.
fn attack(s: &Setup) -> String {
    let before = s.log().matches("XVFS-ATTACK done").count();
    let pid = s.serving_pid();
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGUSR2) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = s.log();
        if log.matches("XVFS-ATTACK done").count() > before {
            return log;
        }
        assert!(Instant::now() < deadline, "no attack report:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every attempt refused, and enough of them were made.
fn assert_contained(s: &Setup, lifecycle: &str) {
    let log = attack(s);
    let last = log
        .lines()
        .rfind(|l| l.starts_with("XVFS-ATTACK done"))
        .unwrap();
    let f: Vec<u32> = last
        .split_whitespace()
        .skip(2)
        .map(|n| n.parse().unwrap())
        .collect();
    let escaped: Vec<&str> = log.lines().filter(|l| l.contains("ESCAPED")).collect();
    assert!(escaped.is_empty(), "{lifecycle}: escaped: {escaped:#?}");
    assert_eq!(f[1], 0, "{lifecycle}: {last}");
    // The root, /proc/self/fd, three by absolute path, socket, signal.
    assert!(f[0] >= 2 * 5 + 3 + 2, "{lifecycle}: only {} attempts", f[0]);
    for must in ["fd", "abs-target", "socket", "tgkill-victim"] {
        assert!(
            log.contains(&format!("XVFS-ATTACK {must}")),
            "{lifecycle}: no {must} attempt"
        );
    }
}

/// Device and inode of every directory in the share.
fn share_dirs(share: &Path) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![share.to_path_buf()];
    while let Some(d) = todo.pop() {
        let md = std::fs::symlink_metadata(&d).unwrap();
        out.push((md.dev(), md.ino()));
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            }
        }
    }
    out
}

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// The file system type of `path` (followed).
fn fs_type(path: &Path) -> i64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain data; all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a buffer of the right type.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    st.f_type
}

/// No directory descriptor of the serving process is outside the share
/// (the bind-mounted /proc/self/fd is its own directory, checked by name).
fn assert_fds_inside(s: &Setup, lifecycle: &str) {
    let pid = s.serving_pid();
    let inside = share_dirs(&s.share);
    let (mut dirs, mut procfs) = (0, 0u32);
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(md) = std::fs::metadata(e.path()) else {
            continue;
        };
        if !md.is_dir() {
            continue;
        }
        dirs += 1;
        let key = (md.dev(), md.ino());
        let on_procfs = fs_type(&e.path()) == PROC_SUPER_MAGIC;
        procfs += u32::from(on_procfs);
        assert!(
            inside.contains(&key) || on_procfs,
            "{lifecycle}: descriptor {:?} -> {:?} is a directory outside the share",
            e.path(),
            std::fs::read_link(e.path())
        );
    }
    assert!(dirs >= 2, "{lifecycle}: the root and /proc/self/fd");
    // Only the daemon's own fd directory (the attacker shows nothing can
    // be reached from it).
    assert!(procfs <= 1, "{lifecycle}: {procfs} procfs directories held");
}

/// The guest holds a/held; the host moves it out next to `secret`; LOOKUP
/// ".." from it must fail. Returns the error (0 if it escaped).
fn moved_out_dotdot(s: &Setup, vmm: &mut Vmm) -> (i32, u64) {
    let (err, a, _) = lookup(vmm, 1, "a");
    assert_eq!(err, 0);
    let (err, held, _) = lookup(vmm, a, "held");
    assert_eq!(err, 0);
    std::fs::rename(s.share.join("a/held"), s.outside.join("held")).unwrap();
    let (err, up, up_ino) = lookup(vmm, held, "..");
    let mut secret = (0, 0, 0);
    if err == 0 {
        secret = lookup(vmm, up, "secret");
    }
    std::fs::rename(s.outside.join("held"), s.share.join("a/held")).unwrap();
    let outside_ino = std::fs::metadata(&s.outside).unwrap().ino();
    if err == 0 && up_ino == outside_ino {
        return (0, secret.2);
    }
    (err, up_ino)
}

fn assert_moved_out_refused(s: &Setup, vmm: &mut Vmm, lifecycle: &str) {
    let (err, _) = moved_out_dotdot(s, vmm);
    assert!(
        err < 0,
        "{lifecycle}: LOOKUP .. from a directory moved out of the share reached the host"
    );
}

fn check_all(s: &Setup, vmm: &mut Vmm, lifecycle: &str) {
    assert_contained(s, lifecycle);
    assert_fds_inside(s, lifecycle);
    assert_moved_out_refused(s, vmm, lifecycle);
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "{lifecycle}: still serving");
}

#[test]
fn fresh_start_and_live_upgrade_hold_the_attacker() {
    let s = Setup::new("upgrade");
    let child = s.start(&[]);
    let mut vmm = connect(&s);
    check_all(&s, &mut vmm, "fresh start");
    let mut up = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"));
    up.arg("upgrade")
        .arg(format!("--control={}", s.ctl.display()))
        .arg(format!("--binary={}", env!("CARGO_BIN_EXE_xvirtiofsd")))
        .arg("--")
        .args(s.args(&[]))
        .stdin(Stdio::null())
        // Files, not pipes: the successor's supervisor keeps them open.
        .stdout(std::fs::File::create(s.dir.join("upgrade.out")).unwrap())
        .stderr(std::fs::File::create(s.dir.join("upgrade.err")).unwrap());
    s.attacker_env(&mut up);
    let status = up.status().unwrap();
    assert!(
        status.success(),
        "upgrade: {}",
        std::fs::read_to_string(s.dir.join("upgrade.err")).unwrap_or_default()
    );
    check_all(&s, &mut vmm, "after a live upgrade");
    drop(vmm);
    drop(child);
}

#[test]
fn crash_restart_holds_the_attacker() {
    let s = Setup::new("crash");
    let child = s.start(&["--crash-restart"]);
    let mut vmm = connect(&s);
    check_all(&s, &mut vmm, "crash restart, first serving process");
    let first = s.serving_pid();
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(first as i32, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while xvirtiofsd::ops::control::query_status(&s.ctl)
        .ok()
        .and_then(|st| serde_json::from_str::<serde_json::Value>(st.trim()).ok())
        .and_then(|v| v["serving_pid"].as_u64())
        .is_none_or(|p| p == u64::from(first))
    {
        assert!(Instant::now() < deadline, "no restart:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        s.log().contains("crash restart: now serving"),
        "{}",
        s.log()
    );
    check_all(&s, &mut vmm, "after a crash restart");
    drop(vmm);
    drop(child);
}

/// Control: without the sandbox, the same LOOKUP ".." does reach the
/// directory the share's subdirectory was moved into.
#[test]
fn without_the_sandbox_the_moved_out_lookup_escapes() {
    let s = Setup::new("none");
    let child = s.start(&["--sandbox=none"]);
    let mut vmm = connect(&s);
    let (err, ino) = moved_out_dotdot(&s, &mut vmm);
    assert_eq!(err, 0, "control: --sandbox none reaches outside");
    assert_eq!(
        ino,
        std::fs::metadata(s.outside.join("secret")).unwrap().ino()
    );
    drop(vmm);
    drop(child);
}
