// SPDX-License-Identifier: Apache-2.0
//! Flowops that pace or synchronise a thread: delay, hog, finishoncount,
//! finishonbytes, the limits (eventlimit, iopslimit, opslimit, bwlimit; see
//! [`crate::limit`]), semblock, sempost (see [`crate::sem`]), block, wakeup.

use std::time::{Duration, Instant};

use super::{Res, Worker};
use crate::ast::FlowopKind;
use crate::limit::Unit;
use crate::shared::End;
use crate::tick::TICK;

impl Worker {
    pub(super) fn delay(&mut self, i: usize) -> Res {
        let until = Instant::now() + Duration::from_secs_f64(self.plan.ops[i].value.max(0.0));
        while Instant::now() < until {
            if self.shared.stopped() {
                return Err(End::Stopped);
            }
            std::thread::sleep((until - Instant::now()).min(TICK));
        }
        Ok(0)
    }

    /// `hog value=N`: N one-byte stores to the thread's memory, as
    /// Filebench's loop (about one CPU cycle each).
    pub(super) fn hog(&mut self, i: usize) -> Res {
        let n = self.plan.ops[i].value.max(0.0) as u64;
        let p = self.buf.as_mut_ptr();
        for _ in 0..n {
            // SAFETY: `p` points to the first byte of `self.buf`, which is
            // never empty (it is at least one page) and is not otherwise
            // borrowed while the loop runs.
            unsafe { std::ptr::write_volatile(p, 1) };
        }
        Ok(0)
    }

    /// `finishoncount value=N` / `finishonbytes value=N`: the thread is done
    /// once its `target=` flowop (else its whole process: every
    /// file-system operation, their bytes) did N operations, or more than N
    /// bytes (`flowoplib_finishoncount`, `_finishonbytes`).
    pub(super) fn finish_on(&mut self, i: usize) -> Res {
        use std::sync::atomic::Ordering::Relaxed;
        let op = &self.plan.ops[i];
        let (ops, bytes) = match op.target_op {
            Some(t) => self.own.get(t).copied().unwrap_or_default(),
            None => (
                self.plan.proc.ops.load(Relaxed),
                self.plan.proc.io_bytes.load(Relaxed),
            ),
        };
        let n = op.value.max(0.0) as u64;
        let done = match op.kind {
            FlowopKind::FinishOnBytes => bytes > n,
            _ => ops >= n,
        };
        if done {
            return Err(End::Done);
        }
        Ok(0)
    }

    /// `eventlimit`, `iopslimit`, `opslimit`, `bwlimit`.
    pub(super) fn limit(&mut self, i: usize) -> Res {
        let op = &self.plan.ops[i];
        let Some(ev) = op.events.clone() else {
            // No eventgen rate: Filebench's limit flowops return before
            // they time anything, so nothing is counted.
            self.uncounted = true;
            return Ok(0);
        };
        let unit = match op.kind {
            FlowopKind::EventLimit => {
                return match ev.take(1, &self.shared.stop) {
                    true => Ok(0),
                    false => Err(End::Stopped),
                }
            }
            FlowopKind::IopsLimit => Unit::Io,
            FlowopKind::OpsLimit => Unit::Op,
            _ => Unit::Byte,
        };
        let count = self.limit_count(i, unit);
        let Some(bucket) = self.buckets.get_mut(i) else {
            return Ok(0);
        };
        let events = bucket.debit(unit, count);
        if events == 0 {
            return Ok(0);
        }
        if !ev.take(events, &self.shared.stop) {
            return Err(End::Stopped);
        }
        if let Some(b) = self.buckets.get_mut(i) {
            b.credit(unit, events);
        }
        Ok(0)
    }

    /// What limit flowop `i` counts: its `target=` flowop of this thread,
    /// else the whole process instance.
    fn limit_count(&self, i: usize, unit: Unit) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        match self.plan.ops[i].target_op {
            Some(t) => {
                let (ops, bytes) = self.own.get(t).copied().unwrap_or_default();
                if unit == Unit::Byte {
                    bytes
                } else {
                    ops
                }
            }
            None => {
                let p = &self.plan.proc;
                match unit {
                    Unit::Io => p.rw_ops.load(Relaxed),
                    Unit::Op => p.ops.load(Relaxed),
                    Unit::Byte => p.rw_bytes.load(Relaxed),
                }
            }
        }
    }

    pub(super) fn sem_block(&mut self, i: usize) -> Res {
        let op = &self.plan.ops[i];
        let sem = op
            .sem
            .clone()
            .ok_or_else(|| self.fail(i, "semblock", "no semaphore"))?;
        if !sem.block(op.value.max(1.0) as i64, &self.shared.stop) {
            return Err(End::Stopped);
        }
        Ok(0)
    }

    pub(super) fn sem_post(&mut self, i: usize) -> Res {
        let op = &self.plan.ops[i];
        let targets = op
            .sem_targets
            .clone()
            .ok_or_else(|| self.fail(i, "sempost", "no semblock to post to"))?;
        let value = op.value.max(1.0) as i64;
        for t in targets.iter() {
            if !t.post(value, op.blocking, &self.shared.stop) {
                return Err(End::Stopped);
            }
        }
        Ok(0)
    }

    pub(super) fn block(&mut self, i: usize) -> Res {
        let wp = self.plan.ops[i]
            .wake
            .clone()
            .ok_or_else(|| self.fail(i, "block", "no wake point"))?;
        if !wp.block(&self.shared.stop) {
            return Err(End::Stopped);
        }
        Ok(0)
    }

    pub(super) fn wakeup(&mut self, i: usize) -> Res {
        if let Some(wp) = &self.plan.ops[i].wake {
            wp.wake();
        }
        Ok(0)
    }
}
