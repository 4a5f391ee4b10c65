//! The vhost-user control plane: our own message loop over the front-end's
//! (QEMU's) Unix socket, on `vhost`'s message types.
//!
//! We own the connection and every negotiated value (features, memory table,
//! ring configuration and eventfds) in plain structs, so that all of it can be
//! inspected, saved and handed to another process. Each message is read as a
//! 12-byte header (request, flags, payload size) plus payload, with any file
//! descriptors attached to the header; every field is validated before use.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use log::{debug, info, warn};
use vhost::vhost_user::message::{
    FrontendReq, VhostUserMemory, VhostUserMemoryRegion, VhostUserSingleMemoryRegion, VhostUserU64,
    VhostUserVringAddr, VhostUserVringState, MAX_ATTACHED_FD_ENTRIES, MAX_MSG_SIZE,
};
use vhost::vhost_user::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vm_memory::{ByteValued, GuestMemoryAtomic};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use xvfs_fs::PassthroughServer as Server;

use virtio_fs_ext::state::{DeviceState, RegionState, VringState};

use crate::mem::{GuestMemoryMmap, MemError, MemoryTable, Region, MAX_REGIONS};
use crate::queue::{
    CallFd, PollConfig, QueueStats, RingConfig, Worker, WorkerOptions, MAX_QUEUE_SIZE,
};

const VIRTIO_F_VERSION_1: u64 = 1 << 32;
const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << 28;
const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;

const HDR_SIZE: usize = 12;
const FLAG_VERSION: u32 = 0x1;
const FLAG_REPLY: u32 = 0x4;
const FLAG_NEED_REPLY: u32 = 0x8;
/// SET_VRING_KICK/CALL/ERR: bits 0-7 index, bit 8 "no file descriptor".
const VRING_IDX_MASK: u64 = 0xff;
const VRING_NOFD: u64 = 0x100;

