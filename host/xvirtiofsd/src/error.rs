// SPDX-License-Identifier: Apache-2.0
//! The daemon's errors, as the edge (`main`) prints them: one chain per
//! failure (`a: b: c`, [`crate::error_chain`]) and an exit status.
//!
//! [`SetupError`]: nothing was served (exit status 1); [`ServeError`]: the
//! connection failed while serving. Each layer has its own error enum; these
//! two wrap them.

use std::path::PathBuf;

use crate::confine::caps::CapsError;
use crate::crash_restart::checkpoint::LinkError;
use crate::settings::SettingsError;
use crate::setup::ConfineError;
use crate::upgrade::handover::UpgradeError;
use crate::vhost_user::VhostUserError;

/// Set-up failed: nothing was served.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("shared directory {0}")]
    SharedDir(PathBuf, #[source] std::io::Error),
    #[error(
        "--shared-dir {0} is not a directory: a share is a directory (to share one file, \
         share a directory that holds it)"
    )]
    SharedDirNotDir(PathBuf),
    #[error("cannot open the shared directory")]
    Fs(#[source] xvfs_fs::passthrough::Error),
    #[error("restoring the FUSE session")]
    Session(#[source] xvfs_fs::SessionError),
    #[error("socket {0}")]
    Socket(PathBuf, #[source] std::io::Error),
    #[error("--fd {0} is not a listening socket")]
    NotListening(i32),
    #[error("--fd {0}")]
    BadFd(i32, #[source] std::io::Error),
    #[error("unknown group `{0}`")]
    UnknownGroup(String),
    #[error("confinement")]
    Confine(#[from] ConfineError),
    #[error("capabilities")]
    Caps(#[from] CapsError),
    #[error("the holder link")]
    Link(#[from] LinkError),
    #[error("live upgrade")]
    Upgrade(#[from] UpgradeError),
    #[error("restoring the device")]
    Device(#[from] VhostUserError),
    #[error("{0}")]
    Io(&'static str, #[source] std::io::Error),
    #[error("{0}")]
    DaxWindow(String),
}

/// Why [`crate::daemon::Daemon::serve`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Serving could not begin (eventfd, control thread).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The connection failed while serving.
    #[error(transparent)]
    Connection(#[from] VhostUserError),
}
