// SPDX-License-Identifier: Apache-2.0
//! One function per opcode for the node and metadata operations: parse the
//! body, call the file system, encode the reply.

use super::abi::*;
use super::io::ReplyWriter;
use super::wire::{check_name, check_xattr_name, reply_ok, Body, Error, OpResult, Req, PATH_MAX};
use crate::filesystem::{Context, FileSystem, SetAttr, SetTime, XattrReply};

pub(crate) fn lookup<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let name = b.cstr()?;
    check_name(name, true)?;
    b.end()?;
    let e = q.fs.lookup(q.ctx(), q.h.nodeid, name)?;
    q.reply_entry(w, &e)
}

pub(crate) fn forget<F: FileSystem>(q: &Req<'_, F>, mut b: Body<'_>) -> OpResult {
    let f: ForgetIn = b.only()?;
    q.fs.forget(q.h.nodeid, f.nlookup);
    Ok(0)
}

pub(crate) fn batch_forget<F: FileSystem>(q: &Req<'_, F>, mut b: Body<'_>) -> OpResult {
    let bf: BatchForgetIn = b.take()?;
    let count = bf.count as usize;
    if count.checked_mul(ForgetOne::SIZE) != Some(b.b.len()) {
        return Err(Error::Trailing(b.b.len()));
    }
    for _ in 0..count {
        let f: ForgetOne = b.take()?;
        q.fs.forget(f.nodeid, f.nlookup);
    }
    Ok(0)
}

pub(crate) fn getattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let _: GetattrIn = b.only()?;
    let st = q.fs.getattr(q.ctx(), q.h.nodeid)?;
    reply_ok(w, q.h.unique, &[&q.attr_out(&st).to_bytes()])
}

pub(crate) fn statx<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let a: StatxIn = b.only()?;
    let sx = q.fs.statx(q.ctx(), q.h.nodeid, a.sx_flags, a.sx_mask)?;
    reply_ok(w, q.h.unique, &[&q.statx_out(&sx).to_bytes()])
}

pub(crate) fn setattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let a: SetattrIn = b.only()?;
    let ctx = q.ctx_kill(a.valid & fattr::KILL_SUIDGID != 0);
    let mut set = set_attr(&a);
    // A new owner is the guest's ID: the host's for it, EPERM if forbidden.
    let ids = &q.caps.ids;
    let perm = || Error::Errno(libc::EPERM);
    set.uid = set
        .uid
        .map(|u| ids.uid.to_host(u).ok_or_else(perm))
        .transpose()?;
    set.gid = set
        .gid
        .map(|g| ids.gid.to_host(g).ok_or_else(perm))
        .transpose()?;
    let st = q.fs.setattr(ctx, q.h.nodeid, &set)?;
    reply_ok(w, q.h.unique, &[&q.attr_out(&st).to_bytes()])
}

pub(crate) fn readlink<F: FileSystem>(
    q: &Req<'_, F>,
    b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    b.end()?;
    let t = q.fs.readlink(q.ctx(), q.h.nodeid)?;
    reply_ok(w, q.h.unique, &[&t])
}

pub(crate) fn symlink<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
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
    let sec = q.secctx()?;
    let e = q.fs.symlink(q.ctx(), q.h.nodeid, name, target)?;
    q.reply_labelled(w, sec, &e, |fs| {
        let _ = fs.unlink(q.ctx(), q.h.nodeid, name);
    })
}

pub(crate) fn mknod<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let m: MknodIn = b.take()?;
    let name = b.name()?;
    b.end()?;
    let sec = q.secctx()?;
    let e =
        q.fs.mknod(q.ctx_create(m.umask), q.h.nodeid, name, m.mode, m.rdev)?;
    q.reply_labelled(w, sec, &e, |fs| {
        let _ = fs.unlink(q.ctx(), q.h.nodeid, name);
    })
}

pub(crate) fn mkdir<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let m: MkdirIn = b.take()?;
    let name = b.name()?;
    b.end()?;
    let sec = q.secctx()?;
    let e =
        q.fs.mkdir(q.ctx_create(m.umask), q.h.nodeid, name, m.mode)?;
    q.reply_labelled(w, sec, &e, |fs| {
        let _ = fs.rmdir(q.ctx(), q.h.nodeid, name);
    })
}

pub(crate) fn unlink<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let name = b.name()?;
    b.end()?;
    q.fs.unlink(q.ctx(), q.h.nodeid, name)?;
    q.reply_empty(w)
}

pub(crate) fn rmdir<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let name = b.name()?;
    b.end()?;
    q.fs.rmdir(q.ctx(), q.h.nodeid, name)?;
    q.reply_empty(w)
}

