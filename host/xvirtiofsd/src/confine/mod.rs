// SPDX-License-Identifier: Apache-2.0
//! Confinement: the mechanisms that shut a serving process in (what
//! [`crate::setup`] applies, in order, to every serving process).
//!
//! - [`sandbox`]: namespaces or chroot around the shared directory, seccomp;
//! - [`caps`]: the capabilities kept (`--modcaps`);
//! - [`idmap`]: the user namespace's ID maps (`--uid-map`, `--gid-map`);
//! - [`cgroup`]: a live upgrade's successor joining the daemon's cgroups;
//! - [`landlock`]: the wall beyond the sandbox: files only beneath the
//!   share (`--landlock`);
//! - `attack` (`fault-injection` builds only): an attacker inside the
//!   confined process, for the tests.

#[cfg(feature = "fault-injection")]
pub mod attack;
pub mod caps;
pub mod cgroup;
pub mod idmap;
pub mod landlock;
pub mod sandbox;
