// SPDX-License-Identifier: Apache-2.0
//! Test harness: a [`Server`] over a fresh temporary directory, driven with
//! byte-level requests through `SliceReader`/`VecWriter`.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::io::{SliceReader, VecWriter};
pub use xvfs_fs::testing::{cname, config_for};
use xvfs_fs::{Config, PassthroughFs, PassthroughServer as Server};

/// A unique temporary directory, removed on drop.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(tag: &str) -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "xvfs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir { path }
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A parsed reply.
#[derive(Debug)]
pub struct Reply {
    pub error: i32,
    pub unique: u64,
    pub body: Vec<u8>,
    /// Bytes `handle` said it wrote.
    pub written: usize,
}

impl Reply {
    #[track_caller]
    pub fn ok(&self) -> &[u8] {
        assert_eq!(self.error, 0, "unexpected error {}", -self.error);
        &self.body
    }

    #[track_caller]
    pub fn parse<T: Wire>(&self) -> T {
        T::from_bytes(self.ok()).expect("reply too short")
    }

    #[track_caller]
    pub fn err(&self) -> i32 {
        assert_ne!(self.error, 0, "expected an error");
        -self.error
    }
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub struct Harness {
    pub dir: TestDir,
    pub srv: Server,
    unique: Cell<u64>,
    pub uid: Cell<u32>,
    pub gid: Cell<u32>,
}

/// Standard reply room, like a guest's (1 MiB + a page).
pub const ROOM: usize = (1 << 20) + 4096;

impl Harness {
    pub fn new() -> Harness {
        Self::with(|_| {})
    }

    pub fn with(f: impl FnOnce(&mut Config)) -> Harness {
        let h = Self::uninit(f);
        let r = h.init(7, 41, u32::MAX, u32::MAX);
        r.ok();
        h
    }

    pub fn uninit(f: impl FnOnce(&mut Config)) -> Harness {
        let dir = TestDir::new("t");
        let mut cfg = config_for(&dir.path);
        f(&mut cfg);
        let srv = Server::new(PassthroughFs::new(cfg).unwrap());
        Harness {
            dir,
            srv,
            unique: Cell::new(1),
            uid: Cell::new(0),
            gid: Cell::new(0),
        }
    }

    /// A harness over a file system built by the caller on `dir`.
    pub fn from_fs(dir: TestDir, fs: PassthroughFs) -> Harness {
        Harness {
            dir,
            srv: Server::new(fs),
            unique: Cell::new(1),
            uid: Cell::new(0),
            gid: Cell::new(0),
        }
    }

    pub fn fs(&self) -> &PassthroughFs {
        self.srv.fs()
    }

    pub fn init(&self, major: u32, minor: u32, flags: u32, flags2: u32) -> Reply {
        let i = abi::InitIn {
            major,
            ..xvfs_fs::testing::init_in(minor, flags, flags2)
        };
        self.req(opcode::INIT, 0, &i.to_bytes())
    }

    /// Raw bytes in, reply bytes out (with the room given); checks the
    /// out-header length invariant.
    #[track_caller]
    pub fn raw(&self, req: &[u8], room: usize) -> (usize, Vec<u8>) {
        let mut r = SliceReader::new(req);
        let mut w = VecWriter::new(room);
        let n = self.srv.handle(&mut r, &mut w);
        let out = w.into_inner();
        assert_eq!(n, out.len(), "returned length != bytes written");
        if n > 0 {
            let h = abi::OutHeader::from_bytes(&out).expect("short reply");
            assert_eq!(h.len as usize, n, "out header len != bytes written");
            assert!(h.error <= 0 && h.error > -4096);
        }
        (n, out)
    }

    pub fn header(&self, op: u32, node: u64, body_len: usize) -> abi::InHeader {
        let u = self.unique.get();
        self.unique.set(u + 1);
        abi::InHeader {
            len: (abi::InHeader::SIZE + body_len) as u32,
            opcode: op,
            unique: u,
            nodeid: node,
            uid: self.uid.get(),
            gid: self.gid.get(),
            pid: 42,
            total_extlen: 0,
            padding: 0,
        }
    }

    #[track_caller]
    pub fn req_room(&self, op: u32, node: u64, body: &[u8], room: usize) -> Option<Reply> {
        let h = self.header(op, node, body.len());
        let req = cat(&[&h.to_bytes(), body]);
        let (n, out) = self.raw(&req, room);
        if n == 0 {
            return None;
        }
        let oh = abi::OutHeader::from_bytes(&out).unwrap();
        assert_eq!(oh.unique, h.unique);
        Some(Reply {
            error: oh.error,
            unique: oh.unique,
            body: out[abi::OutHeader::SIZE..].to_vec(),
            written: n,
        })
    }

    #[track_caller]
    pub fn req(&self, op: u32, node: u64, body: &[u8]) -> Reply {
        self.req_room(op, node, body, ROOM).expect("no reply")
    }

    // ----- typed helpers -----

    #[track_caller]
    pub fn lookup(&self, parent: u64, name: &str) -> Reply {
        self.req(opcode::LOOKUP, parent, &cname(name))
    }

    #[track_caller]
    pub fn lookup_ok(&self, parent: u64, name: &str) -> abi::EntryOut {
        self.lookup(parent, name).parse()
    }

    #[track_caller]
    pub fn getattr(&self, node: u64) -> Reply {
        self.req(opcode::GETATTR, node, &abi::GetattrIn::default().to_bytes())
    }

