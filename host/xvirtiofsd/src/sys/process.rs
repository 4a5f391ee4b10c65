// SPDX-License-Identifier: Apache-2.0
//! Process system calls: the PID-namespace fork and its supervisor, child
//! processes (pidfd, reaping, signals), sessions.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// Who a process is after [`fork_into_namespaces`] or [`fork`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The original process; the argument is the child's pid.
    Parent(libc::pid_t),
    /// The child (with a new PID namespace, its first process).
    Child,
}

/// `clone()` as a fork, into a new PID namespace if `pid`, and a new user
/// namespace first if `user` (the PID namespace is then the user
/// namespace's, which lets the child mount its /proc): the child is
/// process 1 of the PID namespace and is killed (SIGKILL) if the parent
/// dies. Call while the process has a single thread.
pub fn fork_into_namespaces(user: bool, pid: bool) -> io::Result<Forked> {
    let mut flags = libc::SIGCHLD;
    if pid {
        flags |= libc::CLONE_NEWPID;
    }
    if user {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: clone with a null stack is a fork (the child continues on a
    // copy of this stack); the caller guarantees a single thread, so the
    // child's copy of the process is consistent (no lock held elsewhere).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as libc::pid_t;
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl with integer arguments.
            cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
            Ok(Forked::Child)
        }
        child => Ok(Forked::Parent(child)),
    }
}

/// `fork(3)`: the child is a copy of this process whose one thread is the
/// caller's; the C library's fork handlers run, so its allocator is usable
/// in the child. The child is killed (SIGKILL) if the parent dies.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork takes no arguments; the child only continues on the
    // calling thread's path, which the callers keep short.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl with integer arguments.
            cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
            Ok(Forked::Child)
        }
        child => Ok(Forked::Parent(child)),
    }
}

/// Writes `msg` to standard error with one `write(2)`, taking no lock (for
/// a forked child, which must not wait on a lock of its parent's threads).
pub fn write_stderr(msg: &str) {
    // SAFETY: msg is valid for its length; a short or failed write of a
    // diagnostic is ignored.
    let _ = unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// `_exit(2)`: ends the process at once (no exit handlers, no flushing of
/// a parent's buffers copied by a fork).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and does not return.
    unsafe { libc::_exit(code) }
}

/// Signals a supervising parent passes on to its child.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Waits for `child`, passing on every signal of [`FORWARDED`] to it;
/// returns its exit status (128 + the signal if a signal ended it).
pub fn supervise(child: libc::pid_t) -> io::Result<i32> {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t for these calls.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
    }
    // SAFETY: `set` is initialized; the old mask is not needed.
    cvt(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
    loop {
        // The child may have ended before SIGCHLD was blocked: look first.
        let mut status = 0;
        // SAFETY: waitpid writes the status into `status`.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if r == child {
            return Ok(ChildEnd::from_wait_status(status).code());
        }
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `set` is initialized; no siginfo is wanted.
        let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        if sig > 0 && sig != libc::SIGCHLD {
            // SAFETY: kill with integer arguments, to our own child.
            unsafe { libc::kill(child, sig) };
        }
    }
}

extern "C" fn exit_on_signal(sig: libc::c_int) {
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(128 + sig) }
}

/// Makes every signal of [`FORWARDED`] end the process with status 128 +
/// the signal, as their default action would: the first process of a PID
/// namespace ignores a signal from outside it that it has no handler for.
pub fn exit_on_forwarded_signals() -> io::Result<()> {
    for sig in FORWARDED {
        // SAFETY: sigaction is plain data; zeroed is an empty mask, no flags.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = exit_on_signal as extern "C" fn(libc::c_int) as usize;
        // SAFETY: `sa` is a valid sigaction whose handler only calls _exit.
        cvt(unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) })?;
    }
    Ok(())
}

/// Whether process `pid` still runs: it exists and is not a zombie (a zombie
/// has exited and only waits for its parent to reap it).
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the
    // state is the first field after the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: the syscall takes integers and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// How a child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// `exit(status)`.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl ChildEnd {
    /// From a `waitpid(2)` status of a child that ended.
    fn from_wait_status(status: libc::c_int) -> ChildEnd {
        if libc::WIFSIGNALED(status) {
            ChildEnd::Signaled(libc::WTERMSIG(status))
        } else {
            ChildEnd::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// As a shell reports it: the exit status, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            ChildEnd::Exited(c) => c,
            ChildEnd::Signaled(s) => 128 + s,
        }
    }
}

/// Reaps child `pid` (waits for it).
pub fn reap(pid: libc::pid_t) -> io::Result<ChildEnd> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(ChildEnd::from_wait_status(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `sig` to `pid`.
pub fn kill(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill takes integers.
    unsafe { libc::kill(pid, sig) };
}

/// Runs `handler` for each signal in `sigs` (forwarding to a child).
pub fn on_signals(sigs: &[libc::c_int], handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    for &sig in sigs {
        // SAFETY: sigaction is plain data; zeroed is an empty mask, no flags.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa` is a valid sigaction; the handler is async-signal-safe
        // (the caller's promise).
        cvt(unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) })?;
    }
    Ok(())
}

/// The signals a supervising process passes on.
pub fn forwarded_signals() -> &'static [libc::c_int] {
    &FORWARDED
}

/// `PR_SET_PDEATHSIG`: this process gets `sig` when its parent dies (kept
/// across exec). Async-signal-safe (a `pre_exec` hook may call it).
pub fn die_with_parent(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig, 0, 0, 0) })?;
    Ok(())
}
/// Starts a new session (detaches from the controlling terminal and process group).
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid takes no arguments.
    cvt(unsafe { libc::setsid() })?;
    Ok(())
}
