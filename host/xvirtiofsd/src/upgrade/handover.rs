// SPDX-License-Identifier: Apache-2.0
//! Live upgrade: hand the live vhost-user connection, the guest memory, the
//! eventfds and the open files to a new daemon without the guest noticing.
//!
//! 1. `xvirtiofsd upgrade --control SOCK [--binary NEW]` starts `NEW
//!    --handover-from SOCK`, detached, outside any sandbox.
//! 2. The new daemon connects to the control socket and asks for a handover.
//! 3. The old daemon, between two vhost-user messages, stops every queue at a
//!    request boundary (requests in flight complete), and sends its state and
//!    descriptors (`virtio_fs_ext::handover`).
//! 4. The new daemon validates and restores everything, enters its sandbox and
//!    answers READY; the old one answers COMMIT and exits; the new one starts
//!    its queues and serves the same connection.
//!
//! Any failure before READY (the new binary does not start, sends garbage,
//! dies, times out, or rejects the state) makes the old daemon kill it and
//! resume its queues: the guest sees a short pause and nothing else.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::FsServer as Server;
use log::{info, warn};
use virtio_fs_ext::handover::{self, HandoverError};
use virtio_fs_ext::settings::Settings;
use virtio_fs_ext::state::{DaemonState, StateError};

use crate::sys;
use crate::vhost_user::{Connection, Device};
use crate::VERSION;

