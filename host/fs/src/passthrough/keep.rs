// SPDX-License-Identifier: Apache-2.0
//! Crash restart: files the journal cannot find again.
//!
//! The journal ([`crate::journal`]) finds a node again after a crash by its
//! file handle or by its parent and name. A file the guest still holds but
//! that has no name left (unlinked or removed while open or while it is a
//! cwd, renamed over, created with `O_TMPFILE`) has neither once its last
//! descriptor closes, and a crash closes them all. So, with a [`Keeper`]
//! attached (the holder of `--crash-restart`), such a file's descriptors
//! are handed to the keeper before it loses its name: the node's own and
//! those of its open files. The keeper holds them across a crash; a
//! restarted process takes them back ([`PassthroughFs::recover`]), checks
//! them, and serves the same open file descriptions on. They are let go
//! when the guest forgets the node or releases the file.
//!
//! A node that loses its name while nothing of it is open (a regular file
//! the guest only looked up) is only *marked*: nothing can reach it but an
//! open already under way, and such an open keeps it then.
//!
//! Files that *another host process* deletes or renames over are not seen
//! losing their name. With `keep_all` ([`PassthroughFs::attach_keeper`],
//! `--crash-restart-keep all`) every node is kept when the guest first
//! gets it and every open file when it is opened, so those survive too, at
//! the cost of a message to the keeper per new node, open and release.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::table::{lock, Inode};
use super::PassthroughFs;
use crate::sys;

/// What a kept descriptor stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kept {
    /// The shared directory as a serving process saw it (its mount id): a
    /// deleted file is accepted back only on a mount one of these shows to
    /// be the share's.
    Root(u64),
    /// A node (`O_PATH`).
    Node(u64),
    /// An open file or directory.
    Handle(u64),
}

/// Holds descriptors across a crash (the holder).
pub trait Keeper: Send + Sync + std::fmt::Debug {
    /// Keeps these descriptors (replacing any kept under the same name).
    fn keep(&self, files: &[(Kept, BorrowedFd<'_>)]);
    /// Lets these go.
    fn let_go(&self, what: &[Kept]);
}

/// What this process has kept, or marked.
#[derive(Debug, Default)]
pub(super) struct KeptSet {
    /// Nodes that lost their name while the guest held them.
    nameless: HashSet<u64>,
    /// Of those, the ones whose descriptor the keeper holds.
    nodes: HashSet<u64>,
    /// Open files the keeper holds.
    handles: HashSet<u64>,
}

/// Descriptors a crashed process had kept, handed back by the keeper.
#[derive(Debug, Default)]
pub struct KeptFiles {
    /// Every node and handle handed back.
    all: Vec<Kept>,
    roots: Vec<OwnedFd>,
    nodes: HashMap<u64, OwnedFd>,
    handles: HashMap<u64, OwnedFd>,
    /// Told of each node and open file the recovery comes to.
    progress: Progress,
}

/// What [`KeptFiles::reporting`] calls: once per journal entry the
/// recovery comes to (a node or an open file), before it is opened again.
#[derive(Default)]
struct Progress(Option<Box<dyn FnMut() + Send>>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "reported"
        } else {
            "silent"
        })
    }
}

impl Progress {
    fn step(&mut self) {
        if let Some(f) = &mut self.0 {
            f();
        }
    }
}

impl KeptFiles {
    /// Sorts what the keeper handed back.
    pub fn new(files: Vec<(Kept, OwnedFd)>) -> Self {
        let mut k = KeptFiles::default();
        for (what, fd) in files {
            match what {
                Kept::Root(_) => k.roots.push(fd),
                Kept::Node(id) => {
                    k.all.push(what);
                    k.nodes.insert(id, fd);
                }
                Kept::Handle(fh) => {
                    k.all.push(what);
                    k.handles.insert(fh, fd);
                }
            }
        }
        k
    }

