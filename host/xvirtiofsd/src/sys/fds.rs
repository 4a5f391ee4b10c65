// SPDX-License-Identifier: Apache-2.0
//! The process's own descriptor table: listing it through a procfs fd
//! directory, closing what a serving process inherited, and telling
//! directories apart (the descriptor guard of `crate::setup`).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use super::cvt;

/// Every descriptor number open in this process, listed through `proc_fd`
/// (an fd directory of procfs: `/proc/self/fd`, or the sandbox's view of
/// it; an `O_PATH` descriptor is enough). The descriptor used to read the
/// listing is closed before this returns and is not in it.
pub fn open_fds(proc_fd: BorrowedFd<'_>) -> io::Result<Vec<RawFd>> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid directory descriptor and a NUL-terminated name; the
    // result is checked.
    let fd = cvt(unsafe { libc::openat(proc_fd.as_raw_fd(), c".".as_ptr(), flags) })?;
    // SAFETY: fd was just opened and is owned by nobody else; fdopendir
    // takes it over (closedir closes it).
    let dir = unsafe { libc::fdopendir(fd) };
    if dir.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so fd is still ours to close.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: dir is a valid DIR stream until closedir below.
        let ent = unsafe { libc::readdir64(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: readdir64 returned a valid entry whose d_name is a
        // NUL-terminated string inside it, valid until the next call.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        if let Some(n) = name.to_str().ok().and_then(|s| s.parse::<RawFd>().ok()) {
            if n != fd {
                out.push(n);
            }
        }
    }
    // SAFETY: dir came from fdopendir and is closed once.
    unsafe { libc::closedir(dir) };
    out.sort_unstable();
    Ok(out)
}

/// Closes every descriptor above 2 that is not in `keep`: what a serving
/// process inherited from whoever started it (a pid file, a directory, a
/// socket of the parent's) and must not hold inside its sandbox.
pub fn close_inherited(keep: &[RawFd]) -> io::Result<usize> {
    let proc = super::open_path_dir(std::path::Path::new("/proc/self/fd"))?;
    let fds = open_fds(std::os::fd::AsFd::as_fd(&proc))?;
    let mut closed = 0;
    for fd in fds {
        if fd <= 2 || keep.contains(&fd) || fd == proc.as_raw_fd() {
            continue;
        }
        // SAFETY: the descriptor was inherited and nothing in this process
        // owns it (the caller names every one it owns in `keep`).
        unsafe { libc::close(fd) };
        closed += 1;
    }
    Ok(closed)
}

/// Whether descriptor `fd` is open and a directory.
pub fn is_directory(fd: RawFd) -> bool {
    // SAFETY: an all-zero stat is a valid out-buffer; a closed fd fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid stat buffer.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR }
}

/// What descriptor `fd` names, as `readlink` of its entry in `proc_fd`
/// shows it (for messages).
pub fn fd_target(proc_fd: BorrowedFd<'_>, fd: RawFd) -> PathBuf {
    let name = std::ffi::CString::new(fd.to_string()).unwrap_or_default();
    let mut buf = [0u8; 4096];
    // SAFETY: a valid directory descriptor, a NUL-terminated name and a
    // buffer of the length given.
    let n = unsafe {
        libc::readlinkat(
            proc_fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    match usize::try_from(n) {
        Ok(n) => {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(&buf[..n]))
        }
        Err(_) => PathBuf::from("?"),
    }
}

/// Duplicates `fd` onto the lowest free number at or above `min`
/// (close-on-exec).
pub fn dup_at_least(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl with integer arguments; the result is checked.
    let n = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: n was just returned by fcntl and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn lists_this_process_descriptors_and_tells_directories() {
        let proc = super::super::open_path_dir(std::path::Path::new("/proc/self/fd")).unwrap();
        let dir = super::super::open_dir(std::path::Path::new("/")).unwrap();
        let fds = open_fds(proc.as_fd()).unwrap();
        assert!(fds.contains(&dir.as_raw_fd()));
        assert!(fds.contains(&proc.as_raw_fd()));
        assert!(is_directory(dir.as_raw_fd()));
        assert_eq!(fd_target(proc.as_fd(), dir.as_raw_fd()), PathBuf::from("/"));
    }
}
