// SPDX-License-Identifier: Apache-2.0
//! Live upgrade of a [`PassthroughFs`]: export the tables with their
//! descriptors ([`PassthroughFs::snapshot`]) and rebuild them in the next
//! process ([`PassthroughFs::restore`]), checking everything received.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::table::{Inode, InodeFd, RestoredInode};
use super::{Config, Error, PassthroughFs, SharedDir};
use crate::filesystem::ROOT_ID;
use crate::state::{FsSnapshot, FsState, HandleState, InodeState, LockState};
use crate::sys;

fn bad(m: String) -> Error {
    Error::InvalidState(m)
}

/// A received descriptor's status flags and stat; an error names `what`.
fn flags_and_stat(
    fd: BorrowedFd<'_>,
    what: impl Fn() -> String,
) -> Result<(i32, sys::Stat), Error> {
    let fl = sys::get_fl(fd).map_err(|e| bad(format!("{}: {e}", what())))?;
    let st = sys::stat_fd(fd).map_err(|e| bad(format!("{}: {e}", what())))?;
    Ok((fl, st))
}

/// The received descriptors; each may be taken once.
struct Fds(Vec<Option<OwnedFd>>);

impl Fds {
    fn take(&mut self, i: u32) -> Result<OwnedFd, Error> {
        self.0
            .get_mut(i as usize)
            .and_then(Option::take)
            .ok_or_else(|| bad(format!("descriptor index {i} missing or used twice")))
    }
}

impl PassthroughFs {
    /// The tables' frame without any inode or handle (a crash-restart
    /// checkpoint: the journal holds those).
    pub fn empty_snapshot(&self) -> FsSnapshot {
        let root = self.inodes.root();
        FsSnapshot {
            state: FsState {
                root_dev: root.key.0,
                root_ino: root.key.1,
                next_id: self.inodes.next_id(),
                inodes: Vec::new(),
                handles: Vec::new(),
                locks: Vec::new(),
            },
            fds: Vec::new(),
            opened: Default::default(),
        }
    }

