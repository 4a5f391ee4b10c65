// SPDX-License-Identifier: Apache-2.0
//! Request parsing and reply writing shared by every opcode: the error type of
//! the FUSE layer, the body cursor, name checks and reply helpers.

use std::ffi::CStr;
use std::io;

use super::abi::{self, Wire};
use super::io::ReplyWriter;
use super::session::Session;
use crate::filesystem::{Capabilities, Context, Entry, FileSystem, Stat};

/// Longest file name.
pub const NAME_MAX: usize = 255;
/// Longest symlink target, NUL excluded.
pub const PATH_MAX: usize = 4095;

/// Why a request failed (mapped to the errno of the reply).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The body is shorter than its structures.
    #[error("request body truncated")]
    Truncated,
    /// The body has bytes past its structures and names.
    #[error("request body has {0} trailing bytes")]
    Trailing(usize),
    /// A name is malformed.
    #[error("bad name")]
    BadName(i32),
    /// The reply does not fit the guest's buffer.
    #[error("reply of {need} bytes does not fit in {room}")]
    NoRoom { need: usize, room: usize },
    /// A request arrived before INIT.
    #[error("request before INIT")]
    NotInitialized,
    /// The operation failed on the host.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A plain errno.
    #[error("errno {0}")]
    Errno(i32),
    /// A SETLKW found its lock held by another owner: it waits, unanswered.
    #[error("lock held by another owner")]
    Blocked(Box<abi::LkIn>),
}

impl Error {
    pub(crate) fn errno(&self) -> i32 {
        match self {
            Error::Truncated | Error::Trailing(_) | Error::NoRoom { .. } => libc::EINVAL,
            Error::BadName(e) | Error::Errno(e) => *e,
            Error::NotInitialized => libc::EIO,
            Error::Blocked(_) => libc::EAGAIN,
            Error::Io(e) => e
                .raw_os_error()
                .filter(|e| (1..4096).contains(e))
                .unwrap_or(libc::EIO),
        }
    }

    /// Whether the error says the guest sent something malformed (worth a
    /// rate-limited log line) rather than an ordinary failure.
    pub(crate) fn is_protocol(&self) -> bool {
        matches!(
            self,
            Error::Truncated | Error::Trailing(_) | Error::NoRoom { .. } | Error::BadName(_)
        )
    }
}

/// Reply bytes written, or why the request failed.
pub(crate) type OpResult = Result<usize, Error>;

/// One request being served: the file system, what it can do, the session and
/// the header.
pub(crate) struct Req<'a, F> {
    pub fs: &'a F,
    pub caps: &'a Capabilities,
    pub session: &'a Session,
    pub h: &'a abi::InHeader,
    /// The request's extensions (`total_extlen`), after its body.
    pub ext: &'a [u8],
}

