// SPDX-License-Identifier: Apache-2.0
//! Confining a serving process: the sandbox first, then the share.
//!
//! Every serving process (a fresh daemon, a live upgrade's successor, a
//! crash restart) enters its sandbox *before* it opens the shared
//! directory, and then opens it from inside: as "/" of the mount namespace
//! it has pivoted into (`--sandbox namespace`), or of its chroot. Every
//! inode descriptor is then on the sandbox's own mount of the share, whose
//! root is the share: `..` from the root stays at the root, and a directory
//! a host process moves out of the share is no longer below that mount, so
//! the kernel refuses `..` from it (ENOENT) instead of climbing to the
//! host's `/`. The root opened inside must be the very directory (device
//! and inode) the command line named before the sandbox was entered.
//!
//! Then capabilities are dropped and the system-call filter installed.
//! What needs a host path (sockets, the metrics file, the service manager)
//! is opened by the callers before [`confine`].

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use log::info;
use virtio_fs_ext::settings::Settings;
use xvfs_fs::passthrough::SharedDir;

use crate::cli::{Opt, SandboxMode};
use crate::confine::landlock::{self, Beneath, LandlockMode};
use crate::confine::{caps, sandbox};
use crate::ops::metrics_file::{MetricsWriter, WriterWalls};
use crate::ops::service_manager::Notifier;
use crate::settings::from_options;
use crate::sys;

