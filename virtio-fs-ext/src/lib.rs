// SPDX-License-Identifier: Apache-2.0
//! The extensions xvirtiofs adds to virtio-fs, shared by both sides of a
//! handover (the running daemon and the one that takes over):
//!
//! - [`config`]: the domain settings (cache, sandbox, seccomp, polling,
//!   log level), shared by the command line and the state;
//! - [`settings`]: the command line's settings by meaning (security,
//!   serving, operations), as handed on;
//! - [`state`]: everything a daemon knows about its device and file system,
//!   as plain serializable data, with file descriptors referred to by index;
//! - [`frame`]: the versioned, checksummed envelope around a state blob;
//! - [`handover`]: the messages two daemons exchange over a Unix socket to
//!   pass the state and its file descriptors (SCM_RIGHTS, in batches);
//! - [`migration`]: the device state QEMU carries for a VM live migration
//!   (ours, and virtiofsd's, which a destination accepts);
//! - [`parts`]: payloads made of parts, each with its own version (state
//!   format 8, migration format 3);
//! - [`bounded`]: postcard decoding that builds at most a fixed multiple of
//!   its input's size (every decoder of a received state or stream);
//! - [`formats`]: the version each encoded format is written in and the
//!   versions read.
//!
//! The specification is `docs/live-upgrade.md` in the repository.

pub mod bounded;
pub mod config;
pub mod crc32;
pub mod formats;
pub mod frame;
pub mod handover;
pub mod migration;
pub mod parts;
pub mod settings;
pub mod state;
