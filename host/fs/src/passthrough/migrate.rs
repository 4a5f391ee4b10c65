// SPDX-License-Identifier: Apache-2.0
//! VM live migration of a [`PassthroughFs`]: no descriptor can cross hosts,
//! so the source describes every inode the guest holds by where to find it
//! ([`PassthroughFs::migration_state`]) and the destination opens them again
//! ([`PassthroughFs::load_migration`]), with the same node ids, lookup counts
//! and handle ids, so that the guest carries on as if nothing happened.
//!
//! Both run while the device is suspended (every ring stopped), so no request
//! changes the tables meanwhile.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::table::{InodeKey, RestoredInode};
use super::upgrade::{component, open_path};
use super::{dirents, Error, KeptFiles, PassthroughFs};
use crate::filesystem::{Session, ROOT_ID};
use crate::state::{
    FileHandle, Location, MigratedHandle, MigratedInode, MigrationFs, MAX_HANDLE_SZ,
};
use crate::sys;

/// How the source describes inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SaveOptions {
    /// Describe inodes by file handle instead of by path.
    pub file_handles: bool,
    /// With paths: add each inode's file handle, which the destination
    /// checks against the file it opens.
    pub verify_handles: bool,
}

/// What the destination did with a migration stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Inodes opened again.
    pub inodes: usize,
    /// Handles opened again.
    pub handles: usize,
    /// Inodes (and handles) that could not be found, with why; the guest
    /// gets EIO for them (only when not aborting).
    pub failed: Vec<String>,
    /// Crash restart: nodes and handles served from descriptors the keeper
    /// held (files with no name left), by id.
    pub kept_nodes: Vec<u64>,
    /// See `kept_nodes`.
    pub kept_handles: Vec<u64>,
}

/// Upper bound on the directories searched for inodes whose path the kernel
/// does not give (`find-paths` fallback).
const MAX_SEARCHED_DIRS: usize = 1 << 20;

fn bad(m: String) -> Error {
    Error::InvalidState(m)
}

impl PassthroughFs {
    /// Describes every inode and handle for a destination on another host.
    /// Call with every ring stopped.
    pub fn migration_state(&self, opts: SaveOptions) -> MigrationFs {
        let all = self.inodes.all();
        let mut located: HashMap<u64, Location> = HashMap::new();
        let mut missing: HashMap<InodeKey, u64> = HashMap::new();
        for i in &all {
            let fd = match i.fd() {
                Ok(fd) => fd,
                Err(e) => {
                    let why = format!("cannot open: {e}");
                    located.insert(i.id, Location::Invalid { why });
                    continue;
                }
            };
            let loc = if opts.file_handles {
                match sys::handle_of(fd.as_fd()) {
                    Ok((handle_type, bytes)) => Location::Handle(FileHandle { handle_type, bytes }),
                    Err(e) => Location::Invalid {
                        why: format!("no file handle: {e}"),
                    },
                }
            } else {
                match sys::stat_fd(fd.as_fd()) {
                    Ok(st) if st.st_nlink == 0 => Location::Invalid {
                        why: "deleted while the guest holds it".into(),
                    },
                    Ok(st) => match self.share_path(fd.as_fd(), &st) {
                        Some(path) => Location::FullPath { path },
                        None => {
                            missing.insert(i.key, i.id);
                            continue;
                        }
                    },
                    Err(e) => Location::Invalid {
                        why: format!("cannot stat: {e}"),
                    },
                }
            };
            located.insert(i.id, loc);
        }
        if !missing.is_empty() {
            for (key, path) in self.search_share(&missing) {
                if let Some(id) = missing.remove(&key) {
                    located.insert(id, Location::FullPath { path });
                }
            }
            for id in missing.into_values() {
                located.insert(
                    id,
                    Location::Invalid {
                        why: "not found in the shared directory".into(),
                    },
                );
            }
        }
        let inodes = all
            .iter()
            .map(|i| MigratedInode {
                id: i.id,
                refs: i.refs(),
                generation: i.generation,
                file_type: Some(i.file_type),
                location: located.remove(&i.id).unwrap_or(Location::Invalid {
                    why: "not located".into(),
                }),
                verify: (opts.verify_handles && !opts.file_handles)
                    .then(|| i.fd().and_then(|fd| sys::handle_of(fd.as_fd())).ok())
                    .flatten()
                    .map(|(handle_type, bytes)| FileHandle { handle_type, bytes }),
            })
            .collect();
        let handles = self
            .handles
            .all()
            .iter()
            .map(|h| MigratedHandle {
                fh: h.fh,
                inode: h.inode,
                flags: h.flags,
            })
            .collect();
        MigrationFs {
            next_id: self.inodes.next_id(),
            next_fh: self.handles.next_fh(),
            inodes,
            handles,
        }
    }

