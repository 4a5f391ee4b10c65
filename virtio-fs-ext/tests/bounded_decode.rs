// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every decoder of a received state, checkpoint or migration stream
//! refuses a list that declares more entries than its input can hold
//! before it builds any of it, and builds at most a fixed multiple of its
//! input (issue 45). Before, a crafted input of 16 MiB built hundreds of
//! megabytes before it was refused (or, densely packed, was accepted).
//!
//! This test binary counts every allocation (its global allocator), and
//! measures the most memory each decode had at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use virtio_fs_ext::frame;
use virtio_fs_ext::migration::{self, MigrationStream, MIGRATION_MAGIC};
use virtio_fs_ext::parts::{self, Part};
use virtio_fs_ext::settings::{Security, Settings};
use virtio_fs_ext::state::{DaemonState, DeviceState};
use xvfs_fs::state::{FsState, MigrationFs};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only
// the counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `decode`: (most bytes it had allocated at once, how long it took).
fn measure<T>(decode: impl FnOnce() -> T) -> (T, usize, Duration) {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let started = Instant::now();
    let out = decode();
    let took = started.elapsed();
    (out, PEAK.load(Ordering::Relaxed) - base, took)
}

const MIB: usize = 1 << 20;
/// Size of the crafted lists' filler.
const FILL: usize = 16 * MIB;

fn varint(mut n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            v.push(b);
            return v;
        }
        v.push(b | 0x80);
    }
}

/// `encoded` (ending with `empty_tail` bytes that are an empty list and
/// what follows it) with that list declaring 2^32 entries, then `fill`
/// bytes of the smallest entries there are (all zero).
fn claiming(encoded: &[u8], empty_tail: usize, fill: usize) -> Vec<u8> {
    let mut v = encoded[..encoded.len() - empty_tail].to_vec();
    v.extend(varint(1 << 32));
    v.resize(v.len() + fill, 0);
    v
}

fn state() -> DaemonState {
    DaemonState {
        writer_version: "v".into(),
        writer_pid: 7,
        started_unix_ms: 9,
        upgrades: 0,
        settings: Settings::default(),
        vhost_socket_fd: 0,
        control_socket_fd: None,
        control_path: None,
        log_fd: None,
        pid_file_fds: Vec::new(),
        device: DeviceState {
            acked_features: 0,
            acked_protocol: 0,
            owner: true,
            max_queues: 2,
            regions: Vec::new(),
            vrings: Vec::new(),
        },
        fs: FsState {
            root_dev: 1,
            root_ino: 2,
            next_id: 3,
            inodes: Vec::new(),
            handles: Vec::new(),
            locks: Vec::new(),
        },
        session: None,
        fs_fd_base: 1,
        dax: None,
    }
}

/// The parts of [`state`] in format 8, with the part called `name` made
/// of `bytes`.
fn v8_with(name: &str, bytes: Vec<u8>) -> Vec<u8> {
    let blob = state().encode_as(8).unwrap();
    let mut list: Vec<Part> = postcard::from_bytes(frame::decode(&blob).unwrap().1).unwrap();
    let kind = virtio_fs_ext::state::v8::PARTS
        .iter()
        .find(|k| k.name == name)
        .unwrap();
    list.iter_mut().find(|p| p.id == kind.id).unwrap().bytes = bytes;
    frame::encode(8, &parts::encode(&list).unwrap())
}

fn migration_v2(fs_bytes_tail: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let stream = MigrationStream {
        writer_version: "v".into(),
        session: None,
        fs: MigrationFs {
            next_id: 3,
            next_fh: 1,
            inodes: Vec::new(),
            handles: Vec::new(),
        },
    };
    let payload = fs_bytes_tail(&postcard::to_stdvec(&stream).unwrap());
    frame::encode_with(MIGRATION_MAGIC, 2, &payload)
}

#[test]
fn crafted_lists_are_refused_before_they_are_built() {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let state_err = |b: &[u8]| match DaemonState::decode(b) {
        Ok(_) => "accepted".to_string(),
        Err(e) => format!("{e}: {}", std::error::Error::source(&e).unwrap()),
    };
    let migration_err = |b: &[u8]| match migration::decode(b) {
        Ok(_) => "accepted".to_string(),
        Err(e) => format!(
            "{e}: {}",
            std::error::Error::source(&e).map_or(String::new(), |s| s.to_string())
        ),
    };

    // Format 8: 2^32 parts declared, 4 million tiny ones present.
    let mut list = varint(1 << 32);
    for _ in 0..FILL / 4 {
        list.extend_from_slice(&[99, 1, 1, 0]);
    }
    cases.push(("state 8, list of parts", frame::encode(8, &list)));
    // Format 8: the fs part's inodes.
    let fs = postcard::to_stdvec(&state().fs).unwrap();
    cases.push(("state 8, inodes", v8_with("fs", claiming(&fs, 3, FILL))));
    // Format 8: four million empty strings, honestly encoded: one byte
    // each, 24 in memory.
    let security = Security {
        translate_uid: vec![String::new(); 4 * MIB],
        ..Default::default()
    };
    cases.push((
        "state 8, dense strings",
        v8_with("settings.security", postcard::to_stdvec(&security).unwrap()),
    ));
    // Format 7: the inodes (the payload ends with them empty, the empty
    // handles and locks, no session and the fs_fd_base 1).
    let v7 = state().encode_as(7).unwrap();
    cases.push((
        "state 7, inodes",
        frame::encode(7, &claiming(frame::decode(&v7).unwrap().1, 5, FILL)),
    ));
    // Migration format 2: the migrated inodes.
    cases.push((
        "migration 2, inodes",
        migration_v2(|p| claiming(p, 2, FILL)),
    ));
    // virtiofsd's format: V1 with its inodes.
    let mut vfsd = vec![0];
    vfsd.extend(varint(1 << 32));
    vfsd.resize(vfsd.len() + FILL / 2, 0);
    cases.push(("virtiofsd, inodes", vfsd));
    // virtiofsd's format: V2 (an empty V1) with its mount paths, each a
    // mount id of its own and an empty path.
    let mut vfsd2 = vec![1, 0, 0, 0, 0, 0, 0, 0, 0];
    vfsd2.extend(varint(1 << 32));
    let mut id = 0;
    while vfsd2.len() < FILL / 4 {
        vfsd2.extend(varint(id));
        vfsd2.push(0);
        id += 1;
    }
    cases.push(("virtiofsd, mount paths", vfsd2));

    let mut failed = Vec::new();
    for (what, blob) in &cases {
        let is_state = what.starts_with("state");
        let (err, peak, took) = measure(|| {
            if is_state {
                state_err(blob)
            } else {
                migration_err(blob)
            }
        });
        eprintln!(
            "{what}: {} KiB in, {} KiB at most built, {} ms: {err}",
            blob.len() >> 10,
            peak >> 10,
            took.as_millis()
        );
        let refused = err.contains("claims more than it holds");
        // At most one copy of the input (a part's bytes) and a little.
        if !refused || peak > blob.len() + 2 * MIB || took > Duration::from_secs(2) {
            failed.push(format!("{what}: {} KiB built, {err}", peak >> 10));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
