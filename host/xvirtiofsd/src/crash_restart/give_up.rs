// SPDX-License-Identifier: Apache-2.0
//! Crash restart: the holder that gave up (`--crash-restart-limit`).
//!
//! No serving process any more: the holder answers every request itself
//! with EIO, from the last checkpoint and without touching the file
//! system, until the front-end disconnects; the guest sees I/O errors,
//! never a hang. The checkpoint was written by a process the guest may
//! have compromised, so before it reads a byte of it the holder
//!
//! 1. lets go of every file it kept (directories among them);
//! 2. as root, becomes uid and gid [`UNPRIVILEGED`] with no supplementary
//!    group, which clears every capability it had;
//! 3. enters a user namespace of its own, with new mount, network and IPC
//!    namespaces, and makes an empty read-only tmpfs that is mounted
//!    nowhere its root: no path leads to a host file;
//! 4. drops every capability the new user namespace gave it, sets
//!    no_new_privs, and installs a seccomp filter without file calls
//!    ([`crate::confine::sandbox::Profile::Refusing`]).
//!
//! Where user namespaces cannot be made (a kernel or container that
//! forbids them) it says so and goes on as [`UNPRIVILEGED`] in the host's
//! namespaces.
//!
//! With a DAX window (`--dax-window`) the device is rebuilt with it (the
//! front-end acked the window's protocol features): the back-end channel
//! is kept open but never written to or read, no request reaches a
//! mapping (every one is refused first), and the window's chunks in guest
//! memory (regions backed by a file on a file system of the window's, as
//! the serving processes told them: docs/dax.md, Limits) are left out of
//! the memory table: never mapped, so a host process that shrinks such a
//! file cannot fault this process.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use log::{error, info, warn};
use virtio_fs_ext::state::DaemonState;
use xvfs_fs::journal::Journal;

use crate::cli::Opt;
use crate::crash_restart::keeper::KeptStore;
use crate::sys;
use crate::vhost_user::backend::BackendChannel;

/// The uid and gid of a holder that gave up: `nobody` (the kernel's
/// overflow id), which owns no file.
pub const UNPRIVILEGED: u32 = 65534;

/// What a holder that gives up serves instead of the share, made while it
/// still could, and the settings its own command line gives.
pub(super) struct Fallback {
    /// The root of an empty tmpfs mounted nowhere.
    empty: Option<OwnedFd>,
    /// The settings from the holder's command line.
    config: Option<virtio_fs_ext::settings::Settings>,
}

impl Fallback {
    pub(super) fn prepare(opt: &Opt) -> Fallback {
        let empty = sys::empty_tmpfs()
            .map_err(|e| {
                warn!("crash restart: no empty file system for giving up ({e}): a holder that gives up will close the connection")
            })
            .ok();
        let config = opt
            .shared_dir
            .as_ref()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .map(|d| crate::settings::from_options(opt, &d));
        Fallback { empty, config }
    }
}

/// The last checkpoint: the state blob and its descriptors.
pub(super) type Checkpoint<'a> = (&'a [u8], &'a [OwnedFd]);

/// No more restarts. If a front-end is connected, the holder answers every
/// request from now on with EIO (see the module documentation) until the
/// front-end leaves. Returns the exit status (1).
pub(super) fn run(
    opt: &Opt,
    fallback: Fallback,
    last: Option<Checkpoint<'_>>,
    journal: &Journal,
    kept: KeptStore,
) -> u8 {
    drop(kept);
    let Some(cp) = last else {
        return 1;
    };
    error!("crash restart: every request now gets EIO until the front-end disconnects");
    if let Err(e) = refuse_requests(opt, fallback, cp, journal) {
        error!(
            "crash restart: cannot answer the guest any more: {}",
            crate::error_chain(&e)
        );
    }
    1
}

