// SPDX-License-Identifier: Apache-2.0
//! [`FileSystem`] for [`PassthroughFs`]: the typed FUSE operations, mapped onto
//! the host calls of the parent module. READ and WRITE copy between the host
//! descriptor and guest memory with `preadv`/`pwritev`, no staging buffer.

use std::ffi::CStr;
use std::io;

use super::{err, Ctx, PassthroughFs};
use crate::filesystem::{
    Capabilities, DataSink, DataSource, DirEntry, Entry, FileSystem, Lock, LockOwner, Opened,
    SetAttr, Stat, StatFs, XattrReply,
};

impl FileSystem for PassthroughFs {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            init_flags: self.supported_init_flags(),
            xattr: self.cfg.xattr,
            readdirplus: self.cfg.readdirplus,
            readonly: self.cfg.readonly,
            timeout: self.cfg.cache.timeout(),
            ids: self.cfg.ids.clone(),
            required_init_flags: {
                use crate::abi::init_flags::{POSIX_ACL, SECURITY_CTX};
                let always =
                    |o: super::Offer, f: u64| if o == super::Offer::Always { f } else { 0 };
                always(self.cfg.posix_acl, POSIX_ACL)
                    | always(self.cfg.security_label, SECURITY_CTX)
            },
        }
    }

    fn init(&self, negotiated: u64) {
        self.start_session(negotiated);
    }

    fn resume(&self, negotiated: u64) {
        self.resume_session(negotiated);
    }

    fn destroy(&self) {
        self.end_session();
    }

    fn session_changed(&self, session: Option<crate::SessionState>) {
        self.journal_session(session);
    }

    fn lookup(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<Entry> {
        PassthroughFs::lookup(self, parent, name)
    }

    fn forget(&self, node: u64, count: u64) {
        PassthroughFs::forget(self, node, count);
    }

    fn getattr(&self, _: Ctx, node: u64) -> io::Result<Stat> {
        PassthroughFs::getattr(self, node)
    }

    fn statx(&self, _: Ctx, node: u64, flags: u32, mask: u32) -> io::Result<libc::statx> {
        PassthroughFs::statx(self, node, flags, mask)
    }

    fn setattr(&self, ctx: Ctx, node: u64, attr: &SetAttr) -> io::Result<Stat> {
        PassthroughFs::setattr(self, ctx, node, attr)
    }

    fn readlink(&self, _: Ctx, node: u64) -> io::Result<Vec<u8>> {
        PassthroughFs::readlink(self, node)
    }

    fn symlink(&self, ctx: Ctx, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        PassthroughFs::symlink(self, ctx, parent, name, target)
    }

    fn mknod(&self, ctx: Ctx, parent: u64, name: &CStr, mode: u32, rdev: u32) -> io::Result<Entry> {
        PassthroughFs::mknod(self, ctx, parent, name, mode, rdev)
    }

    fn mkdir(&self, ctx: Ctx, parent: u64, name: &CStr, mode: u32) -> io::Result<Entry> {
        PassthroughFs::mkdir(self, ctx, parent, name, mode)
    }

    fn unlink(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::unlink(self, parent, name, false)
    }

    fn rmdir(&self, _: Ctx, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::unlink(self, parent, name, true)
    }

    fn rename(
        &self,
        _: Ctx,
        parent: u64,
        name: &CStr,
        newparent: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        PassthroughFs::rename(self, parent, name, newparent, newname, flags)
    }

    fn link(&self, _: Ctx, node: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        PassthroughFs::link(self, node, newparent, newname)
    }

    fn open(&self, ctx: Ctx, node: u64, flags: u32) -> io::Result<Opened> {
        let (fh, flags) = PassthroughFs::open(self, ctx, node, flags)?;
        Ok(Opened { fh, flags })
    }

    fn create(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &CStr,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        let (e, fh, flags) = PassthroughFs::create(self, ctx, parent, name, mode, flags)?;
        Ok((e, Opened { fh, flags }))
    }

    fn tmpfile(&self, ctx: Ctx, parent: u64, mode: u32, flags: u32) -> io::Result<(Entry, Opened)> {
        let (e, fh, flags) = PassthroughFs::tmpfile(self, ctx, parent, mode, flags)?;
        Ok((e, Opened { fh, flags }))
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
        PassthroughFs::release(self, fh)
    }

    fn flush(&self, _: Ctx, _: u64, fh: u64) -> io::Result<()> {
        PassthroughFs::flush(self, fh)
    }

    fn getlk(&self, _: Ctx, node: u64, fh: u64, owner: u64, lock: Lock) -> io::Result<Lock> {
        PassthroughFs::getlk(self, node, fh, owner, lock)
    }

    fn setlk(&self, _: Ctx, node: u64, fh: u64, owner: LockOwner, lock: Lock) -> io::Result<()> {
        PassthroughFs::setlk(self, node, fh, owner, lock)
    }

    fn unlock_owner(&self, node: u64, owner: LockOwner) {
        PassthroughFs::unlock_owner(self, node, owner)
    }

    fn fsync(&self, _: Ctx, _: u64, fh: u64, datasync: bool) -> io::Result<()> {
        PassthroughFs::fsync(self, fh, datasync)
    }

    fn opendir(&self, _: Ctx, node: u64, flags: u32) -> io::Result<Opened> {
        let (fh, flags) = PassthroughFs::opendir(self, node, flags)?;
        Ok(Opened { fh, flags })
    }

    fn readdir(
        &self,
        _: Ctx,
        _: u64,
        fh: u64,
        offset: u64,
        size: usize,
        add: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> io::Result<()> {
        PassthroughFs::readdir(self, fh, offset, size, add)
    }

    fn readdirplus_lookup(&self, _: Ctx, parent: u64, name: &[u8]) -> Option<Entry> {
        self.lookup_for_readdir(parent, name)
    }

    fn releasedir(&self, _: Ctx, _: u64, fh: u64) -> io::Result<()> {
        PassthroughFs::release(self, fh)
    }

    fn fsyncdir(&self, _: Ctx, _: u64, fh: u64, datasync: bool) -> io::Result<()> {
        PassthroughFs::fsync(self, fh, datasync)
    }

    fn statfs(&self, _: Ctx, node: u64) -> io::Result<StatFs> {
        PassthroughFs::statfs(self, node)
    }

    fn access(&self, ctx: Ctx, node: u64, mask: u32) -> io::Result<()> {
        PassthroughFs::access(self, ctx, node, mask)
    }

    fn setxattr(
        &self,
        ctx: Ctx,
        node: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        PassthroughFs::setxattr(self, ctx, node, name, value, flags)
    }

    fn getxattr(&self, _: Ctx, node: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::getxattr(self, node, name, size)
    }

    fn listxattr(&self, _: Ctx, node: u64, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::listxattr(self, node, size)
    }

    fn set_security_context(&self, _: Ctx, node: u64, attr: &CStr, value: &[u8]) -> io::Result<()> {
        PassthroughFs::set_security_context(self, node, attr, value)
    }

    fn removexattr(&self, _: Ctx, node: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::removexattr(self, node, name)
    }

    fn fallocate(
        &self,
        _: Ctx,
        _: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        PassthroughFs::fallocate(self, fh, mode, offset, length)
    }

    fn lseek(&self, _: Ctx, _: u64, fh: u64, offset: u64, whence: u32) -> io::Result<u64> {
        PassthroughFs::lseek(self, fh, offset, whence)
    }

    fn copy_file_range(
        &self,
        _: Ctx,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        PassthroughFs::copy_file_range(self, fh_in, off_in, fh_out, off_out, len, flags)
    }

    fn syncfs(&self, _: Ctx, node: u64) -> io::Result<()> {
        PassthroughFs::syncfs(self, node)
    }
}
