// SPDX-License-Identifier: Apache-2.0
//! Crash restart: the holder (`--crash-restart`).
//!
//! The process started as the daemon becomes the *holder*: it creates the
//! journal (a memory file, `xvfs_fs::journal`), starts the *serving
//! process* (this same binary, with the journal and a socket to the holder)
//! and then only watches. The serving process does everything a daemon
//! does and checkpoints its device to the holder after every vhost-user
//! message (`checkpoint.rs`), so the holder always holds a copy of the
//! connection, guest memory, eventfds and control socket: the front-end
//! never sees the connection close.
//!
//! When the serving process dies without saying BYE (a signal, an abort, a
//! panic, the OOM killer), the holder notices at once (pidfd), records the
//! crash in the journal and starts a new serving process with
//! `--holder-restart`, which receives the last checkpoint, rebuilds the
//! file system from the journal and resumes every ring from the used index
//! in guest memory, answering the requests in flight exactly once.
//!
//! After `N` crashes within `SECONDS` (`--crash-restart-limit`) the holder
//! stops restarting and says so; see docs/crash-restart.md.
//!
//! The holder does no file-system work and, until it gives up, handles no
//! guest input; signals it receives (SIGTERM, SIGINT, ...) go to the
//! serving process, and then its end is not a crash. Once started it keeps
//! no effective capability but those it needs to give up (CAP_SETPCAP,
//! CAP_SETGID: to drop the rest for good); its serving processes get theirs
//! from the bounding set when they start. A holder that gives up serves
//! the guest's rings on an empty file system mounted nowhere, with every
//! capability dropped, no_new_privs and a filter without file calls.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use log::{error, info, warn};
use virtio_fs_ext::handover::{self, HandoverError};
use xvfs_fs::journal::Journal;

use crate::cli::Opt;
use crate::crash_restart::checkpoint::BYE;
use crate::crash_restart::keeper::KeptStore;
use crate::sys::{self, ChildEnd};