    /// Exports the tables. Stop all request processing first; the descriptors
    /// in the result are borrowed from `self`, but for those of inodes held
    /// as file handles, opened for it (an inode whose handle no longer
    /// opens, its file deleted, is reopened from one of its open files, or
    /// left out when it has none: nothing could reach it any more).
    pub fn snapshot(&self) -> FsSnapshot {
        let mut fds = Vec::new();
        let mut opened = Vec::new();
        let all = self.inodes.all();
        let mut inodes = Vec::with_capacity(all.len());
        for i in &all {
            let fd = match self.export_fd(i) {
                Ok(fd) => fd,
                Err(e) => {
                    log::warn!("upgrade: node {} is gone ({e}); not handed over", i.id);
                    continue;
                }
            };
            let raw = fd.as_fd().as_raw_fd();
            if let InodeFd::Opened(fd) = fd {
                opened.push(fd);
            }
            fds.push(raw);
            inodes.push(InodeState {
                id: i.id,
                dev: i.key.0,
                ino: i.key.1,
                refs: i.refs(),
                generation: i.generation,
                file_type: i.file_type,
                fd_index: (fds.len() - 1) as u32,
            });
        }
        let mut push = |fd: std::os::fd::BorrowedFd<'_>| {
            fds.push(fd.as_raw_fd());
            (fds.len() - 1) as u32
        };
        let handles = self
            .handles
            .all()
            .iter()
            .map(|h| HandleState {
                fh: h.fh,
                inode: h.inode,
                flags: h.flags,
                fd_index: push(h.fd()),
            })
            .collect();
        let locks = self
            .locks
            .all()
            .into_iter()
            .map(|(inode, owner, fd)| {
                fds.push(fd);
                LockState {
                    inode,
                    owner: owner.owner,
                    flock: owner.flock,
                    fd_index: (fds.len() - 1) as u32,
                }
            })
            .collect();
        let mut snap = self.empty_snapshot();
        snap.state.inodes = inodes;
        snap.state.handles = handles;
        snap.state.locks = locks;
        snap.fds = fds;
        snap.opened = std::sync::Arc::new(opened);
        snap
    }

    /// A descriptor of each inode the guest holds, duplicated (or opened)
    /// for the caller while requests go on: what a live upgrade's
    /// successor proves inside the share before the pause
    /// ([`SharedDir::preload`]).
    /// The share's root comes first, then the other views of it this
    /// process knows (a predecessor's, crashed processes'): they show the
    /// successor the mounts on which alone a deleted file it hands over
    /// can be ([`PassthroughFs::restore`]).
    pub fn preload_fds(&self) -> Vec<OwnedFd> {
        let root = sys::dup(self.inodes.root_fd()).ok();
        let others = self
            .foreign_roots
            .iter()
            .filter_map(|r| sys::dup(r.as_fd()).ok());
        root.into_iter()
            .chain(others)
            .chain(
                self.inodes
                    .all()
                    .iter()
                    .filter_map(|i| match self.export_fd(i).ok()? {
                        InodeFd::Held(fd) => sys::dup(fd).ok(),
                        InodeFd::Opened(fd) => Some(fd),
                    }),
            )
            .collect()
    }

    /// A descriptor of inode `i`'s file to hand to another process: its
    /// own, or opened from its file handle, or, when that no longer opens
    /// (the file deleted), an `O_PATH` descriptor reopened through one of
    /// its open files. Err: none of these (nothing could reach it any more).
    fn export_fd<'a>(&self, i: &'a Inode) -> std::io::Result<InodeFd<'a>> {
        i.fd().or_else(|e| {
            // `h` keeps the open file (and so its descriptor number) alive
            // while it is reopened: requests may go on meanwhile (preload).
            let h = self.handles.all().into_iter().find(|h| h.inode == i.id);
            let h = h.ok_or(e)?;
            let name = sys::fd_name(h.fd().as_raw_fd());
            sys::openat(self.proc_self_fd.as_fd(), &name, libc::O_PATH, 0).map(InodeFd::Opened)
        })
    }

    /// Rebuilds a file system from a snapshot taken by an earlier process.
    /// `state` and `fds` are untrusted: every entry is checked against its
    /// descriptor, and every descriptor must be used exactly once. The FUSE
    /// session is restored by the server, not here.
    /// `dir`: the shared directory, opened by [`SharedDir::open`].
    /// Files `dir` proved inside the share beforehand
    /// ([`SharedDir::preload`]) are not walked again.
    pub fn restore(
        cfg: Config,
        mut dir: SharedDir,
        state: &FsState,
        fds: Vec<OwnedFd>,
    ) -> Result<Self, Error> {
        let mut preloaded = std::mem::take(&mut dir.preloaded);
        let roots = std::mem::take(&mut dir.roots);
        let mut fs = Self::at(cfg, dir);
        // The predecessor's views of the root: the mounts its deleted
        // files are on (also for a crash-restart keeper, `keep.rs`).
        fs.foreign_roots = roots;
        fs.check_file_handles()?;
        if (state.root_dev, state.root_ino) != fs.inodes.root().key {
            return Err(bad("the shared directory is not the saved one".into()));
        }
        if state.next_id >= 1 << 62 {
            return Err(bad("node id counter out of range".into()));
        }
        fs.inodes.bump_next_id(state.next_id);
        let mut fds = Fds(fds.into_iter().map(Some).collect());
        fs.restore_inodes(&state.inodes, &mut fds, &mut preloaded)?;
        fs.restore_handles(&state.handles, &mut fds)?;
        fs.restore_locks(&state.locks, &mut fds)?;
        if fds.0.iter().any(Option::is_some) {
            return Err(bad("unused descriptors".into()));
        }
        Ok(fs)
    }

    fn restore_inodes(
        &self,
        inodes: &[InodeState],
        fds: &mut Fds,
        preloaded: &mut HashMap<(u64, u64), OwnedFd>,
    ) -> Result<(), Error> {
        let mut ids = HashSet::new();
        let mut keys = HashSet::new();
        keys.insert(self.inodes.root().key);
        // The mounts of descriptors proven inside the share (the
        // predecessor's sandbox mount of it), and the deleted files, which
        // are accepted only on one of them (see `is_deleted_here`).
        let mut mounts = HashSet::new();
        let mut deleted = Vec::new();
        let types = [
            libc::S_IFREG,
            libc::S_IFDIR,
            libc::S_IFLNK,
            libc::S_IFCHR,
            libc::S_IFBLK,
            libc::S_IFIFO,
            libc::S_IFSOCK,
        ];
        for i in inodes {
            if i.id <= ROOT_ID || i.id >= 1 << 62 || !ids.insert(i.id) {
                return Err(bad(format!("bad or duplicate node id {}", i.id)));
            }
            if i.refs == 0 || !types.contains(&i.file_type) {
                return Err(bad(format!("node {}: bad count or type", i.id)));
            }
            if !keys.insert((i.dev, i.ino)) {
                return Err(bad(format!("node {}: file saved twice", i.id)));
            }
            let fd = fds.take(i.fd_index)?;
            let (fl, st) = flags_and_stat(fd.as_fd(), || format!("node {}", i.id))?;
            if fl & libc::O_PATH == 0
                || (st.st_dev, st.st_ino) != (i.dev, i.ino)
                || st.st_mode & libc::S_IFMT != i.file_type
            {
                return Err(bad(format!("node {}: descriptor does not match", i.id)));
            }
            // A file proven inside before the pause is still that file:
            // its preloaded descriptor keeps the inode number taken. The
            // node is then held through this process's view of the share,
            // where it was proven (LINK and RENAME fail between mounts).
            let own = match preloaded.remove(&(st.st_dev, st.st_ino)) {
                Some(own) => Some(own),
                None => self.share_find(fd.as_fd(), &st),
            };
            if let Some(own) = own {
                mounts.extend(sys::mount_of(fd.as_fd()).map(|m| m.0));
                self.insert_inode(i, own);
            } else if self.is_deleted_here(fd.as_fd(), &st) {
                deleted.push((i, fd));
            } else {
                let name =
                    sys::readlinkat(self.proc_self_fd.as_fd(), &sys::fd_name(fd.as_raw_fd()))
                        .map(|l| String::from_utf8_lossy(&l).into_owned())
                        .unwrap_or_default();
                return Err(bad(format!(
                    "node {}: descriptor is not inside the shared directory (links {}, named {name:?})",
                    i.id, st.st_nlink
                )));
            }
        }
        mounts.extend(
            preloaded
                .values()
                .chain(&self.foreign_roots)
                .filter_map(|f| sys::mount_of(f.as_fd()).ok().map(|m| m.0)),
        );
        for (i, fd) in deleted {
            let on = sys::mount_of(fd.as_fd()).map(|m| m.0);
            if !on.is_ok_and(|m| mounts.contains(&m)) {
                return Err(bad(format!(
                    "node {}: a deleted file on a mount through which no file of the share was \
                     proven",
                    i.id
                )));
            }
            self.insert_inode(i, fd);
        }
        Ok(())
    }

    fn insert_inode(&self, i: &InodeState, fd: OwnedFd) {
        {
            let r = RestoredInode {
                id: i.id,
                fd,
                key: (i.dev, i.ino),
                file_type: i.file_type,
                generation: i.generation,
                refs: i.refs,
            };
            self.inodes
                .insert_restored(r, |fd, dev, t| self.hold_restored(fd, dev, t));
        }
    }

    fn restore_handles(&self, handles: &[HandleState], fds: &mut Fds) -> Result<(), Error> {
        let mut fhs = HashSet::new();
        for h in handles {
            if h.fh >= 1 << 62 || !fhs.insert(h.fh) {
                return Err(bad(format!("bad or duplicate handle {}", h.fh)));
            }
            let inode = self
                .inodes
                .get(h.inode)
                .ok_or_else(|| bad(format!("handle {}: unknown node {}", h.fh, h.inode)))?;
            let fd = fds.take(h.fd_index)?;
            let (fl, st) = flags_and_stat(fd.as_fd(), || format!("handle {}", h.fh))?;
            if fl & libc::O_PATH != 0
                || fl & libc::O_ACCMODE != h.flags & libc::O_ACCMODE
                || (st.st_dev, st.st_ino) != inode.key
                || !(inode.is_reg() || inode.is_dir())
            {
                return Err(bad(format!("handle {}: descriptor does not match", h.fh)));
            }
            self.handles.insert_with(h.fh, h.inode, fd, h.flags);
        }
        Ok(())
    }

    /// Each lock-holding description must be an open (not O_PATH)
    /// description of its node's file, one per node and owner.
    fn restore_locks(&self, locks: &[LockState], fds: &mut Fds) -> Result<(), Error> {
        for l in locks {
            let what = || format!("lock of owner {:#x} on node {}", l.owner, l.inode);
            let inode = self
                .inodes
                .get(l.inode)
                .ok_or_else(|| bad(format!("{}: unknown node", what())))?;
            let fd = fds.take(l.fd_index)?;
            let (fl, st) = flags_and_stat(fd.as_fd(), what)?;
            if fl & libc::O_PATH != 0 || (st.st_dev, st.st_ino) != inode.key {
                return Err(bad(format!("{}: descriptor does not match", what())));
            }
            let owner = crate::filesystem::LockOwner {
                owner: l.owner,
                flock: l.flock,
            };
            if !self.locks.insert_new(l.inode, owner, fd) {
                return Err(bad(format!("{}: saved twice", what())));
            }
        }
        Ok(())
    }

    /// Whether `fd` (stat `st`) names a deleted file (no links left, so no
    /// path to prove) on the shared directory's device. `restore_inodes`
    /// accepts one only on a mount through which a file of the share was
    /// proven: a predecessor confined in its sandbox opens files through
    /// its mount of the share alone, so a descriptor it opened anywhere
    /// else is not of the share.
    fn is_deleted_here(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> bool {
        let deleted = sys::readlinkat(self.proc_self_fd.as_fd(), &sys::fd_name(fd.as_raw_fd()))
            .is_ok_and(|l| l.ends_with(b" (deleted)"));
        st.st_nlink == 0 && deleted && st.st_dev == self.inodes.root().key.0
    }

    /// The path of `fd`'s file (stat `st`) relative to the shared directory,
    /// proven: the path the kernel reports for it, walked component by
    /// component from the root descriptor without following symlinks,
    /// reaches the same device and inode. The kernel's path may be relative
    /// to the sandbox root (the shared directory) or absolute on the host,
    /// so both readings are tried. `None`: no such path (deleted, renamed
    /// meanwhile, or outside the share). The root's path is empty.
    pub(super) fn share_path(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> Option<Vec<u8>> {
        self.share().path_of(fd, st)
    }

    /// [`PassthroughFs::share_path`]'s file, opened along the path through
    /// this process's view of the share.
    pub(super) fn share_find(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> Option<OwnedFd> {
        self.share().find(fd, st).map(|(_, own)| own)
    }

    fn share(&self) -> Share<'_> {
        Share {
            root: self.inodes.root_fd(),
            key: self.inodes.root().key,
            proc_self_fd: self.proc_self_fd.as_fd(),
            host_root: self.cfg.root_dir.as_os_str().as_bytes(),
        }
    }
}

/// What proving a file's place in the share needs.
struct Share<'a> {
    root: BorrowedFd<'a>,
    key: (u64, u64),
    proc_self_fd: BorrowedFd<'a>,
    /// The shared directory's path on the host.
    host_root: &'a [u8],
}

