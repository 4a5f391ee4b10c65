// SPDX-License-Identifier: Apache-2.0
//! The in-memory file system served through the same `Server`: a scripted
//! session proves the `FileSystem` seam, and `restore_session` refuses what
//! this server cannot speak.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::cell::Cell;

use common::{cat, cname, parse_dirents};
use xvfs_fs::abi::{self, init_flags, opcode, Wire};
use xvfs_fs::io::{SliceReader, VecWriter};
use xvfs_fs::memfs::MemFs;
use xvfs_fs::{Server, SessionError, SessionState};

const ROOT: u64 = abi::ROOT_ID;

struct Mem {
    srv: Server<MemFs>,
    unique: Cell<u64>,
}

/// (errno, reply body); `None` when no reply was written.
type Out = Option<(i32, Vec<u8>)>;

impl Mem {
    fn new() -> Mem {
        Mem {
            srv: Server::new(MemFs::new()),
            unique: Cell::new(1),
        }
    }

    fn send(&self, op: u32, node: u64, body: &[u8]) -> Out {
        let u = self.unique.get();
        self.unique.set(u + 1);
        let h = abi::InHeader {
            len: (abi::InHeader::SIZE + body.len()) as u32,
            opcode: op,
            unique: u,
            nodeid: node,
            pid: 7,
            ..Default::default()
        };
        let req = cat(&[&h.to_bytes(), body]);
        let mut r = SliceReader::new(&req);
        let mut w = VecWriter::new(1 << 21);
        let n = self.srv.handle(&mut r, &mut w);
        let out = w.into_inner();
        assert_eq!(n, out.len());
        if n == 0 {
            return None;
        }
        let oh = abi::OutHeader::from_bytes(&out).unwrap();
        assert_eq!((oh.len as usize, oh.unique), (n, u));
        Some((-oh.error, out[abi::OutHeader::SIZE..].to_vec()))
    }

    #[track_caller]
    fn ok(&self, op: u32, node: u64, body: &[u8]) -> Vec<u8> {
        let (e, b) = self.send(op, node, body).expect("no reply");
        assert_eq!(e, 0, "opcode {op}: errno {e}");
        b
    }

    #[track_caller]
    fn errno(&self, op: u32, node: u64, body: &[u8]) -> i32 {
        self.send(op, node, body).expect("no reply").0
    }

    fn init(&self) -> abi::InitOut {
        let i = xvfs_fs::testing::init_in(41, u32::MAX, u32::MAX);
        abi::InitOut::from_bytes(&self.ok(opcode::INIT, 0, &i.to_bytes())).unwrap()
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<abi::EntryOut, i32> {
        match self.send(opcode::LOOKUP, parent, &cname(name)).unwrap() {
            (0, b) => Ok(abi::EntryOut::from_bytes(&b).unwrap()),
            (e, _) => Err(e),
        }
    }

    fn read(&self, node: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
        let ri = abi::ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        self.ok(opcode::READ, node, &ri.to_bytes())
    }
}

#[test]
fn scripted_session() {
    let m = Mem::new();
    let fs = m.srv.fs();

    // INIT: the file system's capabilities, masked by what the guest offers.
    let init = m.init();
    assert_eq!((init.major, init.minor), (7, 41));
    assert_eq!(init.max_write, 1 << 20);
    assert_eq!(init.max_pages, 256);
    let flags = u64::from(init.flags) | u64::from(init.flags2) << 32;
    assert_ne!(flags & init_flags::DO_READDIRPLUS, 0);
    assert_eq!(flags & init_flags::WRITEBACK_CACHE, 0);
    assert_eq!(m.srv.session().unwrap().flags, flags);

    // LOOKUP of a missing name.
    assert_eq!(m.lookup(ROOT, "a").unwrap_err(), libc::ENOENT);

    // CREATE.
    let c = abi::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    };
    let b = m.ok(opcode::CREATE, ROOT, &cat(&[&c.to_bytes(), &cname("a")]));
    assert_eq!(b.len(), abi::EntryOut::SIZE + abi::OpenOut::SIZE);
    let e = abi::EntryOut::from_bytes(&b).unwrap();
    let o = abi::OpenOut::from_bytes(&b[abi::EntryOut::SIZE..]).unwrap();
    let node = e.nodeid;
    assert!(node > ROOT);
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
    assert_eq!(e.attr.size, 0);
    assert_eq!(fs.lookup_count(node), Some(1));

