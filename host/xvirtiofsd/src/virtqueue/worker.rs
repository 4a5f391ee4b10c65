// SPDX-License-Identifier: Apache-2.0
//! Queue workers: one thread per started virtqueue, named after it (`xvfs-q1`),
//! owning its ring without locks. A worker pops descriptor chains, hands each to
//! the FUSE server, publishes the reply to the used ring and notifies the guest.
//!
//! The control plane (vhost_user) starts a worker when a ring is ready and
//! enabled, and stops it (joining the thread) on GET_VRING_BASE, disable, reset
//! or disconnect; stopping returns the ring's indices.
//!
//! A worker that finds its ring corrupt ([`RingFault`]: the avail index more
//! than the ring size ahead, a head index out of range or still in use by a
//! waiting SETLKW, a ring the memory does not hold) does not log and does
//! not retry: it ends at once, with the fault in its [`WorkerExit`], and
//! signals the supervisor's eventfd so that the control plane reaps it,
//! marks the ring broken and tells the guest.
//!
//! Between batches a worker busy-waits or sleeps as [`crate::virtqueue::poll`] decides.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::FsServer as Server;
use log::warn;
use virtio_queue::{Queue, QueueT};
use vm_memory::atomic::GuestMemoryLoadGuard;
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryAtomic};
use xvfs_fs::journal::Journal;
use xvfs_fs::ratelimit::RateLimiter;

use crate::migration::dirty_log::LogTarget;
pub use crate::ops::metrics::QueueStats;
use crate::sys;
use crate::virtqueue::chain::{refuse, split_chain};
use crate::virtqueue::mem::GuestMemoryMmap;
use crate::virtqueue::poll::PollPolicy;
pub use crate::virtqueue::poll::{measure_wake_cost, PollConfig, PollMode, BUDGET_PERIOD};
use crate::virtqueue::replay::Recorder;
use waiting::{WaitList, Waiting};
use xvfs_fs::server::Outcome;

/// Largest ring size we accept (the virtio maximum for split rings).
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// While at least this many chains wait in the avail ring, a reply is put
/// on the used ring without telling the guest yet: the worker has queued
/// work for longer than the guest takes to wake up, so waking it for each
/// reply (an interrupt in a guest, an IPI and a VM exit or two on the host)
/// only costs CPU on both sides. The guest is told once the backlog falls
/// below this (in time to queue more before the worker runs dry), after
/// [`NOTIFY_DEFER_MAX`] replies, and at the end of every batch; nothing is
/// withheld from a guest that has fewer requests queued. Measured with
/// `loadgen` at queue depth 64 (docs/loadgen.md): guest wake-ups 0.27 to
/// 0.03 per request, daemon CPU per request -15 to -20 %, throughput
/// +15 to +25 %. A threshold of 8 already lost at depth 16: the guest woke
/// after the worker had run dry, and each drain then costs a kick.
pub const NOTIFY_BACKLOG: u16 = 16;
/// Most replies published before the guest's notification is checked.
pub const NOTIFY_DEFER_MAX: u16 = 32;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("invalid ring configuration for queue {index}: {reason}")]
    InvalidRing { index: usize, reason: String },
    #[error("cannot create the worker for queue {index}")]
    Spawn {
        index: usize,
        #[source]
        source: std::io::Error,
    },
}

/// Everything needed to start a ring, in guest physical addresses.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    pub index: usize,
    pub size: u16,
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    pub next_avail: u16,
    pub event_idx: bool,
    /// Continue from the used index in guest memory, not `next_avail`: a
    /// crashed predecessor's position is lost, and it popped nothing it
    /// did not either publish or leave for a replay (chains are served in
    /// order, one at a time).
    pub from_used: bool,
}

