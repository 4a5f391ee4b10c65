// SPDX-License-Identifier: Apache-2.0
//! When a worker tells the guest about replies: at once while the guest has
//! few requests queued, once the backlog runs low when it has many
//! (`queue::NOTIFY_BACKLOG`), never losing a notification the guest asked for.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use vm_memory::{Address, Bytes, GuestAddress};
use xvirtiofsd::virtqueue::worker::{NOTIFY_BACKLOG, NOTIFY_DEFER_MAX};

const EVENT_IDX: u64 = 1 << 29;
/// Requests posted before a single kick: more than the deferral limit, so
/// that both of the rule's triggers fire.
const BATCH: u16 = 48;

/// A daemon with queue 1 initialised and its worker asleep, so that
/// requests posted now are all seen at once on the next kick.
fn idle_daemon(name: &str, features: u64) -> Vmm {
    let dir = scratch_dir(name);
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate_features(features);
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while vmm.stats[1].sleeps.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "worker never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    // INIT's own notification.
    let _ = vmm.queues[1].call.read();
    vmm
}

/// Posts `n` GETATTR requests on queue 1 without kicking; returns their
/// reply buffers.
fn post_getattrs(vmm: &mut Vmm, n: u16) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let req = fuse_request(FUSE_GETATTR, 1000 + u64::from(i), 1, &[0u8; 16]);
            let inb = vmm.alloc(4096);
            let outb = vmm.alloc(4096);
            vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
            vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
            outb
        })
        .collect()
}

/// Waits for every reply and checks each: its unique, no error.
fn check_replies(vmm: &mut Vmm, outs: &[u64]) {
    for (i, &outb) in outs.iter().enumerate() {
        let (_, len) = vmm.wait_used(1).expect("reply within 10 s");
        assert!(len >= 16, "reply {i}: {len} bytes");
        let mut hdr = [0u8; 16];
        vmm.mem
            .read_slice(&mut hdr, GuestAddress(outb))
            .expect("read");
        let err = i32::from_ne_bytes(hdr[4..8].try_into().expect("4 bytes"));
        let unique = u64::from_ne_bytes(hdr[8..16].try_into().expect("8 bytes"));
        assert_eq!((err, unique), (0, 1000 + i as u64), "reply {i}");
    }
}

/// Sets the used index the guest wants to hear about (EVENT_IDX).
fn set_used_event(vmm: &Vmm, idx: u16) {
    let tq = &vmm.queues[1];
    let at = tq.avail.unchecked_add(4 + 2 * u64::from(QUEUE_SIZE));
    vmm.mem.write_obj(idx, at).expect("used_event");
    std::sync::atomic::fence(Ordering::SeqCst);
}

fn used_idx(vmm: &Vmm) -> u16 {
    vmm.mem
        .read_obj(vmm.queues[1].used.unchecked_add(2))
        .expect("used idx")
}

/// Reads the call eventfd until `n` notifications have been counted (or 10
/// s have passed), then 20 ms more; returns how many were counted.
fn count_calls(vmm: &Vmm, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = 0;
    while seen < n && Instant::now() < deadline {
        match vmm.queues[1].call.read() {
            Ok(k) => seen += k,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    seen + vmm.queues[1].call.read().unwrap_or(0)
}

#[test]
fn a_deep_backlog_is_answered_with_fewer_notifications() {
    // Without EVENT_IDX every check notifies, so the count of notifications
    // is the count of checks: one after NOTIFY_DEFER_MAX replies, then one
    // per reply once fewer than NOTIFY_BACKLOG requests wait (a worker that
    // told the guest about every reply would send BATCH).
    let mut vmm = idle_daemon("notify-deep", !EVENT_IDX);
    let before = vmm.stats[1].notifications.load(Ordering::Relaxed);
    let outs = post_getattrs(&mut vmm, BATCH);
    vmm.kick(1);
    check_replies(&mut vmm, &outs);
    let expected = 1 + u64::from(NOTIFY_BACKLOG);
    assert_eq!(u64::from(BATCH - NOTIFY_DEFER_MAX), expected - 1);
    assert_eq!(count_calls(&vmm, expected), expected, "for {BATCH} replies");
    assert_eq!(
        vmm.stats[1].notifications.load(Ordering::Relaxed) - before,
        expected
    );
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn the_notification_asked_for_arrives_wherever_it_falls_in_a_deep_batch() {
    // The guest asks to hear about the first reply, about one in the
    // deferred stretch, and about the last: each time exactly one
    // notification arrives, and never before that reply is on the used ring.
    let mut vmm = idle_daemon("notify-asked", u64::MAX);
    for wanted in [0, NOTIFY_DEFER_MAX / 2, BATCH - 1] {
        let start = used_idx(&vmm);
        set_used_event(&vmm, start.wrapping_add(wanted));
        let outs = post_getattrs(&mut vmm, BATCH);
        vmm.kick(1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while vmm.queues[1].call.read().is_err() {
            assert!(
                Instant::now() < deadline,
                "no notification for reply {wanted}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let done = used_idx(&vmm).wrapping_sub(start);
        assert!(
            done > wanted,
            "notified with {done} replies, asked at {wanted}"
        );
        check_replies(&mut vmm, &outs);
        // Nothing more was asked for.
        assert_eq!(count_calls(&vmm, 0), 0, "a second notification");
    }
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn a_short_queue_is_told_about_every_reply_at_once() {
    // Fewer requests than NOTIFY_BACKLOG: nothing is deferred, one
    // notification per reply without EVENT_IDX.
    let mut vmm = idle_daemon("notify-short", !EVENT_IDX);
    let before = vmm.stats[1].notifications.load(Ordering::Relaxed);
    let n = NOTIFY_BACKLOG - 1;
    let outs = post_getattrs(&mut vmm, n);
    vmm.kick(1);
    check_replies(&mut vmm, &outs);
    assert_eq!(count_calls(&vmm, u64::from(n)), u64::from(n));
    assert_eq!(
        vmm.stats[1].notifications.load(Ordering::Relaxed) - before,
        u64::from(n)
    );
    vmm.shutdown().expect("clean disconnect");
}
