// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The running daemon is confined (issue 12): as root it keeps exactly the
//! documented capabilities (or what `--modcaps` makes of them) in its
//! effective, permitted and bounding sets, no supplementary group, and
//! lives in its own mount, network and IPC namespaces. Checked from outside
//! through /proc/PID while the daemon waits for its front-end (it enters
//! its sandbox before that). Needs root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// chown, dac_override, fowner, fsetid, setgid, setuid, mknod, setfcap.
const DOCUMENTED: u64 = 0x8800_00db;
const CAP_SYS_ADMIN: u64 = 1 << 21;
const CAP_MKNOD: u64 = 1 << 27;

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

fn start(name: &str, extra: &[&str]) -> Running {
    let dir = std::env::temp_dir().join(format!("xvfs-confine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    let sock = dir.join("vhost.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .arg("--shared-dir")
        .arg(dir.join("share"))
        .arg("--socket-path")
        .arg(&sock)
        .arg("--control")
        .arg(dir.join("ctl.sock"))
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = Running { child, dir };
    // Confined once it listens: the sandbox comes before accept().
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_waiting(&r) {
        assert!(Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    r
}

/// The socket exists and the capabilities have changed from the test's own
/// (root's full set).
fn is_waiting(r: &Running) -> bool {
    r.dir.join("vhost.sock").exists()
        && caps(r.serving(), "CapBnd") != caps(std::process::id(), "CapBnd")
}

impl Running {
    /// The process that serves: with `--sandbox namespace` the started
    /// process only supervises its child, the daemon proper.
    fn serving(&self) -> u32 {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or(pid)
    }
}

fn status_field(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in status"))
        .trim()
        .to_string()
}

fn caps(pid: u32, key: &str) -> u64 {
    u64::from_str_radix(&status_field(pid, key), 16).unwrap()
}

fn ns(pid: &str, which: &str) -> PathBuf {
    std::fs::read_link(Path::new("/proc").join(pid).join("ns").join(which)).unwrap()
}

fn root() {
    // SAFETY: geteuid has no arguments.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
}

#[test]
fn the_daemon_keeps_only_the_documented_capabilities_and_no_groups() {
    root();
    let d = start("caps", &[]);
    let pid = d.serving();
    assert_eq!(caps(pid, "CapEff"), DOCUMENTED, "CapEff");
    assert_eq!(caps(pid, "CapPrm"), DOCUMENTED, "CapPrm");
    assert_eq!(caps(pid, "CapBnd"), DOCUMENTED, "CapBnd");
    assert_eq!(caps(pid, "CapInh"), 0, "CapInh");
    assert_eq!(caps(pid, "CapAmb"), 0, "CapAmb");
    assert_eq!(status_field(pid, "Groups"), "", "supplementary groups");
    for which in ["mnt", "net", "ipc", "pid"] {
        assert_ne!(
            ns(&pid.to_string(), which),
            ns("self", which),
            "{which} namespace"
        );
    }
}

/// Inside the sandbox no other process can be named: the daemon is alone
/// in its PID namespace, and the /proc it re-opens files through is a
/// procfs of that namespace, not the host's (the escape of issue 12 went
/// `/proc/self/fd/../../PID/root`). Checked from outside: the mount behind
/// each of the daemon's /proc descriptors is a proc mount other than this
/// process's /proc. The supervisor (the started process) passes SIGTERM on.
#[test]
fn the_daemon_sees_only_its_own_pid_namespace() {
    root();
    let mut d = start("pidns", &[]);
    let pid = d.serving();
    assert_ne!(
        pid,
        d.child.id(),
        "the daemon runs as the supervisor's child"
    );
    assert_eq!(
        status_field(pid, "NSpid").split_whitespace().nth(1),
        Some("1"),
        "process 1 of its PID namespace"
    );
    let host_proc = mount_id_of("/proc");
    let mut proc_fds = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        // Its /proc/self/fd is bind-mounted over /proc and the rest
        // detached, so its name says nothing: a directory on a procfs.
        if !on_procfs(&e.path()) {
            continue;
        }
        let fd = e.file_name().to_string_lossy().into_owned();
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
        let mnt: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_ne!(
            mnt, host_proc,
            "fd {fd} ({target:?}) is on the host's /proc"
        );
        proc_fds += 1;
    }
    assert_eq!(proc_fds, 1, "one /proc/self/fd descriptor");
    // SAFETY: kill with integer arguments, to the process this test started.
    assert_eq!(unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) }, 0);
    let status = d.child.wait().unwrap();
    assert!(
        !status.success(),
        "ended by the forwarded SIGTERM: {status:?}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the daemon is gone"
    );
}

/// Whether `path` (followed) is a directory on a proc file system.
fn on_procfs(path: &Path) -> bool {
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a buffer of the right type.
    let ok = unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0;
    ok && st.f_type == PROC_SUPER_MAGIC && path.is_dir()
}

/// The mount id of the mount at `path` (this process's view).
fn mount_id_of(path: &str) -> u64 {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .rev()
        .filter(|l| l.split_whitespace().nth(4) == Some(path))
        .find_map(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn modcaps_adds_and_removes_with_virtiofsd_syntax() {
    root();
    let d = start("modcaps", &["--modcaps=+sys_admin:-MKNOD"]);
    let want = (DOCUMENTED | CAP_SYS_ADMIN) & !CAP_MKNOD;
    assert_eq!(caps(d.serving(), "CapEff"), want);
    let d = start("modcaps-o", &["-o", "modcaps=-mknod"]);
    assert_eq!(caps(d.serving(), "CapEff"), DOCUMENTED & !CAP_MKNOD);
}

#[test]
fn bad_modcaps_is_a_usage_error_and_none_modes_warn() {
    let out = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .args(["--shared-dir", "/", "--socket-path", "/nonexistent/s"])
        .arg("--modcaps=+no_such_cap")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_cap"));

    root();
    let mut d = start("none", &["--sandbox", "none", "--seccomp", "none"]);
    let _ = d.child.kill();
    let out = d.child.wait_with_output_stderr();
    assert!(
        out.contains("--sandbox none:") && out.contains("whole host file system"),
        "{out}"
    );
    assert!(
        out.contains("--seccomp none:") && out.contains("execve"),
        "{out}"
    );
}

trait StderrOf {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrOf for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

/// Under the daemon's filter (`--seccomp kill`), execve kills the process:
/// a compromised daemon cannot run a program.
#[test]
fn the_seccomp_filter_kills_an_execve() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let prog = xvirtiofsd::confine::sandbox::program(xvirtiofsd::cli::SeccompAction::Kill).unwrap();
    let mut cmd = Command::new("/bin/true");
    // SAFETY: the closure only makes the two system calls of
    // seccomp_install on a program built before fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for p in &prog {
                xvirtiofsd::sys::seccomp_install(p)?;
            }
            Ok(())
        });
    }
    let status = cmd.status().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGSYS), "{status:?}");
    // Without the filter the same program runs.
    assert!(Command::new("/bin/true").status().unwrap().success());
}