    /// Breadth-first search of the shared directory for the files `want`
    /// (symlinks not followed, other mounts not entered); returns the path
    /// of each one found.
    fn search_share(&self, want: &HashMap<InodeKey, u64>) -> Vec<(InodeKey, Vec<u8>)> {
        let root = self.inodes.root();
        let mut found = Vec::new();
        let mut queue: VecDeque<(OwnedFd, Vec<u8>)> = VecDeque::new();
        let Ok(first) = sys::dup(self.inodes.root_fd()) else {
            return found;
        };
        queue.push_back((first, Vec::new()));
        let mut searched = 0;
        while let Some((dir, path)) = queue.pop_front() {
            searched += 1;
            if searched > MAX_SEARCHED_DIRS || found.len() == want.len() {
                break;
            }
            let Ok(names) = self.dir_names(dir.as_fd()) else {
                continue;
            };
            for name in names {
                let Some(c) = component(&name) else { continue };
                let Ok(st) = sys::fstatat(dir.as_fd(), &c, libc::AT_SYMLINK_NOFOLLOW) else {
                    continue;
                };
                let mut p = path.clone();
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(&name);
                if want.contains_key(&(st.st_dev, st.st_ino)) {
                    found.push(((st.st_dev, st.st_ino), p.clone()));
                }
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_dev == root.key.0 {
                    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY;
                    if let Ok(fd) = sys::openat(dir.as_fd(), &c, flags, 0) {
                        queue.push_back((fd, p));
                    }
                }
            }
        }
        found
    }

    /// The names in directory `dir` (an `O_PATH` descriptor).
    fn dir_names(&self, dir: BorrowedFd<'_>) -> std::io::Result<Vec<Vec<u8>>> {
        let fd = sys::openat(
            self.proc_self_fd.as_fd(),
            &sys::fd_name(dir.as_raw_fd()),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        let mut names = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = sys::getdents64(fd.as_fd(), &mut buf)?;
            if n == 0 {
                return Ok(names);
            }
            for ent in dirents(&buf[..n]) {
                let Ok(ent) = ent else { return Ok(names) };
                if ent.name != b"." && ent.name != b".." {
                    names.push(ent.name.to_vec());
                }
            }
        }
    }

    /// Opens again every inode and handle a source described, replacing
    /// whatever the tables held. With `abort_on_error` the first inode or
    /// handle that cannot be found fails the whole load (the migration is
    /// aborted and the source carries on); without it, such nodes and
    /// handles answer EIO to the guest.
    pub fn load_migration(
        &self,
        st: &MigrationFs,
        abort_on_error: bool,
    ) -> Result<LoadReport, Error> {
        self.load_tables(st, abort_on_error, &HashMap::new(), None)
    }

    /// [`PassthroughFs::load_migration`], where each node found in
    /// `expect` must open the file of that host identity (else it is lost).
    pub(super) fn load_tables(
        &self,
        st: &MigrationFs,
        abort_on_error: bool,
        expect: &HashMap<u64, InodeKey>,
        mut kept: Option<&mut KeptFiles>,
    ) -> Result<LoadReport, Error> {
        check_state(st, self.cfg.max_open)?;
        self.destroy();
        let mut report = LoadReport::default();
        let (opened, failed) = self.open_inodes(st, expect, &mut kept, &mut report);
        if let Some((id, why)) = failed.iter().min_by_key(|(id, _)| **id) {
            if abort_on_error {
                return Err(bad(format!(
                    "node {id}: {why} ({} of {} nodes not found)",
                    failed.len(),
                    st.inodes.len()
                )));
            }
        }
        let refs: HashMap<u64, u64> = st.inodes.iter().map(|m| (m.id, m.refs)).collect();
        let mut lost = self.lost_lock();
        for (id, why) in &failed {
            report.failed.push(format!("node {id}: {why}"));
            lost.inodes.insert(*id, refs.get(id).copied().unwrap_or(1));
        }
        drop(lost);
        report.inodes = opened.len();
        for r in opened.into_values() {
            self.inodes
                .insert_restored(r, |fd, dev, t| self.hold_restored(fd, dev, t));
        }
        self.inodes.bump_next_id(st.next_id.min(1 << 62));
        self.load_handles(&st.handles, abort_on_error, &mut report, kept)?;
        self.handles.bump_next_fh(st.next_fh.min(1 << 62));
        report.failed.sort();
        Ok(report)
    }

