//! The FUSE request dispatcher.
//!
//! [`Server::handle`] reads one request from a [`RequestReader`], checks it,
//! runs it against the [`PassthroughFs`] and writes the reply to a
//! [`ReplyWriter`]. Every request byte is untrusted:
//!
//! - the header's `len` must equal the bytes the transport holds, extensions
//!   (`total_extlen`) must fit inside, and each body must be exactly its
//!   structures plus its names — anything else gets `EINVAL`;
//! - names must be NUL-terminated, non-empty, at most 255 bytes, without `/`,
//!   and not `.` or `..` (LOOKUP accepts those two: `..` at the root is the
//!   root);
//! - a reply that does not fit the guest's buffer is replaced by an `EINVAL`
//!   error before any side effect, or by nothing when not even an out header
//!   fits;
//! - FORGET, BATCH_FORGET and INTERRUPT never get a reply.
//!
//! Malformed requests are logged through a rate limiter. Nothing here panics on
//! guest input.

use std::ffi::CStr;
use std::io;

use crate::abi::{self, init_flags, opcode, Wire};
use crate::io::{ReplyWriter, RequestReader};
use crate::passthrough::state::SessionState;
use crate::passthrough::{CachePolicy, Config, Ctx, Entry, PassthroughFs, XattrReply};

/// Largest WRITE payload and READ size (FUSE max_write; 256 pages).
pub const MAX_WRITE: u32 = 1 << 20;
/// `max_pages` announced in INIT.
pub const MAX_PAGES: u16 = 256;
/// Largest request body other than WRITE data (xattr values are at most 64 KiB).
pub const MAX_BODY: usize = 256 * 1024;
/// Longest file name.
pub const NAME_MAX: usize = 255;
/// Longest symlink target, NUL excluded.
pub const PATH_MAX: usize = 4095;

/// Why a request failed (mapped to the errno of the reply).
#[derive(Debug, thiserror::Error)]
enum Error {
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
}

impl Error {
    fn errno(&self) -> i32 {
        match self {
            Error::Truncated | Error::Trailing(_) | Error::NoRoom { .. } => libc::EINVAL,
            Error::BadName(e) | Error::Errno(e) => *e,
            Error::NotInitialized => libc::EIO,
            Error::Io(e) => e
                .raw_os_error()
                .filter(|e| (1..4096).contains(e))
                .unwrap_or(libc::EIO),
        }
    }

    /// Whether the error says the guest sent something malformed (worth a
    /// rate-limited log line) rather than an ordinary failure.
    fn is_protocol(&self) -> bool {
        matches!(
            self,
            Error::Truncated | Error::Trailing(_) | Error::NoRoom { .. } | Error::BadName(_)
        )
    }
}

type OpResult = Result<usize, Error>;

/// INIT flags this configuration offers.
pub fn supported_init_flags(cfg: &Config) -> u64 {
    use init_flags::*;
    let mut f = ASYNC_READ
        | ATOMIC_O_TRUNC
        | EXPORT_SUPPORT
        | BIG_WRITES
        | PARALLEL_DIROPS
        | MAX_PAGES
        | INIT_EXT;
    if cfg.readdirplus {
        f |= DO_READDIRPLUS | READDIRPLUS_AUTO;
    }
    if cfg.writeback && !cfg.readonly {
        f |= WRITEBACK_CACHE;
    }
    if cfg.xattr {
        f |= SETXATTR_EXT;
    }
    match cfg.cache {
        CachePolicy::Never => f |= DIRECT_IO_ALLOW_MMAP,
        CachePolicy::Metadata => f |= DIRECT_IO_ALLOW_MMAP | CACHE_SYMLINKS,
        CachePolicy::Auto => f |= AUTO_INVAL_DATA | CACHE_SYMLINKS,
        CachePolicy::Always => f |= CACHE_SYMLINKS,
    }
    f
}

