// SPDX-License-Identifier: Apache-2.0
//! Every raw system call of the daemon (outside the file system crate) lives here,
//! each behind a safe wrapper that checks its result.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

mod creds;
mod fds;
pub mod landlock;
mod process;
mod sock_diag;
pub use creds::*;
pub use fds::*;
pub use process::*;
pub use sock_diag::unix_peer_inode;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the returned fd is checked and owned by us.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An anonymous, close-on-exec memory file (`memfd_create(2)`).
pub fn memfd(name: &str) -> io::Result<std::fs::File> {
    let name = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains NUL"))?;
    // SAFETY: `name` is a valid C string; the returned fd is checked and owned by us.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Adds 1 to an eventfd counter (a kick or call notification).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to a descriptor we borrow.
    let n = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    match cvt_size(n) {
        Ok(_) => Ok(()),
        // A saturated counter still wakes the reader.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads and resets an eventfd counter; `Ok(false)` when it was zero (non-blocking fd).
pub fn eventfd_drain(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64 from a descriptor we borrow.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    match cvt_size(n) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// An epoll instance: a worker's wait for its kick and stop eventfds,
/// registered once rather than at every sleep as `poll(2)` would.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain flag argument; the result is checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a descriptor just created and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Watches `fd` for input, reported as bit `token` (< 64) by
    /// [`Epoll::wait`]. `edge`: edge-triggered, each write to an eventfd
    /// is one event and the eventfd need not be read (one system call
    /// fewer per wake-up); else level-triggered, read it to re-arm.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u32, edge: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN as u32) | if edge { libc::EPOLLET as u32 } else { 0 },
            u64: u64::from(token),
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        cvt(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })
        .map(drop)
    }

    /// Waits until a watched descriptor has input or `timeout_ms` passes
    /// (-1: forever). Returns the tokens that fired, as bits.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<u64> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let n = loop {
            // SAFETY: `evs` has room for the count passed.
            let r = unsafe {
                libc::epoll_wait(
                    self.fd.as_raw_fd(),
                    evs.as_mut_ptr(),
                    evs.len() as i32,
                    timeout_ms,
                )
            };
            match cvt(r) {
                Ok(n) => break n as usize,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        Ok(evs[..n]
            .iter()
            .filter(|e| e.u64 < 64)
            .fold(0, |bits, e| bits | 1 << e.u64))
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (-1: forever).
/// Returns, for each fd, whether it is readable.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let fds: Vec<Option<BorrowedFd<'_>>> = fds.iter().copied().map(Some).collect();
    poll_readable_opt(&fds, timeout_ms)
}

/// [`poll_readable`] where a `None` is not polled (and never ready).
pub fn poll_readable_opt(fds: &[Option<BorrowedFd<'_>>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: pfds is a valid array of pfds.len() pollfd structs.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        match cvt(r) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(pfds
        .iter()
        .map(|p| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
        .collect())
}

/// `pwritev(2)` of raw guest-memory segments.
///
/// # Safety
/// Every `(ptr, len)` must be valid for reads of `len` bytes for the duration of the call.
pub unsafe fn pwritev(fd: BorrowedFd<'_>, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
    // SAFETY: the caller guarantees the iovecs; the count is bounded by the slice.
    let n = unsafe {
        libc::pwritev(
            fd.as_raw_fd(),
            iov.as_ptr(),
            iov.len().min(libc::UIO_MAXIOV as usize) as libc::c_int,
            offset as libc::off_t,
        )
    };
    cvt_size(n)
}

/// `preadv(2)` into raw guest-memory segments.
///
/// # Safety
/// Every `(ptr, len)` must be valid for writes of `len` bytes for the duration of the call.
pub unsafe fn preadv(fd: BorrowedFd<'_>, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
    // SAFETY: the caller guarantees the iovecs; the count is bounded by the slice.
    let n = unsafe {
        libc::preadv(
            fd.as_raw_fd(),
            iov.as_ptr(),
            iov.len().min(libc::UIO_MAXIOV as usize) as libc::c_int,
            offset as libc::off_t,
        )
    };
    cvt_size(n)
}

/// Sets `FD_CLOEXEC` on or off.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD take no pointers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    let new = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, new) })?;
    Ok(())
}

/// Whether `fd` is a listening socket (what libvirt passes with `--fd`).
pub fn is_listening_socket(fd: RawFd) -> io::Result<bool> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val and len are valid for the sizes given.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(val != 0)
}

