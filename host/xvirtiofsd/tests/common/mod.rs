// SPDX-License-Identifier: Apache-2.0
//! A test VMM and guest driver in one: vhost's `Frontend` drives the daemon's
//! control plane over a socketpair, and `virtio_queue::mock::MockSplitQueue`
//! rings live in a memfd that both sides map.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_queue::desc::split::Descriptor as SplitDescriptor;
use virtio_queue::desc::RawDescriptor;
use vm_memory::{
    Address, Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion,
};
use vmm_sys_util::eventfd::EventFd;

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use virtio_fs_ext::config::{PollMode, SandboxMode, SeccompAction};
use virtio_fs_ext::settings::{Security, Serving, Settings};
use xvfs_fs::{Config, PassthroughFs};
use xvirtiofsd::ops::control::{self, HandoverSlot, StatusInfo};
use xvirtiofsd::upgrade::handover::{self, Outgoing};
use xvirtiofsd::vhost_user::{Connection, Device, DeviceConfig, ServeEnd, VhostUserError};
use xvirtiofsd::FsServer as Server;

pub const MEM_SIZE: usize = 64 << 20;
/// Where the front-end pretends guest memory sits in its address space.
pub const USER_BASE: u64 = 0x7f00_0000_0000;
pub const QUEUE_SIZE: u16 = 256;
const VRING_DESC_F_NEXT: u16 = 1;
pub const VRING_DESC_F_WRITE: u16 = 2;

pub const FUSE_INIT: u32 = 26;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_LOOKUP: u32 = 1;

/// A fresh directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xvfs-proto-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn memfd(size: usize) -> File {
    let name = std::ffi::CString::new("guest").expect("name");
    // SAFETY: valid name; the returned fd is checked and owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create failed");
    // SAFETY: fd was just created and is owned by nobody else.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(size as u64).expect("memfd size");
    f
}

/// The daemon side, running on its own thread.
pub struct Daemon {
    pub handle: JoinHandle<Result<(), VhostUserError>>,
}

/// The test's VMM + guest.
pub struct Vmm {
    pub frontend: Frontend,
    pub mem: GuestMemoryMmap,
    memfd: File,
    pub queues: Vec<TestQueue>,
    pub daemon: Option<Daemon>,
    /// The device's per-queue counters.
    pub stats: Vec<Arc<xvirtiofsd::ops::metrics::QueueStats>>,
    /// Next free guest address for request buffers.
    next_buf: u64,
}

pub struct TestQueue {
    pub desc: GuestAddress,
    pub avail: GuestAddress,
    pub used: GuestAddress,
    pub kick: EventFd,
    pub call: EventFd,
    /// Next free descriptor index.
    next_desc: u16,
    /// How many used entries we have consumed.
    pub seen_used: u16,
}

pub fn server_for(dir: &std::path::Path) -> Arc<Server> {
    let fs = PassthroughFs::new(Config {
        allow_direct_io: false,
        ..xvfs_fs::testing::config_for(dir)
    })
    .expect("passthrough fs");
    Arc::new(Server::new(fs))
}

impl Vmm {
    /// Starts a daemon offering `max_queues` virtqueues over a socketpair.
    pub fn start(dir: &std::path::Path, max_queues: usize) -> Vmm {
        Self::start_with(dir, DeviceConfig::new(max_queues))
    }

    /// Starts a daemon with a full device configuration.
    pub fn start_with(dir: &std::path::Path, cfg: DeviceConfig) -> Vmm {
        Self::start_serving(dir, cfg, |mut dev, theirs| {
            let mut conn = Connection::new(theirs);
            let r = conn.serve(&mut dev, None, &mut |_| {}).map(|_| ());
            dev.stop_all();
            r
        })
    }

    /// Starts a daemon whose thread runs `serve` on the device and its end
    /// of the socketpair.
    pub fn start_serving(
        dir: &std::path::Path,
        cfg: DeviceConfig,
        serve: impl FnOnce(Device, UnixStream) -> Result<(), VhostUserError> + Send + 'static,
    ) -> Vmm {
        Self::start_serving_on(server_for(dir), cfg, serve)
    }

