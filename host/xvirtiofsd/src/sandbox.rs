//! Confinement of the daemon process: namespaces or chroot around the shared
//! directory, and an optional seccomp allow-list of system calls.
//!
//! The file system layer confines every guest path by itself (fd-relative,
//! single-component lookups, no symlink following); the sandbox is the second
//! wall, for bugs in the first.

use std::path::Path;

use log::{info, warn};

use crate::cli::{SandboxMode, SeccompAction};
use crate::sys;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot enter namespace sandbox at {0} (try --sandbox chroot or none)")]
    Namespace(String, #[source] std::io::Error),
    #[error("cannot chroot into {0} (try --sandbox none)")]
    Chroot(String, #[source] std::io::Error),
    #[error("cannot install the seccomp filter")]
    Seccomp(#[source] std::io::Error),
}

/// Enters the sandbox chosen with `--sandbox`.
pub fn enter(mode: SandboxMode, root: &Path) -> Result<(), SandboxError> {
    match mode {
        SandboxMode::Namespace => {
            sys::sandbox_namespace(root)
                .map_err(|e| SandboxError::Namespace(root.display().to_string(), e))?;
            info!("sandbox: mount, network and IPC namespaces; root is the shared directory");
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
    Ok(())
}

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
const SECCOMP_RET_LOG: u32 = 0x7ffc_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

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
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_tgkill,
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
    libc::SYS_connect,
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

/// Builds the BPF program: check the architecture, allow the listed calls, apply
/// `action` to everything else.
#[cfg(test)]
fn filter(action: u32) -> Vec<libc::sock_filter> {
    filter_with(action, &[])
}

/// [`filter`], allowing `extra` calls too.
fn filter_with(action: u32, extra: &[libc::c_long]) -> Vec<libc::sock_filter> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld_abs = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut prog = vec![
        stmt(ld_abs, 4), // seccomp_data.arch
        jeq(AUDIT_ARCH_X86_64, 1, 0),
        stmt(ret, SECCOMP_RET_KILL_PROCESS),
        stmt(ld_abs, 0), // seccomp_data.nr
    ];
    prog.extend(restricted());
    for &nr in ALLOWED.iter().chain(extra) {
        prog.push(jeq(nr as u32, 0, 1));
        prog.push(stmt(ret, SECCOMP_RET_ALLOW));
    }
    prog.push(stmt(ret, action));
    prog
}

/// The BPF program `--seccomp action` installs (`None` for `none`).
pub fn program(action: SeccompAction) -> Option<Vec<libc::sock_filter>> {
    program_with(action, false)
}

/// [`program`]; with `file_handles`, `open_by_handle_at` is allowed too (a
/// VM live migration by file handle; it needs CAP_DAC_READ_SEARCH, which is
/// only kept with `--modcaps=+dac_read_search`).
pub fn program_with(action: SeccompAction, file_handles: bool) -> Option<Vec<libc::sock_filter>> {
    let ret = match action {
        SeccompAction::None => return None,
        SeccompAction::Kill => SECCOMP_RET_KILL_PROCESS,
        SeccompAction::Log => SECCOMP_RET_LOG,
        SeccompAction::Trap => SECCOMP_RET_TRAP,
    };
    let extra: &[libc::c_long] = if file_handles {
        &[libc::SYS_open_by_handle_at]
    } else {
        &[]
    };
    Some(filter_with(ret, extra))
}

/// The calls allowed only with some arguments; the others fail with an
/// errno rather than kill (a library probing is not an attack):
/// - `ioctl` with a request of [`IOCTLS`], else ENOTTY;
/// - `socket` of the Unix domain only (the service manager's datagram
///   socket), else EAFNOSUPPORT;
/// - `clone` of a thread (CLONE_THREAD) only: no new process, else EPERM;
/// - `clone3` fails with ENOSYS: its flags sit behind a pointer the filter
///   cannot read, and the C library then falls back to `clone`.
///
/// Each block starts with A holding the call number and either returns or
/// jumps past itself with A unchanged.
fn restricted() -> Vec<libc::sock_filter> {
    let ins = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let jset = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    // Low 32 bits of seccomp_data.args[i] (little endian).
    let arg = |i: u32| 16 + 8 * i;
    let mut p = Vec::new();
    let mut one_of = |nr: libc::c_long, a: u32, values: &[u32], errno: i32| {
        let body = 1 + 2 * values.len() + 1;
        p.push(ins(jeq, 0, body as u8, nr as u32));
        p.push(ins(ld, 0, 0, arg(a)));
        for &v in values {
            p.push(ins(jeq, 0, 1, v));
            p.push(ins(ret, 0, 0, SECCOMP_RET_ALLOW));
        }
        p.push(ins(ret, 0, 0, SECCOMP_RET_ERRNO | errno as u32));
    };
    one_of(libc::SYS_ioctl, 1, IOCTLS, libc::ENOTTY);
    one_of(
        libc::SYS_socket,
        0,
        &[libc::AF_UNIX as u32],
        libc::EAFNOSUPPORT,
    );
    p.extend([
        ins(jeq, 0, 4, libc::SYS_clone as u32),
        ins(ld, 0, 0, arg(0)),
        ins(jset, 0, 1, libc::CLONE_THREAD as u32),
        ins(ret, 0, 0, SECCOMP_RET_ALLOW),
        ins(ret, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32),
        ins(jeq, 0, 1, libc::SYS_clone3 as u32),
        ins(ret, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    p
}

/// Installs the filter chosen with `--seccomp` on every thread.
pub fn seccomp(action: SeccompAction, file_handles: bool) -> Result<(), SandboxError> {
    let Some(prog) = program_with(action, file_handles) else {
        warn!(
            "--seccomp none: no system-call filter; a compromised daemon may make \
             any system call (execve, ptrace, mount, ...) its capabilities allow"
        );
        return Ok(());
    };
    sys::seccomp_install(&prog).map_err(SandboxError::Seccomp)?;
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
    fn filter_checks_arch_then_lists_every_call() {
        let f = filter(SECCOMP_RET_KILL_PROCESS);
        assert_eq!(f.len(), 4 + restricted().len() + 2 * ALLOWED.len() + 1);
        assert_eq!(f[1].k, AUDIT_ARCH_X86_64);
        assert_eq!(f.last().map(|i| i.k), Some(SECCOMP_RET_KILL_PROCESS));
        assert!(f.len() < 4096);
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
        ] {
            assert!(!ALLOWED.contains(&nr), "{nr} is allowed");
        }
    }
}
