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
//! - the attacker inside the serving process (`src/confine/attack.rs`, armed by
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
//! Every host path option is given (issue 45): `--metrics-file` in a
//! directory outside the share, `--control`, `--socket-path`, and a pid file
//! left open and locked by the starter, as libvirt leaves it. No descriptor
//! of the serving process may be the metrics file's directory or the pid
//! file (the supervisor keeps the latter, outside the sandbox).
//!
//! Landlock alone (`--sandbox chroot` and `none`, no mount namespace) still
//! refuses the attacker's walk; with `--landlock off` in a chroot the walk
//! through the host's /proc reaches the host (the control). A directory
//! held into the sandbox makes the daemon refuse to start (the guard).
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
    /// `--metrics-file`, in a directory of its own outside the share.
    metrics: PathBuf,
    /// The starter's pid file (libvirt's way: open, locked, inherited).
    pidfile: PathBuf,
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
        std::fs::create_dir_all(dir.join("metrics")).unwrap();
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let host_socket = UnixListener::bind(dir.join("host.sock")).unwrap();
        let victim = Command::new("sleep").arg("120").spawn().unwrap();
        Setup {
            ctl: dir.join("ctl.sock"),
            sock: dir.join("vhost.sock"),
            log: dir.join("daemon.log"),
            metrics: dir.join("metrics/m.json"),
            pidfile: dir.join("run/xvfs.pid"),
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
            format!("--metrics-file={}", self.metrics.display()),
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

    fn command(&self, extra: &[&str]) -> Command {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"));
        cmd.args(self.args(extra))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.attacker_env(&mut cmd);
        with_pid_file(&mut cmd, &self.pidfile);
        cmd
    }

    fn start(&self, extra: &[&str]) -> Running {
        let child = Running(self.command(extra).spawn().unwrap());
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

/// As libvirt starts a daemon: in the child, before exec, the pid file is
/// opened (inherited: no close-on-exec), locked and given the child's pid.
fn with_pid_file(cmd: &mut Command, path: &Path) {
    use std::os::unix::process::CommandExt;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the closure makes only async-signal-safe calls (open, fcntl,
    // ftruncate, write, getpid) on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let lock = libc::flock {
                l_type: libc::F_WRLCK as libc::c_short,
                l_whence: libc::SEEK_SET as libc::c_short,
                l_start: 0,
                l_len: 0,
                l_pid: 0,
            };
            if libc::fcntl(fd, libc::F_SETLK, &lock) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut digits = [0u8; 12];
            let mut n = libc::getpid() as u32;
            let mut i = digits.len();
            loop {
                i -= 1;
                digits[i] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            libc::ftruncate(fd, 0);
            libc::write(fd, digits[i..].as_ptr().cast(), digits.len() - i);
            Ok(())
        });
    }
}

/// Device and inode of `path`.
fn key(path: &Path) -> (u64, u64) {
    let md = std::fs::metadata(path).unwrap();
    (md.dev(), md.ino())
}

/// Whether process `pid` holds a descriptor of the file or directory `what`.
fn holds(pid: u32, what: &Path) -> bool {
    let want = key(what);
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .any(|md| (md.dev(), md.ino()) == want)
}

/// Whether another process holds a write lock on the pid file.
fn pid_file_locked(path: &Path) -> bool {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    use std::os::fd::AsRawFd;
    let mut probe = lock;
    // SAFETY: a valid descriptor and flock struct; F_GETLK only reports.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut probe) };
    assert_eq!(r, 0);
    probe.l_type != libc::F_UNLCK as libc::c_short
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

/// Neither the metrics file's directory nor the starter's pid file is held
/// by the serving process; the metrics file is still written. (With
/// `--sandbox none` the serving process is the one started, and keeps the
/// pid file: `pid_file_too` false.)
fn assert_paths_not_held(s: &Setup, lifecycle: &str, pid_file_too: bool) {
    let pid = s.serving_pid();
    let metrics_dir = s.metrics.parent().unwrap();
    assert!(
        !holds(pid, metrics_dir),
        "{lifecycle}: the serving process holds the metrics file's directory"
    );
    assert!(
        !pid_file_too || !holds(pid, &s.pidfile),
        "{lifecycle}: the serving process holds the starter's pid file"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&s.metrics).unwrap()).unwrap();
    assert!(v["queues"].is_array(), "{lifecycle}: metrics file {v}");
}

fn check_all(s: &Setup, vmm: &mut Vmm, lifecycle: &str) {
    assert_contained(s, lifecycle);
    assert_fds_inside(s, lifecycle);
    assert_paths_not_held(s, lifecycle, true);
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
    // libvirt's pid file stays with the process it started (outside the
    // sandbox), locked.
    assert!(holds(child.0.id(), &s.pidfile));
    assert!(pid_file_locked(&s.pidfile));
    upgrade(&s, &[]);
    check_all(&s, &mut vmm, "after a live upgrade");
    drop(vmm);
    drop(child);
}

