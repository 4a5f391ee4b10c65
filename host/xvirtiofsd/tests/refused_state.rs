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
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use virtio_fs_ext::config::{CacheMode, LogLevel, PollMode, SandboxMode, SeccompAction};
use virtio_fs_ext::frame::{self, FrameError};
use virtio_fs_ext::handover;
use virtio_fs_ext::state::{ConfigState, DaemonState, StateError};
use xvirtiofsd::control::{self, HandoverSlot, StatusInfo};
use xvirtiofsd::upgrade::{self, Outgoing};
use xvirtiofsd::vhost_user::{Connection, Device, DeviceConfig, ServeEnd, VhostUserError};

fn config(dir: &Path) -> ConfigState {
    ConfigState {
        shared_dir: dir.display().to_string(),
        cache: CacheMode::Auto,
        xattr: false,
        readonly: false,
        writeback: false,
        allow_direct_io: false,
        readdirplus: true,
        sandbox: SandboxMode::None,
        seccomp: SeccompAction::None,
        queues: 1,
        poll_mode: PollMode::Never,
        poll_us: 0,
        poll_cpu_max: 100,
        syslog: false,
        preserve_noatime: false,
        queue_cpus: Vec::new(),
        metrics_file: None,
        log_level: LogLevel::Info,
        socket_path: None,
    }
}

/// Serves like `Daemon::serve`: a handover request on the control socket
/// interrupts the message loop and runs the old side of the handover, which
/// must fail here.
fn serve_with_control(
    dir: PathBuf,
    control_path: PathBuf,
) -> impl FnOnce(Device, UnixStream) -> Result<(), VhostUserError> + Send + 'static {
    move |mut dev, theirs| {
        let mut conn = Connection::new(theirs);
        let wake = Arc::new(xvirtiofsd::sys::eventfd().expect("eventfd"));
        let slot: HandoverSlot = Arc::new(Mutex::new(None));
        let listener = control::bind(&control_path).expect("control socket");
        let status = Arc::new(StatusInfo {
            version: "test",
            started_unix_ms: 0,
            upgrades: 0,
            shared_dir: String::new(),
            connection: String::new(),
            control_path: control_path.display().to_string(),
            stats: OnceLock::new(),
        });
        let spawn = |l| {
            control::spawn(l, Arc::clone(&status), Arc::clone(&slot), Arc::clone(&wake))
                .expect("spawn")
        };
        let mut thread = spawn(listener);
        let cfg = config(&dir);
        let r = loop {
            match conn.serve(&mut dev, Some(wake.as_fd())) {
                Ok(ServeEnd::Disconnected) => break Ok(()),
                Ok(ServeEnd::Interrupted) => {
                    let _ = xvirtiofsd::sys::eventfd_drain(wake.as_fd());
                    let Some(peer) = slot.lock().expect("slot").take() else {
                        continue;
                    };
                    let server = Arc::clone(dev.server_arc());
                    let out = Outgoing {
                        config: &cfg,
                        started_unix_ms: 0,
                        upgrades: 0,
                        control_fd: None,
                        control_path: None,
                        pid_files: &[],
                        server: &server,
                    };
                    let handed = upgrade::hand_over(&out, &mut dev, &conn, peer);
                    assert!(handed.is_err(), "the successor refused the state");
                    // The control thread stops once it queued a handover.
                    thread = spawn(thread.join().expect("control thread"));
                }
                Err(e) => break Err(e),
            }
        };
        dev.stop_all();
        r
    }
}

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

/// Byte offset of `config.cache` in the postcard payload: the fields before
/// it, encoded one after the other.
fn cache_offset(st: &DaemonState) -> usize {
    let len = |b: postcard::Result<Vec<u8>>| b.expect("encode").len();
    len(postcard::to_stdvec(&st.writer_version))
        + len(postcard::to_stdvec(&st.writer_pid))
        + len(postcard::to_stdvec(&st.started_unix_ms))
        + len(postcard::to_stdvec(&st.upgrades))
        + len(postcard::to_stdvec(&st.config.shared_dir))
}

fn getattr_ok(vmm: &mut Vmm) {
    let (err, _) = vmm.fuse(1, FUSE_GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "the running daemon keeps serving");
}

#[test]
fn a_state_the_successor_cannot_read_is_refused_and_the_daemon_serves_on() {
    let dir = scratch_dir("refused-state");
    let control_path = dir.with_extension("ctl.sock");
    let serve = serve_with_control(dir.clone(), control_path.clone());
    let mut vmm = Vmm::start_serving(&dir, DeviceConfig::new(2), serve);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    getattr_ok(&mut vmm);

    let err = successor(&control_path, |st, payload| {
        let mut p = payload.to_vec();
        let at = cache_offset(st);
        assert_eq!(p[at], 1, "CacheMode::Auto is variant 1");
        p[at] = 9;
        frame::encode(frame::FORMAT_VERSION, &p)
    });
    assert!(matches!(err, StateError::Decode(_)), "{err:?}");
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
    assert!(matches!(err, StateError::Decode(_)), "{err:?}");
    getattr_ok(&mut vmm);

    vmm.shutdown().expect("clean disconnect");
    let _ = std::fs::remove_file(&control_path);
}
