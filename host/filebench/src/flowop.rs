//! Flowops as they run: one [`Worker`] per thread instance loops over its
//! thread's flowops until the run stops.
//!
//! Semantics (Filebench's, with the choices noted):
//! - Files are held in fd slots: `fd=N` names a slot shared by the flowops of
//!   the thread; a flowop without `fd` has a slot of its own. A read/write
//!   flowop on an empty slot opens a file of its fileset and keeps it open;
//!   `opennext` closes it and opens the next one every time.
//! - Sequential reads continue where the last one stopped and start over at
//!   the end of the file (or of `workingset`); sequential writes continue
//!   likewise and wrap only at `workingset`. Random I/O is aligned to
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
use std::time::{Duration, Instant};

use crate::ast::FlowopKind;
use crate::fileset::{Fileset, Want};
use crate::rng::Rng;
use crate::shared::{End, EventGen, Quota, Sem, Shared, WakePoint, TICK};
use crate::stats::OpStats;

const ALIGN: usize = 4096;

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
    /// Claimed before the flowop runs (it is the target of a finishon*).
    pub quota: Option<(Arc<Quota>, bool)>,
    /// The quota a `finishoncount`/`finishonbytes` flowop watches.
    pub finish: Option<Arc<Quota>>,
    pub sem: Option<Arc<Sem>>,
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
}

