// SPDX-License-Identifier: Apache-2.0
//! `--metrics-file`: the per-queue counters as JSON, rewritten every second.
//!
//! The directory is opened before the sandbox is entered, so the file stays
//! reachable afterwards; each update writes a temporary file beside it and
//! renames it over the old one, so readers never see a half-written file.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ops::metrics::{queue_reports, QueueReport, QueueStats};
use crate::{sys, FsServer};

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

pub struct MetricsWriter {
    dir: OwnedFd,
    name: CString,
    tmp: CString,
}

impl MetricsWriter {
    /// Opens the directory of `path` and checks that a file can be written there.
    pub fn open(path: &Path) -> io::Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = sys::open_dir(parent)?;
        let cname = CString::new(name.as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut tmp = name.as_bytes().to_vec();
        tmp.insert(0, b'.');
        tmp.extend_from_slice(b".tmp");
        let tmp = CString::new(tmp).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let w = MetricsWriter {
            dir,
            name: cname,
            tmp,
        };
        w.write_snapshot(&MetricsSnapshot {
            uptime_s: 0,
            pid: crate::confine::sandbox::daemon_pid(),
            queues: Vec::new(),
            open_files: None,
            crash_restart: None,
            dax: None,
        })?;
        Ok(w)
    }

    fn write(&self, json: &str) -> io::Result<()> {
        let fd = sys::create_at(self.dir.as_fd(), &self.tmp)?;
        let mut f = File::from(fd);
        f.write_all(json.as_bytes())?;
        drop(f);
        sys::rename_at(self.dir.as_fd(), &self.tmp, &self.name)
    }

    fn snapshot(
        &self,
        started: Instant,
        stats: &[Arc<QueueStats>],
        server: &FsServer,
    ) -> io::Result<()> {
        let snapshot = MetricsSnapshot {
            uptime_s: started.elapsed().as_secs(),
            pid: crate::confine::sandbox::daemon_pid(),
            queues: queue_reports(stats),
            open_files: Some(open_files(server)),
            crash_restart: server.fs().journal().map(|j| CrashCounters {
                restarts: j.restarts(),
                replayed: j.replayed(),
            }),
            dax: server.fs().dax_counts(),
        };
        self.write_snapshot(&snapshot)
    }

    fn write_snapshot(&self, snapshot: &MetricsSnapshot) -> io::Result<()> {
        let mut json = serde_json::to_string(snapshot).map_err(io::Error::other)?;
        json.push('\n');
        self.write(&json)
    }

    /// Starts the thread that rewrites the file every second; the returned
    /// handle writes the final figures when the daemon stops.
    pub fn start(self, stats: Vec<Arc<QueueStats>>, server: Arc<FsServer>) -> MetricsHandle {
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