    /// As [`Vmm::start_serving`], with the FUSE server given.
    pub fn start_serving_on(
        server: Arc<Server>,
        cfg: DeviceConfig,
        serve: impl FnOnce(Device, UnixStream) -> Result<(), VhostUserError> + Send + 'static,
    ) -> Vmm {
        let max_queues = cfg.max_queues;
        if std::env::var_os("XVFS_TEST_LOG").is_some() {
            xvirtiofsd::ops::logger::init(xvirtiofsd::cli::LogLevel::Trace, false);
        }
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let (stats_tx, stats_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let dev = Device::new(cfg, server).expect("device");
            let _ = stats_tx.send(dev.stats());
            serve(dev, theirs)
        });
        let mut vmm = Vmm::over(ours, max_queues);
        vmm.daemon = Some(Daemon { handle });
        vmm.stats = stats_rx.recv().expect("device stats");
        vmm
    }

    /// A front-end connected to a daemon process listening on `sock` (a
    /// real `xvirtiofsd`), offering `max_queues` virtqueues.
    pub fn connect(sock: &Path, max_queues: usize) -> Vmm {
        // The socket file appears at bind(), a moment before listen().
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("connect to the daemon: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        Vmm::over(stream, max_queues)
    }

    /// A front-end on `stream`, with fresh guest memory.
    fn over(stream: UnixStream, max_queues: usize) -> Vmm {
        let memfd = memfd(MEM_SIZE);
        let region = MmapRegion::from_file(
            FileOffset::new(memfd.try_clone().expect("dup"), 0),
            MEM_SIZE,
        )
        .expect("mmap");
        let mem =
            GuestMemoryMmap::from_regions(vec![
                GuestRegionMmap::new(region, GuestAddress(0)).expect("region")
            ])
            .expect("memory");
        Vmm {
            frontend: Frontend::from_stream(stream, max_queues as u64),
            mem,
            memfd,
            queues: Vec::new(),
            daemon: None,
            stats: Vec::new(),
            next_buf: 0x100_0000,
        }
    }

    /// The usual QEMU sequence up to memory: owner, features, protocol features.
    pub fn negotiate(&mut self) -> u64 {
        self.negotiate_features(u64::MAX)
    }

    /// As `negotiate`, acknowledging only the offered features in `mask`.
    pub fn negotiate_features(&mut self, mask: u64) -> u64 {
        self.negotiate_with(
            mask,
            VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS,
        )
    }

    /// As `negotiate`, acknowledging the offered features in `mask` and the
    /// offered protocol features in `protocol`.
    pub fn negotiate_with(&mut self, mask: u64, protocol: VhostUserProtocolFeatures) -> u64 {
        self.frontend.set_owner().expect("set_owner");
        let features = self.frontend.get_features().expect("get_features") & mask;
        self.frontend.set_features(features).expect("set_features");
        let mut pf = self
            .frontend
            .get_protocol_features()
            .expect("get_protocol_features");
        pf &= protocol;
        self.frontend
            .set_protocol_features(pf)
            .expect("set_protocol_features");
        // As QEMU does once REPLY_ACK is negotiated: every request waits for its ack.
        self.frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        let regions = [VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM_SIZE as u64,
            userspace_addr: USER_BASE,
            mmap_offset: 0,
            mmap_handle: self.memfd.as_raw_fd(),
        }];
        self.frontend
            .set_mem_table(&regions)
            .expect("set_mem_table");
        features
    }

    /// Sets up and enables `n` virtqueues (0 = hiprio, 1.. = requests).
    pub fn setup_queues(&mut self, n: usize) {
        for i in 0..n {
            let base = GuestAddress(0x10_0000 + i as u64 * 0x1_0000);
            // Split-ring layout per the virtio spec: descriptor table (16 B each),
            // avail ring (flags, idx, ring[n], used_event), used ring aligned to 4
            // (flags, idx, ring[n] of 8 B, avail_event). virtio_queue's
            // MockSplitQueue places the used ring at avail + 4 + n bytes, which
            // overlaps the avail ring for n > 127, so it is not used here.
            let n = u64::from(QUEUE_SIZE);
            let desc = base;
            let avail = desc.unchecked_add(16 * n);
            let used = GuestAddress((avail.0 + 6 + 2 * n + 3) & !3);
            let ring_bytes = used.0 + 6 + 8 * n - base.0;
            self.mem
                .write_slice(&vec![0u8; ring_bytes as usize], base)
                .expect("zero rings");
            let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
            let call = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
            let cfg = VringConfigData {
                queue_max_size: QUEUE_SIZE,
                queue_size: QUEUE_SIZE,
                flags: 0,
                desc_table_addr: USER_BASE + desc.0,
                used_ring_addr: USER_BASE + used.0,
                avail_ring_addr: USER_BASE + avail.0,
                log_addr: None,
            };
            self.frontend.set_vring_num(i, QUEUE_SIZE).expect("num");
            self.frontend.set_vring_addr(i, &cfg).expect("addr");
            self.frontend.set_vring_base(i, 0).expect("base");
            self.frontend.set_vring_call(i, &call).expect("call");
            self.frontend.set_vring_kick(i, &kick).expect("kick");
            self.frontend.set_vring_enable(i, true).expect("enable");
            self.queues.push(TestQueue {
                desc,
                avail,
                used,
                kick,
                call,
                next_desc: 0,
                seen_used: 0,
            });
        }
    }

    /// The vring configuration of test queue `q`, as the front-end sends it.
    fn vring_config(&self, q: usize) -> VringConfigData {
        let tq = &self.queues[q];
        VringConfigData {
            queue_max_size: QUEUE_SIZE,
            queue_size: QUEUE_SIZE,
            flags: 0,
            desc_table_addr: USER_BASE + tq.desc.0,
            used_ring_addr: USER_BASE + tq.used.0,
            avail_ring_addr: USER_BASE + tq.avail.0,
            log_addr: None,
        }
    }

    /// Resets queue `q` as a front-end does: GET_VRING_BASE stops it, then
    /// SET_VRING_ADDR, SET_VRING_BASE and SET_VRING_KICK start it again from
    /// the base it returned (after `fix` has repaired the guest's ring).
    /// Returns that base.
    pub fn reset_queue(&mut self, q: usize, fix: impl FnOnce(&mut Vmm, u16)) -> u16 {
        let base = self.frontend.get_vring_base(q).expect("get base") as u16;
        fix(self, base);
        let cfg = self.vring_config(q);
        self.frontend.set_vring_addr(q, &cfg).expect("addr");
        self.frontend.set_vring_base(q, base).expect("base");
        self.frontend
            .set_vring_kick(q, &self.queues[q].kick)
            .expect("kick");
        base
    }

    /// Allocates a guest buffer.
    pub fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next_buf;
        self.next_buf += (len + 0xfff) & !0xfff;
        assert!(
            self.next_buf < MEM_SIZE as u64,
            "test guest memory exhausted"
        );
        a
    }

    /// Places a chain of (addr, len, writable) descriptors on queue `q` without
    /// kicking. Returns the head index.
    pub fn post(&mut self, q: usize, descs: &[(u64, u32, bool)]) -> u16 {
        let head = self.queues[q].next_desc;
        let raw: Vec<RawDescriptor> = descs
            .iter()
            .enumerate()
            .map(|(i, &(addr, len, w))| {
                let idx = (head as usize + i) % QUEUE_SIZE as usize;
                let last = i + 1 == descs.len();
                let mut flags = if w { VRING_DESC_F_WRITE } else { 0 };
                let next = if last {
                    0
                } else {
                    flags |= VRING_DESC_F_NEXT;
                    ((idx + 1) % QUEUE_SIZE as usize) as u16
                };
                RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
            })
            .collect();
        // Descriptors, then the head in the avail ring, then the avail index
        // (the order a driver must follow).
        let tq = &self.queues[q];
        for (i, d) in raw.iter().enumerate() {
            let idx = (head as u64 + i as u64) % u64::from(QUEUE_SIZE);
            self.mem
                .write_obj(*d, tq.desc.unchecked_add(16 * idx))
                .expect("descriptor");
        }
        let avail_idx: u16 = self
            .mem
            .read_obj(tq.avail.unchecked_add(2))
            .expect("avail idx");
        let slot = u64::from(avail_idx % QUEUE_SIZE);
        self.mem
            .write_obj(head, tq.avail.unchecked_add(4 + 2 * slot))
            .expect("avail ring");
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.mem
            .write_obj(avail_idx.wrapping_add(1), tq.avail.unchecked_add(2))
            .expect("avail idx");
        self.queues[q].next_desc = ((head as usize + descs.len()) % QUEUE_SIZE as usize) as u16;
        head
    }

    /// Kicks only if the device asked for it (EVENT_IDX: `avail_event`), as the
    /// Linux driver does after publishing entries `old..new` of the avail ring.
    pub fn kick_if_needed(&self, q: usize, old: u16, new: u16) -> bool {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let tq = &self.queues[q];
        let event: u16 = self
            .mem
            .read_obj(tq.used.unchecked_add(4 + 8 * u64::from(QUEUE_SIZE)))
            .expect("avail_event");
        let need = new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old);
        if need {
            self.kick(q);
        }
        need
    }

    /// The driver's avail index of queue `q`.
    pub fn avail_idx(&self, q: usize) -> u16 {
        self.mem
            .read_obj(self.queues[q].avail.unchecked_add(2))
            .expect("avail idx")
    }

    pub fn kick(&self, q: usize) {
        self.queues[q].kick.write(1).expect("kick");
    }

    /// Waits (bounded) until queue `q` has used entries beyond those seen, and
    /// returns the next one as (head, len).
    pub fn wait_used(&mut self, q: usize) -> Option<(u32, u32)> {
        self.wait_used_for(q, 10_000)
    }

    /// As `wait_used`, with a bound in milliseconds.
    pub fn wait_used_for(&mut self, q: usize, ms: u64) -> Option<(u32, u32)> {
        let deadline = std::time::Instant::now() + Duration::from_millis(ms);
        loop {
            let used_addr = self.queues[q].used;
            let idx: u16 = self
                .mem
                .read_obj(used_addr.unchecked_add(2))
                .expect("used idx");
            let seen = self.queues[q].seen_used;
            if idx != seen {
                let slot = u64::from(seen % QUEUE_SIZE);
                let elem = used_addr.unchecked_add(4 + slot * 8);
                let id: u32 = self.mem.read_obj(elem).expect("id");
                let len: u32 = self.mem.read_obj(elem.unchecked_add(4)).expect("len");
                self.queues[q].seen_used = seen.wrapping_add(1);
                return Some((id, len));
            }
            let now = std::time::Instant::now();
            if now > deadline {
                return None;
            }
            // Spin for the first few milliseconds (a driver waiting for a fast
            // reply), then back off.
            if now + Duration::from_millis(ms) < deadline + Duration::from_millis(5) {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Sends one FUSE request on queue `q` and returns (out-header error, reply bytes).
    pub fn fuse(&mut self, q: usize, opcode: u32, nodeid: u64, args: &[u8]) -> (i32, Vec<u8>) {
        let req = fuse_request(opcode, 7, nodeid, args);
        self.fuse_raw(q, &req, 64 * 1024)
    }

    pub fn fuse_raw(&mut self, q: usize, req: &[u8], reply_room: u32) -> (i32, Vec<u8>) {
        let inb = self.alloc(req.len() as u64);
        let outb = self.alloc(u64::from(reply_room));
        self.mem
            .write_slice(req, GuestAddress(inb))
            .expect("write req");
        self.post(
            q,
            &[(inb, req.len() as u32, false), (outb, reply_room, true)],
        );
        self.kick(q);
        let (_, len) = self.wait_used(q).expect("no reply within 10 s");
        let mut out = vec![0u8; len as usize];
        self.mem
            .read_slice(&mut out, GuestAddress(outb))
            .expect("read reply");
        if out.len() < 16 {
            return (i32::MIN, out);
        }
        let olen = u32::from_ne_bytes([out[0], out[1], out[2], out[3]]);
        assert_eq!(
            olen as usize,
            out.len(),
            "out header length must match bytes written"
        );
        let err = i32::from_ne_bytes([out[4], out[5], out[6], out[7]]);
        (err, out[16..].to_vec())
    }

    /// FUSE INIT on queue `q`; returns the reply body.
    pub fn fuse_init(&mut self, q: usize) -> Vec<u8> {
        let mut init = Vec::new();
        for v in [7u32, 41, 128 * 1024, 0, 0] {
            init.extend_from_slice(&v.to_ne_bytes());
        }
        init.extend_from_slice(&[0u8; 44]);
        let (err, body) = self.fuse(q, FUSE_INIT, 0, &init);
        assert_eq!(err, 0, "INIT failed");
        body
    }

    /// Closes the connection and waits for the daemon thread.
    pub fn shutdown(mut self) -> Result<(), VhostUserError> {
        let d = self.daemon.take().expect("daemon");
        drop(self.frontend);
        d.handle.join().expect("daemon thread panicked")
    }
}

/// Encodes a FUSE request: in-header (40 bytes, uid and gid 0, pid 1) + args.
pub use xvfs_fs::testing::request as fuse_request;

/// The handed-over settings of the in-process daemons of the upgrade tests.
pub fn handover_config(dir: &Path) -> Settings {
    Settings {
        security: Security {
            shared_dir: dir.display().to_string(),
            sandbox: SandboxMode::None,
            seccomp: SeccompAction::None,
            ..Default::default()
        },
        serving: Serving {
            queues: 1,
            poll_mode: PollMode::Never,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The old daemon's loop, as `Daemon::serve` runs it, with its control
/// socket at `control_path` (chmod-ed to `mode` if given, e.g. 0o666 so that
/// an unprivileged process can ask for a handover): a handover request
/// interrupts the message loop and runs the old side of the handover, which
/// must fail; the daemon then resumes and keeps serving.
pub fn serve_refusing_handovers(
    cfg: Settings,
    control_path: PathBuf,
    mode: Option<u32>,
) -> impl FnOnce(Device, UnixStream) -> Result<(), VhostUserError> + Send + 'static {
    move |mut dev, theirs| {
        let mut conn = Connection::new(theirs);
        let wake = Arc::new(xvirtiofsd::sys::eventfd().expect("eventfd"));
        let slot: HandoverSlot = Arc::new(Mutex::new(None));
        let listener = control::bind(&control_path).expect("control socket");
        if let Some(mode) = mode {
            std::fs::set_permissions(&control_path, std::fs::Permissions::from_mode(mode))
                .expect("chmod control socket");
        }
        let status = Arc::new(StatusInfo {
            version: "test",
            started_unix_ms: 0,
            upgrades: 0,
            shared_dir: String::new(),
            connection: String::new(),
            control_path: control_path.display().to_string(),
            stats: OnceLock::new(),
            journal: None,
        });
        let server = Arc::clone(dev.server_arc());
        let preload: control::PreloadSource = Arc::new(move || server.fs().preload_fds());
        let spawn = |l| {
            let (info, slot, wake) = (Arc::clone(&status), Arc::clone(&slot), Arc::clone(&wake));
            control::spawn(l, info, slot, wake, Arc::clone(&preload)).expect("spawn")
        };
        let mut thread = spawn(listener);
        let r = loop {
            match conn.serve(&mut dev, Some(wake.as_fd()), &mut |_| {}) {
                Ok(ServeEnd::Disconnected) => break Ok(()),
                Ok(ServeEnd::Interrupted) => {
                    let _ = xvirtiofsd::sys::eventfd_drain(wake.as_fd());
                    let Some(peer) = slot.lock().expect("slot").take() else {
                        continue;
                    };
                    let server = Arc::clone(dev.server_arc());
                    let out = Outgoing {
                        settings: &cfg,
                        started_unix_ms: 0,
                        upgrades: 0,
                        control_fd: None,
                        control_path: None,
                        pid_files: &[],
                        server: &server,
                    };
                    let handed = handover::hand_over(&out, &mut dev, &conn, peer);
                    assert!(handed.is_err(), "the handover must be refused");
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
