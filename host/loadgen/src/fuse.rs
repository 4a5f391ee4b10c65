//! The few FUSE messages the load generator sends, encoded by hand
//! (include/uapi/linux/fuse.h, protocol 7.38).

/// Opcodes used here.
pub mod op {
    /// LOOKUP: name in a directory -> entry.
    pub const LOOKUP: u32 = 1;
    /// FORGET: drop lookup references (no reply).
    pub const FORGET: u32 = 2;
    /// GETATTR.
    pub const GETATTR: u32 = 3;
    /// UNLINK.
    pub const UNLINK: u32 = 10;
    /// OPEN.
    pub const OPEN: u32 = 14;
    /// READ.
    pub const READ: u32 = 15;
    /// WRITE.
    pub const WRITE: u32 = 16;
    /// RELEASE.
    pub const RELEASE: u32 = 18;
    /// INIT.
    pub const INIT: u32 = 26;
    /// OPENDIR.
    pub const OPENDIR: u32 = 27;
    /// RELEASEDIR.
    pub const RELEASEDIR: u32 = 29;
    /// CREATE.
    pub const CREATE: u32 = 35;
    /// READDIRPLUS.
    pub const READDIRPLUS: u32 = 44;
}

/// Size of `fuse_in_header`.
#[cfg(test)]
pub const IN_HEADER: usize = 40;
/// Size of `fuse_out_header`.
pub const OUT_HEADER: usize = 16;
/// Size of `fuse_entry_out`.
pub const ENTRY_OUT: usize = 128;
/// The root node id.
pub const ROOT_ID: u64 = 1;

/// Protocol minor version we announce.
pub const MINOR: u32 = 38;

/// INIT flags a Linux 6.x guest typically offers that matter here.
pub mod init_flags {
    /// FUSE_ASYNC_READ.
    pub const ASYNC_READ: u32 = 1 << 0;
    /// FUSE_ATOMIC_O_TRUNC.
    pub const ATOMIC_O_TRUNC: u32 = 1 << 3;
    /// FUSE_BIG_WRITES.
    pub const BIG_WRITES: u32 = 1 << 5;
    /// FUSE_DO_READDIRPLUS.
    pub const DO_READDIRPLUS: u32 = 1 << 13;
    /// FUSE_READDIRPLUS_AUTO.
    pub const READDIRPLUS_AUTO: u32 = 1 << 14;
    /// FUSE_PARALLEL_DIROPS.
    pub const PARALLEL_DIROPS: u32 = 1 << 18;
    /// FUSE_MAX_PAGES.
    pub const MAX_PAGES: u32 = 1 << 22;
    /// The set we send.
    pub const OFFERED: u32 = ASYNC_READ
        | ATOMIC_O_TRUNC
        | BIG_WRITES
        | DO_READDIRPLUS
        | READDIRPLUS_AUTO
        | PARALLEL_DIROPS
        | MAX_PAGES;
}

/// A request being encoded: in-header plus arguments.
pub struct Req {
    buf: Vec<u8>,
}

