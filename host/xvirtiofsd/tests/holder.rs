// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "fault-injection")]
//! The crash-restart holder (`--crash-restart`, issue 45): the real binary
//! of a `fault-injection` build, a front-end played by this test over its
//! vhost-user socket (and, with a DAX window, QEMU's end of the back-end
//! channel). Run with
//! `cargo test -p xvirtiofsd --features fault-injection --test holder`
//! (`make test` does). Needs root.
//!
//! - A restart whose rebuild outlasts the holder's READY wait (15 s) but
//!   shows progress is waited for and serves; one that shows none is
//!   stopped, and the crash loop ends in EIO, never a hang.
//! - A malformed message to the holder closes that socket: the serving
//!   process goes on (its sends fail), it never waits for a reader.
//! - A holder that gave up answers every request with an error, DAX window
//!   and all, as an unprivileged uid in a user namespace of its own, on an
//!   empty root, with no share file mapped.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::VhostUserFrontend;
use vhost::vhost_user::VhostUserProtocolFeatures as P;
use vhost::VhostBackend;
use vm_memory::{Bytes, GuestAddress};
use xvfs_fs::abi::{init_flags, opcode, setupmapping_flags, SetupMappingIn, Wire};

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

const WINDOW: u64 = 8 << 20;
const CHUNK: u64 = 2 << 20;
const CHUNK_GPA: u64 = 0x1_0000_0000;

fn setup_mapping(node: u64, vmm: &mut Vmm) -> i32 {
    let m = SetupMappingIn {
        fh: u64::MAX,
        foffset: 0,
        len: CHUNK,
        flags: setupmapping_flags::READ | setupmapping_flags::WRITE,
        moffset: 0,
    };
    vmm.fuse(1, opcode::SETUPMAPPING, node, &m.to_bytes()).0
}

/// QEMU's side of the back-end channel: answers one SHMEM_MAP with 0.
fn answer_one_map(qemu: &UnixStream) {
    use std::io::{Read, Write};
    let mut hdr = [0u8; 12];
    let mut fds = [0i32; 4];
    let mut iov = [libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: hdr.len(),
    }];
    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    // SAFETY: the iovec points at `hdr`, which outlives the call; the
    // descriptors received are closed below.
    let (n, nfds) = unsafe { qemu.recv_with_fds(&mut iov, &mut fds) }.expect("recv");
    for &fd in &fds[..nfds] {
        // SAFETY: received for this process, closed once.
        unsafe { libc::close(fd) };
    }
    assert_eq!(n, 12);
    let req = u32::from_ne_bytes(hdr[0..4].try_into().unwrap());
    assert_eq!(req, 9, "SHMEM_MAP");
    let mut body = vec![0u8; u32::from_ne_bytes(hdr[8..12].try_into().unwrap()) as usize];
    (&*qemu).read_exact(&mut body).unwrap();
    let mut m = Vec::new();
    m.extend_from_slice(&9u32.to_ne_bytes());
    m.extend_from_slice(&0x5u32.to_ne_bytes());
    m.extend_from_slice(&8u32.to_ne_bytes());
    m.extend_from_slice(&0u64.to_ne_bytes());
    (&*qemu).write_all(&m).unwrap();
}

fn status_ids(pid: u32, field: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in {status}"));
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect()
}

