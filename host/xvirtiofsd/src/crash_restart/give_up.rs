// SPDX-License-Identifier: Apache-2.0
//! Crash restart: the holder that gave up (`--crash-restart-limit`).
//!
//! No serving process any more: the holder answers every request itself
//! with EIO, from the last checkpoint and without touching the file
//! system, until the front-end disconnects; the guest sees I/O errors,
//! never a hang. It serves the guest's rings on an empty file system
//! mounted nowhere, with every capability dropped, no_new_privs and a
//! filter without file calls, all before it reads the checkpoint.

use std::os::fd::OwnedFd;
use std::time::Duration;

use log::{error, info, warn};

use crate::cli::Opt;
use crate::crash_restart::keeper::KeptStore;
use crate::sys;

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
/// request from now on with EIO, from the last checkpoint and without
/// touching the file system, until the front-end leaves: the guest sees
/// errors, never a hang. Returns the exit status (1).
pub(super) fn run(
    opt: &Opt,
    fallback: Fallback,
    last: Option<Checkpoint<'_>>,
    kept: KeptStore,
) -> u8 {
    drop(kept);
    let Some(cp) = last else {
        return 1;
    };
    error!("crash restart: every request now gets EIO until the front-end disconnects");
    if let Err(e) = refuse_requests(opt, fallback, cp) {
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
    #[error("confinement")]
    Confine(#[from] crate::setup::ConfineError),
    #[error("confinement")]
    Sandbox(#[from] crate::confine::sandbox::SandboxError),
}

fn refuse_requests(
    opt: &Opt,
    fallback: Fallback,
    (blob, cp_fds): Checkpoint<'_>,
) -> Result<(), RefuseError> {
    use crate::vhost_user::{Connection, Device, ServeEnd};
    let (Some(empty), Some(own)) = (fallback.empty, fallback.config) else {
        return Err(RefuseError::NotPrepared);
    };
    // Confined before the checkpoint (written by a process the guest may
    // have compromised) is read: no capability, no file call.
    let proc_stand_in = empty
        .try_clone()
        .map_err(crate::setup::ConfineError::OpenProc)?;
    let dir = xvfs_fs::passthrough::SharedDir::from_parts(empty, proc_stand_in)?;
    crate::confine::caps::drop_to(0).map_err(crate::setup::ConfineError::from)?;
    sys::no_new_privs().map_err(crate::setup::ConfineError::OpenRoot)?;
    crate::confine::sandbox::seccomp(opt.seccomp, crate::confine::sandbox::Profile::Refusing)?;
    let mut st = virtio_fs_ext::state::DaemonState::decode(blob)?;
    st.check(cp_fds.len())?;
    st.settings = crate::upgrade::trust::check_settings(&own, &st.settings, None, None)
        .map_err(crate::upgrade::handover::UpgradeError::Settings)?;
    let mut fds: Vec<Option<OwnedFd>> = cp_fds.iter().map(|f| f.try_clone().ok()).collect();
    let mut take = |i: u32| {
        fds.get_mut(i as usize)
            .and_then(Option::take)
            .ok_or_else(|| std::io::Error::other(format!("descriptor {i}")))
    };
    let fs = xvfs_fs::PassthroughFs::at(crate::settings::fs_config(&st.settings, 1)?, dir);
    let server = std::sync::Arc::new(crate::FsServer::new(fs));
    server.refuse_all(libc::EIO);
    let cfg = crate::settings::device_config(&st.settings, Duration::ZERO);
    let mut dev = Device::import(cfg, server, &st.device, &mut take, true)?;
    let conn_fd = take(st.vhost_socket_fd).map_err(|_| RefuseError::Fd(st.vhost_socket_fd))?;
    let mut conn = Connection::from_fd(conn_fd);
    dev.resume()?;
    dev.notify_started();
    loop {
        match conn.serve(&mut dev, None, &mut |_| {}) {
            Ok(ServeEnd::Interrupted) => continue,
            Ok(ServeEnd::Disconnected) => break,
            Err(e) => {
                dev.stop_all();
                return Err(e.into());
            }
        }
    }
    dev.stop_all();
    info!("crash restart: the front-end disconnected");
    Ok(())
}
