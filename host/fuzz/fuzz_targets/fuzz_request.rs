// SPDX-License-Identifier: Apache-2.0
//! Feeds arbitrary bytes as one FUSE request to a `Server`, over a read-only
//! temporary directory (passthrough) or an in-memory file system (memfs).
//! Checks that it never panics and that every reply's out header `len` equals
//! the bytes written.
//!
//! Input layout: byte 0 selects the mode. Bit 1 set: memfs; else bit 2 set:
//! a writable passthrough share (when `XVFS_FUZZ_RW_DIR` names one, e.g. the
//! small tmpfs `run.sh` mounts; with an xattr map), else the read-only one.
//! Even: the rest is sent raw (header included, so lengths may lie). Odd:
//! byte 1 is the opcode, byte 2 the node id, byte 3 the reply room (0 = 1 MiB
//! + 4 KiB, else n * 8 bytes), and the rest is the body behind a header whose
//! length is right: this reaches the operations instead of the length checks.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use xvfs_fs::abi::{self, Wire};
use xvfs_fs::filesystem::FileSystem;
use xvfs_fs::io::{SliceReader, VecWriter};
use xvfs_fs::memfs::MemFs;
use xvfs_fs::{Config, PassthroughFs, PassthroughServer, Server};

const ROOM: usize = (1 << 20) + 4096;

fn setup_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvfs-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("dir/sub")).expect("temp dir");
    std::fs::write(dir.join("file"), b"0123456789abcdef".repeat(300)).expect("file");
    std::fs::write(dir.join("dir/inner"), b"inner").expect("inner");
    let _ = std::os::unix::fs::symlink("/etc/passwd", dir.join("escape"));
    let _ = std::os::unix::fs::symlink("dir/inner", dir.join("rel"));
    dir
}

fn server() -> &'static PassthroughServer {
    static SERVER: OnceLock<PassthroughServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let cfg = Config {
            root_dir: setup_dir(),
            xattr: true,
            readonly: true,
            allow_direct_io: false,
            posix_lock: true,
            flock: true,
            ..Config::default()
        };
        Server::new(PassthroughFs::new(cfg).expect("passthrough fs"))
    })
}

/// The writable share, if the environment gives one.
fn rw_server() -> Option<&'static PassthroughServer> {
    static SERVER: OnceLock<Option<PassthroughServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let dir = PathBuf::from(std::env::var_os("XVFS_FUZZ_RW_DIR")?);
            std::fs::create_dir_all(dir.join("dir/sub")).ok()?;
            std::fs::write(dir.join("file"), b"0123456789abcdef".repeat(300)).ok()?;
            let cfg = Config {
                root_dir: dir,
                xattr: true,
                // Bounded: the fuzzer looks up far more than it forgets.
                max_open: 4096,
                xattrmap: xvfs_fs::passthrough::XattrMap::parse(":map::user.virtiofs.:").ok(),
                // Marked writes, truncates and opens drop CAP_FSETID.
                killpriv_v2: true,
                ..Config::default()
            };
            Some(Server::new(
                PassthroughFs::new(cfg).expect("passthrough fs"),
            ))
        })
        .as_ref()
}

fn mem_server() -> &'static Server<MemFs> {
    static SERVER: OnceLock<Server<MemFs>> = OnceLock::new();
    SERVER.get_or_init(|| Server::new(MemFs::new()))
}

fn run<F: FileSystem>(srv: &Server<F>, req: &[u8], room: usize) {
    let mut r = SliceReader::new(req);
    let mut w = VecWriter::new(room);
    let n = srv.handle(&mut r, &mut w);
    assert_eq!(n, w.as_slice().len(), "returned length != bytes written");
    if n > 0 {
        let h = abi::OutHeader::from_bytes(w.as_slice()).expect("reply shorter than header");
        assert_eq!(h.len as usize, n, "out header len != bytes written");
        assert!(h.error <= 0 && h.error > -4096, "bad errno {}", h.error);
        if h.error != 0 {
            assert_eq!(n, abi::OutHeader::SIZE, "error replies carry no payload");
        }
    }
}

fn init<F: FileSystem>(srv: &Server<F>) {
    run(srv, &xvfs_fs::testing::init_request(), ROOM);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 2 != 0 {
        one(mem_server(), mode, rest);
    } else if let Some(rw) = rw_server().filter(|_| mode & 4 != 0) {
        one(rw, mode, rest);
    } else {
        one(server(), mode, rest);
    }
});

fn one<F: FileSystem>(srv: &Server<F>, mode: u8, rest: &[u8]) {
    if srv.session().is_none() {
        init(srv);
    }
    if mode & 1 == 0 {
        run(srv, rest, ROOM);
        return;
    }
    let [op, node, room, body @ ..] = rest else {
        return;
    };
    let h = abi::InHeader {
        len: (abi::InHeader::SIZE + body.len()) as u32,
        opcode: u32::from(*op),
        unique: 7,
        nodeid: u64::from(*node),
        uid: 0,
        gid: 0,
        pid: 1,
        total_extlen: 0,
        padding: 0,
    };
    let room = if *room == 0 {
        ROOM
    } else {
        usize::from(*room) * 8
    };
    run(srv, &[&h.to_bytes()[..], body].concat(), room);
}
