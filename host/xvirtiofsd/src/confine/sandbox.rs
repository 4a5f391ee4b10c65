// SPDX-License-Identifier: Apache-2.0
//! Confinement of the daemon process: namespaces or chroot around the shared
//! directory, and an optional seccomp allow-list of system calls.
//!
//! The file system layer confines every guest path by itself (fd-relative,
//! single-component lookups, no symlink following); the sandbox is the second
//! wall, for bugs in the first.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::OnceLock;

use log::{info, warn};

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction as Act, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

use crate::confine::idmap::IdMaps;
use crate::sys;
use virtio_fs_ext::config::{SandboxMode, SeccompAction};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot enter namespace sandbox at {0} (try --sandbox chroot or none)")]
    Namespace(String, #[source] std::io::Error),
    #[error("cannot chroot into {0} (try --sandbox none)")]
    Chroot(String, #[source] std::io::Error),
    #[error("cannot install the seccomp filter")]
    Seccomp(#[source] std::io::Error),
    #[error("cannot build the seccomp filter")]
    SeccompBuild,
    #[error(
        "cannot start the daemon as the supervisor's child (with --sandbox namespace, in a new \
         PID namespace: try --sandbox chroot or none)"
    )]
    PidNamespace(#[source] std::io::Error),
    #[error("cannot set up the user namespace ({0})")]
    IdMap(String, #[source] std::io::Error),
}

/// CAP_KILL.
const CAP_KILL: u64 = 1 << 5;

/// The pid the world knows the daemon by (the process that was started:
/// the supervisor, with `--sandbox namespace`), and the host pid of the
/// process that serves (itself, or the supervisor's child).
static PIDS: OnceLock<(u32, u32)> = OnceLock::new();

/// The pid the daemon was started as: its control socket's default name,
/// what `status` reports, what it writes into pid files.
pub fn daemon_pid() -> u32 {
    PIDS.get().map_or_else(std::process::id, |p| p.0)
}

/// The host pid of the process that holds the connection (a successor
/// checks it and joins its cgroups).
pub fn serving_pid() -> u32 {
    PIDS.get().map_or_else(std::process::id, |p| p.1)
}

/// What this process is after [`enter_pid_namespace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The process that was started: it only waits for its child, passing
    /// signals on, and exits with its status.
    Supervisor(libc::pid_t),
    /// The child, process 1 of a new PID namespace: the daemon itself.
    Daemon,
}

/// The first step of `--sandbox namespace` and `chroot`, taken while the
/// process has one thread: the daemon is a child (with `pid_ns`, in a new
/// PID namespace, which only a child can enter); the parent supervises it
/// (see [`Role`]), so that whoever started the daemon (libvirt, systemd, a
/// shell) keeps the pid it knows, and what it was given (libvirt's locked
/// pid file) stays outside the sandbox. In a PID namespace the daemon's
/// /proc (mounted by [`enter`]) shows no other process of the host.
///
/// With `maps`, the child is also in a new user namespace, whose maps the
/// parent (still in the host's) writes before the child goes on; the child
/// then takes ID 0 inside if it is mapped (see [`IdMaps::inside_ids`]).
pub fn enter_pid_namespace(maps: Option<&IdMaps>, pid_ns: bool) -> Result<Role, SandboxError> {
    let started_as = std::process::id();
    let (euid, egid) = (sys::effective_uid(), sys::effective_gid());
    let err = |e| SandboxError::PidNamespace(e);
    let sync = maps.map(|_| sys::pipe()).transpose().map_err(err)?;
    match sys::fork_into_namespaces(maps.is_some(), pid_ns).map_err(err)? {
        sys::Forked::Parent(child) => {
            if let (Some(m), Some((rd, wr))) = (maps, sync) {
                drop(rd);
                if let Err(e) = m.write_for(child) {
                    sys::kill(child, libc::SIGKILL);
                    let _ = sys::reap(child);
                    return Err(SandboxError::IdMap(m.to_string(), e));
                }
                std::fs::File::from(wr).write_all(b"1").map_err(err)?;
            }
            Ok(Role::Supervisor(child))
        }
        sys::Forked::Child => {
            if let (Some(m), Some((rd, wr))) = (maps, sync) {
                drop(wr);
                let mut go = [0u8; 1];
                // End of file: the parent could not write the maps (and
                // says why); this child is being killed.
                if std::fs::File::from(rd).read_exact(&mut go).is_err() {
                    std::process::exit(1);
                }
                let (uid, gid) = m.inside_ids(euid, egid);
                sys::set_ids(uid, gid).map_err(|e| SandboxError::IdMap(m.to_string(), e))?;
                crate::confine::idmap::set_in_user_namespace();
                info!("user namespace: {m}; the daemon is uid {uid}, gid {gid} in it");
            }
            sys::exit_on_forwarded_signals().map_err(err)?;
            let host = sys::host_pid().unwrap_or(started_as);
            let _ = PIDS.set((started_as, host));
            Ok(Role::Daemon)
        }
    }
}

/// The supervisor's life: wait for the daemon, pass signals on, exit with
/// its status.
pub fn supervise(child: libc::pid_t) -> i32 {
    // It only waits and passes signals on (CAP_KILL: the daemon may run
    // under another uid in a user namespace); nothing else is kept.
    if let Err(e) = crate::confine::caps::drop_to(CAP_KILL) {
        warn!("the supervisor keeps its capabilities: {e}");
    }
    match sys::supervise(child) {
        Ok(code) => code,
        Err(e) => {
            log::error!("supervising the daemon (pid {child}): {e}");
            1
        }
    }
}

/// Enters the sandbox chosen with `--sandbox`. With `namespace`, returns the
/// daemon's own `/proc/self/fd` (of its PID namespace's fresh /proc), which
/// the file system must use instead of the host's.
pub fn enter(mode: SandboxMode, root: &Path) -> Result<Option<OwnedFd>, SandboxError> {
    match mode {
        SandboxMode::Namespace => {
            let proc_fd = sys::sandbox_namespace(root)
                .map_err(|e| SandboxError::Namespace(root.display().to_string(), e))?;
            info!(
                "sandbox: PID, mount, network and IPC namespaces; root is the shared \
                 directory; /proc shows only the daemon"
            );
            return Ok(Some(proc_fd));
        }
        SandboxMode::Chroot => {
            sys::sandbox_chroot(root)
                .map_err(|e| SandboxError::Chroot(root.display().to_string(), e))?;
            info!("sandbox: chroot into the shared directory");
        }
        SandboxMode::None => warn!(
            "--sandbox none: no mount, network or IPC namespace and no chroot; a \
             compromised daemon sees the whole host file system and network \
             (only the file system layer confines guest paths)"
        ),
    }
    Ok(None)
}

/// The ioctl requests allowed (any other fails with ENOTTY): non-blocking
/// and close-on-exec switches, the terminal check.
const IOCTLS: &[u32] = &[
    0x5421, /* FIONBIO */
    0x5451, /* FIOCLEX */
    0x5450, /* FIONCLEX */
    0x5401, /* TCGETS */
];

/// System calls the daemon needs after start-up: file operations on the share,
/// guest-memory I/O, threads, the vhost-user socket and eventfds.
const ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_close,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_name_to_handle_at,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_fchown,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_syncfs,
    libc::SYS_getdents64,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_utimensat,
    libc::SYS_copy_file_range,
    libc::SYS_fgetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_flistxattr,
    libc::SYS_fremovexattr,
    libc::SYS_getxattr,
    libc::SYS_setxattr,
    libc::SYS_listxattr,
    libc::SYS_removexattr,
    libc::SYS_lgetxattr,
    libc::SYS_lsetxattr,
    libc::SYS_llistxattr,
    libc::SYS_lremovexattr,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_getrusage,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_accept4,
    libc::SYS_getrandom,
    libc::SYS_prctl,
    libc::SYS_umask,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_restart_syscall,
    libc::SYS_fchdir,
    libc::SYS_getcwd,
    libc::SYS_membarrier,
    libc::SYS_memfd_create,
    libc::SYS_shutdown,
    libc::SYS_name_to_handle_at,
    libc::SYS_sched_getparam,
    libc::SYS_getdents,
    libc::SYS_uname,
    libc::SYS_wait4,
    libc::SYS_pidfd_open,
    libc::SYS_unlink,
    libc::SYS_sched_getscheduler,
    libc::SYS_getppid,
    libc::SYS_renameat,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_dup2,
    libc::SYS_rename,
    libc::SYS_open,
];

