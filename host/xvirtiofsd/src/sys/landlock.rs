// SPDX-License-Identifier: Apache-2.0
//! Landlock's three system calls (Linux 5.13 and later): a ruleset of
//! handled access rights, rules that allow some of them beneath a
//! directory, and the restriction of the calling thread (and the threads
//! it starts later) to it. Which rights to handle and allow is policy:
//! `crate::confine::landlock`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

/// `struct landlock_ruleset_attr` (as of ABI 6: file-system rights,
/// network rights, scopes). Older kernels take a prefix of it: the size
/// passed says how much.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

/// The Landlock ABI version of the running kernel, or the error it gave
/// where it lacks Landlock or has it disabled.
pub fn abi_version() -> Result<u32, io::Error> {
    // SAFETY: the version query takes no attribute (null, size 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    match u32::try_from(r) {
        Ok(v) if r > 0 => Ok(v),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A ruleset handling `fs` (and, from ABI 4, `net`; from ABI 6, `scoped`)
/// for a kernel of ABI `abi`.
pub fn create_ruleset(abi: u32, fs: u64, net: u64, scoped: u64) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: net,
        scoped,
    };
    let size = match abi {
        0..=3 => 8,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is valid for `size` bytes (a prefix of the struct),
    // and outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr, size, 0u32) };
    let fd = cvt(r as libc::c_int)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Allows `access` beneath the directory `dir` (any descriptor of it, an
/// `O_PATH` one too).
pub fn allow_beneath(ruleset: BorrowedFd<'_>, dir: BorrowedFd<'_>, access: u64) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: dir.as_raw_fd(),
    };
    // SAFETY: `attr` has the kernel's layout and outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            std::ptr::addr_of!(attr),
            0u32,
        )
    };
    cvt(r as libc::c_int)?;
    Ok(())
}

/// Restricts the calling thread, and every thread it starts from now on,
/// to `ruleset` (needs `PR_SET_NO_NEW_PRIVS` or CAP_SYS_ADMIN).
pub fn restrict_self(ruleset: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: landlock_restrict_self takes a descriptor and flags.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    cvt(r as libc::c_int)?;
    Ok(())
}
