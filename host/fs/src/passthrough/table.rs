// SPDX-License-Identifier: Apache-2.0
//! The inode and handle tables.
//!
//! # Design
//!
//! Both tables are split into [`SHARDS`] shards, each behind its own lock, so
//! that worker threads of different queues rarely meet on a lock, and the hot
//! path (finding an inode or handle by id for every request) only takes a
//! shard's read lock and clones an `Arc`.
//!
//! Inodes are found two ways: by node id (every request) and by host
//! `(dev, ino)` key (LOOKUP, to hand out the same node id for the same file).
//! The id map is sharded by id, the key map by a hash of the key. A lookup and
//! a FORGET of the same file both hold that file's key-shard lock while they
//! change its lookup count, so a count cannot be raised from zero after it was
//! dropped there. Lock order: key shard, then id shard; nobody takes them the
//! other way around.
//!
//! Node ids and file handles come from counters and are never reused, so the
//! generation of every inode is 0 and `nodeid:generation` is unique for the
//! life of the file system (the counters continue past the restored maximum
//! after a live upgrade).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::filesystem::ROOT_ID;
use crate::journal::{Journal, NodeOrigin, NO_SLOT};
use crate::sys;

/// Number of shards of each table.
pub const SHARDS: usize = 16;

/// Locks a mutex; a poisoned lock is taken over (the data it guards is a map
/// whose every single update is complete, so it is never half-written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Host identity of a file.
pub type InodeKey = (u64, u64);

fn key_shard(key: InodeKey) -> usize {
    let h = (key.1 ^ key.0.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 60) as usize % SHARDS
}

fn id_shard(id: u64) -> usize {
    (id % SHARDS as u64) as usize
}

/// How an inode holds on to its file.
#[derive(Debug)]
pub enum InodeFile {
    /// An `O_PATH | O_NOFOLLOW` descriptor.
    Fd(OwnedFd),
    /// A file handle (`--inode-file-handles`), opened for each use: no
    /// descriptor is held.
    Handle {
        handle_type: i32,
        bytes: Box<[u8]>,
        /// A descriptor on the file's mount, to open the handle on.
        mount: Arc<OwnedFd>,
    },
}

/// A descriptor of an inode's file (`O_PATH`): the one it holds, or one
/// opened from its file handle for this use.
#[derive(Debug)]
pub enum InodeFd<'a> {
    /// The inode's own.
    Held(BorrowedFd<'a>),
    /// Opened from the file handle; closed when dropped.
    Opened(OwnedFd),
}

impl AsFd for InodeFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            InodeFd::Held(fd) => *fd,
            InodeFd::Opened(fd) => fd.as_fd(),
        }
    }
}

impl std::os::fd::AsRawFd for InodeFd<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// One inode known to the guest.
#[derive(Debug)]
pub struct Inode {
    /// Node id the guest uses.
    pub id: u64,
    /// The file.
    pub file: InodeFile,
    /// Host device and inode number.
    pub key: InodeKey,
    /// `st_mode & S_IFMT`.
    pub file_type: u32,
    /// Generation reported with the node id.
    pub generation: u64,
    refs: AtomicU64,
    /// Its crash-restart journal slot ([`NO_SLOT`]: not journaled).
    slot: AtomicU32,
}

impl Inode {
    /// Its journal slot.
    pub fn slot(&self) -> u32 {
        self.slot.load(Ordering::Relaxed)
    }

    /// A descriptor of the file (`O_PATH`); one held as a file handle is
    /// opened (ESTALE once the file is gone).
    pub fn fd(&self) -> std::io::Result<InodeFd<'_>> {
        match &self.file {
            InodeFile::Fd(fd) => Ok(InodeFd::Held(fd.as_fd())),
            InodeFile::Handle {
                handle_type,
                bytes,
                mount,
            } => sys::open_by_handle(mount.as_fd(), *handle_type, bytes, libc::O_PATH)
                .map(InodeFd::Opened),
        }
    }

    /// Its file handle, when it is held as one.
    pub fn handle(&self) -> Option<(i32, &[u8])> {
        match &self.file {
            InodeFile::Fd(_) => None,
            InodeFile::Handle {
                handle_type, bytes, ..
            } => Some((*handle_type, bytes)),
        }
    }

    /// Current lookup count.
    pub fn refs(&self) -> u64 {
        self.refs.load(Ordering::Relaxed)
    }

    /// Whether this is a regular file.
    pub fn is_reg(&self) -> bool {
        self.file_type == libc::S_IFREG
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.file_type == libc::S_IFDIR
    }
}