/// Whether a process of this test's could make a user namespace of its
/// own (`unshare --user`, util-linux): not in a chroot, nor where the
/// kernel or a container forbids it.
fn user_namespaces_here() -> bool {
    std::process::Command::new("unshare")
        .args(["--user", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success())
}

/// The holder gives up (`--crash-restart-limit 1/600`, the restarted
/// process dies at once) while the guest has a file mapped through the
/// DAX window, the chunk in guest memory as QEMU adds it (and the guest
/// has forgotten the file's node). It answers
/// every FUSE request with EIO (SETUPMAPPING and REMOVEMAPPING too, with
/// nothing on the back-end channel) and every vhost-user message, never
/// faults on the chunk after a host truncate, and does so as uid 65534 in
/// a user namespace of its own, on an empty root, with no share file
/// mapped.
#[test]
fn a_holder_that_gave_up_refuses_everything_with_a_window() {
    use vhost::VhostUserMemoryRegionInfo;
    let s = Setup::new("giveup-dax");
    std::fs::write(s.share.join("data"), vec![7u8; 2 * CHUNK as usize]).unwrap();
    let data_ino = std::fs::metadata(s.share.join("data")).unwrap().ino();
    let child = s.start(
        &[
            "--crash-restart-limit=1/600",
            "--dax-window=8M",
            "--tag=dax",
        ],
        Some("die-on-restart"),
    );
    let holder = child.0.id();
    let mut vmm = Vmm::connect(&s.sock, 2);
    let acked = P::SHMEM | P::BACKEND_REQ | P::BACKEND_SEND_FD | P::CONFIG | P::REPLY_ACK;
    vmm.negotiate_with(u64::MAX, acked | P::MQ | P::CONFIGURE_MEM_SLOTS);
    assert_eq!(
        vmm.frontend.get_shmem_config().unwrap().memory_sizes[0],
        WINDOW
    );
    let (qemu, daemon) = UnixStream::pair().unwrap();
    vmm.frontend.set_backend_request_fd(&daemon).unwrap();
    vmm.frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    vmm.setup_queues(2);
    let low = (init_flags::MAP_ALIGNMENT | init_flags::INIT_EXT) as u32;
    let init = xvfs_fs::testing::init_in(41, low, 0).to_bytes();
    assert_eq!(vmm.fuse(1, opcode::INIT, 0, &init).0, 0);
    let node = lookup(&mut vmm, "data");
    let fe = std::thread::spawn(move || {
        answer_one_map(&qemu);
        qemu
    });
    assert_eq!(setup_mapping(node, &mut vmm), 0, "mapped");
    let qemu = fe.join().unwrap();
    // As QEMU does once it has mapped it: the chunk is guest memory.
    let data = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(s.share.join("data"))
        .unwrap();
    let chunk = VhostUserMemoryRegionInfo {
        guest_phys_addr: CHUNK_GPA,
        memory_size: CHUNK,
        userspace_addr: 0x7e00_0000_0000,
        mmap_offset: 0,
        mmap_handle: data.as_raw_fd(),
    };
    vmm.frontend.add_mem_region(&chunk).expect("ADD_MEM_REG");
    // The guest forgets the node: the chunk is the window's all the same.
    let forget = fuse_request(opcode::FORGET, 0, node, &1u64.to_ne_bytes());
    let inb = vmm.alloc(forget.len() as u64);
    vmm.mem.write_slice(&forget, GuestAddress(inb)).unwrap();
    vmm.post(0, &[(inb, forget.len() as u32, false)]);
    vmm.kick(0);
    assert_eq!(vmm.wait_used(0).expect("FORGET completed").1, 0);

    s.crash();
    let err = getattr_within(&mut vmm, node, Duration::from_secs(20));
    let log = s.log();
    assert_eq!(err, Some(-libc::EIO), "EIO, not a hang:\n{log}");
    assert!(
        log.contains("giving up (--crash-restart-limit 1/600)"),
        "{log}"
    );
    assert_eq!(setup_mapping(node, &mut vmm), -libc::EIO, "SETUPMAPPING");
    let mut rm = 1u32.to_ne_bytes().to_vec();
    rm.extend_from_slice(&0u64.to_ne_bytes());
    rm.extend_from_slice(&CHUNK.to_ne_bytes());
    assert_eq!(vmm.fuse(1, opcode::REMOVEMAPPING, 0, &rm).0, -libc::EIO);
    qemu.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        std::io::Read::read(&mut &qemu, &mut byte).is_err(),
        "nothing on the back-end channel"
    );
    // A host process shrinks the file; the guest points a reply there.
    data.set_len(0).unwrap();
    let req = fuse_request(opcode::GETATTR, 90, node, &[0u8; 16]);
    let inb = vmm.alloc(req.len() as u64);
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(
        1,
        &[(inb, req.len() as u32, false), (CHUNK_GPA, 4096, true)],
    );
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("answered").1, 0, "nothing written");

    // Who answers: uid and gid 65534, its own user namespace, an empty root,
    // and no share file mapped.
    assert_eq!(status_ids(holder, "Uid:"), vec![65534; 4]);
    assert_eq!(status_ids(holder, "Gid:"), vec![65534; 4]);
    if user_namespaces_here() {
        let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/user")).unwrap();
        assert_ne!(
            ns(&holder.to_string()),
            ns("self"),
            "a user namespace of its own"
        );
        let root: Vec<_> = std::fs::read_dir(format!("/proc/{holder}/root"))
            .unwrap()
            .collect();
        assert!(root.is_empty(), "an empty root: {root:?}");
    } else {
        // No process here can make one (this test runs in a chroot, as
        // under make test-fresh: unshare(2) refuses CLONE_NEWUSER there):
        // the documented fallback, said in the log.
        let log = s.log();
        assert!(
            log.contains("no user namespace for the holder"),
            "the holder says it has no user namespace:\n{log}"
        );
    }
    let maps = std::fs::read_to_string(format!("/proc/{holder}/maps")).unwrap();
    assert!(
        !maps.lines().any(
            |l| l.split_whitespace().nth(4) == Some(&data_ino.to_string()) && l.contains("data")
        ),
        "the share file is not mapped:\n{maps}"
    );
    let status = std::fs::read_to_string(format!("/proc/{holder}/status")).unwrap();
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    // vhost-user messages are answered too; the chunk leaves as it came.
    vmm.frontend.remove_mem_region(&chunk).expect("REM_MEM_REG");
    vmm.frontend.get_vring_base(1).expect("GET_VRING_BASE");
    drop(vmm);
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st.code();
        }
        assert!(Instant::now() < deadline, "the holder did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(1), "the holder that gave up ends with status 1");
}
