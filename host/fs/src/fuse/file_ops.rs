// SPDX-License-Identifier: Apache-2.0
//! One function per opcode for the handle operations (open files and
//! directories), including the zero-copy READ and WRITE paths.

use std::io;
use std::os::fd::BorrowedFd;

use super::abi::*;
use super::io::{ReplyWriter, RequestReader};
use super::wire::{need, reply_ok, Body, Error, OpResult, Req};
use crate::filesystem::{Context, DataSink, DataSource, Entry, FileSystem, Opened};

/// Largest WRITE payload and READ size (FUSE max_write; 256 pages).
pub const MAX_WRITE: u32 = 1 << 20;

fn open_out(o: &Opened) -> Vec<u8> {
    OpenOut {
        fh: o.fh,
        open_flags: o.flags,
        backing_id: 0,
    }
    .to_bytes()
}

pub(crate) fn open<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let o: OpenIn = b.only()?;
    let ctx = q.ctx_kill(o.open_flags & flags::OPEN_KILL_SUIDGID != 0);
    let opened = q.fs.open(ctx, q.h.nodeid, o.flags)?;
    reply_ok(w, q.h.unique, &[&open_out(&opened)]).inspect_err(|_| {
        let _ = q.fs.release(q.ctx(), q.h.nodeid, opened.fh);
    })
}

pub(crate) fn opendir<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let o: OpenIn = b.only()?;
    let opened = q.fs.opendir(q.ctx(), q.h.nodeid, o.flags)?;
    reply_ok(w, q.h.unique, &[&open_out(&opened)]).inspect_err(|_| {
        let _ = q.fs.releasedir(q.ctx(), q.h.nodeid, opened.fh);
    })
}

pub(crate) fn create<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let c: CreateIn = b.take()?;
    let name = b.name()?;
    b.end()?;
    let ctx = Context {
        umask: q.ctx_create(c.umask).umask,
        ..q.ctx_kill(c.open_flags & flags::OPEN_KILL_SUIDGID != 0)
    };
    let sec = q.secctx()?;
    let (e, o) = q.fs.create(ctx, q.h.nodeid, name, c.mode, c.flags)?;
    q.label(sec, &e, |fs| {
        let _ = fs.release(q.ctx(), e.inode, o.fh);
        let _ = fs.unlink(q.ctx(), q.h.nodeid, name);
    })?;
    reply_created(q, &e, &o, w)
}

pub(crate) fn tmpfile<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let c: CreateIn = b.take()?;
    // The kernel sends the placeholder name "/" here; it is not used.
    let _ = b.cstr()?;
    b.end()?;
    let sec = q.secctx()?;
    let (e, o) =
        q.fs.tmpfile(q.ctx_create(c.umask), q.h.nodeid, c.mode, c.flags)?;
    q.label(sec, &e, |fs| {
        let _ = fs.release(q.ctx(), e.inode, o.fh);
    })?;
    reply_created(q, &e, &o, w)
}

fn reply_created<F: FileSystem>(
    q: &Req<'_, F>,
    e: &Entry,
    o: &Opened,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let res = reply_ok(w, q.h.unique, &[&q.entry_out(e).to_bytes(), &open_out(o)]);
    if res.is_err() {
        q.fs.forget(e.inode, 1);
        let _ = q.fs.release(q.ctx(), e.inode, o.fh);
    }
    res
}

pub(crate) fn release<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let r: ReleaseIn = b.only()?;
    super::locks::released(q, r.release_flags, r.lock_owner);
    q.fs.release(q.ctx(), q.h.nodeid, r.fh)?;
    q.reply_empty(w)
}

pub(crate) fn releasedir<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let r: ReleaseIn = b.only()?;
    q.fs.releasedir(q.ctx(), q.h.nodeid, r.fh)?;
    q.reply_empty(w)
}

pub(crate) fn flush<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let f: FlushIn = b.only()?;
    super::locks::flushed(q, f.lock_owner);
    q.fs.flush(q.ctx(), q.h.nodeid, f.fh)?;
    q.reply_empty(w)
}

