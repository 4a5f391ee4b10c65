// SPDX-License-Identifier: Apache-2.0
//! The window across a live upgrade and a crash restart: the real binary
//! (default sandbox and filter; needs root), this test playing QEMU on its
//! vhost-user socket and on the back-end channel.
//!
//! - A successor and a restarted process classify guest-memory regions as
//!   the first process did, whatever nodes the guest forgot: a chunk of the
//!   window stays unmapped, so a truncate under it cannot fault them.
//! - A map waiting for QEMU when the handover starts (QEMU itself waits for
//!   this daemon's answer to the ADD_MEM_REG of the map before) gives no 5 s
//!   pause, and its late reply is not taken for the successor's next
//!   request; nor, after a crash restart, is a reply the dead process was
//!   owed.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vhost::vhost_user::VhostUserFrontend;
use vhost::vhost_user::VhostUserProtocolFeatures as P;
use vm_memory::{Bytes, GuestAddress};
use xvfs_fs::abi::opcode;

use super::common::*;
use super::qemu::*;

const BIN: &str = env!("CARGO_BIN_EXE_xvirtiofsd");

/// A daemon of the real binary with a window, and its files.
struct Served {
    dir: PathBuf,
    share: PathBuf,
    sock: PathBuf,
    ctl: PathBuf,
    log: PathBuf,
    extra: Vec<String>,
    /// The started process (killed, with what it started, at the end).
    child: Option<Child>,
}

impl Served {
    /// Starts it on a share holding `files` (each of two chunks).
    fn start(name: &str, files: &[&str], extra: &[&str]) -> Served {
        let dir = scratch_dir(name);
        let share = dir.join("share");
        std::fs::create_dir_all(&share).unwrap();
        for f in files {
            std::fs::write(share.join(f), vec![7u8; 2 * CHUNK as usize]).unwrap();
        }
        let mut s = Served {
            sock: dir.join("vhost.sock"),
            ctl: dir.join("ctl.sock"),
            log: dir.join("daemon.log"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            share,
            dir,
            child: None,
        };
        s.child = Some(
            Command::new(BIN)
                .args(s.args())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&s.log).unwrap())
                .spawn()
                .unwrap(),
        );
        s
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![
            format!("--shared-dir={}", self.share.display()),
            format!("--socket-path={}", self.sock.display()),
            format!("--control={}", self.ctl.display()),
            "--tag=dax".into(),
            "--dax-window=8M".into(),
            "--queues=1".into(),
        ];
        a.extend(self.extra.iter().cloned());
        a
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `xvirtiofsd upgrade` to the same binary, started (not awaited).
    fn upgrade(&self) -> Child {
        Command::new(BIN)
            .arg("upgrade")
            .arg(format!("--control={}", self.ctl.display()))
            .arg(format!("--binary={BIN}"))
            .arg("--")
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.dir.join("upgrade.out")).unwrap())
            .stderr(std::fs::File::create(self.dir.join("upgrade.err")).unwrap())
            .spawn()
            .unwrap()
    }

    /// Waits for an upgrade started with [`Served::upgrade`] to succeed.
    fn upgraded(&self, mut up: Child) {
        let status = up.wait().unwrap();
        assert!(
            status.success(),
            "upgrade: {}\n{}",
            std::fs::read_to_string(self.dir.join("upgrade.err")).unwrap_or_default(),
            self.log()
        );
    }

    fn serving_pid(&self) -> Option<u32> {
        let s = xvirtiofsd::ops::control::query_status(&self.ctl).ok()?;
        let v: serde_json::Value = serde_json::from_str(s.trim()).ok()?;
        v["serving_pid"].as_u64().map(|p| p as u32)
    }

    /// Kills the serving process (`--crash-restart`) and waits until
    /// another serves.
    fn crash(&self) {
        let first = self.serving_pid().expect("serving pid");
        // SAFETY: kill with integer arguments.
        assert_eq!(unsafe { libc::kill(first as i32, libc::SIGKILL) }, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.serving_pid().is_none_or(|p| p == first) {
            assert!(Instant::now() < deadline, "no restart:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A share file, open for reading and writing (as QEMU holds it).
    fn file(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.share.join(name))
            .unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The front-end connected as QEMU 11.1 connects the test device, and
/// QEMU's main loop on the back-end channel.
fn connect(s: &Served) -> (Vmm, Qemu) {
    let mut vmm = Vmm::connect(&s.sock, 2);
    let want = P::SHMEM | P::BACKEND_REQ | P::BACKEND_SEND_FD | P::CONFIG | P::REPLY_ACK;
    vmm.negotiate_with(u64::MAX, want | P::MQ | P::CONFIGURE_MEM_SLOTS);
    let qemu = Qemu::serve(backend_channel(&mut vmm));
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    (vmm, qemu)
}

/// The guest maps `node` at `moffset`, and QEMU announces the chunk in
/// guest memory (ADD_MEM_REG); then the guest removes the mapping, and the
/// lifecycle step comes before QEMU's REM_MEM_REG; the guest has forgotten
/// the node by then.
fn chunk_of_a_forgotten_node(vmm: &mut Vmm, s: &Served, name: &str, moffset: u64) {
    let (node, _) = lookup(vmm, name);
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(0, moffset, RW));
    assert_eq!(err, 0, "mapped");
    let f = s.file(name);
    vmm.frontend
        .add_mem_region(&chunk_region(&f, moffset))
        .expect("ADD_MEM_REG");
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(moffset, CHUNK)]));
    assert_eq!(err, 0, "unmapped");
    forget(vmm, node, 1);
}

