//! FUSE protocol and passthrough file system of xvirtiofsd.
//!
//! Data flows one way: request bytes ([`io::RequestReader`]) → typed request
//! ([`abi`], parsed in [`server`]) → file system ([`passthrough`]) → reply
//! ([`io::ReplyWriter`]).
//!
//! The daemon builds a [`PassthroughFs`] from a [`Config`] (before entering its
//! sandbox), wraps it in a [`Server`], and calls [`Server::handle`] from every
//! queue worker thread.

#![deny(missing_docs)]

#[macro_use]
pub mod ratelimit;

pub mod abi;
pub mod io;
pub mod passthrough;
pub mod server;
mod sys;

pub use passthrough::{CachePolicy, Config, PassthroughFs};
pub use server::Server;
