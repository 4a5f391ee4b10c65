// SPDX-License-Identifier: Apache-2.0
//! Feeds arbitrary bytes as a guest's virtqueue (descriptor table, avail
//! ring, buffers) to the daemon's queue code, which serves it once against a
//! read-only temporary directory. Checks that it never panics, never serves
//! more chains than the ring holds, and never writes outside guest memory
//! (every address is checked against the memory map; a violation would
//! crash the process).
//!
//! Input layout: byte 0: ring size 2^(b % 5) (1 to 16); byte 1: the index
//! the device continues from; byte 2: bit 0 EVENT_IDX; then the
//! descriptor table (16 bytes an
//! entry, at guest address 0), the avail ring (at 0x1000) and the rest as
//! guest memory from 0x3000 (requests and indirect tables). Guest memory is
//! 64 KiB, so the fuzzer can find addresses inside it.

#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic};
use xvfs_fs::io::{SliceReader, VecWriter};
use xvfs_fs::{CachePolicy, Config, PassthroughFs, PassthroughServer, Server};
use xvirtiofsd::virtqueue::mem::GuestMemoryMmap;
use xvirtiofsd::virtqueue::worker::{serve_once, RingConfig};

const MEM: usize = 0x10000;
const DESC: u64 = 0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const DATA: u64 = 0x3000;

fn setup_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvfs-fuzz-vring-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("dir")).expect("temp dir");
    std::fs::write(dir.join("file"), b"0123456789abcdef".repeat(300)).expect("file");
    dir
}

fn server() -> Arc<PassthroughServer> {
    static SERVER: OnceLock<Arc<PassthroughServer>> = OnceLock::new();
    Arc::clone(SERVER.get_or_init(|| {
        let cfg = Config {
            root_dir: setup_dir(),
            cache: CachePolicy::Auto,
            readonly: true,
            ..Config::default()
        };
        let srv = Server::new(PassthroughFs::new(cfg).expect("passthrough fs"));
        // A session, so that requests past INIT reach the file system.
        let req = xvfs_fs::testing::init_request();
        srv.handle(&mut SliceReader::new(&req), &mut VecWriter::new(4096));
        Arc::new(srv)
    }))
}

fuzz_target!(|data: &[u8]| {
    let [size_exp, next_avail, flags, rest @ ..] = data else {
        return;
    };
    let size: u16 = 1 << (size_exp % 5);
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).expect("guest memory");
    let table = usize::from(size) * 16;
    let avail = 4 + 2 * usize::from(size) + 2;
    let (t, rest) = rest.split_at(rest.len().min(table));
    let (a, rest) = rest.split_at(rest.len().min(avail));
    let d = &rest[..rest.len().min(MEM - DATA as usize)];
    mem.write_slice(t, GuestAddress(DESC)).expect("descriptors");
    mem.write_slice(a, GuestAddress(AVAIL)).expect("avail ring");
    mem.write_slice(d, GuestAddress(DATA)).expect("data");
    let cfg = RingConfig {
        index: 1,
        size,
        desc: DESC,
        avail: AVAIL,
        used: USED,
        next_avail: u16::from(*next_avail),
        event_idx: flags & 1 != 0,
        from_used: false,
    };
    if let Ok(n) = serve_once(&cfg, GuestMemoryAtomic::new(mem), server()) {
        assert!(
            n <= u64::from(size),
            "served {n} chains from a ring of {size}"
        );
    }
});