    /// Opens every inode of `st` again: the nodes opened, and those that
    /// could not be, with why.
    fn open_inodes(
        &self,
        st: &MigrationFs,
        expect: &HashMap<u64, InodeKey>,
        kept: &mut Option<&mut KeptFiles>,
        report: &mut LoadReport,
    ) -> (HashMap<u64, RestoredInode>, HashMap<u64, String>) {
        let mut opened: HashMap<u64, RestoredInode> = HashMap::new();
        let mut failed: HashMap<u64, String> = HashMap::new();
        let mut keys: HashSet<InodeKey> = HashSet::from([self.inodes.root().key]);
        // open_by_handle_at(2) wants a mount descriptor that is not O_PATH.
        let mount_fd = self.reopen(self.inodes.root(), libc::O_RDONLY | libc::O_DIRECTORY);
        let mount_fd = mount_fd.as_ref().ok();
        // Paths name their parent, which may come later in the list: a node
        // whose parent is not resolved yet waits under the parent's id and
        // is resolved right after it (with the nodes waiting under it in
        // turn), so each node is looked at once, in one pass.
        let mut waiting: HashMap<u64, Vec<&MigratedInode>> = HashMap::new();
        let mut ready: Vec<&MigratedInode> = Vec::new();
        for m in &st.inodes {
            if let Location::Path { parent, .. } = &m.location {
                let resolved = *parent == ROOT_ID
                    || opened.contains_key(parent)
                    || failed.contains_key(parent);
                if !resolved {
                    waiting.entry(*parent).or_default().push(m);
                    continue;
                }
            }
            ready.push(m);
            while let Some(m) = ready.pop() {
                // A kept descriptor not proven (a linked O_TMPFILE, whose
                // descriptor still names no path) is found as the others.
                let from_keeper = kept
                    .as_mut()
                    .and_then(|k| k.take_node(m.id))
                    .and_then(|fd| self.check_kept(fd, kept.as_deref()))
                    .map(|fd| self.own_view(fd, mount_fd));
                let proven = from_keeper.is_some();
                let r = match from_keeper {
                    Some(fd) => Ok(fd),
                    None => self.open_location(m, mount_fd, &opened),
                };
                let r = r.and_then(|fd| self.check_opened(m, fd, &mut keys, expect, proven));
                if proven && r.is_ok() {
                    report.kept_nodes.push(m.id);
                }
                match r {
                    Ok(r) => {
                        opened.insert(m.id, r);
                    }
                    Err(why) => {
                        failed.insert(m.id, why);
                    }
                }
                if let Some(children) = waiting.remove(&m.id) {
                    ready.extend(children.into_iter().rev());
                }
            }
        }
        // Never resolved: a parent missing from the state, or parents that
        // name each other in a cycle.
        for m in waiting.into_values().flatten() {
            failed.insert(m.id, "its parent directory is not part of the state".into());
        }
        (opened, failed)
    }

    /// Opens where `m` says it is; a node found by name is opened after its
    /// parent was opened or failed.
    fn open_location(
        &self,
        m: &MigratedInode,
        mount_fd: Option<&OwnedFd>,
        opened: &HashMap<u64, RestoredInode>,
    ) -> Result<OwnedFd, String> {
        let nofollow = libc::O_PATH | libc::O_NOFOLLOW;
        // What the operator is told (names escaped: they come from the guest).
        let what = match &m.location {
            Location::Path { parent, name } => {
                format!(" {:?} in node {parent}", String::from_utf8_lossy(name))
            }
            Location::FullPath { path } => format!(" {:?}", String::from_utf8_lossy(path)),
            _ => String::new(),
        };
        let result = match &m.location {
            Location::Invalid { why } => return Err(format!("source: {why}")),
            Location::Path { parent, name } => {
                let dir = if *parent == ROOT_ID {
                    self.inodes.root_fd()
                } else if let Some(p) = opened.get(parent) {
                    p.fd.as_fd()
                } else {
                    return Err(format!("its parent {parent} was not found"));
                };
                match component(name).filter(|_| !name.contains(&b'/')) {
                    Some(c) => sys::openat(dir, &c, nofollow, 0),
                    None => return Err("invalid name".into()),
                }
            }
            Location::FullPath { path } => open_path(self.inodes.root_fd(), path),
            Location::Handle(h) => match mount_fd {
                Some(m) => sys::open_by_handle(m.as_fd(), h.handle_type, &h.bytes, libc::O_PATH),
                None => return Err("the shared directory cannot be opened".into()),
            },
        };
        result.map_err(|e| format!("cannot open{what}: {e}"))
    }

