// SPDX-License-Identifier: Apache-2.0
//! [`Nodes`] for [`PassthroughFs`]: LOOKUP and FORGET, attributes, and the
//! operations that make, remove and rename names (each name resolved with
//! `*at()` calls relative to a descriptor inside the share, never
//! following a symbolic link), with STATFS, ACCESS and SYNCFS.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use super::table::Inode;
use super::{err, replayed, timespec, Ctx, PassthroughFs};
use crate::abi::flags as fflags;
use crate::filesystem::{Entry, Nodes, SetAttr, Stat, StatFs, ROOT_ID};
use crate::sys;

impl PassthroughFs {
    /// UNLINK (`dir` false) and RMDIR (`dir` true).
    fn remove_entry(&self, parent: u64, name: &CStr, dir: bool) -> io::Result<()> {
        self.writable()?;
        let p = self.dir(parent)?;
        let p_fd = p.fd()?;
        let victim = self.held_at(p_fd.as_fd(), name);
        if let Some(v) = &victim {
            self.lose_name(v);
        }
        let res = sys::unlinkat(p_fd.as_fd(), name, if dir { libc::AT_REMOVEDIR } else { 0 });
        if let Some(v) = &victim {
            self.lose_name(v);
        }
        replayed(res, libc::ENOENT)
    }
}

