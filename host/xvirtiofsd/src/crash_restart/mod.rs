// SPDX-License-Identifier: Apache-2.0
//! Crash restart (`--crash-restart`): a holder process keeps the connection,
//! the guest memory and the files the guest holds, and starts a new serving
//! process when one dies (docs/crash-restart.md).
//!
//! - [`holder`]: the holder process;
//! - [`give_up`]: the holder after too many crashes, answering EIO;
//! - [`checkpoint`]: the serving process's link to its holder;
//! - [`keeper`]: the holder keeping the descriptors of files with no name left.
//!
//! The journal of requests in flight is written by the queue workers
//! ([`crate::virtqueue::replay`]).

pub mod checkpoint;
pub mod give_up;
pub mod holder;
pub mod keeper;
