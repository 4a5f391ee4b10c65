// SPDX-License-Identifier: Apache-2.0
//! Raw system calls, each behind a safe wrapper.
//!
//! This is the only module of the crate with `unsafe` code. Every wrapper takes
//! borrowed file descriptors and NUL-terminated names, so the kernel only ever
//! sees valid pointers and lengths, and returns `io::Result`.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `struct stat` of the host (64-bit file offsets).
pub type Stat = libc::stat64;
/// `struct statfs` of the host.
pub type Statfs = libc::statfs64;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

fn check_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `openat(2)`; `O_CLOEXEC` is always added.
pub fn openat(dir: BorrowedFd<'_>, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call and
    // `dir` is an open descriptor; the kernel does not keep either pointer.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    let fd = check(fd)?;
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(2)`.
pub fn fstatat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<Stat> {
    let mut st = MaybeUninit::<Stat>::zeroed();
    // SAFETY: `st` points to writable memory of the right size; `name` is a
    // valid C string.
    check(unsafe { libc::fstatat64(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so it filled `st` (it was zeroed anyway and every
    // bit pattern is a valid `stat`).
    Ok(unsafe { st.assume_init() })
}

/// `statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | sync, mask)`: the
/// file `fd` refers to (works on `O_PATH`, never follows a symlink).
pub fn statx(fd: BorrowedFd<'_>, sync: i32, mask: u32) -> io::Result<libc::statx> {
    let mut sx = MaybeUninit::<libc::statx>::zeroed();
    let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW | sync;
    // SAFETY: `sx` points to writable memory of the right size; the path is
    // a valid empty C string.
    check(unsafe { libc::statx(fd.as_raw_fd(), c"".as_ptr(), flags, mask, sx.as_mut_ptr()) })?;
    // SAFETY: statx succeeded and filled `sx` (zeroed before, and every bit
    // pattern is a valid `statx`).
    Ok(unsafe { sx.assume_init() })
}

/// Which mount `fd` is on: mount id and device (`statx` STATX_MNT_ID).
pub fn mount_of(fd: BorrowedFd<'_>) -> io::Result<(u64, u32, u32)> {
    const STATX_MNT_ID: u32 = 0x1000;
    let sx = statx(fd, libc::AT_STATX_SYNC_AS_STAT, STATX_MNT_ID)?;
    Ok((sx.stx_mnt_id, sx.stx_dev_major, sx.stx_dev_minor))
}

/// `fstat` of whatever `fd` refers to, symlinks included (works on `O_PATH`).
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    fstatat(fd, c"", libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

/// `fstatfs(2)` (works on `O_PATH` descriptors).
pub fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<Statfs> {
    let mut st = MaybeUninit::<Statfs>::zeroed();
    // SAFETY: `st` points to writable memory of the right size.
    check(unsafe { libc::fstatfs64(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: filled by the kernel on success; zeroed before and plain data.
    Ok(unsafe { st.assume_init() })
}

/// `mkdirat(2)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `mknodat(2)`.
pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