/// `CAP_DAC_READ_SEARCH`: `open_by_handle_at(2)`.
pub const CAP_DAC_READ_SEARCH: u64 = 1 << 2;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("shared directory {0}")]
    SharedDir(PathBuf, #[source] std::io::Error),
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    #[error("cannot open the shared directory from inside the sandbox")]
    OpenRoot(#[source] std::io::Error),
    #[error("cannot open /proc/self/fd")]
    OpenProc(#[source] std::io::Error),
    #[error(
        "the sandbox's root is not the shared directory {0} (device and inode differ: \
         it was replaced while the daemon started)"
    )]
    RootReplaced(PathBuf),
    #[error("the shared directory")]
    Fs(#[from] xvfs_fs::passthrough::Error),
    #[error("capabilities")]
    Caps(#[from] caps::CapsError),
    #[error("metrics file {0}")]
    Metrics(PathBuf, #[source] std::io::Error),
    #[error("cannot read the descriptor table")]
    Descriptors(#[source] std::io::Error),
    #[error(
        "descriptor {0} is the host directory {1}, open inside the sandbox (`..` from it \
         would lead out): refusing to serve"
    )]
    StrayDirectory(RawFd, PathBuf),
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
}

/// How a serving process confines itself beyond its settings: the
/// capabilities it keeps and `--landlock`.
#[derive(Debug, Clone, Copy)]
pub struct Walls {
    /// Capabilities to keep ([`caps_mask`]).
    pub caps: u64,
    /// Kept on top of `caps` until [`release_extra_caps`] (a crash restart
    /// reopens file handles with `CAP_DAC_READ_SEARCH`, then lets it go).
    pub extra_caps: u64,
    pub landlock: LandlockMode,
}

/// Enters the sandbox `c` chooses around `c.security.shared_dir`, opens the share
/// from inside it, checks the descriptor table ([`check_descriptors`]),
/// restricts itself with Landlock to the share, keeps the capabilities of
/// `walls` and installs the system-call filter. Call with one thread.
pub fn confine(c: &Settings, walls: Walls) -> Result<SharedDir, ConfineError> {
    let path = Path::new(&c.security.shared_dir);
    let md = std::fs::metadata(path).map_err(|e| ConfineError::SharedDir(path.into(), e))?;
    let asked = (md.dev(), md.ino());
    #[cfg(feature = "fault-injection")]
    leak_directory();
    // Without a mount namespace there is no private /proc: the host's,
    // opened before a chroot hides it (virtiofsd's chroot sandbox does the
    // same; docs/security.md says what that leaves open).
    let host_proc = match c.security.sandbox {
        SandboxMode::Namespace => None,
        SandboxMode::Chroot | SandboxMode::None => {
            Some(sys::open_path_dir(Path::new("/proc/self/fd")).map_err(ConfineError::OpenProc)?)
        }
    };
    let ns_proc = sandbox::enter(c.security.sandbox, path)?;
    let root = match c.security.sandbox {
        SandboxMode::Namespace | SandboxMode::Chroot => Path::new("/"),
        SandboxMode::None => path,
    };
    let root = sys::open_path_dir(root).map_err(ConfineError::OpenRoot)?;
    let proc_fd: OwnedFd = match (ns_proc, host_proc) {
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => return Err(ConfineError::OpenProc(std::io::ErrorKind::NotFound.into())),
    };
    if c.security.sandbox != SandboxMode::None {
        check_descriptors(root.as_fd(), proc_fd.as_fd())?;
    }
    // Opening file handles (a migration's destination, a crash restart)
    // needs CAP_DAC_READ_SEARCH; only a process that holds it may call it.
    let file_handles = (walls.caps | walls.extra_caps) & CAP_DAC_READ_SEARCH != 0;
    let share = if file_handles {
        Beneath::ShareByHandle
    } else {
        Beneath::Share
    };
    landlock::restrict(walls.landlock, &[(root.as_fd(), share)])?.log("the serving process", share);
    let dir = SharedDir::from_parts(root, proc_fd)?;
    if dir.key() != asked {
        return Err(ConfineError::RootReplaced(path.into()));
    }
    caps::drop_to(walls.caps | walls.extra_caps)?;
    sandbox::seccomp(
        c.security.seccomp,
        sandbox::Profile::Serving { file_handles },
    )?;
    info!("the shared directory was opened from inside the sandbox");
    #[cfg(feature = "fault-injection")]
    crate::confine::attack::arm();
    Ok(dir)
}

/// The descriptor guard: once the sandbox is entered and the share opened
/// from inside it, the only directories a serving process may hold are the
/// share's root and the procfs view. A directory opened before the sandbox
/// (an option's host path, an inherited descriptor) leads out of it: `..`
/// from it reaches the host. Such a mistake fails loudly here, before
/// anything is served.
fn check_descriptors(root: BorrowedFd<'_>, proc_fd: BorrowedFd<'_>) -> Result<(), ConfineError> {
    let fds = sys::open_fds(proc_fd).map_err(ConfineError::Descriptors)?;
    let allowed = [root.as_raw_fd(), proc_fd.as_raw_fd()];
    match fds
        .into_iter()
        .find(|fd| !allowed.contains(fd) && sys::is_directory(*fd))
    {
        Some(fd) => Err(ConfineError::StrayDirectory(
            fd,
            sys::fd_target(proc_fd, fd),
        )),
        None => Ok(()),
    }
}

/// Test hook (`fault-injection` builds only): `XVFS_LEAK_DIR=PATH` opens
/// that host directory before the sandbox and keeps it, as an option that
/// named a host path could (the guard's test: the daemon must refuse).
#[cfg(feature = "fault-injection")]
fn leak_directory() {
    if let Some(p) = std::env::var_os("XVFS_LEAK_DIR") {
        if let Ok(fd) = sys::open_dir(Path::new(&p)) {
            std::mem::forget(fd);
        }
    }
}

/// Lets go of the capabilities [`confine`] kept beyond `caps`.
pub fn release_extra_caps(caps: u64) -> Result<(), ConfineError> {
    caps::keep_only(caps)?;
    Ok(())
}

/// What a serving process that adopts a predecessor's state (a live
/// upgrade's successor, a crash restart) opens and enters before it reads
/// anything the predecessor wrote: the predecessor may have been
/// compromised by the guest, and its state is parsed inside the sandbox.
pub struct Prepared {
    /// The shared directory, opened from inside the sandbox.
    pub dir: SharedDir,
    /// The open-file limit, raised.
    pub limit: u64,
    /// `--metrics-file`, opened.
    pub metrics: Option<MetricsWriter>,
    /// The service manager's socket, connected.
    pub notifier: Option<Notifier>,
    /// `/dev/null`, to let go of the upgrade command's pipe.
    pub dev_null: Option<OwnedFd>,
}

/// Opens what needs a host path, all from the command line `opt` (which
/// must then agree with the state received), and enters the sandbox
/// ([`confine`], keeping `extra_caps` for a while).
pub fn prepare(opt: &Opt, shared_dir: &Path, extra_caps: u64) -> Result<Prepared, ConfineError> {
    let cfg = from_options(opt, shared_dir);
    let limit = sys::raise_nofile_limit(0).unwrap_or_else(|_| sys::nofile_limit());
    let notifier = Notifier::from_env();
    let walls = walls(opt, extra_caps)?;
    let metrics = open_metrics(&cfg, &walls)?;
    let dev_null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .ok()
        .map(OwnedFd::from);
    let dir = confine(&cfg, walls)?;
    Ok(Prepared {
        dir,
        limit,
        metrics,
        notifier,
        dev_null,
    })
}

/// The walls `opt` asks for.
pub fn walls(opt: &Opt, extra_caps: u64) -> Result<Walls, ConfineError> {
    Ok(Walls {
        caps: caps_mask(opt)?,
        extra_caps,
        landlock: opt.landlock,
    })
}

/// `--metrics-file`: its writer process started (the path only exists
/// outside the sandbox, and the serving process must not hold its
/// directory: [`crate::ops::metrics_file`]).
pub fn open_metrics(c: &Settings, walls: &Walls) -> Result<Option<MetricsWriter>, ConfineError> {
    let writer = WriterWalls {
        caps: walls.caps,
        landlock: walls.landlock,
        seccomp: c.security.seccomp,
    };
    c.operations
        .metrics_file
        .as_ref()
        .map(|p| {
            MetricsWriter::open(Path::new(p), &writer)
                .map_err(|e| ConfineError::Metrics(p.into(), e))
        })
        .transpose()
}

/// The capabilities `opt` keeps: [`caps::DEFAULT`] changed by `--modcaps`,
/// plus `CAP_DAC_READ_SEARCH` when inodes may be file handles.
pub fn caps_mask(opt: &Opt) -> Result<u64, caps::CapsError> {
    let mut m = caps::mask(opt.modcaps.as_deref())?;
    if opt.file_handles() != virtio_fs_ext::config::FileHandles::Never {
        m |= CAP_DAC_READ_SEARCH;
    }
    Ok(m)
}
