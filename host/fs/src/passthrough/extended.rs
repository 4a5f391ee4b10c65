// SPDX-License-Identifier: Apache-2.0
//! [`Extended`] for [`PassthroughFs`]: extended attributes and security
//! contexts, and range operations on open files (fallocate, lseek,
//! copy_file_range).

use std::borrow::Cow;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::table::{lock, Inode};
use super::{err, Ctx, PassthroughFs, XattrReply};
use crate::filesystem::Extended;
use crate::sys;

/// The attributes that hold POSIX ACLs.
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Whether `name` is one of the POSIX ACL attributes.
fn is_acl(name: &CStr) -> bool {
    matches!(name.to_bytes(), ACL_ACCESS | ACL_DEFAULT)
}

/// Largest xattr value or list handled (Linux XATTR_SIZE_MAX / XATTR_LIST_MAX).
const XATTR_MAX: usize = 65536;
/// Largest amount COPY_FILE_RANGE copies in one request (the reply is 32-bit).
const COPY_MAX: u64 = 1 << 30;

impl PassthroughFs {
    fn xattr_fd(&self, id: u64) -> io::Result<OwnedFd> {
        let inode = self.inode(id)?;
        let flags = if inode.is_dir() {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else if inode.is_reg() {
            libc::O_RDONLY | libc::O_NONBLOCK
        } else {
            return Err(err(libc::EOPNOTSUPP));
        };
        self.reopen(&inode, flags)
    }

    /// The host's name for a guest's attribute name (`--xattrmap`). The
    /// ACL attributes are the guest kernel's business only once POSIX ACLs
    /// are negotiated (`--posix-acl`); before, as in virtiofsd, EOPNOTSUPP.
    fn host_xattr<'a>(&self, name: &'a CStr) -> io::Result<Cow<'a, CStr>> {
        if is_acl(name) {
            return if self.negotiated(crate::abi::init_flags::POSIX_ACL) {
                Ok(Cow::Borrowed(name))
            } else {
                Err(err(libc::EOPNOTSUPP))
            };
        }
        match &self.cfg.xattrmap {
            None => Ok(Cow::Borrowed(name)),
            Some(m) => m.to_host(name).map(Cow::Owned).map_err(err),
        }
    }

    /// The mode for a file the guest creates in `parent`: its mode as
    /// allowed (`--no-setid`), less the caller's umask (FUSE_DONT_MASK),
    /// unless the parent has a default ACL, which then decides instead, as
    /// the host kernel does it (this daemon's own umask is 0).
    pub(crate) fn create_mode(&self, ctx: super::Ctx, parent: &Inode, kind: u32, mode: u32) -> u32 {
        let m = self.guest_mode(kind, mode);
        if ctx.umask == 0 || self.default_acl(parent) {
            return m;
        }
        m & !ctx.umask
    }

    /// Whether directory `dir` has a default ACL (never without POSIX ACLs
    /// negotiated: the guest cannot have set one).
    fn default_acl(&self, dir: &Inode) -> bool {
        if !self.negotiated(crate::abi::init_flags::POSIX_ACL) {
            return false;
        }
        let Ok(fd) = self.reopen(dir, libc::O_RDONLY | libc::O_DIRECTORY) else {
            return false;
        };
        // A size query; an error (ENODATA) means none.
        sys::fgetxattr(fd.as_fd(), c"system.posix_acl_default", &mut []).is_ok_and(|n| n > 0)
    }
}

impl Extended for PassthroughFs {
    /// See [`crate::filesystem::Extended::set_security_context`]. Set
    /// through the node's `/proc/self/fd` name (which names the file itself,
    /// a symlink or device too), with the working directory the daemon's
    /// `/proc/self/fd`: every thread that labels moves it there, and nothing
    /// else in the daemon resolves a relative path.
    fn set_security_context(&self, _: Ctx, id: u64, attr: &CStr, value: &[u8]) -> io::Result<()> {
        self.writable()?;
        let inode = self.inode(id)?;
        let attr = &*self.host_xattr(attr)?;
        sys::fchdir(self.proc_self_fd.as_fd())?;
        let inode_fd = inode.fd()?;
        let name = sys::fd_name(inode_fd.as_raw_fd());
        sys::setxattr_path(&name, attr, value)
    }

