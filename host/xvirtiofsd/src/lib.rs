// SPDX-License-Identifier: Apache-2.0
//! xvirtiofsd: a vhost-user-fs back-end that serves a host directory to virtual
//! machines over virtio-fs.
//!
//! Layers, in the direction data flows:
//! [`vhost_user`] (control socket) → [`queue`] (one worker per virtqueue) →
//! [`chain`] (descriptor chain as request/reply) → `xvfs_fs::Server` (FUSE) →
//! `xvfs_fs::PassthroughFs` (host directory) → reply → used ring.

#[cfg(feature = "fault-injection")]
pub mod attack;
pub mod caps;
pub mod cgroup;
pub mod chain;
pub mod checkpoint;
pub mod cli;
pub mod confine;
pub mod control;
pub mod daemon;
pub mod dirty_log;
pub mod holder;
pub mod idmap;
pub mod keeper;
pub mod logger;
pub mod mem;
pub mod metrics;
pub mod metrics_file;
pub mod migration;
pub mod poll;
pub mod queue;
pub mod record;
pub mod replay;
pub mod sandbox;
pub mod service_manager;
pub mod settings;
pub mod socket;
pub mod successor;
pub mod sys;
pub mod trust;
pub mod upgrade;
pub mod vhost_user;

/// The FUSE server the queues serve: the one name for it in this crate.
pub type FsServer = xvfs_fs::PassthroughServer;

/// Formats an error with all its causes: `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
