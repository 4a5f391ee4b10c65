// SPDX-License-Identifier: Apache-2.0
//! The same operations as plain system calls on the host: the limit a
//! back-end can approach. One operation at a time per thread (depth 1).
//!
//! | workload      | system calls                                              |
//! |---------------|-----------------------------------------------------------|
//! | read / write  | pread / pwrite of `--bs` on an open file                 |
//! | getattr       | fstat of an open file                                     |
//! | lookup        | fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)                 |
//! | create        | openat(O_CREAT, O_EXCL) + close + unlinkat                |
//! | readdirplus   | open + getdents64 to the end + fstatat per entry + close |

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::fixture::{CREATE, DATA, DATA_SIZE, DIR_ENTRIES, FILES, WDATA};
use crate::stats::ThreadStats;
use crate::workload::{Kind, Params};

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn openat(dir: libc::c_int, name: &str, flags: i32) -> io::Result<OwnedFd> {
    let n = cstr(name);
    // SAFETY: valid NUL-terminated path; the result is checked and owned below.
    let fd = unsafe { libc::openat(dir, n.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    check(fd.into())?;
    // SAFETY: fd was just opened and nothing else owns it.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

fn fstatat(dir: libc::c_int, name: &CString, flags: i32) -> io::Result<()> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: valid path and a buffer of the right type for the kernel to fill.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), flags) }.into())?;
    Ok(())
}

/// Lists `dir` with getdents64 and stats each entry; returns the entry count.
fn list_plus(parent: libc::c_int, dir: &str, buf: &mut [u8]) -> io::Result<u64> {
    let d = openat(parent, dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let mut n = 0;
    loop {
        // SAFETY: the buffer is valid for buf.len() bytes; the fd is open.
        let got = check(unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                d.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        })? as usize;
        if got == 0 {
            break;
        }
        let mut pos = 0;
        while pos + 19 < got {
            let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
            let name = &buf[pos + 19..pos + reclen];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let name = CString::new(&name[..end]).unwrap_or_default();
            fstatat(d.as_raw_fd(), &name, libc::AT_SYMLINK_NOFOLLOW)?;
            n += 1;
            pos += reclen.max(1);
        }
    }
    Ok(n)
}

/// One native thread: same window rules as the vhost-user clients.
pub fn native_thread(
    p: Params,
    root: &Path,
    start: Arc<Barrier>,
    tid: u32,
) -> io::Result<ThreadStats> {
    let rootfd = openat(
        libc::AT_FDCWD,
        &root.to_string_lossy(),
        libc::O_RDONLY | libc::O_DIRECTORY,
    )?;
    let rfd = rootfd.as_raw_fd();
    let file = match p.kind {
        Kind::Read | Kind::Getattr => Some(openat(rfd, DATA, libc::O_RDONLY)?),
        Kind::Write => Some(openat(rfd, WDATA, libc::O_WRONLY)?),
        _ => None,
    };
    let ffd = file.as_ref().map_or(-1, |f| f.as_raw_fd());
    let createfd = openat(rfd, CREATE, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let data_name = cstr(DATA);
    let mut buf = vec![0xa5u8; (p.bs as usize).max(p.readdir_buf as usize)];
    let mut rng: u64 =
        0x9e37_79b9_7f4a_7c15 ^ (u64::from(tid) + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let bs = u64::from(p.bs);
    let mut wpos = u64::from(tid) * (8 << 20) % DATA_SIZE;
    wpos -= wpos % bs.max(1);
    let mut seq = 0u64;
    let mut st = ThreadStats::default();

    start.wait();
    let t0 = Instant::now();
    let warm_end = t0 + p.warmup;
    let end = warm_end + p.duration;
    let mut measured = 0u64;
    loop {
        let begin = Instant::now();
        let go = match p.count {
            Some(n) => begin < warm_end || measured < n,
            None => begin < end,
        };
        if !go {
            break;
        }
        let (bytes, entries) = match p.kind {
            Kind::Read => {
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                let off = rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % (DATA_SIZE / bs) * bs;
                // SAFETY: the buffer holds at least bs bytes; the fd is open.
                let n = check(unsafe {
                    libc::pread(ffd, buf.as_mut_ptr().cast(), p.bs as usize, off as i64)
                } as libc::c_long)?;
                (n as u64, 0)
            }
            Kind::Write => {
                // SAFETY: the buffer holds at least bs bytes; the fd is open.
                let n = check(unsafe {
                    libc::pwrite(ffd, buf.as_ptr().cast(), p.bs as usize, wpos as i64)
                } as libc::c_long)?;
                wpos = (wpos + bs) % (DATA_SIZE - DATA_SIZE % bs);
                (n as u64, 0)
            }
            Kind::Getattr => {
                let mut s = std::mem::MaybeUninit::<libc::stat>::uninit();
                // SAFETY: an open fd and a stat buffer for the kernel to fill.
                check(unsafe { libc::fstat(ffd, s.as_mut_ptr()) }.into())?;
                (0, 0)
            }
            Kind::Lookup => {
                fstatat(rfd, &data_name, libc::AT_SYMLINK_NOFOLLOW)?;
                (0, 0)
            }
            Kind::Create => {
                seq += 1;
                let name = format!("n{tid}-{seq}");
                drop(openat(
                    createfd.as_raw_fd(),
                    &name,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                )?);
                let n = cstr(&name);
                // SAFETY: valid dir fd and NUL-terminated name.
                check(unsafe { libc::unlinkat(createfd.as_raw_fd(), n.as_ptr(), 0) }.into())?;
                (0, 0)
            }
            Kind::Readdirplus => {
                let n = list_plus(rfd, FILES, &mut buf)?;
                if n < DIR_ENTRIES as u64 {
                    return Err(io::Error::other(format!("listed {n} entries")));
                }
                (0, n)
            }
        };
        let now = Instant::now();
        if begin >= warm_end && (p.count.is_some() || now <= end) {
            st.record(now.duration_since(begin).as_nanos() as u64);
            st.bytes += bytes;
            st.entries += entries;
            st.requests += 1;
            measured += 1;
        }
    }
    Ok(st)
}
