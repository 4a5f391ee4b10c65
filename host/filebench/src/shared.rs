// SPDX-License-Identifier: Apache-2.0
//! State the threads of a run share: the stop flag, why the run ended,
//! semaphores ([`crate::sem`]), block/wakeup points and the event
//! generator ([`crate::limit`]).
//! Every wait here wakes up at least every [`TICK`](crate::tick::TICK) to look at the stop flag,
//! so a run always ends within its run time (if it has one) plus a bounded
//! shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::ast::QuitMode;
use crate::limit::EventGen;
use crate::sem::SemPair;
use crate::tick::TICK;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A `block` flowop's wake-up point: `wakeup target=NAME` releases every
/// thread blocked in NAME.
#[derive(Debug, Default)]
pub struct WakePoint {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl WakePoint {
    pub fn block(&self, stop: &AtomicBool) -> bool {
        let mut g = lock(&self.generation);
        let start = *g;
        while *g == start {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            g = self
                .cv
                .wait_timeout(g, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    pub fn wake(&self) {
        *lock(&self.generation) += 1;
        self.cv.notify_all();
    }
}

/// Why a thread stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// The run's stop flag.
    Stopped,
    /// A finish condition was met (`finishoncount`, `finishonbytes`).
    Done,
    /// No file was left to pick (Filebench's "out of resources").
    NoResource(String),
    /// An operation failed.
    Error(String),
}

/// Everything the threads of one run share.
#[derive(Debug, Default)]
pub struct Shared {
    pub stop: AtomicBool,
    pub go: Mutex<bool>,
    pub go_cv: Condvar,
    /// Threads still running.
    pub live: AtomicUsize,
    /// Threads that ended with `Done`.
    pub done: AtomicUsize,
    /// First reason that ends the whole run (an error).
    pub abort: Mutex<Option<End>>,
    /// The first "out of resources" of a thread (it is done).
    pub norsc: Mutex<Option<String>>,
    pub errors: Mutex<Vec<String>>,
    pub changed: Condvar,
    pub changed_lock: Mutex<()>,
    /// Every thread's pair of each named `semblock`.
    pub sems: HashMap<String, Vec<Arc<SemPair>>>,
    pub wakepoints: HashMap<String, Arc<WakePoint>>,
    pub events: Option<Arc<EventGen>>,
}

impl Shared {
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Blocks a new thread until the run starts; false if it was stopped.
    pub fn wait_go(&self) -> bool {
        let mut g = lock(&self.go);
        while !*g {
            if self.stopped() {
                return false;
            }
            g = self
                .go_cv
                .wait_timeout(g, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    pub fn start(&self) {
        if let Some(ev) = &self.events {
            ev.restart();
        }
        *lock(&self.go) = true;
        self.go_cv.notify_all();
    }

    /// Records how a thread ended and wakes the run controller.
    pub fn thread_ended(&self, end: &End) {
        match end {
            End::Done => {
                self.done.fetch_add(1, Ordering::AcqRel);
            }
            End::NoResource(m) => {
                lock(&self.norsc).get_or_insert_with(|| m.clone());
                self.done.fetch_add(1, Ordering::AcqRel);
            }
            End::Error(e) => {
                lock(&self.errors).push(e.clone());
                let mut a = lock(&self.abort);
                if a.is_none() {
                    *a = Some(end.clone());
                }
            }
            End::Stopped => {}
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
        let _g = lock(&self.changed_lock);
        self.changed.notify_all();
    }

    pub fn abort_reason(&self) -> Option<End> {
        lock(&self.abort).clone()
    }

    /// Why the run ends by itself now, if it does (Filebench's rules: an
    /// error ends it; a thread done, by a finish condition or out of files,
    /// ends it unless the quit mode is `alldone`; no thread left ends it).
    pub fn end_reason(&self, mode: QuitMode) -> Option<String> {
        if self.abort_reason().is_some() {
            return Some("error".into());
        }
        let live = self.live.load(Ordering::Acquire);
        let done = self.done.load(Ordering::Acquire);
        if live > 0 && (done == 0 || mode == QuitMode::AllDone) {
            return None;
        }
        let norsc = lock(&self.norsc).clone();
        Some(match (mode, norsc) {
            (QuitMode::AllDone, _) => "alldone".into(),
            (QuitMode::FirstDone, Some(m)) => format!("firstdone ({m})"),
            (QuitMode::FirstDone, None) => "firstdone".into(),
            (QuitMode::Timeout, Some(m)) => format!("out of resources: {m}"),
            (QuitMode::Timeout, None) if live == 0 => "alldone".into(),
            (QuitMode::Timeout, None) => "done".into(),
        })
    }

    pub fn errors(&self) -> Vec<String> {
        lock(&self.errors).clone()
    }

    /// Sleeps until something changed or `d` passed.
    pub fn wait_change(&self, d: Duration) {
        let g = lock(&self.changed_lock);
        let _ = self.changed.wait_timeout(g, d.min(TICK));
    }
}