struct Slot {
    file: File,
    fileset: usize,
    entry: usize,
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
    since_io_ops: u64,
    since_ops: u64,
    since_bytes: u64,
    /// The asynchronous writes of `aiowrite`, from the first one on.
    aio: Option<crate::aio::Aio>,
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
            since_io_ops: 0,
            since_ops: 0,
            since_bytes: 0,
            aio: None,
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
                    if let Err(e) = self.claim_op(i) {
                        break 'outer e;
                    }
                    i += 1;
                    continue;
                }
                let iters = self.plan.ops[i].iters.max(1);
                for _ in 0..iters {
                    if self.shared.stopped() {
                        break 'outer End::Stopped;
                    }
                    let t0 = Instant::now();
                    match self.exec(i) {
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

    /// `deletefile fd=N` without a fileset: unlinks the file open in slot N,
    /// or the one last opened there.
    fn delete_by_fd(&mut self, i: usize) -> Res {
        let key = self.plan.ops[i].fd;
        let (fsi, entry) = match self.slots.get(&key) {
            Some(s) => (s.fileset, s.entry),
            None => *self
                .last_file
                .get(&key)
                .ok_or_else(|| self.fail(i, "deletefile", format!("fd {key} was never opened")))?,
        };
        let Some(fs) = self.filesets.get(fsi).cloned() else {
            return Err(self.fail(i, "deletefile", "no such fileset"));
        };
        let path = &fs.files[entry].path;
        match fs::remove_file(path) {
            Ok(()) => {
                fs.set_file_exists(entry, false);
                Ok(0)
            }
            // Already gone (another thread deleted it): nothing to do.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(self.fail(i, &format!("unlink {}", path.display()), e)),
        }
    }

    /// Counts one operation of flowop `i`.
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
        if kind == FlowopKind::CompositeEnd {
            return;
        }
        self.since_ops += 1;
        if kind.is_read() || kind.is_write() {
            self.since_io_ops += 1;
        }
        self.since_bytes += bytes;
    }

    fn close_all(&mut self) {
        for (_, s) in self.slots.drain() {
            if let Some(fs) = self.filesets.get(s.fileset) {
                fs.release_file(s.entry);
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

    fn open_entry(&self, i: usize, fs: &Fileset, entry: usize, create: bool) -> Result<File, End> {
        let op = &self.plan.ops[i];
        let mut flags = 0;
        if op.dsync {
            flags |= libc::O_DSYNC;
        }
        if op.directio {
            flags |= libc::O_DIRECT;
        }
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
        let picked = match index {
            Some(ix) => fs.pick_index(ix, want),
            None => fs.pick_file_wait(want, &self.shared.stop),
        };
        if self.shared.stopped() {
            if let Some(e) = picked {
                fs.release_file(e);
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

    /// Opens a file of the flowop's fileset into its slot unless one is open.
    fn ensure_slot(&mut self, i: usize) -> Result<usize, End> {
        let op = &self.plan.ops[i];
        let key = op.fd;
        if op.opennext {
            if let Some(s) = self.slots.remove(&key) {
                if let Some(fs) = self.filesets.get(s.fileset) {
                    fs.release_file(s.entry);
                }
            }
        }
        if self.slots.contains_key(&key) {
            return Ok(key);
        }
        let fsi = match op.fileset {
            Some(f) => f,
            None => {
                return Err(self.fail(
                    i,
                    "fd not open",
                    format!("fd {key} and no fileset to open from"),
                ))
            }
        };
        let fs = self.fileset(i)?;
        let entry = self.pick(i, &fs, Want::Existing)?;
        let file = match self.open_entry(i, &fs, entry, false) {
            Ok(f) => f,
            Err(e) => {
                fs.release_file(entry);
                return Err(e);
            }
        };
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
                offset: 0,
                size,
            },
        );
        Ok(key)
    }

    /// A count quota: one unit per operation, claimed before it runs.
    fn claim_op(&self, i: usize) -> Result<(), End> {
        match &self.plan.ops[i].quota {
            Some((q, false)) if q.claim(1) == 0 => Err(End::Done),
            _ => Ok(()),
        }
    }

    /// A byte quota: up to `n` bytes, claimed before they move.
    fn claim(&self, i: usize, n: u64) -> Result<u64, End> {
        match &self.plan.ops[i].quota {
            Some((q, true)) => match q.claim(n) {
                0 => Err(End::Done),
                got => Ok(got),
            },
            _ => Ok(n),
        }
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
        let kind = self.plan.ops[i].kind;
        self.claim_op(i)?;
        match kind {
            CreateFile => {
                let fs = self.fileset(i)?;
                let key = self.plan.ops[i].fd;
                if self.slots.contains_key(&key) {
                    return Err(self.fail(i, "createfile", format!("fd {key} is already open")));
                }
                let entry = self.pick(i, &fs, Want::Missing)?;
                let file = match self.open_entry(i, &fs, entry, true) {
                    Ok(f) => f,
                    Err(e) => {
                        fs.release_file(entry);
                        return Err(e);
                    }
                };
                fs.set_file_exists(entry, true);
                let fsi = self.plan.ops[i].fileset.unwrap_or(0);
                self.slots.insert(
                    key,
                    Slot {
                        file,
                        fileset: fsi,
                        entry,
                        offset: 0,
                        size: 0,
                    },
                );
                Ok(0)
            }
            OpenFile => {
                let key = self.plan.ops[i].fd;
                if self.slots.contains_key(&key) {
                    return Err(self.fail(i, "openfile", format!("fd {key} is already open")));
                }
                self.ensure_slot(i)?;
                Ok(0)
            }
            CloseFile => {
                let key = self.plan.ops[i].fd;
                match self.slots.remove(&key) {
                    Some(s) => {
                        drop(s.file);
                        self.last_file.insert(key, (s.fileset, s.entry));
                        if let Some(fs) = self.filesets.get(s.fileset) {
                            fs.release_file(s.entry);
                        }
                        Ok(0)
                    }
                    None => Err(self.fail(i, "closefile", format!("fd {key} is not open"))),
                }
            }
            DeleteFile if self.plan.ops[i].fileset.is_none() => self.delete_by_fd(i),
            DeleteFile => {
                let fs = self.fileset(i)?;
                let entry = self.pick(i, &fs, Want::Existing)?;
                let r = fs::remove_file(&fs.files[entry].path);
                if r.is_ok() {
                    fs.set_file_exists(entry, false);
                }
                fs.release_file(entry);
                r.map_err(|e| {
                    self.fail(i, &format!("unlink {}", fs.files[entry].path.display()), e)
                })?;
                Ok(0)
            }
            StatFile => {
                let fs = self.fileset(i)?;
                let entry = self.pick(i, &fs, Want::Existing)?;
                let r = fs::metadata(&fs.files[entry].path);
                fs.release_file(entry);
                r.map_err(|e| {
                    self.fail(i, &format!("stat {}", fs.files[entry].path.display()), e)
                })?;
                Ok(0)
            }
            ReadWholeFile => {
                let key = self.ensure_slot(i)?;
                let iosize = self.io_size(i) as usize;
                let mut total = 0u64;
                loop {
                    let n = self.claim(i, iosize as u64)? as usize;
                    match self.read_at(i, key, n, total)? {
                        0 => break,
                        got => total += got as u64,
                    }
                }
                Ok(total)
            }
            WriteWholeFile => {
                let key = self.ensure_slot(i)?;
                let size = match self.plan.ops[i].srcfd {
                    Some(src) => match self.slots.get(&src) {
                        Some(s) => self.filesets[s.fileset].files[s.entry].size,
                        None => {
                            return Err(self.fail(
                                i,
                                "writewholefile",
                                format!("srcfd {src} is not open"),
                            ))
                        }
                    },
                    None => {
                        let s = &self.slots[&key];
                        self.filesets[s.fileset].files[s.entry].size
                    }
                };
                let iosize = self.io_size(i);
                let mut done = 0u64;
                while done < size {
                    let n = self.claim(i, iosize.min(size - done))? as usize;
                    self.write_at(i, key, n, done)?;
                    done += n as u64;
                }
                if let Some(s) = self.slots.get_mut(&key) {
                    s.size = s.size.max(done);
                }
                Ok(done)
            }
            AppendFile | AppendFileRand => {
                let key = self.ensure_slot(i)?;
                let iosize = self.io_size(i);
                let n = if kind == AppendFileRand {
                    1 + self.rng.below(iosize)
                } else {
                    iosize
                };
                let n = self.claim(i, n)? as usize;
                let end = self.slots[&key]
                    .file
                    .metadata()
                    .map(|m| m.len())
                    .map_err(|e| self.fail(i, "fstat", e))?;
                self.write_at(i, key, n, end)?;
                if let Some(s) = self.slots.get_mut(&key) {
                    s.size = end + n as u64;
                }
                Ok(n as u64)
            }
            Read => {
                let key = self.ensure_slot(i)?;
                let want = self.io_size(i);
                let n = self.claim(i, want)? as usize;
                let off = self.next_offset(i, key, n as u64);
                let mut got = self.read_at(i, key, n, off)?;
                if got == 0 && off > 0 && !self.plan.ops[i].random {
                    got = self.read_at(i, key, n, 0)?;
                    if let Some(s) = self.slots.get_mut(&key) {
                        s.offset = got as u64;
                    }
                } else if let Some(s) = self.slots.get_mut(&key) {
                    s.offset = off + got as u64;
                }
                Ok(got as u64)
            }
            Write | AioWrite => {
                let key = self.ensure_slot(i)?;
                let want = self.io_size(i);
                let n = self.claim(i, want)? as usize;
                let off = self.next_offset(i, key, n as u64);
                if kind == AioWrite {
                    self.aio_write(i, key, n, off)?;
                } else {
                    self.write_at(i, key, n, off)?;
                }
                if let Some(s) = self.slots.get_mut(&key) {
                    s.offset = off + n as u64;
                    s.size = s.size.max(s.offset);
                }
                Ok(n as u64)
            }
            AioWait => {
                if let Some(aio) = self.aio.as_mut() {
                    let r = aio.wait();
                    r.map_err(|e| self.fail(i, "aiowait", e))?;
                }
                Ok(0)
            }
            Fsync => {
                let key = self.plan.ops[i].fd;
                match self.slots.get(&key) {
                    Some(s) => s.file.sync_all().map_err(|e| self.fail(i, "fsync", e))?,
                    None => return Err(self.fail(i, "fsync", format!("fd {key} is not open"))),
                }
                Ok(0)
            }
            FsyncSet => {
                let fsi = self.plan.ops[i].fileset;
                for s in self.slots.values().filter(|s| Some(s.fileset) == fsi) {
                    s.file.sync_all().map_err(|e| self.fail(i, "fsync", e))?;
                }
                Ok(0)
            }
            Mkdir | Rmdir => {
                let fs = self.fileset(i)?;
                let want = if kind == Mkdir {
                    Want::Missing
                } else {
                    Want::Existing
                };
                let Some(idx) = fs.pick_leafdir(want) else {
                    return Err(self.norsc(
                        i,
                        &format!("no leaf directory left in fileset {}", fs.spec.name),
                    ));
                };
                let path = fs.leafdirs[idx].path.clone();
                let r = if kind == Mkdir {
                    fs::create_dir_all(&path)
                } else {
                    fs::remove_dir(&path)
                };
                fs.finish_leafdir(
                    idx,
                    if r.is_ok() {
                        kind == Mkdir
                    } else {
                        kind != Mkdir
                    },
                );
                r.map_err(|e| self.fail(i, &path.display().to_string(), e))?;
                Ok(0)
            }
            ListDir => {
                let fs = self.fileset(i)?;
                let Some(dir) = fs.pick_dir() else {
                    return Err(
                        self.norsc(i, &format!("fileset {} has no directory", fs.spec.name))
                    );
                };
                let rd =
                    fs::read_dir(dir).map_err(|e| self.fail(i, &dir.display().to_string(), e))?;
                for e in rd {
                    e.map_err(|e| self.fail(i, &dir.display().to_string(), e))?;
                }
                Ok(0)
            }
            Delay => {
                let until =
                    Instant::now() + Duration::from_secs_f64(self.plan.ops[i].value.max(0.0));
                while Instant::now() < until {
                    if self.shared.stopped() {
                        return Err(End::Stopped);
                    }
                    std::thread::sleep((until - Instant::now()).min(TICK));
                }
                Ok(0)
            }
            Hog => {
                let mut x = 0u64;
                for k in 0..self.plan.ops[i].value as u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(k));
                }
                std::hint::black_box(x);
                Ok(0)
            }
            FinishOnCount | FinishOnBytes => match &self.plan.ops[i].finish {
                Some(q) if q.exhausted() => Err(End::Done),
                _ => Ok(0),
            },
            EventLimit | IopsLimit | OpsLimit | BwLimit => {
                let n = match kind {
                    EventLimit => 1,
                    IopsLimit => std::mem::take(&mut self.since_io_ops),
                    OpsLimit => std::mem::take(&mut self.since_ops),
                    _ => std::mem::take(&mut self.since_bytes),
                };
                if let Some(ev) = &self.plan.ops[i].events {
                    if !ev.consume(n as f64, &self.shared.stop) {
                        return Err(End::Stopped);
                    }
                }
                Ok(0)
            }
            SemBlock => {
                let op = &self.plan.ops[i];
                let sem = op
                    .sem
                    .clone()
                    .ok_or_else(|| self.fail(i, "semblock", "no semaphore"))?;
                if !sem.block(op.value.max(1.0) as i64, &self.shared.stop) {
                    return Err(End::Stopped);
                }
                Ok(0)
            }
            SemPost => {
                let op = &self.plan.ops[i];
                let sem = op
                    .sem
                    .clone()
                    .ok_or_else(|| self.fail(i, "sempost", "no semaphore"))?;
                let hw = if op.blocking { op.highwater } else { None };
                if !sem.post(op.value.max(1.0) as i64, hw, &self.shared.stop) {
                    return Err(End::Stopped);
                }
                Ok(0)
            }
            Block => {
                let wp = self.plan.ops[i]
                    .wake
                    .clone()
                    .ok_or_else(|| self.fail(i, "block", "no wake point"))?;
                if !wp.block(&self.shared.stop) {
                    return Err(End::Stopped);
                }
                Ok(0)
            }
            Wakeup => {
                if let Some(wp) = &self.plan.ops[i].wake {
                    wp.wake();
                }
                Ok(0)
            }
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
        if op.kind == FlowopKind::Read && slot.offset >= slot.size && slot.size > 0 {
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