    // WRITE, then READ it back (and a read past the end).
    let data = b"hello, memfs".repeat(100);
    let wi = abi::WriteIn {
        fh: o.fh,
        offset: 5,
        size: data.len() as u32,
        ..Default::default()
    };
    let b = m.ok(opcode::WRITE, node, &cat(&[&wi.to_bytes(), &data]));
    let wo = abi::WriteOut::from_bytes(&b).unwrap();
    assert_eq!(
        (b.len(), wo.size as usize),
        (abi::WriteOut::SIZE, data.len())
    );
    let back = m.read(node, o.fh, 0, 1 << 20);
    assert_eq!(back.len(), 5 + data.len());
    assert_eq!(&back[..5], &[0u8; 5]);
    assert_eq!(&back[5..], &data[..]);
    assert_eq!(m.read(node, o.fh, 10, 7), &back[10..17]);
    assert!(m.read(node, o.fh, 1 << 40, 100).is_empty());
    let st = m.ok(opcode::GETATTR, node, &[0u8; 16]);
    let st = abi::AttrOut::from_bytes(&st).unwrap();
    assert_eq!(st.attr.size as usize, 5 + data.len());

    // A directory beside it, then READDIRPLUS of the root.
    let mk = abi::MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let d = m.ok(opcode::MKDIR, ROOT, &cat(&[&mk.to_bytes(), &cname("d")]));
    let d = abi::EntryOut::from_bytes(&d).unwrap();
    let oi = abi::OpenIn::default();
    let dfh = abi::OpenOut::from_bytes(&m.ok(opcode::OPENDIR, ROOT, &oi.to_bytes()))
        .unwrap()
        .fh;
    let ri = abi::ReadIn {
        fh: dfh,
        size: 4096,
        ..Default::default()
    };
    let list = parse_dirents(&m.ok(opcode::READDIRPLUS, ROOT, &ri.to_bytes()), true);
    let names: Vec<&str> = list.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(names, [".", "..", "a", "d"]);
    let a = &list[2];
    assert_eq!(a.4.unwrap().nodeid, node);
    assert_eq!(a.4.unwrap().attr.size as usize, 5 + data.len());
    assert_eq!(list[3].4.unwrap().nodeid, d.nodeid);
    assert_eq!(list[0].4.unwrap().nodeid, 0, ". is not looked up");
    assert_eq!(
        fs.lookup_count(node),
        Some(2),
        "READDIRPLUS counts a lookup"
    );
    // Continuing from the last offset gives nothing more.
    let ri2 = abi::ReadIn {
        offset: list[3].2,
        ..ri
    };
    assert!(m.ok(opcode::READDIRPLUS, ROOT, &ri2.to_bytes()).is_empty());
    let rel = abi::ReleaseIn {
        fh: dfh,
        ..Default::default()
    };
    m.ok(opcode::RELEASEDIR, ROOT, &rel.to_bytes());

    // RENAME a -> d/b: the old name is gone, the new one is the same node.
    let rn = abi::RenameIn { newdir: d.nodeid };
    m.ok(
        opcode::RENAME,
        ROOT,
        &cat(&[&rn.to_bytes(), &cname("a"), &cname("b")]),
    );
    assert_eq!(m.lookup(ROOT, "a").unwrap_err(), libc::ENOENT);
    assert_eq!(m.lookup(d.nodeid, "b").unwrap().nodeid, node);
    assert_eq!(fs.lookup_count(node), Some(3));