/// `symlinkat(2)`.
pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptor and C strings.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `unlinkat(2)`.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2(2)`.
pub fn renameat2(
    olddir: BorrowedFd<'_>,
    oldname: &CStr,
    newdir: BorrowedFd<'_>,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings; renameat2 takes no other pointers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            olddir.as_raw_fd(),
            oldname.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    };
    check_long(ret).map(drop)
}

/// `linkat(2)`.
pub fn linkat(
    olddir: BorrowedFd<'_>,
    oldname: &CStr,
    newdir: BorrowedFd<'_>,
    newname: &CStr,
    flags: i32,
) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings.
    check(unsafe {
        libc::linkat(
            olddir.as_raw_fd(),
            oldname.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `readlinkat(fd, "")`: the target of the symlink `fd` (an `O_PATH` descriptor).
pub fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    readlinkat(fd, c"")
}

/// `readlinkat(2)`: the target of the symlink `name` in `dir`.
pub fn readlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for `buf.len()` bytes; `name` is a valid C
    // string.
    let n = check_size(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

/// `fchownat(2)`; `u32::MAX` leaves the id unchanged.
pub fn fchownat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    uid: u32,
    gid: u32,
    flags: i32,
) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, flags) }).map(drop)
}

/// `utimensat(2)`.
pub fn utimensat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    times: &[libc::timespec; 2],
    flags: i32,
) -> io::Result<()> {
    // SAFETY: `times` points to two timespecs; valid descriptor and C string.
    check(unsafe { libc::utimensat(dir.as_raw_fd(), name.as_ptr(), times.as_ptr(), flags) })
        .map(drop)
}

/// `ftruncate(2)`.
pub fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain integer arguments.
    check(unsafe { libc::ftruncate64(fd.as_raw_fd(), len) }).map(drop)
}

/// `fallocate(2)`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain integer arguments.
    check(unsafe { libc::fallocate64(fd.as_raw_fd(), mode, offset, len) }).map(drop)
}

/// `lseek(2)`.
pub fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> io::Result<u64> {
    // SAFETY: plain integer arguments.
    let ret = unsafe { libc::lseek64(fd.as_raw_fd(), offset, whence) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as u64)
    }
}

/// `fsync(2)` or `fdatasync(2)`.
pub fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> io::Result<()> {
    // SAFETY: plain integer argument.
    let ret = unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    };
    check(ret).map(drop)
}

/// `syncfs(2)`.
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain integer argument.
    check(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

/// `pread(2)`.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `buf` is writable for `buf.len()` bytes.
    check_size(unsafe { libc::pread64(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) })
}

/// `pwrite(2)`.
pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `buf` is readable for `buf.len()` bytes.
    check_size(unsafe { libc::pwrite64(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), offset) })
}

/// `getdents64(2)` into `buf`; returns the number of bytes filled (0 at the end).
pub fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for `buf.len()` bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    check_long(ret).map(|n| n as usize)
}

/// `copy_file_range(2)` with explicit offsets.
pub fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off_in =
        i64::try_from(off_in).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut off_out =
        i64::try_from(off_out).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the offset pointers refer to live locals; the call copies between
    // two descriptors and touches no other user memory.
    check_size(unsafe {
        libc::copy_file_range(
            fd_in.as_raw_fd(),
            &mut off_in,
            fd_out.as_raw_fd(),
            &mut off_out,
            len,
            0,
        )
    })
}

/// `fgetxattr(2)`; with an empty `buf`, returns the size of the value.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for `buf.len()` bytes (a zero length makes the
    // kernel ignore the pointer); `name` is a C string.
    check_size(unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// `flistxattr(2)`; with an empty `buf`, returns the size of the list.
pub fn flistxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: as for fgetxattr.
    check_size(unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `fsetxattr(2)`.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    // SAFETY: `value` is readable for its length; `name` is a C string.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `fremovexattr(2)`.
pub fn fremovexattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `faccessat2(fd, "", mode, AT_EMPTY_PATH | AT_EACCESS)`: checks with the
/// thread's file-system ids.
pub fn access_fd(fd: BorrowedFd<'_>, mode: i32) -> io::Result<()> {
    // SAFETY: valid descriptor and a static empty C string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    check_long(ret).map(drop)
}

/// `dup(2)` with close-on-exec.
pub fn dup(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// `fcntl(F_GETFL)`.
pub fn get_fl(fd: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: plain integer arguments.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// `setfsuid(2)` through the raw system call (per thread on Linux). Returns the
/// previous fs uid; passing `u32::MAX` only queries.
pub fn setfsuid(uid: u32) -> u32 {
    // SAFETY: plain integer argument; the call cannot fail in a way that breaks
    // memory safety.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

/// `setfsgid(2)` through the raw system call (per thread on Linux).
pub fn setfsgid(gid: u32) -> u32 {
    // SAFETY: plain integer argument.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// `geteuid(2)`.
pub fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// `umask(2)`; returns the previous mask.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: plain integer argument, cannot fail.
    unsafe { libc::umask(mask) }
}

/// Decimal rendering of a descriptor number as a C string (a name under
/// `/proc/self/fd`).
pub fn fd_name(fd: RawFd) -> std::ffi::CString {
    // A decimal number never contains NUL.
    std::ffi::CString::new(fd.to_string()).unwrap_or_default()
}

/// `makedev(3)`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    libc::makedev(major, minor)
}

/// `major(3)` and `minor(3)`.
pub fn major_minor(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

/// `fcntl(2)` with a lock command (`F_OFD_SETLK`, `F_OFD_GETLK`, ...).
pub fn fcntl_lock(fd: BorrowedFd<'_>, cmd: libc::c_int, lock: &mut libc::flock) -> io::Result<()> {
    // SAFETY: valid descriptor; `lock` is a valid, writable `struct flock`.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, lock as *mut libc::flock) }).map(drop)
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked and owned.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (waking whoever polls it).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: `one` is valid for reads of its 8 bytes.
    check_size(unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) }).map(drop)
}

/// `flock(2)`.
pub fn flock(fd: BorrowedFd<'_>, op: libc::c_int) -> io::Result<()> {
    // SAFETY: valid descriptor; no pointers.
    check(unsafe { libc::flock(fd.as_raw_fd(), op) }).map(drop)
}

/// `fchdir(2)`.
pub fn fchdir(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid descriptor.
    check(unsafe { libc::fchdir(fd.as_raw_fd()) }).map(drop)
}

/// `setxattr(2)` of `path` (relative to the working directory; a magic
/// link of /proc/self/fd names the file it refers to).
pub fn setxattr_path(path: &CStr, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: valid C strings; the value pointer and length describe `value`.
    check(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// `fchmod(2)` (works on a descriptor opened read-only).
pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// `fchmodat(2)` (follows the final component; used with names under
/// `/proc/self/fd` that are never symlinks).
pub fn fchmodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0) }).map(drop)
}

/// Largest file handle the kernel hands out (`MAX_HANDLE_SZ`).
pub const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// `name_to_handle_at(fd, "", AT_EMPTY_PATH)`: the file handle of `fd`'s
/// file, as (type, bytes).
pub fn handle_of(fd: BorrowedFd<'_>) -> io::Result<(i32, Vec<u8>)> {
    handle_and_mount(fd).map(|(t, b, _)| (t, b))
}

/// [`handle_of`], with the id of the mount `fd` is on.
pub fn handle_and_mount(fd: BorrowedFd<'_>) -> io::Result<(i32, Vec<u8>, i32)> {
    let mut h = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `h` is a `struct file_handle` whose `handle_bytes` says how much
    // room follows it; the kernel writes at most that much. The path is a
    // valid empty C string.
    check(unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            (&mut h as *mut RawHandle).cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    })?;
    let n = (h.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((h.handle_type, h.f_handle[..n].to_vec(), mount_id))
}

/// `open_by_handle_at(mount_fd, handle, flags)` (needs CAP_DAC_READ_SEARCH).
pub fn open_by_handle(
    mount_fd: BorrowedFd<'_>,
    handle_type: i32,
    bytes: &[u8],
    flags: i32,
) -> io::Result<OwnedFd> {
    if bytes.len() > MAX_HANDLE_SZ {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut h = RawHandle {
        handle_bytes: bytes.len() as u32,
        handle_type,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    h.f_handle[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `h` is a valid `struct file_handle` of `handle_bytes` bytes; the
    // returned descriptor is new and owned by us alone.
    let fd = check(unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&mut h as *mut RawHandle).cast(),
            flags | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Maps `len` bytes of `fd` shared, read-write (the crash-restart journal).
/// The mapping is never unmapped.
pub fn map_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new mapping chosen by the kernel; no existing memory is
    // affected. The result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct` (two of them for version 3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_VERSION_3: u32 = 0x2008_0522;
const CAP_FSETID: u32 = 4;

fn thread_caps() -> io::Result<[CapData; 2]> {
    let mut h = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: `h` and `d` are the header and the two data structures
    // capget(2) expects for version 3; pid 0 is the calling thread.
    check_long(unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) })?;
    Ok(d)
}

fn set_thread_caps(d: &[CapData; 2]) -> io::Result<()> {
    let mut h = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    // SAFETY: as in thread_caps; capset(2) only reads `d`.
    check_long(unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) })?;
    Ok(())
}

/// Restores the calling thread's effective capabilities when dropped.
#[derive(Debug)]
pub struct CapsGuard {
    effective: [u32; 2],
}

impl Drop for CapsGuard {
    fn drop(&mut self) {
        if let Ok(mut d) = thread_caps() {
            d[0].effective = self.effective[0];
            d[1].effective = self.effective[1];
            if let Err(e) = set_thread_caps(&d) {
                log::error!("cannot restore this thread's capabilities: {e}");
            }
        }
    }
}

/// Drops CAP_FSETID from the calling thread's effective set until the guard
/// is dropped (capabilities are per thread): the kernel then clears
/// setuid/setgid on a write or truncate as for an unprivileged writer.
pub fn without_fsetid() -> io::Result<CapsGuard> {
    let mut d = thread_caps()?;
    let guard = CapsGuard {
        effective: [d[0].effective, d[1].effective],
    };
    d[0].effective &= !(1 << CAP_FSETID);
    set_thread_caps(&d)?;
    Ok(guard)
}
