// SPDX-License-Identifier: Apache-2.0
//! A guest that corrupts one request queue's ring: the queue is marked broken
//! within one batch (its worker ends instead of spinning, one fault counted,
//! the SET_VRING_ERR eventfd signalled), the other request queue keeps
//! serving, and a front-end reset of the ring makes it serve again.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use vhost::VhostBackend;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

const BAD_QUEUE: usize = 2;

/// CPU time (user + system, in clock ticks) of this process's threads named
/// `name`.
fn cpu_ticks_of_threads(name: &str) -> u64 {
    let mut total = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += tick(11) + tick(12);
    }
    total
}

fn readable_within(fd: &EventFd, ms: i32) -> bool {
    // SAFETY: `fd` outlives the borrow, which ends with this call.
    let b = unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) };
    xvirtiofsd::sys::poll_readable(&[b], ms).is_ok_and(|r| r[0])
}

/// A daemon with two request queues, INIT done, an error eventfd on the
/// queue the test corrupts.
fn start(name: &str) -> (Vmm, EventFd) {
    let dir = scratch_dir(name);
    let mut vmm = Vmm::start(&dir, 3);
    vmm.negotiate();
    vmm.setup_queues(3);
    vmm.fuse_init(1);
    let err = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    vmm.frontend
        .set_vring_err(BAD_QUEUE, &err)
        .expect("set_vring_err");
    // The queue serves before it is corrupted.
    let (e, _) = vmm.fuse(BAD_QUEUE, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(e, 0);
    (vmm, err)
}

/// Everything the test expects of a broken queue, then the reset.
fn expect_broken_then_reset(mut vmm: Vmm, err: EventFd, fix: impl FnOnce(&mut Vmm, u16)) {
    assert!(
        readable_within(&err, 2000),
        "the error eventfd must be signalled"
    );
    let stats = std::sync::Arc::clone(&vmm.stats[BAD_QUEUE]);
    let faults = || stats.ring_faults.load(Ordering::Relaxed);
    assert_eq!(faults(), 1, "one fault, reported once");

    // The worker has ended: no spinning.
    let name = format!("xvfs-q{BAD_QUEUE}");
    let ticks_per_s = 100u64; // USER_HZ on Linux
    let before = cpu_ticks_of_threads(&name);
    let t = Instant::now();
    // Meanwhile the other request queue keeps serving.
    let mut served = 0;
    while t.elapsed() < Duration::from_secs(2) {
        let (e, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
        assert_eq!(e, 0, "queue 1 must keep serving");
        served += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let used = cpu_ticks_of_threads(&name) - before;
    assert!(
        used * 100 < 5 * ticks_per_s * 2,
        "broken queue's worker used {used} ticks in 2 s"
    );
    assert!(served > 10, "queue 1 served {served} requests");
    vmm.kick(BAD_QUEUE);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(faults(), 1, "a kick on a broken ring changes nothing");

    vmm.reset_queue(BAD_QUEUE, fix);
    let (e, _) = vmm.fuse(BAD_QUEUE, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(e, 0, "the reset queue serves again");
    assert_eq!(faults(), 1);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn avail_index_too_far_ahead_breaks_only_that_queue() {
    let (vmm, err) = start("ringfault-avail");
    let good = vmm.avail_idx(BAD_QUEUE);
    let avail = vmm.queues[BAD_QUEUE].avail;
    let bogus = good.wrapping_add(QUEUE_SIZE + 5);
    vmm.mem
        .write_obj(bogus, avail.unchecked_add(2))
        .expect("avail idx");
    vmm.kick(BAD_QUEUE);
    expect_broken_then_reset(vmm, err, move |vmm, base| {
        assert_eq!(base, good, "nothing was popped from the corrupt ring");
        vmm.mem
            .write_obj(good, avail.unchecked_add(2))
            .expect("avail idx");
    });
}

#[test]
fn head_index_out_of_range_breaks_only_that_queue() {
    let (mut vmm, err) = start("ringfault-head");
    let good = vmm.avail_idx(BAD_QUEUE);
    let avail = vmm.queues[BAD_QUEUE].avail;
    let slot = u64::from(good % QUEUE_SIZE);
    let inb = vmm.alloc(4096);
    let outb = vmm.alloc(4096);
    let req = fuse_request(FUSE_GETATTR, 9, 1, &[0u8; 16]);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(
        BAD_QUEUE,
        &[(inb, req.len() as u32, false), (outb, 4096, true)],
    );
    // The head the guest published is out of range.
    vmm.mem
        .write_obj(QUEUE_SIZE + 3, avail.unchecked_add(4 + 2 * slot))
        .expect("avail ring");
    vmm.kick(BAD_QUEUE);
    expect_broken_then_reset(vmm, err, move |_, base| {
        // The bad head was consumed; the guest withdraws nothing else.
        assert_eq!(base, good.wrapping_add(1));
    });
}