/// The node id → inode table.
#[derive(Debug)]
pub struct InodeTable {
    root: Arc<Inode>,
    by_id: Vec<RwLock<HashMap<u64, Arc<Inode>>>>,
    by_key: Vec<Mutex<HashMap<InodeKey, u64>>>,
    next_id: AtomicU64,
    journal: Option<&'static Journal>,
}

/// How a new node was reached: its parent and name, if by name.
pub type Origin<'a> = Option<(u64, &'a [u8])>;

/// Journals a new node: its file handle if the file system gives one, and
/// where it was found.
fn journal_node(j: &Journal, inode: &Inode, origin: Origin<'_>) -> u32 {
    let handle = match inode.handle() {
        Some((t, b)) => Some((t, b.to_vec())),
        None => inode.fd().and_then(|fd| sys::handle_of(fd.as_fd())).ok(),
    };
    j.add_node(
        key_shard(inode.key),
        inode.id,
        inode.key,
        inode.file_type,
        &NodeOrigin {
            handle: handle.as_ref().map(|(t, b)| (*t, &b[..])),
            parent: origin,
        },
    )
}

impl InodeTable {
    /// A table holding only the root directory.
    pub fn new(root_fd: OwnedFd, root_key: InodeKey) -> Self {
        InodeTable {
            root: Arc::new(Inode {
                id: ROOT_ID,
                file: InodeFile::Fd(root_fd),
                key: root_key,
                file_type: libc::S_IFDIR,
                generation: 0,
                refs: AtomicU64::new(1),
                slot: AtomicU32::new(NO_SLOT),
            }),
            by_id: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            by_key: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next_id: AtomicU64::new(ROOT_ID + 1),
            journal: None,
        }
    }

    /// Journals every change from now on. Inodes already in the table take
    /// the slot `adopt` gives their id (a restored journal's), or a new one.
    pub fn attach_journal(&mut self, j: &'static Journal, adopt: &HashMap<u64, u32>) {
        self.journal = Some(j);
        for inode in self.all() {
            let slot = match adopt.get(&inode.id) {
                Some(&s) => s,
                None => {
                    let s = journal_node(j, &inode, None);
                    j.set_refs(s, inode.refs());
                    s
                }
            };
            inode.slot.store(slot, Ordering::Relaxed);
        }
    }

