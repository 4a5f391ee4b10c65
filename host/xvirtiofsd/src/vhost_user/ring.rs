// SPDX-License-Identifier: Apache-2.0
//! One virtqueue: its configuration as the front-end set it, and its
//! lifecycle as a state machine ([`RingState`]) whose transitions are the
//! methods of [`Vring`].

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

use crate::sys;
use crate::virtqueue::worker::{CallFd, QueueStats, RingFault, Worker, WorkerExit};

use super::error::VhostUserError;

/// Where a ring stands.
#[derive(Debug, Default)]
pub(super) enum RingState {
    /// No kick eventfd: never started, or stopped by GET_VRING_BASE.
    #[default]
    Stopped,
    /// Started (a kick eventfd arrived) but not running: disabled, not
    /// completely configured yet, or quiesced for a handover.
    Ready { kick: Arc<File> },
    /// A worker serves it.
    Running { kick: Arc<File>, worker: Worker },
    /// Its worker found it corrupt; nothing serves it until the front-end
    /// resets it (GET_VRING_BASE, or a new kick eventfd).
    Broken { kick: Arc<File> },
}

/// The configuration of one vring, and its state.
#[derive(Debug, Default)]
pub(super) struct Vring {
    pub(super) size: u16,
    pub(super) desc_va: u64,
    pub(super) avail_va: u64,
    pub(super) used_va: u64,
    pub(super) addr_set: bool,
    /// VHOST_VRING_F_LOG: log writes to the used ring at `log_addr`.
    pub(super) log_used: bool,
    pub(super) log_addr: u64,
    pub(super) base: u16,
    /// Where the worker left the used index when it last stopped.
    pub(super) next_used: u16,
    pub(super) call: CallFd,
    pub(super) err: Option<File>,
    pub(super) enabled: bool,
    pub(super) state: RingState,
    pub(super) stats: Arc<QueueStats>,
}

impl Vring {
    /// A ring with nothing configured that keeps `stats`.
    pub(super) fn reset(stats: Arc<QueueStats>) -> Vring {
        Vring {
            stats,
            ..Vring::default()
        }
    }

    /// The kick eventfd, in every state but [`RingState::Stopped`].
    pub(super) fn kick(&self) -> Option<&Arc<File>> {
        match &self.state {
            RingState::Stopped => None,
            RingState::Ready { kick }
            | RingState::Running { kick, .. }
            | RingState::Broken { kick } => Some(kick),
        }
    }

    /// Started: a kick eventfd arrived and GET_VRING_BASE has not stopped
    /// it since.
    pub(super) fn started(&self) -> bool {
        self.kick().is_some()
    }

    /// A worker serves it.
    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, RingState::Running { .. })
    }

    pub(super) fn is_broken(&self) -> bool {
        matches!(self.state, RingState::Broken { .. })
    }

    /// Ready to run: started, enabled and completely configured.
    fn can_run(&self) -> bool {
        matches!(self.state, RingState::Ready { .. })
            && self.enabled
            && self.addr_set
            && self.size != 0
    }

    fn record(&mut self, exit: &WorkerExit) {
        self.base = exit.pos.next_avail;
        self.next_used = exit.pos.next_used;
    }

    /// Running → Ready: stops the worker at a request boundary and keeps its
    /// position. Any other state is left alone.
    pub(super) fn stop(&mut self) {
        let state = std::mem::take(&mut self.state);
        self.state = match state {
            RingState::Running { kick, worker } => {
                if let Some(exit) = worker.stop() {
                    self.record(&exit);
                }
                RingState::Ready { kick }
            }
            other => other,
        };
    }

    /// SET_VRING_KICK: a new kick eventfd (or none) restarts the ring with it;
    /// a broken ring recovers.
    pub(super) fn set_kick(&mut self, kick: Option<Arc<File>>) {
        self.stop();
        self.state = match kick {
            Some(kick) => RingState::Ready { kick },
            None => RingState::Stopped,
        };
    }

    /// GET_VRING_BASE: stops the ring (whatever its state) and returns
    /// where the guest should continue.
    pub(super) fn take_base(&mut self) -> u16 {
        self.stop();
        self.state = RingState::Stopped;
        self.base
    }

    /// Ready → Running, once the ring is enabled and configured; `spawn`
    /// starts the worker from the kick eventfd.
    pub(super) fn start(
        &mut self,
        spawn: impl FnOnce(&Vring, Arc<File>) -> Result<Worker, VhostUserError>,
    ) -> Result<bool, VhostUserError> {
        if !self.can_run() {
            return Ok(false);
        }
        let RingState::Ready { kick } = std::mem::take(&mut self.state) else {
            return Ok(false);
        };
        match spawn(self, Arc::clone(&kick)) {
            Ok(worker) => {
                self.state = RingState::Running { kick, worker };
                Ok(true)
            }
            Err(e) => {
                self.state = RingState::Ready { kick };
                Err(e)
            }
        }
    }

    /// Running → Broken when the worker has ended on a fault: keeps its
    /// position. Returns the fault; `None` while the worker runs.
    pub(super) fn reap(&mut self) -> Option<RingFault> {
        if !matches!(&self.state, RingState::Running { worker, .. } if worker.has_faulted()) {
            return None;
        }
        let RingState::Running { kick, worker } = std::mem::take(&mut self.state) else {
            return None;
        };
        let exit = worker.stop()?;
        self.record(&exit);
        let Some(fault) = exit.fault else {
            // Ended without a fault (cannot happen unasked): runnable again.
            self.state = RingState::Ready { kick };
            return None;
        };
        self.state = RingState::Broken { kick };
        Some(fault)
    }

    /// Tells the front-end the ring is broken, on the error eventfd it gave
    /// (SET_VRING_ERR), if any.
    pub(super) fn signal_error(&self) {
        if let Some(err) = &self.err {
            let _ = sys::eventfd_signal(err.as_fd());
        }
    }
}
