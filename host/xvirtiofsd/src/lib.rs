// SPDX-License-Identifier: Apache-2.0
//! xvirtiofsd: a vhost-user-fs back-end that serves a host directory to virtual
//! machines over virtio-fs.
//!
//! Layers, in the direction data flows:
//! [`vhost_user`] (the vhost-user socket) → [`virtqueue::worker`] (one worker
//! per virtqueue) → [`virtqueue::chain`] (descriptor chain as request/reply) →
//! `xvfs_fs::Server` (FUSE) → `xvfs_fs::PassthroughFs` (host directory) →
//! reply → used ring. Beside them: [`cli`] (the command line and its
//! commands), [`ops`] (control socket, metrics, logging, `status`),
//! [`confine`], [`upgrade`], [`crash_restart`], [`migration`].

pub mod cli;
pub mod confine;
pub mod crash_restart;
pub mod daemon;
pub mod error;
pub mod migration;
pub mod ops;
pub mod settings;
pub mod setup;
pub mod socket;
pub mod sys;
pub mod upgrade;
pub mod vhost_user;
pub mod virtqueue;

/// `--version`: the package version, with the build tag if one was set.
pub const VERSION: &str = env!("XVFS_VERSION");
/// The git commit this build is of.
pub const COMMIT: &str = env!("XVFS_COMMIT");
/// `-V`: the version and the commit.
pub const VERSION_LINE: &str = concat!(env!("XVFS_VERSION"), " (commit ", env!("XVFS_COMMIT"), ")");

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
