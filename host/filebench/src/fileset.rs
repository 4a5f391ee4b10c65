// SPDX-License-Identifier: Apache-2.0
//! Filesets: the tree Filebench builds, and the pick lists flowops draw from.
//!
//! # The tree
//! As in Filebench: the mean depth is `ln(entries + leafdirs) / ln(dirwidth)`;
//! every directory draws its own depth limit from a gamma distribution of that
//! mean (shape `dirgamma / 1000`, default 1.5; `dirgamma=0` makes it fixed)
//! and its own width the same way around `dirwidth`. A directory at or past
//! its depth limit is a leaf and holds `round(width)` files; the root keeps
//! adding subdirectories until every entry has a place. Names are `%08d`
//! serials: `PATH/NAME/00000001/00000003/00000002`.
//!
//! Sizes are `size` as written, or gamma draws when `size` is a
//! `cvar(type=cvar-gamma,…)` or when `filesizegamma` is given (shape
//! `filesizegamma / 1000`).
//!
//! `prealloc[=P]` writes exactly `round(entries × P / 100)` of the files
//! (P = 100 without a value) with their full size before the run, spread
//! evenly over the set; the others do not exist until a `createfile`.
//!
//! # Picks
//! As Filebench's (`fileset_pick`, `fileset_unbusy` in `fileset.c`): a pick
//! makes an entry busy for the one operation the thread does on it (open,
//! create, delete, stat), and the entry is free again as soon as that is
//! done; an open file is not held, so any number of threads may have the
//! same file open (its open count says how many descriptors do). Picks
//! rotate through the set: one shared rotor, or the thread's own for
//! `opennext` (Filebench's `fs_file_exrotor[tid]`). `define file` is a set
//! of one such entry.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::rng::Rng;
use crate::value::Value;

/// Resolved `define fileset` / `define file` attributes.
#[derive(Debug, Clone)]
pub struct FilesetSpec {
    pub name: String,
    pub path: PathBuf,
    pub is_file: bool,
    pub size: Value,
    pub entries: u64,
    pub dirwidth: f64,
    /// Gamma shape of depths and widths (dirgamma / 1000); 0 = fixed.
    pub dirgamma: f64,
    /// Gamma shape of fixed sizes (filesizegamma / 1000); 0 = fixed.
    pub filesizegamma: f64,
    /// Percentage of entries written before the run (None: no prealloc).
    pub prealloc: Option<f64>,
    pub reuse: bool,
    pub paralloc: bool,
    pub readonly: bool,
    pub trusttree: bool,
    pub leafdirs: u64,
    /// `cached=false`: preallocated files are dropped from the page cache.
    pub purge: bool,
}

/// One file (or leaf directory) of a fileset.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    pub size: u64,
}

/// Which entries a pick may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Existing,
    Missing,
}

/// The outcome of a pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picked {
    Got(usize),
    /// Entries in the wanted state exist, but other threads are busy with
    /// every one of them (each for one open, create, delete or stat).
    Busy,
    /// No entry is in the wanted state.
    Empty,
}

/// Filebench's per-fileset pick state (`fileset_pick`, `fileset_unbusy`):
/// the state of every entry, the entries busy for the one operation a
/// thread is doing on them, and how many descriptors have each one open.
#[derive(Debug, Default)]
struct PickSet {
    exists: Vec<bool>,
    /// Open descriptors of each entry (Filebench's `fse_open_cnt`).
    open: Vec<u32>,
    busy: BTreeSet<usize>,
    free_existing: BTreeSet<usize>,
    free_missing: BTreeSet<usize>,
    /// The shared rotor of picks of existing entries (`fs_file_exrotor[0]`).
    cursor_existing: usize,
    /// The rotors of threads that pick with their own (`opennext`:
    /// `fs_file_exrotor[tid]`).
    thread_cursors: HashMap<u64, usize>,
    cursor_missing: usize,
}

impl PickSet {
    fn new(exists: Vec<bool>) -> Self {
        let mut s = PickSet::default();
        for (i, e) in exists.iter().enumerate() {
            if *e {
                s.free_existing.insert(i);
            } else {
                s.free_missing.insert(i);
            }
        }
        s.open = vec![0; exists.len()];
        s.exists = exists;
        s
    }

