// SPDX-License-Identifier: Apache-2.0
//! The vhost-user layer's errors.

use std::io;

use vhost::vhost_user::message::FrontendReq;

use crate::virtqueue::mem::MemError;
use crate::virtqueue::worker::MAX_QUEUE_SIZE;

#[derive(Debug, thiserror::Error)]
pub enum VhostUserError {
    #[error("the front-end closed the connection")]
    Disconnected,
    #[error("socket I/O failed")]
    Socket(#[source] io::Error),
    #[error("message header has unsupported flags {0:#x}")]
    BadFlags(u32),
    #[error("message payload of {0} bytes is larger than the protocol allows")]
    TooLarge(u32),
    #[error("{req:?}: payload is {got} bytes, expected {want}")]
    BadSize {
        req: FrontendReq,
        got: usize,
        want: usize,
    },
    #[error("{0:?}: payload fields are invalid")]
    InvalidPayload(FrontendReq),
    #[error("{req:?}: expected {want} file descriptor(s), got {got}")]
    BadFds {
        req: FrontendReq,
        want: usize,
        got: usize,
    },
    #[error("queue index {0} is out of range")]
    BadQueue(u32),
    #[error("ring size {0} is not a power of two up to {MAX_QUEUE_SIZE}")]
    BadRingSize(u32),
    #[error("features {0:#x} were not offered")]
    UnofferedFeatures(u64),
    #[error("request {0} is not supported")]
    Unsupported(u32),
    #[error("memory table")]
    Memory(#[from] MemError),
    #[error("restored device state does not fit this build: {0}")]
    ImportMismatch(&'static str),
    #[error("dirty page log")]
    Log(#[from] crate::migration::dirty_log::LogError),
    #[error("device state transfer: {0}")]
    Transfer(String),
    #[error("starting queue")]
    Queue(#[from] crate::virtqueue::worker::QueueError),
}

pub type Result<T> = std::result::Result<T, VhostUserError>;