/// Why a worker ended before it was asked to stop: the guest corrupted its
/// ring. The ring stays unusable until the front-end resets it.
#[derive(Debug, thiserror::Error)]
pub enum RingFault {
    #[error("avail index {avail} is more than the ring size {size} ahead of {next}")]
    AvailAhead { avail: u16, next: u16, size: u16 },
    #[error("descriptor chain head {head} is out of range for ring size {size}")]
    HeadOutOfRange { head: u16, size: u16 },
    /// The guest made a chain available again while its SETLKW still waits
    /// for the lock: the device owns that chain until it is used.
    #[error(
        "descriptor chain head {head} made available again while it waits for a lock (SETLKW)"
    )]
    HeadWaiting { head: u16 },
    #[error("ring access failed")]
    Ring(#[from] virtio_queue::Error),
    #[error("waiting for the guest failed")]
    Wait(#[source] std::io::Error),
}

/// The call eventfd, replaceable while the worker runs (SET_VRING_CALL).
pub type CallFd = Arc<RwLock<Option<File>>>;

/// Per-worker settings.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub poll: PollConfig,
    /// Host CPU to pin the worker to.
    pub cpu: Option<usize>,
    /// While a migration logs dirty pages: where to log.
    pub log: Option<LogTarget>,
    /// Crash restart: where requests in flight are recorded.
    pub journal: Option<&'static Journal>,
}

/// Where a stopped ring left off.
#[derive(Debug, Clone, Copy)]
pub struct RingPosition {
    pub next_avail: u16,
    pub next_used: u16,
}

/// How a worker ended: where the ring stands, and the fault that ended it
/// (none when it was asked to stop).
#[derive(Debug)]
pub struct WorkerExit {
    pub pos: RingPosition,
    pub fault: Option<RingFault>,
}

/// The descriptors a worker works with: the guest's kick and call eventfds,
/// and its supervisor's eventfd, signalled when the worker ends on a fault.
#[derive(Debug, Clone)]
pub struct WorkerFds {
    pub kick: Arc<File>,
    pub call: CallFd,
    pub supervisor: Arc<OwnedFd>,
}

/// A running worker.
#[derive(Debug)]
pub struct Worker {
    stop: Arc<AtomicBool>,
    /// Set by the thread, before it signals the supervisor, when it ends on
    /// a fault.
    faulted: Arc<AtomicBool>,
    stop_fd: Arc<OwnedFd>,
    handle: JoinHandle<WorkerExit>,
}

impl Worker {
    /// Starts the worker thread for a ring.
    pub fn start(
        cfg: RingConfig,
        fds: WorkerFds,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
        server: Arc<Server>,
        stats: Arc<QueueStats>,
        opts: WorkerOptions,
    ) -> Result<Worker, QueueError> {
        let queue = build_queue(&cfg, &mem)?;
        // After a crash, the request the predecessor had in flight is the
        // first one popped (if the guest has not had its reply).
        let recorder = opts
            .journal
            .map(|j| Recorder::new(j, cfg.index, cfg.from_used, queue.next_avail()));
        let stop = Arc::new(AtomicBool::new(false));
        let faulted = Arc::new(AtomicBool::new(false));
        let stop_fd = Arc::new(sys::eventfd().map_err(|source| QueueError::Spawn {
            index: cfg.index,
            source,
        })?);
        let ctx = WorkerCtx {
            index: cfg.index,
            queue,
            kick: fds.kick,
            call: fds.call,
            supervisor: fds.supervisor,
            mem,
            server,
            stats,
            stop: Arc::clone(&stop),
            faulted: Arc::clone(&faulted),
            stop_fd: Arc::clone(&stop_fd),
            bad_chain_log: RateLimiter::new(),
            policy: PollPolicy::new(opts.poll),
            cpu: opts.cpu,
            log: opts.log,
            recorder,
            waiting: WaitList::new(cfg.size),
            next_retry: Instant::now(),
            retry_delay: LOCK_RETRY,
            lock_seen: 0,
            unsignalled: 0,
        };
        let handle = std::thread::Builder::new()
            .name(format!("xvfs-q{}", cfg.index))
            .spawn(move || ctx.run())
            .map_err(|source| QueueError::Spawn {
                index: cfg.index,
                source,
            })?;
        Ok(Worker {
            stop,
            faulted,
            stop_fd,
            handle,
        })
    }