/// A cursor over a request body.
struct Body<'a> {
    b: &'a [u8],
}

impl<'a> Body<'a> {
    fn take<T: Wire>(&mut self) -> Result<T, Error> {
        let v = T::from_bytes(self.b).ok_or(Error::Truncated)?;
        self.b = &self.b[T::SIZE..];
        Ok(v)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let (head, tail) = self.b.split_at_checked(n).ok_or(Error::Truncated)?;
        self.b = tail;
        Ok(head)
    }

    /// A NUL-terminated string.
    fn cstr(&mut self) -> Result<&'a CStr, Error> {
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
    fn name(&mut self) -> Result<&'a CStr, Error> {
        let n = self.cstr()?;
        check_name(n, false)?;
        Ok(n)
    }

    fn end(&self) -> Result<(), Error> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(Error::Trailing(self.b.len()))
        }
    }
}

fn check_name(n: &CStr, allow_dots: bool) -> Result<(), Error> {
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

/// Linux `new_encode_dev()`, the device number format of `fuse_attr.rdev`.
fn encode_dev(dev: u64) -> u32 {
    let (major, minor) = crate::sys::major_minor(dev);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

fn attr(st: &libc::stat64) -> abi::Attr {
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
fn reply_error(w: &mut dyn ReplyWriter, unique: u64, errno: i32) -> usize {
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

fn need(w: &dyn ReplyWriter, payload: usize) -> Result<(), Error> {
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
fn reply_ok(w: &mut dyn ReplyWriter, unique: u64, parts: &[&[u8]]) -> OpResult {
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

/// The FUSE server: `Send + Sync`, called concurrently by every queue worker.
#[derive(Debug)]
pub struct Server {
    fs: PassthroughFs,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Server>();
};

impl Server {
    /// A server for `fs`.
    pub fn new(fs: PassthroughFs) -> Server {
        Server { fs }
    }

    /// The file system (for snapshots).
    pub fn fs(&self) -> &PassthroughFs {
        &self.fs
    }

    /// Handles one request; returns the number of reply bytes written (0: no
    /// reply, as for FORGET).
    pub fn handle(&self, r: &mut dyn RequestReader, w: &mut dyn ReplyWriter) -> usize {
        let mut hb = [0u8; abi::InHeader::SIZE];
        if r.read_exact(&mut hb).is_err() {
            guest_warn!(
                "FUSE request of {} bytes is shorter than its header",
                r.remaining()
            );
            return reply_error(w, 0, libc::EINVAL);
        }
        let h = abi::InHeader::from_bytes(&hb).unwrap_or_default();
        let no_reply = matches!(
            h.opcode,
            opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT
        );
        let res = self.handle_checked(&h, r, w);
        match res {
            Ok(n) => n,
            Err(e) => {
                if e.is_protocol() {
                    guest_warn!(
                        "bad FUSE request (opcode {}, unique {}): {}",
                        h.opcode,
                        h.unique,
                        e
                    );
                } else {
                    log::trace!("opcode {} unique {}: {}", h.opcode, h.unique, e);
                }
                if no_reply {
                    0
                } else {
                    reply_error(w, h.unique, e.errno())
                }
            }
        }
    }

    fn handle_checked(
        &self,
        h: &abi::InHeader,
        r: &mut dyn RequestReader,
        w: &mut dyn ReplyWriter,
    ) -> OpResult {
        let held = abi::InHeader::SIZE + r.remaining();
        if h.len as usize != held {
            guest_warn!(
                "FUSE header length {} but {} bytes received (opcode {})",
                h.len,
                held,
                h.opcode
            );
            return Err(Error::Errno(libc::EINVAL));
        }
        let ext = usize::from(h.total_extlen) * 8;
        let body_len = r.remaining().checked_sub(ext).ok_or(Error::Truncated)?;
        if h.opcode != opcode::INIT && self.fs.session().is_none() {
            return Err(Error::NotInitialized);
        }
        if h.opcode == opcode::WRITE {
            return self.do_write(h, r, body_len, w);
        }
        if body_len > MAX_BODY {
            return Err(Error::Errno(libc::E2BIG));
        }
        let mut body = vec![0u8; body_len];
        r.read_exact(&mut body).map_err(|_| Error::Truncated)?;
        self.dispatch(h, Body { b: &body }, w)
    }

    fn ctx(h: &abi::InHeader) -> Ctx {
        Ctx {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        }
    }

    fn entry_out(&self, e: &Entry) -> abi::EntryOut {
        let t = self.fs.config().cache.timeout();
        abi::EntryOut {
            nodeid: e.inode,
            generation: e.generation,
            entry_valid: t.as_secs(),
            attr_valid: t.as_secs(),
            entry_valid_nsec: t.subsec_nanos(),
            attr_valid_nsec: t.subsec_nanos(),
            attr: attr(&e.attr),
        }
    }

    fn attr_out(&self, st: &libc::stat64) -> abi::AttrOut {
        let t = self.fs.config().cache.timeout();
        abi::AttrOut {
            attr_valid: t.as_secs(),
            attr_valid_nsec: t.subsec_nanos(),
            dummy: 0,
            attr: attr(st),
        }
    }

    fn reply_entry(&self, w: &mut dyn ReplyWriter, unique: u64, e: &Entry) -> OpResult {
        let res = reply_ok(w, unique, &[&self.entry_out(e).to_bytes()]);
        if res.is_err() {
            // The guest will never learn of this lookup.
            self.fs.forget(e.inode, 1);
        }
        res
    }

    fn xattr_enabled(&self) -> Result<(), Error> {
        if self.fs.config().xattr {
            Ok(())
        } else {
            Err(Error::Errno(libc::ENOSYS))
        }
    }

    fn dispatch(&self, h: &abi::InHeader, mut b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        use abi::*;
        let fs = &self.fs;
        let node = h.nodeid;
        let u = h.unique;
        // Ops with side effects check the reply fits before acting.
        let min_reply: Option<usize> = match h.opcode {
            opcode::LOOKUP | opcode::MKNOD | opcode::MKDIR | opcode::SYMLINK | opcode::LINK => {
                Some(EntryOut::SIZE)
            }
            opcode::CREATE | opcode::TMPFILE => Some(EntryOut::SIZE + OpenOut::SIZE),
            opcode::OPEN | opcode::OPENDIR => Some(OpenOut::SIZE),
            opcode::GETATTR | opcode::SETATTR => Some(AttrOut::SIZE),
            opcode::INIT => Some(InitOut::SIZE),
            // No reply at all: these arrive without a writable descriptor (the
            // guest's hiprio queue) and must still take effect.
            opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT => None,
            _ => Some(0),
        };
        if let Some(payload) = min_reply {
            need(w, payload)?;
        }
        match h.opcode {
            opcode::INIT => self.do_init(h, b, w),
            opcode::DESTROY => {
                b.end()?;
                fs.end_session();
                reply_ok(w, u, &[])
            }
            opcode::LOOKUP => {
                let name = b.cstr()?;
                check_name(name, true)?;
                b.end()?;
                let e = fs.lookup(node, name)?;
                self.reply_entry(w, u, &e)
            }
            opcode::FORGET => {
                let f: ForgetIn = b.take()?;
                b.end()?;
                fs.forget(node, f.nlookup);
                Ok(0)
            }
            opcode::BATCH_FORGET => {
                let bf: BatchForgetIn = b.take()?;
                let count = bf.count as usize;
                if count.checked_mul(ForgetOne::SIZE) != Some(b.b.len()) {
                    return Err(Error::Trailing(b.b.len()));
                }
                for _ in 0..count {
                    let f: ForgetOne = b.take()?;
                    fs.forget(f.nodeid, f.nlookup);
                }
                Ok(0)
            }
            opcode::INTERRUPT => {
                let _: InterruptIn = b.take()?;
                Ok(0)
            }
            opcode::GETATTR => {
                let _: GetattrIn = b.take()?;
                b.end()?;
                let st = fs.getattr(node)?;
                reply_ok(w, u, &[&self.attr_out(&st).to_bytes()])
            }
            opcode::SETATTR => {
                let a: SetattrIn = b.take()?;
                b.end()?;
                let st = fs.setattr(node, &a)?;
                reply_ok(w, u, &[&self.attr_out(&st).to_bytes()])
            }
            opcode::READLINK => {
                b.end()?;
                let t = fs.readlink(node)?;
                reply_ok(w, u, &[&t])
            }
            opcode::SYMLINK => {
                let name = b.name()?;
                let target = b.cstr()?;
                b.end()?;
                let tl = target.to_bytes().len();
                if tl == 0 {
                    return Err(Error::BadName(libc::EINVAL));
                }
                if tl > PATH_MAX {
                    return Err(Error::BadName(libc::ENAMETOOLONG));
                }
                let e = fs.symlink(Self::ctx(h), node, name, target)?;
                self.reply_entry(w, u, &e)
            }
            opcode::MKNOD => {
                let m: MknodIn = b.take()?;
                let name = b.name()?;
                b.end()?;
                let e = fs.mknod(Self::ctx(h), node, name, m.mode, m.rdev)?;
                self.reply_entry(w, u, &e)
            }
            opcode::MKDIR => {
                let m: MkdirIn = b.take()?;
                let name = b.name()?;
                b.end()?;
                let e = fs.mkdir(Self::ctx(h), node, name, m.mode)?;
                self.reply_entry(w, u, &e)
            }
            opcode::UNLINK | opcode::RMDIR => {
                let name = b.name()?;
                b.end()?;
                fs.unlink(node, name, h.opcode == opcode::RMDIR)?;
                reply_ok(w, u, &[])
            }
            opcode::RENAME | opcode::RENAME2 => {
                let (newdir, flags) = if h.opcode == opcode::RENAME {
                    (b.take::<RenameIn>()?.newdir, 0)
                } else {
                    let r: Rename2In = b.take()?;
                    (r.newdir, r.flags)
                };
                let old = b.name()?;
                let new = b.name()?;
                b.end()?;
                fs.rename(node, old, newdir, new, flags)?;
                reply_ok(w, u, &[])
            }
            opcode::LINK => {
                let l: LinkIn = b.take()?;
                let name = b.name()?;
                b.end()?;
                let e = fs.link(l.oldnodeid, node, name)?;
                self.reply_entry(w, u, &e)
            }
            opcode::OPEN | opcode::OPENDIR => {
                let o: OpenIn = b.take()?;
                b.end()?;
                let (fh, open_flags) = if h.opcode == opcode::OPEN {
                    fs.open(node, o.flags)?
                } else {
                    fs.opendir(node, o.flags)?
                };
                let out = OpenOut {
                    fh,
                    open_flags,
                    backing_id: 0,
                };
                reply_ok(w, u, &[&out.to_bytes()]).inspect_err(|_| {
                    let _ = fs.release(fh);
                })
            }
            opcode::CREATE | opcode::TMPFILE => {
                let c: CreateIn = b.take()?;
                let (e, fh, open_flags) = if h.opcode == opcode::CREATE {
                    let name = b.name()?;
                    b.end()?;
                    fs.create(Self::ctx(h), node, name, c.mode, c.flags)?
                } else {
                    // The kernel sends the placeholder name "/" here; it is
                    // not used.
                    let _ = b.cstr()?;
                    b.end()?;
                    fs.tmpfile(Self::ctx(h), node, c.mode, c.flags)?
                };
                let out = OpenOut {
                    fh,
                    open_flags,
                    backing_id: 0,
                };
                let res = reply_ok(w, u, &[&self.entry_out(&e).to_bytes(), &out.to_bytes()]);
                if res.is_err() {
                    fs.forget(e.inode, 1);
                    let _ = fs.release(fh);
                }
                res
            }
            opcode::READ => self.do_read(h, b, w),
            opcode::READDIR => self.do_readdir(h, b, w, false),
            opcode::READDIRPLUS => {
                if !fs.config().readdirplus {
                    return Err(Error::Errno(libc::ENOSYS));
                }
                self.do_readdir(h, b, w, true)
            }
            opcode::STATFS => {
                b.end()?;
                let s = fs.statfs(node)?;
                let out = StatfsOut {
                    st: Kstatfs {
                        blocks: s.f_blocks,
                        bfree: s.f_bfree,
                        bavail: s.f_bavail,
                        files: s.f_files,
                        ffree: s.f_ffree,
                        bsize: s.f_bsize as u32,
                        namelen: s.f_namelen as u32,
                        frsize: s.f_frsize as u32,
                        padding: 0,
                        spare: [0; 6],
                    },
                };
                reply_ok(w, u, &[&out.to_bytes()])
            }
            opcode::RELEASE | opcode::RELEASEDIR => {
                let r: ReleaseIn = b.take()?;
                b.end()?;
                fs.release(r.fh)?;
                reply_ok(w, u, &[])
            }
            opcode::FLUSH => {
                let f: FlushIn = b.take()?;
                b.end()?;
                fs.flush(f.fh)?;
                reply_ok(w, u, &[])
            }
            opcode::FSYNC | opcode::FSYNCDIR => {
                let f: FsyncIn = b.take()?;
                b.end()?;
                fs.fsync(f.fh, f.fsync_flags & flags::FSYNC_FDATASYNC != 0)?;
                reply_ok(w, u, &[])
            }
            opcode::ACCESS => {
                let a: AccessIn = b.take()?;
                b.end()?;
                fs.access(Self::ctx(h), node, a.mask)?;
                reply_ok(w, u, &[])
            }
            opcode::SETXATTR => {
                self.xattr_enabled()?;
                let ext = fs
                    .session()
                    .is_some_and(|s| s.flags & init_flags::SETXATTR_EXT != 0);
                let s = if ext {
                    b.take::<SetxattrIn>()?
                } else {
                    let raw = b.bytes(COMPAT_SETXATTR_IN_SIZE)?;
                    SetxattrIn::from_bytes(&[raw, &[0u8; 8]].concat()).unwrap_or_default()
                };
                let name = b.cstr()?;
                check_xattr_name(name)?;
                let value = b.bytes(s.size as usize)?;
                b.end()?;
                fs.setxattr(node, name, value, s.flags)?;
                reply_ok(w, u, &[])
            }
            opcode::GETXATTR | opcode::LISTXATTR => {
                self.xattr_enabled()?;
                let g: GetxattrIn = b.take()?;
                let reply = if h.opcode == opcode::GETXATTR {
                    let name = b.cstr()?;
                    check_xattr_name(name)?;
                    b.end()?;
                    fs.getxattr(node, name, g.size)?
                } else {
                    b.end()?;
                    fs.listxattr(node, g.size)?
                };
                match reply {
                    XattrReply::Size(size) => {
                        reply_ok(w, u, &[&GetxattrOut { size, padding: 0 }.to_bytes()])
                    }
                    XattrReply::Value(v) => reply_ok(w, u, &[&v]),
                }
            }
            opcode::REMOVEXATTR => {
                self.xattr_enabled()?;
                let name = b.cstr()?;
                check_xattr_name(name)?;
                b.end()?;
                fs.removexattr(node, name)?;
                reply_ok(w, u, &[])
            }
            opcode::FALLOCATE => {
                let f: FallocateIn = b.take()?;
                b.end()?;
                fs.fallocate(f.fh, f.mode, f.offset, f.length)?;
                reply_ok(w, u, &[])
            }
            opcode::LSEEK => {
                let l: LseekIn = b.take()?;
                b.end()?;
                let offset = fs.lseek(l.fh, l.offset, l.whence)?;
                reply_ok(w, u, &[&LseekOut { offset }.to_bytes()])
            }
            opcode::COPY_FILE_RANGE => {
                let c: CopyFileRangeIn = b.take()?;
                b.end()?;
                let n =
                    fs.copy_file_range(c.fh_in, c.off_in, c.fh_out, c.off_out, c.len, c.flags)?;
                let out = WriteOut {
                    size: n as u32,
                    padding: 0,
                };
                reply_ok(w, u, &[&out.to_bytes()])
            }
            opcode::SYNCFS => {
                let _: SyncfsIn = b.take()?;
                b.end()?;
                fs.syncfs(node)?;
                reply_ok(w, u, &[])
            }
            // GETLK, SETLK, SETLKW, BMAP, IOCTL, POLL, NOTIFY_REPLY,
            // SETUPMAPPING, REMOVEMAPPING, STATX and anything unknown.
            _ => Err(Error::Errno(libc::ENOSYS)),
        }
    }

    fn do_init(&self, h: &abi::InHeader, b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        use abi::*;
        if b.b.len() < COMPAT_INIT_IN_SIZE {
            return Err(Error::Truncated);
        }
        if b.b.len() > InitIn::SIZE {
            return Err(Error::Trailing(b.b.len() - InitIn::SIZE));
        }
        let mut raw = [0u8; InitIn::SIZE];
        raw[..b.b.len()].copy_from_slice(b.b);
        let i = InitIn::from_bytes(&raw).unwrap_or_default();
        if i.major != KERNEL_VERSION || i.minor < MIN_KERNEL_MINOR_VERSION {
            log::warn!(
                "guest speaks FUSE {}.{}; this server needs 7.{}..",
                i.major,
                i.minor,
                MIN_KERNEL_MINOR_VERSION
            );
            return Err(Error::Errno(libc::EPROTO));
        }
        let mut kernel = u64::from(i.flags);
        if kernel & init_flags::INIT_EXT != 0 {
            kernel |= u64::from(i.flags2) << 32;
        }
        let flags = kernel & supported_init_flags(self.fs.config());
        let minor = i.minor.min(KERNEL_MINOR_VERSION);
        let out = InitOut {
            major: KERNEL_VERSION,
            minor,
            max_readahead: i.max_readahead,
            flags: flags as u32,
            max_background: 64,
            congestion_threshold: 48,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: if flags & init_flags::MAX_PAGES != 0 {
                MAX_PAGES
            } else {
                0
            },
            map_alignment: 0,
            flags2: (flags >> 32) as u32,
            max_stack_depth: 0,
            unused: [0; 6],
        };
        need(w, InitOut::SIZE)?;
        self.fs.start_session(SessionState { minor, flags });
        log::info!(
            "FUSE session started: protocol 7.{minor}, flags {flags:#x} (guest offered {kernel:#x})"
        );
        reply_ok(w, h.unique, &[&out.to_bytes()])
    }

    fn do_read(&self, h: &abi::InHeader, mut b: Body<'_>, w: &mut dyn ReplyWriter) -> OpResult {
        let ri: abi::ReadIn = b.take()?;
        b.end()?;
        let handle = self.fs.handle(ri.fh)?;
        need(w, 0)?;
        let start = w.written();
        let mut hdr = abi::OutHeader {
            len: abi::OutHeader::SIZE as u32,
            error: -libc::EIO,
            unique: h.unique,
        };
        w.write_all(&hdr.to_bytes())?;
        let want = (ri.size.min(MAX_WRITE) as usize).min(w.remaining());
        let mut done = 0usize;
        let mut failure = None;
        while done < want {
            let Some(off) = ri.offset.checked_add(done as u64) else {
                failure = Some(libc::EINVAL);
                break;
            };
            match w.read_from_fd(handle.fd(), want - done, off) {
                Ok(0) => break,
                Ok(n) => done += n.min(want - done),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(Error::Io(e).errno());
                    break;
                }
            }
        }
        match failure {
            Some(errno) if done == 0 => hdr.error = -errno,
            _ => {
                hdr.error = 0;
                hdr.len = (abi::OutHeader::SIZE + done) as u32;
            }
        }
        match w.overwrite(start, &hdr.to_bytes()) {
            Ok(()) => Ok(hdr.len as usize),
            Err(e) => {
                log::error!("cannot complete READ reply: {e}");
                Ok(0)
            }
        }
    }

    fn do_write(
        &self,
        h: &abi::InHeader,
        r: &mut dyn RequestReader,
        body_len: usize,
        w: &mut dyn ReplyWriter,
    ) -> OpResult {
        need(w, abi::WriteOut::SIZE)?;
        let mut raw = [0u8; abi::WriteIn::SIZE];
        if body_len < raw.len() {
            return Err(Error::Truncated);
        }
        r.read_exact(&mut raw).map_err(|_| Error::Truncated)?;
        let wi = abi::WriteIn::from_bytes(&raw).unwrap_or_default();
        let len = body_len - raw.len();
        if wi.size as usize != len {
            return Err(Error::Trailing(len.abs_diff(wi.size as usize)));
        }
        if wi.size > MAX_WRITE {
            return Err(Error::Errno(libc::EINVAL));
        }
        if self.fs.config().readonly {
            return Err(Error::Errno(libc::EROFS));
        }
        let handle = self.fs.handle(wi.fh)?;
        let mut done = 0usize;
        while done < len {
            let off = wi
                .offset
                .checked_add(done as u64)
                .ok_or(Error::Errno(libc::EINVAL))?;
            match r.write_to_fd(handle.fd(), len - done, off) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if done == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        let out = abi::WriteOut {
            size: done as u32,
            padding: 0,
        };
        reply_ok(w, h.unique, &[&out.to_bytes()])
    }

    fn do_readdir(
        &self,
        h: &abi::InHeader,
        mut b: Body<'_>,
        w: &mut dyn ReplyWriter,
        plus: bool,
    ) -> OpResult {
        use abi::{dirent_align, Dirent, EntryOut};
        let ri: abi::ReadIn = b.take()?;
        b.end()?;
        need(w, 0)?;
        let room = (ri.size as usize).min(w.remaining() - abi::OutHeader::SIZE);
        let mut out = Vec::with_capacity(room.min(64 * 1024));
        let res = self.fs.readdir(ri.fh, ri.offset, room, &mut |e| {
            let base = if plus { EntryOut::SIZE } else { 0 } + Dirent::SIZE;
            let reclen = dirent_align(base + e.name.len());
            if out.len() + reclen > room {
                return false;
            }
            if plus {
                let entry = self
                    .fs
                    .lookup_for_readdir(h.nodeid, e.name)
                    .map(|en| self.entry_out(&en))
                    .unwrap_or_default();
                entry.encode_into(&mut out);
            }
            Dirent {
                ino: e.ino,
                off: e.off,
                namelen: e.name.len() as u32,
                typ: e.typ,
            }
            .encode_into(&mut out);
            out.extend_from_slice(e.name);
            out.resize(out.len().next_multiple_of(8), 0);
            true
        });
        match res {
            Err(e) if out.is_empty() => Err(e.into()),
            _ => reply_ok(w, h.unique, &[&out]),
        }
    }
}

fn check_xattr_name(n: &CStr) -> Result<(), Error> {
    let len = n.to_bytes().len();
    if len == 0 {
        return Err(Error::BadName(libc::EINVAL));
    }
    if len > NAME_MAX {
        return Err(Error::BadName(libc::ERANGE));
    }
    Ok(())
}