impl Nodes for PassthroughFs {
    fn lookup(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<Entry> {
        let p = self.inode(parent)?;
        if !p.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        if parent == ROOT_ID && name.to_bytes() == b".." {
            return self.do_lookup(&p, c".");
        }
        self.do_lookup(&p, name)
    }

    fn forget(&self, id: u64, n: u64) {
        let known = self.inodes.forget(id, n);
        self.forgotten(id);
        if !known {
            let mut lost = self.lost_lock();
            if let Some(refs) = lost.inodes.get_mut(&id) {
                *refs = refs.saturating_sub(n);
                if *refs == 0 {
                    lost.inodes.remove(&id);
                }
            }
        }
    }

    fn getattr(&self, _: Ctx, id: u64) -> io::Result<Stat> {
        sys::stat_fd(self.inode(id)?.fd()?.as_fd())
    }

    fn statx(&self, _: Ctx, id: u64, flags: u32, mask: u32) -> io::Result<libc::statx> {
        let sync = flags as i32 & libc::AT_STATX_SYNC_TYPE;
        sys::statx(self.inode(id)?.fd()?.as_fd(), sync, mask)
    }

    fn setattr(&self, ctx: Ctx, id: u64, a: &SetAttr) -> io::Result<Stat> {
        self.writable()?;
        let inode = self.inode(id)?;
        let handle =
            a.fh.and_then(|fh| self.handles.get(fh))
                .filter(|h| h.inode == id);
        if let Some(mode) = a.mode {
            if inode.file_type == libc::S_IFLNK {
                return Err(err(libc::EOPNOTSUPP));
            }
            let inode_fd = inode.fd()?;
            let name = sys::fd_name(inode_fd.as_raw_fd());
            let mode = self.guest_mode(inode.file_type, mode);
            sys::fchmodat(self.proc_self_fd.as_fd(), &name, mode)?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            sys::fchownat(
                inode.fd()?.as_fd(),
                c"",
                a.uid.unwrap_or(u32::MAX),
                a.gid.unwrap_or(u32::MAX),
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            )?;
            if self.cfg.no_setid && inode.file_type != libc::S_IFLNK {
                // The daemon's CAP_FSETID keeps the bits across its chown;
                // the guest's file must not keep them for a new owner.
                let mode = sys::stat_fd(inode.fd()?.as_fd())?.st_mode;
                let keep = self.guest_mode(inode.file_type, mode);
                if keep != mode & 0o7777 {
                    let inode_fd = inode.fd()?;
                    let name = sys::fd_name(inode_fd.as_raw_fd());
                    sys::fchmodat(self.proc_self_fd.as_fd(), &name, keep)?;
                }
            }
        }
        if let Some(size) = a.size {
            if inode.is_dir() {
                return Err(err(libc::EISDIR));
            }
            if !inode.is_reg() {
                return Err(err(libc::EINVAL));
            }
            let _kill = self.kill_priv(ctx)?;
            match handle.filter(|h| h.flags & libc::O_ACCMODE != libc::O_RDONLY) {
                Some(h) => sys::ftruncate(h.fd(), size)?,
                None => sys::ftruncate(self.reopen(&inode, libc::O_WRONLY)?.as_fd(), size)?,
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            let t = [timespec(a.atime)?, timespec(a.mtime)?];
            sys::utimensat(
                inode.fd()?.as_fd(),
                c"",
                &t,
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            )?;
        }
        sys::stat_fd(inode.fd()?.as_fd())
    }

    fn readlink(&self, _: Ctx, id: u64) -> io::Result<Vec<u8>> {
        let inode = self.inode(id)?;
        if inode.file_type != libc::S_IFLNK {
            return Err(err(libc::EINVAL));
        }
        sys::readlink_fd(inode.fd()?.as_fd())
    }

    fn symlink(&self, ctx: Ctx, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        self.writable()?;
        let p = self.dir(parent)?;
        {
            let _c = self.creds(ctx)?;
            replayed(sys::symlinkat(target, p.fd()?.as_fd(), name), libc::EEXIST)?;
        }
        self.do_lookup(&p, name)
    }

    fn mknod(&self, ctx: Ctx, parent: u64, name: &CStr, mode: u32, rdev: u32) -> io::Result<Entry> {
        self.writable()?;
        let p = self.dir(parent)?;
        let kind = mode & libc::S_IFMT;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        if ![
            libc::S_IFREG,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFBLK,
        ]
        .contains(&kind)
        {
            return Err(err(libc::EINVAL));
        }
        if self.cfg.no_device_nodes && (kind == libc::S_IFCHR || kind == libc::S_IFBLK) {
            return Err(err(libc::EPERM));
        }
        // The kernel sends new_encode_dev() format.
        let major = (rdev & 0xfff00) >> 8;
        let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
        {
            let _c = self.creds(ctx)?;
            let made = sys::mknodat(
                p.fd()?.as_fd(),
                name,
                kind | self.create_mode(ctx, &p, kind, mode),
                sys::makedev(major, minor),
            );
            replayed(made, libc::EEXIST)?;
        }
        self.do_lookup(&p, name)
    }

    fn mkdir(&self, ctx: Ctx, parent: u64, name: &CStr, mode: u32) -> io::Result<Entry> {
        self.writable()?;
        let p = self.dir(parent)?;
        {
            let _c = self.creds(ctx)?;
            let mode = self.create_mode(ctx, &p, libc::S_IFDIR, mode);
            let made = sys::mkdirat(p.fd()?.as_fd(), name, mode);
            replayed(made, libc::EEXIST)?;
        }
        self.do_lookup(&p, name)
    }

    fn unlink(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<()> {
        self.remove_entry(parent, name, false)
    }

    fn rmdir(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<()> {
        self.remove_entry(parent, name, true)
    }

    fn rename(
        &self,
        _: Ctx,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        self.writable()?;
        if flags & !(fflags::RENAME_NOREPLACE | fflags::RENAME_EXCHANGE) != 0
            || flags == fflags::RENAME_NOREPLACE | fflags::RENAME_EXCHANGE
        {
            return Err(err(libc::EINVAL));
        }
        let o = self.dir(olddir)?;
        let n = self.dir(newdir)?;
        let exchange = flags & fflags::RENAME_EXCHANGE != 0;
        let ino_of = |d: &Inode, name: &CStr| {
            sys::fstatat(d.fd()?.as_fd(), name, libc::AT_SYMLINK_NOFOLLOW).map(|st| st.st_ino)
        };
        if exchange && crate::journal::journaling() {
            // Which file the old name holds tells, on a replay, whether
            // the exchange happened.
            crate::journal::note_aux(ino_of(&o, oldname).unwrap_or(0));
        }
        let done = crate::journal::replaying().is_some_and(|before| {
            let old = ino_of(&o, oldname);
            if exchange {
                old.is_ok_and(|ino| before != 0 && ino != before)
            } else {
                // Moved: the old name is gone and the new one exists.
                old.is_err() && ino_of(&n, newname).is_ok()
            }
        });
        // The file the new name held loses it (not in an exchange).
        let victim = (!exchange)
            .then(|| self.held_at(n.fd().ok()?.as_fd(), newname))
            .flatten()
            .filter(|v| ino_of(&o, oldname).is_ok_and(|ino| ino != v.key.1));
        if let Some(v) = &victim {
            self.lose_name(v);
        }
        if !done {
            sys::renameat2(o.fd()?.as_fd(), oldname, n.fd()?.as_fd(), newname, flags)?;
        }
        if let Some(v) = &victim {
            self.lose_name(v);
        }
        self.journal_moved(newdir, n.fd()?.as_fd(), newname);
        if exchange {
            self.journal_moved(olddir, o.fd()?.as_fd(), oldname);
        }
        Ok(())
    }

    fn link(&self, _: Ctx, id: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        self.writable()?;
        let inode = self.inode(id)?;
        if inode.is_dir() {
            return Err(err(libc::EPERM));
        }
        let p = self.dir(newparent)?;
        let res = sys::linkat(
            inode.fd()?.as_fd(),
            c"",
            p.fd()?.as_fd(),
            newname,
            libc::AT_EMPTY_PATH,
        );
        let res = match res {
            // Without CAP_DAC_READ_SEARCH, AT_EMPTY_PATH fails with ENOENT; a
            // regular file can then be linked through its /proc/self/fd name.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && inode.is_reg() => {
                let inode_fd = inode.fd()?;
                let name = sys::fd_name(inode_fd.as_raw_fd());
                sys::linkat(
                    self.proc_self_fd.as_fd(),
                    &name,
                    p.fd()?.as_fd(),
                    newname,
                    libc::AT_SYMLINK_FOLLOW,
                )
            }
            r => r,
        };
        replayed(res, libc::EEXIST)?;
        self.do_lookup(&p, newname)
    }

    fn statfs(&self, _: Ctx, id: u64) -> io::Result<StatFs> {
        sys::fstatfs(self.inode(id)?.fd()?.as_fd())
    }

    fn access(&self, ctx: Ctx, id: u64, mask: u32) -> io::Result<()> {
        let inode = self.inode(id)?;
        let mask = (mask as i32) & (libc::R_OK | libc::W_OK | libc::X_OK);
        if mask & libc::W_OK != 0 && self.cfg.readonly {
            return Err(err(libc::EROFS));
        }
        let _c = self.creds(ctx)?;
        sys::access_fd(inode.fd()?.as_fd(), mask)
    }

    fn syncfs(&self, _: Ctx, id: u64) -> io::Result<()> {
        let inode = self.inode(id)?;
        let inode = if inode.is_reg() || inode.is_dir() {
            inode
        } else {
            self.inodes.root().clone()
        };
        let fd = self.reopen(&inode, libc::O_RDONLY | libc::O_NONBLOCK)?;
        sys::syncfs(fd.as_fd())
    }
}