impl Share<'_> {
    /// See [`PassthroughFs::share_path`].
    fn path_of(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> Option<Vec<u8>> {
        self.find(fd, st).map(|(path, _)| path)
    }

    /// [`Share::path_of`], and the file opened along that path: a
    /// descriptor of it through this process's view of the share.
    fn find(&self, fd: BorrowedFd<'_>, st: &sys::Stat) -> Option<(Vec<u8>, OwnedFd)> {
        let key = (st.st_dev, st.st_ino);
        if key == self.key {
            return Some((Vec::new(), sys::dup(self.root).ok()?));
        }
        let link = sys::readlinkat(self.proc_self_fd, &sys::fd_name(fd.as_raw_fd())).ok()?;
        candidates(&link, self.host_root).into_iter().find_map(|p| {
            let own = open_path(self.root, p).ok()?;
            let st = sys::stat_fd(own.as_fd()).ok()?;
            ((st.st_dev, st.st_ino) == key)
                .then(|| (p.strip_prefix(b"/").unwrap_or(p).to_vec(), own))
        })
    }
}

/// The paths under which a file named `link` (its `/proc/self/fd` link,
/// read in this process) may lie in the share, most likely first: the link
/// itself (the kernel names a file of the predecessor's sandbox mount from
/// that mount's root), the link less the share's host path `host_root`,
/// then every shorter tail of the link. A daemon started in a chroot (a
/// container's root, `make test-fresh`) mounts the share over that root,
/// so the kernel names the file from the host's root through the chroot's
/// directory, a prefix nobody here knows. Each candidate is only a guess:
/// [`Share::find`] opens it beneath the share and keeps it only if it is
/// the same file.
fn candidates<'a>(link: &'a [u8], host_root: &[u8]) -> Vec<&'a [u8]> {
    let mut out = vec![link];
    if let Some(rest) = link.strip_prefix(host_root) {
        if host_root == b"/" || rest.is_empty() || rest.starts_with(b"/") {
            out.push(rest);
        }
    }
    let tails = (1..link.len())
        .filter(|&i| link[i] == b'/')
        .map(|i| &link[i..]);
    for tail in tails {
        if !out.contains(&tail) {
            out.push(tail);
        }
    }
    out
}

