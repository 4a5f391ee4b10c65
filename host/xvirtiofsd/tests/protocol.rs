// SPDX-License-Identifier: Apache-2.0
//! Protocol tests: the daemon's vhost-user control plane and queue workers driven
//! by vhost's `Frontend` and mock guest rings, without a VM.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use vhost::vhost_user::VhostUserFrontend;
use vhost::VhostBackend;
use vm_memory::{Bytes, GuestAddress};

const ENOSYS: i32 = 38;

#[test]
fn features_offer_version_1_event_idx_and_protocol_features() {
    let dir = scratch_dir("features");
    let mut vmm = Vmm::start(&dir, 2);
    let f = vmm.negotiate();
    assert_ne!(f & (1 << 32), 0, "VIRTIO_F_VERSION_1");
    assert_ne!(f & (1 << 29), 0, "EVENT_IDX");
    assert_ne!(f & (1 << 30), 0, "PROTOCOL_FEATURES");
    assert_eq!(vmm.frontend.get_queue_num().expect("queue num"), 2);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn init_and_getattr_round_trip_through_the_ring() {
    let dir = scratch_dir("init");
    std::fs::write(dir.join("hello"), b"hello world").expect("file");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    let init = vmm.fuse_init(1);
    assert_eq!(
        u32::from_ne_bytes([init[0], init[1], init[2], init[3]]),
        7,
        "major"
    );
    let (err, attr) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0);
    assert_eq!(attr.len(), 104, "fuse_attr_out");
    let mode = u32::from_ne_bytes([attr[76], attr[77], attr[78], attr[79]]);
    assert_eq!(mode & libc::S_IFMT, libc::S_IFDIR, "root is a directory");
    let (err, entry) = vmm.fuse(1, FUSE_LOOKUP, 1, b"hello\0");
    assert_eq!(err, 0);
    let size = u64::from_ne_bytes(entry[48..56].try_into().expect("8 bytes"));
    assert_eq!(size, 11);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn every_queue_count_from_1_to_16_negotiates_and_serves() {
    for n in 1..=16usize {
        let dir = scratch_dir(&format!("mq{n}"));
        let mut vmm = Vmm::start(&dir, 17);
        vmm.negotiate();
        assert!(vmm.frontend.get_queue_num().expect("queue num") > n as u64);
        vmm.setup_queues(n + 1);
        vmm.fuse_init(1);
        for q in 1..=n {
            let (err, _) = vmm.fuse(q, FUSE_GETATTR, 1, &[0u8; 16]);
            assert_eq!(err, 0, "queue {q} of {n}");
        }
        vmm.shutdown().expect("clean disconnect");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn get_vring_base_stops_the_ring_and_it_resumes_where_it_stopped() {
    let dir = scratch_dir("base");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    for _ in 0..3 {
        assert_eq!(vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]).0, 0);
    }
    let base = vmm.frontend.get_vring_base(1).expect("get_vring_base");
    assert_eq!(base, 4, "INIT + 3 GETATTR consumed");
    // A request posted while stopped is not served...
    let req = fuse_request(FUSE_GETATTR, 9, 1, &[0u8; 16]);
    let inb = vmm.alloc(req.len() as u64);
    let outb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
    vmm.kick(1);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        vmm.wait_used_for(1, 200).is_none(),
        "a stopped ring must not be served"
    );
    assert_eq!(vmm.queues[1].seen_used, 4);
    // ...until the ring is restarted from the returned base.
    vmm.frontend
        .set_vring_base(1, base as u16)
        .expect("set base");
    let kick = &vmm.queues[1].kick;
    vmm.frontend.set_vring_kick(1, kick).expect("kick");
    let (_, len) = vmm.wait_used(1).expect("served after restart");
    assert!(len >= 16);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn unknown_opcode_gets_enosys_and_serving_continues() {
    let dir = scratch_dir("enosys");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let (err, _) = vmm.fuse(1, 9999, 1, &[]);
    assert_eq!(err, -ENOSYS);
    assert_eq!(vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]).0, 0);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn hostile_chains_complete_with_nothing_written_and_serving_continues() {
    let dir = scratch_dir("hostile");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);

    // A descriptor pointing outside guest memory.
    vmm.post(
        1,
        &[
            (MEM_SIZE as u64 + 0x1000, 64, false),
            (0x200_0000, 4096, true),
        ],
    );
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("completed").1, 0);

    // A descriptor whose range wraps past the end of memory.
    vmm.post(
        1,
        &[(MEM_SIZE as u64 - 8, 4096, false), (0x200_0000, 4096, true)],
    );
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("completed").1, 0);

    // A device-readable descriptor after a device-writable one.
    let req = fuse_request(FUSE_GETATTR, 3, 1, &[0u8; 16]);
    let inb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(
        1,
        &[(0x200_0000, 4096, true), (inb, req.len() as u32, false)],
    );
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("completed").1, 0);

    // A request whose header length lies (claims more than was sent).
    let mut lying = fuse_request(FUSE_GETATTR, 4, 1, &[0u8; 16]);
    lying[0..4].copy_from_slice(&4000u32.to_ne_bytes());
    let (err, _) = vmm.fuse_raw(1, &lying, 4096);
    assert!(err < 0, "lying length must get an error reply, got {err}");

    // A truncated header (fewer than 40 bytes).
    let (inb, outb) = (vmm.alloc(64), vmm.alloc(4096));
    vmm.mem
        .write_slice(&[1u8; 20], GuestAddress(inb))
        .expect("write");
    vmm.post(1, &[(inb, 20, false), (outb, 4096, true)]);
    vmm.kick(1);
    assert!(vmm.wait_used(1).is_some());

    // No room for a reply at all.
    let req = fuse_request(FUSE_GETATTR, 5, 1, &[0u8; 16]);
    let inb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(1, &[(inb, req.len() as u32, false)]);
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("completed").1, 0);

    // The daemon still serves.
    assert_eq!(vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]).0, 0);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn bad_control_messages_are_refused_without_killing_the_connection() {
    let dir = scratch_dir("badctl");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    // Out-of-range queue index and a ring size that is not a power of two.
    assert!(vmm.frontend.set_vring_num(7, 256).is_err());
    assert!(vmm.frontend.set_vring_num(1, 100).is_err());
    // The connection still works.
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn a_request_posted_without_a_kick_after_rearm_is_still_served_on_the_next_kick() {
    let dir = scratch_dir("rearm");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    // Post two requests, kick once: both must be served (the worker drains the
    // ring and re-checks it after re-arming notifications).
    let mut outs = Vec::new();
    for u in 0..2u64 {
        let req = fuse_request(FUSE_GETATTR, 100 + u, 1, &[0u8; 16]);
        let inb = vmm.alloc(4096);
        let outb = vmm.alloc(4096);
        vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
        vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
        outs.push(outb);
    }
    vmm.kick(1);
    assert!(vmm.wait_used(1).is_some());
    assert!(vmm.wait_used(1).is_some());
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn no_request_is_lost_when_it_lands_as_polling_stops() {
    use std::time::Duration;
    use xvirtiofsd::vhost_user::DeviceConfig;
    use xvirtiofsd::virtqueue::worker::{PollConfig, PollMode};

    let dir = scratch_dir("pollrace");
    let window = Duration::from_micros(40);
    let cfg = DeviceConfig {
        poll: PollConfig {
            mode: PollMode::Always,
            window,
            wake_cost: Duration::from_micros(10),
            cpu_max: 100,
        },
        ..DeviceConfig::new(2)
    };
    let mut vmm = Vmm::start_with(&dir, cfg);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let req = fuse_request(FUSE_GETATTR, 7, 1, &[0u8; 16]);
    let inb = vmm.alloc(4096);
    let outb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    // Polling must serve some requests without a kick and sleeping must
    // need kicks for others, so that the boundary is crossed both ways. On
    // a loaded host one round of 400 may miss either side: up to 5 rounds,
    // every request of every round checked.
    let mut kicks = 0;
    for round in 0..5u64 {
        kicks = 0;
        for i in 0..400u64 {
            // Delays from 0 to ~80 µs straddle the end of the 40 µs poll window.
            let spin = std::time::Instant::now();
            while spin.elapsed() < Duration::from_nanos((i * 7919 + round * 1237) % 80_000) {
                std::hint::spin_loop();
            }
            let old = vmm.avail_idx(1);
            let head = vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
            if vmm.kick_if_needed(1, old, old.wrapping_add(1)) {
                kicks += 1;
            }
            let (id, len) = vmm
                .wait_used_for(1, 2000)
                .unwrap_or_else(|| panic!("round {round}, request {i} was left unserved"));
            assert_eq!(
                id,
                u32::from(head),
                "round {round}, request {i}: used entry of another chain"
            );
            let mut hdr = [0u8; 16];
            vmm.mem
                .read_slice(&mut hdr, GuestAddress(outb))
                .expect("reply");
            assert!(
                len > 16,
                "round {round}, request {i}: reply {len} bytes, header {hdr:?}"
            );
        }
        if kicks > 0 && kicks < 400 {
            break;
        }
    }
    assert!(kicks > 0 && kicks < 400, "kicks: {kicks}");
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn forget_on_hiprio_without_a_reply_buffer_takes_effect() {
    const FUSE_FORGET: u32 = 2;
    const EBADF: i32 = 9;
    let dir = scratch_dir("forget");
    std::fs::write(dir.join("f"), b"x").expect("file");
    let mut vmm = Vmm::start(&dir, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let (err, entry) = vmm.fuse(1, FUSE_LOOKUP, 1, b"f\0");
    assert_eq!(err, 0);
    let node = u64::from_ne_bytes(entry[0..8].try_into().expect("8 bytes"));
    // As the Linux driver sends it: on hiprio, one device-readable descriptor.
    let req = fuse_request(FUSE_FORGET, 0, node, &1u64.to_ne_bytes());
    let inb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(0, &[(inb, req.len() as u32, false)]);
    vmm.kick(0);
    assert_eq!(vmm.wait_used(0).expect("FORGET completed").1, 0, "no reply");
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, node, &[0u8; 16]);
    assert_eq!(err, -EBADF, "the forgotten node id must be gone");
    vmm.shutdown().expect("clean disconnect");
}

#[test]
fn tag_is_advertised_in_the_configuration_space() {
    use vhost::vhost_user::message::VhostUserConfigFlags;
    use vhost::vhost_user::VhostUserProtocolFeatures as P;
    // Without --tag: CONFIG is not offered.
    let dir = scratch_dir("notag");
    let mut vmm = Vmm::start(&dir, 3);
    vmm.frontend.set_owner().expect("set_owner");
    let features = vmm.frontend.get_features().expect("features");
    vmm.frontend.set_features(features).expect("set features");
    let pf = vmm
        .frontend
        .get_protocol_features()
        .expect("protocol features");
    assert!(!pf.contains(P::CONFIG));
    vmm.shutdown().expect("clean disconnect");

    let dir = scratch_dir("tag");
    let mut cfg = xvirtiofsd::vhost_user::DeviceConfig::new(3);
    cfg.tag = Some("myfs".into());
    let mut vmm = Vmm::start_with(&dir, cfg);
    vmm.frontend.set_owner().expect("set_owner");
    let features = vmm.frontend.get_features().expect("features");
    vmm.frontend.set_features(features).expect("set features");
    let pf = vmm
        .frontend
        .get_protocol_features()
        .expect("protocol features");
    assert!(pf.contains(P::CONFIG));
    vmm.frontend
        .set_protocol_features(P::CONFIG | P::MQ)
        .expect("ack CONFIG");
    let (_, space) = vmm
        .frontend
        .get_config(0, 40, VhostUserConfigFlags::empty(), &[0u8; 40])
        .expect("GET_CONFIG");
    assert_eq!(&space[..4], b"myfs");
    assert!(
        space[4..36].iter().all(|&b| b == 0),
        "NUL-padded to 36 bytes"
    );
    assert_eq!(
        u32::from_le_bytes(space[36..40].try_into().unwrap()),
        2,
        "request queues"
    );
    // Part of it, as a driver reads one field.
    let (_, part) = vmm
        .frontend
        .get_config(36, 4, VhostUserConfigFlags::empty(), &[0u8; 4])
        .expect("GET_CONFIG of num_request_queues");
    assert_eq!(part, 2u32.to_le_bytes().to_vec());
    assert_eq!(vmm.frontend.get_queue_num().expect("still serving"), 3);
    vmm.shutdown().expect("clean disconnect");
}