/// After the step: a host truncate of the file, and a reply buffer in the
/// chunk. Mapped, the chunk would fault the serving process.
fn chunk_stays_unmapped(vmm: &mut Vmm, s: &Served, name: &str, moffset: u64, step: &str) {
    let f = s.file(name);
    f.set_len(0).unwrap();
    assert_eq!(
        getattr_into(vmm, CHUNK_GPA + moffset),
        Some(0),
        "{step}: answered, nothing written into the chunk\n{}",
        s.log()
    );
    vmm.frontend
        .remove_mem_region(&chunk_region(&f, moffset))
        .expect("REM_MEM_REG");
    let (err, _) = vmm.fuse(1, opcode::GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "{step}: serving on");
}

#[test]
fn a_successor_never_maps_a_chunk_whose_node_was_forgotten() {
    let s = Served::start("dax-forget-upgrade", &["data", "kept"], &[]);
    let (mut vmm, qemu) = connect(&s);
    chunk_of_a_forgotten_node(&mut vmm, &s, "data", 0);
    s.upgraded(s.upgrade());
    chunk_stays_unmapped(&mut vmm, &s, "data", 0, "after a live upgrade");

    // A mapping QEMU still has, of a node the guest forgot: the successor
    // takes it over (no refusal of the upgrade), and passes its removal on.
    let (kept, _) = lookup(&mut vmm, "kept");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, kept, &setup(0, CHUNK, RW));
    assert_eq!(err, 0);
    forget(&mut vmm, kept, 1);
    s.upgraded(s.upgrade());
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(CHUNK, CHUNK)]));
    assert_eq!(err, 0, "the successor knows the mapping");
    assert_eq!(qemu.at(CHUNK), None);
    drop(vmm);
}

#[test]
fn a_restarted_process_never_maps_a_chunk_whose_node_was_forgotten() {
    let s = Served::start("dax-forget-crash", &["data"], &["--crash-restart"]);
    let (mut vmm, _qemu) = connect(&s);
    chunk_of_a_forgotten_node(&mut vmm, &s, "data", 0);
    s.crash();
    chunk_stays_unmapped(&mut vmm, &s, "data", 0, "after a crash restart");
    drop(vmm);
}

/// Posts SETUPMAPPING of `node` at `moffset` without waiting; returns the
/// reply's guest address.
fn post_map(vmm: &mut Vmm, node: u64, moffset: u64) -> u64 {
    let req = fuse_request(opcode::SETUPMAPPING, 40, node, &setup(0, moffset, RW));
    let (inb, outb) = (vmm.alloc(req.len() as u64), vmm.alloc(4096));
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
    vmm.kick(1);
    outb
}

