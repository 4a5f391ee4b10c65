// SPDX-License-Identifier: Apache-2.0
//! VHOST_USER_PROTOCOL_F_DEVICE_STATE: the back-end's state through QEMU's
//! migration stream.
//!
//! With every ring stopped, QEMU sends SET_DEVICE_STATE_FD with one end of a
//! pipe: to write the state into (save, on the source) or to read it from
//! (load, on the destination). It then reads (or writes) the pipe until
//! end of file, and asks CHECK_DEVICE_STATE whether all went well. The pipe
//! is served by a thread so that the message loop can reply at once: QEMU
//! only starts on its end after the reply. The state is made (save) and
//! applied (load) on the control thread, with the rings stopped.

use std::fs::File;
use std::io::{Read, Write};
use std::thread::JoinHandle;

use log::{error, info};
use vhost::vhost_user::message::{FrontendReq, VhostUserTransferDeviceState};

use super::{expect_fds, parse, u64_reply, Device};
use crate::vhost_user::error::{Result, VhostUserError};

/// Reply bit of SET_DEVICE_STATE_FD: no descriptor comes back (we use
/// QEMU's pipe).
const INVALID_FD: u64 = 0x100;
/// The largest state a destination reads (a stream is at most a frame's
/// payload plus its header).
const MAX_STATE: u64 = (64 << 20) + 64;

/// A transfer under way.
pub(crate) enum Transfer {
    /// Writing our state into the pipe.
    Save(JoinHandle<std::io::Result<()>>),
    /// Reading the source's state from the pipe.
    Load(JoinHandle<std::io::Result<Vec<u8>>>),
}

impl Device {
    /// SET_DEVICE_STATE_FD: starts a save or a load; the reply's low byte is
    /// 0 on success.
    pub(super) fn set_device_state_fd(
        &mut self,
        req: FrontendReq,
        body: &[u8],
        fds: Vec<File>,
    ) -> Vec<u8> {
        match self.start_transfer(req, body, fds) {
            Ok(()) => u64_reply(INVALID_FD),
            Err(e) => {
                error!("migration: {}", crate::error_chain(&e));
                u64_reply(INVALID_FD | 1)
            }
        }
    }

    fn start_transfer(&mut self, req: FrontendReq, body: &[u8], fds: Vec<File>) -> Result<()> {
        let p = parse::<VhostUserTransferDeviceState>(req, body)?;
        expect_fds(req, 1, &fds)?;
        let Some(pipe) = fds.into_iter().next() else {
            return Err(VhostUserError::InvalidPayload(req));
        };
        let bad = |m: &str| VhostUserError::Transfer(m.to_string());
        if self.cfg.dax.is_some() {
            return Err(bad(
                "a DAX window's mappings cannot migrate (QEMU 11 does not migrate a \
                 device with shared memory; DEVICE_STATE is not offered with a window)",
            ));
        }
        if p.phase != 0 {
            return Err(bad("only the stopped phase is supported"));
        }
        if !self.suspended() {
            return Err(bad("the rings are not stopped"));
        }
        // A transfer never checked is dropped (its thread ends on its own).
        self.transfer = None;
        let spawn = std::thread::Builder::new().name("xvfs-state".into());
        self.transfer = Some(match p.direction {
            0 => {
                let blob = crate::migration::save(self.server_arc(), &self.cfg.migration)
                    .map_err(|e| VhostUserError::Transfer(crate::error_chain(&e)))?;
                info!("migration: sending {} bytes of device state", blob.len());
                let mut pipe = pipe;
                Transfer::Save(
                    spawn
                        .spawn(move || pipe.write_all(&blob))
                        .map_err(VhostUserError::Socket)?,
                )
            }
            1 => Transfer::Load(
                spawn
                    .spawn(move || {
                        let mut blob = Vec::new();
                        pipe.take(MAX_STATE).read_to_end(&mut blob)?;
                        Ok(blob)
                    })
                    .map_err(VhostUserError::Socket)?,
            ),
            _ => return Err(bad("unknown transfer direction")),
        });
        Ok(())
    }

    /// CHECK_DEVICE_STATE: 0 when the transfer (and, on the destination,
    /// applying the state) succeeded.
    pub(super) fn check_device_state(&mut self) -> u64 {
        let result = match self.transfer.take() {
            None => Err("no device state transfer was started".to_string()),
            Some(Transfer::Save(h)) => match h.join() {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("writing the device state failed: {e}")),
                Err(_) => Err("the device state writer failed".into()),
            },
            Some(Transfer::Load(h)) => match h.join() {
                Ok(Ok(blob)) if blob.len() as u64 >= MAX_STATE => {
                    Err(format!("device state larger than {MAX_STATE} bytes"))
                }
                Ok(Ok(blob)) => {
                    info!("migration: received {} bytes of device state", blob.len());
                    crate::migration::load(self.server_arc(), &self.cfg.migration, &blob)
                        .map(drop)
                        .map_err(|e| crate::error_chain(&e))
                }
                Ok(Err(e)) => Err(format!("reading the device state failed: {e}")),
                Err(_) => Err("the device state reader failed".into()),
            },
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                error!("migration: {e}; the migration is refused");
                1
            }
        }
    }
}