    /// The next entry in the wanted state that no thread is busy with, from
    /// the rotor on (wrapping around), made busy. `rotor`: the thread's own
    /// rotor (`opennext`), else the shared one.
    fn pick(&mut self, want: Want, rotor: Option<u64>) -> Option<usize> {
        let (set, cursor) = match (want, rotor) {
            (Want::Existing, None) => (&mut self.free_existing, &mut self.cursor_existing),
            (Want::Existing, Some(t)) => (
                &mut self.free_existing,
                self.thread_cursors.entry(t).or_default(),
            ),
            (Want::Missing, _) => (&mut self.free_missing, &mut self.cursor_missing),
        };
        let idx = set
            .range(*cursor..)
            .next()
            .or_else(|| set.iter().next())
            .copied()?;
        *cursor = idx + 1;
        set.remove(&idx);
        self.busy.insert(idx);
        Some(idx)
    }

    /// The first free entry in the wanted state at or after `idx`, else the
    /// first one (Filebench's `fileset_find_entry` and its busy skip), made
    /// busy.
    fn pick_at(&mut self, idx: usize, want: Want) -> Option<usize> {
        let set = match want {
            Want::Existing => &mut self.free_existing,
            Want::Missing => &mut self.free_missing,
        };
        let found = set
            .range(idx..)
            .next()
            .or_else(|| set.iter().next())
            .copied()?;
        set.remove(&found);
        self.busy.insert(found);
        Some(found)
    }

    fn pick_or_busy(&mut self, want: Want, rotor: Option<u64>) -> Picked {
        if let Some(i) = self.pick(want, rotor) {
            return Picked::Got(i);
        }
        let wanted = want == Want::Existing;
        if self.busy.iter().any(|b| self.exists[*b] == wanted) {
            Picked::Busy
        } else {
            Picked::Empty
        }
    }

    /// Filebench's `fileset_unbusy`: the entry's new state (when given),
    /// `open_delta` added to its open count, and it is no longer busy.
    fn unbusy(&mut self, idx: usize, exists: Option<bool>, open_delta: i64) {
        if let Some(e) = exists {
            self.exists[idx] = e;
        }
        self.add_open(idx, open_delta);
        self.busy.remove(&idx);
        if self.exists[idx] {
            self.free_missing.remove(&idx);
            self.free_existing.insert(idx);
        } else {
            self.free_existing.remove(&idx);
            self.free_missing.insert(idx);
        }
    }

    fn add_open(&mut self, idx: usize, delta: i64) {
        if let Some(n) = self.open.get_mut(idx) {
            *n = (i64::from(*n) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        }
    }
}

/// A fileset ready for flowops.
#[derive(Debug)]
pub struct Fileset {
    pub spec: FilesetSpec,
    /// `PATH/NAME`.
    pub root: PathBuf,
    pub files: Vec<Entry>,
    /// Every directory of the tree (root first).
    pub dirs: Vec<PathBuf>,
    pub leafdirs: Vec<Entry>,
    file_picks: Mutex<PickSet>,
    leaf_picks: Mutex<PickSet>,
    released: Condvar,
    dir_cursor: AtomicUsize,
}

/// Statistics of a built tree (for the log and the tests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeStats {
    pub files: usize,
    pub dirs: usize,
    /// Directories holding at least one file.
    pub file_dirs: usize,
    pub mean_width: f64,
    pub mean_depth: f64,
    pub bytes: u64,
}

struct Builder<'a> {
    spec: &'a FilesetSpec,
    rng: &'a mut Rng,
    meandepth: f64,
    files: Vec<Entry>,
    dirs: Vec<PathBuf>,
    leafdirs: Vec<Entry>,
    depth_sum: f64,
}

