// SPDX-License-Identifier: Apache-2.0
//! Landlock (`--landlock`), the wall beyond the namespace sandbox: a
//! serving process handles every file-system right the kernel's Landlock
//! ABI knows and allows them (all but executing a file) beneath the
//! shared directory only, so no path outside the share opens, whatever
//! descriptor it starts from and whether or not a mount namespace hides
//! the host; it also denies TCP `bind`/`connect` (ABI 4) and, from ABI 6,
//! connecting to abstract Unix sockets and signalling processes outside
//! its domain. The metrics writer allows itself its directory alone.
//!
//! A process that opens files by handle (`open_by_handle_at`: inodes held
//! as file handles, a file-handle migration, a crash restart's rebuild)
//! may get a disconnected name for a file whose dentry the kernel dropped,
//! which Landlock cannot place beneath any directory and so refuses to
//! open (EACCES). Such a process leaves reading, writing, truncating and
//! device ioctls of files unhandled (creating, removing, renaming, linking,
//! listing and executing stay restricted), and says so in its log; the
//! namespace sandbox is the wall for those (connectable handles, which
//! decode connected, need Linux 6.13 and fail for a file moved to another
//! directory while its name is cold).
//!
//! Rights newer than the running kernel's ABI are left out (best effort),
//! and the ABI enforced is logged. Where the kernel has no Landlock,
//! `--landlock auto` (the default) logs it and serves without;
//! `--landlock required` refuses to start. Descriptors opened before the
//! restriction keep what they were opened with (Landlock checks at open).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use clap::ValueEnum;
use log::{info, warn};

use crate::sys::landlock as sys;

/// `--landlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LandlockMode {
    /// Enforce what the kernel offers; serve without Landlock (logged)
    /// where it has none.
    Auto,
    /// Refuse to start where the kernel has no Landlock.
    Required,
    /// No Landlock.
    Off,
}

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("--landlock required, but this kernel has no Landlock")]
    Unavailable(#[source] io::Error),
    #[error("cannot restrict the process with Landlock")]
    Restrict(#[source] io::Error),
}

/// `LANDLOCK_ACCESS_FS_EXECUTE`.
const EXECUTE: u64 = 1 << 0;
/// `LANDLOCK_ACCESS_FS_WRITE_FILE`.
const WRITE_FILE: u64 = 1 << 1;
/// `LANDLOCK_ACCESS_FS_READ_FILE`.
const READ_FILE: u64 = 1 << 2;
/// `LANDLOCK_ACCESS_FS_REMOVE_FILE`.
const REMOVE_FILE: u64 = 1 << 5;
/// `LANDLOCK_ACCESS_FS_MAKE_REG`.
const MAKE_REG: u64 = 1 << 8;
/// ABI 1: execute, write, read, read_dir, remove_dir, remove_file and
/// make_char/dir/reg/sock/fifo/block/sym (bits 0 to 12).
const FS_ABI1: u64 = (1 << 13) - 1;
/// ABI 2: `REFER` (linking and renaming across directories).
const REFER: u64 = 1 << 13;
/// ABI 3: `TRUNCATE`.
const TRUNCATE: u64 = 1 << 14;
/// ABI 5: `IOCTL_DEV`.
const IOCTL_DEV: u64 = 1 << 15;
/// ABI 4: `LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP`.
const NET_TCP: u64 = 0b11;
/// ABI 6: `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL`.
const SCOPES: u64 = 0b11;

/// Every file-system right the kernel of ABI `abi` knows.
fn fs_rights(abi: u32) -> u64 {
    let mut r = FS_ABI1;
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= IOCTL_DEV;
    }
    r
}

/// What Landlock checks when a file is opened, which a file opened by
/// handle may fail for no reason of ours (see the module's comment).
const FILE_OPEN: u64 = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV;

/// What a directory is allowed beneath it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beneath {
    /// The shared directory: everything but executing.
    Share,
    /// The shared directory of a process that opens files by handle: the
    /// same, with [`FILE_OPEN`] left unhandled altogether.
    ShareByHandle,
    /// The metrics file's directory: create, write, truncate, replace.
    MetricsDir,
}

impl Beneath {
    fn rights(self, abi: u32) -> u64 {
        let all = fs_rights(abi);
        match self {
            Beneath::Share => all & !EXECUTE,
            Beneath::ShareByHandle => all & !EXECUTE & !FILE_OPEN,
            Beneath::MetricsDir => all & (MAKE_REG | WRITE_FILE | REMOVE_FILE | TRUNCATE),
        }
    }

