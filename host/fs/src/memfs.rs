// SPDX-License-Identifier: Apache-2.0
//! An in-memory file system: directories, regular files (data in a `Vec<u8>`)
//! and symlinks, with lookup counts and FORGET. It proves the
//! [`FileSystem`](crate::filesystem::FileSystem) seam and serves tests and the fuzzer; it is not tuned.
//!
//! A node lives while it is linked in a directory, the guest holds lookups on
//! it, or a handle is open on it. One mutex guards everything. READ and WRITE
//! use the slice side of [`DataSink`]/[`DataSource`], so the server treats
//! them exactly like the passthrough file system's.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::io;
use std::sync::{Mutex, MutexGuard};

use crate::abi::init_flags;
use crate::filesystem::{
    Capabilities, Context, DataSink, DataSource, Dax, DirEntry, Entry, Extended, Files, Locks,
    Nodes, Opened, Session, SetAttr, Stat, StatFs, ROOT_ID,
};

/// Largest file (bigger writes get `EFBIG`).
pub const MAX_FILE_SIZE: u64 = 64 << 20;

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

#[derive(Debug)]
enum Kind {
    Dir(BTreeMap<Vec<u8>, u64>),
    File(Vec<u8>),
    Symlink(Vec<u8>),
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    /// Permission bits.
    perm: u32,
    uid: u32,
    gid: u32,
    /// Parent directory (for `..`; the root is its own parent).
    parent: u64,
    /// Whether a directory entry names it.
    linked: bool,
    lookups: u64,
    open: u64,
}

impl Node {
    fn file_type(&self) -> u32 {
        match self.kind {
            Kind::Dir(_) => libc::S_IFDIR,
            Kind::File(_) => libc::S_IFREG,
            Kind::Symlink(_) => libc::S_IFLNK,
        }
    }

    fn dir(&self) -> io::Result<&BTreeMap<Vec<u8>, u64>> {
        match &self.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(err(libc::ENOTDIR)),
        }
    }
}

#[derive(Debug)]
struct Inner {
    nodes: HashMap<u64, Node>,
    handles: HashMap<u64, u64>,
    next_id: u64,
    next_fh: u64,
}

/// The in-memory file system.
#[derive(Debug)]
pub struct MemFs {
    inner: Mutex<Inner>,
}

impl Default for MemFs {
    fn default() -> Self {
        Self::new()
    }
}