#[derive(Debug, thiserror::Error)]
pub enum VhostUserError {
    #[error("the front-end closed the connection")]
    Disconnected,
    #[error("socket I/O failed")]
    Socket(#[source] io::Error),
    #[error("message header has unsupported flags {0:#x}")]
    BadFlags(u32),
    #[error("message payload of {0} bytes is larger than the protocol allows")]
    TooLarge(u32),
    #[error("{req:?}: payload is {got} bytes, expected {want}")]
    BadSize {
        req: FrontendReq,
        got: usize,
        want: usize,
    },
    #[error("{0:?}: payload fields are invalid")]
    InvalidPayload(FrontendReq),
    #[error("{req:?}: expected {want} file descriptor(s), got {got}")]
    BadFds {
        req: FrontendReq,
        want: usize,
        got: usize,
    },
    #[error("queue index {0} is out of range")]
    BadQueue(u32),
    #[error("ring size {0} is not a power of two up to {MAX_QUEUE_SIZE}")]
    BadRingSize(u32),
    #[error("features {0:#x} were not offered")]
    UnofferedFeatures(u64),
    #[error("request {0} is not supported")]
    Unsupported(u32),
    #[error("memory table")]
    Memory(#[from] MemError),
    #[error("restored device state does not fit this build: {0}")]
    ImportMismatch(&'static str),
    #[error("starting queue")]
    Queue(#[from] crate::queue::QueueError),
}

type Result<T> = std::result::Result<T, VhostUserError>;

/// What we offer the front-end.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Total virtqueues: hiprio + request queues.
    pub max_queues: usize,
    /// How workers wait for the guest.
    pub poll: PollConfig,
    /// CPUs to pin request-queue workers to (request queue i on
    /// `queue_cpus[(i - 1) % len]`); empty: no pinning.
    pub queue_cpus: Vec<usize>,
}

impl DeviceConfig {
    /// `max_queues` virtqueues, no polling, no pinning.
    pub fn new(max_queues: usize) -> Self {
        DeviceConfig {
            max_queues,
            poll: PollConfig::NEVER,
            queue_cpus: Vec::new(),
        }
    }

    fn worker_options(&self, index: usize) -> WorkerOptions {
        let cpu = if index == 0 || self.queue_cpus.is_empty() {
            None
        } else {
            Some(self.queue_cpus[(index - 1) % self.queue_cpus.len()])
        };
        WorkerOptions {
            poll: self.poll,
            cpu,
        }
    }
}

/// The configuration of one vring as the front-end set it.
#[derive(Debug, Default)]
struct Vring {
    size: u16,
    desc_va: u64,
    avail_va: u64,
    used_va: u64,
    addr_set: bool,
    base: u16,
    /// Where the worker left the used index when it last stopped.
    next_used: u16,
    kick: Option<Arc<File>>,
    call: CallFd,
    err: Option<File>,
    enabled: bool,
    /// Started: a kick fd arrived and GET_VRING_BASE has not stopped it since.
    started: bool,
    worker: Option<Worker>,
    stats: Arc<QueueStats>,
}

/// The device: every negotiated value, and the running queue workers.
pub struct Device {
    cfg: DeviceConfig,
    server: Arc<Server>,
    acked_features: u64,
    acked_protocol: u64,
    owner: bool,
    mem_table: MemoryTable,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    vrings: Vec<Vring>,
}

impl Device {
    pub fn new(cfg: DeviceConfig, server: Arc<Server>) -> Self {
        let vrings = (0..cfg.max_queues).map(|_| Vring::default()).collect();
        Device {
            cfg,
            server,
            acked_features: 0,
            acked_protocol: 0,
            owner: false,
            mem_table: MemoryTable::default(),
            mem: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            vrings,
        }
    }

    /// Virtio features we offer.
    pub fn features() -> u64 {
        VIRTIO_F_VERSION_1
            | VIRTIO_RING_F_INDIRECT_DESC
            | VIRTIO_RING_F_EVENT_IDX
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    /// vhost-user protocol features we offer.
    pub fn protocol_features() -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE
    }

    /// The FUSE server behind the queues.
    pub fn server_arc(&self) -> &Arc<Server> {
        &self.server
    }

    /// Per-queue counters (index = virtqueue number).
    pub fn stats(&self) -> Vec<Arc<QueueStats>> {
        self.vrings.iter().map(|v| Arc::clone(&v.stats)).collect()
    }

    fn reply_ack_enabled(&self) -> bool {
        self.acked_protocol & VhostUserProtocolFeatures::REPLY_ACK.bits() != 0
    }

    fn protocol_features_acked(&self) -> bool {
        self.acked_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0
    }

    fn vring(&mut self, index: u32) -> Result<&mut Vring> {
        self.vrings
            .get_mut(index as usize)
            .ok_or(VhostUserError::BadQueue(index))
    }

    /// Stops every worker (disconnect, reset).
    pub fn stop_all(&mut self) {
        for i in 0..self.vrings.len() {
            self.stop_ring(i);
        }
    }

    fn stop_ring(&mut self, i: usize) -> Option<u16> {
        let v = &mut self.vrings[i];
        let worker = v.worker.take()?;
        let pos = worker.stop()?;
        v.base = pos.next_avail;
        v.next_used = pos.next_used;
        Some(pos.next_avail)
    }

    /// Starts the ring's worker once it is configured, started and enabled.
    fn maybe_start(&mut self, i: usize) -> Result<()> {
        let event_idx = self.acked_features & VIRTIO_RING_F_EVENT_IDX != 0;
        let v = &self.vrings[i];
        if v.worker.is_some() || !v.started || !v.enabled || !v.addr_set || v.size == 0 {
            return Ok(());
        }
        let Some(kick) = v.kick.clone() else {
            return Ok(());
        };
        let cfg = RingConfig {
            index: i,
            size: v.size,
            desc: self.mem_table.vmm_va_to_gpa(v.desc_va)?,
            avail: self.mem_table.vmm_va_to_gpa(v.avail_va)?,
            used: self.mem_table.vmm_va_to_gpa(v.used_va)?,
            next_avail: v.base,
            event_idx,
        };
        let worker = Worker::start(
            cfg,
            kick,
            Arc::clone(&v.call),
            self.mem.clone(),
            Arc::clone(&self.server),
            Arc::clone(&v.stats),
            self.cfg.worker_options(i),
        )?;
        debug!(
            "queue {i}: started (size {}, base {})",
            cfg.size, cfg.next_avail
        );
        self.vrings[i].worker = Some(worker);
        Ok(())
    }

    /// Stops every worker at a request boundary (requests already popped are
    /// completed and published). Rings keep their configuration, so
    /// [`Device::resume`] restarts exactly those that were running.
    pub fn quiesce(&mut self) {
        self.stop_all();
    }

    /// Restarts every ring that is started and enabled.
    pub fn resume(&mut self) -> Result<()> {
        for i in 0..self.vrings.len() {
            self.maybe_start(i)?;
        }
        Ok(())
    }

    /// Signals every started ring's call eventfd once: after a handover the
    /// predecessor's record of unsignalled completions is gone, so a guest
    /// waiting for one must not miss it (a spurious interrupt is harmless).
    pub fn notify_started(&self) {
        for v in &self.vrings {
            if v.started {
                if let Ok(c) = v.call.read() {
                    if let Some(f) = c.as_ref() {
                        let _ = crate::sys::eventfd_signal(f.as_fd());
                    }
                }
            }
        }
    }

    /// Every negotiated value as plain data; descriptors are appended to `fds`
    /// and referred to by their index there. Call after [`Device::quiesce`].
    pub fn export(&self, fds: &mut Vec<RawFd>) -> DeviceState {
        let mut push = |fd: RawFd| {
            fds.push(fd);
            (fds.len() - 1) as u32
        };
        let regions = self
            .mem_table
            .regions()
            .iter()
            .map(|r| RegionState {
                gpa: r.gpa,
                size: r.size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
                fd: push(r.file.as_raw_fd()),
            })
            .collect();
        let vrings = self
            .vrings
            .iter()
            .map(|v| {
                let call = v
                    .call
                    .read()
                    .ok()
                    .and_then(|c| c.as_ref().map(|f| f.as_raw_fd()));
                VringState {
                    size: v.size,
                    desc_va: v.desc_va,
                    avail_va: v.avail_va,
                    used_va: v.used_va,
                    addr_set: v.addr_set,
                    next_avail: v.base,
                    next_used: v.next_used,
                    enabled: v.enabled,
                    started: v.started,
                    kick_fd: v.kick.as_ref().map(|f| push(f.as_raw_fd())),
                    call_fd: call.map(&mut push),
                    err_fd: v.err.as_ref().map(|f| push(f.as_raw_fd())),
                }
            })
            .collect();
        DeviceState {
            acked_features: self.acked_features,
            acked_protocol: self.acked_protocol,
            owner: self.owner,
            max_queues: self.cfg.max_queues as u32,
            regions,
            vrings,
        }
    }

    /// Rebuilds a device from a predecessor's state. `take` hands out the
    /// descriptor at an index (each at most once). No worker is started: call
    /// [`Device::resume`] once the predecessor has stopped for good.
    pub fn import(
        cfg: DeviceConfig,
        server: Arc<Server>,
        st: &DeviceState,
        take: &mut dyn FnMut(u32) -> io::Result<OwnedFd>,
    ) -> Result<Device> {
        if st.vrings.len() != cfg.max_queues {
            return Err(VhostUserError::ImportMismatch("number of virtqueues"));
        }
        if st.acked_features & !Self::features() != 0
            || st.acked_protocol & !Self::protocol_features().bits() != 0
        {
            return Err(VhostUserError::ImportMismatch(
                "features this build does not offer",
            ));
        }
        let mut dev = Device::new(cfg, server);
        dev.acked_features = st.acked_features;
        dev.acked_protocol = st.acked_protocol;
        dev.owner = st.owner;
        let mut regions = Vec::with_capacity(st.regions.len());
        for r in &st.regions {
            regions.push(Region {
                gpa: r.gpa,
                size: r.size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
                file: Arc::new(File::from(take(r.fd).map_err(VhostUserError::Socket)?)),
            });
        }
        if !regions.is_empty() {
            let mapped = dev.mem_table.set(regions)?;
            dev.install_memory(mapped);
        }
        for (v, s) in dev.vrings.iter_mut().zip(&st.vrings) {
            if s.size != 0 && (!s.size.is_power_of_two() || s.size > MAX_QUEUE_SIZE) {
                return Err(VhostUserError::BadRingSize(u32::from(s.size)));
            }
            let mut file = |i: Option<u32>| -> Result<Option<File>> {
                i.map(|i| take(i).map(File::from).map_err(VhostUserError::Socket))
                    .transpose()
            };
            v.size = s.size;
            v.desc_va = s.desc_va;
            v.avail_va = s.avail_va;
            v.used_va = s.used_va;
            v.addr_set = s.addr_set;
            v.base = s.next_avail;
            v.next_used = s.next_used;
            v.enabled = s.enabled;
            v.kick = file(s.kick_fd)?.map(Arc::new);
            v.started = s.started && v.kick.is_some();
            *v.call.write().unwrap_or_else(|p| p.into_inner()) = file(s.call_fd)?;
            v.err = file(s.err_fd)?;
        }
        Ok(dev)
    }

    fn install_memory(&mut self, mapped: GuestMemoryMmap) {
        match self.mem.lock() {
            Ok(guard) => guard.replace(mapped),
            Err(poisoned) => poisoned.into_inner().replace(mapped),
        }
    }

    fn reset(&mut self) {
        self.stop_all();
        for v in &mut self.vrings {
            *v = Vring {
                stats: Arc::clone(&v.stats),
                ..Vring::default()
            };
        }
        self.acked_features = 0;
    }

    /// Handles one message. Returns the reply payload for messages that have one.
    fn handle(&mut self, req: FrontendReq, body: &[u8], fds: Vec<File>) -> Result<Option<Vec<u8>>> {
        use FrontendReq as R;
        let expect_fds = |want: usize, fds: &Vec<File>| {
            if fds.len() == want {
                Ok(())
            } else {
                Err(VhostUserError::BadFds {
                    req,
                    want,
                    got: fds.len(),
                })
            }
        };
        match req {
            R::GET_FEATURES => Ok(Some(u64_reply(Self::features()))),
            R::SET_FEATURES => {
                let f = parse::<VhostUserU64>(req, body)?.value;
                if f & !Self::features() != 0 {
                    return Err(VhostUserError::UnofferedFeatures(f & !Self::features()));
                }
                self.acked_features = f;
                if !self.protocol_features_acked() {
                    // Without PROTOCOL_FEATURES rings are enabled as soon as they start.
                    for i in 0..self.vrings.len() {
                        self.vrings[i].enabled = true;
                        self.maybe_start(i)?;
                    }
                }
                Ok(None)
            }
            R::GET_PROTOCOL_FEATURES => Ok(Some(u64_reply(Self::protocol_features().bits()))),
            R::SET_PROTOCOL_FEATURES => {
                let f = parse::<VhostUserU64>(req, body)?.value;
                if f & !Self::protocol_features().bits() != 0 {
                    return Err(VhostUserError::UnofferedFeatures(f));
                }
                self.acked_protocol = f;
                Ok(None)
            }
            R::SET_OWNER => {
                self.owner = true;
                Ok(None)
            }
            R::RESET_OWNER | R::RESET_DEVICE => {
                self.reset();
                Ok(None)
            }
            R::GET_QUEUE_NUM => Ok(Some(u64_reply(self.cfg.max_queues as u64))),
            R::GET_MAX_MEM_SLOTS => Ok(Some(u64_reply(MAX_REGIONS as u64))),
            R::SET_MEM_TABLE => {
                let hdr_len = std::mem::size_of::<VhostUserMemory>();
                let reg_len = std::mem::size_of::<VhostUserMemoryRegion>();
                if body.len() < hdr_len {
                    return Err(VhostUserError::BadSize {
                        req,
                        got: body.len(),
                        want: hdr_len,
                    });
                }
                let hdr = parse::<VhostUserMemory>(req, &body[..hdr_len])?;
                let n = hdr.num_regions as usize;
                if n == 0 || n > MAX_ATTACHED_FD_ENTRIES {
                    return Err(VhostUserError::InvalidPayload(req));
                }
                if body.len() != hdr_len + n * reg_len {
                    return Err(VhostUserError::BadSize {
                        req,
                        got: body.len(),
                        want: hdr_len + n * reg_len,
                    });
                }
                expect_fds(n, &fds)?;
                let mut regions = Vec::with_capacity(n);
                for (i, file) in fds.into_iter().enumerate() {
                    let off = hdr_len + i * reg_len;
                    let r = parse::<VhostUserMemoryRegion>(req, &body[off..off + reg_len])?;
                    regions.push(Region {
                        gpa: r.guest_phys_addr,
                        size: r.memory_size,
                        user_addr: r.user_addr,
                        mmap_offset: r.mmap_offset,
                        file: Arc::new(file),
                    });
                }
                let mapped = self.mem_table.set(regions)?;
                self.install_memory(mapped);
                info!(
                    "guest memory: {} region(s), {} MiB",
                    self.mem_table.regions().len(),
                    self.mem_table.regions().iter().map(|r| r.size).sum::<u64>() >> 20
                );
                Ok(None)
            }
            R::ADD_MEM_REG => {
                let r = parse::<VhostUserSingleMemoryRegion>(req, body)?;
                expect_fds(1, &fds)?;
                let Some(file) = fds.into_iter().next() else {
                    return Err(VhostUserError::InvalidPayload(req));
                };
                let mapped = self.mem_table.add(Region {
                    gpa: r.guest_phys_addr,
                    size: r.memory_size,
                    user_addr: r.user_addr,
                    mmap_offset: r.mmap_offset,
                    file: Arc::new(file),
                })?;
                self.install_memory(mapped);
                Ok(None)
            }
            R::REM_MEM_REG => {
                let r = parse::<VhostUserSingleMemoryRegion>(req, body)?;
                let mapped = self.mem_table.remove(r.guest_phys_addr, r.memory_size)?;
                self.install_memory(mapped);
                Ok(None)
            }
            R::SET_VRING_NUM => {
                let s = parse::<VhostUserVringState>(req, body)?;
                let num = s.num;
                if num == 0 || num > u32::from(MAX_QUEUE_SIZE) || !num.is_power_of_two() {
                    return Err(VhostUserError::BadRingSize(num));
                }
                self.vring(s.index)?.size = num as u16;
                Ok(None)
            }
            R::SET_VRING_ADDR => {
                let a = parse::<VhostUserVringAddr>(req, body)?;
                let v = self.vring(a.index)?;
                v.desc_va = a.descriptor;
                v.avail_va = a.available;
                v.used_va = a.used;
                v.addr_set = true;
                Ok(None)
            }
            R::SET_VRING_BASE => {
                let s = parse::<VhostUserVringState>(req, body)?;
                let num = s.num;
                let v = self.vring(s.index)?;
                v.base = u16::try_from(num).map_err(|_| VhostUserError::InvalidPayload(req))?;
                Ok(None)
            }
            R::GET_VRING_BASE => {
                let s = parse::<VhostUserVringState>(req, body)?;
                let index = s.index;
                self.vring(index)?;
                let i = index as usize;
                self.stop_ring(i);
                let v = &mut self.vrings[i];
                v.started = false;
                v.kick = None;
                let base = v.base;
                debug!("queue {i}: stopped at {base}");
                Ok(Some(
                    VhostUserVringState::new(index, u32::from(base))
                        .as_slice()
                        .to_vec(),
                ))
            }
            R::SET_VRING_KICK | R::SET_VRING_CALL | R::SET_VRING_ERR => {
                let v = parse::<VhostUserU64>(req, body)?.value;
                let index = (v & VRING_IDX_MASK) as u32;
                let nofd = v & VRING_NOFD != 0;
                expect_fds(usize::from(!nofd), &fds)?;
                if v & !(VRING_IDX_MASK | VRING_NOFD) != 0 {
                    return Err(VhostUserError::InvalidPayload(req));
                }
                self.vring(index)?;
                let file = fds.into_iter().next();
                let i = index as usize;
                match req {
                    R::SET_VRING_KICK => {
                        // A new kick fd restarts the ring with it.
                        self.stop_ring(i);
                        let v = &mut self.vrings[i];
                        if file.is_none() {
                            warn!("queue {i}: front-end asks for polling without a kick fd; not supported");
                        }
                        v.kick = file.map(Arc::new);
                        v.started = v.kick.is_some();
                        if !self.protocol_features_acked() {
                            self.vrings[i].enabled = true;
                        }
                        self.maybe_start(i)?;
                    }
                    R::SET_VRING_CALL => {
                        let v = &mut self.vrings[i];
                        match v.call.write() {
                            Ok(mut c) => *c = file,
                            Err(p) => *p.into_inner() = file,
                        }
                    }
                    _ => self.vrings[i].err = file,
                }
                Ok(None)
            }
            R::SET_VRING_ENABLE => {
                let s = parse::<VhostUserVringState>(req, body)?;
                let (index, num) = (s.index, s.num);
                if !self.protocol_features_acked() || num > 1 {
                    return Err(VhostUserError::InvalidPayload(req));
                }
                self.vring(index)?.enabled = num == 1;
                if num == 1 {
                    self.maybe_start(index as usize)?;
                } else {
                    self.stop_ring(index as usize);
                }
                Ok(None)
            }
            R::SET_BACKEND_REQ_FD => {
                // Not offered; a front-end sending it anyway gets its fd closed.
                Ok(None)
            }
            other => Err(VhostUserError::Unsupported(other.into())),
        }
    }
}

fn u64_reply(v: u64) -> Vec<u8> {
    VhostUserU64::new(v).as_slice().to_vec()
}

fn parse<T: ByteValued>(req: FrontendReq, body: &[u8]) -> Result<T> {
    if body.len() != std::mem::size_of::<T>() {
        return Err(VhostUserError::BadSize {
            req,
            got: body.len(),
            want: std::mem::size_of::<T>(),
        });
    }
    T::from_slice(body)
        .copied()
        .ok_or(VhostUserError::InvalidPayload(req))
}

/// One connection to a front-end.
pub struct Connection {
    stream: UnixStream,
}

struct Message {
    request: u32,
    flags: u32,
    body: Vec<u8>,
    fds: Vec<File>,
}

/// Why [`Connection::serve`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum ServeEnd {
    /// The front-end closed the connection.
    Disconnected,
    /// The interrupt descriptor became readable (a handover was requested);
    /// no message is half-read.
    Interrupted,
}

impl Connection {
    pub fn new(stream: UnixStream) -> Self {
        Connection { stream }
    }

    /// Adopts an already connected socket (handed over by a predecessor).
    pub fn from_fd(fd: OwnedFd) -> Self {
        Connection {
            stream: UnixStream::from(fd),
        }
    }

    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    fn recv(&mut self) -> Result<Message> {
        let mut hdr = [0u8; HDR_SIZE];
        let mut rawfds = [-1 as RawFd; MAX_ATTACHED_FD_ENTRIES];
        let mut iov = [libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: HDR_SIZE,
        }];
        // SAFETY: the iovec points at `hdr`, valid for HDR_SIZE bytes; received fds
        // are written into `rawfds` and immediately owned below.
        let (n, nfds) = unsafe { self.stream.recv_with_fds(&mut iov, &mut rawfds) }
            .map_err(|e| VhostUserError::Socket(io::Error::from_raw_os_error(e.errno())))?;
        let fds: Vec<File> = rawfds[..nfds]
            .iter()
            // SAFETY: each fd was just received over SCM_RIGHTS and belongs to us alone.
            .map(|&fd| unsafe { File::from_raw_fd(fd) })
            .collect();
        if n == 0 {
            return Err(VhostUserError::Disconnected);
        }
        if n < HDR_SIZE {
            self.stream
                .read_exact(&mut hdr[n..])
                .map_err(eof_is_disconnect)?;
        }
        let request = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let flags = u32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let size = u32::from_ne_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
        if size as usize > MAX_MSG_SIZE {
            return Err(VhostUserError::TooLarge(size));
        }
        let mut body = vec![0u8; size as usize];
        self.stream
            .read_exact(&mut body)
            .map_err(eof_is_disconnect)?;
        Ok(Message {
            request,
            flags,
            body,
            fds,
        })
    }

    fn send(&mut self, request: u32, payload: &[u8]) -> Result<()> {
        let mut msg = Vec::with_capacity(HDR_SIZE + payload.len());
        msg.extend_from_slice(&request.to_ne_bytes());
        msg.extend_from_slice(&(FLAG_VERSION | FLAG_REPLY).to_ne_bytes());
        msg.extend_from_slice(&(payload.len() as u32).to_ne_bytes());
        msg.extend_from_slice(payload);
        self.stream.write_all(&msg).map_err(VhostUserError::Socket)
    }

    /// Serves messages until the front-end disconnects or `interrupt` becomes
    /// readable between two messages.
    pub fn serve(
        &mut self,
        dev: &mut Device,
        interrupt: Option<BorrowedFd<'_>>,
    ) -> Result<ServeEnd> {
        loop {
            if let Some(int) = interrupt {
                let ready = crate::sys::poll_readable(&[self.stream.as_fd(), int], -1)
                    .map_err(VhostUserError::Socket)?;
                if ready[1] {
                    return Ok(ServeEnd::Interrupted);
                }
            }
            let msg = match self.recv() {
                Ok(m) => m,
                Err(VhostUserError::Disconnected) => return Ok(ServeEnd::Disconnected),
                Err(e) => return Err(e),
            };
            if msg.flags & 0x3 != FLAG_VERSION || msg.flags & !0xf != 0 {
                return Err(VhostUserError::BadFlags(msg.flags));
            }
            let need_reply = msg.flags & FLAG_NEED_REPLY != 0;
            let req = match FrontendReq::try_from(msg.request) {
                Ok(r) => r,
                Err(_) => {
                    warn!("vhost-user: unknown request {}", msg.request);
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(1).as_slice())?;
                    }
                    continue;
                }
            };
            debug!(
                "vhost-user: {req:?} ({} bytes, {} fds)",
                msg.body.len(),
                msg.fds.len()
            );
            let result = dev.handle(req, &msg.body, msg.fds);
            match result {
                Ok(Some(reply)) => self.send(msg.request, &reply)?,
                Ok(None) => {
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(0).as_slice())?;
                    }
                }
                Err(e) => {
                    warn!("vhost-user: {req:?} failed: {}", crate::error_chain(&e));
                    if need_reply && dev.reply_ack_enabled() {
                        self.send(msg.request, VhostUserU64::new(1).as_slice())?;
                    } else if expects_reply(req) {
                        // The front-end waits for a reply we cannot give: answer zeros
                        // rather than leave it blocked.
                        self.send(msg.request, &[0u8; 8])?;
                    }
                }
            }
        }
    }
}

/// Requests whose reply is part of the protocol, not an ack.
fn expects_reply(req: FrontendReq) -> bool {
    matches!(
        req,
        FrontendReq::GET_FEATURES
            | FrontendReq::GET_PROTOCOL_FEATURES
            | FrontendReq::GET_QUEUE_NUM
            | FrontendReq::GET_MAX_MEM_SLOTS
            | FrontendReq::GET_VRING_BASE
    )
}

fn eof_is_disconnect(e: io::Error) -> VhostUserError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        VhostUserError::Disconnected
    } else {
        VhostUserError::Socket(e)
    }
}