    /// Number of node and open-file descriptors.
    pub fn len(&self) -> usize {
        self.nodes.len() + self.handles.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `step` for every node and open file the recovery
    /// ([`PassthroughFs::recover`]) comes to, before it opens it again: a
    /// restarted process shows its holder that a long rebuild moves on.
    pub fn reporting(mut self, step: impl FnMut() + Send + 'static) -> Self {
        self.progress = Progress(Some(Box::new(step)));
        self
    }

    /// Node `id`'s kept descriptor; the recovery asks once per node.
    pub(super) fn take_node(&mut self, id: u64) -> Option<OwnedFd> {
        self.progress.step();
        self.nodes.remove(&id)
    }

    /// Open file `fh`'s kept descriptor; the recovery asks once per open
    /// file.
    pub(super) fn take_handle(&mut self, fh: u64) -> Option<OwnedFd> {
        self.progress.step();
        self.handles.remove(&fh)
    }

    /// What was handed back but is not in `used`.
    fn rest(&self, used: &HashSet<Kept>) -> Vec<Kept> {
        self.all
            .iter()
            .filter(|k| !used.contains(k))
            .copied()
            .collect()
    }
}

impl PassthroughFs {
    /// Hands files that lose their name to `k` from now on (see the module
    /// documentation); with `all`, every node and open file. This
    /// process's view of the share (and a live upgrade predecessor's) is
    /// kept first; then every node already held that has no name left (a
    /// live upgrade's), or with `all` every node and open file.
    pub fn attach_keeper(&mut self, k: Arc<dyn Keeper>, all: bool) {
        let mut roots: Vec<BorrowedFd<'_>> = vec![self.inodes.root_fd()];
        roots.extend(self.foreign_roots.iter().map(AsFd::as_fd));
        let roots: Vec<(Kept, BorrowedFd<'_>)> = roots
            .into_iter()
            .filter_map(|fd| Some((Kept::Root(sys::mount_of(fd).ok()?.0), fd)))
            .collect();
        k.keep(&roots);
        let rest = std::mem::take(&mut self.kept_rest);
        if !rest.is_empty() {
            k.let_go(&rest);
        }
        self.keeper = Some(k);
        self.keep_all = all;
        for i in self.inodes.all() {
            let gone = i
                .fd()
                .and_then(|fd| sys::stat_fd(fd.as_fd()))
                .is_ok_and(|st| st.st_nlink == 0);
            if gone {
                self.lose_name(&i);
            } else if all {
                self.keep_node(&i);
            }
        }
        if all {
            for h in self.handles.all() {
                self.keep_handle(h.inode, h.fh);
            }
        }
    }

    /// With `keep_all`: node `i`, new to the guest, is kept.
    pub(super) fn new_node(&self, i: &Inode) {
        if self.keep_all {
            self.keep_node(i);
        }
    }

    /// Keeps node `i`'s descriptor (once).
    fn keep_node(&self, i: &Inode) {
        let Some(k) = &self.keeper else {
            return;
        };
        if !lock(&self.kept).nodes.insert(i.id) {
            return;
        }
        self.any_kept.store(true, Ordering::SeqCst);
        if let Ok(fd) = i.fd() {
            k.keep(&[(Kept::Node(i.id), fd.as_fd())]);
        }
    }

    /// Keeps open file `fh` (of node `inode`) (once).
    fn keep_handle(&self, inode: u64, fh: u64) {
        let Some(k) = &self.keeper else {
            return;
        };
        let Some(h) = self.handles.get(fh).filter(|h| h.inode == inode) else {
            return;
        };
        if !lock(&self.kept).handles.insert(fh) {
            return;
        }
        self.any_kept.store(true, Ordering::SeqCst);
        k.keep(&[(Kept::Handle(fh), h.fd())]);
    }

    /// Whether files are kept (a keeper is attached).
    pub(super) fn keeping(&self) -> bool {
        self.keeper.is_some()
    }

    /// The node the guest holds at `dir`/`name`, if any: it is about to
    /// lose that name (UNLINK, RMDIR, the target of a RENAME).
    pub(super) fn held_at(&self, dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> Option<Arc<Inode>> {
        if !self.keeping() {
            return None;
        }
        let st = sys::fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW).ok()?;
        self.inodes.by_key((st.st_dev, st.st_ino))
    }

    /// Node `i` loses (or lost) its name: marked, and kept with its open
    /// files if anything of it is open or it is a directory (a cwd). Called
    /// before the name goes (a crash right after it finds the file kept)
    /// and again after (an open that came in between is kept too).
    pub(super) fn lose_name(&self, i: &Inode) {
        let Some(k) = &self.keeper else {
            return;
        };
        let open = self.handles.of_inode(i.id);
        let mut set = lock(&self.kept);
        set.nameless.insert(i.id);
        self.any_kept.store(true, Ordering::SeqCst);
        if open.is_empty() && !i.is_dir() {
            return;
        }
        let fresh_node = set.nodes.insert(i.id);
        let fresh: Vec<_> = open.iter().filter(|h| set.handles.insert(h.fh)).collect();
        drop(set);
        let Ok(node_fd) = i.fd() else {
            return;
        };
        let mut files = Vec::with_capacity(fresh.len() + 1);
        if fresh_node {
            files.push((Kept::Node(i.id), node_fd.as_fd()));
        }
        files.extend(fresh.iter().map(|h| (Kept::Handle(h.fh), h.fd())));
        if !files.is_empty() {
            k.keep(&files);
        }
    }

    /// A file was opened as `fh` on node `id`: kept if the node has no
    /// name left, or with `keep_all`.
    pub(super) fn opened(&self, id: u64, fh: u64) {
        if self.keep_all {
            self.keep_handle(id, fh);
            return;
        }
        if !self.any_kept.load(Ordering::SeqCst) || !lock(&self.kept).nameless.contains(&id) {
            return;
        }
        if let Some(i) = self.inodes.get(id) {
            self.lose_name(&i);
        }
    }

    /// Open file `fh` was released: let go if kept.
    pub(super) fn released(&self, fh: u64) {
        if !self.any_kept.load(Ordering::SeqCst) || !lock(&self.kept).handles.remove(&fh) {
            return;
        }
        if let Some(k) = &self.keeper {
            k.let_go(&[Kept::Handle(fh)]);
        }
    }

    /// Node `id` was forgotten: let go if it is no more.
    pub(super) fn forgotten(&self, id: u64) {
        if !self.any_kept.load(Ordering::SeqCst) || self.inodes.get(id).is_some() {
            return;
        }
        let mut set = lock(&self.kept);
        set.nameless.remove(&id);
        let kept = set.nodes.remove(&id);
        drop(set);
        if let (true, Some(k)) = (kept, &self.keeper) {
            k.let_go(&[Kept::Node(id)]);
        }
    }

    /// Whether `fd` (stat `st`), a node kept by a crashed process, may be
    /// served: proven inside the share by its path, or a file with no name
    /// left on a mount that a kept view of the share root shows to be the
    /// share's (a crashed process's sandbox mount of it).
    pub(super) fn kept_is_inside(
        &self,
        fd: BorrowedFd<'_>,
        st: &sys::Stat,
        kept: &KeptFiles,
    ) -> bool {
        if self.share_path(fd, st).is_some() {
            return true;
        }
        let root = self.inodes.root().key;
        if st.st_nlink != 0 || st.st_dev != root.0 {
            return false;
        }
        let Ok((mount, ..)) = sys::mount_of(fd) else {
            return false;
        };
        kept.roots.iter().any(|r| {
            sys::stat_fd(r.as_fd()).is_ok_and(|s| (s.st_dev, s.st_ino) == root)
                && sys::mount_of(r.as_fd()).is_ok_and(|m| m.0 == mount)
        })
    }

    /// After a crash restart: the nodes and files rebuilt from kept
    /// descriptors stay kept (the keeper holds them still); the rest is
    /// let go once a keeper is attached.
    pub(super) fn adopt_kept(&mut self, nodes: Vec<u64>, handles: Vec<u64>, kept: &mut KeptFiles) {
        let used: HashSet<Kept> = nodes
            .iter()
            .map(|&id| Kept::Node(id))
            .chain(handles.iter().map(|&fh| Kept::Handle(fh)))
            .collect();
        let mut set = lock(&self.kept);
        for id in nodes {
            set.nameless.insert(id);
            set.nodes.insert(id);
        }
        set.handles.extend(handles);
        drop(set);
        self.any_kept.store(true, Ordering::SeqCst);
        self.kept_rest = kept.rest(&used);
        // Views of the root: handed on to a live upgrade's successor.
        let root = self.inodes.root().key;
        let roots = std::mem::take(&mut kept.roots);
        self.foreign_roots.extend(
            roots
                .into_iter()
                .filter(|r| sys::stat_fd(r.as_fd()).is_ok_and(|s| (s.st_dev, s.st_ino) == root)),
        );
    }
}
