// SPDX-License-Identifier: Apache-2.0
//! The VMM half: start (or find) the back-end, connect to its socket, and
//! do what QEMU does for a vhost-user-fs device — features, memory table,
//! one vring per queue — with rings this process then drives as the guest.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};

use crate::client::{Channel, Hiprio, SlotBufs, SMALL_BUF};
use crate::mem::{GuestMem, MemError};
use crate::ring::{DriverRing, Layout};

/// VIRTIO_F_VERSION_1.
pub const F_VERSION_1: u64 = 1 << 32;
/// VIRTIO_RING_F_EVENT_IDX.
pub const F_EVENT_IDX: u64 = 1 << 29;
/// VHOST_USER_F_PROTOCOL_FEATURES.
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// Errors of the VMM half.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// The daemon could not be started.
    #[error("cannot start {0}")]
    Spawn(String, #[source] io::Error),
    /// The daemon exited before we could connect.
    #[error("the back-end exited before accepting a connection ({0})")]
    Exited(ExitStatus),
    /// Nothing accepted a connection on the socket in time.
    #[error("no back-end accepted a connection on {0} within {1:?}")]
    Connect(PathBuf, Duration, #[source] io::Error),
    /// A vhost-user request failed.
    #[error("vhost-user {0}")]
    Vhost(&'static str, #[source] vhost::Error),
    /// A feature we need is missing.
    #[error("the back-end does not offer {0}")]
    Feature(&'static str),
    /// Not enough queues.
    #[error("the back-end offers {offered} request queue(s), {wanted} asked for")]
    Queues {
        /// Request queues offered (queue count minus hiprio).
        offered: u64,
        /// Request queues asked for.
        wanted: usize,
    },
    /// Guest memory.
    #[error("guest memory")]
    Mem(#[from] MemError),
    /// Eventfds.
    #[error("eventfd")]
    EventFd(#[source] io::Error),
}

/// A back-end process we started.
pub struct DaemonProc {
    child: Child,
    /// Its command line, for the report.
    pub command: String,
}

impl DaemonProc {
    /// Starts `cmd` (program and arguments) after removing a stale `socket`.
    pub fn spawn(cmd: &[String], socket: &Path) -> Result<DaemonProc, VmmError> {
        let command = cmd.join(" ");
        let (prog, args) = cmd
            .split_first()
            .ok_or_else(|| VmmError::Spawn(command.clone(), io::ErrorKind::InvalidInput.into()))?;
        let _ = std::fs::remove_file(socket);
        let child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| VmmError::Spawn(command.clone(), e))?;
        Ok(DaemonProc { child, command })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// After the front-end has disconnected: waits up to 5 s for the daemon
    /// to exit by itself (vhost-user back-ends end with their front-end),
    /// then kills it. Returns its status.
    pub fn finish(mut self) -> io::Result<ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(s);
            }
            if Instant::now() > deadline {
                log::warn!("back-end still running 5 s after disconnect: killing it");
                self.child.kill()?;
                return self.child.wait();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Connects to `socket`, retrying while it does not exist or refuses (the
/// daemon is starting) and giving up early if `daemon` exits.
pub fn connect(socket: &Path, mut daemon: Option<&mut DaemonProc>) -> Result<UnixStream, VmmError> {
    let wait = Duration::from_secs(10);
    let deadline = Instant::now() + wait;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) => {
                if let Some(d) = daemon.as_deref_mut() {
                    if let Ok(Some(st)) = d.child.try_wait() {
                        return Err(VmmError::Exited(st));
                    }
                }
                if Instant::now() > deadline {
                    return Err(VmmError::Connect(socket.to_path_buf(), wait, e));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// What was negotiated, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Negotiated {
    /// Virtio features acked.
    pub features: u64,
    /// Protocol features acked.
    pub protocol: u64,
    /// Queues the back-end offers (hiprio included).
    pub queue_num: u64,
}

/// Queue and buffer geometry.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Request queues.
    pub queues: usize,
    /// Entries per queue.
    pub queue_size: u16,
    /// Slots with buffers per request queue.
    pub slots: u16,
    /// Payload buffer per slot.
    pub payload: u64,
}

/// The device, set up and running.
pub struct Device {
    /// The vhost-user connection (dropping it disconnects).
    pub frontend: Frontend,
    /// Guest memory.
    pub mem: Arc<GuestMem>,
    /// The hiprio queue.
    pub hiprio: Arc<Hiprio>,
    /// The request queues.
    pub queues: Vec<Arc<Channel>>,
    /// What was negotiated.
    pub negotiated: Negotiated,
}

fn vh<T>(what: &'static str, r: vhost::Result<T>) -> Result<T, VmmError> {
    r.map_err(|e| VmmError::Vhost(what, e))
}

/// Negotiates and sets up every queue over `stream`.
pub fn setup(stream: UnixStream, g: Geometry) -> Result<Device, VmmError> {
    let nq = 1 + g.queues;
    let mut fe = Frontend::from_stream(stream, nq as u64);
    vh("SET_OWNER", fe.set_owner())?;
    let offered = vh("GET_FEATURES", fe.get_features())?;
    for (bit, name) in [
        (F_VERSION_1, "VIRTIO_F_VERSION_1"),
        (F_EVENT_IDX, "VIRTIO_RING_F_EVENT_IDX"),
        (F_PROTOCOL_FEATURES, "VHOST_USER_F_PROTOCOL_FEATURES"),
    ] {
        if offered & bit == 0 {
            return Err(VmmError::Feature(name));
        }
    }
    let features = F_VERSION_1 | F_EVENT_IDX | F_PROTOCOL_FEATURES;
    vh("SET_FEATURES", fe.set_features(features))?;
    let pf = vh("GET_PROTOCOL_FEATURES", fe.get_protocol_features())?
        & (VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK);
    vh("SET_PROTOCOL_FEATURES", fe.set_protocol_features(pf))?;
    if pf.contains(VhostUserProtocolFeatures::REPLY_ACK) {
        // As QEMU does: every request then waits for the back-end's ack.
        fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    }
    let queue_num = if pf.contains(VhostUserProtocolFeatures::MQ) {
        vh("GET_QUEUE_NUM", fe.get_queue_num())?
    } else {
        2
    };
    if queue_num < nq as u64 {
        return Err(VmmError::Queues {
            offered: queue_num.saturating_sub(1),
            wanted: g.queues,
        });
    }

    // Memory: rings, then hiprio buffers, then per-queue slot buffers.
    let ring_bytes = Layout::bytes(g.queue_size);
    let hp_slots = g.queue_size / crate::ring::DESCS_PER_SLOT;
    let hp_area = (u64::from(hp_slots) * 64).next_multiple_of(4096);
    let payload = g.payload.next_multiple_of(4096);
    let slot_bytes = 2 * SMALL_BUF + payload;
    let bufs_at = nq as u64 * ring_bytes + hp_area;
    let total = bufs_at + g.queues as u64 * u64::from(g.slots) * slot_bytes;
    let mem = Arc::new(GuestMem::new(total as usize)?);
    let region = VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: mem.len() as u64,
        userspace_addr: mem.host_addr(),
        mmap_offset: 0,
        mmap_handle: mem.file().as_raw_fd(),
    };
    vh("SET_MEM_TABLE", fe.set_mem_table(&[region]))?;

    let mut rings = Vec::with_capacity(nq);
    for q in 0..nq {
        let layout = Layout::new(q as u64 * ring_bytes, g.queue_size);
        rings.push(DriverRing::new(mem.clone(), layout));
    }
    let mut rings = rings.into_iter();
    let hp_ring = rings.next().ok_or(VmmError::Feature("a hiprio queue"))?;
    let hp_bufs = (0..u64::from(hp_slots))
        .map(|s| nq as u64 * ring_bytes + 64 * s)
        .collect();
    let hiprio = Arc::new(Hiprio::new(mem.clone(), hp_ring, hp_bufs).map_err(VmmError::EventFd)?);
    let mut queues = Vec::with_capacity(g.queues);
    for (q, ring) in rings.enumerate() {
        let base = bufs_at + q as u64 * u64::from(g.slots) * slot_bytes;
        let bufs = (0..u64::from(g.slots))
            .map(|s| {
                let b = base + s * slot_bytes;
                SlotBufs {
                    req: b,
                    out: b + SMALL_BUF,
                    payload: b + 2 * SMALL_BUF,
                }
            })
            .collect();
        queues.push(Arc::new(
            Channel::new(mem.clone(), ring, bufs).map_err(VmmError::EventFd)?,
        ));
    }

    for q in 0..nq {
        let (layout, kick, call) = if q == 0 {
            (hiprio_layout(g.queue_size), &hiprio.kick, &hiprio.call)
        } else {
            let c = &queues[q - 1];
            (
                Layout::new(q as u64 * ring_bytes, g.queue_size),
                &c.kick,
                &c.call,
            )
        };
        let host = mem.host_addr();
        let cfg = VringConfigData {
            queue_max_size: g.queue_size,
            queue_size: g.queue_size,
            flags: 0,
            desc_table_addr: host + layout.desc,
            used_ring_addr: host + layout.used,
            avail_ring_addr: host + layout.avail,
            log_addr: None,
        };
        vh("SET_VRING_NUM", fe.set_vring_num(q, g.queue_size))?;
        vh("SET_VRING_BASE", fe.set_vring_base(q, 0))?;
        vh("SET_VRING_ADDR", fe.set_vring_addr(q, &cfg))?;
        vh("SET_VRING_CALL", fe.set_vring_call(q, call))?;
        vh("SET_VRING_KICK", fe.set_vring_kick(q, kick))?;
    }
    for q in 0..nq {
        vh("SET_VRING_ENABLE", fe.set_vring_enable(q, true))?;
    }
    Ok(Device {
        frontend: fe,
        mem,
        hiprio,
        queues,
        negotiated: Negotiated {
            features,
            protocol: pf.bits(),
            queue_num,
        },
    })
}

impl Device {
    /// Closes the vhost-user connection; the back-end sees the front-end go
    /// away (and usually exits).
    pub fn disconnect(self) {
        drop(self.frontend);
    }
}

fn hiprio_layout(size: u16) -> Layout {
    Layout::new(0, size)
}