    /// The journal, if attached.
    pub fn journal(&self) -> Option<&'static Journal> {
        self.journal
    }

    /// The root directory.
    pub fn root(&self) -> &Arc<Inode> {
        &self.root
    }

    /// The root directory's descriptor: the root is always held as one
    /// (its mount's descriptor, the root itself, would stand in).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        match &self.root.file {
            InodeFile::Fd(fd) => fd.as_fd(),
            InodeFile::Handle { mount, .. } => mount.as_fd(),
        }
    }

    /// The inode of host file `key`, if the guest holds it.
    pub fn by_key(&self, key: InodeKey) -> Option<Arc<Inode>> {
        let id = *lock(&self.by_key[key_shard(key)]).get(&key)?;
        self.get(id)
    }

    /// The inode with node id `id`.
    pub fn get(&self, id: u64) -> Option<Arc<Inode>> {
        if id == ROOT_ID {
            return Some(self.root.clone());
        }
        read(&self.by_id[id_shard(id)]).get(&id).cloned()
    }

    /// Finds the inode of `key`, or inserts one holding what `hold` makes
    /// of `fd` if `may_add()` allows it (else `None`), and raises its lookup
    /// count by one. `fd` is dropped when the inode was already known.
    pub fn lookup_or_insert(
        &self,
        fd: OwnedFd,
        key: InodeKey,
        file_type: u32,
        may_add: impl FnOnce() -> bool,
        hold: impl FnOnce(OwnedFd) -> std::io::Result<InodeFile>,
        origin: Origin<'_>,
    ) -> std::io::Result<Option<Arc<Inode>>> {
        if key == self.root.key {
            return Ok(Some(self.root.clone()));
        }
        let mut keys = lock(&self.by_key[key_shard(key)]);
        if let Some(inode) = keys.get(&key).and_then(|id| self.get(*id)) {
            let refs = inode.refs.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(j) = self.journal {
                j.set_refs(inode.slot(), refs);
            }
            return Ok(Some(inode));
        }
        if !may_add() {
            return Ok(None);
        }
        let file = hold(fd)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let inode = Arc::new(Inode {
            id,
            file,
            key,
            file_type,
            generation: 0,
            refs: AtomicU64::new(1),
            slot: AtomicU32::new(NO_SLOT),
        });
        if let Some(j) = self.journal {
            inode
                .slot
                .store(journal_node(j, &inode, origin), Ordering::Relaxed);
        }
        write(&self.by_id[id_shard(id)]).insert(id, inode.clone());
        keys.insert(key, id);
        Ok(Some(inode))
    }

    /// Inserts a restored inode, held as `hold` makes of its descriptor;
    /// the caller validated it and checked that the id and key are unused.
    pub fn insert_restored(
        &self,
        inode: RestoredInode,
        hold: impl FnOnce(OwnedFd, u64, u32) -> InodeFile,
    ) {
        let RestoredInode {
            id,
            fd,
            key,
            file_type,
            generation,
            refs,
        } = inode;
        let file = hold(fd, key.0, file_type);
        let mut keys = lock(&self.by_key[key_shard(key)]);
        let inode = Arc::new(Inode {
            id,
            file,
            key,
            file_type,
            generation,
            refs: AtomicU64::new(refs),
            slot: AtomicU32::new(NO_SLOT),
        });
        // A VM migration's load into a journaling file system: journal it
        // (a crash restart's rebuild attaches the journal afterwards).
        if let Some(j) = self.journal {
            let slot = journal_node(j, &inode, None);
            j.set_refs(slot, refs);
            inode.slot.store(slot, Ordering::Relaxed);
        }
        write(&self.by_id[id_shard(id)]).insert(id, inode);
        keys.insert(key, id);
        self.next_id.fetch_max(id + 1, Ordering::Relaxed);
    }

    /// Drops `n` lookups of `id`; the inode (and its descriptor, once no request
    /// uses it any more) goes away at zero. The root is never forgotten.
    /// False when `id` is not in the table.
    pub fn forget(&self, id: u64, n: u64) -> bool {
        if id == ROOT_ID {
            return true;
        }
        let Some(inode) = self.get(id) else {
            return false;
        };
        let mut keys = lock(&self.by_key[key_shard(inode.key)]);
        let left = inode.refs().saturating_sub(n);
        inode.refs.store(left, Ordering::Relaxed);
        if let Some(j) = self.journal {
            if left == 0 {
                j.remove_node(inode.slot());
            } else {
                j.set_refs(inode.slot(), left);
            }
        }
        if left == 0 {
            if keys.get(&inode.key) == Some(&id) {
                keys.remove(&inode.key);
            }
            write(&self.by_id[id_shard(id)]).remove(&id);
        }
        true
    }

    /// Forgets every inode but the root.
    pub fn clear(&self) {
        for (keys, ids) in self.by_key.iter().zip(&self.by_id) {
            lock(keys).clear();
            write(ids).clear();
        }
        if let Some(j) = self.journal {
            j.clear_tables();
        }
    }

    /// Every inode but the root, ordered by id.
    pub fn all(&self) -> Vec<Arc<Inode>> {
        let mut v: Vec<_> = self
            .by_id
            .iter()
            .flat_map(|s| read(s).values().cloned().collect::<Vec<_>>())
            .collect();
        v.sort_by_key(|i| i.id);
        v
    }

    /// Number of inodes, the root included.
    pub fn len(&self) -> usize {
        1 + self.by_id.iter().map(|s| read(s).len()).sum::<usize>()
    }

    /// Makes sure the next node id is at least `id`.
    pub fn bump_next_id(&self, id: u64) {
        self.next_id.fetch_max(id, Ordering::Relaxed);
    }

    /// Next node id to hand out.
    pub fn next_id(&self) -> u64 {
        self.next_id.load(Ordering::Relaxed)
    }
}

