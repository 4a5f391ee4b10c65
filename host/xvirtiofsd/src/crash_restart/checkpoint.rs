// SPDX-License-Identifier: Apache-2.0
//! Crash restart, serving side: the link to the holder (`holder.rs`).
//!
//! The holder starts this process with two inherited descriptors: a socket
//! to the holder and the journal's memory file. Over the socket this
//! process sends a *checkpoint* after every vhost-user message it handles
//! (before replying to the front-end): the live-upgrade state of the device
//! and daemon without the file system (`virtio_fs_ext::state`), with the
//! connection, guest memory, eventfds and control socket attached. The
//! holder keeps the latest one, so that it always has what a new serving
//! process needs besides the journal. Before this process ends of its own
//! accord it sends BYE: the holder then ends too instead of restarting it.

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use log::warn;
use virtio_fs_ext::handover as wire;
use xvfs_fs::journal::{Journal, JournalError};
use xvfs_fs::passthrough::{Keeper, Kept, KeptFiles};

use crate::cli::Opt;
use crate::crash_restart::keeper::HolderKeeper;
use crate::sys;
use crate::upgrade::handover::{self, Incoming, Outgoing, UpgradeError};
use crate::vhost_user::Device;

/// BYE: the serving process ends of its own accord (payload: why).
pub const BYE: u32 = 9;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("--holder-socket/--holder-journal descriptor")]
    Fd(#[source] std::io::Error),
    #[error("the holder's journal")]
    Journal(#[from] JournalError),
}

/// This serving process's link to its holder.
#[derive(Debug)]
pub struct HolderLink {
    sock: UnixStream,
    journal: &'static Journal,
    /// The holder is gone (checkpoints are no longer sent).
    lost: AtomicBool,
    /// Where files with no name left are kept (`keeper.rs`).
    keeper: Arc<HolderKeeper>,
    /// After a crash: what the holder kept for the crashed process, until
    /// the file system takes it.
    kept: Mutex<Vec<(Kept, OwnedFd)>>,
    /// `--crash-restart-keep all`.
    keep_all: bool,
}

impl HolderLink {
    /// The link the holder's hidden options describe; None without them.
    pub fn from_opt(opt: &Opt) -> Result<Option<HolderLink>, LinkError> {
        let (Some(s), Some(j)) = (opt.holder_socket, opt.holder_journal) else {
            return Ok(None);
        };
        let k = opt
            .holder_keeper
            .ok_or(LinkError::Fd(std::io::Error::other(
                "--holder-keeper is missing",
            )))?;
        let sock = sys::take_inherited(s).map_err(LinkError::Fd)?;
        let keeper: OwnedFd = sys::take_inherited(k).map_err(LinkError::Fd)?;
        let jfd: OwnedFd = sys::take_inherited(j).map_err(LinkError::Fd)?;
        let journal = Journal::open(jfd.as_fd())?;
        // The mapping stays; the descriptor is not needed any more.
        drop(jfd);
        Ok(Some(HolderLink {
            sock: UnixStream::from(sock),
            journal: Box::leak(Box::new(journal)),
            lost: AtomicBool::new(false),
            keeper: Arc::new(HolderKeeper::new(UnixStream::from(keeper))),
            kept: Mutex::new(Vec::new()),
            keep_all: opt.crash_restart_keep == crate::cli::CrashRestartKeep::All,
        }))
    }

    /// The journal.
    pub fn journal(&self) -> &'static Journal {
        self.journal
    }

    /// Where the file system keeps files with no name left.
    pub fn keeper(&self) -> Arc<dyn Keeper> {
        self.keeper.clone()
    }

    /// Whether every node and open file is kept (`--crash-restart-keep all`).
    pub fn keep_all(&self) -> bool {
        self.keep_all
    }

    /// A crashed predecessor's state, from the holder: first the files it
    /// kept (taken later by [`HolderLink::take_kept`]), then the checkpoint.
    pub fn receive(&self) -> Result<Incoming, UpgradeError> {
        let kept = self.keeper.receive()?;
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = kept;
        let peer = self.sock.try_clone().map_err(wire::HandoverError::Io)?;
        handover::receive_from_holder(peer)
    }

    /// The files the holder kept for a crashed predecessor.
    pub fn take_kept(&self) -> KeptFiles {
        let kept = std::mem::take(&mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()));
        KeptFiles::new(kept)
    }

    /// Checkpoints the device and daemon described by `out` (see the
    /// module documentation). A holder that cannot take it is reported
    /// once; serving goes on without it.
    pub fn checkpoint_device(&self, out: &Outgoing<'_>, dev: &Device, conn_fd: RawFd) {
        if self.lost.load(Ordering::Relaxed) {
            return;
        }
        let (st, fds) = handover::daemon_state(out, dev, conn_fd, false);
        let blob = match st.encode() {
            Ok(blob) => blob,
            Err(e) => {
                warn!("crash restart: checkpoint: {}", crate::error_chain(&e));
                return;
            }
        };
        if let Err(e) = wire::send_state(&self.sock, &blob, &fds) {
            self.lost.store(true, Ordering::Relaxed);
            warn!(
                "crash restart: the holder takes no checkpoint ({}); a crash from now on \
                 is not survived",
                crate::error_chain(&e)
            );
        }
    }

    /// Tells the holder this process ends of its own accord.
    pub fn bye(&self, why: &str) {
        let _ = wire::send(&self.sock, BYE, why.as_bytes(), &[]);
    }
}