#[derive(Debug, thiserror::Error)]
enum RefuseError {
    #[error("the last checkpoint")]
    State(#[from] virtio_fs_ext::state::StateError),
    #[error("the settings")]
    Settings(#[from] crate::settings::SettingsError),
    #[error("the settings of the last checkpoint")]
    Upgrade(#[from] crate::upgrade::handover::UpgradeError),
    #[error("cannot open the shared directory")]
    Fs(#[from] xvfs_fs::passthrough::Error),
    #[error("the device")]
    Device(#[from] crate::vhost_user::VhostUserError),
    #[error("checkpoint descriptor {0} missing or used twice")]
    Fd(u32),
    #[error("no empty file system or shared directory settings were prepared")]
    NotPrepared,
    #[error("cannot drop root (uid and gid {UNPRIVILEGED})")]
    Ids(#[source] std::io::Error),
    #[error("the checkpoint's DAX window ({0:?} bytes) is not this daemon's --dax-window")]
    Window(Option<u64>),
    #[error("confinement")]
    Caps(#[from] crate::confine::caps::CapsError),
    #[error("confinement")]
    Confine(#[from] crate::setup::ConfineError),
    #[error("confinement")]
    Sandbox(#[from] crate::confine::sandbox::SandboxError),
}

/// Steps 2 to 4 of the module documentation.
fn confine(opt: &Opt) -> Result<(), RefuseError> {
    if sys::effective_uid() == 0 {
        sys::drop_supplementary_groups().map_err(RefuseError::Ids)?;
        sys::set_ids(UNPRIVILEGED, UNPRIVILEGED).map_err(RefuseError::Ids)?;
    }
    // The host's uid (inside a user namespace without a map it reads as
    // the overflow id).
    let uid = sys::effective_uid();
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC;
    match sys::unshare(flags) {
        Ok(()) => {
            match sys::empty_tmpfs().and_then(|root| sys::chroot_to(root.as_fd())) {
                Ok(()) => info!(
                    "crash restart: the holder runs as uid {uid} in a user namespace of its own, \
                     on an empty root"
                ),
                Err(e) => warn!("crash restart: the holder keeps the host's root ({e})"),
            }
            crate::confine::caps::drop_all()?;
        }
        Err(e) => warn!(
            "crash restart: no user namespace for the holder ({e}): it goes on as uid {uid} in \
             the host's namespaces"
        ),
    }
    sys::no_new_privs().map_err(crate::setup::ConfineError::OpenRoot)?;
    crate::confine::sandbox::seccomp(opt.seccomp, crate::confine::sandbox::Profile::Refusing)?;
    Ok(())
}

fn refuse_requests(
    opt: &Opt,
    fallback: Fallback,
    (blob, cp_fds): Checkpoint<'_>,
    journal: &Journal,
) -> Result<(), RefuseError> {
    use crate::vhost_user::{Connection, Device, ServeEnd};
    let (Some(empty), Some(own)) = (fallback.empty, fallback.config) else {
        return Err(RefuseError::NotPrepared);
    };
    let proc_stand_in = empty
        .try_clone()
        .map_err(crate::setup::ConfineError::OpenProc)?;
    let dir = xvfs_fs::passthrough::SharedDir::from_parts(empty, proc_stand_in)?;
    confine(opt)?;
    let mut st = DaemonState::decode(blob)?;
    st.check(cp_fds.len())?;
    st.settings = crate::upgrade::trust::check_settings(&own, &st.settings, None, None)
        .map_err(crate::upgrade::handover::UpgradeError::Settings)?;
    let window = st.dax.as_ref().map(|d| d.window);
    if window != opt.dax_window {
        return Err(RefuseError::Window(window));
    }
    let mut fds: Vec<Option<OwnedFd>> = cp_fds.iter().map(|f| f.try_clone().ok()).collect();
    if window.is_some() {
        let chunks = window_chunks(journal, &st, &fds);
        st.device.regions.retain(|r| !chunks.contains(&r.fd));
    }
    let mut take = |i: u32| {
        fds.get_mut(i as usize)
            .and_then(Option::take)
            .ok_or_else(|| std::io::Error::other(format!("descriptor {i}")))
    };
    let fs = xvfs_fs::PassthroughFs::at(crate::settings::fs_config(&st.settings, 1)?, dir);
    let server = Arc::new(crate::FsServer::new(fs));
    server.refuse_all(libc::EIO);
    let mut cfg = crate::settings::device_config(&st.settings, Duration::ZERO);
    if let Some(d) = &st.dax {
        // Kept open (the front-end sees no change), never used.
        let channel = Arc::new(BackendChannel::default());
        if let Some(i) = d.channel_fd {
            channel.set(UnixStream::from(take(i).map_err(|_| RefuseError::Fd(i))?));
        }
        cfg.dax = Some((d.window, channel));
    }
    let mut dev = Device::import(cfg, server, &st.device, &mut take, true)?;
    let conn_fd = take(st.vhost_socket_fd).map_err(|_| RefuseError::Fd(st.vhost_socket_fd))?;
    let mut conn = Connection::from_fd(conn_fd);
    dev.resume()?;
    dev.notify_started();
    loop {
        match conn.serve(&mut dev, None, &mut |_| {}) {
            Ok(ServeEnd::Interrupted) => continue,
            Ok(ServeEnd::Disconnected) => {
                info!("crash restart: the front-end disconnected");
                break;
            }
            Err(e) => {
                dev.stop_all();
                return Err(e.into());
            }
        }
    }
    dev.stop_all();
    Ok(())
}

/// The descriptor indices of the checkpoint's memory regions that are
/// chunks of the DAX window, told as a restarted serving process tells
/// them: backed by a file on a file system the window maps from (the
/// checkpoint's `dax` part lists them) or of a node in the journal. One
/// whose file cannot be examined is taken for a chunk too.
fn window_chunks(journal: &Journal, st: &DaemonState, fds: &[Option<OwnedFd>]) -> HashSet<u32> {
    let mut devices: HashSet<u64> = st.dax.iter().flat_map(|d| d.devices.clone()).collect();
    devices.extend(journal.tables().keys.into_values().map(|(dev, _)| dev));
    st.device
        .regions
        .iter()
        .map(|r| r.fd)
        .filter(|&i| {
            let fd = fds.get(i as usize).and_then(Option::as_ref);
            fd.is_some_and(|f| {
                sys::file_key(f.as_fd()).map_or(true, |(dev, _)| devices.contains(&dev))
            })
        })
        .collect()
}
