//! Queue workers: one thread per started virtqueue, named after it (`xvfs-q1`),
//! owning its ring without locks. A worker pops descriptor chains, hands each to
//! the FUSE server, publishes the reply to the used ring and notifies the guest.
//!
//! The control plane (vhost_user) starts a worker when a ring is ready and
//! enabled, and stops it (joining the thread) on GET_VRING_BASE, disable, reset
//! or disconnect; stopping returns the ring's indices.
//!
//! # Busy-event wait (XFUSE)
//!
//! After serving a batch the worker keeps guest notifications suppressed and
//! polls the avail index for up to the poll window. If nothing arrives it
//! re-arms notifications, re-checks the ring (a request that landed just as
//! polling stopped is served, not lost), and only then sleeps on the kick
//! eventfd. `--poll adaptive` polls only while the observed gap between
//! requests is shorter than the poll window plus the measured cost of a
//! wake-up: beyond that, polling burns CPU for nothing.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{error, warn};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryAtomic};
use xvfs_fs::ratelimit::RateLimiter;
use xvfs_fs::PassthroughServer as Server;

use crate::chain::split_chain;
use crate::mem::GuestMemoryMmap;
pub use crate::metrics::QueueStats;
use crate::sys;

/// Largest ring size we accept (the virtio maximum for split rings).
pub const MAX_QUEUE_SIZE: u16 = 32768;

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
}

/// The call eventfd, replaceable while the worker runs (SET_VRING_CALL).
pub type CallFd = Arc<RwLock<Option<File>>>;

/// How a worker waits for the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Sleep on the kick eventfd right after each batch.
    Never,
    /// Always poll for the window before sleeping.
    Always,
    /// Poll only while requests arrive faster than window + wake-up cost.
    Adaptive,
}

/// Busy-wait settings shared by every worker.
#[derive(Debug, Clone, Copy)]
pub struct PollConfig {
    pub mode: PollMode,
    pub window: Duration,
    /// Measured cost of sleeping on an eventfd and being woken.
    pub wake_cost: Duration,
}

impl PollConfig {
    pub const NEVER: PollConfig = PollConfig {
        mode: PollMode::Never,
        window: Duration::ZERO,
        wake_cost: Duration::ZERO,
    };
}

/// Per-worker settings.
#[derive(Debug, Clone, Copy)]
pub struct WorkerOptions {
    pub poll: PollConfig,
    /// Host CPU to pin the worker to.
    pub cpu: Option<usize>,
}

/// The adaptive decision: an exponentially weighted mean of the idle gaps.
#[derive(Debug)]
struct PollPolicy {
    cfg: PollConfig,
    gap_ewma_ns: u64,
}

impl PollPolicy {
    fn new(cfg: PollConfig) -> Self {
        PollPolicy {
            cfg,
            gap_ewma_ns: 0,
        }
    }

    fn threshold_ns(&self) -> u64 {
        (self.cfg.window + self.cfg.wake_cost).as_nanos() as u64
    }

    fn should_poll(&self) -> bool {
        match self.cfg.mode {
            PollMode::Never => false,
            PollMode::Always => !self.cfg.window.is_zero(),
            PollMode::Adaptive => {
                !self.cfg.window.is_zero() && self.gap_ewma_ns <= self.threshold_ns()
            }
        }
    }

    /// Records the idle time before the latest batch arrived. Long idle
    /// periods are capped so that polling resumes a few requests into a burst.
    fn observe_gap(&mut self, gap: Duration) {
        let cap = self.threshold_ns().saturating_mul(16).max(1);
        let g = (gap.as_nanos() as u64).min(cap);
        self.gap_ewma_ns = self.gap_ewma_ns - self.gap_ewma_ns / 4 + g / 4;
    }
}

