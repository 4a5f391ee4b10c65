// SPDX-License-Identifier: Apache-2.0
//! The event system: `eventgen rate=N` posts events into one pool shared by
//! every thread of the run, and the four limit flowops take events out of it
//! (Filebench's `eventgen.c` and `flowoplib_eventlimit`, `_iopslimit`,
//! `_opslimit`, `_bwlimit` in `flowop_library.c`):
//!
//! - The generator posts in batches: it sleeps ten event periods (`10/N` s,
//!   at least 1 µs) and then adds the events of the time it slept, but only
//!   while fewer than `5 × N` events are waiting. The pool is emptied when a
//!   run starts. Filebench's generator thread runs on across runs, so its
//!   first batch comes at a random point of its period; we put it at half a
//!   period, the expected value. With [`Pacing::Exact`] (`--exact`) the
//!   events are posted one by one as their time comes instead.
//! - `eventlimit` takes one event per pass.
//! - `iopslimit`, `opslimit` and `bwlimit` keep, per thread, the count they
//!   saw at their last pass and a bucket: the count done since the last pass
//!   is taken from the bucket, and while the bucket is below zero they take
//!   events to cover it: one event per I/O (`iopslimit`: reads and writes),
//!   one per operation (`opslimit`: every file-system flowop), one per MiB
//!   (`bwlimit`: bytes read and written; it takes `deficit / 1 MiB + 1`
//!   events, so the bucket goes back above zero). The count is the thread's
//!   own flowop named by `target=`, else the total of the whole process
//!   instance (every thread of it), as Filebench's per-process
//!   `controlstats`. The first pass that sees a count above zero only
//!   remembers it.
//! - Without an eventgen rate of at least 1 (Filebench takes the integer
//!   part) the limit flowops do nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::tick::TICK;

/// What one `bwlimit` event is worth (Filebench's `MB`).
pub const BW_EVENT_BYTES: u64 = 1 << 20;

/// How the generator posts its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pacing {
    /// As Filebench: a batch every ten periods, capped at 5 s of events.
    #[default]
    Filebench,
    /// Each event at its own time (same cap).
    Exact,
}

#[derive(Debug)]
struct Pool {
    start: Instant,
    /// Batches (or, exact, events) accounted for since `start`.
    posted: u64,
    /// Events waiting.
    queue: u64,
}

/// `eventgen rate=N`: the pool of events.
#[derive(Debug)]
pub struct EventGen {
    rate: u64,
    pacing: Pacing,
    pool: Mutex<Pool>,
}