impl MemFs {
    /// An empty file system: just the root directory.
    pub fn new() -> MemFs {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT_ID, root_node());
        MemFs {
            inner: Mutex::new(Inner {
                nodes,
                handles: HashMap::new(),
                next_id: ROOT_ID + 1,
                next_fh: 1,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.lock().nodes.len()
    }

    /// Lookup count of `node` (None if it does not exist).
    pub fn lookup_count(&self, node: u64) -> Option<u64> {
        self.lock().nodes.get(&node).map(|n| n.lookups)
    }

    /// Number of open handles.
    pub fn handle_count(&self) -> usize {
        self.lock().handles.len()
    }
}

fn root_node() -> Node {
    Node {
        kind: Kind::Dir(BTreeMap::new()),
        perm: 0o755,
        uid: 0,
        gid: 0,
        parent: ROOT_ID,
        linked: true,
        lookups: 0,
        open: 0,
    }
}

impl Inner {
    fn node(&self, id: u64) -> io::Result<&Node> {
        self.nodes.get(&id).ok_or_else(|| err(libc::EBADF))
    }

    fn node_mut(&mut self, id: u64) -> io::Result<&mut Node> {
        self.nodes.get_mut(&id).ok_or_else(|| err(libc::EBADF))
    }

    fn stat(&self, id: u64) -> io::Result<Stat> {
        let n = self.node(id)?;
        // SAFETY: `stat64` is plain old data; all zeroes is a valid value.
        let mut st: Stat = unsafe { std::mem::zeroed() };
        st.st_ino = id;
        st.st_mode = n.file_type() | n.perm;
        st.st_uid = n.uid;
        st.st_gid = n.gid;
        st.st_blksize = 4096;
        let (size, nlink) = match &n.kind {
            Kind::Dir(d) => (0, 2 + d.len()),
            Kind::File(v) | Kind::Symlink(v) => (v.len(), usize::from(n.linked)),
        };
        st.st_size = size as i64;
        st.st_blocks = size.div_ceil(512) as i64;
        st.st_nlink = nlink as _;
        Ok(st)
    }

    /// Counts one lookup of `id` and returns its entry.
    fn entry(&mut self, id: u64) -> io::Result<Entry> {
        self.node_mut(id)?.lookups += 1;
        Ok(Entry {
            inode: id,
            generation: 0,
            attr: self.stat(id)?,
            submount: false,
        })
    }

    fn child(&self, parent: u64, name: &[u8]) -> io::Result<u64> {
        let p = self.node(parent)?;
        match name {
            b"." => Ok(parent),
            b".." => Ok(p.parent),
            _ => p.dir()?.get(name).copied().ok_or_else(|| err(libc::ENOENT)),
        }
    }

    /// Drops `id` once nothing refers to it.
    fn maybe_drop(&mut self, id: u64) {
        let dead = self
            .nodes
            .get(&id)
            .is_some_and(|n| id != ROOT_ID && !n.linked && n.lookups == 0 && n.open == 0);
        if dead {
            self.nodes.remove(&id);
        }
    }

    /// Creates a node named `name` in `parent` and counts one lookup.
    fn add(
        &mut self,
        ctx: Context,
        parent: u64,
        name: &CStr,
        kind: Kind,
        perm: u32,
    ) -> io::Result<Entry> {
        let name = name.to_bytes().to_vec();
        if self.node(parent)?.dir()?.contains_key(&name) {
            return Err(err(libc::EEXIST));
        }
        let id = self.next_id;
        self.next_id += 1;
        let node = Node {
            kind,
            perm: perm & 0o7777,
            uid: ctx.uid,
            gid: ctx.gid,
            parent,
            linked: true,
            lookups: 0,
            open: 0,
        };
        self.nodes.insert(id, node);
        if let Kind::Dir(d) = &mut self.node_mut(parent)?.kind {
            d.insert(name, id);
        }
        self.entry(id)
    }

    /// Removes the entry `name` of `parent`.
    fn remove(&mut self, parent: u64, name: &CStr, dir: bool) -> io::Result<()> {
        let id = self.child(parent, name.to_bytes())?;
        let n = self.node(id)?;
        match (&n.kind, dir) {
            (Kind::Dir(d), true) if !d.is_empty() => return Err(err(libc::ENOTEMPTY)),
            (Kind::Dir(_), true) => {}
            (Kind::Dir(_), false) => return Err(err(libc::EISDIR)),
            (_, true) => return Err(err(libc::ENOTDIR)),
            (_, false) => {}
        }
        if let Kind::Dir(d) = &mut self.node_mut(parent)?.kind {
            d.remove(name.to_bytes());
        }
        self.node_mut(id)?.linked = false;
        self.maybe_drop(id);
        Ok(())
    }

    fn open(&mut self, id: u64, want_dir: bool) -> io::Result<Opened> {
        let n = self.node_mut(id)?;
        match (&n.kind, want_dir) {
            (Kind::Dir(_), false) => return Err(err(libc::EISDIR)),
            (Kind::File(_), false) | (Kind::Dir(_), true) => {}
            (_, true) => return Err(err(libc::ENOTDIR)),
            (Kind::Symlink(_), false) => return Err(err(libc::ELOOP)),
        }
        n.open += 1;
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, id);
        Ok(Opened { fh, flags: 0 })
    }

    fn release(&mut self, fh: u64) -> io::Result<()> {
        let id = self.handles.remove(&fh).ok_or_else(|| err(libc::EBADF))?;
        if let Some(n) = self.nodes.get_mut(&id) {
            n.open = n.open.saturating_sub(1);
        }
        self.maybe_drop(id);
        Ok(())
    }

    fn file(&mut self, fh: u64) -> io::Result<&mut Vec<u8>> {
        let id = *self.handles.get(&fh).ok_or_else(|| err(libc::EBADF))?;
        match &mut self.node_mut(id)?.kind {
            Kind::File(v) => Ok(v),
            _ => Err(err(libc::EBADF)),
        }
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &CStr,
        newparent: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(err(libc::EINVAL));
        }
        let id = self.child(parent, name.to_bytes())?;
        self.node(newparent)?.dir()?;
        if self.is_ancestor(id, newparent) {
            return Err(err(libc::EINVAL));
        }
        match self.child(newparent, newname.to_bytes()) {
            Ok(old) if old == id => return Ok(()),
            Ok(_) if flags & libc::RENAME_NOREPLACE != 0 => return Err(err(libc::EEXIST)),
            Ok(old) => {
                let dir = matches!(self.node(old)?.kind, Kind::Dir(_));
                if dir != matches!(self.node(id)?.kind, Kind::Dir(_)) {
                    return Err(err(if dir { libc::EISDIR } else { libc::ENOTDIR }));
                }
                self.remove(newparent, newname, dir)?;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        if let Kind::Dir(d) = &mut self.node_mut(parent)?.kind {
            d.remove(name.to_bytes());
        }
        if let Kind::Dir(d) = &mut self.node_mut(newparent)?.kind {
            d.insert(newname.to_bytes().to_vec(), id);
        }
        self.node_mut(id)?.parent = newparent;
        Ok(())
    }

    /// Whether `a` is `b` or one of its ancestors.
    fn is_ancestor(&self, a: u64, mut b: u64) -> bool {
        loop {
            if a == b {
                return true;
            }
            match self.nodes.get(&b) {
                Some(n) if b != ROOT_ID => b = n.parent,
                _ => return false,
            }
        }
    }
}

impl Session for MemFs {
    fn capabilities(&self) -> Capabilities {
        use init_flags::*;
        Capabilities {
            init_flags: ASYNC_READ
                | ATOMIC_O_TRUNC
                | BIG_WRITES
                | PARALLEL_DIROPS
                | MAX_PAGES
                | INIT_EXT
                | DO_READDIRPLUS
                | READDIRPLUS_AUTO,
            xattr: false,
            readdirplus: true,
            readonly: false,
            timeout: std::time::Duration::ZERO,
            ids: crate::ids::Translation::default(),
            map_alignment: 0,
            required_init_flags: 0,
        }
    }

    fn init(&self, _: u64) {
        self.destroy();
    }

    fn destroy(&self) {
        let mut g = self.lock();
        g.handles.clear();
        for n in g.nodes.values_mut() {
            n.lookups = 0;
            n.open = 0;
        }
        let dead: Vec<u64> = g
            .nodes
            .iter()
            .filter(|(_, n)| !n.linked)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            g.maybe_drop(id);
        }
    }
}

impl Nodes for MemFs {
    fn lookup(&self, _: Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let mut g = self.lock();
        let id = g.child(parent, name.to_bytes())?;
        g.entry(id)
    }