/// Changes the group of `name` in `dir` without following a symlink (for
/// `--socket-group`).
pub fn chown_group_at(dir: BorrowedFd<'_>, name: &Path, gid: u32) -> io::Result<()> {
    let c = cstring(name)?;
    // SAFETY: c is a valid NUL-terminated string and dir an open descriptor;
    // -1 leaves the owner unchanged; a symlink is changed itself, never
    // followed.
    cvt(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            c.as_ptr(),
            u32::MAX,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(())
}

/// Sets the process umask, returning the previous one.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask takes an integer and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Looks up a group id by name (or parses a number).
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    let c = CString::new(name).ok()?;
    let mut grp: libc::group = unsafe_zeroed_group();
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the sizes given; getgrnam_r is reentrant.
    let r = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if r != 0 || result.is_null() {
        None
    } else {
        Some(grp.gr_gid)
    }
}

fn unsafe_zeroed_group() -> libc::group {
    // SAFETY: libc::group is a plain C struct for which all-zero bytes are valid
    // (null pointers and zero ids); getgrnam_r fills it in.
    unsafe { std::mem::zeroed() }
}

/// Names the calling thread (shows in `ps -L`, `top -H`).
pub fn set_thread_name(name: &str) {
    if let Ok(c) = CString::new(name.chars().take(15).collect::<String>()) {
        // SAFETY: c is a valid NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
}

/// The current (soft) open-file limit; 1024 if it cannot be read.
pub fn nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit to fill.
    match cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }) {
        Ok(_) => lim.rlim_cur,
        Err(_) => 1024,
    }
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit (or `want`, if lower).
pub fn raise_nofile_limit(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit struct.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    let target = if want == 0 {
        lim.rlim_max
    } else {
        want.min(lim.rlim_max)
    };
    if target > lim.rlim_cur {
        lim.rlim_cur = target;
        // SAFETY: as above.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}

/// Enters new mount, network and IPC namespaces and makes `root` the root of the
/// mount tree (pivot_root), so that no path outside it exists for this process.
pub fn sandbox_namespace(root: &Path) -> io::Result<OwnedFd> {
    // SAFETY: unshare takes flags only.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC) })?;
    let slash = CString::new("/").map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let dot = CString::new(".").map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let croot = cstring(root)?;
    // SAFETY: valid NUL-terminated strings; null fstype/data are allowed for these flags.
    cvt(unsafe {
        libc::mount(
            std::ptr::null(),
            slash.as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        )
    })?;
    // A /proc of this process's own PID namespace (see `fork_into_namespaces`):
    // through it no other process of the host can be named. Its fd directory
    // is what the file system re-opens descriptors through; it stays open
    // after the old root (and this mount's path) are gone.
    let proc_dir = c"/proc";
    // SAFETY: valid NUL-terminated strings; proc takes no data.
    cvt(unsafe {
        libc::mount(
            c"proc".as_ptr(),
            proc_dir.as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })?;
    // Then only its fd directory: bind-mounted over /proc, so that the
    // descriptor opened below is the root of its own mount. `..` from a
    // mount's root climbs to where it is mounted, and once the old root is
    // detached below this mount has no parent: `..` stays put, and no path
    // from the descriptor reaches the procfs root (/proc/sys, other
    // processes).
    // SAFETY: valid NUL-terminated strings; a bind mount takes no fstype/data.
    cvt(unsafe {
        libc::mount(
            c"/proc/self/fd".as_ptr(),
            proc_dir.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: valid NUL-terminated path; the result is checked and owned below.
    let fd = cvt(unsafe { libc::open(proc_dir.as_ptr(), flags) })?;
    // SAFETY: fd was just returned by open and is owned by nobody else.
    let proc_self_fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Bind-mount the shared directory onto itself so it is a mount point.
    // SAFETY: as above.
    cvt(unsafe {
        libc::mount(
            croot.as_ptr(),
            croot.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    })?;
    // SAFETY: valid NUL-terminated path.
    cvt(unsafe { libc::chdir(croot.as_ptr()) })?;
    // pivot_root(".", ".") stacks the old root on top of the new one; detaching it
    // afterwards leaves only the shared directory.
    // SAFETY: raw syscall with two valid path pointers.
    cvt(unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } as libc::c_int)?;
    // SAFETY: valid NUL-terminated path.
    cvt(unsafe { libc::umount2(dot.as_ptr(), libc::MNT_DETACH) })?;
    // SAFETY: valid NUL-terminated path.
    cvt(unsafe { libc::chdir(slash.as_ptr()) })?;
    Ok(proc_self_fd)
}

/// This process's pid in the host's PID namespace (the first `NSpid` of
/// `/proc/self/status`); read before a new /proc is mounted.
pub fn host_pid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Opens `path`, a directory, as `O_PATH` (no access to its contents is
/// checked: an anchor for `*at` calls).
pub fn open_path_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = cstring(path)?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: valid NUL-terminated path; the fd is checked and owned below.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags) })?;
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The root directory of a new, empty tmpfs that is mounted nowhere
/// (`fsopen`/`fsmount`): a directory that leads to no file of the host.
/// Needs CAP_SYS_ADMIN.
pub fn empty_tmpfs() -> io::Result<OwnedFd> {
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    const MOUNT_ATTR_RDONLY: libc::c_uint = 1;
    const MOUNT_ATTR_NOSUID: libc::c_uint = 2;
    const MOUNT_ATTR_NODEV: libc::c_uint = 4;
    const MOUNT_ATTR_NOEXEC: libc::c_uint = 8;
    // SAFETY: fsopen with a valid NUL-terminated file system name.
    let fs = cvt(
        unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) }
            as libc::c_int,
    )?;
    // SAFETY: fs was just returned by fsopen and is owned by nobody else.
    let fs = unsafe { OwnedFd::from_raw_fd(fs) };
    // SAFETY: fsconfig on a valid fs context; CREATE takes no key or value.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    } as libc::c_int)?;
    let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    // SAFETY: fsmount on a created context, with flag constants.
    let mnt =
        cvt(
            unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) }
                as libc::c_int,
        )?;
    // SAFETY: mnt was just returned by fsmount and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(mnt) })
}