    // UNLINK: the name is gone; the open handle still reads the data.
    m.ok(opcode::UNLINK, d.nodeid, &cname("b"));
    assert_eq!(m.lookup(d.nodeid, "b").unwrap_err(), libc::ENOENT);
    assert_eq!(m.errno(opcode::UNLINK, d.nodeid, &cname("b")), libc::ENOENT);
    assert_eq!(m.read(node, o.fh, 5, 5), b"hello");
    let rel = abi::ReleaseIn {
        fh: o.fh,
        ..Default::default()
    };
    m.ok(opcode::RELEASE, node, &rel.to_bytes());
    assert_eq!(fs.handle_count(), 0);

    // FORGET: no reply; the node goes once every lookup is forgotten.
    let nodes = fs.node_count();
    let f = abi::ForgetIn { nlookup: 2 };
    assert!(m.send(opcode::FORGET, node, &f.to_bytes()).is_none());
    assert_eq!(fs.lookup_count(node), Some(1));
    let f = abi::ForgetIn { nlookup: 1 };
    assert!(m.send(opcode::FORGET, node, &f.to_bytes()).is_none());
    assert_eq!(fs.lookup_count(node), None);
    assert_eq!(fs.node_count(), nodes - 1);
    assert_eq!(m.errno(opcode::GETATTR, node, &[0u8; 16]), libc::EBADF);

    // Operations memfs does not implement get ENOSYS from the trait defaults.
    assert_eq!(
        m.errno(
            opcode::LINK,
            ROOT,
            &cat(&[&d.nodeid.to_le_bytes(), &cname("x")])
        ),
        libc::ENOSYS
    );
    // Same request checks as for passthrough: trailing bytes, bad names.
    assert_eq!(m.errno(opcode::UNLINK, ROOT, &cname("..")), libc::EINVAL);
    assert_eq!(m.errno(opcode::GETATTR, ROOT, &[0u8; 17]), libc::EINVAL);
}

#[test]
fn requests_before_init_and_after_destroy() {
    let m = Mem::new();
    assert_eq!(m.errno(opcode::GETATTR, ROOT, &[0u8; 16]), libc::EIO);
    m.init();
    m.ok(opcode::GETATTR, ROOT, &[0u8; 16]);
    m.ok(opcode::DESTROY, 0, &[]);
    assert!(m.srv.session().is_none());
    assert_eq!(m.errno(opcode::GETATTR, ROOT, &[0u8; 16]), libc::EIO);
}

#[test]
fn restore_session_accepts_what_init_negotiates() {
    let a = Mem::new();
    a.init();
    let saved = a.srv.session().unwrap();
    let b = Mem::new();
    b.srv.restore_session(saved).unwrap();
    assert_eq!(b.srv.session(), Some(saved));
    b.ok(opcode::GETATTR, ROOT, &[0u8; 16]);
}

#[test]
fn restore_session_refuses_bad_minor() {
    let m = Mem::new();
    for minor in [0, 30, 42, u32::MAX] {
        let s = SessionState { minor, flags: 0 };
        match m.srv.restore_session(s) {
            Err(SessionError::Minor { minor: got, .. }) => assert_eq!(got, minor),
            other => panic!("minor {minor}: {other:?}"),
        }
    }
    assert!(m.srv.session().is_none(), "nothing changed");
    assert_eq!(m.errno(opcode::GETATTR, ROOT, &[0u8; 16]), libc::EIO);
}

#[test]
fn restore_session_refuses_unsupported_flags() {
    let m = Mem::new();
    // memfs never offers writeback caching or xattrs.
    let bad = init_flags::WRITEBACK_CACHE | init_flags::SETXATTR_EXT;
    let s = SessionState {
        minor: 41,
        flags: init_flags::ASYNC_READ | bad,
    };
    let e = m.srv.restore_session(s).unwrap_err();
    assert_eq!(e, SessionError::Flags { unsupported: bad });
    assert!(e.to_string().contains("not support"), "{e}");
    assert!(m.srv.session().is_none());
}
