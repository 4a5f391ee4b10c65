// SPDX-License-Identifier: Apache-2.0
//! Per-thread switch to the guest caller's file-system ids.
//!
//! Creation requests (MKNOD, MKDIR, SYMLINK, CREATE, TMPFILE) run with the
//! thread's fs uid and gid set to the ids in the request header, through the raw
//! `setfsuid`/`setfsgid` system calls, which act on the calling thread only.
//! New files therefore get the guest caller's owner and group atomically
//! (set-group-id directories included), and the host checks permissions as that
//! user. Switching away from fs uid 0 also drops the thread's file-system
//! capabilities until it is switched back, which the guard does on drop.
//!
//! The switch needs `CAP_SETUID`/`CAP_SETGID`; a daemon not running as root
//! creates files as itself (see [`PassthroughFs`](super::PassthroughFs)).

use std::io;
use std::marker::PhantomData;

use crate::sys;

/// Restores the thread's fs ids when dropped. Not `Send`: it must be dropped on
/// the thread that made it.
#[derive(Debug)]
pub struct CredGuard {
    old: Option<(u32, u32)>,
    _thread_bound: PhantomData<*const ()>,
}

impl CredGuard {
    /// Switches to `uid`/`gid` when `enabled`; otherwise does nothing.
    pub fn switch(enabled: bool, uid: u32, gid: u32) -> io::Result<Self> {
        let mut guard = CredGuard {
            old: None,
            _thread_bound: PhantomData,
        };
        if !enabled {
            return Ok(guard);
        }
        let old_gid = sys::setfsgid(gid);
        if sys::setfsgid(u32::MAX) != gid {
            sys::setfsgid(old_gid);
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let old_uid = sys::setfsuid(uid);
        guard.old = Some((old_uid, old_gid));
        if sys::setfsuid(u32::MAX) != uid {
            // The guard's drop restores both.
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(guard)
    }
}

impl Drop for CredGuard {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.old {
            sys::setfsuid(uid);
            sys::setfsgid(gid);
        }
    }
}