/// The calls allowed only with some arguments, or refused with an errno
/// rather than the filter's action (a library probing is not an attack):
/// - `ioctl` with a request of [`IOCTLS`], else ENOTTY;
/// - `socket` and `connect` fail with EPERM: every socket the daemon needs
///   (system logger, service manager, the control socket a successor talks
///   to) is connected before the filter goes in, and a compromised daemon
///   must not reach another host daemon's socket;
/// - `tgkill` only to a thread of this process (`pid`), else EPERM;
/// - `clone` of a thread (CLONE_THREAD) only: no new process, else EPERM;
/// - `clone3` fails with ENOSYS: its flags sit behind a pointer the filter
///   cannot read, and the C library then falls back to `clone`.
///
/// With `refusing` (a crash-restart holder that gave up and only answers
/// EIO), every file-system call of [`FILE_OPS`] fails with EACCES.
///
/// The calls of one errno make one filter that answers it on a match and
/// allows everything else; the kernel runs every installed filter and keeps
/// the strictest answer, so the main filter only lists these calls as
/// allowed.
type Restricted = Vec<(libc::c_long, Vec<SeccompRule>, i32)>;

fn restricted(pid: u32, refusing: bool) -> Result<Restricted, BackendError> {
    let cond = |arg: u8, len, op, value: u64| SeccompCondition::new(arg, len, op, value);
    let ioctl_other = IOCTLS
        .iter()
        .map(|&r| cond(1, Len::Dword, Op::Ne, u64::from(r)))
        .collect::<Result<Vec<_>, _>>()?;
    let other_process = vec![cond(0, Len::Dword, Op::Ne, u64::from(pid))?];
    let thread = libc::CLONE_THREAD as u64;
    let no_thread = vec![cond(0, Len::Qword, Op::MaskedEq(thread), 0)?];
    let mut v = vec![
        (
            libc::SYS_ioctl,
            vec![SeccompRule::new(ioctl_other)?],
            libc::ENOTTY,
        ),
        (libc::SYS_socket, Vec::new(), libc::EPERM),
        (libc::SYS_connect, Vec::new(), libc::EPERM),
        (
            libc::SYS_tgkill,
            vec![SeccompRule::new(other_process)?],
            libc::EPERM,
        ),
        (
            libc::SYS_clone,
            vec![SeccompRule::new(no_thread)?],
            libc::EPERM,
        ),
        (libc::SYS_clone3, Vec::new(), libc::ENOSYS),
    ];
    if refusing {
        v.extend(FILE_OPS.iter().map(|&nr| (nr, Vec::new(), libc::EACCES)));
    }
    Ok(v)
}

