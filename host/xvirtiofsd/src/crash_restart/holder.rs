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
//! A restarted process answers READY once it has rebuilt its tables; the
//! holder then answers COMMIT and it serves. While it rebuilds it sends
//! PROGRESS, and the holder waits for READY as long as progress comes: a
//! process that shows none for [`READY_WAIT`] is stuck and is stopped
//! (SIGKILL), which counts as a crash.
//!
//! After `N` crashes within `SECONDS` (`--crash-restart-limit`), or more
//! than `N` restarted processes in a row that never got as far as READY,
//! the holder stops restarting and says so ([`super::give_up`]); see
//! docs/crash-restart.md.
//!
//! A message the holder cannot take (a malformed checkpoint, keep message
//! or anything else) closes that socket: the serving process then gets an
//! error for everything it sends there, never a wait. After a bad message
//! on the checkpoint socket the last checkpoint is older than what the
//! process went on to serve: a crash of it is not restarted but given up.
//!
//! The holder does no file-system work and, until it gives up, handles no
//! guest input; signals it receives (SIGTERM, SIGINT, ...) go to the
//! serving process, and then its end is not a crash. Once started it keeps
//! no effective capability but those it needs to give up (CAP_SETPCAP,
//! CAP_SETUID, CAP_SETGID: to drop the rest and root for good); its serving
//! processes get theirs from the bounding set when they start.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use log::{error, info, warn};
use virtio_fs_ext::handover::{self, HandoverError, Msg};
use xvfs_fs::journal::Journal;

use crate::cli::Opt;
use crate::crash_restart::checkpoint::{BYE, PROGRESS};
use crate::crash_restart::give_up::{self, Fallback};
use crate::crash_restart::keeper::KeptStore;
use crate::sys::{self, ChildEnd};

/// Largest journal: nodes and handles (each at most this many).
const MAX_JOURNAL_SLOTS: usize = 1 << 20;
/// Longest pause before a restart after repeated crashes.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A serving process that lived this long did work: the next one starts at
/// once. One that died sooner makes the next wait (doubling, from 50 ms).
const HEALTHY: Duration = Duration::from_millis(500);
/// How long a restarted serving process may go without a sign of progress
/// (taking the checkpoint, PROGRESS, READY) before the holder stops it.
pub const READY_WAIT: Duration = Duration::from_secs(15);

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

/// Whether a signal told the holder to stop.
fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// CAP_SETGID, CAP_SETUID and CAP_SETPCAP: what giving up needs (dropping
/// every capability and root, [`give_up`]).
const GIVE_UP_CAPS: u64 = 1 << 6 | 1 << 7 | 1 << 8;

/// The last checkpoint: the state blob and its descriptors.
struct Checkpoint {
    blob: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// How one serving process ended.
struct Ended {
    how: ChildEnd,
    bye: bool,
    /// It was handed a checkpoint and never got as far as COMMIT.
    unready: bool,
    /// It showed no progress rebuilding for [`READY_WAIT`]: stopped.
    stalled: bool,
    /// Its checkpoint socket was closed after a bad message while it
    /// served: the last checkpoint is older than what it served.
    stale: bool,
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
    let mut crashes = CrashLog::new(opt.crash_restart_limit);
    let mut last: Option<Checkpoint> = None;
    // Files with no name left the guest holds (`keeper.rs`): they
    // outlive every serving process.
    let mut kept = KeptStore::default();
    // A rebuild comes to each journal entry (node or open file) once.
    let entries = 2 * slots as u64;
    loop {
        let started = Instant::now();
        let ended = serve_once(jfile.as_fd().as_raw_fd(), &mut last, &mut kept, entries)?;
        if ended.bye || stopping() {
            return Ok(exit_status(ended.how));
        }
        let reason = if ended.stalled {
            format!(
                "showed no progress rebuilding for {} s and was stopped",
                READY_WAIT.as_secs()
            )
        } else {
            describe(ended.how)
        };
        journal.record_crash(crate::ops::control::now_unix_ms(), &reason);
        if let Some(why) = crashes.record(&ended, started) {
            let (n, secs) = opt.crash_restart_limit;
            error!(
                "crash restart: the serving process {reason}{why}: giving up \
                 (--crash-restart-limit {n}/{secs})"
            );
            let last = last.as_ref().map(|cp| (&cp.blob[..], &cp.fds[..]));
            return Ok(give_up::run(opt, fallback, last, &journal, kept));
        }
        let backoff = crashes.backoff();
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
        if stopping() {
            // Told to stop while no serving process ran.
            return Ok(exit_status(ended.how));
        }
    }
}

/// The crashes seen, for `--crash-restart-limit N/SECONDS` and the pause
/// before a restart.
struct CrashLog {
    limit: (u32, u64),
    /// When each crash within the last SECONDS came.
    recent: VecDeque<Instant>,
    /// Restarted processes in a row that never got as far as READY.
    unready: usize,
    /// Serving processes in a row that lived less than [`HEALTHY`].
    short_lived: u32,
}

impl CrashLog {
    fn new(limit: (u32, u64)) -> CrashLog {
        CrashLog {
            limit,
            recent: VecDeque::new(),
            unready: 0,
            short_lived: 0,
        }
    }

