// SPDX-License-Identifier: Apache-2.0
//! The message handler: every negotiated value (features, memory table,
//! ring configuration and eventfds) in plain structs, each message validated
//! before it changes anything, and the rings' workers started and stopped as
//! the front-end configures them.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use log::{debug, info, warn};
use vhost::vhost_user::message::{
    FrontendReq, VhostUserConfig, VhostUserConfigFlags, VhostUserLog, VhostUserMemory,
    VhostUserMemoryRegion, VhostUserShMemConfig, VhostUserSingleMemoryRegion, VhostUserU64,
    VhostUserVringAddr, VhostUserVringAddrFlags, VhostUserVringState, MAX_ATTACHED_FD_ENTRIES,
};
use vhost::vhost_user::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vm_memory::{ByteValued, GuestMemoryAtomic};
use xvfs_fs::ratelimit::RateLimiter;

use crate::migration::dirty_log::{used_ring_bytes, DirtyLog, LogTarget};
use crate::migration::MigrationConfig;
use crate::virtqueue::mem::{GuestMemoryMmap, MemoryTable, MAX_REGIONS};
use crate::virtqueue::worker::{
    PollConfig, QueueStats, RingConfig, Worker, WorkerFds, WorkerOptions, MAX_QUEUE_SIZE,
};
use crate::FsServer as Server;

use super::backend::BackendChannel;
use super::error::{Result, VhostUserError};
use super::ring::Vring;
use transfer::Transfer;

const VIRTIO_F_VERSION_1: u64 = 1 << 32;
const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << 28;
const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;

/// SET_VRING_KICK/CALL/ERR: bits 0-7 index, bit 8 "no file descriptor".
const VRING_IDX_MASK: u64 = 0xff;
const VRING_NOFD: u64 = 0x100;

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
    /// VM live migration of the device state.
    pub migration: MigrationConfig,
    /// Crash restart: the journal requests in flight are recorded in.
    pub journal: Option<&'static xvfs_fs::journal::Journal>,
    /// `--tag`: advertised in the device configuration space
    /// (VHOST_USER_PROTOCOL_F_CONFIG, GET_CONFIG).
    pub tag: Option<String>,
    /// `--dax-window`: the window's size (GET_SHMEM_CONFIG) and the channel
    /// its mappings are asked for on (SET_BACKEND_REQ_FD).
    pub dax: Option<(u64, Arc<BackendChannel>)>,
}

mod transfer;
mod window;

impl DeviceConfig {
    /// `max_queues` virtqueues, no polling, no pinning.
    pub fn new(max_queues: usize) -> Self {
        DeviceConfig {
            max_queues,
            poll: PollConfig::NEVER,
            queue_cpus: Vec::new(),
            migration: MigrationConfig::default(),
            journal: None,
            tag: None,
            dax: None,
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
            log: None,
            journal: self.journal,
        }
    }
}

/// The device: every negotiated value, and the running queue workers.
pub struct Device {
    pub(super) cfg: DeviceConfig,
    pub(super) server: Arc<Server>,
    pub(super) acked_features: u64,
    pub(super) acked_protocol: u64,
    pub(super) owner: bool,
    pub(super) mem_table: MemoryTable,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    pub(super) vrings: Vec<Vring>,
    /// Signalled by a worker that ended on a fault; the connection loop
    /// polls it and calls [`Device::reap_faults`].
    supervisor: Arc<OwnedFd>,
    fault_log: RateLimiter,
    /// The dirty-page log (SET_LOG_BASE), used while LOG_ALL is acked.
    log: Option<Arc<DirtyLog>>,
    /// A device state transfer under way (SET_DEVICE_STATE_FD), until
    /// CHECK_DEVICE_STATE.
    pub(super) transfer: Option<Transfer>,
    /// Per ring, after a crash restart: start at the used index of guest
    /// memory (once; see [`RingConfig::from_used`]).
    pub(super) crash_resume: Vec<bool>,
}

impl Device {
    pub fn new(cfg: DeviceConfig, server: Arc<Server>) -> Result<Self> {
        let vrings = (0..cfg.max_queues).map(|_| Vring::default()).collect();
        let supervisor = Arc::new(crate::sys::eventfd().map_err(VhostUserError::Socket)?);
        Ok(Device {
            cfg,
            server,
            acked_features: 0,
            acked_protocol: 0,
            owner: false,
            mem_table: MemoryTable::default(),
            mem: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            vrings,
            supervisor,
            fault_log: RateLimiter::new(),
            log: None,
            transfer: None,
            crash_resume: Vec::new(),
        })
    }