    /// Checks an opened inode against what the source said, and that it is
    /// new and inside the share (unless `proven` so already).
    fn check_opened(
        &self,
        m: &MigratedInode,
        fd: OwnedFd,
        keys: &mut HashSet<InodeKey>,
        expect: &HashMap<u64, InodeKey>,
        proven: bool,
    ) -> Result<RestoredInode, String> {
        let st = sys::stat_fd(fd.as_fd()).map_err(|e| format!("cannot stat: {e}"))?;
        let file_type = st.st_mode & libc::S_IFMT;
        if m.file_type.is_some_and(|t| t != file_type) {
            return Err("file type differs from the source's".into());
        }
        if let Some(want) = &m.verify {
            let got = sys::handle_of(fd.as_fd()).map_err(|e| format!("no file handle: {e}"))?;
            if (got.0, &got.1) != (want.handle_type, &want.bytes) {
                return Err("file handle differs: not the source's file".into());
            }
        }
        if !proven
            && matches!(m.location, Location::Handle(_))
            && !self.is_inside_share(fd.as_fd(), &st)
        {
            return Err("file handle names a file outside the shared directory".into());
        }
        let key = (st.st_dev, st.st_ino);
        if expect.get(&m.id).is_some_and(|&k| k != key) {
            return Err("its name now leads to another file".into());
        }
        if !keys.insert(key) {
            return Err("another node names the same file".into());
        }
        Ok(RestoredInode {
            id: m.id,
            fd,
            key,
            file_type,
            generation: m.generation,
            refs: m.refs,
        })
    }

    /// A node's descriptor from the keeper: an `O_PATH` descriptor inside
    /// the share (`kept_is_inside`).
    /// A kept node's file through this process's view of the share
    /// (`mount`): along its proven path when it has names left, else by its
    /// file handle ([`on_mount`]). Not by handle when it has names: the
    /// kernel then hands back any of the file's dentries, possibly a name
    /// removed since (a hard link the guest made and unlinked), which no
    /// successor could prove inside the share.
    fn own_view(&self, fd: OwnedFd, mount: Option<&OwnedFd>) -> OwnedFd {
        if mount.is_some() {
            let named = sys::stat_fd(fd.as_fd()).ok().filter(|st| st.st_nlink != 0);
            if let Some(own) = named.and_then(|st| self.share_find(fd.as_fd(), &st)) {
                return own;
            }
        }
        on_mount(fd, mount)
    }

    fn check_kept(&self, fd: OwnedFd, kept: Option<&KeptFiles>) -> Option<OwnedFd> {
        let fl = sys::get_fl(fd.as_fd()).ok()?;
        let st = sys::stat_fd(fd.as_fd()).ok()?;
        let inside = kept.is_some_and(|k| self.kept_is_inside(fd.as_fd(), &st, k));
        (fl & libc::O_PATH != 0 && inside).then_some(fd)
    }