    /// Stops the worker at a request boundary and returns where the ring
    /// stands (and the fault, if it had ended on one already). Requests
    /// already popped are completed and published first.
    pub fn stop(self) -> Option<WorkerExit> {
        self.stop.store(true, Ordering::Release);
        let _ = sys::eventfd_signal(self.stop_fd.as_fd());
        self.handle.join().ok()
    }

    /// True once the thread has ended on a fault, or is about to: joining it
    /// ([`Worker::stop`]) does not wait for a request.
    pub fn has_faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }
}

/// Serves whatever the ring described by `cfg` holds, once, on the calling
/// thread, and returns how many chains were served: the worker's batch
/// without its thread, eventfds or waiting (the vring fuzzer, tests). A
/// ring the guest corrupted ends it with the fault, as in a worker.
pub fn serve_once(
    cfg: &RingConfig,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    server: Arc<Server>,
) -> Result<u64, String> {
    let mut ctx = detached(cfg, mem, server)?;
    let guard = ctx.mem.memory();
    ctx.serve_batch(&guard).map_err(|e| e.to_string())
}

/// A worker's state for `cfg` without its thread: kick, call and stop
/// eventfds of its own, no polling, no journal.
fn detached(
    cfg: &RingConfig,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    server: Arc<Server>,
) -> Result<WorkerCtx, String> {
    let queue = build_queue(cfg, &mem).map_err(|e| e.to_string())?;
    let eventfd = || sys::eventfd().map_err(|e| e.to_string());
    Ok(WorkerCtx {
        index: cfg.index,
        queue,
        kick: Arc::new(File::from(eventfd()?)),
        call: CallFd::default(),
        supervisor: Arc::new(eventfd()?),
        mem,
        server,
        stats: Arc::new(QueueStats::default()),
        stop: Arc::new(AtomicBool::new(false)),
        faulted: Arc::new(AtomicBool::new(false)),
        stop_fd: Arc::new(eventfd()?),
        bad_chain_log: RateLimiter::new(),
        policy: PollPolicy::new(PollConfig::NEVER),
        cpu: None,
        log: None,
        recorder: None,
        waiting: WaitList::new(cfg.size),
        next_retry: Instant::now(),
        retry_delay: LOCK_RETRY,
        lock_seen: 0,
        unsignalled: 0,
    })
}

fn build_queue(
    cfg: &RingConfig,
    mem: &GuestMemoryAtomic<GuestMemoryMmap>,
) -> Result<Queue, QueueError> {
    let invalid = |reason: String| QueueError::InvalidRing {
        index: cfg.index,
        reason,
    };
    let mut q = Queue::new(MAX_QUEUE_SIZE).map_err(|e| invalid(e.to_string()))?;
    q.try_set_size(cfg.size)
        .map_err(|e| invalid(format!("size {}: {e}", cfg.size)))?;
    q.try_set_desc_table_address(GuestAddress(cfg.desc))
        .map_err(|e| invalid(format!("descriptor table: {e}")))?;
    q.try_set_avail_ring_address(GuestAddress(cfg.avail))
        .map_err(|e| invalid(format!("avail ring: {e}")))?;
    q.try_set_used_ring_address(GuestAddress(cfg.used))
        .map_err(|e| invalid(format!("used ring: {e}")))?;
    q.set_event_idx(cfg.event_idx);
    q.set_next_avail(cfg.next_avail);
    q.set_ready(true);
    let m = mem.memory();
    if !q.is_valid(&*m) {
        return Err(invalid("ring lies outside guest memory".into()));
    }
    // The used index lives in guest memory; continue from it (it equals
    // next_avail when the previous owner completed everything it popped).
    let used = q
        .used_idx(&*m, Ordering::Acquire)
        .map_err(|e| invalid(format!("used index: {e}")))?;
    q.set_next_used(used.0);
    if cfg.from_used {
        q.set_next_avail(used.0);
    }
    Ok(q)
}

