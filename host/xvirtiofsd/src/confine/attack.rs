// SPDX-License-Identifier: Apache-2.0
//! Test hook (`fault-injection` builds only; a release binary has none): an
//! attacker inside the serving process, standing in for code a guest
//! managed to inject. With `XVFS_ATTACK=1` in its environment, a serving
//! process arms it once confined ([`arm`], from `confine`), in every
//! lifecycle: fresh start, live-upgrade successor, crash restart. On
//! SIGUSR2 it tries, from inside the sandbox and under the system-call
//! filter, to escape, and writes one line per attempt to standard error:
//!
//! ```text
//! XVFS-ATTACK <attempt> refused <errno>
//! XVFS-ATTACK <attempt> ESCAPED <what it reached>
//! XVFS-ATTACK done <attempts> <escaped>
//! ```
//!
//! The attempts: `..` from every directory descriptor the process holds
//! (the share's root, every inode, its `/proc/self/fd`) to a host file
//! outside the share (`XVFS_ATTACK_TARGET`, an absolute host path) and to
//! `/proc/sys/kernel/core_pattern` and `/proc/sys/vm/drop_caches` for
//! writing; the same by absolute path; a Unix socket connected to a host
//! socket (`XVFS_ATTACK_SOCKET`); a signal to another host process
//! (`XVFS_ATTACK_VICTIM`, a pid, with `tgkill`). Calls the filter kills for (`kill`,
//! `mount`, `ptrace`, `execve`) are not tried: the unit tests of
//! `sandbox.rs` show they are not allowed.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static ASKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr2(_: libc::c_int) {
    ASKED.store(true, Ordering::SeqCst);
}

/// Arms the attacker if `XVFS_ATTACK=1`.
pub fn arm() {
    if std::env::var("XVFS_ATTACK").as_deref() != Ok("1") {
        return;
    }
    if crate::sys::on_signals(&[libc::SIGUSR2], on_sigusr2).is_err() {
        eprintln!("XVFS-ATTACK cannot arm");
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("attacker".into())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_millis(50));
            if ASKED.swap(false, Ordering::SeqCst) {
                run();
            }
        });
    if spawned.is_err() {
        eprintln!("XVFS-ATTACK cannot arm");
    }
}

struct Tally {
    attempts: u32,
    escaped: u32,
}

impl Tally {
    /// Records an attempt whose call returned `ret` (negative: refused).
    fn record(&mut self, name: &str, ret: i64, what: &str) {
        self.attempts += 1;
        if ret < 0 {
            let e = std::io::Error::last_os_error();
            eprintln!(
                "XVFS-ATTACK {name} refused {}",
                e.raw_os_error().unwrap_or(0)
            );
        } else {
            self.escaped += 1;
            eprintln!("XVFS-ATTACK {name} ESCAPED {what}");
        }
    }
}

fn run() {
    let mut t = Tally {
        attempts: 0,
        escaped: 0,
    };
    let target = std::env::var("XVFS_ATTACK_TARGET").unwrap_or_else(|_| "/etc/hostname".into());
    let rel = target.trim_start_matches('/');
    let climb = "../".repeat(40);
    let paths = [
        (format!("{climb}{rel}"), libc::O_RDONLY, "target"),
        (
            format!("{climb}proc/sys/kernel/core_pattern"),
            libc::O_WRONLY,
            "core_pattern",
        ),
        (
            "../../sys/kernel/core_pattern".to_string(),
            libc::O_WRONLY,
            "proc-core_pattern",
        ),
        (
            "../../sys/vm/drop_caches".to_string(),
            libc::O_WRONLY,
            "proc-drop_caches",
        ),
        ("../../1/root".to_string(), libc::O_RDONLY, "proc-pid-root"),
    ];
    for fd in directory_fds() {
        for (p, flags, what) in &paths {
            try_open(&mut t, &format!("fd{fd}-{what}"), fd, p, *flags);
        }
    }
    try_open(
        &mut t,
        "abs-target",
        libc::AT_FDCWD,
        &target,
        libc::O_RDONLY,
    );
    for p in ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches"] {
        try_open(
            &mut t,
            &format!("abs-{p}"),
            libc::AT_FDCWD,
            p,
            libc::O_WRONLY,
        );
    }
    connect_host_socket(&mut t);
    signal_victim(&mut t);
    eprintln!("XVFS-ATTACK done {} {}", t.attempts, t.escaped);
}

fn try_open(t: &mut Tally, name: &str, dir: i32, path: &str, flags: i32) {
    let Ok(c) = CString::new(path) else { return };
    // SAFETY: a valid NUL-terminated path; a descriptor returned is closed.
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NONBLOCK) };
    t.record(name, i64::from(fd), path);
    if fd >= 0 {
        // SAFETY: fd was just opened here.
        unsafe { libc::close(fd) };
    }
}

/// Every open descriptor of this process that is a directory.
fn directory_fds() -> Vec<i32> {
    (0..65536)
        .filter(|&fd| {
            // SAFETY: fstat writes into a zeroed stat buffer; a closed fd fails.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR }
        })
        .collect()
}

fn connect_host_socket(t: &mut Tally) {
    let Ok(path) = std::env::var("XVFS_ATTACK_SOCKET") else {
        return;
    };
    // SAFETY: socket takes integer arguments.
    let s = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    t.record("socket", i64::from(s), "a Unix socket");
    if s < 0 {
        return;
    }
    // SAFETY: sockaddr_un is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in addr.sun_path.iter_mut().zip(path.bytes().take(107)) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes; s is our socket.
    let r = unsafe { libc::connect(s, std::ptr::addr_of!(addr).cast(), len) };
    t.record("connect-host-socket", i64::from(r), &path);
    // SAFETY: s was opened above.
    unsafe { libc::close(s) };
}

fn signal_victim(t: &mut Tally) {
    let Some(pid) = std::env::var("XVFS_ATTACK_VICTIM")
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: tgkill with integer arguments; signal 0 only checks.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, pid, 0) };
    t.record("tgkill-victim", r, &format!("pid {pid}"));
}
