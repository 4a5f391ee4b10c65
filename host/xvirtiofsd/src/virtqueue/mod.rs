// SPDX-License-Identifier: Apache-2.0
//! The data path: the virtqueues the guest sends its FUSE requests on.
//!
//! - [`worker`]: one thread per started queue, popping chains and publishing
//!   replies (with its SETLKW waiting list);
//! - [`chain`]: one descriptor chain as the FUSE request reader and reply writer;
//! - [`poll`]: the adaptive busy-event wait between batches;
//! - [`mem`]: guest memory and its address translations;
//! - [`replay`]: the worker's side of crash restart (the request journal).

pub mod chain;
pub mod mem;
pub mod poll;
pub mod replay;
pub mod worker;
