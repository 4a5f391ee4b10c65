// SPDX-License-Identifier: Apache-2.0
//! How often a waiting thread of a run looks at the stop flag: every wait
//! ([`crate::shared`], [`crate::sem`], [`crate::limit`]) sleeps at most this
//! long at a time, so a run always ends within its run time plus a bounded
//! shutdown.

use std::time::Duration;

/// The longest any wait sleeps before it looks at the stop flag again.
pub const TICK: Duration = Duration::from_millis(20);