impl EventGen {
    /// `None` for a rate below 1 (the limit flowops then do nothing).
    pub fn new(rate: f64, pacing: Pacing) -> Option<Self> {
        let rate = if rate.is_finite() { rate as u64 } else { 0 };
        (rate >= 1).then(|| EventGen {
            rate,
            pacing,
            pool: Mutex::new(Pool {
                start: Instant::now(),
                posted: 0,
                queue: 0,
            }),
        })
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Empties the pool; the generator's time starts again now.
    pub fn restart(&self) {
        let mut p = self.lock();
        p.start = Instant::now();
        p.posted = 0;
        p.queue = 0;
    }

    /// The generator's batch period and the events of one batch.
    fn batch(&self) -> (Duration, u64) {
        if self.rate <= 10_000_000 {
            (Duration::from_secs_f64(10.0 / self.rate as f64), 10)
        } else {
            (Duration::from_micros(1), self.rate / 1_000_000)
        }
    }

    /// Posts what is due at `now`; returns when the next post is due.
    fn post_due(&self, p: &mut Pool, now: Instant) -> Instant {
        let cap = 5 * self.rate;
        let t = now.saturating_duration_since(p.start).as_secs_f64();
        let (count, due, next) = match self.pacing {
            Pacing::Filebench => {
                let (period, count) = self.batch();
                let per = period.as_secs_f64();
                // Batch k (from 1) at (k - 1/2) periods.
                let due = (t / per + 0.5).floor() as u64;
                let next = p.start + Duration::from_secs_f64((due as f64 + 0.5) * per);
                (count, due, next)
            }
            Pacing::Exact => {
                let due = (t * self.rate as f64).floor() as u64;
                let next = p.start + Duration::from_secs_f64((due + 1) as f64 / self.rate as f64);
                (1, due, next)
            }
        };
        let new = due.saturating_sub(p.posted);
        p.posted = p.posted.max(due);
        // Each post adds `count` while fewer than `cap` wait (it may
        // overshoot by one post, as Filebench's).
        if new > 0 && p.queue < cap {
            let posts_to_cap = (cap - p.queue).div_ceil(count);
            p.queue += new.min(posts_to_cap) * count;
        }
        next
    }

    /// Events waiting now (for tests and reports).
    pub fn waiting(&self) -> u64 {
        let mut p = self.lock();
        self.post_due(&mut p, Instant::now());
        p.queue
    }

    /// Waits until `n` events wait and takes them; false when the run
    /// stopped first.
    pub fn take(&self, n: u64, stop: &AtomicBool) -> bool {
        if n == 0 {
            return true;
        }
        loop {
            let next = {
                let mut p = self.lock();
                let next = self.post_due(&mut p, Instant::now());
                if p.queue >= n {
                    p.queue -= n;
                    return true;
                }
                next
            };
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let wait = next.saturating_duration_since(Instant::now());
            std::thread::sleep(wait.clamp(Duration::from_micros(50), TICK));
        }
    }
}

/// The counts of one process instance that the limit flowops without
/// `target=` look at (Filebench's per-process `controlstats`).
#[derive(Debug, Default)]
pub struct ProcCounts {
    /// File-system operations (the flowops of the IO Summary).
    pub ops: AtomicU64,
    /// Their bytes.
    pub io_bytes: AtomicU64,
    /// Reads and writes.
    pub rw_ops: AtomicU64,
    /// Bytes read and written.
    pub rw_bytes: AtomicU64,
}

impl ProcCounts {
    pub fn add(&self, io: bool, rw: bool, bytes: u64) {
        if io {
            self.ops.fetch_add(1, Ordering::Relaxed);
            self.io_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        if rw {
            self.rw_ops.fetch_add(1, Ordering::Relaxed);
            self.rw_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

/// The unit a limit flowop counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `iopslimit`: reads and writes; one event each.
    Io,
    /// `opslimit`: operations; one event each.
    Op,
    /// `bwlimit`: bytes; one event per [`BW_EVENT_BYTES`].
    Byte,
}

/// One thread's state of one `iopslimit`/`opslimit`/`bwlimit` flowop.
#[derive(Debug, Default, Clone)]
pub struct Bucket {
    last: u64,
    level: i64,
}

impl Bucket {
    /// The events this pass has to take, given the count now (and, after
    /// they are taken, [`Bucket::credit`] them).
    pub fn debit(&mut self, unit: Unit, count: u64) -> u64 {
        if self.last == 0 {
            self.last = count;
            return 0;
        }
        let delta = count.wrapping_sub(self.last) as i64;
        self.last = count;
        self.level = self.level.saturating_sub(delta);
        if self.level >= 0 {
            return 0;
        }
        let deficit = self.level.unsigned_abs();
        match unit {
            Unit::Byte => deficit / BW_EVENT_BYTES + 1,
            Unit::Io | Unit::Op => deficit,
        }
    }

    pub fn credit(&mut self, unit: Unit, events: u64) {
        let worth = if unit == Unit::Byte {
            BW_EVENT_BYTES
        } else {
            1
        };
        let add = i64::try_from(events.saturating_mul(worth)).unwrap_or(i64::MAX);
        self.level = self.level.saturating_add(add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_of_ten_periods_at_half_a_period() {
        // rate 100: a batch of 10 every 100 ms, the first at 50 ms.
        let ev = EventGen::new(100.0, Pacing::Filebench).unwrap();
        let mut p = ev.lock();
        let s = p.start;
        ev.post_due(&mut p, s + Duration::from_millis(49));
        assert_eq!(p.queue, 0);
        ev.post_due(&mut p, s + Duration::from_millis(51));
        assert_eq!(p.queue, 10);
        ev.post_due(&mut p, s + Duration::from_millis(251));
        assert_eq!(p.queue, 30);
        // The cap: 5 s of events (500), overshooting by at most one batch.
        ev.post_due(&mut p, s + Duration::from_secs(100));
        assert_eq!(p.queue, 500);
    }

    #[test]
    fn exact_pacing_posts_each_event_on_time() {
        let ev = EventGen::new(100.0, Pacing::Exact).unwrap();
        let mut p = ev.lock();
        let s = p.start;
        ev.post_due(&mut p, s + Duration::from_millis(255));
        assert_eq!(p.queue, 25);
    }

    #[test]
    fn rates_below_one_disable_the_generator() {
        assert!(EventGen::new(0.9, Pacing::Filebench).is_none());
        assert_eq!(EventGen::new(10.7, Pacing::Filebench).unwrap().rate(), 10);
    }

    #[test]
    fn bwlimit_bucket_takes_one_event_per_mib_plus_one() {
        let mut b = Bucket::default();
        let k256 = 256 << 10;
        // First pass: remembers the count only.
        assert_eq!(b.debit(Unit::Byte, k256), 0);
        // 256 KiB more: 0 MiB + 1 = one event, the bucket goes to +768 KiB.
        assert_eq!(b.debit(Unit::Byte, 2 * k256), 1);
        b.credit(Unit::Byte, 1);
        for k in 3..=5 {
            assert_eq!(b.debit(Unit::Byte, k * k256), 0);
        }
        assert_eq!(b.debit(Unit::Byte, 6 * k256), 1);
    }

    #[test]
    fn ops_bucket_takes_one_event_per_operation_since_the_last_pass() {
        let mut b = Bucket::default();
        assert_eq!(b.debit(Unit::Op, 0), 0);
        assert_eq!(b.debit(Unit::Op, 3), 0);
        assert_eq!(b.debit(Unit::Op, 10), 7);
        b.credit(Unit::Op, 7);
        assert_eq!(b.debit(Unit::Op, 10), 0);
    }
}
