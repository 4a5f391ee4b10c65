// SPDX-License-Identifier: Apache-2.0
//! The vhost-user control plane: our own message loop over the front-end's
//! (QEMU's) Unix socket, on `vhost`'s message types.
//!
//! We own the connection and every negotiated value in plain structs, so that
//! all of it can be inspected, saved and handed to another process:
//!
//! - [`connection`]: framing, descriptors, the serve loop;
//! - [`device`]: the message handler and the rings' workers;
//! - `ring`: one virtqueue's lifecycle as a state machine;
//! - `persist`: the device to and from [`virtio_fs_ext::state::DeviceState`];
//! - `device::transfer`: the device state through QEMU's migration stream.

pub mod backend;
pub mod connection;
pub mod device;
mod error;
mod header;
mod persist;
mod ring;

pub use connection::{Connection, ServeEnd};
pub use device::{Device, DeviceConfig};
pub use error::VhostUserError;