    /// Counts a crash of a process started at `started`; why to give up,
    /// if it is time to.
    fn record(&mut self, ended: &Ended, started: Instant) -> Option<String> {
        let (n, secs) = self.limit;
        let now = Instant::now();
        let window = Duration::from_secs(secs);
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.recent.pop_front();
        }
        self.unready = if ended.unready { self.unready + 1 } else { 0 };
        self.short_lived = if started.elapsed() >= HEALTHY {
            0
        } else {
            self.short_lived + 1
        };
        if ended.stale {
            Some(
                " after its checkpoint socket was closed (the last checkpoint is out of date)"
                    .into(),
            )
        } else if self.recent.len() > n as usize {
            Some(format!(", {} times in {secs} s", self.recent.len()))
        } else if self.unready > n as usize {
            Some(format!(
                ", the {} restarted processes in a row that never got ready",
                self.unready
            ))
        } else {
            None
        }
    }

    /// The pause before the next restart.
    fn backoff(&self) -> Duration {
        match self.short_lived {
            0 => Duration::ZERO,
            n => (Duration::from_millis(50) * (1u32 << (n - 1).min(6))).min(MAX_BACKOFF),
        }
    }
}

/// Starts one serving process, hands it the last checkpoint if there is
/// one (a restart), and takes its checkpoints until it ends. `entries`:
/// the journal's size in entries, the most a rebuild can report.
fn serve_once(
    journal_fd: RawFd,
    last: &mut Option<Checkpoint>,
    kept: &mut KeptStore,
    entries: u64,
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
    let mut w = Watched::new(child, ours, keeper, entries);
    if let Some(cp) = last.as_ref() {
        w.hand_over(cp, kept);
    }
    loop {
        // Closed sockets are polled as -1 (ignored).
        let fds = [
            Some(pidfd.as_fd()),
            w.sock.as_ref().map(AsFd::as_fd),
            w.keeper.as_ref().map(AsFd::as_fd),
        ];
        let ready = sys::poll_readable_opt(&fds, w.poll_timeout()).map_err(HolderError::Watch)?;
        if ready[0] {
            // What the serving process sent before it ended still counts,
            // above all a BYE: poll reports the end and the BYE together
            // after a live upgrade, and a holder that missed the BYE would
            // restart a serving process beside its successor's.
            while w.keeper.as_ref().is_some_and(readable_now) {
                w.take_kept(kept);
            }
            while w.sock.as_ref().is_some_and(readable_now) {
                w.take_message(last);
            }
            let how = sys::reap(child).map_err(HolderError::Watch)?;
            CHILD.store(0, Ordering::SeqCst);
            return Ok(w.ended(how));
        }
        if ready[2] {
            w.take_kept(kept);
        }
        if ready[1] {
            w.take_message(last);
        }
        w.check_progress();
    }
}

fn readable_now(s: &UnixStream) -> bool {
    sys::poll_readable(&[s.as_fd()], 0).is_ok_and(|r| r[0])
}

/// One serving process, as the holder watches it.
struct Watched {
    child: libc::pid_t,
    /// The checkpoint socket; None once closed (by its end, or after a
    /// bad message).
    sock: Option<UnixStream>,
    /// The keeper socket; the same.
    keeper: Option<UnixStream>,
    /// A restart: READY is awaited until then (PROGRESS pushes it back);
    /// None before the handover and after COMMIT.
    ready_by: Option<Instant>,
    handed_over: Option<Instant>,
    /// The last PROGRESS count, and the most there can be.
    progress: u64,
    entries: u64,
    /// A fresh process, or a restarted one after COMMIT.
    serving: bool,
    bye: bool,
    stalled: bool,
    stale: bool,
}