/// What a process that serves no file any more (a crash-restart holder
/// that gave up) may not call.
const FILE_OPS: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_unlink,
    libc::SYS_renameat2,
    libc::SYS_renameat,
    libc::SYS_rename,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_name_to_handle_at,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_fchmod,
    libc::SYS_fchown,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_copy_file_range,
    libc::SYS_getdents64,
    libc::SYS_getdents,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_capset,
    libc::SYS_fchdir,
];

/// The BPF programs `--seccomp action` installs (`None` for `none`) in
/// this process, built with `seccompiler`: one filter per argument
/// restriction ([`restricted`]), then the main filter (the architecture
/// check, every allowed call, `action` for the rest), to be installed in
/// that order.
pub fn program(action: SeccompAction) -> Option<Vec<Vec<libc::sock_filter>>> {
    program_with(
        action,
        Profile::Serving {
            file_handles: false,
        },
    )
}

/// Which list a process gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A serving process; with `file_handles`, `open_by_handle_at` is
    /// allowed too (it needs CAP_DAC_READ_SEARCH, kept only then).
    Serving { file_handles: bool },
    /// A crash-restart holder that gave up: no file-system call.
    Refusing,
}

/// [`program`] for `profile`.
pub fn program_with(
    action: SeccompAction,
    profile: Profile,
) -> Option<Vec<Vec<libc::sock_filter>>> {
    let mismatch = match action {
        SeccompAction::None => return None,
        SeccompAction::Kill => Act::KillProcess,
        SeccompAction::Log => Act::Log,
        SeccompAction::Trap => Act::Trap,
    };
    // The lists are constants: building them cannot fail at run time (a
    // unit test builds every variant), and a daemon that could not build
    // its filter must not run unfiltered: an empty result refuses to start.
    build(mismatch, profile).ok()
}

