// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A ring full of waiting SETLKW requests costs the daemon little CPU
//! (issue 45): a worker no longer asks the host for every waiting lock
//! every 5 ms, which with a ring's worth of them kept a host core busy.
//! Once the lock is free they are still granted one at a time, in the
//! order they came in.
//!
//! The real binary (`--sandbox none`, `-o posix_lock`); this test plays
//! QEMU and the guest, and holds the lock from the host (an OFD lock).

mod common;

use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vm_memory::{Bytes, GuestAddress};
use xvfs_fs::abi::{self, Wire};

const FUSE_OPEN: u32 = 14;
const FUSE_SETLK: u32 = 32;
const FUSE_SETLKW: u32 = 33;
const POSIX_LOCKS: u32 = 1 << 1;
const VRING_DESC_F_NEXT: u16 = 1;
const VRING_DESC_F_INDIRECT: u16 = 4;
/// Waiting requests: the whole ring of the queue they wait on.
const WAITERS: u16 = QUEUE_SIZE;
/// How long they wait while the daemon's CPU time is measured.
const HELD: Duration = Duration::from_secs(3);
/// The most CPU the daemon may spend meanwhile: 5 % of the time. Before,
/// each waiting request cost an fcntl(2) every 5 ms: 51,200 a second.
const MAX_CPU: Duration = Duration::from_millis(150);

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time (user + system) process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which ends with the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 here.
    // SAFETY: sysconf takes an integer.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis((f[11] + f[12]) * 1000 / hz)
}

fn lk(fh: u64, owner: u64, typ: i32) -> Vec<u8> {
    abi::LkIn {
        fh,
        owner,
        lk: abi::FileLock {
            start: 0,
            end: i64::MAX as u64,
            typ: typ as u32,
            pid: 0,
        },
        lk_flags: 0,
        padding: 0,
    }
    .to_bytes()
    .to_vec()
}

/// Posts `req` on queue `q` as one indirect descriptor (its table: the
/// request, then room for the reply), so that a ring of `QUEUE_SIZE`
/// descriptors holds as many requests. Returns where the reply goes.
fn post_indirect(vmm: &mut Vmm, q: usize, slot: u16, req: &[u8]) -> u64 {
    let inb = vmm.alloc(req.len() as u64);
    let outb = vmm.alloc(4096);
    let table = vmm.alloc(32);
    vmm.mem.write_slice(req, GuestAddress(inb)).unwrap();
    let mut t = Vec::new();
    for (addr, len, flags, next) in [
        (inb, req.len() as u32, VRING_DESC_F_NEXT, 1u16),
        (outb, 4096, VRING_DESC_F_WRITE, 0),
    ] {
        t.extend_from_slice(&addr.to_le_bytes());
        t.extend_from_slice(&len.to_le_bytes());
        t.extend_from_slice(&flags.to_le_bytes());
        t.extend_from_slice(&next.to_le_bytes());
    }
    vmm.mem.write_slice(&t, GuestAddress(table)).unwrap();
    let tq = &vmm.queues[q];
    let (desc, avail) = (tq.desc, tq.avail);
    let mut d = Vec::new();
    d.extend_from_slice(&table.to_le_bytes());
    d.extend_from_slice(&32u32.to_le_bytes());
    d.extend_from_slice(&VRING_DESC_F_INDIRECT.to_le_bytes());
    d.extend_from_slice(&0u16.to_le_bytes());
    vmm.mem
        .write_slice(&d, GuestAddress(desc.0 + 16 * u64::from(slot)))
        .unwrap();
    let idx: u16 = vmm.mem.read_obj(GuestAddress(avail.0 + 2)).unwrap();
    vmm.mem
        .write_obj(
            slot,
            GuestAddress(avail.0 + 4 + 2 * u64::from(idx % QUEUE_SIZE)),
        )
        .unwrap();
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    vmm.mem
        .write_obj(idx.wrapping_add(1), GuestAddress(avail.0 + 2))
        .unwrap();
    outb
}

/// The reply at `outb`: (errno, unique).
fn reply(vmm: &Vmm, outb: u64) -> (i32, u64) {
    let h: [u8; 16] = vmm.mem.read_obj(GuestAddress(outb)).unwrap();
    let err = i32::from_ne_bytes(h[4..8].try_into().unwrap());
    (-err, u64::from_ne_bytes(h[8..16].try_into().unwrap()))
}