impl<F: FileSystem> Req<'_, F> {
    /// The caller, its IDs translated to the host's (`--translate-uid`);
    /// a forbidden ID becomes [`crate::ids::FORBIDDEN`], as which nothing
    /// can be created.
    pub fn ctx(&self) -> Context {
        let ids = &self.caps.ids;
        Context {
            uid: ids.uid.to_host(self.h.uid).unwrap_or(crate::ids::FORBIDDEN),
            gid: ids.gid.to_host(self.h.gid).unwrap_or(crate::ids::FORBIDDEN),
            pid: self.h.pid,
            kill_priv: false,
            umask: 0,
            acl_kill_sgid: false,
        }
    }

    /// [`Req::ctx`] of a request that creates a file: with the caller's
    /// `umask` when the guest left applying it to us (FUSE_DONT_MASK).
    pub fn ctx_create(&self, umask: u32) -> Context {
        Context {
            umask: if self.session.has(abi::init_flags::DONT_MASK) {
                umask & 0o777
            } else {
                0
            },
            ..self.ctx()
        }
    }

    /// [`Req::ctx`], asking to clear setuid/setgid when the guest `asked`
    /// (a KILL_SUIDGID flag) and FUSE_HANDLE_KILLPRIV_V2 was negotiated.
    pub fn ctx_kill(&self, asked: bool) -> Context {
        Context {
            kill_priv: asked && self.session.has(abi::init_flags::HANDLE_KILLPRIV_V2),
            ..self.ctx()
        }
    }

    pub fn entry_out(&self, e: &Entry) -> abi::EntryOut {
        let t = self.caps.timeout;
        abi::EntryOut {
            nodeid: e.inode,
            generation: e.generation,
            entry_valid: t.as_secs(),
            attr_valid: t.as_secs(),
            entry_valid_nsec: t.subsec_nanos(),
            attr_valid_nsec: t.subsec_nanos(),
            attr: {
                let a = self.attr(&e.attr);
                abi::Attr {
                    flags: a.flags | if e.submount { abi::ATTR_SUBMOUNT } else { 0 },
                    ..a
                }
            },
        }
    }

    pub fn attr_out(&self, st: &Stat) -> abi::AttrOut {
        let t = self.caps.timeout;
        abi::AttrOut {
            attr_valid: t.as_secs(),
            attr_valid_nsec: t.subsec_nanos(),
            dummy: 0,
            attr: self.attr(st),
        }
    }

    /// `st` as the guest sees it (IDs translated).
    fn attr(&self, st: &Stat) -> abi::Attr {
        abi::Attr {
            uid: self.caps.ids.uid.to_guest(st.st_uid),
            gid: self.caps.ids.gid.to_guest(st.st_gid),
            flags: if self.inode_dax(st) { abi::ATTR_DAX } else { 0 },
            ..attr(st)
        }
    }

    /// Whether the guest should reach this file through the DAX window
    /// (per-inode DAX): a regular file whose size is a non-zero multiple
    /// of [`abi::DAX_CHUNK`]. QEMU 11.1 maps only ranges that lie wholly
    /// inside the file, and the guest always asks for whole chunks, so the
    /// last chunk of any other file could not be mapped
    /// (docs/dax-design.md, R1). A file whose size changes away from the
    /// rule loses the flag in the next reply, and the guest evicts its
    /// inode once the file is no longer in use (`fuse_dax_dontcache`).
    /// Nor a set-user-ID file or a set-group-ID one with group execute:
    /// the window maps no such file for reading (passthrough/dax.rs).
    fn inode_dax(&self, st: &Stat) -> bool {
        let setid = st.st_mode & libc::S_ISUID != 0
            || st.st_mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP;
        self.session.has(abi::init_flags::HAS_INODE_DAX)
            && !setid
            && st.st_mode & libc::S_IFMT == libc::S_IFREG
            && st.st_size > 0
            && (st.st_size as u64).is_multiple_of(abi::DAX_CHUNK)
    }

    /// The STATX reply for `sx`, valid as long as attributes are.
    pub fn statx_out(&self, sx: &libc::statx) -> abi::StatxOut {
        let t = self.caps.timeout;
        let time = |t: libc::statx_timestamp| abi::SxTime {
            tv_sec: t.tv_sec,
            tv_nsec: t.tv_nsec,
            reserved: 0,
        };
        abi::StatxOut {
            attr_valid: t.as_secs(),
            attr_valid_nsec: t.subsec_nanos(),
            flags: 0,
            spare0: 0,
            spare1: 0,
            stat: abi::Statx {
                mask: sx.stx_mask,
                blksize: sx.stx_blksize,
                attributes: sx.stx_attributes,
                nlink: sx.stx_nlink,
                uid: self.caps.ids.uid.to_guest(sx.stx_uid),
                gid: self.caps.ids.gid.to_guest(sx.stx_gid),
                mode: sx.stx_mode,
                spare0: 0,
                ino: sx.stx_ino,
                size: sx.stx_size,
                blocks: sx.stx_blocks,
                attributes_mask: sx.stx_attributes_mask,
                atime: time(sx.stx_atime),
                btime: time(sx.stx_btime),
                ctime: time(sx.stx_ctime),
                mtime: time(sx.stx_mtime),
                rdev_major: sx.stx_rdev_major,
                rdev_minor: sx.stx_rdev_minor,
                dev_major: sx.stx_dev_major,
                dev_minor: sx.stx_dev_minor,
                spare2: [0; 28],
            },
        }
    }

    /// Replies with an entry; forgets it if the reply cannot be sent.
    pub fn reply_entry(&self, w: &mut dyn ReplyWriter, e: &Entry) -> OpResult {
        let res = reply_ok(w, self.h.unique, &[&self.entry_out(e).to_bytes()]);
        if res.is_err() {
            // The guest will never learn of this lookup.
            self.fs.forget(e.inode, 1);
        }
        res
    }

    /// An empty success reply.
    pub fn reply_empty(&self, w: &mut dyn ReplyWriter) -> OpResult {
        reply_ok(w, self.h.unique, &[])
    }
}

