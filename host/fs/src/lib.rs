// SPDX-License-Identifier: Apache-2.0
//! FUSE protocol, file system seam and the passthrough file system of
//! xvirtiofsd.
//!
//! # Layers
//!
//! Data flows one way, each layer only importing the ones after it:
//!
//! 1. transport ends, [`io::RequestReader`] / [`io::ReplyWriter`] (the daemon
//!    implements them over virtio descriptor chains, tests over byte buffers);
//! 2. the FUSE layer, [`fuse`]: wire format ([`abi`]), the negotiated
//!    [`session`], and the [`Server`] that checks each request, parses it into
//!    typed arguments and encodes the reply — one small function per opcode;
//! 3. the seam, [`filesystem::FileSystem`]: one method per FUSE operation,
//!    typed arguments and replies, in five family traits ([`filesystem::Session`],
//!    [`filesystem::Nodes`], [`filesystem::Files`], [`filesystem::Locks`],
//!    [`filesystem::Extended`]) that a file system implements where each
//!    family's operations live; READ and WRITE hand the file system a
//!    zero-copy sink/source over guest memory;
//! 4. file systems: [`passthrough`] (a host directory; what the daemon serves)
//!    and [`memfs`] (in memory; for tests and the fuzzer).
//!
//! The daemon builds a [`PassthroughFs`] from a [`Config`] (before entering its
//! sandbox), wraps it in a [`Server`] ([`PassthroughServer`]), and calls
//! [`Server::handle`] from every queue worker thread. For live upgrade it saves
//! [`PassthroughFs::snapshot`] and [`Server::session`], and restores them with
//! [`PassthroughFs::restore`] and [`Server::restore_session`].

#![deny(missing_docs)]

#[macro_use]
pub mod ratelimit;

pub mod filesystem;
pub mod fuse;
pub mod ids;
pub mod journal;
pub mod memfs;
pub mod passthrough;
pub mod state;
mod sys;
#[cfg(feature = "test-util")]
pub mod testing;

pub use fuse::server::Server;
pub use fuse::session::{SessionError, SessionState};
pub use fuse::{abi, io, server, session};
pub use passthrough::{CachePolicy, Config, PassthroughFs};

/// The server the daemon runs.
pub type PassthroughServer = Server<PassthroughFs>;

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PassthroughServer>();
};