#[test]
fn a_ring_of_waiting_setlkw_costs_little_cpu_and_is_granted_in_order() {
    let dir = scratch_dir("lockcost");
    let share = dir.join("share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(share.join("f"), b"locked").unwrap();
    let sock = dir.join("v.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .arg("--shared-dir")
        .arg(&share)
        .arg("--socket-path")
        .arg(&sock)
        .args(["--sandbox", "none", "--seccomp", "none", "--no-control"])
        .args(["--queues", "2", "--poll", "never", "-o", "posix_lock"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    let mut vmm = Vmm::connect(&sock, 3);
    vmm.negotiate();
    vmm.setup_queues(3);
    let mut init = Vec::new();
    for v in [7u32, 41, 128 * 1024, POSIX_LOCKS, 0] {
        init.extend_from_slice(&v.to_ne_bytes());
    }
    init.extend_from_slice(&[0u8; 44]);
    let (err, body) = vmm.fuse(1, FUSE_INIT, 0, &init);
    assert_eq!(err, 0, "INIT");
    let flags = u32::from_ne_bytes(body[12..16].try_into().unwrap());
    assert_ne!(flags & POSIX_LOCKS, 0, "POSIX locks negotiated");
    let (err, entry) = vmm.fuse(1, FUSE_LOOKUP, 1, b"f\0");
    assert_eq!(err, 0, "LOOKUP");
    let node = u64::from_ne_bytes(entry[..8].try_into().unwrap());
    let mut open = (libc::O_RDWR as u32).to_ne_bytes().to_vec();
    open.extend_from_slice(&[0u8; 4]);
    let (err, opened) = vmm.fuse(1, FUSE_OPEN, node, &open);
    assert_eq!(err, 0, "OPEN");
    let fh = u64::from_ne_bytes(opened[..8].try_into().unwrap());

    // The host holds the file's lock.
    let host = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(share.join("f"))
        .unwrap();
    // SAFETY: an all-zero flock is valid; it is filled in below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(host.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    assert_eq!(r, 0, "the host takes the lock");

    // A ring's worth of guest lock owners wait for it, on queue 2.
    let outs: Vec<u64> = (0..WAITERS)
        .map(|n| {
            let req = fuse_request(
                FUSE_SETLKW,
                1000 + u64::from(n),
                node,
                &lk(fh, 1 + u64::from(n), libc::F_WRLCK),
            );
            post_indirect(&mut vmm, 2, n, &req)
        })
        .collect();
    vmm.kick(2);
    assert!(vmm.wait_used_for(2, 500).is_none(), "they wait");

    let pid = daemon.0.id();
    let before = cpu_time(pid);
    std::thread::sleep(HELD);
    let spent = cpu_time(pid) - before;
    eprintln!(
        "{WAITERS} waiting SETLKW for {} ms: daemon CPU {} ms",
        HELD.as_millis(),
        spent.as_millis()
    );
    assert!(vmm.wait_used_for(2, 0).is_none(), "still waiting");
    assert!(
        spent <= MAX_CPU,
        "{WAITERS} waiting SETLKW cost {} ms of CPU in {} ms (at most {} ms)",
        spent.as_millis(),
        HELD.as_millis(),
        MAX_CPU.as_millis()
    );

    // The host lets go: each owner gets the lock in turn, in the order
    // they asked, as the one before lets go (an unlock on queue 1).
    drop(host);
    let started = Instant::now();
    for n in 0..WAITERS {
        let (head, _) = vmm
            .wait_used_for(2, 5_000)
            .unwrap_or_else(|| panic!("owner {} was never granted the lock", n + 1));
        assert_eq!(
            reply(&vmm, outs[head as usize]),
            (0, 1000 + u64::from(n)),
            "granted in order"
        );
        assert!(vmm.wait_used_for(2, 0).is_none(), "one at a time");
        let unlock = lk(fh, 1 + u64::from(n), libc::F_UNLCK);
        let (err, _) = vmm.fuse(1, FUSE_SETLK, node, &unlock);
        assert_eq!(err, 0, "owner {} lets go", n + 1);
    }
    eprintln!(
        "{WAITERS} grants in order in {} ms",
        started.elapsed().as_millis()
    );
    drop(vmm);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
