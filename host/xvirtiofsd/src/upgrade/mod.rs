// SPDX-License-Identifier: Apache-2.0
//! Live upgrade: a new daemon takes the running one's connection over while
//! the guest runs (docs/live-upgrade.md).
//!
//! - [`handover`]: the protocol on the control socket, both sides;
//! - [`trust`]: what the successor believes of the state it receives;
//! - [`record`]: the operator's command line of the first start, which every
//!   successor is compared against.
//!
//! The successor's own start is [`crate::daemon::successor`].

pub mod handover;
pub mod record;
pub mod trust;