impl SharedDir {
    /// A live upgrade's successor, before the pause: proves, as
    /// [`PassthroughFs::restore`] would, that each of `fds` (the running
    /// daemon's inodes, `O_PATH`, sent while it still serves) is a file
    /// inside this share (at `host_root` on the host), and keeps those that
    /// are. `restore` then checks only that a descriptor it receives is of
    /// one of these files: the walk through the share, its dearest check,
    /// is done before the guest waits. Returns how many were kept.
    pub fn preload(&mut self, host_root: &Path, fds: Vec<OwnedFd>) -> usize {
        let share = Share {
            root: self.root.as_fd(),
            key: self.key,
            proc_self_fd: self.proc_self_fd.as_fd(),
            host_root: host_root.as_os_str().as_bytes(),
        };
        for fd in fds {
            let Ok((fl, st)) = flags_and_stat(fd.as_fd(), String::new) else {
                continue;
            };
            if fl & libc::O_PATH == 0 {
                continue;
            }
            let Some((_, own)) = share.find(fd.as_fd(), &st) else {
                continue;
            };
            // The predecessor's root shows its mount; every other file is
            // kept as opened through this process's own (LINK and RENAME
            // fail between mounts).
            if (st.st_dev, st.st_ino) == self.key {
                self.roots.push(fd);
            } else {
                self.preloaded.insert((st.st_dev, st.st_ino), own);
            }
        }
        self.preloaded.len() + self.roots.len()
    }
}