impl Req {
    /// Starts a request (length filled in by `finish`).
    pub fn new(opcode: u32, unique: u64, nodeid: u64) -> Req {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&0u32.to_le_bytes()); // len
        buf.extend_from_slice(&opcode.to_le_bytes());
        buf.extend_from_slice(&unique.to_le_bytes());
        buf.extend_from_slice(&nodeid.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes()); // uid: root, as the host side runs
        buf.extend_from_slice(&0u32.to_le_bytes()); // gid
        buf.extend_from_slice(&1u32.to_le_bytes()); // pid
        buf.extend_from_slice(&0u16.to_le_bytes()); // total_extlen
        buf.extend_from_slice(&0u16.to_le_bytes()); // padding
        Req { buf }
    }

    /// Appends a u32.
    pub fn u32(mut self, v: u32) -> Req {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a u64.
    pub fn u64(mut self, v: u64) -> Req {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends zero bytes.
    pub fn zeros(mut self, n: usize) -> Req {
        self.buf.resize(self.buf.len() + n, 0);
        self
    }

    /// Appends a NUL-terminated name.
    pub fn name(mut self, name: &str) -> Req {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self
    }

    /// The encoded bytes, with `extra` payload bytes (WRITE data sent in a
    /// separate buffer) counted in the header's length.
    pub fn finish(mut self, extra: u32) -> Vec<u8> {
        let len = self.buf.len() as u32 + extra;
        self.buf[0..4].copy_from_slice(&len.to_le_bytes());
        self.buf
    }
}

/// `fuse_init_in` (7.36+ layout: 64 bytes).
pub fn init(unique: u64) -> Vec<u8> {
    Req::new(op::INIT, unique, 0)
        .u32(7)
        .u32(MINOR)
        .u32(128 * 1024) // max_readahead
        .u32(init_flags::OFFERED)
        .zeros(48) // flags2, unused[11]
        .finish(0)
}

/// `fuse_read_in` for READ and READDIRPLUS.
pub fn read(opcode: u32, unique: u64, nodeid: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
    Req::new(opcode, unique, nodeid)
        .u64(fh)
        .u64(offset)
        .u32(size)
        .u32(0) // read_flags
        .u64(0) // lock_owner
        .u32(libc::O_RDONLY as u32) // flags
        .u32(0)
        .finish(0)
}

/// `fuse_write_in`; the data follows in its own buffer of `size` bytes.
pub fn write(unique: u64, nodeid: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
    Req::new(op::WRITE, unique, nodeid)
        .u64(fh)
        .u64(offset)
        .u32(size)
        .u32(0) // write_flags
        .u64(0) // lock_owner
        .u32(libc::O_RDWR as u32)
        .u32(0)
        .finish(size)
}

/// OPEN or OPENDIR with `flags`.
pub fn open(opcode: u32, unique: u64, nodeid: u64, flags: i32) -> Vec<u8> {
    Req::new(opcode, unique, nodeid)
        .u32(flags as u32)
        .u32(0)
        .finish(0)
}

/// RELEASE or RELEASEDIR.
pub fn release(opcode: u32, unique: u64, nodeid: u64, fh: u64, flags: i32) -> Vec<u8> {
    Req::new(opcode, unique, nodeid)
        .u64(fh)
        .u32(flags as u32)
        .u32(0)
        .u64(0)
        .finish(0)
}

/// GETATTR without a handle.
pub fn getattr(unique: u64, nodeid: u64) -> Vec<u8> {
    Req::new(op::GETATTR, unique, nodeid)
        .u32(0)
        .u32(0)
        .u64(0)
        .finish(0)
}

/// LOOKUP, UNLINK and other name-only requests.
pub fn named(opcode: u32, unique: u64, parent: u64, name: &str) -> Vec<u8> {
    Req::new(opcode, unique, parent).name(name).finish(0)
}

/// CREATE of a regular file `name` in `parent`.
pub fn create(unique: u64, parent: u64, name: &str, flags: i32) -> Vec<u8> {
    Req::new(op::CREATE, unique, parent)
        .u32(flags as u32)
        .u32(libc::S_IFREG | 0o644)
        .u32(0o022) // umask
        .u32(0) // open_flags
        .name(name)
        .finish(0)
}

/// FORGET `nlookup` references of `nodeid`.
pub fn forget(unique: u64, nodeid: u64, nlookup: u64) -> Vec<u8> {
    Req::new(op::FORGET, unique, nodeid).u64(nlookup).finish(0)
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// A parsed `fuse_out_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutHeader {
    /// Total reply length, header included.
    pub len: u32,
    /// 0 or a negative errno.
    pub error: i32,
    /// The request's unique.
    pub unique: u64,
}

/// Parses an out-header.
pub fn out_header(b: &[u8]) -> Option<OutHeader> {
    Some(OutHeader {
        len: u32_at(b, 0)?,
        error: u32_at(b, 4)? as i32,
        unique: u64_at(b, 8)?,
    })
}

/// The node id of a `fuse_entry_out`.
pub fn entry_nodeid(body: &[u8]) -> Option<u64> {
    u64_at(body, 0)
}

/// The fh of a `fuse_open_out`.
pub fn open_fh(body: &[u8]) -> Option<u64> {
    u64_at(body, 0)
}

/// From an INIT reply: (minor, max_write).
pub fn init_reply(body: &[u8]) -> Option<(u32, u32)> {
    Some((u32_at(body, 4)?, u32_at(body, 20)?))
}

/// Walks a READDIRPLUS reply: (entries, offset of the last entry, node ids
/// of entries that took a lookup reference).
pub fn direntplus(body: &[u8]) -> Option<(usize, u64, Vec<u64>)> {
    let mut pos = 0;
    let mut n = 0;
    let mut last_off = 0;
    let mut ids = Vec::new();
    while pos < body.len() {
        let nodeid = u64_at(body, pos)?;
        let d = pos + ENTRY_OUT;
        let off = u64_at(body, d + 8)?;
        let namelen = u32_at(body, d + 16)? as usize;
        let rec = (ENTRY_OUT + 24 + namelen).next_multiple_of(8);
        if namelen == 0 || pos + rec > body.len() {
            return None;
        }
        if nodeid != 0 {
            ids.push(nodeid);
        }
        n += 1;
        last_off = off;
        pos += rec;
    }
    Some((n, last_off, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

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