/// A validated inode on its way into a restored table.
#[derive(Debug)]
pub struct RestoredInode {
    /// Node id.
    pub id: u64,
    /// `O_PATH` descriptor.
    pub fd: OwnedFd,
    /// Host identity.
    pub key: InodeKey,
    /// `S_IFMT` bits.
    pub file_type: u32,
    /// Generation.
    pub generation: u64,
    /// Lookup count (at least 1).
    pub refs: u64,
}

/// An open file or directory.
#[derive(Debug)]
pub struct Handle {
    /// The handle id the guest uses.
    pub fh: u64,
    /// Node id of the file.
    pub inode: u64,
    /// The open descriptor.
    pub fd: OwnedFd,
    /// `open(2)` flags it was opened with.
    pub flags: i32,
    /// Serializes READDIR on a directory handle (it moves the file position).
    pub dir_lock: Mutex<()>,
    slot: AtomicU32,
}

impl Handle {
    /// The open descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The fh → open file table.
#[derive(Debug)]
pub struct HandleTable {
    shards: Vec<RwLock<HashMap<u64, Arc<Handle>>>>,
    next: AtomicU64,
    journal: Option<&'static Journal>,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            next: AtomicU64::new(1),
            journal: None,
        }
    }
}

impl HandleTable {
    /// Journals every change from now on; handles already open take the
    /// slot `adopt` gives them, or a new one.
    pub fn attach_journal(&mut self, j: &'static Journal, adopt: &HashMap<u64, u32>) {
        self.journal = Some(j);
        for h in self.all() {
            let slot = adopt
                .get(&h.fh)
                .copied()
                .unwrap_or_else(|| j.add_handle(id_shard(h.fh), h.fh, h.inode, h.flags));
            h.slot.store(slot, Ordering::Relaxed);
        }
    }

    /// Adds an open descriptor and returns its new handle id.
    pub fn insert(&self, inode: u64, fd: OwnedFd, flags: i32) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.insert_with(fh, inode, fd, flags);
        fh
    }

    /// Adds a handle under a given id (restore).
    pub fn insert_with(&self, fh: u64, inode: u64, fd: OwnedFd, flags: i32) {
        let h = Arc::new(Handle {
            fh,
            inode,
            fd,
            flags,
            dir_lock: Mutex::new(()),
            slot: AtomicU32::new(NO_SLOT),
        });
        let mut shard = write(&self.shards[id_shard(fh)]);
        if let Some(j) = self.journal {
            h.slot.store(
                j.add_handle(id_shard(fh), fh, inode, flags),
                Ordering::Relaxed,
            );
        }
        shard.insert(fh, h);
        self.next.fetch_max(fh + 1, Ordering::Relaxed);
    }

    /// The handle `fh`.
    pub fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        read(&self.shards[id_shard(fh)]).get(&fh).cloned()
    }

    /// Removes `fh`; its descriptor closes when the last request using it ends.
    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        let h = write(&self.shards[id_shard(fh)]).remove(&fh);
        if let (Some(j), Some(h)) = (self.journal, &h) {
            j.remove_handle(h.slot.load(Ordering::Relaxed));
        }
        h
    }

    /// Closes every handle.
    pub fn clear(&self) {
        for s in &self.shards {
            write(s).clear();
        }
    }

    /// The handles open on node `inode`.
    pub fn of_inode(&self, inode: u64) -> Vec<Arc<Handle>> {
        self.shards
            .iter()
            .flat_map(|s| {
                let s = read(s);
                s.values()
                    .filter(|h| h.inode == inode)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every handle, ordered by id.
    pub fn all(&self) -> Vec<Arc<Handle>> {
        let mut v: Vec<_> = self
            .shards
            .iter()
            .flat_map(|s| read(s).values().cloned().collect::<Vec<_>>())
            .collect();
        v.sort_by_key(|h| h.fh);
        v
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).len()).sum()
    }

    /// Next handle id to hand out.
    pub fn next_fh(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Makes sure the next handle id is at least `fh`.
    pub fn bump_next_fh(&self, fh: u64) {
        self.next.fetch_max(fh, Ordering::Relaxed);
    }
}
