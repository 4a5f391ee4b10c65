// SPDX-License-Identifier: Apache-2.0
//! The control socket: a Unix socket beside the daemon, for `xvirtiofsd status`
//! and for a successor daemon to request a handover.
//!
//! Protocol: the client sends one line.
//! - `status\n`: the daemon answers one JSON object (version, pid, uptime,
//!   upgrades, connection, per-queue counters) and closes.
//! - `preload\n`: a successor, before it asks for the handover, is sent a
//!   descriptor of each inode the guest holds (one `send_state` of
//!   `virtio_fs_ext::handover` with an empty blob) while this daemon goes
//!   on serving, to prove them inside the share before the pause.
//! - `handover\n`: the connection becomes the handover channel (see
//!   `virtio_fs_ext::handover`); the serving thread takes it between two
//!   vhost-user messages.
//!
//! Default path: `/run/xvirtiofsd/<pid>.sock`, named after the pid of the
//! process that was started (with `--crash-restart`, the holder: the same
//! name as the record of its first start, `crate::upgrade::record`); it
//! stays the same across live upgrades and crash restarts (the listening
//! socket itself is handed over).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{info, warn};

use serde::{Deserialize, Serialize};

use crate::ops::metrics::{queue_reports, QueueReport, QueueStats};
use crate::sys;

/// Directory of the default control sockets.
pub const DEFAULT_DIR: &str = "/run/xvirtiofsd";

/// Default control socket of the daemon with this pid.
pub fn default_path(pid: u32) -> PathBuf {
    Path::new(DEFAULT_DIR).join(format!("{pid}.sock"))
}

/// What `status` reports.
#[derive(Debug)]
pub struct StatusInfo {
    pub version: &'static str,
    pub started_unix_ms: u64,
    pub upgrades: u32,
    pub shared_dir: String,
    /// The vhost-user connection, as `socket:[inode]`: the same before and
    /// after an upgrade.
    pub connection: String,
    pub control_path: String,
    pub stats: OnceLock<Vec<Arc<QueueStats>>>,
    /// With --crash-restart: the journal (restarts, replays, last crash).
    pub journal: Option<&'static xvfs_fs::journal::Journal>,
}

/// Crash restart, in a `status` reply.
#[derive(Debug, Serialize)]
pub struct CrashReport {
    /// The holder (the process whoever started the daemon knows).
    pub holder_pid: u32,
    /// Serving processes started after a crash.
    pub restarts: u64,
    /// Requests in flight at a crash answered after it.
    pub replayed: u64,
    /// Unix time (ms) of the last crash.
    pub last_crash_unix_ms: Option<u64>,
    /// How the last serving process to crash ended.
    pub last_crash: Option<String>,
}

pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The `status` reply.
#[derive(Debug, Serialize)]
pub struct StatusReply {
    pub version: String,
    /// The git commit of the build.
    pub commit: String,
    /// Each encoded format: the version written and the versions read.
    pub formats: Vec<FormatReport>,
    pub pid: u32,
    /// The host pid of the process that holds the connection (the
    /// supervisor's child with --sandbox namespace).
    pub serving_pid: u32,
    pub uptime_s: u64,
    pub upgrades: u32,
    pub shared_dir: String,
    pub connection: String,
    pub control: String,
    pub queues: Vec<QueueReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_restart: Option<CrashReport>,
    /// The daemon runs in a user namespace of its own (`--uid-map`, or not
    /// root): it cannot be live-upgraded.
    pub user_namespace: bool,
}

/// One encoded format, in a `status` reply.
#[derive(Debug, Serialize)]
pub struct FormatReport {
    pub name: &'static str,
    pub writes: u32,
    /// Oldest and newest version read.
    pub reads: [u32; 2],
}

/// The part of a `status` reply the command-line client reads back.
#[derive(Debug, Deserialize)]
pub struct StatusSummary {
    pub pid: u32,
    #[serde(default)]
    pub serving_pid: u32,
    #[serde(default)]
    pub connection: String,
    #[serde(default)]
    pub user_namespace: bool,
}

