// SPDX-License-Identifier: Apache-2.0
//! Open files and directories: OPEN, CREATE, TMPFILE, RELEASE, FLUSH, FSYNC,
//! OPENDIR and READDIR, and the open flags the guest may ask for.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::table::lock;
use super::{dirents, err, replayed, CachePolicy, Ctx, PassthroughFs};
use crate::abi::{fopen, init_flags};
use crate::filesystem::{DirEntry, Entry};
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

    pub(crate) fn open(&self, ctx: Ctx, id: u64, guest_flags: u32) -> io::Result<(u64, u32)> {
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
        Ok((fh, self.file_open_flags()))
    }

    pub(crate) fn create(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &CStr,
        mode: u32,
        guest_flags: u32,
    ) -> io::Result<(Entry, u64, u32)> {
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
        Ok((entry, fh, self.file_open_flags()))
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

    pub(crate) fn tmpfile(
        &self,
        ctx: Ctx,
        parent: u64,
        mode: u32,
        guest_flags: u32,
    ) -> io::Result<(Entry, u64, u32)> {
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
        Ok((entry, fh, self.file_open_flags()))
    }

    pub(crate) fn release(&self, fh: u64) -> io::Result<()> {
        if self.handles.remove(fh).is_some() {
            self.released(fh);
            return Ok(());
        }
        if self.lost_lock().handles.remove(&fh) {
            return Ok(());
        }
        replayed(Err(err(libc::EBADF)), libc::EBADF)
    }

    pub(crate) fn flush(&self, fh: u64) -> io::Result<()> {
        // Closing a duplicate releases POSIX locks and reports deferred errors
        // of network file systems, as a close() in the guest would.
        drop(sys::dup(self.handle(fh)?.fd())?);
        Ok(())
    }

    pub(crate) fn fsync(&self, fh: u64, datasync: bool) -> io::Result<()> {
        sys::fsync(self.handle(fh)?.fd(), datasync)
    }

    pub(crate) fn opendir(&self, id: u64, guest_flags: u32) -> io::Result<(u64, u32)> {
        let inode = self.dir(id)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | (guest_flags as i32 & libc::O_NONBLOCK);
        self.room(1)?;
        let fd = self.reopen(&inode, flags)?;
        let fh = self.handles.insert(id, fd, flags);
        self.opened(id, fh);
        Ok((fh, self.dir_open_flags()))
    }

    /// Reads entries of directory handle `fh` from `offset`, handing each to
    /// `f` until it returns false or the directory ends.
    pub(crate) fn readdir(
        &self,
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
    pub(crate) fn lookup_for_readdir(&self, parent: u64, name: &[u8]) -> Option<Entry> {
        if name == b"." || name == b".." {
            return None;
        }
        let mut v = name.to_vec();
        v.push(0);
        let name = CStr::from_bytes_with_nul(&v).ok()?;
        self.lookup(parent, name).ok()
    }
}
