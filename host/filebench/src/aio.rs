//! `aiowrite` / `aiowait`: writes that go on while the thread runs its next
//! flowops, as Filebench's POSIX AIO does.
//!
//! Each thread instance that uses `aiowrite` gets one writer thread (the C
//! library's POSIX AIO is itself a thread pool): `aiowrite` copies its data
//! into an aligned buffer (so that `directio` files still get aligned I/O),
//! queues the write and returns at once; `aiowait` reaps completions as
//! Filebench's does: half of the outstanding writes (at least one, at most
//! [`MAX_REAP`] at a time, again while more than that are outstanding),
//! waiting at most a second for each batch. A failed write is reported by
//! the `aiowait` that reaps it. Writes still queued when the thread ends are
//! finished before it is gone.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Filebench's MAXREAP: the most completions one round of `aiowait` takes.
pub const MAX_REAP: usize = 1024;
/// How long `aiowait` waits for a round (Filebench's timeout).
const ROUND_WAIT: Duration = Duration::from_secs(1);
/// Buffer alignment for direct I/O.
const ALIGN: usize = 4096;

struct Job {
    file: File,
    offset: u64,
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

/// One thread instance's asynchronous writes.
pub struct Aio {
    jobs: Option<Sender<Job>>,
    done: Receiver<io::Result<()>>,
    writer: Option<JoinHandle<()>>,
    outstanding: usize,
}

impl Aio {
    /// Starts the writer thread.
    pub fn new() -> io::Result<Aio> {
        let (jobs, todo) = mpsc::channel::<Job>();
        let (finished, done) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("xfb-aio".into())
            .spawn(move || {
                for j in todo {
                    let r = j
                        .file
                        .write_all_at(&j.buf[j.start..j.start + j.len], j.offset);
                    if finished.send(r).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Aio {
            jobs: Some(jobs),
            done,
            writer: Some(writer),
            outstanding: 0,
        })
    }

    /// Queues a write of `data` at `offset` of `file`.
    pub fn submit(&mut self, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut buf = vec![0u8; data.len() + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        buf[start..start + data.len()].copy_from_slice(data);
        let job = Job {
            file: file.try_clone()?,
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
            if self.outstanding == 0 {
                return Ok(reaped);
            }
            let todo = if self.outstanding > MAX_REAP {
                MAX_REAP
            } else {
                (self.outstanding / 2).max(1)
            };
            for _ in 0..todo {
                match self.done.recv_timeout(ROUND_WAIT) {
                    Ok(r) => {
                        self.outstanding -= 1;
                        reaped += 1;
                        r?;
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(io::Error::other("the writer has ended"))
                    }
                }
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
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> (std::path::PathBuf, File) {
        let p = std::env::temp_dir().join(format!("xfb-aio-{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        (p, f)
    }

    #[test]
    fn writes_land_and_wait_reaps_half_then_the_rest() {
        let (p, f) = temp("half");
        let mut aio = Aio::new().unwrap();
        for i in 0..8u64 {
            aio.submit(&f, i * 4096, &[i as u8 + 1; 4096]).unwrap();
        }
        assert_eq!(aio.outstanding(), 8);
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
        let ro = File::open(&p).unwrap();
        let mut aio = Aio::new().unwrap();
        aio.submit(&ro, 0, b"x").unwrap();
        assert!(
            aio.wait().is_err(),
            "a write to a read-only file fails at aiowait"
        );
        let _ = std::fs::remove_file(p);
    }
}