/// Opens `path` (relative to `root`) one component at a time, following no
/// symlink and refusing `..`: an `O_PATH` descriptor of the last component.
pub(super) fn open_path(root: BorrowedFd<'_>, path: &[u8]) -> std::io::Result<OwnedFd> {
    let einval = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let parts: Vec<CString> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| component(c).ok_or_else(einval))
        .collect::<Result<_, _>>()?;
    let (last, dirs) = parts.split_last().ok_or_else(einval)?;
    let mut held: Option<OwnedFd> = None;
    for c in dirs {
        let dir = held.as_ref().map_or(root, |f| f.as_fd());
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY;
        held = Some(sys::openat(dir, c, flags, 0)?);
    }
    let dir = held.as_ref().map_or(root, |f| f.as_fd());
    sys::openat(dir, last, libc::O_PATH | libc::O_NOFOLLOW, 0)
}

pub(super) fn component(c: &[u8]) -> Option<CString> {
    if c == b"." || c == b".." {
        return None;
    }
    CString::new(c).ok()
}

#[cfg(test)]
mod tests {
    use super::candidates;

    #[test]
    fn a_file_named_through_a_chroot_is_looked_for_under_each_tail() {
        let link = b"/var/tmp/fresh/root/d/a";
        let want: Vec<&[u8]> = vec![
            b"/var/tmp/fresh/root/d/a",
            b"/tmp/fresh/root/d/a",
            b"/fresh/root/d/a",
            b"/root/d/a",
            b"/d/a",
            b"/a",
        ];
        assert_eq!(candidates(link, b"/srv/share"), want);
    }

    #[test]
    fn the_share_s_host_path_is_tried_second_and_not_twice() {
        let link = b"/srv/share/d/a";
        let got = candidates(link, b"/srv/share");
        assert_eq!(got[..2], [&link[..], b"/d/a"]);
        assert_eq!(got.iter().filter(|c| **c == b"/d/a").count(), 1);
        assert_eq!(candidates(b"/a", b"/"), vec![&b"/a"[..], b"a"]);
    }
}
