// SPDX-License-Identifier: Apache-2.0
//! Flowops as they run: one [`Worker`] per thread instance loops over its
//! thread's flowops until the run stops.
//!
//! Semantics (Filebench's, with the choices noted):
//! - Files are open in fd slots, as Filebench's thread descriptor table
//!   (`tf_fd`, 129 of them): `fd=N` names slot N, shared by the flowops of
//!   the thread; a flowop without `fd` uses slot 0. A read/write flowop on an
//!   empty slot opens a file of its fileset there and keeps it open; that
//!   open counts as one more operation of the flowop (0 bytes), as
//!   Filebench's `flowoplib_openfile_common` times and counts it. `opennext`
//!   takes the thread's next slot of a rotor, 127 down to 0 and round again
//!   (`flowoplib_fdnum`), so a thread opens 128 files in its first 128 such
//!   operations and then goes round them, never closing one; its picks go
//!   through the fileset with a rotor of the thread's own.
//! - A file is busy only while a thread opens, creates, deletes or stats it
//!   (see [`crate::fileset`]); a `deletefile` that picks a file some
//!   descriptor has open deletes nothing and counts nothing, as Filebench's.
//! - A flowop that Filebench returns from without timing anything (a limit
//!   flowop with no `eventgen` rate, that skipped delete) is not counted.
//! - Sequential reads continue where the last one stopped; at the end of
//!   the file one read gets 0 bytes (an operation all the same, as in
//!   Filebench) and the next starts over (at the end of `workingset` they
//!   start over at once); sequential writes continue likewise and wrap only
//!   at `workingset`. Random I/O is aligned to
//!   `iosize` within `workingset` (default: the file's size).
//! - `readwholefile` / `writewholefile` count one operation per file,
//!   `iters=N` repeats a flowop N times (N operations).
//! - `aiowrite` queues its write and returns; the write goes on while the
//!   thread runs on, and `aiowait` reaps completions as Filebench does (see
//!   [`crate::aio`]).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::ast::FlowopKind;
use crate::fileset::{Fileset, Want};
use crate::limit::{Bucket, EventGen, ProcCounts};
use crate::rng::Rng;
use crate::sem::SemPair;
use crate::shared::{End, Shared, WakePoint};
use crate::stats::OpStats;

mod control;
mod files;
mod io;

const ALIGN: usize = 4096;
/// Filebench's `THREADFLOW_MAXFD`: the `opennext` rotor goes round slots
/// 127 to 0.
pub const MAX_FD: usize = 128;

/// A unique id of every worker (Filebench's `tf_utid`): the key of its own
/// pick rotor.
static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A flowop with its attributes resolved.
#[derive(Debug, Clone)]
pub struct Op {
    pub line: usize,
    pub name: String,
    pub kind: FlowopKind,
    pub fileset: Option<usize>,
    /// The fd slot (explicit `fd=N`, else the thread's default 0).
    pub fd: usize,
    pub srcfd: Option<usize>,
    /// The I/O size, or with `iosize_dist` the largest draw kept.
    pub iosize: u64,
    /// A random iosize (`iosize=$cvar`): a new draw for every operation.
    pub iosize_dist: Option<crate::dist::Dist>,
    /// On a composite's end marker: (index of its start marker, passes).
    pub repeat: Option<(usize, u64)>,
    pub random: bool,
    pub workingset: u64,
    pub dsync: bool,
    pub directio: bool,
    pub opennext: bool,
    pub iters: u64,
    pub indexed: Option<u64>,
    /// A random `indexed=$randvar`: a new entry index for every pick.
    pub indexed_dist: Option<crate::dist::Dist>,
    pub value: f64,
    pub highwater: Option<i64>,
    pub blocking: bool,
    /// `target=`: a sempost's semblock, a wakeup's block, a limit's or a
    /// finish condition's flowop.
    pub target: Option<String>,
    /// A limit's or finish condition's `target=` flowop: its index in the
    /// thread's flowops.
    pub target_op: Option<usize>,
    /// This thread's pair of a `semblock`.
    pub sem: Option<Arc<SemPair>>,
    /// Every thread's pair of the semblock a `sempost` posts to.
    pub sem_targets: Option<Arc<[Arc<SemPair>]>>,
    pub wake: Option<Arc<WakePoint>>,
    pub events: Option<Arc<EventGen>>,
}