struct WorkerCtx {
    index: usize,
    queue: Queue,
    kick: Arc<File>,
    call: CallFd,
    supervisor: Arc<OwnedFd>,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    server: Arc<Server>,
    stats: Arc<QueueStats>,
    stop: Arc<AtomicBool>,
    faulted: Arc<AtomicBool>,
    stop_fd: Arc<OwnedFd>,
    bad_chain_log: RateLimiter,
    policy: PollPolicy,
    cpu: Option<usize>,
    log: Option<LogTarget>,
    /// With --crash-restart: records each request in flight.
    recorder: Option<Recorder>,
    /// SETLKW requests waiting for their lock, unanswered.
    waiting: WaitList,
    /// When to ask for all their locks again.
    next_retry: Instant,
    /// How long after that to ask again (doubling up to
    /// [`LOCK_RETRY_MAX`]).
    retry_delay: Duration,
    /// The last lock event of the server looked at.
    lock_seen: u64,
    /// Replies published since the guest's notification was last checked.
    unsignalled: u16,
}

/// How soon a worker asks again for the locks of waiting SETLKW requests
/// it has not been told about: the host tells nobody when a lock another
/// process or guest holds is freed. Each time it waits twice as long, up
/// to [`LOCK_RETRY_PER_WAITER`] per waiting request (at least this, at
/// most [`LOCK_RETRY_MAX`]): however many wait, once they have waited a
/// while a worker asks the host about a thousand times a second in all,
/// not 200 times a second for each. A lock this daemon lets go of (an
/// unlock, FLUSH, RELEASE) or a FUSE_INTERRUPT makes it ask again at once
/// for the requests concerned (see `xvfs_fs::fuse::Wake`).
pub const LOCK_RETRY: Duration = Duration::from_millis(5);
/// The pause between two rounds of asking grows to this much per waiting
/// request.
pub const LOCK_RETRY_PER_WAITER: Duration = Duration::from_millis(1);
/// The longest a waiting SETLKW goes without being tried again: the most
/// its grant lags behind a lock freed elsewhere.
pub const LOCK_RETRY_MAX: Duration = Duration::from_secs(1);