/// The error of the reply at `outb` once it is used.
fn posted_error(vmm: &mut Vmm, outb: u64) -> i32 {
    let (_, used) = vmm.wait_used(1).expect("the map is answered");
    assert!(used >= 16, "a reply header");
    let mut out = [0u8; 16];
    vmm.mem.read_slice(&mut out, GuestAddress(outb)).unwrap();
    i32::from_ne_bytes(out[4..8].try_into().unwrap())
}

#[test]
fn a_map_waiting_at_a_handover_costs_no_pause_and_its_reply_is_owed() {
    let s = Served::start("dax-handover", &["a", "b"], &[]);
    let (mut vmm, qemu) = connect(&s);
    let (a, _) = lookup(&mut vmm, "a");
    let (b, _) = lookup(&mut vmm, "b");
    let ino_b = std::fs::metadata(s.share.join("b")).unwrap().ino();
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, a, &setup(0, CHUNK, RW));
    assert_eq!(err, 0);
    assert_eq!(qemu.next(), (SHMEM_MAP, CHUNK));

    // QEMU sends ADD_MEM_REG for that map and waits for the answer; a map
    // sent meanwhile waits for QEMU. The handover starts in between.
    qemu.held.store(true, Ordering::SeqCst);
    let outb = post_map(&mut vmm, a, 0);
    assert_eq!(qemu.next(), (SHMEM_MAP, 0));
    let up = s.upgrade();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.log().contains("upgrade: handing over to") {
        assert!(Instant::now() < deadline, "no handover:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    let fa = s.file("a");
    vmm.frontend
        .add_mem_region(&chunk_region(&fa, CHUNK))
        .expect("ADD_MEM_REG, answered by the successor");
    // Answered, QEMU reads the back-end channel again: the map is made.
    qemu.held.store(false, Ordering::SeqCst);
    s.upgraded(up);
    assert_ne!(posted_error(&mut vmm, outb), 0, "the map gave up");

    // The guest maps another file there. Told it is mapped, QEMU must have
    // that file there (not the late map's).
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, b, &setup(0, 0, RW));
    assert_eq!(
        (err, qemu.at(0)),
        (0, Some(ino_b)),
        "the guest's map and what QEMU has at 0"
    );
    let pause = s
        .log()
        .lines()
        .find_map(|l| {
            let rest = l.split("handover complete in ").nth(1)?;
            rest.split(' ').next()?.parse::<u64>().ok()
        })
        .expect("the handover's pause in the log");
    assert!(pause < 2_000_000, "the guest paused {pause} µs");
    drop(vmm);
}

#[test]
fn a_reply_owed_before_a_crash_restart_is_not_taken_for_a_new_one() {
    let s = Served::start("dax-crash-late", &["a", "b"], &["--crash-restart"]);
    let (mut vmm, qemu) = connect(&s);
    let (a, _) = lookup(&mut vmm, "a");
    let (b, _) = lookup(&mut vmm, "b");
    let ino_a = std::fs::metadata(s.share.join("a")).unwrap().ino();
    let ino_b = std::fs::metadata(s.share.join("b")).unwrap().ino();

    // The serving process dies while a map waits for QEMU, which answers
    // once the next process serves.
    qemu.held.store(true, Ordering::SeqCst);
    let outb = post_map(&mut vmm, a, 0);
    assert_eq!(qemu.next(), (SHMEM_MAP, 0));
    s.crash();
    qemu.held.store(false, Ordering::SeqCst);
    // The restarted process runs the map again, and it is made.
    assert_eq!(posted_error(&mut vmm, outb), 0, "\n{}", s.log());
    assert_eq!(qemu.at(0), Some(ino_a));
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, b, &setup(0, 0, RW));
    assert_eq!((err, qemu.at(0)), (0, Some(ino_b)), "\n{}", s.log());
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(0, CHUNK)]));
    assert_eq!((err, qemu.at(0)), (0, None));
    drop(vmm);
}