/// How long either side waits for the other at each step.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("handover protocol")]
    Handover(#[from] HandoverError),
    #[error("state")]
    State(#[from] StateError),
    #[error("control socket {0}")]
    Control(PathBuf, #[source] io::Error),
    #[error("cannot start {0}")]
    Spawn(PathBuf, #[source] io::Error),
    #[error("the new daemon did not confirm the upgrade{0}")]
    NotConfirmed(String),
    #[error("descriptor {0} of the state is missing or used twice")]
    FdMissing(u32),
    #[error("the peer on the control socket runs as uid {0}, neither root nor this process's uid: not trusted")]
    UntrustedPeer(u32),
    #[error("the running daemon's settings differ from this daemon's command line: {0}")]
    Settings(String),
    #[error("incompatible state formats: {0}")]
    Incompatible(String),
}

/// What the old daemon puts beside its device and file system.
pub struct Outgoing<'a> {
    pub settings: &'a Settings,
    pub started_unix_ms: u64,
    pub upgrades: u32,
    pub control_fd: Option<RawFd>,
    pub control_path: Option<String>,
    pub pid_files: &'a [RawFd],
    pub server: &'a Server,
}

/// Old side. On success the caller exits; on error the queues are running again.
pub fn hand_over(
    out: &Outgoing<'_>,
    dev: &mut Device,
    conn: &Connection,
    peer: UnixStream,
) -> Result<(), UpgradeError> {
    peer.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(HandoverError::Io)?;
    let hello = handover::expect(&peer, handover::HELLO, "HELLO")?;
    let successor = handover::text(&hello.payload);
    // A successor that says which state formats it reads gets the newest
    // this build writes among them; one that reads none (a rollback too
    // far), or whose newest cannot carry this state, is refused before
    // anything stops: the guest sees no pause at all.
    let version = match format_for(out.settings, dev.has_dax_window(), &hello.payload) {
        Ok(v) => v,
        Err(why) => {
            let _ = handover::send(&peer, handover::ABORT, why.as_bytes(), &[]);
            warn!("upgrade refused, this daemon keeps serving (no pause): {why} ({successor})");
            return Err(UpgradeError::Incompatible(why));
        }
    };
    let started = Instant::now();
    info!("upgrade: handing over to {successor} (state format {version})");
    // A front-end that sent a message waits for its answer, which the
    // successor gives: it reads no DAX map request meanwhile.
    let front_end_waits = sys::poll_readable(&[conn.stream().as_fd()], 0)
        .map(|r| r[0])
        .unwrap_or(true);
    dev.quiesce_for_handover(front_end_waits);
    let result = send_everything(out, dev, conn, &peer, version);
    match result {
        Ok(()) => {
            info!(
                "upgrade: handover complete in {} µs; this daemon exits",
                started.elapsed().as_micros()
            );
            Ok(())
        }
        Err(e) => {
            // The successor may hold our descriptors: ABORT tells it never to
            // serve (it waits for COMMIT before it starts any queue), and
            // `xvirtiofsd upgrade` kills a successor that does not confirm.
            // (Not kill(2) from here: the sandboxed daemon may not signal.)
            let _ = handover::send(&peer, handover::ABORT, e.to_string().as_bytes(), &[]);
            if let Err(re) = dev.resume() {
                warn!("upgrade: cannot resume a queue: {re}");
            }
            warn!(
                "upgrade failed, this daemon keeps serving ({} µs pause): {}",
                started.elapsed().as_micros(),
                crate::error_chain(&e)
            );
            Err(e)
        }
    }
}

/// The state format to write for the successor whose HELLO is `hello`:
/// the newest this build writes that the successor reads, if it can carry
/// `settings` (and a DAX window, if `dax`). A HELLO that does not say (a
/// build before release 0.2.0) gets the current format, and the successor
/// checks it.
fn format_for(settings: &Settings, dax: bool, hello: &[u8]) -> Result<u32, String> {
    use virtio_fs_ext::frame::{FORMAT_VERSION, MIN_FORMAT_VERSION};
    let Some(reads) = handover::hello_reads_state(hello) else {
        return Ok(FORMAT_VERSION);
    };
    let Some(version) = (MIN_FORMAT_VERSION..=FORMAT_VERSION)
        .rev()
        .find(|v| reads.contains(v))
    else {
        return Err(format!(
            "the new daemon reads state formats {}-{}, this daemon writes {MIN_FORMAT_VERSION}-{FORMAT_VERSION}",
            reads.start(),
            reads.end()
        ));
    };
    if dax && version < 8 {
        return Err(format!(
            "the new daemon reads state formats {}-{}: a DAX window needs format 8",
            reads.start(),
            reads.end()
        ));
    }
    DaemonState::representable_as(settings, version).map_err(|e| {
        format!(
            "the new daemon reads state formats {}-{}: {e}",
            reads.start(),
            reads.end()
        )
    })?;
    Ok(version)
}

fn send_everything(
    out: &Outgoing<'_>,
    dev: &Device,
    conn: &Connection,
    peer: &UnixStream,
    version: u32,
) -> Result<(), UpgradeError> {
    let (state, fds) = daemon_state(out, dev, conn.stream().as_raw_fd(), true);
    let blob = state.encode_as(version)?;
    handover::send_state(peer, &blob, &fds)?;
    handover::expect(peer, handover::READY, "READY")?;
    handover::send(peer, handover::COMMIT, b"", &[])?;
    Ok(())
}

/// Everything a successor needs, and the descriptors its indices refer to
/// (borrowed). Without `with_fs` (a crash-restart checkpoint) the file
/// system and FUSE session are left out: the journal has them.
pub fn daemon_state(
    out: &Outgoing<'_>,
    dev: &Device,
    conn_fd: RawFd,
    with_fs: bool,
) -> (DaemonState, Vec<RawFd>) {
    let mut fds: Vec<RawFd> = vec![conn_fd];
    let control_socket_fd = out.control_fd.map(|fd| {
        fds.push(fd);
        (fds.len() - 1) as u32
    });
    fds.push(2);
    let log_fd = Some((fds.len() - 1) as u32);
    let pid_file_fds = out
        .pid_files
        .iter()
        .map(|&fd| {
            fds.push(fd);
            (fds.len() - 1) as u32
        })
        .collect();
    let device = dev.export(&mut fds);
    // Before the file system's descriptors, which run to the end. A
    // checkpoint keeps the back-end channel but not the mappings: they
    // change with every request, and the front-end keeps them anyway.
    let dax = dev.export_dax(&mut fds, with_fs);
    let snap = if with_fs {
        out.server.fs().snapshot()
    } else {
        out.server.fs().empty_snapshot()
    };
    let fs_fd_base = fds.len() as u32;
    fds.extend(snap.fds);
    let state = DaemonState {
        writer_version: VERSION.to_string(),
        writer_pid: crate::confine::sandbox::serving_pid(),
        started_unix_ms: out.started_unix_ms,
        upgrades: out.upgrades,
        settings: out.settings.clone(),
        vhost_socket_fd: 0,
        control_socket_fd,
        control_path: out.control_path.clone(),
        log_fd,
        pid_file_fds,
        device,
        fs: snap.state,
        session: out.server.session().filter(|_| with_fs),
        fs_fd_base,
        dax,
    };
    (state, fds)
}

/// Test hooks for the failure tests, chosen with XVFS_UPGRADE_FAULT in the new
/// daemon's environment. Only a build with the `fault-injection` feature reads
/// that variable; any other build always has [`Fault::None`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Exit before contacting the old daemon.
    ExitAtStart,
    /// Flip a byte of the received state (it must be rejected).
    CorruptState,
    /// Claim the state is of a newer format (it must be rejected).
    NewerFormat,
    /// Answer with a message that is not READY.
    Garbage,
    /// Die in the middle of receiving the state.
    DieMidway,
}

impl Fault {
    #[cfg(not(feature = "fault-injection"))]
    pub fn from_env() -> Fault {
        Fault::None
    }

    #[cfg(feature = "fault-injection")]
    pub fn from_env() -> Fault {
        match std::env::var("XVFS_UPGRADE_FAULT").as_deref() {
            Ok("exit-at-start") => Fault::ExitAtStart,
            Ok("corrupt-state") => Fault::CorruptState,
            Ok("newer-format") => Fault::NewerFormat,
            Ok("garbage") => Fault::Garbage,
            Ok("die-midway") => Fault::DieMidway,
            _ => Fault::None,
        }
    }
}

/// What the new daemon received.
pub struct Incoming {
    pub peer: UnixStream,
    pub state: DaemonState,
    fds: Vec<Option<OwnedFd>>,
}

impl Incoming {
    /// Takes the descriptor at `index` (each at most once).
    pub fn take(&mut self, index: u32) -> io::Result<OwnedFd> {
        self.fds
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("descriptor {index} missing or used twice"),
                )
            })
    }

    /// The descriptor at `index`, if not taken yet, without taking it.
    pub fn peek(&self, index: u32) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.fds
            .get(index as usize)
            .and_then(Option::as_ref)
            .map(AsFd::as_fd)
    }

    /// The file-system descriptors, in the order of their indices.
    pub fn take_fs_fds(&mut self) -> Vec<OwnedFd> {
        let base = self.state.fs_fd_base as usize;
        self.fds
            .iter_mut()
            .skip(base)
            .filter_map(Option::take)
            .collect()
    }

    /// Tells the old daemon why the takeover failed (it resumes serving).
    pub fn fail(&self, reason: &str) {
        let _ = handover::send(&self.peer, handover::FAILED, reason.as_bytes(), &[]);
    }

    /// READY, then wait for COMMIT (or the old daemon's exit).
    pub fn confirm(&self) -> Result<(), UpgradeError> {
        if Fault::from_env() == Fault::Garbage {
            handover::send(&self.peer, 99, b"garbage", &[])?;
        } else {
            handover::send(&self.peer, handover::READY, b"", &[])?;
        }
        match handover::expect(&self.peer, handover::COMMIT, "COMMIT") {
            Ok(_) | Err(HandoverError::Closed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// New side, first step: connect to the control socket and check who
/// listens there (root or this uid), sending nothing yet.
pub fn connect(control: &Path) -> Result<UnixStream, UpgradeError> {
    if Fault::from_env() == Fault::ExitAtStart {
        std::process::exit(1);
    }
    let peer =
        UnixStream::connect(control).map_err(|e| UpgradeError::Control(control.into(), e))?;
    // Whoever listens on the socket must be as privileged as this process,
    // or it could hand over anything. Nothing is sent before this check.
    match sys::peer_trusted(peer.as_fd()) {
        Ok(Ok(())) => Ok(peer),
        Ok(Err(uid)) => Err(UpgradeError::UntrustedPeer(uid)),
        Err(e) => Err(UpgradeError::Control(control.into(), e)),
    }
}

/// New side: ask the daemon behind `control` (connected and checked by
/// [`connect`]) for its state.
pub fn receive(peer: UnixStream, control: &Path) -> Result<Incoming, UpgradeError> {
    let fault = Fault::from_env();
    peer.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(|e| UpgradeError::Control(control.into(), e))?;
    (&peer)
        .write_all(b"handover\n")
        .map_err(|e| UpgradeError::Control(control.into(), e))?;
    handover::send(
        &peer,
        handover::HELLO,
        handover::hello_payload(VERSION, crate::confine::sandbox::daemon_pid()).as_bytes(),
        &[],
    )?;
    if fault == Fault::DieMidway {
        let _ = handover::recv(&peer);
        // SAFETY: abort takes no arguments; this is the fault being tested.
        unsafe { libc::abort() };
    }
    let (mut blob, fds) = handover::recv_state(&peer)?;
    match fault {
        Fault::CorruptState if blob.len() > 40 => {
            let i = blob.len() / 2;
            blob[i] ^= 0x5a;
        }
        Fault::NewerFormat if blob.len() > 12 => {
            blob[8..12].copy_from_slice(&(virtio_fs_ext::frame::FORMAT_VERSION + 1).to_le_bytes());
        }
        _ => {}
    }
    incoming(peer, &blob, fds)
}

/// New side, before [`receive`]: the running daemon's inode descriptors
/// (`preload\n` on the control socket), sent while it still serves.
pub fn receive_preload(peer: UnixStream) -> Result<Vec<OwnedFd>, UpgradeError> {
    peer.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(HandoverError::Io)?;
    (&peer).write_all(b"preload\n").map_err(HandoverError::Io)?;
    let (blob, fds) = handover::recv_state(&peer)?;
    if !blob.is_empty() {
        return Err(HandoverError::Malformed("a preload carries descriptors only").into());
    }
    Ok(fds)
}

/// A crash restart: the state comes from the holder (a crashed serving
/// process's last checkpoint), over the socket it gave this process.
pub fn receive_from_holder(peer: UnixStream) -> Result<Incoming, UpgradeError> {
    peer.set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(HandoverError::Io)?;
    let (blob, fds) = handover::recv_state(&peer)?;
    incoming(peer, &blob, fds)
}

/// Decodes and checks a received state; a refusal is reported to the peer.
fn incoming(peer: UnixStream, blob: &[u8], fds: Vec<OwnedFd>) -> Result<Incoming, UpgradeError> {
    let incoming = Incoming {
        state: match DaemonState::decode(blob).and_then(|s| s.check(fds.len()).map(|()| s)) {
            Ok(s) => s,
            Err(e) => {
                let _ = handover::send(
                    &peer,
                    handover::FAILED,
                    crate::error_chain(&e).as_bytes(),
                    &[],
                );
                return Err(e.into());
            }
        },
        peer,
        fds: fds.into_iter().map(Some).collect(),
    };
    info!(
        "received the state of {} ({} descriptors, {} inodes, {} open files)",
        incoming.state.writer_version,
        incoming.fds.len(),
        incoming.state.fs.inodes.len(),
        incoming.state.fs.handles.len()
    );
    Ok(incoming)
}

/// `xvirtiofsd upgrade`: starts the new binary and reports how it went.
/// Waits up to `timeout` for process `pid` to exit (or become a zombie);
/// false when it still runs then.
pub fn wait_exited(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while sys::process_running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

pub fn run_client(
    control: &Path,
    binary: &Path,
    daemon_args: &[String],
    timeout: Duration,
) -> Result<String, UpgradeError> {
    let mut child = Command::new(binary);
    child
        .arg("--handover-from")
        .arg(control)
        .args(daemon_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: setsid is async-signal-safe; the closure touches nothing else.
    unsafe {
        child.pre_exec(sys::new_session);
    }
    let started = Instant::now();
    let mut child = child
        .spawn()
        .map_err(|e| UpgradeError::Spawn(binary.into(), e))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| UpgradeError::NotConfirmed(": no output pipe".into()))?;
    // Read the new daemon's confirmation line, bounded in time.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(timeout).unwrap_or_default();
    if let Some(rest) = line.strip_prefix("XVFS-UPGRADED ") {
        // Let the child go on alone; it is the daemon now.
        drop(child);
        return Ok(format!(
            "{} (in {} ms)",
            rest.trim(),
            started.elapsed().as_millis()
        ));
    }
    let status = match child.try_wait() {
        Ok(Some(s)) => format!(": it exited ({s})"),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            ": no confirmation in time".to_string()
        }
    };
    Err(UpgradeError::NotConfirmed(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_exited_sees_exit_and_zombies_but_not_a_running_process() {
        assert!(sys::process_running(std::process::id()));
        // Exits at once and stays a zombie (not reaped) until wait() below.
        let mut quick = Command::new("true").spawn().expect("spawn true");
        assert!(wait_exited(quick.id(), Duration::from_secs(10)));
        quick.wait().expect("reap true");
        assert!(!sys::process_running(quick.id()));

        let mut slow = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        assert!(!wait_exited(slow.id(), Duration::from_millis(50)));
        slow.kill().expect("kill sleep");
        slow.wait().expect("reap sleep");
    }
}