impl Watched {
    fn new(child: libc::pid_t, sock: UnixStream, keeper: UnixStream, entries: u64) -> Watched {
        Watched {
            child,
            sock: Some(sock),
            keeper: Some(keeper),
            ready_by: None,
            handed_over: None,
            progress: 0,
            entries,
            serving: true,
            bye: false,
            stalled: false,
            stale: false,
        }
    }

    fn ended(&self, how: ChildEnd) -> Ended {
        Ended {
            how,
            bye: self.bye,
            unready: !self.serving,
            stalled: self.stalled,
            stale: self.stale,
        }
    }

    /// Gives a restarted process what the holder kept and the last
    /// checkpoint; each write waits at most [`READY_WAIT`] for it to read.
    fn hand_over(&mut self, cp: &Checkpoint, kept: &KeptStore) {
        self.serving = false;
        self.handed_over = Some(Instant::now());
        let (Some(sock), Some(keeper)) = (&self.sock, &self.keeper) else {
            return;
        };
        match send_checkpoint(sock, keeper, cp, kept) {
            Ok(()) => self.ready_by = Some(Instant::now() + READY_WAIT),
            Err(e) => {
                warn!(
                    "crash restart: the new serving process (pid {}) did not take the state ({}): \
                     it is stopped",
                    self.child,
                    crate::error_chain(&e)
                );
                self.stop();
            }
        }
    }

    /// How long poll may wait: until READY is due.
    fn poll_timeout(&self) -> i32 {
        match self.ready_by.filter(|_| !self.stalled) {
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX)
            }
            None => -1,
        }
    }

    /// Stops a restarted process that showed no progress for [`READY_WAIT`].
    fn check_progress(&mut self) {
        if self.stalled || self.ready_by.is_none_or(|t| Instant::now() < t) {
            return;
        }
        error!(
            "crash restart: the new serving process (pid {}) showed no progress rebuilding for {} \
             s ({} journal entries done): it is stopped",
            self.child,
            READY_WAIT.as_secs(),
            self.progress
        );
        self.stalled = true;
        self.stop();
    }

    fn stop(&self) {
        // Not reaped yet: the pid is still this child's.
        sys::kill(self.child, libc::SIGKILL);
    }

    /// Takes one message from the checkpoint socket; a bad one closes it.
    fn take_message(&mut self, last: &mut Option<Checkpoint>) {
        let Some(sock) = self.sock.take() else {
            return;
        };
        match handover::recv(&sock).and_then(|m| self.on_message(&sock, m, last)) {
            Ok(()) => self.sock = Some(sock),
            // Its end closed or broke (it is ending): nothing more to read.
            Err(HandoverError::Closed | HandoverError::Io(_)) => {}
            // Dropping the socket closes it: the serving process's next
            // send fails instead of waiting for a reader.
            Err(e) => self.bad_message(&e),
        }
    }

    fn on_message(
        &mut self,
        sock: &UnixStream,
        m: Msg,
        last: &mut Option<Checkpoint>,
    ) -> Result<(), HandoverError> {
        let rebuilding = self.ready_by.is_some();
        match m.kind {
            BYE => self.bye = true,
            handover::READY if rebuilding => self.ready(sock),
            PROGRESS if rebuilding => self.progressed(&m.payload),
            handover::FAILED if rebuilding => warn!(
                "crash restart: the new serving process (pid {}) refused the state: {}",
                self.child,
                handover::text(&m.payload)
            ),
            _ => {
                let (blob, fds) = handover::recv_state_after(sock, m)?;
                *last = Some(Checkpoint { blob, fds });
            }
        }
        Ok(())
    }

    /// READY: the restarted process serves from now on (COMMIT).
    fn ready(&mut self, sock: &UnixStream) {
        if self.stalled {
            info!(
                "crash restart: pid {} answered READY after it was stopped",
                self.child
            );
            return;
        }
        self.ready_by = None;
        self.serving = true;
        if let Err(e) = handover::send(sock, handover::COMMIT, b"", &[]) {
            // It ended: the watch sees it.
            warn!("crash restart: cannot send COMMIT: {e}");
            return;
        }
        info!(
            "crash restart: the new serving process (pid {}) is ready after {} ms (progress \
             last reported: {} journal entries)",
            self.child,
            self.handed_over.map_or(0, |t| t.elapsed().as_millis()),
            self.progress
        );
    }

    /// PROGRESS: a count of journal entries, above the last and within
    /// the journal, pushes READY's deadline back.
    fn progressed(&mut self, payload: &[u8]) {
        let count = payload
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if let Some(n) = count.filter(|&n| n > self.progress && n <= self.entries) {
            self.progress = n;
            self.ready_by = Some(Instant::now() + READY_WAIT);
        }
    }

    fn bad_message(&mut self, e: &HandoverError) {
        let why = crate::error_chain(e);
        if self.serving {
            self.stale = true;
            warn!(
                "crash restart: bad message from pid {} ({why}): its checkpoint socket is closed; \
                 should it crash now, its last checkpoint is out of date and is not restarted",
                self.child
            );
        } else {
            warn!(
                "crash restart: bad message from the new serving process (pid {}) ({why}): it is \
                 stopped",
                self.child
            );
            self.stop();
        }
    }

    /// Applies one KEEP or LET_GO; a bad message closes the keeper socket.
    fn take_kept(&mut self, kept: &mut KeptStore) {
        let Some(sock) = self.keeper.take() else {
            return;
        };
        match handover::recv(&sock).and_then(|m| kept.apply(m)) {
            Ok(()) => self.keeper = Some(sock),
            Err(HandoverError::Closed | HandoverError::Io(_)) => {}
            Err(e) => warn!(
                "crash restart: bad keep message from pid {} ({}): its keeper socket is closed; \
                 files it has from now on that lose their name do not survive a crash",
                self.child,
                crate::error_chain(&e)
            ),
        }
    }
}