fn build(mismatch: Act, profile: Profile) -> Result<Vec<Vec<libc::sock_filter>>, BackendError> {
    let extra: &[libc::c_long] = match profile {
        Profile::Serving { file_handles: true } => &[libc::SYS_open_by_handle_at],
        _ => &[],
    };
    let restricted = restricted(std::process::id(), profile == Profile::Refusing)?;
    let allowed: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(extra)
        .chain(restricted.iter().map(|(nr, _, _)| nr))
        .map(|&nr| (nr, Vec::new()))
        .collect();
    let arch = TargetArch::x86_64;
    let mut filters = Vec::new();
    // One filter per errno (every call runs through each installed one).
    for (errno, rules) in by_errno(restricted) {
        let errno = Act::Errno(errno as u32);
        filters.push(SeccompFilter::new(rules, Act::Allow, errno, arch)?);
    }
    // Last: once it is in, `seccomp(2)` itself is no longer allowed.
    filters.push(SeccompFilter::new(allowed, mismatch, Act::Allow, arch)?);
    filters.into_iter().map(compile).collect()
}

/// A filter as the kernel's BPF instructions.
fn compile(f: SeccompFilter) -> Result<Vec<libc::sock_filter>, BackendError> {
    let bpf = BpfProgram::try_from(f)?;
    Ok(bpf
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// The restricted calls grouped by the errno they answer.
fn by_errno(restricted: Restricted) -> BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> {
    let mut groups: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for (nr, rules, errno) in restricted {
        groups.entry(errno).or_default().insert(nr, rules);
    }
    groups
}

/// What the metrics writer (`crate::ops::metrics_file`) may call: read its
/// pipe, create, write and rename files in its directory, allocate, exit.
const WRITER_ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_openat,
    libc::SYS_close,
    libc::SYS_fcntl,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// The metrics writer's filter (`None` for `--seccomp none`): anything
/// beyond [`WRITER_ALLOWED`] gets `action`. Built before the writer is
/// forked; installed in it with [`sys::seccomp_install`].
pub fn writer_program(
    action: SeccompAction,
) -> Result<Option<Vec<libc::sock_filter>>, SandboxError> {
    let mismatch = match action {
        SeccompAction::None => return Ok(None),
        SeccompAction::Kill => Act::KillProcess,
        SeccompAction::Log => Act::Log,
        SeccompAction::Trap => Act::Trap,
    };
    let allowed: BTreeMap<i64, Vec<SeccompRule>> =
        WRITER_ALLOWED.iter().map(|&nr| (nr, Vec::new())).collect();
    SeccompFilter::new(allowed, mismatch, Act::Allow, TargetArch::x86_64)
        .and_then(compile)
        .map(Some)
        .map_err(|_| SandboxError::SeccompBuild)
}

/// Installs the filters chosen with `--seccomp` on every thread.
pub fn seccomp(action: SeccompAction, profile: Profile) -> Result<(), SandboxError> {
    if action == SeccompAction::None {
        warn!(
            "--seccomp none: no system-call filter; a compromised daemon may make \
             any system call (execve, ptrace, mount, ...) its capabilities allow"
        );
        return Ok(());
    }
    let progs = program_with(action, profile).ok_or(SandboxError::SeccompBuild)?;
    for p in &progs {
        sys::seccomp_install(p).map_err(SandboxError::Seccomp)?;
    }
    info!(
        "seccomp: {} system calls allowed, others: {action:?}",
        ALLOWED.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_builds_and_checks_the_architecture() {
        const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
        for action in [SeccompAction::Kill, SeccompAction::Log, SeccompAction::Trap] {
            for (profile, refusing) in [
                (
                    Profile::Serving {
                        file_handles: false,
                    },
                    false,
                ),
                (Profile::Serving { file_handles: true }, false),
                (Profile::Refusing, true),
            ] {
                let progs = program_with(action, profile).expect("filters build");
                let groups = by_errno(restricted(1, refusing).unwrap()).len();
                assert_eq!(progs.len(), 1 + groups);
                assert_eq!(groups, if refusing { 4 } else { 3 });
                for p in &progs {
                    assert!(p.iter().any(|i| i.k == AUDIT_ARCH_X86_64));
                    assert!(p.len() < 4096);
                }
            }
        }
        assert!(program(SeccompAction::None).is_none());
    }

    #[test]
    fn no_exec_no_signals_no_file_handles() {
        for nr in [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_kill,
            libc::SYS_open_by_handle_at,
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_tgkill,
            libc::SYS_socket,
            libc::SYS_connect,
        ] {
            assert!(!ALLOWED.contains(&nr), "{nr} is allowed");
        }
    }
}
