// SPDX-License-Identifier: Apache-2.0
//! FUSE_SECURITY_CTX (`--security-label`): the security context the guest's
//! security module gives a file it creates travels as a request extension of
//! MKNOD, MKDIR, SYMLINK, CREATE and TMPFILE; it is set on the new file
//! before the reply, and a file that cannot be labelled is not kept.
//!
//! Extensions (`total_extlen` × 8 bytes after the body) are records of an
//! 8-byte header, `size` (of the whole record, a multiple of 8) and `type`:
//! a type below 32 is the security-context record with that many contexts
//! (0 or 1), each `fuse_secctx` (`size`, padding), a NUL-terminated
//! attribute name and `size` bytes of value. 32 is the supplementary
//! groups record (not negotiated here: skipped). Anything else is refused.

use std::ffi::CStr;

use super::io::ReplyWriter;
use super::wire::{Error, OpResult, Req};
use crate::abi::init_flags;
use crate::filesystem::{Entry, FileSystem};

/// One context: the attribute (a `security.` name) and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SecCtx<'a> {
    pub attr: &'a CStr,
    pub value: &'a [u8],
}

const GROUPS_EXT: u32 = 32;

fn u32_at(b: &[u8], at: usize) -> Result<u32, Error> {
    let f = b.get(at..at + 4).ok_or(Error::Errno(libc::EINVAL))?;
    Ok(u32::from_le_bytes([f[0], f[1], f[2], f[3]]))
}

/// The security context among `ext` (none when the guest's security module
/// gave none). Every byte is checked: a malformed record is EINVAL, a name
/// outside `security.` or `security.capability` (which would give the new
/// file capabilities) is EPERM.
pub(crate) fn parse(ext: &[u8]) -> Result<Option<SecCtx<'_>>, Error> {
    let bad = || Error::Errno(libc::EINVAL);
    let mut rest = ext;
    let mut found = None;
    while !rest.is_empty() {
        let size = u32_at(rest, 0)? as usize;
        let kind = u32_at(rest, 4)?;
        if size < 8 || !size.is_multiple_of(8) || size > rest.len() {
            return Err(bad());
        }
        let (record, next) = rest.split_at(size);
        rest = next;
        match kind {
            GROUPS_EXT => continue,
            0 => {}
            1 if found.is_none() => {
                let body = &record[8..];
                let len = u32_at(body, 0)? as usize;
                let tail = body.get(8..).ok_or_else(bad)?;
                let attr = CStr::from_bytes_until_nul(tail).map_err(|_| bad())?;
                let start = attr.to_bytes_with_nul().len();
                let value = tail.get(start..start + len).ok_or_else(bad)?;
                let name = attr.to_bytes();
                if !name.starts_with(b"security.") || name == b"security.capability" {
                    return Err(Error::Errno(libc::EPERM));
                }
                found = Some(SecCtx { attr, value });
            }
            _ => return Err(bad()),
        }
    }
    Ok(found)
}

impl<F: FileSystem> Req<'_, F> {
    /// The security context sent with this request, if FUSE_SECURITY_CTX was
    /// negotiated.
    pub fn secctx(&self) -> Result<Option<SecCtx<'_>>, Error> {
        if !self.session.has(init_flags::SECURITY_CTX) {
            return Ok(None);
        }
        parse(self.ext)
    }

    /// Labels the entry a create just made with `sec`; if that fails, the
    /// creation is undone (`undo`: removes the name, releases a handle) and
    /// the error is the reply.
    pub fn label(
        &self,
        sec: Option<SecCtx<'_>>,
        e: &Entry,
        undo: impl FnOnce(&F),
    ) -> Result<(), Error> {
        let Some(s) = sec else {
            return Ok(());
        };
        if let Err(err) = self
            .fs
            .set_security_context(self.ctx(), e.inode, s.attr, s.value)
        {
            self.fs.forget(e.inode, 1);
            undo(self.fs);
            return Err(err.into());
        }
        Ok(())
    }

    /// [`Req::label`], then the entry reply.
    pub fn reply_labelled(
        &self,
        w: &mut dyn ReplyWriter,
        sec: Option<SecCtx<'_>>,
        e: &Entry,
        undo: impl FnOnce(&F),
    ) -> OpResult {
        self.label(sec, e, undo)?;
        self.reply_entry(w, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()).next_multiple_of(8);
        let mut v = (size as u32).to_le_bytes().to_vec();
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(body);
        v.resize(size, 0);
        v
    }

    fn ctx(name: &str, value: &[u8]) -> Vec<u8> {
        let mut b = (value.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(value);
        record(1, &b)
    }

    #[test]
    fn contexts_parse_and_bad_ones_are_refused() {
        let v = ctx("security.selinux", b"system_u:object_r:tmp_t:s0\0");
        let s = parse(&v).unwrap().unwrap();
        assert_eq!(s.attr.to_bytes(), b"security.selinux");
        assert_eq!(s.value, b"system_u:object_r:tmp_t:s0\0");
        assert_eq!(parse(&record(0, &[])).unwrap(), None, "no context");
        assert_eq!(parse(&[]).unwrap(), None);
        let groups = [record(GROUPS_EXT, &[1, 0, 0, 0, 5, 0, 0, 0]), v.clone()].concat();
        assert!(
            parse(&groups).unwrap().is_some(),
            "the groups record is skipped"
        );
        let errno = |b: &[u8]| match parse(b) {
            Err(Error::Errno(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(errno(&ctx("user.x", b"v")), libc::EPERM);
        assert_eq!(errno(&ctx("security.capability", b"v")), libc::EPERM);
        assert_eq!(errno(&record(2, &[0; 16])), libc::EINVAL, "two contexts");
        assert_eq!(errno(&record(7, &[])), libc::EINVAL, "unknown type");
        assert_eq!(
            errno(&[v.clone(), v.clone()].concat()),
            libc::EINVAL,
            "twice"
        );
        let mut short = v.clone();
        short[0] = 200;
        assert_eq!(errno(&short), libc::EINVAL, "size past the end");
        let mut long = v.clone();
        long[8] = 255;
        assert_eq!(errno(&long), libc::EINVAL, "value past the record");
        assert_eq!(errno(&v[..5]), libc::EINVAL, "truncated header");
    }
}