    /// The eventfd a worker signals when it ends on a fault.
    pub fn supervisor(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.supervisor)
    }

    /// Marks every ring whose worker ended on a fault broken (signalling its
    /// error eventfd) and logs it, rate-limited. The other rings keep
    /// serving.
    pub fn reap_faults(&mut self) {
        for (i, v) in self.vrings.iter_mut().enumerate() {
            let Some(fault) = v.reap() else { continue };
            v.stats
                .ring_faults
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(n) = self.fault_log.check() {
                warn!(
                    "queue {i}: {}; the queue is broken until the front-end resets it \
                     ({n} similar suppressed)",
                    crate::error_chain(&fault)
                );
            }
            v.signal_error();
        }
    }

    /// Whether queue `index` is broken (its worker ended on a fault).
    pub fn is_broken(&self, index: usize) -> bool {
        self.vrings.get(index).is_some_and(Vring::is_broken)
    }

    /// Virtio features we offer.
    pub fn features() -> u64 {
        VIRTIO_F_VERSION_1
            | VIRTIO_RING_F_INDIRECT_DESC
            | VIRTIO_RING_F_EVENT_IDX
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
            | VhostUserVirtioFeatures::LOG_ALL.bits()
    }

    /// vhost-user protocol features we offer (CONFIG only with `--tag`).
    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        Self::offered_protocol(&self.cfg)
    }

    /// The protocol features a device with `cfg` offers.
    pub(super) fn offered_protocol(cfg: &DeviceConfig) -> VhostUserProtocolFeatures {
        let base = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::DEVICE_STATE;
        let base = if cfg.tag.is_some() {
            base | VhostUserProtocolFeatures::CONFIG
        } else {
            base
        };
        if cfg.dax.is_some() {
            // No DEVICE_STATE: QEMU 11 does not migrate a device with
            // shared-memory regions, and the window's mappings could not
            // be recreated on another host's front-end.
            (base - VhostUserProtocolFeatures::DEVICE_STATE)
                | VhostUserProtocolFeatures::BACKEND_REQ
                | VhostUserProtocolFeatures::BACKEND_SEND_FD
                | VhostUserProtocolFeatures::SHMEM
        } else {
            base
        }
    }

    /// Whether the device offers a DAX window (`--dax-window`).
    pub fn has_dax_window(&self) -> bool {
        self.cfg.dax.is_some()
    }

    /// The virtio-fs configuration space: the tag (NUL-padded to 36 bytes)
    /// and the number of request queues (little endian).
    fn config_space(&self) -> [u8; 40] {
        let mut c = [0u8; 40];
        if let Some(t) = &self.cfg.tag {
            let n = t.len().min(36);
            c[..n].copy_from_slice(&t.as_bytes()[..n]);
        }
        let queues = self.cfg.max_queues.saturating_sub(1) as u32;
        c[36..].copy_from_slice(&queues.to_le_bytes());
        c
    }

    /// GET_CONFIG: the requested range of [`Device::config_space`], echoed
    /// in the request's form; a range outside it gets an empty reply body,
    /// as libvhost-user answers a failure (QEMU reports it as one).
    fn get_config(&self, req: FrontendReq, body: &[u8]) -> Result<Vec<u8>> {
        const HEAD: usize = std::mem::size_of::<VhostUserConfig>();
        if self.acked_protocol & VhostUserProtocolFeatures::CONFIG.bits() == 0 {
            return Err(VhostUserError::Unsupported(req.into()));
        }
        let head = body
            .get(..HEAD)
            .ok_or(VhostUserError::InvalidPayload(req))?;
        let c = parse::<VhostUserConfig>(req, head)?;
        let (off, size) = (c.offset as usize, c.size as usize);
        let space = self.config_space();
        match space.get(off..off.saturating_add(size)) {
            Some(part) if body.len() == HEAD + size => {
                let flags = VhostUserConfigFlags::empty();
                let mut reply = VhostUserConfig::new(c.offset, c.size, flags)
                    .as_slice()
                    .to_vec();
                reply.extend_from_slice(part);
                Ok(reply)
            }
            _ => {
                warn!(
                    "GET_CONFIG of bytes {off}..{} of a 40-byte space",
                    off + size
                );
                Ok(Vec::new())
            }
        }
    }

    /// The FUSE server behind the queues.
    pub fn server_arc(&self) -> &Arc<Server> {
        &self.server
    }

    /// Per-queue counters (index = virtqueue number).
    pub fn stats(&self) -> Vec<Arc<QueueStats>> {
        self.vrings.iter().map(|v| Arc::clone(&v.stats)).collect()
    }

    pub(super) fn reply_ack_enabled(&self) -> bool {
        self.acked_protocol & VhostUserProtocolFeatures::REPLY_ACK.bits() != 0
    }

    fn protocol_features_acked(&self) -> bool {
        self.acked_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0
    }

    /// Where ring `i`'s worker logs dirty pages: only while LOG_ALL is
    /// acked and a log is mapped.
    fn log_target(&self, i: usize) -> Option<LogTarget> {
        if self.acked_features & VhostUserVirtioFeatures::LOG_ALL.bits() == 0 {
            return None;
        }
        let v = &self.vrings[i];
        Some(LogTarget {
            log: Arc::clone(self.log.as_ref()?),
            used: v.log_used.then(|| (v.log_addr, used_ring_bytes(v.size))),
        })
    }

    /// Restarts the running workers so that they log (or stop logging) as
    /// now configured. Only at the start and end of a migration.
    fn relog(&mut self) -> Result<()> {
        if !self.suspended() {
            self.quiesce();
            self.resume()?;
        }
        Ok(())
    }

    /// Whether every ring is stopped (the device is suspended).
    pub(super) fn suspended(&self) -> bool {
        !self.vrings.iter().any(Vring::is_running)
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

    fn stop_ring(&mut self, i: usize) {
        self.vrings[i].stop();
    }

    /// Starts the ring's worker once it is configured, started and enabled.
    fn maybe_start(&mut self, i: usize) -> Result<()> {
        let event_idx = self.acked_features & VIRTIO_RING_F_EVENT_IDX != 0;
        let (mem_table, mem, server) = (&self.mem_table, &self.mem, &self.server);
        let mut opts = self.cfg.worker_options(i);
        opts.log = self.log_target(i);
        let supervisor = &self.supervisor;
        let from_used = self.crash_resume.get(i).copied().unwrap_or(false);
        let started = self.vrings[i].start(|v, kick| {
            let cfg = RingConfig {
                index: i,
                size: v.size,
                desc: mem_table.vmm_va_to_gpa(v.desc_va)?,
                avail: mem_table.vmm_va_to_gpa(v.avail_va)?,
                used: mem_table.vmm_va_to_gpa(v.used_va)?,
                next_avail: v.base,
                event_idx,
                from_used,
            };
            let fds = WorkerFds {
                kick,
                call: Arc::clone(&v.call),
                supervisor: Arc::clone(supervisor),
            };
            let worker = Worker::start(
                cfg,
                fds,
                mem.clone(),
                Arc::clone(server),
                Arc::clone(&v.stats),
                opts.clone(),
            )?;
            debug!(
                "queue {i}: started (size {}, base {})",
                cfg.size, cfg.next_avail
            );
            Ok(worker)
        })?;
        if started {
            if let Some(f) = self.crash_resume.get_mut(i) {
                *f = false;
            }
        }
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
            if v.started() {
                if let Ok(c) = v.call.read() {
                    if let Some(f) = c.as_ref() {
                        let _ = crate::sys::eventfd_signal(f.as_fd());
                    }
                }
            }
        }
    }
}