impl Builder<'_> {
    fn draw(&mut self, mean: f64) -> f64 {
        if self.spec.dirgamma > 0.0 {
            self.rng
                .gamma(self.spec.dirgamma, mean / self.spec.dirgamma)
        } else {
            mean
        }
    }

    fn size(&mut self) -> Result<u64, String> {
        match &self.spec.size {
            Value::Text(_) if self.spec.filesizegamma > 0.0 => {
                let mean = self.spec.size.draw(self.rng)? as f64;
                let g = self.spec.filesizegamma;
                Ok(self.rng.gamma(g, mean / g).round() as u64)
            }
            v => v.draw(self.rng),
        }
    }

    fn done(&self) -> bool {
        self.files.len() as u64 >= self.spec.entries
            && self.leafdirs.len() as u64 >= self.spec.leafdirs
    }

    fn subdir(&mut self, path: PathBuf, is_root: bool, depth: u32) -> Result<(), String> {
        let depth = depth + 1;
        self.dirs.push(path.clone());
        let limit = (self.draw(self.meandepth).floor() as u32).max(1);
        let width = self.draw(self.spec.dirwidth).round().max(1.0) as u64;
        let leaf = !is_root && (depth >= limit || depth >= 64);
        let mut i = 1u64;
        while (is_root || i <= width) && !self.done() {
            let child = path.join(format!("{i:08}"));
            if leaf {
                if (self.files.len() as u64) < self.spec.entries {
                    let size = self.size()?;
                    self.files.push(Entry { path: child, size });
                    self.depth_sum += depth as f64;
                } else {
                    self.leafdirs.push(Entry {
                        path: child,
                        size: 0,
                    });
                }
            } else {
                self.subdir(child, false, depth)?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Picks `round(n × pct / 100)` of `n` indices, spread evenly.
pub fn prealloc_mask(n: usize, pct: f64) -> Vec<bool> {
    let pct = pct.clamp(0.0, 100.0);
    let mut prev = 0u64;
    (0..n)
        .map(|i| {
            let upto = (((i + 1) as f64) * pct / 100.0).round() as u64;
            let take = upto > prev;
            prev = upto;
            take
        })
        .collect()
}

impl Fileset {
    /// Lays out the tree (no I/O).
    pub fn layout(spec: FilesetSpec, rng: &mut Rng) -> Result<Fileset, String> {
        let root = spec.path.join(&spec.name);
        let (files, dirs, leafdirs) = if spec.is_file {
            let size = spec.size.draw(rng)?;
            (
                vec![Entry {
                    path: root.clone(),
                    size,
                }],
                Vec::new(),
                Vec::new(),
            )
        } else {
            if spec.entries == 0 && spec.leafdirs == 0 {
                return Err(format!("fileset {} has no entries", spec.name));
            }
            let width = spec.dirwidth.max(1.0);
            let total = (spec.entries + spec.leafdirs) as f64;
            let meandepth = if width > 1.0 {
                (total.ln() / width.ln()).max(1.0)
            } else {
                1.0
            };
            let mut b = Builder {
                spec: &spec,
                rng,
                meandepth,
                files: Vec::new(),
                dirs: Vec::new(),
                leafdirs: Vec::new(),
                depth_sum: 0.0,
            };
            b.subdir(root.clone(), true, 0)?;
            (b.files, b.dirs, b.leafdirs)
        };
        let file_exists = match spec.prealloc {
            Some(p) => prealloc_mask(files.len(), p),
            None => vec![false; files.len()],
        };
        let leaf_exists = match spec.prealloc {
            Some(p) => prealloc_mask(leafdirs.len(), p),
            None => vec![false; leafdirs.len()],
        };
        Ok(Fileset {
            spec,
            root,
            files,
            dirs,
            leafdirs,
            file_picks: Mutex::new(PickSet::new(file_exists)),
            leaf_picks: Mutex::new(PickSet::new(leaf_exists)),
            released: Condvar::new(),
            dir_cursor: AtomicUsize::new(0),
        })
    }

    pub fn stats(&self) -> TreeStats {
        let mut parents = std::collections::HashMap::<&Path, usize>::new();
        let mut depth_sum = 0usize;
        for f in &self.files {
            if let Some(p) = f.path.parent() {
                *parents.entry(p).or_default() += 1;
            }
            depth_sum += f
                .path
                .strip_prefix(&self.root)
                .map(|r| r.components().count())
                .unwrap_or(0);
        }
        let n = self.files.len();
        TreeStats {
            files: n,
            dirs: self.dirs.len(),
            file_dirs: parents.len(),
            mean_width: if parents.is_empty() {
                0.0
            } else {
                n as f64 / parents.len() as f64
            },
            mean_depth: if n == 0 {
                0.0
            } else {
                depth_sum as f64 / n as f64 - 1.0
            },
            bytes: self.files.iter().map(|f| f.size).sum(),
        }
    }

    fn picks(&self, leaf: bool) -> std::sync::MutexGuard<'_, PickSet> {
        let m = if leaf {
            &self.leaf_picks
        } else {
            &self.file_picks
        };
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Picks a file and makes it busy, waiting while other threads are
    /// busy with every candidate; `None` when no file is in the wanted state
    /// or when `stop` is set. `rotor`: the thread's own rotor (`opennext`).
    /// The caller does its one operation and then calls
    /// [`Fileset::unbusy`].
    pub fn pick_file_wait(
        &self,
        want: Want,
        rotor: Option<u64>,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Option<usize> {
        let mut p = self.picks(false);
        loop {
            match p.pick_or_busy(want, rotor) {
                Picked::Got(i) => return Some(i),
                Picked::Empty => return None,
                Picked::Busy => {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    p = self
                        .released
                        .wait_timeout(p, crate::tick::TICK)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// The `indexed=` pick, as Filebench's: entry `idx` (modulo the
    /// entries) if it is free and in the wanted state, else the next such
    /// entry after it, wrapping around; `None` when there is none (out of
    /// resources). Made busy like [`Fileset::pick_file_wait`].
    pub fn pick_index(&self, idx: usize, want: Want) -> Option<usize> {
        let idx = idx % self.files.len().max(1);
        self.picks(false).pick_at(idx, want)
    }

    /// Makes entry `idx` busy whatever its state, waiting while another
    /// thread is busy with it (`deletefile fd=N`, as Filebench's); false
    /// when `stop` is set first.
    pub fn take_entry_wait(&self, idx: usize, stop: &std::sync::atomic::AtomicBool) -> bool {
        let mut p = self.picks(false);
        while p.busy.contains(&idx) {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            p = self
                .released
                .wait_timeout(p, crate::tick::TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        p.free_existing.remove(&idx);
        p.free_missing.remove(&idx);
        p.busy.insert(idx);
        true
    }

    /// The end of the operation on a busy entry (Filebench's
    /// `fileset_unbusy`): its new state when given, `open_delta` added to
    /// its open count (+1 after an open or create, minus the count after an
    /// unlink), and other threads may pick it again.
    pub fn unbusy(&self, idx: usize, exists: Option<bool>, open_delta: i64) {
        self.picks(false).unbusy(idx, exists, open_delta);
        self.released.notify_all();
    }

    /// A descriptor of entry `idx` was closed.
    pub fn closed(&self, idx: usize) {
        self.picks(false).add_open(idx, -1);
    }

    /// How many descriptors have entry `idx` open.
    pub fn open_count(&self, idx: usize) -> u32 {
        self.picks(false).open.get(idx).copied().unwrap_or(0)
    }

    pub fn file_exists(&self, idx: usize) -> bool {
        self.picks(false).exists.get(idx).copied().unwrap_or(false)
    }

    pub fn pick_leafdir(&self, want: Want) -> Option<usize> {
        self.picks(true).pick(want, None)
    }

    pub fn finish_leafdir(&self, idx: usize, exists: bool) {
        self.picks(true).unbusy(idx, Some(exists), 0);
    }

    pub fn pick_dir(&self) -> Option<&Path> {
        if self.dirs.is_empty() {
            return None;
        }
        let i = self.dir_cursor.fetch_add(1, Ordering::Relaxed) % self.dirs.len();
        self.dirs.get(i).map(|p| p.as_path())
    }

    /// Number of files that exist now.
    pub fn existing_files(&self) -> usize {
        self.picks(false).exists.iter().filter(|e| **e).count()
    }

    /// Creates the tree on disk: directories, preallocated files and leaf
    /// directories. Without `reuse` the old tree is removed first; with it,
    /// files of the right size stay (and with `trusttree` nothing is checked).
    pub fn create_on_disk(&self) -> io::Result<()> {
        if !self.spec.reuse {
            match fs::symlink_metadata(&self.root) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&self.root)?,
                Ok(_) => fs::remove_file(&self.root)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        fs::create_dir_all(&self.spec.path)?;
        for d in &self.dirs {
            fs::create_dir_all(d)?;
        }
        let exists: Vec<bool> = self.picks(false).exists.clone();
        let todo: Vec<usize> = (0..self.files.len()).collect();
        let work = |idx: usize| -> io::Result<()> {
            let e = &self.files[idx];
            if exists[idx] {
                if self.spec.reuse {
                    if self.spec.trusttree {
                        return Ok(());
                    }
                    if let Ok(m) = fs::metadata(&e.path) {
                        if m.is_file() && m.len() == e.size {
                            return Ok(());
                        }
                    }
                }
                write_file(&e.path, e.size, self.spec.purge)
            } else if self.spec.reuse && !self.spec.trusttree {
                match fs::remove_file(&e.path) {
                    Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            }
        };
        if self.spec.paralloc && todo.len() > 1 {
            let workers = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .clamp(2, 8);
            let next = AtomicUsize::new(0);
            let result: Mutex<io::Result<()>> = Mutex::new(Ok(()));
            std::thread::scope(|s| {
                for _ in 0..workers {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= todo.len() {
                            break;
                        }
                        if let Err(e) = work(todo[i]) {
                            *result.lock().unwrap_or_else(|p| p.into_inner()) = Err(e);
                            break;
                        }
                    });
                }
            });
            result.into_inner().unwrap_or_else(|p| p.into_inner())?;
        } else {
            for i in todo {
                work(i)?;
            }
        }
        let leaf_exists: Vec<bool> = self.picks(true).exists.clone();
        for (l, e) in self.leafdirs.iter().zip(leaf_exists) {
            if e {
                fs::create_dir_all(&l.path)?;
            } else if self.spec.reuse {
                let _ = fs::remove_dir(&l.path);
            }
        }
        Ok(())
    }
}

/// Writes a file of `size` bytes (non-zero pattern, 1 MiB writes); with
/// `purge`, then drops it from the page cache.
pub fn write_file(path: &Path, size: u64, purge: bool) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    static BUF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let buf = BUF.get_or_init(|| pattern(1 << 20));
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    if purge {
        crate::sys::drop_from_cache(&f)?;
    }
    Ok(())
}

/// A buffer of non-zero bytes (so that nothing is sparse or compressible).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prealloc_mask_is_exact() {
        for (n, pct, want) in [
            (10, 80.0, 8),
            (3, 50.0, 2),
            (1000, 33.0, 330),
            (7, 100.0, 7),
            (7, 0.0, 0),
        ] {
            assert_eq!(
                prealloc_mask(n, pct).iter().filter(|b| **b).count(),
                want,
                "{n} {pct}"
            );
        }
    }

    #[test]
    fn a_pick_is_busy_only_until_its_operation_ends() {
        let mut p = PickSet::new(vec![true, false, true, true]);
        assert_eq!(p.pick(Want::Existing, None), Some(0));
        assert_eq!(p.pick(Want::Existing, None), Some(2));
        assert_eq!(p.pick(Want::Existing, None), Some(3));
        // Every existing entry busy (three opens under way).
        assert_eq!(p.pick_or_busy(Want::Existing, None), Picked::Busy);
        // The opens end: the entries are open, and free to pick again.
        for i in [0, 2, 3] {
            p.unbusy(i, None, 1);
        }
        assert_eq!(p.pick(Want::Existing, None), Some(0));
        p.unbusy(0, None, 1);
        assert_eq!(p.open, vec![2, 0, 1, 1]);
        // A create makes the entry exist.
        assert_eq!(p.pick(Want::Missing, None), Some(1));
        p.unbusy(1, Some(true), 1);
        assert_eq!(p.pick_or_busy(Want::Missing, None), Picked::Empty);
        assert_eq!(p.pick(Want::Existing, None), Some(1));
    }

    #[test]
    fn an_opennext_thread_has_its_own_rotor() {
        // Filebench's fs_file_exrotor[tid]: each such thread starts at the
        // first entry, whatever the others picked.
        let mut p = PickSet::new(vec![true; 3]);
        for want in [0, 1] {
            let i = p.pick(Want::Existing, None).unwrap();
            assert_eq!(i, want);
            p.unbusy(i, None, 1);
        }
        for t in [7, 8] {
            let i = p.pick(Want::Existing, Some(t)).unwrap();
            assert_eq!(i, 0, "thread {t}");
            p.unbusy(i, None, 1);
        }
        assert_eq!(p.pick(Want::Existing, Some(7)), Some(1));
        assert_eq!(p.pick(Want::Existing, None), Some(2));
    }

    #[test]
    fn an_indexed_pick_takes_the_next_entry_in_the_wanted_state() {
        // Filebench's fileset_find_entry: that entry, else the next one
        // after it, else the first; busy entries are skipped.
        let mut p = PickSet::new(vec![true, false, false, true, false]);
        assert_eq!(p.pick_at(1, Want::Existing), Some(3));
        assert_eq!(p.pick_at(4, Want::Existing), Some(0));
        assert_eq!(p.pick_at(0, Want::Existing), None, "both busy");
        assert_eq!(p.pick_at(2, Want::Missing), Some(2));
        p.unbusy(2, None, 0);
        assert_eq!(p.pick_at(0, Want::Missing), Some(1));
    }
}
