// SPDX-License-Identifier: Apache-2.0
//! `aiowrite` / `aiowait`: writes that go on while the thread runs its next
//! flowops, as Filebench's POSIX AIO does.
//!
//! Each thread instance that uses `aiowrite` gets a pool of writer threads,
//! as the C library's POSIX AIO is (glibc: up to 20 threads, started as
//! writes queue up): `aiowrite` copies its data
//! into an aligned buffer (so that `directio` files still get aligned I/O),
//! queues the write and returns at once; `aiowait` reaps completions as
//! Filebench's does on Linux, which has no `aio_waitn` (`fb_lfsflow_aiowait`
//! in `fb_localfs.c`, its `#else` branch): it takes the writes that have
//! already finished, up to half of the outstanding ones (at least one, at
//! most [`MAX_REAP`]), without waiting; only while more than [`MAX_REAP`]
//! are outstanding does it go round again, and then it waits for writes to
//! finish (Filebench spins). A failed write is reported by the `aiowait`
//! that reaps it (Filebench logs it). Writes still queued when the thread
//! ends are finished before it is gone.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Filebench's MAXREAP (`fb_localfs.c`: 4096): the most completions one
/// round of `aiowait` takes.
pub const MAX_REAP: usize = 4096;
/// How long a round of `aiowait` waits while more than [`MAX_REAP`] writes
/// are outstanding.
const ROUND_WAIT: Duration = Duration::from_secs(1);
/// Buffer alignment for direct I/O.
const ALIGN: usize = 4096;

struct Job {
    file: Arc<File>,
    offset: u64,
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

/// The most writer threads of one [`Aio`] (glibc's default `aio_threads`).
pub const MAX_WRITERS: usize = 20;

type Todo = Arc<Mutex<Receiver<Job>>>;

/// One thread instance's asynchronous writes.
pub struct Aio {
    jobs: Option<Sender<Job>>,
    todo: Todo,
    finished: Sender<io::Result<()>>,
    done: Receiver<io::Result<()>>,
    writers: Vec<JoinHandle<()>>,
    /// Writers waiting for a job.
    idle: Arc<AtomicUsize>,
    outstanding: usize,
}

impl Aio {
    /// An empty pool; writers start as writes are queued.
    pub fn new() -> io::Result<Aio> {
        let (jobs, todo) = mpsc::channel::<Job>();
        let (finished, done) = mpsc::channel();
        Ok(Aio {
            jobs: Some(jobs),
            todo: Arc::new(Mutex::new(todo)),
            finished,
            done,
            writers: Vec::new(),
            idle: Arc::new(AtomicUsize::new(0)),
            outstanding: 0,
        })
    }

    /// Starts one more writer thread.
    fn add_writer(&mut self) -> io::Result<()> {
        let (todo, finished, idle) = (self.todo.clone(), self.finished.clone(), self.idle.clone());
        let w = std::thread::Builder::new()
            .name("xfb-aio".into())
            .spawn(move || loop {
                idle.fetch_add(1, Ordering::AcqRel);
                let job = todo.lock().unwrap_or_else(|e| e.into_inner()).recv();
                idle.fetch_sub(1, Ordering::AcqRel);
                let Ok(j) = job else {
                    return;
                };
                let r = j
                    .file
                    .write_all_at(&j.buf[j.start..j.start + j.len], j.offset);
                if finished.send(r).is_err() {
                    return;
                }
            })?;
        self.writers.push(w);
        Ok(())
    }

    /// Queues a write of `data` at `offset` of `file` (the write holds the
    /// descriptor until it is done).
    pub fn submit(&mut self, file: &Arc<File>, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut buf = vec![0u8; data.len() + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        buf[start..start + data.len()].copy_from_slice(data);
        let job = Job {
            file: file.clone(),
            offset,
            buf,
            start,
            len: data.len(),
        };
        self.jobs
            .as_ref()
            .ok_or_else(|| io::Error::other("the writer has ended"))?
            .send(job)
            .map_err(|_| io::Error::other("the writer has ended"))?;
        self.outstanding += 1;
        if self.idle.load(Ordering::Acquire) == 0 && self.writers.len() < MAX_WRITERS {
            self.add_writer()?;
        }
        Ok(())
    }

    /// Writes queued and not yet reaped.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// One `aiowait`: reaps as Filebench does (see the module); returns how
    /// many completed. The first failed write is the error.
    pub fn wait(&mut self) -> io::Result<usize> {
        let mut reaped = 0;
        loop {
            let todo = if self.outstanding > MAX_REAP {
                MAX_REAP
            } else {
                (self.outstanding / 2).max(1)
            };
            // Past MAX_REAP outstanding, wait for completions (a round
            // would otherwise come back empty and go round again).
            let wait = if self.outstanding > MAX_REAP {
                ROUND_WAIT
            } else {
                Duration::ZERO
            };
            for _ in 0..todo.min(self.outstanding) {
                let got = if wait.is_zero() {
                    self.done.try_recv().map_err(|e| match e {
                        TryRecvError::Empty => RecvTimeoutError::Timeout,
                        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    })
                } else {
                    self.done.recv_timeout(wait)
                };
                let r = match got {
                    Ok(r) => r,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(io::Error::other("the writer has ended"))
                    }
                };
                self.outstanding -= 1;
                reaped += 1;
                r?;
            }
            if self.outstanding <= MAX_REAP {
                return Ok(reaped);
            }
        }
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what is queued and end.
        self.jobs = None;
        for w in self.writers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> (std::path::PathBuf, Arc<File>) {
        let p = std::env::temp_dir().join(format!("xfb-aio-{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        (p, Arc::new(f))
    }

    #[test]
    fn writes_land_and_wait_reaps_half_then_the_rest() {
        let (p, f) = temp("half");
        let mut aio = Aio::new().unwrap();
        for i in 0..8u64 {
            aio.submit(&f, i * 4096, &[i as u8 + 1; 4096]).unwrap();
        }
        assert_eq!(aio.outstanding(), 8);
        // Let the writer finish all eight: aiowait does not wait.
        while std::fs::metadata(&p).unwrap().len() < 8 * 4096 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(aio.wait().unwrap(), 4, "half of 8");
        assert_eq!(aio.wait().unwrap(), 2);
        assert_eq!(aio.wait().unwrap(), 1);
        assert_eq!(aio.wait().unwrap(), 1, "at least one");
        assert_eq!(aio.wait().unwrap(), 0, "nothing outstanding");
        let data = std::fs::read(&p).unwrap();
        assert_eq!(data.len(), 8 * 4096);
        assert!((0..8).all(|i| data[i * 4096] == i as u8 + 1));
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn queued_writes_finish_when_dropped_and_errors_surface_at_wait() {
        let (p, f) = temp("drop");
        {
            let mut aio = Aio::new().unwrap();
            aio.submit(&f, 1 << 20, b"tail").unwrap();
        }
        assert_eq!(std::fs::metadata(&p).unwrap().len(), (1 << 20) + 4);
        let ro = Arc::new(File::open(&p).unwrap());
        let mut aio = Aio::new().unwrap();
        aio.submit(&ro, 0, b"x").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            aio.wait().is_err(),
            "a write to a read-only file fails at aiowait"
        );
        let _ = std::fs::remove_file(p);
    }
}