pub(crate) fn rename<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let (newdir, flags) = if q.h.opcode == opcode::RENAME {
        (b.take::<RenameIn>()?.newdir, 0)
    } else {
        let r: Rename2In = b.take()?;
        (r.newdir, r.flags)
    };
    let old = b.name()?;
    let new = b.name()?;
    b.end()?;
    q.fs.rename(q.ctx(), q.h.nodeid, old, newdir, new, flags)?;
    q.reply_empty(w)
}

pub(crate) fn link<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let l: LinkIn = b.take()?;
    let name = b.name()?;
    b.end()?;
    let e = q.fs.link(q.ctx(), l.oldnodeid, q.h.nodeid, name)?;
    q.reply_entry(w, &e)
}

pub(crate) fn statfs<F: FileSystem>(
    q: &Req<'_, F>,
    b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    b.end()?;
    let s = q.fs.statfs(q.ctx(), q.h.nodeid)?;
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
    reply_ok(w, q.h.unique, &[&out.to_bytes()])
}

pub(crate) fn access<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let a: AccessIn = b.only()?;
    q.fs.access(q.ctx(), q.h.nodeid, a.mask)?;
    q.reply_empty(w)
}

pub(crate) fn syncfs<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    let _: SyncfsIn = b.only()?;
    q.fs.syncfs(q.ctx(), q.h.nodeid)?;
    q.reply_empty(w)
}

fn xattr_enabled<F: FileSystem>(q: &Req<'_, F>) -> Result<(), Error> {
    if q.caps.xattr {
        Ok(())
    } else {
        Err(Error::Errno(libc::ENOSYS))
    }
}

pub(crate) fn setxattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    xattr_enabled(q)?;
    let s = if q.session.has(init_flags::SETXATTR_EXT) {
        b.take::<SetxattrIn>()?
    } else {
        let raw = b.bytes(COMPAT_SETXATTR_IN_SIZE)?;
        SetxattrIn::from_bytes(&[raw, &[0u8; 8]].concat()).unwrap_or_default()
    };
    let name = b.cstr()?;
    check_xattr_name(name)?;
    let value = b.bytes(s.size as usize)?;
    b.end()?;
    let ctx = Context {
        acl_kill_sgid: s.setxattr_flags & SETXATTR_ACL_KILL_SGID != 0,
        ..q.ctx()
    };
    q.fs.setxattr(ctx, q.h.nodeid, name, value, s.flags)?;
    q.reply_empty(w)
}

pub(crate) fn getxattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    xattr_enabled(q)?;
    let g: GetxattrIn = b.take()?;
    let name = b.cstr()?;
    check_xattr_name(name)?;
    b.end()?;
    let reply = q.fs.getxattr(q.ctx(), q.h.nodeid, name, g.size)?;
    reply_xattr(q, reply, w)
}

pub(crate) fn listxattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    xattr_enabled(q)?;
    let g: GetxattrIn = b.only()?;
    let reply = q.fs.listxattr(q.ctx(), q.h.nodeid, g.size)?;
    reply_xattr(q, reply, w)
}

fn reply_xattr<F: FileSystem>(
    q: &Req<'_, F>,
    reply: XattrReply,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    match reply {
        XattrReply::Size(size) => reply_ok(
            w,
            q.h.unique,
            &[&GetxattrOut { size, padding: 0 }.to_bytes()],
        ),
        XattrReply::Value(v) => reply_ok(w, q.h.unique, &[&v]),
    }
}

pub(crate) fn removexattr<F: FileSystem>(
    q: &Req<'_, F>,
    mut b: Body<'_>,
    w: &mut dyn ReplyWriter,
) -> OpResult {
    xattr_enabled(q)?;
    let name = b.cstr()?;
    check_xattr_name(name)?;
    b.end()?;
    q.fs.removexattr(q.ctx(), q.h.nodeid, name)?;
    q.reply_empty(w)
}

/// The typed form of a SETATTR body: `valid` decides which fields count; a
/// `*_NOW` bit wins over the time it goes with.
fn set_attr(a: &SetattrIn) -> SetAttr {
    let has = |bit: u32| a.valid & bit != 0;
    let time = |set: u32, now: u32, sec: u64, nsec: u32| {
        if has(now) {
            Some(SetTime::Now)
        } else if has(set) {
            Some(SetTime::At { sec, nsec })
        } else {
            None
        }
    };
    SetAttr {
        fh: has(fattr::FH).then_some(a.fh),
        mode: has(fattr::MODE).then_some(a.mode),
        uid: has(fattr::UID).then_some(a.uid),
        gid: has(fattr::GID).then_some(a.gid),
        size: has(fattr::SIZE).then_some(a.size),
        atime: time(fattr::ATIME, fattr::ATIME_NOW, a.atime, a.atimensec),
        mtime: time(fattr::MTIME, fattr::MTIME_NOW, a.mtime, a.mtimensec),
    }
}
