// SPDX-License-Identifier: Apache-2.0
//! The FUSE layer: wire format ([`abi`]), transport ends ([`io`]), the
//! negotiated [`session`] and the [`server`] that parses requests, calls a
//! [`FileSystem`](crate::filesystem::FileSystem) and encodes replies.

pub mod abi;
mod file_ops;
pub mod io;
mod lock_events;
mod locks;
mod ops;
mod secctx;
pub mod server;
pub use lock_events::Wake;
pub use locks::LockWait;
pub mod session;
mod wire;