pub(crate) fn fsync<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let f: FsyncIn = b.only()?;
    let datasync = f.fsync_flags & flags::FSYNC_FDATASYNC != 0;
    if q.h.opcode == opcode::FSYNCDIR {
        q.fs.fsyncdir(q.ctx(), q.h.nodeid, f.fh, datasync)?;
    } else {
        q.fs.fsync(q.ctx(), q.h.nodeid, f.fh, datasync)?;
    }
    q.reply_empty(w)
}

pub(crate) fn fallocate<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let f: FallocateIn = b.only()?;
    q.fs.fallocate(q.ctx(), q.h.nodeid, f.fh, f.mode, f.offset, f.length)?;
    q.reply_empty(w)
}

pub(crate) fn lseek<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let l: LseekIn = b.only()?;
    let offset = q.fs.lseek(q.ctx(), q.h.nodeid, l.fh, l.offset, l.whence)?;
    reply_ok(w, q.h.unique, &[&LseekOut { offset }.to_bytes()])
}

pub(crate) fn copy_file_range<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let c: CopyFileRangeIn = b.only()?;
    let n = q.fs.copy_file_range(
        q.ctx(),
        c.fh_in,
        c.off_in,
        c.fh_out,
        c.off_out,
        c.len,
        c.flags,
    )?;
    let out = WriteOut {
        size: n as u32,
        padding: 0,
    };
    reply_ok(w, q.h.unique, &[&out.to_bytes()])
}

/// READ data goes straight into the reply, after its header.
struct ReplySink<'a> {
    w: &'a mut dyn ReplyWriter,
    left: usize,
    copied: usize,
}

impl DataSink for ReplySink<'_> {
    fn room(&self) -> usize {
        self.left
    }

    fn copy_from_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let len = len.min(self.left);
        let n = self.w.read_from_fd(fd, len, offset)?.min(len);
        self.left -= n;
        self.copied += n;
        Ok(n)
    }

    fn copy_from_slice(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(self.left);
        self.w.write_all(&buf[..n])?;
        self.left -= n;
        self.copied += n;
        Ok(n)
    }
}

