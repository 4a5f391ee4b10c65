// SPDX-License-Identifier: Apache-2.0
//! Persistence: the device as plain data ([`DeviceState`]) for a successor,
//! and the device rebuilt from a predecessor's.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use virtio_fs_ext::state::{DaxState, DeviceState, RegionState, VringState};

use crate::virtqueue::worker::MAX_QUEUE_SIZE;
use crate::FsServer as Server;

use super::device::{Device, DeviceConfig};
use super::error::{Result, VhostUserError};
use super::ring::RingState;

impl Device {
    /// The DAX window for a successor: its size, the back-end channel (as
    /// an index into `fds`) with the replies it is owed, and the file
    /// system's side (mappings, completeness, the file systems of mapped
    /// files). Without `with_mappings` (a crash-restart checkpoint, taken
    /// while workers may be waiting on the front-end with the table
    /// locked) the mappings are left out, and the owed replies too (they
    /// change with every map, which no checkpoint follows); nothing here
    /// waits for a map in progress. With them (a handover, the queues
    /// stopped) the count is exact.
    pub fn export_dax(&self, fds: &mut Vec<RawFd>, with_mappings: bool) -> Option<DaxState> {
        let (window, channel) = self.cfg.dax.as_ref()?;
        let channel_fd = channel.raw_fd().map(|fd| {
            fds.push(fd);
            (fds.len() - 1) as u32
        });
        let w = self.server.fs().window_state(with_mappings)?;
        Some(DaxState {
            window: *window,
            channel_fd,
            mappings: w.mappings,
            late_replies: channel.owed_replies().filter(|_| with_mappings),
            complete: w.complete,
            abandoned: w.abandoned,
            devices: w.devices,
        })
    }

    /// Every negotiated value as plain data; descriptors are appended to `fds`
    /// and referred to by their index there. Call after [`Device::quiesce`].
    pub fn export(&self, fds: &mut Vec<RawFd>) -> DeviceState {
        let mut push = |fd: RawFd| {
            fds.push(fd);
            (fds.len() - 1) as u32
        };
        let regions = self
            .mem_table
            .regions()
            .map(|r| RegionState {
                gpa: r.gpa,
                size: r.size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
                fd: push(r.file.as_raw_fd()),
            })
            .collect();
        let vrings = self
            .vrings
            .iter()
            .map(|v| {
                let call = v
                    .call
                    .read()
                    .ok()
                    .and_then(|c| c.as_ref().map(|f| f.as_raw_fd()));
                VringState {
                    size: v.size,
                    desc_va: v.desc_va,
                    avail_va: v.avail_va,
                    used_va: v.used_va,
                    addr_set: v.addr_set,
                    next_avail: v.base,
                    next_used: v.next_used,
                    enabled: v.enabled,
                    started: v.started(),
                    kick_fd: v.kick().map(|f| push(f.as_raw_fd())),
                    call_fd: call.map(&mut push),
                    err_fd: v.err.as_ref().map(|f| push(f.as_raw_fd())),
                }
            })
            .collect();
        DeviceState {
            acked_features: self.acked_features,
            acked_protocol: self.acked_protocol,
            owner: self.owner,
            max_queues: self.cfg.max_queues as u32,
            regions,
            vrings,
        }
    }

    /// Rebuilds a device from a predecessor's state. `take` hands out the
    /// descriptor at an index (each at most once). No worker is started: call
    /// [`Device::resume`] once the predecessor has stopped for good.
    /// After a crash (`crashed`), the rings' positions in `st` are stale:
    /// each ring continues from the used index in guest memory.
    pub fn import(
        cfg: DeviceConfig,
        server: Arc<Server>,
        st: &DeviceState,
        take: &mut dyn FnMut(u32) -> io::Result<OwnedFd>,
        crashed: bool,
    ) -> Result<Device> {
        if st.vrings.len() != cfg.max_queues {
            return Err(VhostUserError::ImportMismatch("number of virtqueues"));
        }
        if st.acked_features & !Self::features() != 0
            || st.acked_protocol & !Self::offered_protocol(&cfg).bits() != 0
        {
            return Err(VhostUserError::ImportMismatch(
                "features this build does not offer",
            ));
        }
        let mut dev = Device::new(cfg, server)?;
        dev.crash_resume = vec![crashed; st.vrings.len()];
        dev.acked_features = st.acked_features;
        dev.acked_protocol = st.acked_protocol;
        dev.owner = st.owner;
        let mut regions = Vec::with_capacity(st.regions.len());
        for r in &st.regions {
            let file = File::from(take(r.fd).map_err(VhostUserError::Socket)?);
            regions.push(dev.region(r.gpa, r.size, r.user_addr, r.mmap_offset, file));
        }
        if !regions.is_empty() {
            let mapped = dev.mem_table.set(regions)?;
            dev.install_memory(mapped);
        }
        for (v, s) in dev.vrings.iter_mut().zip(&st.vrings) {
            if s.size != 0 && (!s.size.is_power_of_two() || s.size > MAX_QUEUE_SIZE) {
                return Err(VhostUserError::BadRingSize(u32::from(s.size)));
            }
            let mut file = |i: Option<u32>| -> Result<Option<File>> {
                i.map(|i| take(i).map(File::from).map_err(VhostUserError::Socket))
                    .transpose()
            };
            v.size = s.size;
            v.desc_va = s.desc_va;
            v.avail_va = s.avail_va;
            v.used_va = s.used_va;
            v.addr_set = s.addr_set;
            v.base = s.next_avail;
            v.next_used = s.next_used;
            v.enabled = s.enabled;
            // A kick eventfd without `started` (cannot be written) is dropped.
            let kick = file(s.kick_fd)?.map(Arc::new).filter(|_| s.started);
            v.state = kick.map_or(RingState::Stopped, |kick| RingState::Ready { kick });
            *v.call.write().unwrap_or_else(|p| p.into_inner()) = file(s.call_fd)?;
            v.err = file(s.err_fd)?;
        }
        Ok(dev)
    }
}