/// A cursor over a request body.
pub(crate) struct Body<'a> {
    pub b: &'a [u8],
}

impl<'a> Body<'a> {
    pub fn take<T: Wire>(&mut self) -> Result<T, Error> {
        let v = T::from_bytes(self.b).ok_or(Error::Truncated)?;
        self.b = &self.b[T::SIZE..];
        Ok(v)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let (head, tail) = self.b.split_at_checked(n).ok_or(Error::Truncated)?;
        self.b = tail;
        Ok(head)
    }

    /// A NUL-terminated string.
    pub fn cstr(&mut self) -> Result<&'a CStr, Error> {
        let nul = self
            .b
            .iter()
            .position(|&c| c == 0)
            .ok_or(Error::BadName(libc::EINVAL))?;
        let (s, tail) = self.b.split_at(nul + 1);
        self.b = tail;
        CStr::from_bytes_with_nul(s).map_err(|_| Error::BadName(libc::EINVAL))
    }

    /// A single path component.
    pub fn name(&mut self) -> Result<&'a CStr, Error> {
        let n = self.cstr()?;
        check_name(n, false)?;
        Ok(n)
    }

    /// Takes one structure and checks nothing follows it.
    pub fn only<T: Wire>(&mut self) -> Result<T, Error> {
        let v = self.take()?;
        self.end()?;
        Ok(v)
    }

    pub fn end(&self) -> Result<(), Error> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(Error::Trailing(self.b.len()))
        }
    }
}

pub(crate) fn check_name(n: &CStr, allow_dots: bool) -> Result<(), Error> {
    let b = n.to_bytes();
    if b.is_empty() || b.contains(&b'/') {
        return Err(Error::BadName(libc::EINVAL));
    }
    if b.len() > NAME_MAX {
        return Err(Error::BadName(libc::ENAMETOOLONG));
    }
    if !allow_dots && (b == b"." || b == b"..") {
        return Err(Error::BadName(libc::EINVAL));
    }
    Ok(())
}

pub(crate) fn check_xattr_name(n: &CStr) -> Result<(), Error> {
    let len = n.to_bytes().len();
    if len == 0 {
        return Err(Error::BadName(libc::EINVAL));
    }
    if len > NAME_MAX {
        return Err(Error::BadName(libc::ERANGE));
    }
    Ok(())
}

/// Linux `new_encode_dev()`, the device number format of `fuse_attr.rdev`.
fn encode_dev(dev: u64) -> u32 {
    let (major, minor) = crate::sys::major_minor(dev);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

fn attr(st: &Stat) -> abi::Attr {
    abi::Attr {
        ino: st.st_ino,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: st.st_atime as u64,
        mtime: st.st_mtime as u64,
        ctime: st.st_ctime as u64,
        atimensec: st.st_atime_nsec as u32,
        mtimensec: st.st_mtime_nsec as u32,
        ctimensec: st.st_ctime_nsec as u32,
        mode: st.st_mode,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: encode_dev(st.st_rdev),
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// Writes an error reply; 0 when not even the header fits.
pub(crate) fn reply_error(w: &mut dyn ReplyWriter, unique: u64, errno: i32) -> usize {
    let h = abi::OutHeader {
        len: abi::OutHeader::SIZE as u32,
        error: -errno,
        unique,
    };
    match w.write_all(&h.to_bytes()) {
        Ok(()) => abi::OutHeader::SIZE,
        Err(_) => 0,
    }
}

/// Checks a reply with `payload` bytes after its header fits.
pub(crate) fn need(w: &dyn ReplyWriter, payload: usize) -> Result<(), Error> {
    let need = abi::OutHeader::SIZE + payload;
    if w.remaining() < need {
        Err(Error::NoRoom {
            need,
            room: w.remaining(),
        })
    } else {
        Ok(())
    }
}

/// Writes a success reply made of `parts`.
pub(crate) fn reply_ok(w: &mut dyn ReplyWriter, unique: u64, parts: &[&[u8]]) -> OpResult {
    let payload: usize = parts.iter().map(|p| p.len()).sum();
    need(w, payload)?;
    let len = abi::OutHeader::SIZE + payload;
    let mut out = Vec::with_capacity(len);
    abi::OutHeader {
        len: len as u32,
        error: 0,
        unique,
    }
    .encode_into(&mut out);
    for p in parts {
        out.extend_from_slice(p);
    }
    w.write_all(&out)?;
    Ok(len)
}