    #[track_caller]
    pub fn mkdir(&self, parent: u64, name: &str, mode: u32) -> Reply {
        let m = abi::MkdirIn { mode, umask: 0o022 };
        self.req(opcode::MKDIR, parent, &cat(&[&m.to_bytes(), &cname(name)]))
    }

    #[track_caller]
    pub fn create(&self, parent: u64, name: &str, mode: u32, flags: i32) -> Reply {
        let c = abi::CreateIn {
            flags: flags as u32,
            mode,
            umask: 0o022,
            open_flags: 0,
        };
        self.req(opcode::CREATE, parent, &cat(&[&c.to_bytes(), &cname(name)]))
    }

    /// CREATE that must succeed: (entry, fh).
    #[track_caller]
    pub fn create_ok(&self, parent: u64, name: &str) -> (abi::EntryOut, u64) {
        let r = self.create(parent, name, 0o644, libc::O_RDWR | libc::O_CREAT);
        let b = r.ok();
        let e = abi::EntryOut::from_bytes(b).unwrap();
        let o = abi::OpenOut::from_bytes(&b[abi::EntryOut::SIZE..]).unwrap();
        (e, o.fh)
    }

    #[track_caller]
    pub fn open(&self, node: u64, flags: i32) -> Reply {
        let o = abi::OpenIn {
            flags: flags as u32,
            open_flags: 0,
        };
        self.req(opcode::OPEN, node, &o.to_bytes())
    }

    #[track_caller]
    pub fn opendir(&self, node: u64) -> u64 {
        let o = abi::OpenIn {
            flags: libc::O_RDONLY as u32,
            open_flags: 0,
        };
        self.req(opcode::OPENDIR, node, &o.to_bytes())
            .parse::<abi::OpenOut>()
            .fh
    }

    #[track_caller]
    pub fn write(&self, node: u64, fh: u64, offset: u64, data: &[u8]) -> Reply {
        let wi = abi::WriteIn {
            fh,
            offset,
            size: data.len() as u32,
            ..Default::default()
        };
        self.req(opcode::WRITE, node, &cat(&[&wi.to_bytes(), data]))
    }

    #[track_caller]
    pub fn read_room(&self, node: u64, fh: u64, offset: u64, size: u32, room: usize) -> Reply {
        let ri = abi::ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        self.req_room(opcode::READ, node, &ri.to_bytes(), room)
            .expect("no reply")
    }

    #[track_caller]
    pub fn read(&self, node: u64, fh: u64, offset: u64, size: u32) -> Reply {
        self.read_room(node, fh, offset, size, ROOM)
    }

    #[track_caller]
    pub fn release(&self, node: u64, fh: u64) -> Reply {
        let r = abi::ReleaseIn {
            fh,
            ..Default::default()
        };
        self.req(opcode::RELEASE, node, &r.to_bytes())
    }

    #[track_caller]
    pub fn forget(&self, node: u64, n: u64) {
        let h = self.header(opcode::FORGET, node, 8);
        let req = cat(&[&h.to_bytes(), &abi::ForgetIn { nlookup: n }.to_bytes()]);
        let (written, _) = self.raw(&req, 0); // no writable descriptor, as on hiprio
        assert_eq!(written, 0, "FORGET must not be answered");
    }

    /// READDIR(PLUS) once: (name, ino, off, type, entry-if-plus).
    #[track_caller]
    pub fn readdir(
        &self,
        node: u64,
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    ) -> Vec<(String, u64, u64, u32, Option<abi::EntryOut>)> {
        let ri = abi::ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let op = if plus {
            opcode::READDIRPLUS
        } else {
            opcode::READDIR
        };
        let r = self.req(op, node, &ri.to_bytes());
        parse_dirents(r.ok(), plus)
    }

    /// All entries of a directory, reading in chunks of `size`.
    #[track_caller]
    pub fn list_dir(&self, node: u64, size: u32, plus: bool) -> Vec<String> {
        let fh = self.opendir(node);
        let mut names = Vec::new();
        let mut off = 0;
        loop {
            let ents = self.readdir(node, fh, off, size, plus);
            if ents.is_empty() {
                break;
            }
            for (name, _, o, _, _) in ents {
                names.push(name);
                off = o;
            }
        }
        let r = abi::ReleaseIn {
            fh,
            ..Default::default()
        };
        self.req(opcode::RELEASEDIR, node, &r.to_bytes()).ok();
        names.sort();
        names
    }
}

pub fn parse_dirents(
    mut b: &[u8],
    plus: bool,
) -> Vec<(String, u64, u64, u32, Option<abi::EntryOut>)> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let mut base = 0;
        let entry = if plus {
            base = abi::EntryOut::SIZE;
            Some(abi::EntryOut::from_bytes(b).unwrap())
        } else {
            None
        };
        let d = abi::Dirent::from_bytes(&b[base..]).unwrap();
        let start = base + abi::Dirent::SIZE;
        let name = String::from_utf8(b[start..start + d.namelen as usize].to_vec()).unwrap();
        let len = abi::dirent_align(start + d.namelen as usize);
        v.push((name, d.ino, d.off, d.typ, entry));
        b = &b[len..];
    }
    v
}

/// An unlinked file to hold the journal (a memfd in the daemon).
pub fn journal_file(dir: &TestDir) -> std::os::fd::OwnedFd {
    let path = dir.join(".journal");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::fd::OwnedFd::from(f)
}