    fn forget(&self, node: u64, count: u64) {
        let mut g = self.lock();
        if let Some(n) = g.nodes.get_mut(&node) {
            n.lookups = n.lookups.saturating_sub(count);
        }
        g.maybe_drop(node);
    }

    fn getattr(&self, _: Context, node: u64) -> io::Result<Stat> {
        self.lock().stat(node)
    }

    fn setattr(&self, _: Context, node: u64, a: &SetAttr) -> io::Result<Stat> {
        let mut g = self.lock();
        let n = g.node_mut(node)?;
        if let Some(size) = a.size {
            match &mut n.kind {
                Kind::File(v) if size <= MAX_FILE_SIZE => v.resize(size as usize, 0),
                Kind::File(_) => return Err(err(libc::EFBIG)),
                Kind::Dir(_) => return Err(err(libc::EISDIR)),
                Kind::Symlink(_) => return Err(err(libc::EINVAL)),
            }
        }
        if let Some(mode) = a.mode {
            n.perm = mode & 0o7777;
        }
        n.uid = a.uid.unwrap_or(n.uid);
        n.gid = a.gid.unwrap_or(n.gid);
        g.stat(node)
    }

    fn readlink(&self, _: Context, node: u64) -> io::Result<Vec<u8>> {
        match &self.lock().node(node)?.kind {
            Kind::Symlink(t) => Ok(t.clone()),
            _ => Err(err(libc::EINVAL)),
        }
    }

    fn symlink(&self, ctx: Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        let kind = Kind::Symlink(target.to_bytes().to_vec());
        self.lock().add(ctx, parent, name, kind, 0o777)
    }

    fn mkdir(&self, ctx: Context, parent: u64, name: &CStr, mode: u32) -> io::Result<Entry> {
        self.lock()
            .add(ctx, parent, name, Kind::Dir(BTreeMap::new()), mode)
    }

    fn unlink(&self, _: Context, parent: u64, name: &CStr) -> io::Result<()> {
        self.lock().remove(parent, name, false)
    }

    fn rmdir(&self, _: Context, parent: u64, name: &CStr) -> io::Result<()> {
        self.lock().remove(parent, name, true)
    }

    fn rename(
        &self,
        _: Context,
        parent: u64,
        name: &CStr,
        newparent: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        self.lock().rename(parent, name, newparent, newname, flags)
    }

    fn statfs(&self, _: Context, _: u64) -> io::Result<StatFs> {
        // SAFETY: `statfs64` is plain old data; all zeroes is a valid value.
        let mut s: StatFs = unsafe { std::mem::zeroed() };
        s.f_bsize = 4096;
        s.f_frsize = 4096;
        s.f_namelen = 255;
        s.f_files = self.lock().nodes.len() as u64;
        Ok(s)
    }