    fn setxattr(&self, ctx: Ctx, id: u64, name: &CStr, value: &[u8], flags: u32) -> io::Result<()> {
        self.writable()?;
        let flags = flags as i32;
        if flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
            return Err(err(libc::EINVAL));
        }
        let name = &*self.host_xattr(name)?;
        let fd = self.xattr_fd(id)?;
        if ctx.acl_kill_sgid && name.to_bytes() == ACL_ACCESS {
            // The guest kernel asks: the caller is not in the file's group.
            let mode = sys::stat_fd(fd.as_fd())?.st_mode;
            if mode & libc::S_ISGID != 0 {
                sys::fchmod(fd.as_fd(), mode & 0o7777 & !libc::S_ISGID)?;
            }
        }
        super::replayed(sys::fsetxattr(fd.as_fd(), name, value, flags), libc::EEXIST)
    }

    fn getxattr(&self, _: Ctx, id: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        let name = &*self.host_xattr(name)?;
        let fd = self.xattr_fd(id)?;
        if size == 0 {
            let n = sys::fgetxattr(fd.as_fd(), name, &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = vec![0u8; (size as usize).min(XATTR_MAX)];
        let n = sys::fgetxattr(fd.as_fd(), name, &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Value(buf))
    }

    fn listxattr(&self, _: Ctx, id: u64, size: u32) -> io::Result<XattrReply> {
        let fd = match self.xattr_fd(id) {
            Ok(fd) => fd,
            // Symlinks and special files: report no attributes.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Ok(if size == 0 {
                    XattrReply::Size(0)
                } else {
                    XattrReply::Value(Vec::new())
                });
            }
            Err(e) => return Err(e),
        };
        if let Some(m) = &self.cfg.xattrmap {
            // The guest's list is the host's renamed and filtered: read it
            // whole, then answer as the kernel would for that list.
            let mut buf = vec![0u8; XATTR_MAX];
            let n = sys::flistxattr(fd.as_fd(), &mut buf)?;
            let list = m.list_to_guest(&buf[..n]);
            return match size {
                0 => Ok(XattrReply::Size(list.len() as u32)),
                s if (s as usize) < list.len() => Err(err(libc::ERANGE)),
                _ => Ok(XattrReply::Value(list)),
            };
        }
        if size == 0 {
            let n = sys::flistxattr(fd.as_fd(), &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = vec![0u8; (size as usize).min(XATTR_MAX)];
        let n = sys::flistxattr(fd.as_fd(), &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Value(buf))
    }

    fn removexattr(&self, _: Ctx, id: u64, name: &CStr) -> io::Result<()> {
        self.writable()?;
        let name = &*self.host_xattr(name)?;
        let fd = self.xattr_fd(id)?;
        super::replayed(sys::fremovexattr(fd.as_fd(), name), libc::ENODATA)
    }

    fn fallocate(
        &self,
        _: Ctx,
        _: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        self.writable()?;
        let h = self.handle(fh)?;
        let mode = mode as i32;
        // Inserting or collapsing a range twice is not the same as once:
        // the size before tells a replay whether it happened.
        let shifts = mode & (libc::FALLOC_FL_INSERT_RANGE | libc::FALLOC_FL_COLLAPSE_RANGE) != 0;
        if shifts && crate::journal::journaling() {
            crate::journal::note_aux(sys::stat_fd(h.fd())?.st_size as u64);
        }
        if let Some(before) = crate::journal::replaying().filter(|_| shifts) {
            if sys::stat_fd(h.fd())?.st_size as u64 != before {
                return Ok(());
            }
        }
        sys::fallocate(h.fd(), mode, offset, len)
    }

    fn lseek(&self, _: Ctx, _: u64, fh: u64, offset: u64, whence: u32) -> io::Result<u64> {
        let whence = whence as i32;
        if ![
            libc::SEEK_SET,
            libc::SEEK_END,
            libc::SEEK_DATA,
            libc::SEEK_HOLE,
        ]
        .contains(&whence)
        {
            return Err(err(libc::EINVAL));
        }
        let h = self.handle(fh)?;
        let _g = lock(&h.dir_lock);
        sys::lseek(h.fd(), offset as i64, whence)
    }

    #[allow(clippy::too_many_arguments)]
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
        self.writable()?;
        if flags != 0 {
            return Err(err(libc::EINVAL));
        }
        let hi = self.handle(fh_in)?;
        let ho = self.handle(fh_out)?;
        sys::copy_file_range(
            hi.fd(),
            off_in,
            ho.fd(),
            off_out,
            len.min(COPY_MAX) as usize,
        )
    }
}