/// Largest journal: nodes and handles (each at most this many).
const MAX_JOURNAL_SLOTS: usize = 1 << 20;
/// Longest pause before a restart after repeated crashes.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A serving process that lived this long did work: the next one starts at
/// once. One that died sooner makes the next wait (doubling, from 50 ms).
const HEALTHY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error("cannot create the journal")]
    Journal(#[source] std::io::Error),
    #[error("cannot lay the journal out")]
    Layout(#[from] xvfs_fs::journal::JournalError),
    #[error("cannot start the serving process")]
    Spawn(#[source] std::io::Error),
    #[error("cannot watch the serving process")]
    Watch(#[source] std::io::Error),
}

/// The serving process, for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal was passed on: the serving process's end is not a crash.
static STOPPING: AtomicBool = AtomicBool::new(false);

extern "C" fn forward(sig: libc::c_int) {
    STOPPING.store(true, Ordering::SeqCst);
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 {
        sys::kill(child, sig);
    }
}

/// CAP_SETGID and CAP_SETPCAP: what dropping every capability needs.
const GIVE_UP_CAPS: u64 = 1 << 6 | 1 << 8;

/// What a holder that gives up serves instead of the share, made while it
/// still could, and the settings its own command line gives.
struct Fallback {
    /// The root of an empty tmpfs mounted nowhere.
    empty: Option<OwnedFd>,
    /// The settings from the holder's command line.
    config: Option<virtio_fs_ext::settings::Settings>,
}

impl Fallback {
    fn prepare(opt: &Opt) -> Fallback {
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
struct Checkpoint {
    blob: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// How one serving process ended.
struct Ended {
    how: ChildEnd,
    bye: bool,
}

/// Runs the holder until the serving process ends of its own accord (or
/// after a signal); returns the exit status to end with.
pub fn run(opt: &Opt, limit: usize) -> Result<u8, HolderError> {
    let jfile = sys::memfd("xvirtiofsd-journal").map_err(HolderError::Journal)?;
    let slots = limit.clamp(1024, MAX_JOURNAL_SLOTS);
    let journal = Journal::create(jfile.as_fd(), usize::from(opt.queues) + 1, slots, slots)?;
    journal.set_holder_pid(std::process::id());
    // Kept files arrive as descriptors: room for as many as the journal.
    if let Err(e) = sys::raise_nofile_limit((2 * slots + 4096) as u64) {
        warn!("crash restart: the holder cannot raise its open file limit: {e}");
    }
    sys::on_signals(sys::forwarded_signals(), forward).map_err(HolderError::Watch)?;
    let fallback = Fallback::prepare(opt);
    if let Err(e) = crate::confine::caps::keep_only(GIVE_UP_CAPS) {
        warn!("crash restart: the holder keeps its capabilities: {e}");
    }
    info!(
        "crash restart: holder pid {}, journal of {} nodes and {} handles, at most {} \
         crashes in {} s",
        std::process::id(),
        slots,
        slots,
        opt.crash_restart_limit.0,
        opt.crash_restart_limit.1
    );
    let window = Duration::from_secs(opt.crash_restart_limit.1);
    let mut crashes: VecDeque<Instant> = VecDeque::new();
    let mut last: Option<Checkpoint> = None;
    // Files with no name left the guest holds (`keeper.rs`): they
    // outlive every serving process.
    let mut kept = KeptStore::default();
    let mut short_lived = 0u32;
    loop {
        let started = Instant::now();
        let ended = serve_once(jfile.as_fd().as_raw_fd(), &mut last, &mut kept)?;
        if ended.bye || STOPPING.load(Ordering::SeqCst) {
            return Ok(exit_status(ended.how));
        }
        let reason = describe(ended.how);
        let now = Instant::now();
        crashes.push_back(now);
        while crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            crashes.pop_front();
        }
        journal.record_crash(crate::ops::control::now_unix_ms(), &reason);
        if crashes.len() > opt.crash_restart_limit.0 as usize {
            error!(
                "crash restart: the serving process {reason}, {} times in {} s: giving up \
                 (--crash-restart-limit {}/{})",
                crashes.len(),
                window.as_secs(),
                opt.crash_restart_limit.0,
                opt.crash_restart_limit.1
            );
            return Ok(give_up(opt, fallback, last.as_ref()));
        }
        short_lived = if started.elapsed() >= HEALTHY {
            0
        } else {
            short_lived + 1
        };
        let backoff = match short_lived {
            0 => Duration::ZERO,
            n => (Duration::from_millis(50) * (1u32 << (n - 1).min(6))).min(MAX_BACKOFF),
        };
        error!(
            "crash restart: the serving process {reason}; restarting{} (restart {})",
            if backoff.is_zero() {
                String::new()
            } else {
                format!(" in {} ms", backoff.as_millis())
            },
            journal.restarts()
        );
        std::thread::sleep(backoff);
        if STOPPING.load(Ordering::SeqCst) {
            // Told to stop while no serving process ran.
            return Ok(exit_status(ended.how));
        }
    }
}

/// Starts one serving process, hands it the last checkpoint if there is
/// one (a restart), and takes its checkpoints until it ends.
fn serve_once(
    journal_fd: RawFd,
    last: &mut Option<Checkpoint>,
    kept: &mut KeptStore,
) -> Result<Ended, HolderError> {
    let (ours, theirs) = UnixStream::pair().map_err(HolderError::Spawn)?;
    let (keeper, their_keeper) = UnixStream::pair().map_err(HolderError::Spawn)?;
    let restart = last.is_some();
    let child = spawn(
        [theirs.as_raw_fd(), their_keeper.as_raw_fd(), journal_fd],
        restart,
    )?;
    drop(theirs);
    drop(their_keeper);
    CHILD.store(child, Ordering::SeqCst);
    let pidfd = sys::pidfd_open(child).map_err(HolderError::Watch)?;
    if let Some(cp) = last.as_ref() {
        if let Err(e) = kept.send_all(&keeper).and_then(|()| hand_over(&ours, cp)) {
            // It dies or failed: the watch below sees it end.
            warn!(
                "crash restart: the new serving process (pid {child}) did not take the state: {}",
                crate::error_chain(&e)
            );
        }
    }
    let mut bye = false;
    let mut reading = true;
    let mut keeping = true;
    loop {
        // Unread sockets are polled as -1 (ignored).
        let fds = [
            Some(pidfd.as_fd()),
            reading.then(|| ours.as_fd()),
            keeping.then(|| keeper.as_fd()),
        ];
        let ready = sys::poll_readable_opt(&fds, -1).map_err(HolderError::Watch)?;
        if ready[0] {
            // What the serving process sent before it ended still counts,
            // above all a BYE: poll reports the end and the BYE together
            // after a live upgrade, and a holder that missed the BYE would
            // restart a serving process beside its successor's.
            while keeping && sys::poll_readable(&[keeper.as_fd()], 0).is_ok_and(|r| r[0]) {
                keeping = take_kept(&keeper, kept, child);
            }
            while reading && sys::poll_readable(&[ours.as_fd()], 0).is_ok_and(|r| r[0]) {
                reading = take_checkpoint(&ours, last, &mut bye, child);
            }
            let how = sys::reap(child).map_err(HolderError::Watch)?;
            CHILD.store(0, Ordering::SeqCst);
            return Ok(Ended { how, bye });
        }
        if keeping && ready[2] {
            keeping = take_kept(&keeper, kept, child);
        }
        if reading && ready[1] {
            reading = take_checkpoint(&ours, last, &mut bye, child);
        }
    }
}

/// Takes one checkpoint or BYE from serving process `child`; false once
/// the socket is closed or broken (nothing more is read from it).
fn take_checkpoint(
    sock: &UnixStream,
    last: &mut Option<Checkpoint>,
    bye: &mut bool,
    child: libc::pid_t,
) -> bool {
    match handover::recv_state(sock) {
        Ok((blob, fds)) => *last = Some(Checkpoint { blob, fds }),
        Err(HandoverError::Unexpected { got: BYE, .. }) => *bye = true,
        Err(HandoverError::Closed) => return false,
        Err(e) => {
            warn!(
                "crash restart: bad checkpoint from pid {child}: {}",
                crate::error_chain(&e)
            );
            return false;
        }
    }
    true
}

/// Applies one KEEP or LET_GO from serving process `child`; false once
/// the socket is closed or broken (nothing more is read from it).
fn take_kept(sock: &UnixStream, kept: &mut KeptStore, child: libc::pid_t) -> bool {
    match handover::recv(sock).and_then(|m| kept.apply(m)) {
        Ok(()) => true,
        Err(HandoverError::Closed) => false,
        Err(e) => {
            warn!(
                "crash restart: bad keep message from pid {child}: {}",
                crate::error_chain(&e)
            );
            false
        }
    }
}

/// Gives a new serving process the last checkpoint; it answers READY once
/// it has rebuilt everything, and starts its queues on COMMIT.
fn hand_over(peer: &UnixStream, cp: &Checkpoint) -> Result<(), HandoverError> {
    peer.set_read_timeout(Some(crate::upgrade::handover::STEP_TIMEOUT))?;
    let fds: Vec<RawFd> = cp.fds.iter().map(AsRawFd::as_raw_fd).collect();
    handover::send_state(peer, &cp.blob, &fds)?;
    handover::expect(peer, handover::READY, "READY")?;
    handover::send(peer, handover::COMMIT, b"", &[])?;
    peer.set_read_timeout(None)?;
    Ok(())
}

/// This binary again, with the same arguments plus the holder's.
/// `fds`: the checkpoint socket, the keeper socket and the journal.
fn spawn(fds: [RawFd; 3], restart: bool) -> Result<libc::pid_t, HolderError> {
    let [sock, keeper, journal] = fds;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(serving_args(restart))
        .arg(format!("--holder-socket={sock}"))
        .arg(format!("--holder-keeper={keeper}"))
        .arg(format!("--holder-journal={journal}"));
    if restart {
        cmd.arg("--holder-restart");
    }
    // SAFETY: between fork and exec only fcntl and prctl are called, which
    // are async-signal-safe; the descriptors are open in the parent.
    unsafe {
        cmd.pre_exec(move || {
            // A holder killed outright takes its serving process along
            // (gracefully: SIGTERM ends it as a signal to the holder would).
            sys::die_with_parent(libc::SIGTERM)?;
            for fd in fds {
                sys::set_cloexec(fd, false)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(HolderError::Spawn)?;
    Ok(child.id() as libc::pid_t)
}

/// This process's arguments for a serving process: after a crash, without
/// `--handover-from` (a live upgrade that started this holder is over).
fn serving_args(restart: bool) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        if restart && a == "--handover-from" {
            args.next();
            continue;
        }
        if restart && a.to_string_lossy().starts_with("--handover-from=") {
            continue;
        }
        out.push(a);
    }
    out
}

fn describe(how: ChildEnd) -> String {
    match how {
        ChildEnd::Signaled(sig) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        // The PID-namespace supervisor passes a signal on as 128 + N.
        ChildEnd::Exited(code) if code > 128 => {
            format!(
                "was killed by signal {} ({})",
                code - 128,
                signal_name(code - 128)
            )
        }
        ChildEnd::Exited(code) => format!("exited with status {code} without saying goodbye"),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGABRT => "SIGABRT: abort or panic",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS: system call refused",
        _ => "signal",
    }
}

fn exit_status(how: ChildEnd) -> u8 {
    u8::try_from(how.code()).unwrap_or(1)
}

/// No more restarts. If a front-end is connected, the holder answers every
/// request from now on with EIO, from the last checkpoint and without
/// touching the file system, until the front-end leaves: the guest sees
/// errors, never a hang. Returns the exit status (1).
fn give_up(opt: &Opt, fallback: Fallback, last: Option<&Checkpoint>) -> u8 {
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

fn refuse_requests(opt: &Opt, fallback: Fallback, cp: &Checkpoint) -> Result<(), RefuseError> {
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
    let mut st = virtio_fs_ext::state::DaemonState::decode(&cp.blob)?;
    st.check(cp.fds.len())?;
    st.settings = crate::upgrade::trust::check_settings(&own, &st.settings, None, None)
        .map_err(crate::upgrade::handover::UpgradeError::Settings)?;
    let mut fds: Vec<Option<OwnedFd>> = cp.fds.iter().map(|f| f.try_clone().ok()).collect();
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