impl StatusInfo {
    pub fn reply(&self) -> StatusReply {
        StatusReply {
            version: self.version.to_string(),
            commit: crate::COMMIT.to_string(),
            formats: virtio_fs_ext::formats::all()
                .into_iter()
                .map(|f| FormatReport {
                    name: f.name,
                    writes: f.writes,
                    reads: [*f.reads.start(), *f.reads.end()],
                })
                .collect(),
            pid: crate::confine::sandbox::daemon_pid(),
            serving_pid: crate::confine::sandbox::serving_pid(),
            uptime_s: now_unix_ms().saturating_sub(self.started_unix_ms) / 1000,
            upgrades: self.upgrades,
            shared_dir: self.shared_dir.clone(),
            connection: self.connection.clone(),
            control: self.control_path.clone(),
            queues: self.stats.get().map_or(Vec::new(), |s| queue_reports(s)),
            crash_restart: self.journal.map(|j| {
                let last = j.last_crash();
                CrashReport {
                    holder_pid: j.holder_pid(),
                    restarts: j.restarts(),
                    replayed: j.replayed(),
                    last_crash_unix_ms: last.as_ref().map(|l| l.0),
                    last_crash: last.map(|l| l.1),
                }
            }),
            user_namespace: crate::confine::idmap::in_user_namespace(),
        }
    }

    /// The `status` reply as one line of JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(&self.reply()).unwrap_or_default()
    }
}

/// Creates the control socket (removing a stale one), mode 0600; the default
/// directory is created 0700 and must be this user's.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        if dir == Path::new(DEFAULT_DIR) {
            crate::socket::private_dir(dir)?;
            remove_stale(dir);
        }
    }
    if UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
    crate::socket::bind(path, 0o600, None)
}

/// Removes sockets of daemons that are gone, and the records of their
/// first start's options (`PID.sock.args`, see [`crate::upgrade::record`]) once
/// nothing serves the socket and process PID is gone too (a daemon that
/// has just written its record has not bound its socket yet).
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "sock") && UnixStream::connect(&p).is_err() {
            let _ = std::fs::remove_file(&p);
        }
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_suffix(".sock.args") else {
            continue;
        };
        let gone = pid.parse::<u32>().is_ok_and(|n| !sys::process_running(n));
        if gone && UnixStream::connect(dir.join(format!("{pid}.sock"))).is_err() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A pending handover request, taken by the serving thread.
pub type HandoverSlot = Arc<Mutex<Option<UnixStream>>>;

/// The descriptors a successor preloads (`preload\n`): one per inode the
/// guest holds, duplicated for the control thread.
pub type PreloadSource = Arc<dyn Fn() -> Vec<OwnedFd> + Send + Sync>;

/// Serves the control socket on its own thread, until it has queued a
/// handover request: from then on the successor, which shares the listening
/// socket, must be the only one to accept (this daemon may exit at any
/// moment). The thread then ends and returns the listener; if the handover
/// fails, the serving thread spawns it again.
pub fn spawn(
    listener: UnixListener,
    info: Arc<StatusInfo>,
    slot: HandoverSlot,
    wake: Arc<OwnedFd>,
    preload: PreloadSource,
) -> io::Result<JoinHandle<UnixListener>> {
    std::thread::Builder::new()
        .name("xvfs-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => {
                        if handle(s, &info, &slot, &wake, &preload) {
                            break;
                        }
                    }
                    Err(e) => warn!("control socket: {e}"),
                }
            }
            listener
        })
}

fn read_line(s: &mut UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < 64 {
        // A signal (e.g. glibc's set-id broadcast to every thread) ends a
        // read with a timeout early: not the client's doing.
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&line).trim().to_string())
}