/// `xvirtiofsd upgrade` of the daemon to the same binary, with the same
/// options (`extra` too).
fn upgrade(s: &Setup, extra: &[&str]) {
    let mut up = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"));
    up.arg("upgrade")
        .arg(format!("--control={}", s.ctl.display()))
        .arg(format!("--binary={}", env!("CARGO_BIN_EXE_xvirtiofsd")))
        .arg("--")
        .args(s.args(extra))
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
}

/// `--sandbox chroot` is supervised too: the serving process is a child
/// that holds neither the pid file nor the metrics directory, the started
/// process keeps the pid file locked, and a live upgrade carries on, with
/// Landlock holding the walk before and after.
#[test]
fn a_chroot_daemon_is_supervised_and_upgrades() {
    let s = Setup::new("chroot-upgrade");
    let child = s.start(&["--sandbox=chroot"]);
    let mut vmm = connect(&s);
    assert_ne!(s.serving_pid(), child.0.id(), "serves in a child");
    assert_contained(&s, "chroot");
    assert_paths_not_held(&s, "chroot", true);
    assert!(holds(child.0.id(), &s.pidfile));
    assert!(pid_file_locked(&s.pidfile));
    let first = s.serving_pid();
    upgrade(&s, &["--sandbox=chroot"]);
    assert_ne!(s.serving_pid(), first, "a successor serves");
    assert_contained(&s, "chroot, after a live upgrade");
    assert_paths_not_held(&s, "chroot, after a live upgrade", true);
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "still serving");
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

/// Landlock holds on its own: without a mount namespace (`--sandbox
/// chroot`, whose /proc is the host's, and `--sandbox none`), the
/// attacker's walk from every directory descriptor and by absolute path is
/// refused.
#[test]
fn landlock_alone_refuses_the_walk() {
    for mode in ["chroot", "none"] {
        let s = Setup::new(&format!("landlock-{mode}"));
        let child = s.start(&[&format!("--sandbox={mode}")]);
        let vmm = connect(&s);
        assert_contained(&s, &format!("--sandbox {mode}, Landlock alone"));
        assert!(
            s.log().contains("Landlock: ABI"),
            "--sandbox {mode}: no Landlock line:\n{}",
            s.log()
        );
        assert_paths_not_held(&s, mode, mode != "none");
        drop(vmm);
        drop(child);
    }
}

/// Control: the same attacker in a chroot without Landlock reaches the host
/// through the host's /proc (what Landlock refuses above).
#[test]
fn without_landlock_a_chroot_walk_escapes() {
    let s = Setup::new("nolandlock");
    let child = s.start(&["--sandbox=chroot", "--landlock=off"]);
    let vmm = connect(&s);
    let log = attack(&s);
    assert!(
        log.lines()
            .any(|l| l.contains("-target ESCAPED") || l.contains("core_pattern ESCAPED")),
        "control: no escape seen without Landlock:\n{log}"
    );
    drop(vmm);
    drop(child);
}

/// The guard: a host directory held into the sandbox (as an option that
/// opened one before confining would) makes the daemon refuse to serve.
#[test]
fn a_directory_held_into_the_sandbox_is_refused() {
    for mode in ["namespace", "chroot"] {
        let s = Setup::new(&format!("guard-{mode}"));
        let mut cmd = s.command(&[&format!("--sandbox={mode}")]);
        cmd.env("XVFS_LEAK_DIR", &s.outside);
        let status = cmd.status().unwrap();
        let log = s.log();
        assert_eq!(status.code(), Some(3), "--sandbox {mode}:\n{log}");
        assert!(
            log.contains("is the host directory") && log.contains("refusing to serve"),
            "--sandbox {mode}:\n{log}"
        );
        assert!(log.contains(&s.outside.display().to_string()), "{log}");
    }
}

/// On a kernel without Landlock (played by the test hook), `--landlock
/// auto` says so and serves; `--landlock required` refuses to start.
#[test]
fn without_landlock_in_the_kernel_auto_serves_and_required_refuses() {
    let s = Setup::new("nokernel");
    let mut cmd = s.command(&["--landlock=required"]);
    cmd.env("XVFS_NO_LANDLOCK", "1");
    let status = cmd.status().unwrap();
    assert_eq!(status.code(), Some(3), "{}", s.log());
    assert!(
        s.log()
            .contains("--landlock required, but this kernel has no Landlock"),
        "{}",
        s.log()
    );
    // The refused start bound its socket before it confined itself.
    let _ = std::fs::remove_file(&s.sock);
    let mut cmd = s.command(&[]);
    cmd.env("XVFS_NO_LANDLOCK", "1");
    let child = Running(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.sock.exists() {
        assert!(Instant::now() < deadline, "daemon did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut vmm = connect(&s);
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "serves without Landlock");
    assert!(
        s.log().contains("Landlock: not available in this kernel")
            && s.log().contains("runs without it"),
        "{}",
        s.log()
    );
    drop(vmm);
    drop(child);
}
