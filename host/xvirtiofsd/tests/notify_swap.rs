// SPDX-License-Identifier: Apache-2.0
//! The lost-interrupt race (issue 31): a front-end swaps a ring's call or
//! kick eventfd while requests are in flight, as QEMU does when the guest
//! masks an MSI-X vector or the device is reconfigured. QEMU 10.2 and later
//! wait for the back-end's REPLY_ACK and then listen only to the new call
//! fd, so the ack must come only once the change is in effect: no
//! completion may be signalled on a call fd after its replacement was
//! acknowledged, and every completion published after the ack must be
//! signalled on the new one. A request kicked on a kick fd just before it
//! is replaced must still be served, with no further kick.
//!
//! Played by vhost's `Frontend` with every request asking for an ack, on
//! mock rings without EVENT_IDX (so every completion is signalled).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use vhost::VhostBackend;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

const ROUNDS: usize = 300;
/// Requests in flight in each round.
const IN_FLIGHT: usize = 32;
const Q: usize = 1;
const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;

/// A serving device with request queue `Q` ready, and the guest buffers of
/// `IN_FLIGHT` GETATTR requests of the root (written once, reused).
fn device(name: &str) -> (Vmm, Vec<(u64, u64)>) {
    let dir = scratch_dir(name);
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate_features(!VIRTIO_RING_F_EVENT_IDX);
    vmm.setup_queues(2);
    vmm.fuse_init(Q);
    let bufs = (0..IN_FLIGHT)
        .map(|i| {
            let req = fuse_request(FUSE_GETATTR, 100 + i as u64, 1, &[0u8; 16]);
            let inb = vmm.alloc(req.len() as u64);
            vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
            (inb, vmm.alloc(4096))
        })
        .collect();
    (vmm, bufs)
}

/// Makes every request of `bufs` available on queue `Q` (no kick).
fn post_all(vmm: &mut Vmm, bufs: &[(u64, u64)]) {
    let len = fuse_request(FUSE_GETATTR, 0, 1, &[0u8; 16]).len() as u32;
    for &(inb, outb) in bufs {
        vmm.post(Q, &[(inb, len, false), (outb, 4096, true)]);
    }
}

fn used_idx(vmm: &Vmm) -> u16 {
    vmm.mem
        .read_obj(vmm.queues[Q].used.unchecked_add(2))
        .unwrap()
}

/// Waits (bounded) until `fd` has been signalled; drains it.
fn signalled_within(fd: &EventFd, ms: u64) -> bool {
    let deadline = Instant::now() + Duration::from_millis(ms);
    loop {
        if fd.read().is_ok() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn a_call_fd_swapped_with_requests_in_flight_loses_no_interrupt() {
    let (mut vmm, bufs) = device("call-swap");
    let mut retired: Vec<EventFd> = Vec::new();
    let mut late_covered = 0;
    for round in 0..ROUNDS {
        post_all(&mut vmm, &bufs);
        vmm.kick(Q);
        let new = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        // Returns once the daemon acknowledged (NEED_REPLY).
        vmm.frontend.set_vring_call(Q, &new).unwrap();
        let used_at_ack = used_idx(&vmm);
        let old = std::mem::replace(&mut vmm.queues[Q].call, new);
        // What the old fd got before the ack reached the front-end, which
        // still listened to it until then.
        let old_before_ack = old.read().is_ok();
        retired.push(old);
        for _ in 0..IN_FLIGHT {
            vmm.wait_used(Q)
                .unwrap_or_else(|| panic!("round {round}: a request was not served"));
        }
        let after_ack = used_idx(&vmm).wrapping_sub(used_at_ack);
        if after_ack > 0 {
            assert!(
                signalled_within(&vmm.queues[Q].call, 1000),
                "round {round}: {after_ack} completion(s) published after the ack, \
                 but the new call fd was never signalled (a lost interrupt)"
            );
            late_covered += 1;
        } else {
            assert!(
                old_before_ack || signalled_within(&vmm.queues[Q].call, 1000),
                "round {round}: completions before the ack signalled on neither fd"
            );
        }
        // A completion published before the ack may have been signalled on
        // the new fd too: start the next round from a quiet fd.
        let _ = vmm.queues[Q].call.read();
    }
    // No call fd was signalled after its replacement was acknowledged.
    for (i, fd) in retired.iter().enumerate() {
        assert!(
            fd.read().is_err(),
            "round {i}: the replaced call fd was signalled after the ack (QEMU no longer listens)"
        );
    }
    assert!(
        late_covered > 0,
        "no round raced a completion with the swap"
    );
    eprintln!("{ROUNDS} call-fd swaps, {late_covered} with completions after the ack");
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn a_request_kicked_just_before_its_kick_fd_is_swapped_is_served() {
    let (mut vmm, bufs) = device("kick-swap");
    for round in 0..ROUNDS {
        // Kicked on the old fd, then the fd is replaced at once: the
        // restarted worker must find the requests without another kick.
        post_all(&mut vmm, &bufs);
        vmm.kick(Q);
        let new = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        vmm.frontend.set_vring_kick(Q, &new).unwrap();
        vmm.queues[Q].kick = new;
        for _ in 0..IN_FLIGHT {
            vmm.wait_used_for(Q, 5000).unwrap_or_else(|| {
                panic!("round {round}: a request kicked before the swap was not served")
            });
        }
        // And the new fd works.
        let (err, _) = vmm.fuse(Q, FUSE_GETATTR, 1, &[0u8; 16]);
        assert_eq!(err, 0, "round {round}");
    }
    vmm.shutdown().expect("clean disconnect");
}