    /// The rights a ruleset with this rule handles.
    fn handled(self, abi: u32) -> u64 {
        match self {
            Beneath::ShareByHandle => fs_rights(abi) & !FILE_OPEN,
            Beneath::Share | Beneath::MetricsDir => fs_rights(abi),
        }
    }
}

/// The Landlock ABI restricted to, or why none was.
#[derive(Debug)]
pub enum Outcome {
    Enforced(u32),
    Unavailable(io::Error),
    Off,
}

impl Outcome {
    /// Says in the log what `who` (a serving process, the metrics writer)
    /// is restricted to beneath `what`, or why not.
    pub fn log(&self, who: &str, what: Beneath) {
        let beneath = match what {
            Beneath::Share => "the shared directory",
            Beneath::ShareByHandle => {
                "the shared directory (files are opened by handle here: reading and writing \
                 them is left to the sandbox; creating, removing, renaming, linking and \
                 listing are restricted)"
            }
            Beneath::MetricsDir => "the metrics file's directory",
        };
        match self {
            Outcome::Enforced(abi) => info!(
                "Landlock: ABI {abi} enforced for {who}: files only beneath {beneath}{}{}",
                if *abi >= 4 { ", no TCP" } else { "" },
                if *abi >= 6 {
                    ", no abstract Unix sockets or signals out of its domain"
                } else {
                    ""
                }
            ),
            Outcome::Unavailable(e) => {
                warn!("Landlock: not available in this kernel ({e}); {who} runs without it")
            }
            Outcome::Off => warn!("--landlock off: {who} is not restricted with Landlock"),
        }
    }
}

/// The running kernel's Landlock ABI. Test hook (`fault-injection`
/// builds only): `XVFS_NO_LANDLOCK=1` plays a kernel without Landlock.
fn kernel_abi() -> io::Result<u32> {
    #[cfg(feature = "fault-injection")]
    if std::env::var_os("XVFS_NO_LANDLOCK").is_some() {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    sys::abi_version()
}

/// Restricts this thread (and the threads it starts later) to `rules`
/// under `mode`, without a word (a forked helper process must not take the
/// logger's locks: the caller logs [`Outcome::log`]). Call with one thread;
/// sets `PR_SET_NO_NEW_PRIVS`.
pub fn restrict(
    mode: LandlockMode,
    rules: &[(BorrowedFd<'_>, Beneath)],
) -> Result<Outcome, LandlockError> {
    if mode == LandlockMode::Off {
        return Ok(Outcome::Off);
    }
    let abi = match kernel_abi() {
        Ok(v) => v,
        Err(e) if mode == LandlockMode::Required => return Err(LandlockError::Unavailable(e)),
        Err(e) => return Ok(Outcome::Unavailable(e)),
    };
    let net = if abi >= 4 { NET_TCP } else { 0 };
    let scoped = if abi >= 6 { SCOPES } else { 0 };
    let handled = rules
        .iter()
        .fold(fs_rights(abi), |h, (_, what)| h & what.handled(abi));
    let ruleset =
        sys::create_ruleset(abi, handled, net, scoped).map_err(LandlockError::Restrict)?;
    for (dir, what) in rules {
        sys::allow_beneath(ruleset.as_fd(), *dir, what.rights(abi) & handled)
            .map_err(LandlockError::Restrict)?;
    }
    crate::sys::no_new_privs().map_err(LandlockError::Restrict)?;
    sys::restrict_self(ruleset.as_fd()).map_err(LandlockError::Restrict)?;
    Ok(Outcome::Enforced(abi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_follow_the_abi_and_never_execute_in_the_share() {
        assert_eq!(fs_rights(1), FS_ABI1);
        assert_eq!(fs_rights(3), FS_ABI1 | REFER | TRUNCATE);
        assert_eq!(fs_rights(7), FS_ABI1 | REFER | TRUNCATE | IOCTL_DEV);
        for abi in 1..=7 {
            assert_eq!(Beneath::Share.rights(abi) & EXECUTE, 0);
            assert_eq!(Beneath::ShareByHandle.handled(abi) & FILE_OPEN, 0);
            assert_eq!(
                Beneath::ShareByHandle.rights(abi) & (FILE_OPEN | EXECUTE),
                0
            );
            assert_ne!(Beneath::ShareByHandle.handled(abi) & MAKE_REG, 0);
            let m = Beneath::MetricsDir.rights(abi);
            assert_eq!(m & !(MAKE_REG | WRITE_FILE | REMOVE_FILE | TRUNCATE), 0);
        }
    }
}
