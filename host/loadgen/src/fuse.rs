// SPDX-License-Identifier: Apache-2.0
//! The FUSE requests the load generator sends and the replies it reads, built
//! on the daemon's own wire format (`xvfs_fs::abi`), so that both sides share
//! one definition of every structure.

use xvfs_fs::abi::{self, Wire};

pub use xvfs_fs::abi::{OutHeader, ROOT_ID};

/// Opcodes used here.
pub mod op {
    pub use xvfs_fs::abi::opcode::{
        CREATE, FORGET, GETATTR, INIT, LOOKUP, OPEN, OPENDIR, READ, READDIRPLUS, RELEASE,
        RELEASEDIR, UNLINK, WRITE,
    };
}

/// Size of `fuse_in_header`.
#[cfg(test)]
pub const IN_HEADER: usize = abi::InHeader::SIZE;
/// Size of `fuse_out_header`.
pub const OUT_HEADER: usize = abi::OutHeader::SIZE;
/// Size of `fuse_entry_out`.
pub const ENTRY_OUT: usize = abi::EntryOut::SIZE;

/// Protocol minor version we announce.
pub const MINOR: u32 = 38;

/// INIT flags a Linux 6.x guest typically offers that matter here.
const OFFERED: u64 = abi::init_flags::ASYNC_READ
    | abi::init_flags::ATOMIC_O_TRUNC
    | abi::init_flags::BIG_WRITES
    | abi::init_flags::DO_READDIRPLUS
    | abi::init_flags::READDIRPLUS_AUTO
    | abi::init_flags::PARALLEL_DIROPS
    | abi::init_flags::MAX_PAGES;

/// Encodes a request: in-header, then `args`, then `name` (NUL-terminated)
/// if any; `extra` payload bytes sent in a separate buffer (WRITE data) are
/// counted in the header's length.
fn request(
    opcode: u32,
    unique: u64,
    nodeid: u64,
    args: &[u8],
    name: Option<&str>,
    extra: u32,
) -> Vec<u8> {
    let name_len = name.map_or(0, |n| n.len() + 1);
    let len = abi::InHeader::SIZE + args.len() + name_len;
    let mut buf = Vec::with_capacity(len);
    abi::InHeader {
        len: len as u32 + extra,
        opcode,
        unique,
        nodeid,
        // The host side runs as root.
        uid: 0,
        gid: 0,
        pid: 1,
        total_extlen: 0,
        padding: 0,
    }
    .encode_into(&mut buf);
    buf.extend_from_slice(args);
    if let Some(n) = name {
        buf.extend_from_slice(n.as_bytes());
        buf.push(0);
    }
    buf
}

/// `fuse_init_in` (7.36+ layout: 64 bytes).
pub fn init(unique: u64) -> Vec<u8> {
    let i = abi::InitIn {
        major: abi::KERNEL_VERSION,
        minor: MINOR,
        max_readahead: 128 * 1024,
        flags: OFFERED as u32,
        ..Default::default()
    };
    request(op::INIT, unique, 0, &i.to_bytes(), None, 0)
}

/// `fuse_read_in` for READ and READDIRPLUS.
pub fn read(opcode: u32, unique: u64, nodeid: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
    let r = abi::ReadIn {
        fh,
        offset,
        size,
        flags: libc::O_RDONLY as u32,
        ..Default::default()
    };
    request(opcode, unique, nodeid, &r.to_bytes(), None, 0)
}

/// `fuse_write_in`; the data follows in its own buffer of `size` bytes.
pub fn write(unique: u64, nodeid: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
    let w = abi::WriteIn {
        fh,
        offset,
        size,
        flags: libc::O_RDWR as u32,
        ..Default::default()
    };
    request(op::WRITE, unique, nodeid, &w.to_bytes(), None, size)
}

/// OPEN or OPENDIR with `flags`.
pub fn open(opcode: u32, unique: u64, nodeid: u64, flags: i32) -> Vec<u8> {
    let o = abi::OpenIn {
        flags: flags as u32,
        open_flags: 0,
    };
    request(opcode, unique, nodeid, &o.to_bytes(), None, 0)
}

/// RELEASE or RELEASEDIR.
pub fn release(opcode: u32, unique: u64, nodeid: u64, fh: u64, flags: i32) -> Vec<u8> {
    let r = abi::ReleaseIn {
        fh,
        flags: flags as u32,
        ..Default::default()
    };
    request(opcode, unique, nodeid, &r.to_bytes(), None, 0)
}

/// GETATTR without a handle.
pub fn getattr(unique: u64, nodeid: u64) -> Vec<u8> {
    let g = abi::GetattrIn::default();
    request(op::GETATTR, unique, nodeid, &g.to_bytes(), None, 0)
}

/// LOOKUP, UNLINK and other name-only requests.
pub fn named(opcode: u32, unique: u64, parent: u64, name: &str) -> Vec<u8> {
    request(opcode, unique, parent, &[], Some(name), 0)
}