    fn access(&self, _: Context, node: u64, _: u32) -> io::Result<()> {
        self.lock().node(node).map(|_| ())
    }
}

impl Files for MemFs {
    fn open(&self, _: Context, node: u64, flags: u32) -> io::Result<Opened> {
        let mut g = self.lock();
        let o = g.open(node, false)?;
        if flags as i32 & libc::O_TRUNC != 0 {
            g.file(o.fh)?.clear();
        }
        Ok(o)
    }

    fn create(
        &self,
        ctx: Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        let mut g = self.lock();
        let e = match g.add(ctx, parent, name, Kind::File(Vec::new()), mode) {
            Err(e)
                if e.raw_os_error() == Some(libc::EEXIST) && flags as i32 & libc::O_EXCL == 0 =>
            {
                let id = g.child(parent, name.to_bytes())?;
                g.entry(id)?
            }
            r => r?,
        };
        match g.open(e.inode, false) {
            Ok(o) => {
                if flags as i32 & libc::O_TRUNC != 0 {
                    g.file(o.fh)?.clear();
                }
                Ok((e, o))
            }
            Err(open_err) => {
                if let Some(n) = g.nodes.get_mut(&e.inode) {
                    n.lookups -= 1;
                }
                Err(open_err)
            }
        }
    }

    fn read(
        &self,
        _: Context,
        _: u64,
        fh: u64,
        offset: u64,
        size: usize,
        sink: &mut dyn DataSink,
    ) -> io::Result<usize> {
        let mut g = self.lock();
        let data = g.file(fh)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(size).min(data.len());
        sink.copy_from_slice(&data[start..end])
    }

    fn write(
        &self,
        _: Context,
        _: u64,
        fh: u64,
        offset: u64,
        size: usize,
        source: &mut dyn DataSource,
    ) -> io::Result<usize> {
        let end = offset
            .checked_add(size as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| err(libc::EFBIG))?;
        self.lock().file(fh)?;
        let mut buf = vec![0u8; size];
        source.copy_to_slice(&mut buf)?;
        let mut g = self.lock();
        let data = g.file(fh)?;
        if data.len() < end as usize {
            data.resize(end as usize, 0);
        }
        data[offset as usize..end as usize].copy_from_slice(&buf);
        Ok(size)
    }

    fn release(&self, _: Context, _: u64, fh: u64) -> io::Result<()> {
        self.lock().release(fh)
    }

    fn flush(&self, _: Context, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }

    fn fsync(&self, _: Context, _: u64, _: u64, _: bool) -> io::Result<()> {
        Ok(())
    }

    fn opendir(&self, _: Context, node: u64, _: u32) -> io::Result<Opened> {
        self.lock().open(node, true)
    }

    fn readdir(
        &self,
        _: Context,
        _: u64,
        fh: u64,
        offset: u64,
        _: usize,
        add: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> io::Result<()> {
        // Collected first: `add` may call back (READDIRPLUS lookups).
        let list = {
            let g = self.lock();
            let id = *g.handles.get(&fh).ok_or_else(|| err(libc::EBADF))?;
            let n = g.node(id)?;
            let mut list = vec![
                (id, libc::DT_DIR, b".".to_vec()),
                (n.parent, libc::DT_DIR, b"..".to_vec()),
            ];
            for (name, &child) in n.dir()? {
                let typ = match g.node(child)?.kind {
                    Kind::Dir(_) => libc::DT_DIR,
                    Kind::File(_) => libc::DT_REG,
                    Kind::Symlink(_) => libc::DT_LNK,
                };
                list.push((child, typ, name.clone()));
            }
            list
        };
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, typ, name)) in list.iter().enumerate().skip(skip) {
            let e = DirEntry {
                ino: *ino,
                off: i as u64 + 1,
                typ: u32::from(*typ),
                name,
            };
            if !add(&e) {
                break;
            }
        }
        Ok(())
    }

    fn readdirplus_lookup(&self, _: Context, parent: u64, name: &[u8]) -> Option<Entry> {
        if name == b"." || name == b".." {
            return None;
        }
        let mut g = self.lock();
        let id = g.child(parent, name).ok()?;
        g.entry(id).ok()
    }

    fn releasedir(&self, _: Context, _: u64, fh: u64) -> io::Result<()> {
        self.lock().release(fh)
    }

    fn fsyncdir(&self, _: Context, _: u64, _: u64, _: bool) -> io::Result<()> {
        Ok(())
    }
}

impl Locks for MemFs {}

impl Extended for MemFs {}

impl Dax for MemFs {}
