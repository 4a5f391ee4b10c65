// SPDX-License-Identifier: Apache-2.0
//! The vhost-user message header (request, flags, size; 12 bytes, native
//! endian) and its flag bits: the same on the front-end's socket
//! (`connection`) and on the back-end channel (`backend`).

pub(super) const HDR_SIZE: usize = 12;
pub(super) const FLAG_VERSION: u32 = 0x1;
pub(super) const FLAG_REPLY: u32 = 0x4;
pub(super) const FLAG_NEED_REPLY: u32 = 0x8;