/// Sends a restarted process what the holder kept, then the checkpoint,
/// each write waiting at most [`READY_WAIT`] for the process to read.
fn send_checkpoint(
    sock: &UnixStream,
    keeper: &UnixStream,
    cp: &Checkpoint,
    kept: &KeptStore,
) -> Result<(), HandoverError> {
    sock.set_write_timeout(Some(READY_WAIT))?;
    keeper.set_write_timeout(Some(READY_WAIT))?;
    kept.send_all(keeper)?;
    let fds: Vec<RawFd> = cp.fds.iter().map(AsRawFd::as_raw_fd).collect();
    handover::send_state(sock, &cp.blob, &fds)?;
    sock.set_write_timeout(None)?;
    keeper.set_write_timeout(None)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(unready: bool, stale: bool) -> Ended {
        Ended {
            how: ChildEnd::Signaled(libc::SIGKILL),
            bye: false,
            unready,
            stalled: unready,
            stale,
        }
    }

    #[test]
    fn restarts_that_never_get_ready_end_in_giving_up_whatever_their_pace() {
        // Each crash leaves the window before the next (as a 15 s stall
        // does with a shorter window).
        let mut log = CrashLog::new((2, 10));
        let long_ago = Instant::now() - HEALTHY;
        for _ in 0..2 {
            assert_eq!(log.record(&ended(true, false), long_ago), None);
            log.recent.clear();
        }
        let why = log.record(&ended(true, false), long_ago).unwrap();
        assert!(why.contains("3 restarted processes in a row"), "{why}");
        // One that got ready starts the count again.
        let mut log = CrashLog::new((2, 10));
        log.record(&ended(true, false), long_ago);
        log.record(&ended(false, false), long_ago);
        log.recent.clear();
        assert_eq!(log.record(&ended(true, false), long_ago), None);
        assert_eq!(log.backoff(), Duration::ZERO, "each lived long enough");
    }

    #[test]
    fn a_crash_after_the_checkpoint_socket_was_closed_is_given_up() {
        let mut log = CrashLog::new((5, 60));
        let why = log.record(&ended(false, true), Instant::now()).unwrap();
        assert!(why.contains("out of date"), "{why}");
    }

    #[test]
    fn progress_pushes_the_deadline_back_only_when_it_advances() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (k, _l) = UnixStream::pair().unwrap();
        let mut w = Watched::new(1, a, k, 10);
        let soon = Instant::now() + Duration::from_millis(1);
        w.ready_by = Some(soon);
        for (count, advances) in [
            (3u64, true),
            (3, false),
            (2, false),
            (11, false),
            (10, true),
        ] {
            w.ready_by = Some(soon);
            w.progressed(&count.to_le_bytes());
            assert_eq!(w.ready_by != Some(soon), advances, "{count}");
        }
        w.ready_by = Some(soon);
        w.progressed(b"short");
        assert_eq!(w.ready_by, Some(soon), "a short payload is no progress");
    }
}
