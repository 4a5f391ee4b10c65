// SPDX-License-Identifier: Apache-2.0
//! [`Files`] for [`PassthroughFs`]: open files and directories (OPEN,
//! CREATE, TMPFILE, READ, WRITE, RELEASE, FLUSH, FSYNC, OPENDIR, READDIR),
//! and the open flags the guest may ask for. READ and WRITE copy between the
//! host descriptor and guest memory with `preadv`/`pwritev`, no staging
//! buffer.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::table::lock;
use super::{dirents, err, replayed, CachePolicy, Ctx, PassthroughFs};
use crate::abi::{fopen, init_flags};
use crate::filesystem::{DataSink, DataSource, DirEntry, Entry, Files, Nodes, Opened};
use crate::sys;

impl PassthroughFs {
    /// Sanitizes guest open flags.
    fn open_flags(&self, guest: u32) -> i32 {
        let guest = guest as i32;
        let keep = libc::O_ACCMODE
            | libc::O_APPEND
            | libc::O_DIRECT
            | libc::O_SYNC
            | libc::O_DSYNC
            | libc::O_NOATIME
            | libc::O_TRUNC
            | libc::O_NONBLOCK
            | libc::O_LARGEFILE;
        let mut f = guest & keep;
        if self.negotiated(init_flags::WRITEBACK_CACHE) {
            // The guest kernel reads pages in to merge partial writes and does
            // O_APPEND itself.
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
            }
            f &= !libc::O_APPEND;
        }
        if !self.cfg.allow_direct_io {
            f &= !libc::O_DIRECT;
        }
        if !self.cfg.preserve_noatime {
            f &= !libc::O_NOATIME;
        }
        f
    }

    fn check_open_writable(&self, flags: i32) -> io::Result<()> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            self.writable()?;
        }
        Ok(())
    }

    fn file_open_flags(&self) -> u32 {
        match self.cfg.cache {
            CachePolicy::Never | CachePolicy::Metadata => fopen::DIRECT_IO,
            CachePolicy::Auto => 0,
            CachePolicy::Always => fopen::KEEP_CACHE,
        }
    }

    fn dir_open_flags(&self) -> u32 {
        match self.cfg.cache {
            CachePolicy::Always => fopen::KEEP_CACHE | fopen::CACHE_DIR,
            _ => 0,
        }
    }

    fn open_existing(&self, ctx: Ctx, id: u64, flags: i32) -> io::Result<OwnedFd> {
        let inode = self.inode(id)?;
        match inode.file_type {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(err(libc::EISDIR)),
            libc::S_IFLNK => return Err(err(libc::ELOOP)),
            _ => return Err(err(libc::ENXIO)),
        }
        let mut mask = 0;
        if flags & libc::O_ACCMODE != libc::O_WRONLY {
            mask |= libc::R_OK;
        }
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            mask |= libc::W_OK;
        }
        {
            let _c = self.creds(ctx)?;
            sys::access_fd(inode.fd()?.as_fd(), mask)?;
        }
        let _kill = self.kill_priv(ctx)?;
        self.reopen(&inode, flags)
    }
}

impl Files for PassthroughFs {
    fn open(&self, ctx: Ctx, id: u64, guest_flags: u32) -> io::Result<Opened> {
        let inode = self.inode(id)?;
        if inode.is_dir() {
            return Err(err(libc::EISDIR));
        }
        if !inode.is_reg() {
            return Err(err(libc::ENXIO));
        }
        let flags = self.open_flags(guest_flags);
        self.check_open_writable(flags)?;
        self.room(1)?;
        let fd = {
            let _kill = self.kill_priv(ctx)?;
            self.reopen(&inode, flags)?
        };
        let fh = self.handles.insert(id, fd, flags);
        self.opened(id, fh);
        Ok(Opened {
            fh,
            flags: self.file_open_flags(),
        })
    }

    fn create(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &CStr,
        mode: u32,
        guest_flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        self.writable()?;
        let p = self.dir(parent)?;
        // A new inode and a handle: refused before anything is created.
        self.room(2)?;
        let flags = self.open_flags(guest_flags);
        // A replayed exclusive create may find the file it made before the
        // crash: it opens it (the guest never saw it, so nothing was lost).
        let excl = guest_flags as i32 & libc::O_EXCL != 0 && crate::journal::replaying().is_none();
        let created = {
            let _c = self.creds(ctx)?;
            sys::openat(
                p.fd()?.as_fd(),
                name,
                flags | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                self.create_mode(ctx, &p, libc::S_IFREG, mode),
            )
        };
        let (entry, fd) = match created {
            Ok(fd) => (
                self.insert_open_file(&fd, Some((parent, name.to_bytes())))?,
                fd,
            ),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !excl => {
                // It exists: open it like OPEN would, but check access as the
                // caller (the guest believes it is creating the file and checks
                // nothing), and never open anything but a regular file.
                let entry = self.do_lookup(&p, name)?;
                match self.open_existing(ctx, entry.inode, flags) {
                    Ok(fd) => (entry, fd),
                    Err(e) => {
                        self.inodes.forget(entry.inode, 1);
                        return Err(e);
                    }
                }
            }
            Err(e) => return Err(e),
        };
        let fh = self.handles.insert(entry.inode, fd, flags);
        self.opened(entry.inode, fh);
        Ok((
            entry,
            Opened {
                fh,
                flags: self.file_open_flags(),
            },
        ))
    }

