// SPDX-License-Identifier: Apache-2.0
//! Credentials: the process's user and group IDs, supplementary groups and
//! capability sets (bounding, ambient, effective/permitted).

use std::io;

use super::cvt;

/// This process's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group ID.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid has no arguments and cannot fail.
    unsafe { libc::getegid() }
}

/// `setresgid` then `setresuid`: all three IDs of each to `gid` and `uid`.
pub fn set_ids(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// `setgroups(0, NULL)`: no supplementary groups (every thread, by glibc).
pub fn drop_supplementary_groups() -> io::Result<()> {
    // SAFETY: an empty list; the pointer is not read.
    cvt(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    Ok(())
}

/// Removes capability `cap` from the bounding set (a capability the running
/// kernel does not know is skipped).
pub fn drop_bounding_cap(cap: u32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    match cvt(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) }) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r.map(drop),
    }
}

/// Empties the ambient capability set.
pub fn clear_ambient_caps() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    Ok(())
}

/// `capset`: permitted = effective = `mask`, inheritable empty, for the
/// calling thread (threads started later inherit it).
pub fn set_caps(mask: u64) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let word = |w: u32| Data {
        effective: w,
        permitted: w,
        inheritable: 0,
    };
    let data = [word(mask as u32), word((mask >> 32) as u32)];
    // SAFETY: header and data have the layout of the kernel's
    // __user_cap_header_struct and two __user_cap_data_struct (version 3);
    // both outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    cvt(r as libc::c_int)?;
    Ok(())
}
