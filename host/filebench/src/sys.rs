// SPDX-License-Identifier: Apache-2.0
//! The few system calls std does not offer: CPU time, sync, dropping caches.

use std::io;

/// User and system CPU seconds of this process (all threads).
pub fn cpu_times() -> (f64, f64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    // SAFETY: getrusage succeeded, so it initialised the struct (and it was
    // zeroed before, so every field is a valid integer anyway).
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// `sync(2)`.
pub fn sync() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Writes `f` back and drops its pages from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`), as Filebench does for a fileset
/// with `cached=false`.
pub fn drop_from_cache(f: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    f.sync_data()?;
    // SAFETY: a valid open descriptor and plain integer arguments; the
    // call only gives the kernel advice.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Writes back dirty data and drops the page, dentry and inode caches
/// (needs root).
pub fn drop_caches() -> io::Result<()> {
    sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}
