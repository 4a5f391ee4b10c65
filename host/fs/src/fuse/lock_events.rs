// SPDX-License-Identifier: Apache-2.0
//! What may let a waiting SETLKW through, as the server sees it happen.
//!
//! A waiting SETLKW (see [`super::locks`]) is tried again by its queue
//! worker. Locks this server lets go of (an unlock, a FLUSH or RELEASE that
//! drops an owner's locks, the session's end) and FUSE_INTERRUPTs arrive
//! here: each is logged with the node it concerns and an eventfd is
//! signalled, so that a worker tries again at once, and only the requests
//! the event concerns. Locks another process or guest holds are let go of
//! without telling anyone: for those a worker tries again on its own, ever
//! less often (see the worker). Nothing is logged or signalled while no
//! SETLKW waits.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// Events kept for workers that have not looked yet; one that missed more
/// tries everything again.
const KEPT: usize = 64;

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockEvent {
    /// Locks on this node were let go of.
    Released(u64),
    /// A FUSE_INTERRUPT arrived.
    Interrupted,
    /// Anything may have changed (the session ended).
    All,
}

/// What a worker should try again, from the events since it last looked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wake {
    /// Every waiting request.
    pub all: bool,
    /// The waiting requests on these nodes.
    pub nodes: Vec<u64>,
    /// Whether a FUSE_INTERRUPT may name one of them.
    pub interrupts: bool,
}

impl Wake {
    /// Nothing happened.
    pub fn is_empty(&self) -> bool {
        !self.all && !self.interrupts && self.nodes.is_empty()
    }

    /// Whether a request waiting on `node` is to be tried again.
    pub fn covers(&self, node: u64) -> bool {
        self.all || self.nodes.contains(&node)
    }
}

#[derive(Debug, Default)]
struct Log {
    /// Events so far.
    count: u64,
    /// The last [`KEPT`], with their numbers.
    recent: VecDeque<(u64, LockEvent)>,
}

/// The events of one server.
#[derive(Debug, Default)]
pub(crate) struct LockEvents {
    log: Mutex<Log>,
    fd: OnceLock<Option<OwnedFd>>,
}

impl LockEvents {
    /// The eventfd signalled once per event (created on first use; none if
    /// it cannot be made: workers then only try again on their own).
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd
            .get_or_init(|| crate::sys::eventfd().ok())
            .as_ref()
            .map(AsFd::as_fd)
    }

    /// Logs `e` and wakes the workers.
    pub(crate) fn note(&self, e: LockEvent) {
        {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            log.count += 1;
            let n = log.count;
            if log.recent.len() == KEPT {
                log.recent.pop_front();
            }
            log.recent.push_back((n, e));
        }
        if let Some(fd) = self.fd() {
            let _ = crate::sys::eventfd_signal(fd);
        }
    }

    /// The events after number `seen`, which becomes the last one.
    pub(crate) fn since(&self, seen: &mut u64) -> Wake {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut wake = Wake::default();
        if log.count == *seen {
            return wake;
        }
        let oldest_kept = log.recent.front().map_or(log.count + 1, |&(n, _)| n);
        wake.all = *seen + 1 < oldest_kept;
        for &(n, e) in &log.recent {
            if n <= *seen {
                continue;
            }
            match e {
                LockEvent::Released(node) if !wake.nodes.contains(&node) => wake.nodes.push(node),
                LockEvent::Released(_) => {}
                LockEvent::Interrupted => wake.interrupts = true,
                LockEvent::All => wake.all = true,
            }
        }
        *seen = log.count;
        wake
    }

    /// The number of the last event (a worker that starts waiting looks
    /// from there).
    pub(crate) fn last(&self) -> u64 {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_sees_each_event_once_and_everything_when_it_fell_behind() {
        let ev = LockEvents::default();
        let mut seen = ev.last();
        assert!(ev.since(&mut seen).is_empty());
        ev.note(LockEvent::Released(5));
        ev.note(LockEvent::Released(5));
        ev.note(LockEvent::Interrupted);
        ev.note(LockEvent::Released(9));
        let w = ev.since(&mut seen);
        assert_eq!(
            w,
            Wake {
                all: false,
                nodes: vec![5, 9],
                interrupts: true
            }
        );
        assert!(w.covers(9) && !w.covers(7));
        assert!(ev.since(&mut seen).is_empty(), "once");
        for n in 0..KEPT as u64 + 1 {
            ev.note(LockEvent::Released(100 + n));
        }
        let w = ev.since(&mut seen);
        assert!(w.all && w.covers(7), "one event was forgotten");
        ev.note(LockEvent::All);
        assert!(ev.since(&mut seen).all);
        assert!(ev.fd().is_some());
    }
}