/// CREATE of a regular file `name` in `parent`.
pub fn create(unique: u64, parent: u64, name: &str, flags: i32) -> Vec<u8> {
    let c = abi::CreateIn {
        flags: flags as u32,
        mode: libc::S_IFREG | 0o644,
        umask: 0o022,
        open_flags: 0,
    };
    request(op::CREATE, unique, parent, &c.to_bytes(), Some(name), 0)
}

/// FORGET `nlookup` references of `nodeid`.
pub fn forget(unique: u64, nodeid: u64, nlookup: u64) -> Vec<u8> {
    let f = abi::ForgetIn { nlookup };
    request(op::FORGET, unique, nodeid, &f.to_bytes(), None, 0)
}

/// Parses an out-header.
pub fn out_header(b: &[u8]) -> Option<OutHeader> {
    OutHeader::from_bytes(b)
}

/// The node id of a `fuse_entry_out`.
pub fn entry_nodeid(body: &[u8]) -> Option<u64> {
    abi::EntryOut::from_bytes(body).map(|e| e.nodeid)
}

/// The fh of a `fuse_open_out`.
pub fn open_fh(body: &[u8]) -> Option<u64> {
    abi::OpenOut::from_bytes(body).map(|o| o.fh)
}

/// From an INIT reply: (minor, max_write).
pub fn init_reply(body: &[u8]) -> Option<(u32, u32)> {
    abi::InitOut::from_bytes(body).map(|i| (i.minor, i.max_write))
}

/// Walks a READDIRPLUS reply: (entries, offset of the last entry, node ids
/// of entries that took a lookup reference).
pub fn direntplus(body: &[u8]) -> Option<(usize, u64, Vec<u64>)> {
    let mut pos = 0;
    let mut n = 0;
    let mut last_off = 0;
    let mut ids = Vec::new();
    while pos < body.len() {
        let rest = body.get(pos..)?;
        let entry = abi::EntryOut::from_bytes(rest)?;
        let d = abi::Dirent::from_bytes(rest.get(ENTRY_OUT..)?)?;
        let namelen = d.namelen as usize;
        let rec = abi::dirent_align(ENTRY_OUT + abi::Dirent::SIZE + namelen);
        if namelen == 0 || pos + rec > body.len() {
            return None;
        }
        if entry.nodeid != 0 {
            ids.push(entry.nodeid);
        }
        n += 1;
        last_off = d.off;
        pos += rec;
    }
    Some((n, last_off, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], off: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
    }

    fn u64_at(b: &[u8], off: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
    }

    #[test]
    fn header_and_length() {
        let r = named(op::LOOKUP, 9, 1, "abc");
        assert_eq!(r.len(), IN_HEADER + 4);
        assert_eq!(u32_at(&r, 0), Some(44));
        assert_eq!(u32_at(&r, 4), Some(op::LOOKUP));
        assert_eq!(u64_at(&r, 8), Some(9));
        assert_eq!(u64_at(&r, 16), Some(1));
        assert_eq!(&r[40..], b"abc\0");
        let w = write(1, 2, 3, 4096, 1 << 20);
        assert_eq!(w.len(), IN_HEADER + 40);
        assert_eq!(u32_at(&w, 0), Some(40 + 40 + (1 << 20)));
        assert_eq!(init(1).len(), IN_HEADER + 64);
        assert_eq!(read(op::READ, 1, 2, 3, 4, 5).len(), IN_HEADER + 40);
        assert_eq!(create(1, 1, "x", 0).len(), IN_HEADER + 16 + 2);
    }

    fn dirent(nodeid: u64, off: u64, name: &str) -> Vec<u8> {
        let mut v = vec![0u8; ENTRY_OUT];
        v[0..8].copy_from_slice(&nodeid.to_le_bytes());
        v.extend_from_slice(&nodeid.to_le_bytes()); // ino
        v.extend_from_slice(&off.to_le_bytes());
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(&8u32.to_le_bytes()); // type
        v.extend_from_slice(name.as_bytes());
        v.resize(v.len().next_multiple_of(8), 0);
        v
    }

    #[test]
    fn walks_direntplus() {
        let mut b = dirent(0, 1, ".");
        b.extend(dirent(7, 2, "f00001"));
        b.extend(dirent(8, 3, "abcdefgh"));
        assert_eq!(direntplus(&b), Some((3, 3, vec![7, 8])));
        assert_eq!(direntplus(&[]), Some((0, 0, vec![])));
        // Truncated record.
        assert_eq!(direntplus(&b[..b.len() - 8]), None);
    }

    #[test]
    fn parses_out_header() {
        let mut b = vec![];
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&(-2i32).to_le_bytes());
        b.extend_from_slice(&77u64.to_le_bytes());
        assert_eq!(
            out_header(&b),
            Some(OutHeader {
                len: 16,
                error: -2,
                unique: 77
            })
        );
        assert_eq!(out_header(&b[..15]), None);
    }
}
