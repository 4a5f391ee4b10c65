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
//!
//! A restarted process rebuilds its tables from the journal before it
//! answers READY; while it does, it sends PROGRESS (at most every
//! [`PROGRESS_EVERY`]), and the holder waits as long as they come.

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
/// PROGRESS: a restarted serving process is rebuilding its tables
/// (payload: u64 little endian, the journal entries it has come to).
pub const PROGRESS: u32 = 14;
/// How often a rebuilding process sends PROGRESS, at most.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

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
        let keeper = UnixStream::from(keeper);
        if !opt.holder_restart {
            bad_keep_fault(&keeper);
        }
        Ok(Some(HolderLink {
            sock: UnixStream::from(sock),
            journal: Box::leak(Box::new(journal)),
            lost: AtomicBool::new(false),
            keeper: Arc::new(HolderKeeper::new(keeper)),
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

    /// The files the holder kept for a crashed predecessor; the rebuild
    /// that takes them reports its progress to the holder.
    pub fn take_kept(&self) -> KeptFiles {
        let kept = std::mem::take(&mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()));
        let files = KeptFiles::new(kept);
        match self.sock.try_clone() {
            Ok(sock) => {
                let mut progress = Progress::new(sock);
                files.reporting(move || progress.step())
            }
            Err(e) => {
                warn!("crash restart: the rebuild's progress is not reported: {e}");
                files
            }
        }
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
        bad_checkpoint_fault(&self.sock);
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

/// A restarted process's rebuild, as its holder hears of it.
struct Progress {
    sock: UnixStream,
    /// Journal entries come to so far.
    entries: u64,
    sent: Option<Instant>,
    /// The fault-injection hook's delay per entry.
    slow: Option<Duration>,
}

impl Progress {
    fn new(sock: UnixStream) -> Progress {
        Progress {
            sock,
            entries: 0,
            sent: None,
            slow: slow_rebuild(),
        }
    }

    /// One more entry: PROGRESS if the last was long enough ago. A holder
    /// that does not take it stops this process soon anyway.
    fn step(&mut self) {
        if let Some(d) = self.slow {
            std::thread::sleep(d);
        }
        self.entries += 1;
        if self.sent.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
            return;
        }
        self.sent = Some(Instant::now());
        let _ = wire::send(&self.sock, PROGRESS, &self.entries.to_le_bytes(), &[]);
    }
}

/// Test hook (`fault-injection` builds only) for the crash-restart tests:
/// XVFS_CRASH_FAULT=slow-rebuild:MS makes a restarted serving process
/// spend MS milliseconds more on every journal entry it rebuilds (a slow
/// file system), so that its rebuild outlasts the holder's READY wait.
#[cfg(feature = "fault-injection")]
fn slow_rebuild() -> Option<Duration> {
    let fault = std::env::var("XVFS_CRASH_FAULT").ok()?;
    let ms = fault.strip_prefix("slow-rebuild:")?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

#[cfg(not(feature = "fault-injection"))]
fn slow_rebuild() -> Option<Duration> {
    None
}

/// Test hook (`fault-injection` builds only) for the crash-restart tests:
/// XVFS_CRASH_FAULT=bad-keep makes a serving process that is not a
/// restart send its holder a malformed message first on the keeper socket,
/// as a compromised or broken one could.
#[cfg(feature = "fault-injection")]
fn bad_keep_fault(keeper: &UnixStream) {
    if std::env::var("XVFS_CRASH_FAULT").as_deref() == Ok("bad-keep") {
        let _ = wire::send(keeper, 99, b"garbage", &[]);
    }
}

#[cfg(not(feature = "fault-injection"))]
fn bad_keep_fault(_: &UnixStream) {}

/// Test hook (`fault-injection` builds only): XVFS_CRASH_FAULT=
/// bad-checkpoint:N makes a serving process send a malformed
/// message before its N-th checkpoint (the first is sent before any
/// vhost-user message, then one after each).
#[cfg(feature = "fault-injection")]
fn bad_checkpoint_fault(sock: &UnixStream) {
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Ok(fault) = std::env::var("XVFS_CRASH_FAULT") else {
        return;
    };
    let Some(n) = fault
        .strip_prefix("bad-checkpoint:")
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return;
    };
    if SENT.fetch_add(1, Ordering::Relaxed) + 1 == n {
        let _ = wire::send(sock, 99, b"garbage", &[]);
    }
}

#[cfg(not(feature = "fault-injection"))]
fn bad_checkpoint_fault(_: &UnixStream) {}
