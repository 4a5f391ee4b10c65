// SPDX-License-Identifier: Apache-2.0
//! A live upgrade's successor, before it adopts the running daemon's state:
//! everything that needs a host path or takes milliseconds (cgroups, the
//! shared directory, the metrics file, the sandbox, capabilities, seccomp)
//! is done before it says HELLO, because from HELLO until it confirms the
//! predecessor's queues are stopped and the guest waits.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use log::warn;

use super::{canonical_shared_dir, own_settings, Daemon, Origin, Own};
use crate::cli::Opt;
use crate::confine::cgroup;
use crate::crash_restart::checkpoint::HolderLink;
use crate::error::SetupError;
use crate::ops::{control, logger};
use crate::setup::{self, caps_mask, Prepared};
use crate::upgrade::handover;
use crate::virtqueue::worker::measure_wake_cost;

impl Daemon {
    /// A successor: ask the daemon behind `control_path` for its state and
    /// adopt it.
    /// Its security settings come from `opt` and must equal the running
    /// daemon's (see [`crate::upgrade::trust`]).
    pub fn take_over(
        control_path: &Path,
        opt: &Opt,
        link: Option<HolderLink>,
    ) -> Result<Daemon, SetupError> {
        let result = take_over(control_path, opt, link);
        // Lines kept back while no log descriptor was known (an error
        // before the handover): to standard error now.
        logger::release();
        result
    }
}

fn take_over(
    control_path: &Path,
    opt: &Opt,
    link: Option<HolderLink>,
) -> Result<Daemon, SetupError> {
    let wake_cost = measure_wake_cost(200);
    // One connection for status, one for the preload, one for the
    // handover (the control socket serves one command per connection);
    // each peer is checked before anything is sent to it. All are opened
    // before the sandbox hides the control socket's path. The preload's,
    // accepted but not answered yet, witnesses who answers (see
    // `join_cgroups_early`).
    let status_peer = handover::connect(control_path)?;
    let preload_peer = handover::connect(control_path)?;
    let joined = join_cgroups_early(status_peer, &preload_peer);
    let peer = handover::connect(control_path)?;
    let shared_dir = canonical_shared_dir(opt)?;
    let mut prepared = prepare(opt, &shared_dir)?;
    preload(preload_peer, &mut prepared, &shared_dir);
    let mut inc = handover::receive(peer, control_path)?;
    own_settings(opt, &shared_dir, &mut inc)?;
    let own = Own {
        caps: caps_mask(opt)?,
        max_open: opt.max_open,
        migration_target: opt.migration_target,
        dax_window: opt.dax_window,
        joined,
        prepared,
    };
    Daemon::adopt(inc, wake_cost, own, link, Origin::Upgrade)
}

/// Asks the running daemon (on `peer`, a checked control connection) for
/// its inodes while it still serves, and proves them inside the share, so
/// that the pause need not (see [`xvfs_fs::passthrough::SharedDir::preload`]). Best effort: a
/// daemon that cannot preload (an older version) leaves the whole check to
/// the restore.
fn preload(peer: UnixStream, prepared: &mut Prepared, shared_dir: &Path) {
    let started = std::time::Instant::now();
    match handover::receive_preload(peer) {
        Ok(fds) => {
            let sent = fds.len();
            let proven = prepared.dir.preload(shared_dir, fds);
            log::info!(
                "upgrade: {proven} of {sent} inodes proven inside the share before the pause, \
                 in {} µs",
                started.elapsed().as_micros()
            );
        }
        Err(e) => log::info!(
            "upgrade: no preload ({}); every inode is checked during the pause",
            crate::error_chain(&e)
        ),
    }
}

/// Opens what the successor needs from host paths and enters its sandbox,
/// all from its own command line (which must agree with the state it is
/// then sent). Its log lines wait for the predecessor's log descriptor.
fn prepare(opt: &Opt, shared_dir: &Path) -> Result<Prepared, SetupError> {
    logger::hold();
    if opt.syslog {
        if let Err(e) = logger::use_syslog() {
            warn!(
                "--syslog: no system logger at {}: {e}; logging to standard error",
                logger::SYSLOG_SOCKET
            );
        }
    }
    Ok(setup::prepare(opt, shared_dir, 0)?)
}

/// Moves into the cgroups of the daemon on `peer` (a checked control
/// connection) once the process its status names is proven to be the one
/// that answers on `witness` (another control connection) and to hold the
/// vhost-user connection the status names: the status is the running
/// daemon's word, which a compromised daemon could forge to send its
/// successor into another process's cgroups. A cgroup migration can take
/// milliseconds, so this is done before the handover begins.
/// Returns that daemon's pid (its state must name the same one).
fn join_cgroups_early(peer: UnixStream, witness: &UnixStream) -> Option<u32> {
    let status = control::query_status_on(peer).ok()?;
    let s: control::StatusSummary = serde_json::from_str(status.trim()).ok()?;
    let pid = if s.serving_pid > 0 {
        s.serving_pid
    } else {
        s.pid
    };
    if let Err(why) = cgroup::prove_owner(pid, &s.connection, witness.as_fd()) {
        warn!("upgrade: not joining the running daemon's cgroups: {why}");
        return None;
    }
    cgroup::join_cgroups_of(pid as i32);
    Some(pid)
}