impl WorkerCtx {
    fn run(mut self) -> WorkerExit {
        sys::set_thread_name(&format!("xvfs-q{}", self.index));
        if let Some(cpu) = self.cpu {
            if let Err(e) = sys::pin_to_cpu(cpu) {
                warn!("queue {}: cannot pin to CPU {cpu}: {e}", self.index);
            }
        }
        let fault = self.serve_loop().and_then(|()| self.end_waiting()).err();
        if fault.is_some() {
            self.drop_waiting();
            // The supervisor logs it, once; the worker only reports it.
            self.faulted.store(true, Ordering::Release);
            let _ = sys::eventfd_signal(self.supervisor.as_fd());
        }
        WorkerExit {
            pos: RingPosition {
                next_avail: self.queue.next_avail(),
                next_used: self.queue.next_used(),
            },
            fault,
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// serve → poll → re-arm → re-check → sleep, until stopped.
    fn serve_loop(&mut self) -> Result<(), RingFault> {
        let mut idle_since = Instant::now();
        // The kick eventfd is edge-triggered and never read: each kick
        // wakes the worker once, without a read(2) per wake-up.
        const KICK: u32 = 0;
        const STOP: u32 = 1;
        // Lock events: edge-triggered and never read, as the kick.
        const LOCKS: u32 = 2;
        let wait = sys::Epoll::new()
            .and_then(|ep| ep.add(self.kick.as_fd(), KICK, true).map(|()| ep))
            .and_then(|ep| ep.add(self.stop_fd.as_fd(), STOP, false).map(|()| ep))
            .map_err(RingFault::Wait)?;
        let server = Arc::clone(&self.server);
        if let Some(fd) = server.lock_events_fd() {
            wait.add(fd, LOCKS, true).map_err(RingFault::Wait)?;
        }
        loop {
            let guard = self.mem.memory();
            let mem: &GuestMemoryMmap = &guard;
            self.queue.disable_notification(mem)?;
            if let Some(log) = &self.log {
                log.mark_used();
            }
            if self.serve_batch(&guard)? > 0 {
                idle_since = Instant::now();
            }
            self.retry_waiting(mem)?;
            if self.stopping() {
                return Ok(());
            }

            // Busy-poll with notifications still suppressed.
            let window = self.poll_window();
            let polling = !window.is_zero();
            self.stats
                .polling
                .store(u64::from(polling), Ordering::Relaxed);
            if polling && self.poll_ring(mem, window)? {
                self.stats.found_by_poll.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
                continue;
            }

            // Re-arm, then re-check: a request that landed meanwhile is served now.
            let rearmed = self.queue.enable_notification(mem)?;
            if let Some(log) = &self.log {
                // The avail event lives in the used ring.
                log.mark_used();
            }
            if rearmed {
                self.stats.found_by_wakeup.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
                continue;
            }
            drop(guard);

            self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
            let timeout = if self.waiting.is_empty() {
                -1
            } else {
                let due = self.next_retry.saturating_duration_since(Instant::now());
                due.as_micros()
                    .div_ceil(1000)
                    .clamp(1, LOCK_RETRY_MAX.as_millis()) as i32
            };
            let ready = wait.wait(timeout).map_err(RingFault::Wait)?;
            if ready & (1 << STOP) != 0 {
                let _ = sys::eventfd_drain(self.stop_fd.as_fd());
            }
            if ready & (1 << KICK) != 0 {
                self.stats.found_by_wakeup.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
            }
            if self.stopping() {
                return Ok(());
            }
        }
    }

    /// How long to poll now, as the policy decides; feeds it the thread's
    /// preemption count when it asks for one.
    fn poll_window(&mut self) -> Duration {
        let now = Instant::now();
        if self.policy.wants_switch_count(now) {
            match sys::involuntary_switches() {
                Ok(n) => self.policy.observe_switches(now, n),
                Err(e) => {
                    warn!(
                        "queue {}: cannot count preemptions ({e}): adaptive polling will not pause for a busy CPU",
                        self.index
                    );
                    self.policy.stop_counting();
                }
            }
        }
        self.policy.window_at(now)
    }

    /// Polls the avail index for up to `window`. True when work arrived.
    fn poll_ring(&mut self, mem: &GuestMemoryMmap, window: Duration) -> Result<bool, RingFault> {
        let start = Instant::now();
        let mut found = false;
        loop {
            if self.backlog(mem)? != 0 {
                found = true;
                break;
            }
            if self.stop.load(Ordering::Relaxed) || start.elapsed() >= window {
                break;
            }
            std::hint::spin_loop();
        }
        let polled = start.elapsed();
        self.policy.spend(polled);
        self.stats
            .poll_ns
            .fetch_add(polled.as_nanos() as u64, Ordering::Relaxed);
        Ok(found)
    }

    /// Serves every available chain; notifies the guest if it asked for it.
    /// Returns how many chains were served.
    /// A ring the guest corrupted ends the batch with a fault before
    /// virtio-queue sees it.
    fn serve_batch(
        &mut self,
        guard: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    ) -> Result<u64, RingFault> {
        let mem: &GuestMemoryMmap = guard;
        let mut served = 0u64;
        self.check_avail(mem)?;
        while !self.stop.load(Ordering::Relaxed) {
            let pos = self.queue.next_avail();
            let Some(chain) = self.queue.pop_descriptor_chain(mem) else {
                break;
            };
            let started = Instant::now();
            let head = chain.head_index();
            let size = self.queue.size();
            if head >= size {
                return Err(RingFault::HeadOutOfRange { head, size });
            }
            if self.waiting.holds(head) {
                return Err(RingFault::HeadWaiting { head });
            }
            match split_chain(mem, chain.clone()) {
                Ok((mut r, mut w)) => {
                    let request_bytes = xvfs_fs::io::RequestReader::remaining(&r);
                    let outcome = match &mut self.recorder {
                        Some(rec) => {
                            Outcome::Replied(rec.handle(&self.server, pos, head, &mut r, &mut w))
                        }
                        None => self.server.serve(&mut r, &mut w),
                    };
                    match outcome {
                        Outcome::Replied(n) => {
                            self.publish(mem, head, w.guest_ranges(), n, request_bytes, started)?
                        }
                        Outcome::Waiting(wait) => {
                            let p = Waiting {
                                wait,
                                head,
                                reply: w.guest_ranges().to_vec(),
                                request_bytes,
                                started,
                                mem: guard.clone().into_inner(),
                            };
                            self.park(mem, p)?;
                        }
                    }
                }
                Err(e) => {
                    self.stats.bad_chains.fetch_add(1, Ordering::Relaxed);
                    if let Some(n) = self.bad_chain_log.check() {
                        warn!(
                            "queue {}: malformed descriptor chain {head}: {e} ({n} similar suppressed)",
                            self.index
                        );
                    }
                    match refuse(mem, chain, e.errno()) {
                        Some(r) => self.publish(mem, head, &[r], r.1 as usize, 0, started)?,
                        None => self.publish(mem, head, &[], 0, 0, started)?,
                    }
                }
            }
            served += 1;
        }
        self.signal_used(mem)?;
        Ok(served)
    }

    /// Puts a served chain, with `len` reply bytes written into its
    /// device-writable ranges `reply` (guest address, length), on the used
    /// ring, and tells the guest (when it asks to be told) at once unless its
    /// backlog keeps this worker busy: see [`NOTIFY_BACKLOG`].
    fn publish(
        &mut self,
        mem: &GuestMemoryMmap,
        head: u16,
        reply: &[(u64, u64)],
        len: usize,
        request_bytes: usize,
        started: Instant,
    ) -> Result<(), RingFault> {
        if let Some(log) = &self.log {
            for &(gpa, len) in reply {
                log.log.mark(gpa, len);
            }
        }
        self.queue.add_used(mem, head, len as u32)?;
        if let Some(log) = &self.log {
            log.mark_used();
        }
        self.stats.record(
            (request_bytes + len) as u64,
            started.elapsed().as_nanos() as u64,
        );
        self.unsignalled += 1;
        if self.unsignalled >= NOTIFY_DEFER_MAX || self.backlog(mem)? < NOTIFY_BACKLOG {
            self.signal_used(mem)?;
        }
        Ok(())
    }

    /// Chains the guest has made available that this worker has not popped.
    fn backlog(&self, mem: &GuestMemoryMmap) -> Result<u16, RingFault> {
        let avail = self.queue.avail_idx(mem, Ordering::Acquire)?.0;
        Ok(avail.wrapping_sub(self.queue.next_avail()))
    }

    /// Notifies the guest if the replies published since the last check
    /// crossed the used index it asked to hear about (EVENT_IDX), or if it
    /// did not negotiate EVENT_IDX.
    fn signal_used(&mut self, mem: &GuestMemoryMmap) -> Result<(), RingFault> {
        if self.unsignalled == 0 {
            return Ok(());
        }
        self.unsignalled = 0;
        if self.queue.needs_notification(mem)? {
            self.notify();
        }
        Ok(())
    }

    /// Asks again for the locks of the waiting SETLKW requests, oldest
    /// first, publishing those that are answered: all of them when their
    /// time has come (see [`LOCK_RETRY`]), else those on a node whose lock
    /// this daemon let go of since; a FUSE_INTERRUPT ends the request it
    /// names.
    fn retry_waiting(&mut self, mem: &GuestMemoryMmap) -> Result<(), RingFault> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let wake = self.server.lock_events_since(&mut self.lock_seen);
        let now = Instant::now();
        let blind = now >= self.next_retry;
        if !blind && wake.is_empty() {
            return Ok(());
        }
        let server = Arc::clone(&self.server);
        let _round = server.lock_gate();
        let mut i = 0;
        while i < self.waiting.list.len() {
            let p = &self.waiting.list[i];
            let answer = if blind || wake.covers(p.wait.node()) {
                self.server.retry_lock(&p.wait, &mut p.writer())
            } else if wake.interrupts {
                self.server.take_interrupted(&p.wait, &mut p.writer())
            } else {
                None
            };
            match answer {
                None => i += 1,
                Some(n) => {
                    let p = self.waiting.remove(i);
                    self.publish(mem, p.head, &p.reply, n, p.request_bytes, p.started)?;
                }
            }
        }
        if blind {
            let waiting = u32::try_from(self.waiting.list.len()).unwrap_or(u32::MAX);
            let longest = (LOCK_RETRY_PER_WAITER * waiting).clamp(LOCK_RETRY, LOCK_RETRY_MAX);
            self.retry_delay = (self.retry_delay * 2).min(longest);
            self.next_retry = now + self.retry_delay;
        }
        self.signal_used(mem)
    }

    /// Keeps a SETLKW waiting for its lock; with [`WaitList::is_full`],
    /// answers it ENOLCK at once instead. The first to wait starts the
    /// retries afresh.
    fn park(&mut self, mem: &GuestMemoryMmap, p: Waiting) -> Result<(), RingFault> {
        if !self.waiting.is_full() {
            if self.waiting.is_empty() {
                self.retry_delay = LOCK_RETRY;
                self.next_retry = Instant::now() + LOCK_RETRY;
                self.lock_seen = self.server.lock_events_last();
            }
            self.waiting.push(p);
            return Ok(());
        }
        let n = self.server.end_wait(p.wait, &mut p.writer(), libc::ENOLCK);
        self.publish(mem, p.head, &p.reply, n, p.request_bytes, p.started)
    }

    /// Ends every waiting SETLKW with EINTR (the ring stops: a successor or
    /// the migration destination starts from a ring with nothing pending).
    fn end_waiting(&mut self) -> Result<(), RingFault> {
        let guard = self.mem.memory();
        while let Some(p) = self.waiting.pop() {
            let n = self.server.end_wait(p.wait, &mut p.writer(), libc::EINTR);
            self.publish(&guard, p.head, &p.reply, n, p.request_bytes, p.started)?;
        }
        self.signal_used(&guard)
    }

    /// After a fault: forgets every waiting SETLKW without a reply on the
    /// used ring (the ring is broken until the front-end resets it), so
    /// that the server does not count them as waiting any longer.
    fn drop_waiting(&mut self) {
        while let Some(p) = self.waiting.pop() {
            self.server.end_wait(p.wait, &mut p.writer(), libc::EINTR);
        }
    }

    /// The guest may publish at most a ring's worth of chains ahead of us.
    fn check_avail(&self, mem: &GuestMemoryMmap) -> Result<(), RingFault> {
        let ahead = self.backlog(mem)?;
        let size = self.queue.size();
        if ahead > size {
            let next = self.queue.next_avail();
            let avail = next.wrapping_add(ahead);
            return Err(RingFault::AvailAhead { avail, next, size });
        }
        Ok(())
    }

    fn notify(&self) {
        self.stats.notifications.fetch_add(1, Ordering::Relaxed);
        if let Ok(call) = self.call.read() {
            if let Some(f) = call.as_ref() {
                let _ = sys::eventfd_signal(f.as_fd());
            }
        }
    }
}

mod waiting;

#[cfg(test)]
mod tests;
