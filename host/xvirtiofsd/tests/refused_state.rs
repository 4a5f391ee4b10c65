// SPDX-License-Identifier: Apache-2.0
//! A successor that cannot read the state it receives (an unknown enum
//! value, another format version, a truncated field) refuses it with a clear
//! error, and the running daemon resumes its queues and keeps serving.
//!
//! The daemon runs in this process with a control socket; the test plays the
//! successor over it, as `xvirtiofsd --handover-from` would.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;

use common::*;
use virtio_fs_ext::frame::{self, FrameError};
use virtio_fs_ext::handover;
use virtio_fs_ext::state::{DaemonState, StateError};
use xvirtiofsd::vhost_user::DeviceConfig;

/// Plays the successor: asks for the state, spoils it with `spoil`, decodes
/// it (which must fail), and tells the old daemon why.
fn successor(
    control_path: &Path,
    spoil: impl FnOnce(&DaemonState, &[u8]) -> Vec<u8>,
) -> StateError {
    let peer = UnixStream::connect(control_path).expect("connect");
    (&peer).write_all(b"handover\n").expect("handover");
    handover::send(&peer, handover::HELLO, b"test successor", &[]).expect("HELLO");
    let (blob, _fds) = handover::recv_state(&peer).expect("state");
    let st = DaemonState::decode(&blob).expect("the blob as sent is valid");
    let (_, payload) = frame::decode(&blob).expect("envelope");
    let spoilt = spoil(&st, payload);
    let err = DaemonState::decode(&spoilt).expect_err("the spoilt state must be refused");
    let reason = xvirtiofsd::error_chain(&err);
    handover::send(&peer, handover::FAILED, reason.as_bytes(), &[]).expect("FAILED");
    // The old daemon answers ABORT or closes; either way it resumes.
    let _ = handover::recv(&peer);
    err
}

/// A format-8 payload as its parts `(id, version, optional, bytes)`
/// (postcard encodes a tuple as it does a struct of the same fields).
type Parts = Vec<(u16, u16, bool, Vec<u8>)>;

/// The id of the serving part, whose first field is the cache mode.
const SERVING_PART: u16 = 3;

fn getattr_ok(vmm: &mut Vmm) {
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "the running daemon keeps serving");
}

#[test]
fn a_state_the_successor_cannot_read_is_refused_and_the_daemon_serves_on() {
    let dir = scratch_dir("refused-state");
    let control_path = dir.with_extension("ctl.sock");
    let serve = serve_refusing_handovers(handover_config(&dir), control_path.clone(), None);
    let mut vmm = Vmm::start_serving(&dir, DeviceConfig::new(2), serve);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    getattr_ok(&mut vmm);

    let err = successor(&control_path, |_, payload| {
        let mut parts: Parts = postcard::from_bytes(payload).expect("parts");
        let serving = parts
            .iter_mut()
            .find(|p| p.0 == SERVING_PART)
            .expect("serving part");
        assert_eq!(serving.3[0], 1, "CacheMode::Auto is variant 1");
        serving.3[0] = 9;
        frame::encode(
            frame::FORMAT_VERSION,
            &postcard::to_stdvec(&parts).expect("encode"),
        )
    });
    assert!(
        matches!(
            err,
            StateError::Part(virtio_fs_ext::parts::PartError::Decode {
                name: "settings.serving",
                ..
            })
        ),
        "{err:?}"
    );
    getattr_ok(&mut vmm);

    let err = successor(&control_path, |_, payload| {
        frame::encode(frame::FORMAT_VERSION + 1, payload)
    });
    assert!(
        matches!(err, StateError::Frame(FrameError::Version(v)) if v == frame::FORMAT_VERSION + 1),
        "{err:?}"
    );
    assert!(
        xvirtiofsd::error_chain(&err).contains("format version"),
        "{}",
        xvirtiofsd::error_chain(&err)
    );
    getattr_ok(&mut vmm);

    let err = successor(&control_path, |_, payload| {
        frame::encode(frame::FORMAT_VERSION, &payload[..payload.len() - 1])
    });
    assert!(
        matches!(
            err,
            StateError::Part(virtio_fs_ext::parts::PartError::List(_))
        ),
        "{err:?}"
    );
    getattr_ok(&mut vmm);

    vmm.shutdown().expect("clean disconnect");
    let _ = std::fs::remove_file(&control_path);
}

/// A successor's HELLO that names the state formats it reads: the running
/// daemon writes the newest of them it can (format 7 for a 0.2.0 successor,
/// whose HELLO names none, or for one that reads 7 only), and refuses with
/// ABORT, before anything stops, when none is common or when format 7
/// cannot carry its settings (`--crash-restart-keep all`): a rollback to
/// 0.2.0 from such a daemon. It serves on either way.
#[test]
fn the_state_format_follows_what_the_successor_reads() {
    use virtio_fs_ext::config::CrashRestartKeep;
    let dir = scratch_dir("state-format-choice");
    let control_path = dir.with_extension("ctl.sock");
    let mut cfg = handover_config(&dir);
    cfg.operations.crash_restart_keep = CrashRestartKeep::All;
    let serve = serve_refusing_handovers(cfg, control_path.clone(), None);
    let mut vmm = Vmm::start_serving(&dir, DeviceConfig::new(2), serve);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    getattr_ok(&mut vmm);

    // hello: what the successor says; want: Ok(format) or Err(ABORT text).
    let cases: [(&[u8], Result<u32, &str>); 4] = [
        (b"xvirtiofsd 9.9.9 pid 1 reads-state 7-8", Ok(8)),
        (
            b"xvirtiofsd 9.9.9 pid 1 reads-state 9-12",
            Err("reads state formats 9-12, this daemon writes 7-8"),
        ),
        (
            b"xvirtiofsd 9.9.9 pid 1 reads-state 7-7",
            Err("--crash-restart-keep all"),
        ),
        (
            b"xvirtiofsd 0.2.0 pid 1",
            Err("state format 7 cannot carry this state"),
        ),
    ];
    for (hello, want) in cases {
        let peer = UnixStream::connect(&control_path).expect("connect");
        (&peer).write_all(b"handover\n").expect("handover");
        handover::send(&peer, handover::HELLO, hello, &[]).expect("HELLO");
        match want {
            Ok(version) => {
                let (blob, _fds) = handover::recv_state(&peer).expect("state");
                assert_eq!(frame::decode(&blob).expect("envelope").0, version);
                handover::send(&peer, handover::FAILED, b"test", &[]).expect("FAILED");
                let _ = handover::recv(&peer);
            }
            Err(why) => {
                let msg = handover::recv(&peer).expect("an answer");
                assert_eq!(
                    msg.kind,
                    handover::ABORT,
                    "{:?}",
                    String::from_utf8_lossy(hello)
                );
                let text = String::from_utf8_lossy(&msg.payload);
                assert!(text.contains(why), "{text}");
            }
        }
        getattr_ok(&mut vmm);
    }

    vmm.shutdown().expect("clean disconnect");
    let _ = std::fs::remove_file(&control_path);
}
