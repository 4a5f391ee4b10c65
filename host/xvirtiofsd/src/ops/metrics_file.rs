// SPDX-License-Identifier: Apache-2.0
//! `--metrics-file`: the per-queue counters as JSON, rewritten every second.
//!
//! A serving process never holds the file's directory: a directory
//! descriptor opened before the sandbox leads out of it (`..` from it
//! reaches the host). Before it confines itself, it forks a small writer
//! process that holds the directory and nothing else; each snapshot goes
//! to it over a pipe (a length, then the JSON), and the writer writes it
//! to a temporary file beside the target and renames it over, so readers
//! never see a half-written file. The writer keeps no capability but
//! CAP_DAC_OVERRIDE (if the daemon keeps it), restricts itself with
//! Landlock to the directory, installs a filter of a few calls, parses
//! nothing, and exits when the pipe closes.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::info;
use serde::Serialize;

use crate::confine::landlock::{self, Beneath, LandlockMode};
use crate::confine::{caps, sandbox};
use crate::ops::metrics::{queue_reports, QueueReport, QueueStats};
use crate::{sys, FsServer};
use virtio_fs_ext::config::SeccompAction;

/// The largest snapshot the writer takes.
const MAX_SNAPSHOT: usize = 1 << 20;
/// `CAP_DAC_OVERRIDE`: the one capability the writer may keep.
const CAP_DAC_OVERRIDE: u64 = 1 << 1;
/// How long a stopping daemon waits for the writer's last file.
const WRITER_EXIT_WAIT_MS: i32 = 2000;

/// The metrics file's content.
#[derive(Debug, Serialize)]
struct MetricsSnapshot {
    uptime_s: u64,
    pid: u32,
    queues: Vec<QueueReport>,
    /// Host descriptors held for the guest (absent before serving).
    #[serde(skip_serializing_if = "Option::is_none")]
    open_files: Option<OpenFiles>,
    /// With --crash-restart: restarts and replayed requests so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    crash_restart: Option<CrashCounters>,
    /// With --dax-window: the window's mappings.
    #[serde(skip_serializing_if = "Option::is_none")]
    dax: Option<xvfs_fs::passthrough::DaxCounts>,
}

#[derive(Debug, Serialize)]
struct CrashCounters {
    restarts: u64,
    replayed: u64,
}

/// Inodes plus open handles, each a host descriptor, against the cap.
#[derive(Debug, Serialize)]
struct OpenFiles {
    held: usize,
    /// `--max-open` (0: no cap).
    max: usize,
    /// Requests refused with EMFILE at the cap since this daemon started.
    refused_emfile: u64,
}

fn open_files(server: &FsServer) -> OpenFiles {
    let fs = server.fs();
    let (held, refused_emfile) = fs.open_counts();
    OpenFiles {
        held,
        max: fs.max_open(),
        refused_emfile,
    }
}

/// How the writer process confines itself.
#[derive(Debug, Clone, Copy)]
pub struct WriterWalls {
    /// The serving process's capabilities: the writer keeps at most
    /// CAP_DAC_OVERRIDE of them.
    pub caps: u64,
    pub landlock: LandlockMode,
    pub seccomp: SeccompAction,
}

/// The file and its directory: only the writer process holds them.
struct Target {
    dir: OwnedFd,
    name: CString,
    tmp: CString,
}

impl Target {
    fn open(path: &Path) -> io::Result<Target> {
        use std::os::unix::ffi::OsStrExt;
        let bad = || io::Error::from(io::ErrorKind::InvalidInput);
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // A name of the serving process's own: a predecessor's writer may
        // still be finishing its last file beside this one's.
        let tmp = format!(".{}.{}.tmp", name.to_string_lossy(), sandbox::serving_pid());
        Ok(Target {
            dir: sys::open_dir(parent)?,
            name: CString::new(name.as_bytes()).map_err(|_| bad())?,
            tmp: CString::new(tmp).map_err(|_| bad())?,
        })
    }

    fn write(&self, json: &[u8]) -> io::Result<()> {
        let mut f = File::from(sys::create_at(self.dir.as_fd(), &self.tmp)?);
        f.write_all(json)?;
        drop(f);
        sys::rename_at(self.dir.as_fd(), &self.tmp, &self.name)
    }
}

/// The serving process's end: the pipe to the writer process.
pub struct MetricsWriter {
    pipe: File,
    writer: libc::pid_t,
    /// Readable once the writer has exited.
    writer_exit: Option<OwnedFd>,
}

impl MetricsWriter {
    /// Opens the directory of `path`, checks that a file can be written
    /// there (the first snapshot), and forks the writer process, which
    /// takes the directory with it. Call with one thread, before the
    /// sandbox.
    pub fn open(path: &Path, walls: &WriterWalls) -> io::Result<Self> {
        let target = Target::open(path)?;
        target.write(&json(&MetricsSnapshot {
            uptime_s: 0,
            pid: sandbox::daemon_pid(),
            queues: Vec::new(),
            open_files: None,
            crash_restart: None,
            dax: None,
        })?)?;
        let filter = sandbox::writer_program(walls.seccomp).map_err(io::Error::other)?;
        let (rd, wr) = sys::pipe()?;
        match sys::fork()? {
            sys::Forked::Child => {
                drop(wr);
                writer_main(&target, rd, walls, filter.as_deref())
            }
            sys::Forked::Parent(pid) => {
                drop(rd);
                drop(target);
                let outcome = if walls.landlock == LandlockMode::Off {
                    "not restricted with Landlock"
                } else {
                    "restricted with Landlock to that directory where the kernel has it"
                };
                info!(
                    "metrics file {}: written by process {pid}, which alone holds its \
                     directory ({outcome})",
                    path.display()
                );
                Ok(MetricsWriter {
                    pipe: File::from(wr),
                    writer: pid,
                    writer_exit: sys::pidfd_open(pid).ok(),
                })
            }
        }
    }