/// `/proc/PID/root` needs ptrace access, which the kernel refuses to a
/// process whose permitted capabilities are not a superset of the target's:
/// with the daemon's capability set, another root process's root (here a
/// `sleep` started with full capabilities) is unreachable. Control: with
/// full capabilities it is reachable.
#[test]
fn with_the_daemons_capabilities_other_roots_are_unreachable() {
    use std::os::unix::process::CommandExt;
    root();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let target = format!("/proc/{}/root/", victim.id());
    let ls = || {
        let mut c = Command::new("ls");
        c.arg(&target).stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    assert!(
        ls().status().unwrap().success(),
        "control: full capabilities"
    );
    let mask = xvirtiofsd::confine::caps::mask(None).unwrap();
    let mut confined = ls();
    // SAFETY: the closure only makes prctl calls; it allocates nothing.
    unsafe {
        confined.pre_exec(move || {
            for cap in 0..64 {
                if mask & 1 << cap == 0 {
                    xvirtiofsd::sys::drop_bounding_cap(cap)?;
                }
            }
            Ok(())
        });
    }
    let status = confined.status().unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(
        !status.success(),
        "{target} reachable with the daemon's capabilities"
    );
}

/// Under the filter, `ioctl` and `clone` work only with the arguments the
/// daemon uses, and no socket can be made or connected: a
/// terminal-injecting ioctl gets ENOTTY, any socket (IP or Unix) and any
/// connect EPERM (every socket the daemon needs is connected before the
/// filter), a new process (clone without CLONE_THREAD) EPERM, while FIONBIO
/// and threads work. Run in a child between fork and exec; its exit code
/// says which checks held.
#[test]
fn the_seccomp_filter_restricts_ioctl_socket_and_clone_by_argument() {
    use std::os::unix::process::CommandExt;
    let prog = xvirtiofsd::confine::sandbox::program(xvirtiofsd::cli::SeccompAction::Kill).unwrap();
    let mut cmd = Command::new("/bin/true");
    // SAFETY: the closure makes raw system calls only, on a program built
    // before fork; it allocates nothing and ends the child with _exit.
    unsafe {
        cmd.pre_exec(move || {
            for p in &prog {
                xvirtiofsd::sys::seccomp_install(p)?;
            }
            let errno = || *libc::__errno_location();
            let mut ok = 0;
            let mut c: libc::c_char = b'x' as libc::c_char;
            if libc::ioctl(0, libc::TIOCSTI, &mut c) < 0 && errno() == libc::ENOTTY {
                ok |= 1;
            }
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 && errno() == libc::EPERM {
                ok |= 2;
            }
            let unix = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
            let efd = libc::eventfd(0, 0);
            let mut on: libc::c_int = 1;
            if unix < 0
                && errno() == libc::EPERM
                && efd >= 0
                && libc::ioctl(efd, libc::FIONBIO, &mut on) == 0
            {
                ok |= 4;
            }
            if libc::connect(0, std::ptr::null(), 0) < 0 && errno() == libc::EPERM {
                ok |= 16;
            }
            let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
            if pid == 0 {
                libc::_exit(0);
            }
            if pid < 0 && errno() == libc::EPERM {
                ok |= 8;
            }
            libc::_exit(ok);
        });
    }
    let status = cmd.status().unwrap();
    assert_eq!(status.code(), Some(31), "{status:?}");
}