/// What one thread instance runs.
#[derive(Debug, Clone)]
pub struct ThreadPlan {
    pub file: String,
    pub label: String,
    pub memsize: u64,
    pub ops: Vec<Op>,
    /// The counts of the thread's process instance (shared by its threads).
    pub proc: Arc<ProcCounts>,
}

struct Slot {
    /// Shared by the `opennext` slots of one thread that have the same file
    /// open with the same flags (see [`Worker::open_slot`]).
    file: Arc<File>,
    fileset: usize,
    entry: usize,
    /// The open flags beyond read/write (O_SYNC, O_DIRECT).
    flags: i32,
    offset: u64,
    size: u64,
}

/// One running thread instance.
pub struct Worker {
    plan: ThreadPlan,
    filesets: Vec<Arc<Fileset>>,
    shared: Arc<Shared>,
    stats: Arc<Mutex<Vec<OpStats>>>,
    rng: Rng,
    buf: Vec<u8>,
    buf_off: usize,
    slots: HashMap<usize, Slot>,
    /// (fileset, entry) last opened in each slot, kept after close for
    /// `deletefile fd=N`.
    last_file: HashMap<usize, (usize, usize)>,
    /// (operations, bytes) of each flowop of this thread, never cleared
    /// (a limit's `target=` count).
    own: Vec<(u64, u64)>,
    /// Each limit flowop's bucket.
    buckets: Vec<Bucket>,
    /// The asynchronous writes of `aiowrite`, from the first one on.
    aio: Option<crate::aio::Aio>,
    /// This worker's unique id (its `opennext` pick rotor).
    uid: u64,
    /// The `opennext` slot rotor (Filebench's `tf_fdrotor`).
    fd_rotor: usize,
    /// Set by a flowop that did nothing Filebench counts.
    uncounted: bool,
    /// Set by an implicit open: the flowop's own time starts here.
    restart: Option<Instant>,
}

type Res = Result<u64, End>;

impl Worker {
    pub fn new(
        plan: ThreadPlan,
        filesets: Vec<Arc<Fileset>>,
        shared: Arc<Shared>,
        stats: Arc<Mutex<Vec<OpStats>>>,
        seed: u64,
    ) -> Self {
        // The I/O buffer is as large as the largest iosize, not `memsize`:
        // 100 web-server threads with memsize=10m would need 1 GiB of a small
        // guest for buffers they never fill.
        let max_io = plan.ops.iter().map(|o| o.iosize).max().unwrap_or(0);
        let len = max_io.max(ALIGN as u64) as usize + ALIGN;
        let buf = crate::fileset::pattern(len);
        let buf_off = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        let n = plan.ops.len();
        Worker {
            plan,
            filesets,
            shared,
            stats,
            rng: Rng::new(seed),
            buf,
            buf_off,
            slots: HashMap::new(),
            last_file: HashMap::new(),
            own: vec![(0, 0); n],
            buckets: vec![Bucket::default(); n],
            aio: None,
            uid: NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            fd_rotor: 0,
            uncounted: false,
            restart: None,
        }
    }