/// `chroot(2)` into `root` and move there.
pub fn sandbox_chroot(root: &Path) -> io::Result<()> {
    let croot = cstring(root)?;
    let slash = CString::new("/").map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid NUL-terminated paths.
    cvt(unsafe { libc::chdir(croot.as_ptr()) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::chroot(croot.as_ptr()) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::chdir(slash.as_ptr()) })?;
    Ok(())
}

/// `unshare(2)` with `flags` (`CLONE_NEWUSER` needs a single thread).
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    cvt(unsafe { libc::unshare(flags) })?;
    Ok(())
}

/// Makes directory `dir` this process's root and working directory
/// (`fchdir`, `chroot(".")`): no path leads above it any more.
pub fn chroot_to(dir: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fchdir on a descriptor the caller keeps open.
    cvt(unsafe { libc::fchdir(dir.as_raw_fd()) })?;
    // SAFETY: valid NUL-terminated paths.
    cvt(unsafe { libc::chroot(c".".as_ptr()) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::chdir(c"/".as_ptr()) })?;
    Ok(())
}

/// `PR_SET_NO_NEW_PRIVS`: no later exec gains a privilege.
pub fn no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    Ok(())
}

/// Installs a seccomp BPF program (after `PR_SET_NO_NEW_PRIVS`).
pub fn seccomp_install(filter: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    // SAFETY: prog points to a valid filter that outlives the call (the kernel copies it).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            1u32, /* SECCOMP_SET_MODE_FILTER */
            1u32, /* SECCOMP_FILTER_FLAG_TSYNC: every thread */
            &prog as *const libc::sock_fprog,
        )
    } as libc::c_int)?;
    Ok(())
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: cpu_set_t is a plain bit set; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size given; 0 = this thread.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// How many times the scheduler has taken the calling thread's CPU for
/// another thread (involuntary context switches) since the thread started.
pub fn involuntary_switches() -> io::Result<u64> {
    // SAFETY: rusage is plain data for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid rusage for getrusage to fill; RUSAGE_THREAD
    // asks for the calling thread's figures.
    cvt(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) })?;
    Ok(u64::try_from(ru.ru_nivcsw).unwrap_or(0))
}

/// Number of CPUs this process may run on.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Opens a directory (O_PATH is not enough for *at() creation, so O_RDONLY).
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = cstring(path)?;
    // SAFETY: valid NUL-terminated path; the fd is checked and owned below.
    let fd = cvt(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates (truncating) `name` in `dir` for writing, mode 0644.
pub fn create_at(dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: valid dirfd and NUL-terminated name; the fd is checked and owned below.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o644 as libc::c_uint,
        )
    })?;
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Renames `from` to `to`, both in `dir`.
pub fn rename_at(
    dir: BorrowedFd<'_>,
    from: &std::ffi::CStr,
    to: &std::ffi::CStr,
) -> io::Result<()> {
    // SAFETY: valid dirfd and NUL-terminated names.
    cvt(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })?;
    Ok(())
}

/// The pid of the process at the other end of a Unix socket (SO_PEERCRED).
pub fn peer_pid(fd: BorrowedFd<'_>) -> io::Result<i32> {
    peer_cred(fd).map(|c| c.pid)
}

/// Whether the process at the other end of a Unix socket is as privileged as
/// this one: its uid (SO_PEERCRED) is 0 or this process's effective uid.
/// Returns the peer's uid as the error otherwise.
pub fn peer_trusted(fd: BorrowedFd<'_>) -> io::Result<Result<(), u32>> {
    let uid = peer_cred(fd)?.uid;
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    Ok(if uid == 0 || uid == me {
        Ok(())
    } else {
        Err(uid)
    })
}