/// Measures the cost of waking a thread sleeping on an eventfd (half an
/// eventfd ping-pong round trip, median of `rounds`).
pub fn measure_wake_cost(rounds: usize) -> Duration {
    let (Ok(a), Ok(b)) = (sys::eventfd(), sys::eventfd()) else {
        return Duration::from_micros(20);
    };
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
    let echo = std::thread::spawn(move || {
        for _ in 0..rounds {
            if sys::poll_readable(&[a2.as_fd()], 1000).is_err() {
                return;
            }
            let _ = sys::eventfd_drain(a2.as_fd());
            let _ = sys::eventfd_signal(b2.as_fd());
        }
    });
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let _ = sys::eventfd_signal(a.as_fd());
        if sys::poll_readable(&[b.as_fd()], 1000).is_err() {
            break;
        }
        let _ = sys::eventfd_drain(b.as_fd());
        samples.push(t.elapsed() / 2);
    }
    let _ = echo.join();
    samples.sort();
    samples
        .get(samples.len() / 2)
        .copied()
        .unwrap_or(Duration::from_micros(20))
}

/// Where a stopped ring left off.
#[derive(Debug, Clone, Copy)]
pub struct RingPosition {
    pub next_avail: u16,
    pub next_used: u16,
}

/// A running worker.
#[derive(Debug)]
pub struct Worker {
    stop: Arc<AtomicBool>,
    stop_fd: Arc<OwnedFd>,
    handle: JoinHandle<RingPosition>,
}

impl Worker {
    /// Starts the worker thread for a ring.
    pub fn start(
        cfg: RingConfig,
        kick: Arc<File>,
        call: CallFd,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
        server: Arc<Server>,
        stats: Arc<QueueStats>,
        opts: WorkerOptions,
    ) -> Result<Worker, QueueError> {
        let queue = build_queue(&cfg, &mem)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_fd = Arc::new(sys::eventfd().map_err(|source| QueueError::Spawn {
            index: cfg.index,
            source,
        })?);
        let ctx = WorkerCtx {
            index: cfg.index,
            queue,
            kick,
            call,
            mem,
            server,
            stats,
            stop: Arc::clone(&stop),
            stop_fd: Arc::clone(&stop_fd),
            bad_chain_log: RateLimiter::new(),
            policy: PollPolicy::new(opts.poll),
            cpu: opts.cpu,
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
            stop_fd,
            handle,
        })
    }

    /// Stops the worker at a request boundary and returns where the ring stands.
    /// Requests already popped are completed and published first.
    pub fn stop(self) -> Option<RingPosition> {
        self.stop.store(true, Ordering::Release);
        let _ = sys::eventfd_signal(self.stop_fd.as_fd());
        self.handle.join().ok()
    }
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
    Ok(q)
}

struct WorkerCtx {
    index: usize,
    queue: Queue,
    kick: Arc<File>,
    call: CallFd,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    server: Arc<Server>,
    stats: Arc<QueueStats>,
    stop: Arc<AtomicBool>,
    stop_fd: Arc<OwnedFd>,
    bad_chain_log: RateLimiter,
    policy: PollPolicy,
    cpu: Option<usize>,
}

