// SPDX-License-Identifier: Apache-2.0
//! `semblock` and `sempost` as Filebench's System V semaphores
//! (`flowoplib_semblock_init`, `flowoplib_semblock`, `flowoplib_sempost` in
//! `flowop_library.c`; Filebench uses System V semaphores where the system
//! has them, as Linux does):
//!
//! - Every thread's `semblock` flowop has a pair of its own: the posts
//!   waiting (`lw`, from 0) and the room for posts (`hw`, from the
//!   semblock's `highwater`, default 1).
//! - `semblock value=V` first adds V to the room, then waits until V posts
//!   wait and takes them.
//! - `sempost value=V,target=NAME` posts V to every thread's semblock
//!   named NAME, one after the other; with `blocking` each post first waits
//!   until the room is at least V and takes V from it (one atomic step).
//!   So blocking posters run at most `highwater` posts ahead of what the
//!   blocked threads have asked for; without `blocking` they never wait.
//!   The `highwater` of a sempost does nothing (as in Filebench).
//! - A `value` below 1 counts as 1 (Filebench's `value=0` would be System V's
//!   wait-for-zero, which no personality uses).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::tick::TICK;

#[derive(Debug, Default)]
struct Counts {
    /// Posts waiting to be taken.
    lw: i64,
    /// Room for blocking posts.
    hw: i64,
}

/// The semaphore pair of one thread's `semblock` flowop.
#[derive(Debug, Default)]
pub struct SemPair {
    counts: Mutex<Counts>,
    cv: Condvar,
}

impl SemPair {
    pub fn new(highwater: i64) -> Self {
        SemPair {
            counts: Mutex::new(Counts {
                lw: 0,
                hw: highwater,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while `blocked` holds, looking at `stop` every [`TICK`];
    /// returns the guard, or `None` when the run stopped first.
    fn wait_while<'a>(
        &self,
        mut g: MutexGuard<'a, Counts>,
        stop: &AtomicBool,
        blocked: impl Fn(&Counts) -> bool,
    ) -> Option<MutexGuard<'a, Counts>> {
        while blocked(&g) {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(g)
    }

    /// `semblock value=V`: room += V, then takes V posts (waiting for
    /// them). False when the run stopped first.
    pub fn block(&self, value: i64, stop: &AtomicBool) -> bool {
        let mut g = self.lock();
        g.hw += value;
        self.cv.notify_all();
        let Some(mut g) = self.wait_while(g, stop, |c| c.lw < value) else {
            return false;
        };
        g.lw -= value;
        true
    }

    /// One post of `sempost value=V`: with `blocking`, waits for V of room
    /// and takes it. False when the run stopped first.
    pub fn post(&self, value: i64, blocking: bool, stop: &AtomicBool) -> bool {
        let g = self.lock();
        let Some(mut g) = self.wait_while(g, stop, |c| blocking && c.hw < value) else {
            return false;
        };
        if blocking {
            g.hw -= value;
        }
        g.lw += value;
        self.cv.notify_all();
        true
    }

    /// (posts waiting, room).
    pub fn counts(&self) -> (i64, i64) {
        let g = self.lock();
        (g.lw, g.hw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_posts_stop_at_highwater_plus_what_is_asked() {
        let s = SemPair::new(1000);
        let stop = AtomicBool::new(false);
        // Nobody blocked yet: 1000 blocking posts fit, the next waits.
        for _ in 0..1000 {
            assert!(s.post(1, true, &stop));
        }
        assert_eq!(s.counts(), (1000, 0));
        // A semblock of 3200 adds 3200 of room, and needs 3200 posts: it
        // gets them (oltp's lg-block: value=3200, highwater=1000).
        let s2 = std::sync::Arc::new(s);
        let t = {
            let s = s2.clone();
            std::thread::spawn(move || s.block(3200, &AtomicBool::new(false)))
        };
        for _ in 0..2200 {
            assert!(s2.post(1, true, &stop));
        }
        assert!(t.join().unwrap_or(false));
        // 3200 taken; 1000 more could be posted before the next semblock.
        assert_eq!(s2.counts(), (0, 1000));
    }

    #[test]
    fn a_blocked_post_gives_up_when_stopped() {
        let s = SemPair::new(1);
        let stop = AtomicBool::new(false);
        assert!(s.post(1, true, &stop));
        stop.store(true, Ordering::Relaxed);
        assert!(!s.post(1, true, &stop));
        assert!(!s.block(5, &stop));
        // Non-blocking posts never wait.
        assert!(s.post(1, false, &stop));
    }
}