/// Answers one client; true when it queued a handover request.
fn handle(
    mut s: UnixStream,
    info: &StatusInfo,
    slot: &HandoverSlot,
    wake: &OwnedFd,
    preload: &PreloadSource,
) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let cmd = match read_line(&mut s) {
        Ok(c) => c,
        Err(_) => return false,
    };
    match cmd.as_str() {
        "status" => {
            let _ = s.write_all(info.json().as_bytes());
            let _ = s.write_all(b"\n");
        }
        "handover" | "preload" if crate::confine::idmap::in_user_namespace() => {
            warn!("control: {cmd} refused: this daemon runs in a user namespace");
            let _ = s.write_all(
                b"error: a daemon in a user namespace (--uid-map/--gid-map, or not root) \
                  cannot be live-upgraded\n",
            );
        }
        "preload" => {
            if trusted(&s, &cmd) {
                let fds = preload();
                let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
                match virtio_fs_ext::handover::send_state(&s, b"", &raw) {
                    Ok(()) => info!(
                        "control: {} inodes sent for a successor to preload",
                        raw.len()
                    ),
                    Err(e) => warn!("control: preload: {e}"),
                }
            }
        }
        "handover" => {
            if !trusted(&s, &cmd) {
                return false;
            }
            let mut pending = slot.lock().unwrap_or_else(|p| p.into_inner());
            if pending.is_some() {
                let _ = s.write_all(b"error: a handover is already in progress\n");
                return false;
            }
            info!("control: handover requested");
            *pending = Some(s);
            let _ = sys::eventfd_signal(wake.as_fd());
            return true;
        }
        other => {
            let _ = s.write_all(format!("error: unknown command `{other}`\n").as_bytes());
        }
    }
    false
}

/// Whether the client may have this daemon's descriptors (root or this
/// uid); a refusal is logged and told.
fn trusted(mut s: &UnixStream, cmd: &str) -> bool {
    match sys::peer_trusted(s.as_fd()) {
        Ok(Ok(())) => true,
        Ok(Err(uid)) => {
            warn!("control: {cmd} request from uid {uid} refused");
            let _ = s.write_all(b"error: not trusted\n");
            false
        }
        Err(e) => {
            warn!("control: {cmd} request refused: {e}");
            false
        }
    }
}

/// The `"pid"` field of a status answer (see [`StatusReply`]), parsed as
/// JSON.
pub fn status_pid(status: &str) -> Option<u32> {
    serde_json::from_str::<StatusSummary>(status.trim())
        .ok()
        .map(|s| s.pid)
}

/// Client side of `status`: the daemon's JSON line.
pub fn query_status(path: &Path) -> io::Result<String> {
    query_status_on(UnixStream::connect(path)?)
}

/// `status` over a connected control socket (whose peer the caller may
/// have checked first).
pub fn query_status_on(mut s: UnixStream) -> io::Result<String> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"status\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_pid_reads_the_pid_field() {
        assert_eq!(
            status_pid(r#"{"version":"0.1.0","pid":4242,"uptime_s":3}"#),
            Some(4242)
        );
        assert_eq!(status_pid(r#"{"pid":7}"#), Some(7));
        assert_eq!(status_pid(r#"{"version":"0.1.0"}"#), None);
        assert_eq!(status_pid(r#"{"pid":"x"}"#), None);
    }

    #[test]
    fn records_go_with_their_daemon_and_socket() {
        let dir = std::env::temp_dir().join(format!("xvfs-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let gone = 1 << 30; // above any pid_max
        let me = std::process::id();
        let live = UnixListener::bind(dir.join(format!("{gone}.sock"))).unwrap();
        for name in [
            format!("{gone}.sock.args"),
            format!("{}.sock.args", gone + 1),
            format!("{me}.sock.args"),
            "data.control.args".to_string(),
        ] {
            std::fs::write(dir.join(name), "[]").unwrap();
        }
        remove_stale(&dir);
        let exists = |n: String| dir.join(n).exists();
        assert!(exists(format!("{gone}.sock.args")), "its socket is served");
        assert!(!exists(format!("{}.sock.args", gone + 1)), "stale");
        assert!(exists(format!("{me}.sock.args")), "its daemon runs");
        assert!(exists("data.control.args".into()), "not named after a pid");
        drop(live);
        remove_stale(&dir);
        assert!(!exists(format!("{gone}.sock.args")), "stale once unserved");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