impl Device {
    pub(super) fn install_memory(&mut self, mapped: GuestMemoryMmap) {
        match self.mem.lock() {
            Ok(guard) => guard.replace(mapped),
            Err(poisoned) => poisoned.into_inner().replace(mapped),
        }
    }

    fn reset(&mut self) {
        self.while_front_end_stops(Self::stop_all);
        for v in &mut self.vrings {
            *v = Vring::reset(Arc::clone(&v.stats));
        }
        self.acked_features = 0;
        // The front-end drops every mapping of the window across a reset
        // (vhost-user spec, SHMEM_MAP); unmapping them again would fail.
        self.server.fs().forget_mappings();
    }

    /// Handles one message. Returns the reply payload for messages that have one.
    pub(super) fn handle(
        &mut self,
        req: FrontendReq,
        body: &[u8],
        fds: Vec<File>,
    ) -> Result<Option<Vec<u8>>> {
        use FrontendReq as R;
        match req {
            R::SET_VRING_NUM
            | R::SET_VRING_ADDR
            | R::SET_VRING_BASE
            | R::GET_VRING_BASE
            | R::SET_VRING_KICK
            | R::SET_VRING_CALL
            | R::SET_VRING_ERR
            | R::SET_VRING_ENABLE => self.handle_vring(req, body, fds),
            _ => self.handle_device(req, body, fds),
        }
    }