impl WorkerCtx {
    fn run(mut self) -> RingPosition {
        sys::set_thread_name(&format!("xvfs-q{}", self.index));
        if let Some(cpu) = self.cpu {
            if let Err(e) = sys::pin_to_cpu(cpu) {
                warn!("queue {}: cannot pin to CPU {cpu}: {e}", self.index);
            }
        }
        if let Err(e) = self.serve_loop() {
            error!("queue {}: {e}; the queue stops serving", self.index);
        }
        RingPosition {
            next_avail: self.queue.next_avail(),
            next_used: self.queue.next_used(),
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// serve → poll → re-arm → re-check → sleep, until stopped.
    fn serve_loop(&mut self) -> Result<(), virtio_queue::Error> {
        let mut idle_since = Instant::now();
        loop {
            let guard = self.mem.memory();
            let mem: &GuestMemoryMmap = &guard;
            self.queue.disable_notification(mem)?;
            if self.serve_batch(mem)? > 0 {
                idle_since = Instant::now();
            }
            if self.stopping() {
                return Ok(());
            }

            // Busy-poll with notifications still suppressed.
            let polling = self.policy.should_poll();
            self.stats
                .polling
                .store(u64::from(polling), Ordering::Relaxed);
            if polling && self.poll_ring(mem)? {
                self.stats.found_by_poll.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
                continue;
            }

            // Re-arm, then re-check: a request that landed meanwhile is served now.
            if self.queue.enable_notification(mem)? {
                self.stats.found_by_wakeup.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
                continue;
            }
            drop(guard);

            self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
            let ready = match sys::poll_readable(&[self.kick.as_fd(), self.stop_fd.as_fd()], -1) {
                Ok(r) => r,
                Err(e) => {
                    error!("queue {}: waiting for the guest failed: {e}", self.index);
                    return Ok(());
                }
            };
            if ready[1] {
                let _ = sys::eventfd_drain(self.stop_fd.as_fd());
            }
            if ready[0] {
                let _ = sys::eventfd_drain(self.kick.as_fd());
                self.stats.found_by_wakeup.fetch_add(1, Ordering::Relaxed);
                self.policy.observe_gap(idle_since.elapsed());
            }
            if self.stopping() {
                return Ok(());
            }
        }
    }

    /// Polls the avail index for up to the window. True when work arrived.
    fn poll_ring(&mut self, mem: &GuestMemoryMmap) -> Result<bool, virtio_queue::Error> {
        let start = Instant::now();
        let window = self.policy.cfg.window;
        let mut found = false;
        loop {
            let avail = self.queue.avail_idx(mem, Ordering::Acquire)?;
            if avail.0 != self.queue.next_avail() {
                found = true;
                break;
            }
            if self.stop.load(Ordering::Relaxed) || start.elapsed() >= window {
                break;
            }
            std::hint::spin_loop();
        }
        self.stats
            .poll_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(found)
    }

    /// Serves every available chain; notifies the guest if it asked for it.
    /// Returns how many chains were served.
    fn serve_batch(&mut self, mem: &GuestMemoryMmap) -> Result<u64, virtio_queue::Error> {
        let mut served = 0u64;
        while !self.stop.load(Ordering::Relaxed) {
            let Some(chain) = self.queue.pop_descriptor_chain(mem) else {
                break;
            };
            let started = Instant::now();
            let head = chain.head_index();
            let (len, bytes) = match split_chain(mem, chain) {
                Ok((mut r, mut w)) => {
                    let request_bytes = xvfs_fs::io::RequestReader::remaining(&r);
                    let n = self.server.handle(&mut r, &mut w);
                    (n, (request_bytes + n) as u64)
                }
                Err(e) => {
                    self.stats.bad_chains.fetch_add(1, Ordering::Relaxed);
                    if let Some(n) = self.bad_chain_log.check() {
                        warn!(
                            "queue {}: malformed descriptor chain {head}: {e} ({n} similar suppressed)",
                            self.index
                        );
                    }
                    (0, 0)
                }
            };
            self.queue.add_used(mem, head, len as u32)?;
            self.stats
                .record(bytes, started.elapsed().as_nanos() as u64);
            served += 1;
        }
        if served > 0 && self.queue.needs_notification(mem)? {
            self.notify();
        }
        Ok(served)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mode: PollMode) -> PollConfig {
        PollConfig {
            mode,
            window: Duration::from_micros(50),
            wake_cost: Duration::from_micros(10),
        }
    }

    #[test]
    fn adaptive_stops_polling_on_slow_arrivals_and_resumes_on_fast_ones() {
        let mut p = PollPolicy::new(cfg(PollMode::Adaptive));
        assert!(p.should_poll(), "polls until it has seen the traffic");
        for _ in 0..20 {
            p.observe_gap(Duration::from_millis(5));
        }
        assert!(!p.should_poll(), "5 ms gaps are far beyond 60 µs");
        let mut n = 0;
        while !p.should_poll() {
            p.observe_gap(Duration::from_micros(5));
            n += 1;
            assert!(n < 64, "must resume within a short burst");
        }
    }

    #[test]
    fn never_and_always_ignore_the_traffic() {
        let mut never = PollPolicy::new(cfg(PollMode::Never));
        let mut always = PollPolicy::new(cfg(PollMode::Always));
        for _ in 0..10 {
            never.observe_gap(Duration::from_micros(1));
            always.observe_gap(Duration::from_secs(1));
        }
        assert!(!never.should_poll());
        assert!(always.should_poll());
        let zero = PollPolicy::new(PollConfig {
            window: Duration::ZERO,
            ..cfg(PollMode::Always)
        });
        assert!(!zero.should_poll(), "a zero window never polls");
    }

    #[test]
    fn wake_cost_is_measured() {
        let c = measure_wake_cost(20);
        assert!(
            c > Duration::ZERO && c < Duration::from_millis(100),
            "{c:?}"
        );
    }
}