    fn is_inside_share(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> bool {
        self.share_path(fd, st).is_some()
    }

    fn load_handles(
        &self,
        handles: &[MigratedHandle],
        abort_on_error: bool,
        report: &mut LoadReport,
        mut kept: Option<&mut KeptFiles>,
    ) -> Result<(), Error> {
        let mut lost = Vec::new();
        for h in handles {
            let from_keeper = kept.as_mut().and_then(|k| k.take_handle(h.fh));
            let kept_fd = from_keeper.and_then(|fd| self.check_kept_handle(h, fd));
            if let Some(fd) = kept_fd {
                self.handles.insert_with(h.fh, h.inode, fd, h.flags);
                report.handles += 1;
                report.kept_handles.push(h.fh);
                continue;
            }
            let opened = match self.inodes.get(h.inode) {
                Some(inode) if inode.is_reg() || inode.is_dir() => {
                    // Never truncate again what the guest has written since.
                    let flags = h.flags & !(libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL);
                    self.reopen(&inode, flags).map_err(|e| e.to_string())
                }
                Some(_) => Err("not a regular file or directory".into()),
                None => Err(format!("its node {} was not found", h.inode)),
            };
            match opened {
                Ok(fd) => {
                    self.handles.insert_with(h.fh, h.inode, fd, h.flags);
                    report.handles += 1;
                }
                Err(why) if abort_on_error => {
                    self.destroy();
                    return Err(bad(format!("handle {}: {why}", h.fh)));
                }
                Err(why) => {
                    report.failed.push(format!("handle {}: {why}", h.fh));
                    lost.push(h.fh);
                }
            }
        }
        self.lost_lock().handles.extend(lost);
        Ok(())
    }
}

impl PassthroughFs {
    /// An open file's descriptor from the keeper, if it is one of handle
    /// `h`'s node, opened with `h`'s access mode (else it is opened again).
    fn check_kept_handle(&self, h: &MigratedHandle, fd: OwnedFd) -> Option<OwnedFd> {
        let inode = self.inodes.get(h.inode)?;
        let fl = sys::get_fl(fd.as_fd()).ok()?;
        let st = sys::stat_fd(fd.as_fd()).ok()?;
        let same = fl & libc::O_PATH == 0
            && fl & libc::O_ACCMODE == h.flags & libc::O_ACCMODE
            && (st.st_dev, st.st_ino) == inode.key;
        same.then_some(fd)
    }
}

/// `fd`'s file opened through `mount` (this process's view of the share)
/// by its file handle, if it has one: a crashed process's descriptor is on
/// that process's mount, and LINK or RENAME between mounts fail (EXDEV).
/// Else `fd` itself.
fn on_mount(fd: OwnedFd, mount: Option<&OwnedFd>) -> OwnedFd {
    let Some(m) = mount else {
        return fd;
    };
    let own = sys::handle_of(fd.as_fd())
        .and_then(|(t, bytes)| sys::open_by_handle(m.as_fd(), t, &bytes, libc::O_PATH));
    let key = |f: BorrowedFd<'_>| sys::stat_fd(f).ok().map(|s| (s.st_dev, s.st_ino));
    match own {
        Ok(o) if key(o.as_fd()).is_some() && key(o.as_fd()) == key(fd.as_fd()) => o,
        _ => fd,
    }
}

/// Refuses, before any work, a state this process must not load: more
/// nodes and open files than `max_open` (0: no cap) lets it hold, bad or
/// repeated ids, file handles longer than the kernel makes.
fn check_state(st: &MigrationFs, max_open: usize) -> Result<(), Error> {
    let (nodes, files) = (st.inodes.len(), st.handles.len());
    if max_open != 0 && nodes.saturating_add(files) > max_open {
        return Err(bad(format!(
            "{nodes} nodes and {files} open files are more than the {max_open} this \
             process may hold (--max-open)"
        )));
    }
    check_ids(st)?;
    for m in &st.inodes {
        let handles = match &m.location {
            Location::Handle(h) => [Some(h), m.verify.as_ref()],
            _ => [None, m.verify.as_ref()],
        };
        if let Some(h) = handles
            .into_iter()
            .flatten()
            .find(|h| h.bytes.len() > MAX_HANDLE_SZ)
        {
            return Err(bad(format!(
                "node {}: file handle of {} bytes (at most {MAX_HANDLE_SZ})",
                m.id,
                h.bytes.len()
            )));
        }
    }
    Ok(())
}

/// Node and handle ids must be in range and unique. Handle 0 is one:
/// virtiofsd numbers its handles from 0, and a guest may hold that one.
fn check_ids(st: &MigrationFs) -> Result<(), Error> {
    let mut ids = HashSet::new();
    for m in &st.inodes {
        if m.id <= ROOT_ID || m.id >= 1 << 62 || !ids.insert(m.id) || m.refs == 0 {
            return Err(bad(format!("bad or duplicate node id {}", m.id)));
        }
    }
    let mut fhs = HashSet::new();
    for h in &st.handles {
        if h.fh >= 1 << 62 || !fhs.insert(h.fh) {
            return Err(bad(format!("bad or duplicate handle {}", h.fh)));
        }
    }
    Ok(())
}