    fn tmpfile(
        &self,
        ctx: Ctx,
        parent: u64,
        mode: u32,
        guest_flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        self.writable()?;
        let p = self.dir(parent)?;
        self.room(2)?;
        let mut flags = self.open_flags(guest_flags) & !libc::O_TRUNC;
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            flags |= libc::O_RDWR;
        }
        let fd = {
            let _c = self.creds(ctx)?;
            sys::openat(
                p.fd()?.as_fd(),
                c".",
                flags | libc::O_TMPFILE,
                self.create_mode(ctx, &p, libc::S_IFREG, mode),
            )?
        };
        let entry = self.insert_open_file(&fd, None)?;
        let fh = self.handles.insert(entry.inode, fd, flags);
        // Born without a name.
        if let Some(i) = self.inodes.get(entry.inode).filter(|_| self.keeping()) {
            self.lose_name(&i);
        }
        Ok((
            entry,
            Opened {
                fh,
                flags: self.file_open_flags(),
            },
        ))
    }

    fn read(
        &self,
        _: Ctx,
        _: u64,
        fh: u64,
        offset: u64,
        size: usize,
        sink: &mut dyn DataSink,
    ) -> io::Result<usize> {
        let handle = self.handle(fh)?;
        let mut done = 0usize;
        while done < size {
            let Some(off) = offset.checked_add(done as u64) else {
                return if done == 0 {
                    Err(err(libc::EINVAL))
                } else {
                    Ok(done)
                };
            };
            match sink.copy_from_fd(handle.fd(), size - done, off) {
                Ok(0) => break,
                Ok(n) => done += n.min(size - done),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    fn write(
        &self,
        ctx: Ctx,
        _: u64,
        fh: u64,
        offset: u64,
        size: usize,
        source: &mut dyn DataSource,
    ) -> io::Result<usize> {
        let handle = self.handle(fh)?;
        // An append lands at the end, wherever that is: the size before tells
        // a replay whether it happened (a positioned write is the same twice).
        let append = handle.flags & libc::O_APPEND != 0;
        if append && crate::journal::journaling() {
            crate::journal::note_aux(crate::sys::stat_fd(handle.fd())?.st_size as u64);
        }
        if let Some(before) = crate::journal::replaying().filter(|_| append) {
            if crate::sys::stat_fd(handle.fd())?.st_size as u64 >= before + size as u64 {
                return Ok(size);
            }
        }
        let _kill = self.kill_priv(ctx)?;
        let mut done = 0usize;
        while done < size {
            let off = offset
                .checked_add(done as u64)
                .ok_or_else(|| err(libc::EINVAL))?;
            match source.copy_to_fd(handle.fd(), size - done, off) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    fn release(&self, _: Ctx, _: u64, fh: u64) -> io::Result<()> {
        if self.handles.remove(fh).is_some() {
            self.released(fh);
            return Ok(());
        }
        if self.lost_lock().handles.remove(&fh) {
            return Ok(());
        }
        replayed(Err(err(libc::EBADF)), libc::EBADF)
    }

    fn flush(&self, _: Ctx, _: u64, fh: u64) -> io::Result<()> {
        // Closing a duplicate releases POSIX locks and reports deferred errors
        // of network file systems, as a close() in the guest would.
        drop(sys::dup(self.handle(fh)?.fd())?);
        Ok(())
    }

    fn fsync(&self, _: Ctx, _: u64, fh: u64, datasync: bool) -> io::Result<()> {
        sys::fsync(self.handle(fh)?.fd(), datasync)
    }

    fn opendir(&self, _: Ctx, id: u64, guest_flags: u32) -> io::Result<Opened> {
        let inode = self.dir(id)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | (guest_flags as i32 & libc::O_NONBLOCK);
        self.room(1)?;
        let fd = self.reopen(&inode, flags)?;
        let fh = self.handles.insert(id, fd, flags);
        self.opened(id, fh);
        Ok(Opened {
            fh,
            flags: self.dir_open_flags(),
        })
    }

    /// Reads entries of directory handle `fh` from `offset`, handing each to
    /// `f` until it returns false or the directory ends.
    fn readdir(
        &self,
        _: Ctx,
        _: u64,
        fh: u64,
        offset: u64,
        buf_size: usize,
        f: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> io::Result<()> {
        let h = self.handle(fh)?;
        let _g = lock(&h.dir_lock);
        sys::lseek(h.fd(), offset as i64, libc::SEEK_SET)?;
        let mut buf = vec![0u8; buf_size.clamp(512, 1 << 20)];
        loop {
            let n = sys::getdents64(h.fd(), &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            for ent in dirents(&buf[..n]) {
                if !f(&ent?) {
                    return Ok(());
                }
            }
        }
    }

    /// LOOKUP for READDIRPLUS: `.` and `..` are not looked up.
    fn readdirplus_lookup(&self, ctx: Ctx, parent: u64, name: &[u8]) -> Option<Entry> {
        if name == b"." || name == b".." {
            return None;
        }
        let mut v = name.to_vec();
        v.push(0);
        let name = CStr::from_bytes_with_nul(&v).ok()?;
        self.lookup(ctx, parent, name).ok()
    }

    fn releasedir(&self, ctx: Ctx, node: u64, fh: u64) -> io::Result<()> {
        self.release(ctx, node, fh)
    }

    fn fsyncdir(&self, ctx: Ctx, node: u64, fh: u64, datasync: bool) -> io::Result<()> {
        self.fsync(ctx, node, fh, datasync)
    }
}