    /// Sends one snapshot to the writer.
    fn send(&mut self, json: &[u8]) -> io::Result<()> {
        let len = u32::try_from(json.len())
            .ok()
            .filter(|&n| n as usize <= MAX_SNAPSHOT)
            .ok_or_else(|| io::Error::other("snapshot too large"))?;
        let mut msg = Vec::with_capacity(4 + json.len());
        msg.extend_from_slice(&len.to_le_bytes());
        msg.extend_from_slice(json);
        self.pipe
            .write_all(&msg)
            .map_err(|e| io::Error::new(e.kind(), format!("the writer process: {e}")))
    }

    fn snapshot(
        &mut self,
        started: Instant,
        stats: &[Arc<QueueStats>],
        server: &FsServer,
    ) -> io::Result<()> {
        let snapshot = MetricsSnapshot {
            uptime_s: started.elapsed().as_secs(),
            pid: sandbox::daemon_pid(),
            queues: queue_reports(stats),
            open_files: Some(open_files(server)),
            crash_restart: server.fs().journal().map(|j| CrashCounters {
                restarts: j.restarts(),
                replayed: j.replayed(),
            }),
            dax: server.fs().dax_counts(),
        };
        self.send(&json(&snapshot)?)
    }

    /// Closes the pipe and waits (a while) for the writer to write what it
    /// was sent and exit.
    fn close(self) {
        let MetricsWriter {
            pipe,
            writer,
            writer_exit,
        } = self;
        drop(pipe);
        if let Some(fd) = writer_exit {
            if sys::poll_readable(&[fd.as_fd()], WRITER_EXIT_WAIT_MS).is_ok_and(|r| r[0]) {
                let _ = sys::reap(writer);
            }
        }
    }

    /// Starts the thread that sends a snapshot every second; the returned
    /// handle sends the final figures when the daemon stops.
    pub fn start(mut self, stats: Vec<Arc<QueueStats>>, server: Arc<FsServer>) -> MetricsHandle {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("xvfs-metrics".into())
            .spawn(move || loop {
                if let Err(e) = self.snapshot(started, &stats, &server) {
                    log::warn!("metrics file: {e}; no further updates");
                    return;
                }
                if stop2.load(Ordering::Acquire) {
                    self.close();
                    return;
                }
                std::thread::park_timeout(Duration::from_secs(1));
            });
        match spawned {
            Ok(thread) => MetricsHandle {
                stop,
                thread: Some(thread),
            },
            Err(e) => {
                log::warn!("metrics file: cannot start its thread: {e}");
                MetricsHandle { stop, thread: None }
            }
        }
    }
}

fn json(snapshot: &MetricsSnapshot) -> io::Result<Vec<u8>> {
    let mut json = serde_json::to_vec(snapshot).map_err(io::Error::other)?;
    json.push(b'\n');
    Ok(json)
}

/// The writer process: confines itself, then writes every snapshot the
/// pipe brings until it closes. Never returns. It takes no lock of the
/// parent's (the logger's, standard error's): only raw writes to fd 2.
fn writer_main(
    target: &Target,
    rd: OwnedFd,
    walls: &WriterWalls,
    filter: Option<&[libc::sock_filter]>,
) -> ! {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        sys::write_stderr(&format!("xvirtiofsd metrics writer: {what}: {e}\n"));
        sys::exit_now(1)
    };
    let keep = [target.dir.as_raw_fd(), rd.as_raw_fd()];
    if let Err(e) = sys::close_inherited(&keep) {
        fail("closing inherited descriptors", &e);
    }
    if let Err(e) = caps::apply(walls.caps & CAP_DAC_OVERRIDE) {
        fail("capabilities", &e);
    }
    let rules = [(target.dir.as_fd(), Beneath::MetricsDir)];
    if let Err(e) = landlock::restrict(walls.landlock, &rules) {
        fail("Landlock", &e);
    }
    if let Some(f) = filter {
        if let Err(e) = sys::seccomp_install(f) {
            fail("seccomp", &e);
        }
    }
    let mut pipe = File::from(rd);
    let mut buf = Vec::new();
    loop {
        match read_snapshot(&mut pipe, &mut buf) {
            Ok(true) => {}
            Ok(false) => sys::exit_now(0),
            Err(e) => fail("reading a snapshot", &e),
        }
        if let Err(e) = target.write(&buf) {
            fail("writing the metrics file", &e);
        }
    }
}

/// One snapshot from the pipe into `buf`: false at the end of the pipe.
fn read_snapshot(pipe: &mut File, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut len = [0u8; 4];
    match pipe.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_SNAPSHOT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes announced, at most {MAX_SNAPSHOT}"),
        ));
    }
    buf.resize(len, 0);
    pipe.read_exact(buf)?;
    Ok(true)
}

/// Stops the metrics thread after one last update.
pub struct MetricsHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsHandle {
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