    /// Runs the flowops in a loop until the run stops or this thread ends.
    pub fn run(mut self) -> End {
        if !self.shared.wait_go() {
            self.close_all();
            return End::Stopped;
        }
        let len = self.plan.ops.len();
        let mut passes = vec![0u64; len];
        let end = 'outer: loop {
            let mut i = 0;
            while i < len {
                // A composite's end marker sends the thread back to the
                // start of its body until the passes are done.
                if let Some((begin, n)) = self.plan.ops[i].repeat {
                    passes[i] += 1;
                    if passes[i] < n {
                        self.record(i, 0, 0);
                        i = begin + 1;
                        continue;
                    }
                    passes[i] = 0;
                }
                if self.plan.ops[i].kind == FlowopKind::Composite {
                    i += 1;
                    continue;
                }
                let iters = self.plan.ops[i].iters.max(1);
                for _ in 0..iters {
                    if self.shared.stopped() {
                        break 'outer End::Stopped;
                    }
                    let t0 = Instant::now();
                    let r = self.exec(i);
                    let t0 = self.restart.take().unwrap_or(t0);
                    match r {
                        Ok(_) if std::mem::take(&mut self.uncounted) => {}
                        Ok(bytes) => self.record(i, t0.elapsed().as_nanos() as u64, bytes),
                        Err(e) => break 'outer e,
                    }
                }
                i += 1;
            }
        };
        self.close_all();
        end
    }

    /// Counts one operation of flowop `i`: in the run's statistics, in this
    /// thread's own count of the flowop and in its process's counts (what
    /// the limit flowops look at).
    fn record(&mut self, i: usize, ns: u64, bytes: u64) {
        let kind = self.plan.ops[i].kind;
        if let Some(s) = self
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(i)
        {
            s.record(ns, bytes);
        }
        if let Some(c) = self.own.get_mut(i) {
            c.0 += 1;
            c.1 += bytes;
        }
        let rw = kind.is_read() || kind.is_write();
        self.plan.proc.add(kind.is_io_summary(), rw, bytes);
    }

    fn close_all(&mut self) {
        for (_, s) in self.slots.drain() {
            if let Some(fs) = self.filesets.get(s.fileset) {
                fs.closed(s.entry);
            }
        }
    }

    fn fail(&self, i: usize, what: &str, err: impl std::fmt::Display) -> End {
        let op = &self.plan.ops[i];
        End::Error(format!(
            "{}:{}: flowop {} ({}): {what}: {err}",
            self.plan.file,
            op.line,
            op.name,
            op.kind.name()
        ))
    }

    fn norsc(&self, i: usize, what: &str) -> End {
        let op = &self.plan.ops[i];
        End::NoResource(format!(
            "{}:{}: flowop {}: {what}",
            self.plan.file, op.line, op.name
        ))
    }

    fn fileset(&self, i: usize) -> Result<Arc<Fileset>, End> {
        match self.plan.ops[i].fileset.and_then(|f| self.filesets.get(f)) {
            Some(f) => Ok(f.clone()),
            None => Err(self.fail(i, "no fileset", "give filesetname= or filename=")),
        }
    }

    /// The open flags of flowop `i` beyond read/write: `dsync` is O_SYNC
    /// (Filebench's `fileset_openfile`), `directio` O_DIRECT.
    fn open_flags(&self, i: usize) -> i32 {
        let op = &self.plan.ops[i];
        let mut flags = 0;
        if op.dsync {
            flags |= libc::O_SYNC;
        }
        if op.directio {
            flags |= libc::O_DIRECT;
        }
        flags
    }

    fn open_entry(&self, i: usize, fs: &Fileset, entry: usize, create: bool) -> Result<File, End> {
        let flags = self.open_flags(i);
        let mut oo = OpenOptions::new();
        oo.read(true).custom_flags(flags);
        if !fs.spec.readonly {
            oo.write(true);
        }
        if create {
            oo.create(true).truncate(true);
        }
        let path = &fs.files[entry].path;
        match oo.open(path) {
            Ok(f) => Ok(f),
            Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(|e| self.fail(i, "mkdir", e))?;
                }
                oo.open(path)
                    .map_err(|e| self.fail(i, &format!("create {}", path.display()), e))
            }
            Err(e) => Err(self.fail(i, &format!("open {}", path.display()), e)),
        }
    }

    fn pick(&mut self, i: usize, fs: &Fileset, want: Want) -> Result<usize, End> {
        let op = &self.plan.ops[i];
        let index = match (op.indexed, op.indexed_dist.clone()) {
            (_, Some(d)) => Some(d.sample(&mut self.rng).max(0.0) as usize),
            (Some(ix), None) => Some(ix as usize),
            (None, None) => None,
        };
        let rotor = op.opennext.then_some(self.uid);
        let picked = match index {
            Some(ix) => fs.pick_index(ix, want),
            None => fs.pick_file_wait(want, rotor, &self.shared.stop),
        };
        if self.shared.stopped() {
            if let Some(e) = picked {
                fs.unbusy(e, None, 0);
            }
            return Err(End::Stopped);
        }
        picked.ok_or_else(|| {
            let what = match want {
                Want::Existing => "no existing file left to pick",
                Want::Missing => "no file left to create",
            };
            self.norsc(i, &format!("{} in fileset {}", what, fs.spec.name))
        })
    }

    /// The size of the next I/O of flowop `i`: fixed, or a new draw of its
    /// random variable (1 byte at least, at most the op's `iosize` cap).
    fn io_size(&mut self, i: usize) -> u64 {
        let op = &self.plan.ops[i];
        match op.iosize_dist.clone() {
            Some(d) => (d.sample(&mut self.rng).round() as u64).clamp(1, op.iosize.max(1)),
            None => op.iosize.max(1),
        }
    }

    /// The slot flowop `i` uses: its `fd` (default 0), or with `opennext`
    /// the next one of the thread's rotor (127 down to 0, as Filebench's
    /// `flowoplib_fdnum`).
    fn slot_key(&mut self, i: usize) -> usize {
        if !self.plan.ops[i].opennext {
            return self.plan.ops[i].fd;
        }
        if self.fd_rotor == 0 {
            self.fd_rotor = MAX_FD;
        }
        self.fd_rotor -= 1;
        self.fd_rotor
    }

    /// The slot of flowop `i`, opening a file of its fileset there unless
    /// one is open (Filebench's `flowoplib_filesetup`). An open made here
    /// counts as an operation of the flowop, timed alone (Filebench's
    /// `flowoplib_openfile_common` times it between its own
    /// `flowop_beginop`/`flowop_endop`).
    fn ensure_slot(&mut self, i: usize) -> Result<usize, End> {
        let key = self.slot_key(i);
        if self.slots.contains_key(&key) {
            return Ok(key);
        }
        let t0 = Instant::now();
        self.open_slot(i, key)?;
        if self.plan.ops[i].kind != FlowopKind::OpenFile {
            self.record(i, t0.elapsed().as_nanos() as u64, 0);
            self.restart = Some(Instant::now());
        }
        Ok(key)
    }

    /// Picks a file of flowop `i`'s fileset and opens it in slot `key`. An
    /// `opennext` slot whose file this thread already has open in another
    /// slot with the same flags shares that descriptor: Filebench's worker
    /// process opens all 128 (one process per thread there), but 200
    /// threads of one process of ours would need 25,600 descriptors. The
    /// open still counts, as Filebench's.
    fn open_slot(&mut self, i: usize, key: usize) -> Result<(), End> {
        let Some(fsi) = self.plan.ops[i].fileset else {
            return Err(self.fail(
                i,
                "fd not open",
                format!("fd {key} and no fileset to open from"),
            ));
        };
        let fs = self.fileset(i)?;
        let entry = self.pick(i, &fs, Want::Existing)?;
        let flags = self.open_flags(i);
        let shared = self.plan.ops[i].opennext.then(|| {
            self.slots
                .values()
                .find(|s| s.fileset == fsi && s.entry == entry && s.flags == flags)
                .map(|s| s.file.clone())
        });
        let file = match shared.flatten() {
            Some(f) => f,
            None => match self.open_entry(i, &fs, entry, false) {
                Ok(f) => Arc::new(f),
                Err(e) => {
                    fs.unbusy(entry, None, 0);
                    return Err(e);
                }
            },
        };
        fs.unbusy(entry, None, 1);
        let size = file
            .metadata()
            .map(|m| m.len())
            .unwrap_or(fs.files[entry].size);
        self.slots.insert(
            key,
            Slot {
                file,
                fileset: fsi,
                entry,
                flags,
                offset: 0,
                size,
            },
        );
        Ok(())
    }

    fn read_at(&mut self, i: usize, key: usize, n: usize, off: u64) -> Result<usize, End> {
        let boff = self.buf_off;
        let r = match self.slots.get(&key) {
            Some(s) => s.file.read_at(&mut self.buf[boff..boff + n], off),
            None => return Err(self.fail(i, "read", "fd closed")),
        };
        r.map_err(|e| self.fail(i, "read", e))
    }

    #[cfg(test)]
    fn io_buf(&mut self, n: usize) -> &mut [u8] {
        let off = self.buf_off;
        &mut self.buf[off..off + n]
    }

    fn exec(&mut self, i: usize) -> Res {
        use FlowopKind::*;
        match self.plan.ops[i].kind {
            CreateFile => self.create_file(i),
            OpenFile => self.open_file(i),
            CloseFile => self.close_file(i),
            DeleteFile => self.delete_file(i),
            StatFile => self.stat_file(i),
            Mkdir | Rmdir => self.make_or_remove_dir(i),
            ListDir => self.list_dir(i),
            ReadWholeFile => self.read_whole_file(i),
            WriteWholeFile => self.write_whole_file(i),
            AppendFile | AppendFileRand => self.append_file(i),
            Read => self.read(i),
            Write | AioWrite => self.write(i),
            AioWait => self.aio_wait(i),
            Fsync | FsyncSet => self.fsync(i),
            Delay => self.delay(i),
            Hog => self.hog(i),
            FinishOnCount | FinishOnBytes => self.finish_on(i),
            EventLimit | IopsLimit | OpsLimit | BwLimit => self.limit(i),
            SemBlock => self.sem_block(i),
            SemPost => self.sem_post(i),
            Block => self.block(i),
            Wakeup => self.wakeup(i),
            Composite | CompositeEnd => Ok(0),
        }
    }

    /// The offset of the next read/write of `n` bytes on slot `key`.
    fn next_offset(&mut self, i: usize, key: usize, n: u64) -> u64 {
        let op = &self.plan.ops[i];
        let slot = &self.slots[&key];
        let limit = if op.workingset > 0 {
            op.workingset
        } else {
            slot.size
        };
        if op.random {
            let blocks = limit / n.max(1);
            return self.rng.below(blocks) * n;
        }
        if op.workingset > 0 && slot.offset + n > op.workingset {
            return 0;
        }
        slot.offset
    }

    /// Queues `n` bytes of the I/O buffer for `off` of slot `key`.
    fn aio_write(&mut self, i: usize, key: usize, n: usize, off: u64) -> Result<(), End> {
        if self.aio.is_none() {
            self.aio = Some(crate::aio::Aio::new().map_err(|e| self.fail(i, "aiowrite", e))?);
        }
        let boff = self.buf_off;
        let (Some(slot), Some(aio)) = (self.slots.get(&key), self.aio.as_mut()) else {
            return Err(self.fail(i, "aiowrite", "fd closed"));
        };
        let r = aio.submit(&slot.file, off, &self.buf[boff..boff + n]);
        r.map_err(|e| self.fail(i, "aiowrite", e))
    }

    fn write_at(&mut self, i: usize, key: usize, n: usize, off: u64) -> Result<(), End> {
        let boff = self.buf_off;
        let Some(slot) = self.slots.get(&key) else {
            return Err(self.fail(i, "write", "fd closed"));
        };
        slot.file
            .write_all_at(&self.buf[boff..boff + n], off)
            .map_err(|e| self.fail(i, "write", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_aligned() {
        let plan = ThreadPlan {
            file: "t.f".into(),
            label: "t".into(),
            memsize: 10,
            ops: vec![],
            proc: Arc::default(),
        };
        let mut w = Worker::new(
            plan,
            vec![],
            Arc::new(Shared::default()),
            Arc::new(Mutex::new(vec![])),
            1,
        );
        let p = w.io_buf(4096).as_ptr() as usize;
        assert_eq!(p % ALIGN, 0);
    }
}