    /// Messages about the whole device: features, owner, memory.
    fn handle_device(
        &mut self,
        req: FrontendReq,
        body: &[u8],
        fds: Vec<File>,
    ) -> Result<Option<Vec<u8>>> {
        use FrontendReq as R;
        match req {
            R::GET_FEATURES => Ok(Some(u64_reply(Self::features()))),
            R::SET_FEATURES => {
                let f = parse::<VhostUserU64>(req, body)?.value;
                if f & !Self::features() != 0 {
                    return Err(VhostUserError::UnofferedFeatures(f & !Self::features()));
                }
                let log_changed =
                    (self.acked_features ^ f) & VhostUserVirtioFeatures::LOG_ALL.bits() != 0;
                self.acked_features = f;
                if log_changed {
                    info!(
                        "dirty page logging {}",
                        if f & VhostUserVirtioFeatures::LOG_ALL.bits() != 0 {
                            "on"
                        } else {
                            "off"
                        }
                    );
                    self.relog()?;
                }
                if !self.protocol_features_acked() {
                    // Without PROTOCOL_FEATURES rings are enabled as soon as they start.
                    for i in 0..self.vrings.len() {
                        self.vrings[i].enabled = true;
                        self.maybe_start(i)?;
                    }
                }
                Ok(None)
            }
            R::GET_PROTOCOL_FEATURES => Ok(Some(u64_reply(self.protocol_features().bits()))),
            R::SET_PROTOCOL_FEATURES => {
                let f = parse::<VhostUserU64>(req, body)?.value;
                if f & !self.protocol_features().bits() != 0 {
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
                self.set_mem_table(req, body, fds)?;
                Ok(None)
            }
            R::ADD_MEM_REG => {
                let r = parse::<VhostUserSingleMemoryRegion>(req, body)?;
                expect_fds(req, 1, &fds)?;
                let Some(file) = fds.into_iter().next() else {
                    return Err(VhostUserError::InvalidPayload(req));
                };
                let region = self.region(
                    r.guest_phys_addr,
                    r.memory_size,
                    r.user_addr,
                    r.mmap_offset,
                    file,
                );
                let mapped = self.mem_table.add(region)?;
                self.install_memory(mapped);
                Ok(None)
            }
            R::REM_MEM_REG => {
                let r = parse::<VhostUserSingleMemoryRegion>(req, body)?;
                let mapped = self.mem_table.remove(r.guest_phys_addr, r.memory_size)?;
                self.install_memory(mapped);
                Ok(None)
            }
            R::SET_LOG_BASE => {
                let l = parse::<VhostUserLog>(req, body)?;
                expect_fds(req, 1, &fds)?;
                let Some(file) = fds.into_iter().next() else {
                    return Err(VhostUserError::InvalidPayload(req));
                };
                self.log = Some(Arc::new(DirtyLog::map(file, l.mmap_size, l.mmap_offset)?));
                self.relog()?;
                Ok(Some(u64_reply(0)))
            }
            R::SET_LOG_FD => {
                // Optional: we never signal it; its descriptor is closed.
                Ok(None)
            }
            R::SET_DEVICE_STATE_FD => Ok(Some(self.set_device_state_fd(req, body, fds))),
            R::CHECK_DEVICE_STATE => Ok(Some(u64_reply(self.check_device_state()))),
            R::GET_CONFIG => Ok(Some(self.get_config(req, body)?)),
            R::SET_BACKEND_REQ_FD => {
                expect_fds(req, 1, &fds)?;
                // Only with a DAX window (BACKEND_REQ is offered then);
                // otherwise the descriptor is closed.
                if let (Some((_, ch)), Some(f)) = (&self.cfg.dax, fds.into_iter().next()) {
                    ch.set(std::os::unix::net::UnixStream::from(
                        std::os::fd::OwnedFd::from(f),
                    ));
                    info!("DAX: the front-end's back-end channel is set");
                }
                Ok(None)
            }
            R::GET_SHMEM_CONFIG => {
                let Some((size, _)) = &self.cfg.dax else {
                    return Err(VhostUserError::Unsupported(req.into()));
                };
                let c = VhostUserShMemConfig::new(1, &[*size]);
                info!("DAX: a window of {size:#x} bytes (shared-memory region 0)");
                Ok(Some(c.as_slice().to_vec()))
            }
            other => Err(VhostUserError::Unsupported(other.into())),
        }
    }

    /// Messages about one vring.
    fn handle_vring(
        &mut self,
        req: FrontendReq,
        body: &[u8],
        fds: Vec<File>,
    ) -> Result<Option<Vec<u8>>> {
        use FrontendReq as R;
        match req {
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
                let log_used = a.flags & VhostUserVringAddrFlags::VHOST_VRING_F_LOG.bits() != 0;
                let relog = v.log_used != log_used || v.log_addr != a.log;
                v.log_used = log_used;
                v.log_addr = a.log;
                if relog && v.is_running() {
                    self.relog()?;
                }
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
                let base = self.while_front_end_stops(|d| d.vrings[i].take_base());
                debug!("queue {i}: stopped at {base}");
                Ok(Some(
                    VhostUserVringState::new(index, u32::from(base))
                        .as_slice()
                        .to_vec(),
                ))
            }
            R::SET_VRING_KICK | R::SET_VRING_CALL | R::SET_VRING_ERR => {
                self.set_vring_fd(req, body, fds)?;
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
            other => Err(VhostUserError::Unsupported(other.into())),
        }
    }

    /// SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR: an eventfd (or none).
    fn set_vring_fd(&mut self, req: FrontendReq, body: &[u8], fds: Vec<File>) -> Result<()> {
        use FrontendReq as R;
        let v = parse::<VhostUserU64>(req, body)?.value;
        let index = (v & VRING_IDX_MASK) as u32;
        let nofd = v & VRING_NOFD != 0;
        expect_fds(req, usize::from(!nofd), &fds)?;
        if v & !(VRING_IDX_MASK | VRING_NOFD) != 0 {
            return Err(VhostUserError::InvalidPayload(req));
        }
        self.vring(index)?;
        let file = fds.into_iter().next();
        let i = index as usize;
        match req {
            R::SET_VRING_KICK => {
                // A new kick fd restarts the ring with it.
                if file.is_none() {
                    warn!("queue {i}: front-end asks for polling without a kick fd; not supported");
                }
                self.vrings[i].set_kick(file.map(Arc::new));
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
        Ok(())
    }

    /// SET_MEM_TABLE: replaces the whole memory table.
    fn set_mem_table(&mut self, req: FrontendReq, body: &[u8], fds: Vec<File>) -> Result<()> {
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
        expect_fds(req, n, &fds)?;
        let mut regions = Vec::with_capacity(n);
        for (i, file) in fds.into_iter().enumerate() {
            let off = hdr_len + i * reg_len;
            let r = parse::<VhostUserMemoryRegion>(req, &body[off..off + reg_len])?;
            regions.push(self.region(
                r.guest_phys_addr,
                r.memory_size,
                r.user_addr,
                r.mmap_offset,
                file,
            ));
        }
        let mapped = self.mem_table.set(regions)?;
        self.install_memory(mapped);
        info!(
            "guest memory: {} region(s), {} MiB",
            self.mem_table.regions().len(),
            self.mem_table.regions().map(|r| r.size).sum::<u64>() >> 20
        );
        Ok(())
    }
}

pub(super) fn expect_fds(req: FrontendReq, want: usize, fds: &[File]) -> Result<()> {
    if fds.len() == want {
        Ok(())
    } else {
        Err(VhostUserError::BadFds {
            req,
            want,
            got: fds.len(),
        })
    }
}

pub(super) fn u64_reply(v: u64) -> Vec<u8> {
    VhostUserU64::new(v).as_slice().to_vec()
}

pub(super) fn parse<T: ByteValued>(req: FrontendReq, body: &[u8]) -> Result<T> {
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