/// SO_PEERCRED of a Unix socket: who created the other end (for a connected
/// client: the process that called `listen` on the server side).
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for the sizes given.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred)
}

/// Makes `fd` the descriptor number `target` (dup2).
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes integers; the caller owns `target`'s slot.
    cvt(unsafe { libc::dup2(fd.as_raw_fd(), target) })?;
    Ok(())
}

/// The host device and inode number of the file `fd` refers to (`fstat`).
pub fn file_key(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// `socket:[inode]` for a socket descriptor (as /proc/PID/fd shows it).
pub fn socket_ident(fd: BorrowedFd<'_>) -> String {
    // SAFETY: an all-zero stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid stat buffer.
    match cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }) {
        Ok(_) => format!("socket:[{}]", st.st_ino),
        Err(_) => "socket:[?]".into(),
    }
}

/// Descriptors this process inherited that are its own pid file: `*.pid`
/// files whose content is this process's pid (libvirt leaves the locked pid
/// file of the daemon it starts open in it; other inherited pid files, such as
/// QEMU's, are not ours and are left alone).
pub fn inherited_pid_files(exclude: &[RawFd]) -> Vec<RawFd> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
            continue;
        };
        if fd <= 2 || exclude.contains(&fd) {
            continue;
        }
        if let Ok(target) = std::fs::read_link(e.path()) {
            let ours = target.extension().is_some_and(|x| x == "pid")
                && std::fs::read_to_string(e.path())
                    .is_ok_and(|c| c.trim() == std::process::id().to_string());
            if ours {
                out.push(fd);
            }
        }
    }
    out
}

/// Takes a write lock on a whole file (waiting for the previous holder), then
/// replaces its content with `text`.
pub fn lock_and_write(fd: BorrowedFd<'_>, text: &str) -> io::Result<()> {
    let lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    // SAFETY: lock is a valid flock struct; F_SETLKW blocks until granted.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLKW, &lock) })?;
    // SAFETY: ftruncate takes integers.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), 0) })?;
    // SAFETY: text is valid for its length.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), text.as_ptr().cast(), text.len(), 0) };
    cvt_size(n)?;
    Ok(())
}

/// Connects to the system logger now (`LOG_NDELAY`), facility daemon, so
/// that logging keeps working once the sandbox hides `/dev/log`.
pub fn open_syslog(ident: &'static std::ffi::CStr) {
    // SAFETY: the ident is a static NUL-terminated string, valid for the
    // whole process as openlog requires; the flags are plain constants.
    unsafe { libc::openlog(ident.as_ptr(), libc::LOG_NDELAY, libc::LOG_DAEMON) };
}

/// Closes the C library's connection to the system logger (the next
/// [`open_syslog`] connects anew).
pub fn close_syslog() {
    // SAFETY: closelog takes no arguments.
    unsafe { libc::closelog() };
}

/// Sends one message to the system logger at `priority` (`LOG_ERR`…).
pub fn syslog(priority: libc::c_int, msg: &str) {
    let Ok(text) = CString::new(msg.replace('\0', "\\0")) else {
        return;
    };
    // SAFETY: a constant "%s" format with exactly one argument, a valid
    // NUL-terminated string that lives across the call.
    unsafe { libc::syslog(priority, c"%s".as_ptr(), text.as_ptr()) };
}

/// A pipe (close-on-exec): read end, write end.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Takes ownership of an inherited descriptor number (a command-line
/// `--holder-*` option), checking it is open; it becomes close-on-exec.
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    set_cloexec(fd, true)?;
    // SAFETY: the descriptor is open (F_GETFD succeeded in set_cloexec) and
    // the caller hands its number over; nothing else in the process owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Edge-triggered: each write is one event, and the unread eventfd is
    /// not reported again; level-triggered: reported until read.
    #[test]
    fn epoll_reports_each_edge_once_and_levels_until_read() {
        let (kick, stop) = (eventfd().unwrap(), eventfd().unwrap());
        let ep = Epoll::new().unwrap();
        ep.add(kick.as_fd(), 0, true).unwrap();
        ep.add(stop.as_fd(), 1, false).unwrap();
        assert_eq!(ep.wait(0).unwrap(), 0);
        eventfd_signal(kick.as_fd()).unwrap();
        assert_eq!(ep.wait(1000).unwrap(), 0b01);
        assert_eq!(ep.wait(0).unwrap(), 0, "the same edge twice");
        eventfd_signal(kick.as_fd()).unwrap();
        eventfd_signal(stop.as_fd()).unwrap();
        assert_eq!(ep.wait(1000).unwrap(), 0b11);
        assert_eq!(ep.wait(0).unwrap(), 0b10, "level: until read");
        assert!(eventfd_drain(stop.as_fd()).unwrap());
        assert_eq!(ep.wait(0).unwrap(), 0);
    }
}