pub(crate) fn read<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let ri: ReadIn = b.only()?;
    need(w, 0)?;
    let start = w.written();
    let mut hdr = OutHeader {
        len: OutHeader::SIZE as u32,
        error: -libc::EIO,
        unique: q.h.unique,
    };
    w.write_all(&hdr.to_bytes())?;
    let want = (ri.size.min(MAX_WRITE) as usize).min(w.remaining());
    let mut sink = ReplySink {
        w,
        left: want,
        copied: 0,
    };
    let res =
        q.fs.read(q.ctx(), q.h.nodeid, ri.fh, ri.offset, want, &mut sink);
    let copied = sink.copied;
    match res {
        Err(e) if copied == 0 => hdr.error = -Error::Io(e).errno(),
        _ => {
            hdr.error = 0;
            hdr.len = (OutHeader::SIZE + copied) as u32;
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

/// WRITE data comes straight from the request, after its `WriteIn`.
struct RequestSource<'a> {
    r: &'a mut dyn RequestReader,
    left: usize,
}

impl DataSource for RequestSource<'_> {
    fn remaining(&self) -> usize {
        self.left
    }

    fn copy_to_fd(&mut self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<usize> {
        let len = len.min(self.left);
        let n = self.r.write_to_fd(fd, len, offset)?.min(len);
        self.left -= n;
        Ok(n)
    }

    fn copy_to_slice(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.left {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.r.read_exact(buf)?;
        self.left -= buf.len();
        Ok(())
    }
}

/// WRITE: the body is not buffered; its data is handed to the file system as a
/// [`DataSource`].
pub(crate) fn write<F: FileSystem>(
    q: &Req<'_, F>,
    r: &mut dyn RequestReader,
    body_len: usize,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    need(w, WriteOut::SIZE)?;
    let mut raw = [0u8; WriteIn::SIZE];
    if body_len < raw.len() {
        return Err(Error::Truncated);
    }
    r.read_exact(&mut raw).map_err(|_| Error::Truncated)?;
    let wi = WriteIn::from_bytes(&raw).unwrap_or_default();
    let len = body_len - raw.len();
    if wi.size as usize != len {
        return Err(Error::Trailing(len.abs_diff(wi.size as usize)));
    }
    if wi.size > MAX_WRITE {
        return Err(Error::Errno(libc::EINVAL));
    }
    if q.caps.readonly {
        return Err(Error::Errno(libc::EROFS));
    }
    let mut src = RequestSource { r, left: len };
    let ctx = q.ctx_kill(wi.write_flags & flags::WRITE_KILL_SUIDGID != 0);
    let done =
        q.fs.write(ctx, q.h.nodeid, wi.fh, wi.offset, len, &mut src)?;
    let out = WriteOut {
        size: done as u32,
        padding: 0,
    };
    reply_ok(w, q.h.unique, &[&out.to_bytes()])
}

pub(crate) fn readdir<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
    plus: bool,
) -> OpResult {
    if plus && !q.caps.readdirplus {
        return Err(Error::Errno(libc::ENOSYS));
    }
    let ri: ReadIn = b.only()?;
    need(w, 0)?;
    let room = (ri.size as usize).min(w.remaining() - OutHeader::SIZE);
    let mut out = Vec::with_capacity(room.min(64 * 1024));
    let ctx = q.ctx();
    let res =
        q.fs.readdir(ctx, q.h.nodeid, ri.fh, ri.offset, room, &mut |e| {
            let base = if plus { EntryOut::SIZE } else { 0 } + Dirent::SIZE;
            let reclen = dirent_align(base + e.name.len());
            if out.len() + reclen > room {
                return false;
            }
            if plus {
                let entry =
                    q.fs.readdirplus_lookup(ctx, q.h.nodeid, e.name)
                        .map(|en| q.entry_out(&en))
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
        _ => reply_ok(w, q.h.unique, &[&out]),
    }
}

pub(crate) fn setupmapping<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    use crate::abi::setupmapping_flags::{READ, WRITE};
    dax_window(q)?;
    let m: SetupMappingIn = b.only()?;
    if m.flags & !(READ | WRITE) != 0 {
        return Err(Error::Errno(libc::EINVAL));
    }
    let writable = m.flags & WRITE != 0;
    if writable && q.caps.readonly {
        return Err(Error::Errno(libc::EROFS));
    }
    q.fs.setupmapping(q.ctx(), q.h.nodeid, m.foffset, m.len, writable, m.moffset)?;
    q.reply_empty(w)
}

/// Without a DAX window (no MAP_ALIGNMENT to offer) the mapping requests
/// are unknown: ENOSYS before their body is read.
fn dax_window<F: FileSystem>(q: &Req<'_, F>) -> Result<(), Error> {
    if q.caps.init_flags & crate::abi::init_flags::MAP_ALIGNMENT == 0 {
        return Err(Error::Errno(libc::ENOSYS));
    }
    Ok(())
}

/// The most ranges one REMOVEMAPPING may carry (a page of them, as Linux
/// sends at most).
const MAX_REMOVEMAPPING: u32 = 256;

pub(crate) fn removemapping<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    dax_window(q)?;
    let n: RemoveMappingIn = b.take()?;
    if n.count == 0 || n.count > MAX_REMOVEMAPPING {
        return Err(Error::Errno(libc::EINVAL));
    }
    let mut ranges = Vec::with_capacity(n.count as usize);
    for _ in 0..n.count {
        let one: RemoveMappingOne = b.take()?;
        ranges.push((one.moffset, one.len));
    }
    b.end()?;
    q.fs.removemapping(q.ctx(), &ranges)?;
    q.reply_empty(w)
}
