// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "fault-injection")]
//! The crash-restart holder (`--crash-restart`, issue 45): the real binary
//! of a `fault-injection` build, a front-end played by this test over its
//! vhost-user socket. Run with
//! `cargo test -p xvirtiofsd --features fault-injection --test holder`
//! (`make test` does). Needs root.
//!
//! - A restart whose rebuild outlasts the holder's READY wait (15 s) but
//!   shows progress is waited for and serves; one that shows none is
//!   stopped, and the crash loop ends in EIO, never a hang.
//! - A malformed message to the holder closes that socket: the serving
//!   process goes on (its sends fail), it never waits for a reader.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use vhost::VhostBackend;
use vm_memory::{Bytes, GuestAddress};
use xvfs_fs::abi::opcode;

/// The holder's READY wait (`crash_restart::holder::READY_WAIT`).
const READY_WAIT: Duration = xvirtiofsd::crash_restart::holder::READY_WAIT;

struct Setup {
    dir: PathBuf,
    share: PathBuf,
    ctl: PathBuf,
    sock: PathBuf,
    log: PathBuf,
}

/// The holder; killed (its serving process follows) when the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = scratch_dir(&format!("holder-{name}"));
        let share = dir.join("share");
        std::fs::create_dir_all(&share).unwrap();
        Setup {
            ctl: dir.join("ctl.sock"),
            sock: dir.join("vhost.sock"),
            log: dir.join("daemon.log"),
            dir,
            share,
        }
    }

    /// Starts the daemon with `--crash-restart`, `extra` and
    /// XVFS_CRASH_FAULT=`fault`.
    fn start(&self, extra: &[&str], fault: Option<&str>) -> Running {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"));
        cmd.arg(format!("--shared-dir={}", self.share.display()))
            .arg(format!("--socket-path={}", self.sock.display()))
            .arg(format!("--control={}", self.ctl.display()))
            .arg("--crash-restart")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap());
        if let Some(f) = fault {
            cmd.env("XVFS_CRASH_FAULT", f);
        }
        let child = Running(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.sock.exists() {
            assert!(Instant::now() < deadline, "no socket:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn serving_pid(&self) -> u32 {
        let s = xvirtiofsd::ops::control::query_status(&self.ctl).expect("status");
        let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap();
        v["serving_pid"].as_u64().expect("serving_pid") as u32
    }

    /// SIGKILL to the serving process (the crash).
    fn crash(&self) {
        let pid = self.serving_pid();
        // SAFETY: kill with integer arguments.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    }
}

fn connect(s: &Setup) -> Vmm {
    let mut vmm = Vmm::connect(&s.sock, 2);
    vmm.negotiate();
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    vmm
}

/// LOOKUP `name` in the root: its node id.
fn lookup(vmm: &mut Vmm, name: &str) -> u64 {
    let (err, e) = vmm.fuse(1, opcode::LOOKUP, 1, format!("{name}\0").as_bytes());
    assert_eq!(err, 0, "LOOKUP {name}");
    u64::from_ne_bytes(e[0..8].try_into().unwrap())
}

/// GETATTR of `node`, waiting up to `wait` for the answer: its error
/// (None: no answer).
fn getattr_within(vmm: &mut Vmm, node: u64, wait: Duration) -> Option<i32> {
    let req = fuse_request(opcode::GETATTR, 77, node, &[0u8; 16]);
    let inb = vmm.alloc(req.len() as u64);
    let outb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
    vmm.kick(1);
    vmm.wait_used_for(1, wait.as_millis() as u64)?;
    let mut out = [0u8; 16];
    vmm.mem.read_slice(&mut out, GuestAddress(outb)).unwrap();
    Some(i32::from_ne_bytes(out[4..8].try_into().unwrap()))
}

/// Runs `f` on a thread; panics if it takes longer than `limit` (a daemon
/// that stopped answering).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: no answer within {} s", limit.as_secs()))
}

/// A rebuild that outlasts the holder's READY wait but shows progress
/// (XVFS_CRASH_FAULT=slow-rebuild: 500 ms per journal entry, 40 entries)
/// is waited for: the guest's request is served after it, with no second
/// restart and no bad message.
#[test]
fn a_slow_rebuild_that_progresses_is_waited_for() {
    let s = Setup::new("slow");
    const FILES: usize = 40;
    for i in 0..FILES {
        std::fs::write(s.share.join(format!("f{i}")), b"x").unwrap();
    }
    let child = s.start(&[], Some("slow-rebuild:500"));
    let mut vmm = connect(&s);
    let nodes: Vec<u64> = (0..FILES)
        .map(|i| lookup(&mut vmm, &format!("f{i}")))
        .collect();
    s.crash();
    let t = Instant::now();
    let err = getattr_within(&mut vmm, nodes[7], Duration::from_secs(90));
    let took = t.elapsed();
    let log = s.log();
    assert_eq!(err, Some(0), "served after the rebuild:\n{log}");
    assert!(
        took > READY_WAIT,
        "the rebuild took {took:?}, less than the READY wait: no test"
    );
    assert_eq!(
        log.matches("crash restart: now serving as pid").count(),
        1,
        "{log}"
    );
    assert!(log.contains("is ready after"), "{log}");
    assert!(
        !log.contains("bad "),
        "a late READY is no bad message:\n{log}"
    );
    let (err, _) = vmm.fuse(1, opcode::GETATTR, nodes[39], &[0u8; 16]);
    assert_eq!(err, 0);
    drop(vmm);
    drop(child);
}

/// A rebuild that shows no progress (60 s on its first entry) is stopped
/// after the READY wait; more than N such restarts in a row
/// (`--crash-restart-limit 1/10`, whose 10 s window alone would never
/// fill) make the holder give up, and the guest gets EIO.
#[test]
fn a_stuck_rebuild_is_stopped_and_the_guest_gets_eio() {
    let s = Setup::new("stuck");
    std::fs::write(s.share.join("f"), b"x").unwrap();
    let child = s.start(&["--crash-restart-limit=1/10"], Some("slow-rebuild:60000"));
    let mut vmm = connect(&s);
    let node = lookup(&mut vmm, "f");
    s.crash();
    let err = getattr_within(&mut vmm, node, 4 * READY_WAIT);
    let log = s.log();
    assert_eq!(err, Some(-libc::EIO), "EIO, not a hang:\n{log}");
    assert_eq!(
        log.matches("showed no progress rebuilding for 15 s")
            .count(),
        4,
        "two stopped, each said twice:\n{log}"
    );
    assert!(
        log.contains("restarted processes in a row that never got ready: giving up"),
        "{log}"
    );
    drop(vmm);
    drop(child);
}

/// A malformed message on the checkpoint socket (before the 25th
/// checkpoint, after the queues are set up) closes it: every vhost-user
/// message after it is still answered (the serving process's checkpoints
/// fail, they do not wait), and a crash then is given up from the last
/// good checkpoint: EIO.
#[test]
fn a_bad_checkpoint_message_closes_the_socket() {
    let s = Setup::new("badcp");
    std::fs::write(s.share.join("f"), b"x").unwrap();
    let child = s.start(&[], Some("bad-checkpoint:25"));
    let mut vmm = connect(&s);
    let node = lookup(&mut vmm, "f");
    let vmm = within(Duration::from_secs(60), "2000 GET_FEATURES", move || {
        for _ in 0..2000 {
            vmm.frontend.get_features().expect("GET_FEATURES");
        }
        vmm
    });
    let mut vmm = vmm;
    let log = s.log();
    assert_eq!(log.matches("bad message from pid").count(), 1, "{log}");
    assert!(log.contains("the holder takes no checkpoint"), "{log}");
    let (err, _) = vmm.fuse(1, opcode::GETATTR, node, &[0u8; 16]);
    assert_eq!(err, 0);
    s.crash();
    let err = getattr_within(&mut vmm, node, Duration::from_secs(20));
    let log = s.log();
    assert_eq!(err, Some(-libc::EIO), "{log}");
    assert!(log.contains("the last checkpoint is out of date"), "{log}");
    drop(vmm);
    drop(child);
}

/// A malformed message on the keeper socket closes it: with
/// `--crash-restart-keep all` every new node is a KEEP, and 2000 of them
/// are all served.
#[test]
fn a_bad_keep_message_closes_the_socket() {
    let s = Setup::new("badkeep");
    const FILES: usize = 2000;
    for i in 0..FILES {
        std::fs::write(s.share.join(format!("f{i}")), b"x").unwrap();
    }
    let child = s.start(&["--crash-restart-keep=all"], Some("bad-keep"));
    let vmm = connect(&s);
    let mut vmm = within(Duration::from_secs(60), "2000 LOOKUPs", move || {
        let mut vmm = vmm;
        for i in 0..FILES {
            // A small reply buffer each: 2000 fit in the test's memory.
            let req = fuse_request(opcode::LOOKUP, 7, 1, format!("f{i}\0").as_bytes());
            assert_eq!(vmm.fuse_raw(1, &req, 4096).0, 0, "LOOKUP f{i}");
        }
        vmm
    });
    let log = s.log();
    assert_eq!(log.matches("bad keep message from pid").count(), 1, "{log}");
    assert!(log.contains("the holder keeps no more files"), "{log}");
    let (err, _) = vmm.fuse(1, opcode::GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0);
    drop(vmm);
    drop(child);
}
