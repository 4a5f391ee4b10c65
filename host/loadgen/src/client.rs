// SPDX-License-Identifier: Apache-2.0
//! The guest driver: request queues shared by client threads, per-request
//! slots with their buffers, submission with EVENT_IDX kicks, and the two
//! ways of waiting for replies.
//!
//! # Waiting
//! - `Wait::Event` (the default, what a Linux guest does): arm used_event,
//!   re-check the used ring, then sleep in poll(2) on the call eventfd until
//!   the back-end signals. Each sleep costs the back-end an eventfd write and
//!   us a wake-up, as an interrupt would cost a guest.
//! - `Wait::Poll`: calls are suppressed (used_event kept half the index space
//!   away) and the thread spins on the used index. This takes our wake-up out
//!   of the round trip and measures the back-end plus the channel alone; it
//!   burns one core per client thread.
//!
//! Several threads may share one queue (`--threads` > 1): the ring sits
//! behind a mutex, as a guest's virtqueue sits behind its lock, and whoever
//! holds it reaps every used entry into per-slot completion words.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;

use crate::fuse::{self, OutHeader, OUT_HEADER};
use crate::mem::GuestMem;
use crate::ring::{DriverRing, Seg, DESCS_PER_SLOT};
use crate::stats::ThreadStats;

/// How client threads wait for used entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// Sleep on the call eventfd (interrupt-driven, like a guest).
    Event,
    /// Spin on the used index with calls suppressed.
    Poll,
}

impl Wait {
    /// Name used in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Wait::Event => "event",
            Wait::Poll => "poll",
        }
    }
}

/// Errors while talking FUSE over a queue.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The back-end answered a request with an error.
    #[error("{op} failed: {}", io::Error::from_raw_os_error(-errno))]
    Fuse {
        /// What we asked.
        op: &'static str,
        /// The negative errno of the reply.
        errno: i32,
    },
    /// A reply did not make sense.
    #[error("bad reply to {op}: {why}")]
    BadReply {
        /// What we asked.
        op: &'static str,
        /// What was wrong.
        why: String,
    },
    /// No reply came in time.
    #[error("no reply within {0:?} (is the back-end still running?)")]
    Timeout(Duration),
    /// An eventfd operation failed.
    #[error("eventfd")]
    EventFd(#[source] io::Error),
}

/// The buffers of one request slot (guest addresses).
#[derive(Clone, Copy, Debug)]
pub struct SlotBufs {
    /// Request: in-header and arguments (readable by the device).
    pub req: u64,
    /// Reply: out-header and small arguments (writable).
    pub out: u64,
    /// READ/READDIRPLUS reply data, or WRITE data.
    pub payload: u64,
}

/// Size of a slot's request buffer and of its reply buffer.
pub const SMALL_BUF: u64 = 4096;

/// Where a request's bulk data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    /// No bulk data: the reply fits the small reply buffer.
    None,
    /// Device writes up to this many bytes after the out-header (READ,
    /// READDIRPLUS), in the payload buffer.
    In(u32),
    /// We send this many bytes of the payload buffer after the arguments (WRITE).
    Out(u32),
}

/// One request ready to go.
#[derive(Debug)]
pub struct Request {
    /// What it is (for error messages).
    pub op: &'static str,
    /// Encoded header and arguments.
    pub bytes: Vec<u8>,
    /// Bulk data direction.
    pub data: Data,
    /// Copy the reply body out for parsing (false for READ data).
    pub want_body: bool,
}

/// A completed request.
#[derive(Debug)]
pub struct Reply {
    /// The out-header.
    pub hdr: OutHeader,
    /// The body, if asked for.
    pub body: Vec<u8>,
}

/// One request queue as the driver sees it.
pub struct Channel {
    ring: Mutex<DriverRing>,
    /// Per slot: 0 while pending, used length + 1 once used.
    done: Vec<AtomicU32>,
    /// Kick eventfd (we write, the back-end waits).
    pub kick: EventFd,
    /// Call eventfd (the back-end writes, we wait).
    pub call: EventFd,
    mem: Arc<GuestMem>,
    bufs: Vec<SlotBufs>,
}

impl Channel {
    /// A channel over `ring`, with one `SlotBufs` per slot.
    pub fn new(mem: Arc<GuestMem>, ring: DriverRing, bufs: Vec<SlotBufs>) -> io::Result<Channel> {
        let slots = usize::from(ring.layout().slots());
        assert!(bufs.len() <= slots, "more buffers than ring slots");
        Ok(Channel {
            ring: Mutex::new(ring),
            done: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            kick: EventFd::new(libc::EFD_NONBLOCK)?,
            call: EventFd::new(libc::EFD_NONBLOCK)?,
            mem,
            bufs,
        })
    }

    fn lock(&self) -> MutexGuard<'_, DriverRing> {
        // A panic while holding the ring means the run is broken anyway.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slot buffers.
    pub fn bufs(&self, slot: u16) -> SlotBufs {
        self.bufs[usize::from(slot)]
    }

    /// Number of slots with buffers.
    pub fn slots(&self) -> u16 {
        self.bufs.len() as u16
    }

    /// Guest memory.
    pub fn mem(&self) -> &GuestMem {
        &self.mem
    }

    /// Reaps every used entry into the completion words (ring lock held);
    /// returns how many.
    fn reap(&self, ring: &mut DriverRing) -> usize {
        let mut n = 0;
        while let Some((id, len)) = ring.pop_used() {
            let slot = (id / u32::from(DESCS_PER_SLOT)) as usize;
            if let Some(d) = self.done.get(slot) {
                d.store(len.saturating_add(1), Ordering::Release);
            }
            n += 1;
        }
        n
    }

    /// Switches calls off (poll mode).
    pub fn suppress_calls(&self) {
        self.lock().suppress_calls();
    }
}

/// Picks the next request id; the thread number in the high bits keeps ids
/// unique across threads.
pub struct Uniques(u64);

impl Uniques {
    /// Ids for thread `tid`.
    pub fn new(tid: u32) -> Uniques {
        Uniques(u64::from(tid) << 40)
    }
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// One client thread's handle on its queue and slots.
pub struct Client {
    chan: Arc<Channel>,
    wait: Wait,
    /// The slots this thread owns.
    slots: Vec<u16>,
    /// Request unique per owned slot (0: idle).
    pending: Vec<u64>,
    op: Vec<&'static str>,
    data: Vec<Data>,
    want_body: Vec<bool>,
    uniques: Uniques,
    /// Counters (kicks, sleeps, requests).
    pub stats: ThreadStats,
    timeout: Duration,
}

impl Client {
    /// A client owning `slots` of `chan`.
    pub fn new(chan: Arc<Channel>, slots: Vec<u16>, wait: Wait, tid: u32) -> Client {
        let n = slots.len();
        Client {
            chan,
            wait,
            slots,
            pending: vec![0; n],
            op: vec![""; n],
            data: vec![Data::None; n],
            want_body: vec![false; n],
            uniques: Uniques::new(tid),
            stats: ThreadStats::default(),
            timeout: Duration::from_secs(10),
        }
    }

    /// How many slots this client owns.
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.iter().filter(|&&u| u != 0).count()
    }

    /// Sends `req` on this client's slot `i`.
    pub fn submit(&mut self, i: usize, mut req: Request) -> Result<(), ClientError> {
        let slot = self.slots[i];
        let b = self.chan.bufs(slot);
        let mem = self.chan.mem();
        let unique = self.uniques.next();
        req.bytes[8..16].copy_from_slice(&unique.to_le_bytes());
        mem.write(b.req, &req.bytes);
        let mut segs = [Seg {
            addr: b.req,
            len: req.bytes.len() as u32,
            write: false,
        }; 3];
        let n = match req.data {
            Data::None => {
                segs[1] = Seg {
                    addr: b.out,
                    len: SMALL_BUF as u32,
                    write: true,
                };
                2
            }
            Data::In(len) => {
                segs[1] = Seg {
                    addr: b.out,
                    len: OUT_HEADER as u32,
                    write: true,
                };
                segs[2] = Seg {
                    addr: b.payload,
                    len,
                    write: true,
                };
                3
            }
            Data::Out(len) => {
                segs[1] = Seg {
                    addr: b.payload,
                    len,
                    write: false,
                };
                segs[2] = Seg {
                    addr: b.out,
                    len: SMALL_BUF as u32,
                    write: true,
                };
                3
            }
        };
        self.chan.done[usize::from(slot)].store(0, Ordering::Relaxed);
        self.pending[i] = unique;
        self.op[i] = req.op;
        self.data[i] = req.data;
        self.want_body[i] = req.want_body;
        let kick = {
            let mut ring = self.chan.lock();
            ring.push(slot, &segs[..n]);
            ring.publish()
        };
        if kick {
            self.chan.kick.write(1).map_err(ClientError::EventFd)?;
            self.stats.kicks += 1;
        }
        Ok(())
    }

    fn take_done(&mut self) -> Option<(usize, u32)> {
        for (i, &slot) in self.slots.iter().enumerate() {
            if self.pending[i] == 0 {
                continue;
            }
            let d = self.chan.done[usize::from(slot)].load(Ordering::Acquire);
            if d != 0 {
                return Some((i, d - 1));
            }
        }
        None
    }

    /// Waits until one of this client's requests completes; returns its
    /// index into this client's slots and the reply.
    pub fn wait_any(&mut self) -> Result<(usize, Reply), ClientError> {
        let mut deadline: Option<Instant> = None;
        let (i, len) = loop {
            if let Some(x) = self.take_done() {
                break x;
            }
            let sleep = match self.wait {
                Wait::Poll => match self.chan.ring.try_lock() {
                    Ok(mut ring) => {
                        if self.chan.reap(&mut ring) > 0 {
                            // Keep used_event half the index space ahead.
                            ring.suppress_calls();
                        }
                        false
                    }
                    Err(_) => false,
                },
                Wait::Event => {
                    let mut ring = self.chan.lock();
                    self.chan.reap(&mut ring);
                    // Sleep only when nothing arrived after arming.
                    !ring.arm_call()
                }
            };
            if self.take_done().is_some() {
                continue;
            }
            if sleep {
                self.sleep_on_call()?;
            } else {
                std::hint::spin_loop();
            }
            let now = Instant::now();
            match deadline {
                None => deadline = Some(now + self.timeout),
                Some(d) if now > d => return Err(ClientError::Timeout(self.timeout)),
                Some(_) => {}
            }
        };
        let unique = std::mem::take(&mut self.pending[i]);
        self.stats.requests += 1;
        let reply = self.read_reply(i, unique, len)?;
        Ok((i, reply))
    }

    fn sleep_on_call(&mut self) -> Result<(), ClientError> {
        let mut pfd = libc::pollfd {
            fd: self.chan.call.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1; the fd outlives the call.
        let r = unsafe { libc::poll(&mut pfd, 1, 100) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(ClientError::EventFd(e));
            }
        }
        self.stats.sleeps += 1;
        if r > 0 {
            // Consume the signal; EAGAIN means another thread already did.
            match self.chan.call.read() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(ClientError::EventFd(e)),
            }
        }
        Ok(())
    }

    fn read_reply(&mut self, i: usize, unique: u64, used_len: u32) -> Result<Reply, ClientError> {
        let op = self.op[i];
        let b = self.chan.bufs(self.slots[i]);
        let mem = self.chan.mem();
        let mut h = [0u8; OUT_HEADER];
        mem.read(b.out, &mut h);
        let hdr = fuse::out_header(&h).ok_or(ClientError::BadReply {
            op,
            why: "no header".into(),
        })?;
        let bad = |why: String| ClientError::BadReply { op, why };
        if hdr.unique != unique {
            return Err(bad(format!("unique {} does not match", hdr.unique)));
        }
        if (hdr.len as usize) < OUT_HEADER || hdr.len > used_len {
            return Err(bad(format!(
                "header length {} but {used_len} bytes used",
                hdr.len
            )));
        }
        if hdr.error != 0 {
            return Err(ClientError::Fuse {
                op,
                errno: hdr.error,
            });
        }
        let body_len = hdr.len as usize - OUT_HEADER;
        let mut body = Vec::new();
        if self.want_body[i] {
            body.resize(body_len, 0);
            match self.data[i] {
                Data::In(max) => {
                    if body_len > max as usize {
                        return Err(bad(format!("{body_len} bytes for a {max}-byte buffer")));
                    }
                    mem.read(b.payload, &mut body);
                }
                _ => {
                    if body_len > SMALL_BUF as usize - OUT_HEADER {
                        return Err(bad(format!("{body_len}-byte reply")));
                    }
                    mem.read(b.out + OUT_HEADER as u64, &mut body);
                }
            }
        }
        Ok(Reply { hdr, body })
    }

    /// Sends `req` on slot `i` and waits for its reply (set-up and tear-down
    /// requests; nothing else may be in flight on this client).
    pub fn call(&mut self, i: usize, req: Request) -> Result<Reply, ClientError> {
        assert_eq!(self.in_flight(), 0, "call() with requests in flight");
        self.submit(i, req)?;
        let (_, r) = self.wait_any()?;
        Ok(r)
    }
}

/// The hiprio queue: FORGETs, which get no reply; its used entries only free
/// descriptors.
pub struct Hiprio {
    inner: Mutex<HiprioRing>,
    /// Kick eventfd.
    pub kick: EventFd,
    /// Call eventfd (calls stay suppressed).
    pub call: EventFd,
    mem: Arc<GuestMem>,
}

struct HiprioRing {
    ring: DriverRing,
    bufs: Vec<u64>,
    busy: Vec<bool>,
    next: usize,
    uniques: Uniques,
}

impl Hiprio {
    /// The hiprio queue over `ring`, with one 64-byte buffer per slot.
    pub fn new(mem: Arc<GuestMem>, ring: DriverRing, bufs: Vec<u64>) -> io::Result<Hiprio> {
        ring.suppress_calls();
        let n = bufs.len();
        Ok(Hiprio {
            inner: Mutex::new(HiprioRing {
                ring,
                bufs,
                busy: vec![false; n],
                next: 0,
                uniques: Uniques::new(0xff_ffff),
            }),
            kick: EventFd::new(libc::EFD_NONBLOCK)?,
            call: EventFd::new(libc::EFD_NONBLOCK)?,
            mem,
        })
    }

    /// Posts FORGET(nodeid, nlookup); returns whether it kicked.
    pub fn forget(&self, nodeid: u64, nlookup: u64) -> Result<bool, ClientError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let kick = loop {
            let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            while let Some((id, _)) = h.ring.pop_used() {
                let s = (id / u32::from(DESCS_PER_SLOT)) as usize;
                if let Some(b) = h.busy.get_mut(s) {
                    *b = false;
                }
            }
            h.ring.suppress_calls();
            let n = h.bufs.len();
            if let Some(s) = (0..n).map(|k| (h.next + k) % n).find(|&s| !h.busy[s]) {
                let unique = h.uniques.next();
                let req = fuse::forget(unique, nodeid, nlookup);
                self.mem.write(h.bufs[s], &req);
                h.busy[s] = true;
                h.next = (s + 1) % n;
                let seg = Seg {
                    addr: h.bufs[s],
                    len: req.len() as u32,
                    write: false,
                };
                h.ring.push(s as u16, &[seg]);
                break h.ring.publish();
            }
            drop(h);
            if Instant::now() > deadline {
                return Err(ClientError::Timeout(Duration::from_secs(10)));
            }
            std::thread::yield_now();
        };
        if kick {
            self.kick.write(1).map_err(ClientError::EventFd)?;
        }
        Ok(kick)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use virtio_queue::{Queue, QueueOwnedT, QueueT};
    use vm_memory::{
        Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion,
    };

    use super::*;
    use crate::ring::Layout;

    const SIZE: u16 = 32;

    /// A device on another thread: answers every request with an out-header
    /// echoing its unique and 8 body bytes holding the request's nodeid,
    /// signalling the call eventfd when EVENT_IDX asks for it.
    fn fake_device(
        mem: &GuestMem,
        l: Layout,
        call: EventFd,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<u64> {
        let f = mem.file().try_clone().expect("dup");
        let region = MmapRegion::from_file(FileOffset::new(f, 0), mem.len()).expect("mmap");
        let dm: GuestMemoryMmap =
            GuestMemoryMmap::from_regions(vec![
                GuestRegionMmap::new(region, GuestAddress(0)).expect("region")
            ])
            .expect("memory");
        std::thread::spawn(move || {
            let mut q = Queue::new(SIZE).expect("queue");
            q.set_size(SIZE);
            q.try_set_desc_table_address(GuestAddress(l.desc))
                .expect("desc");
            q.try_set_avail_ring_address(GuestAddress(l.avail))
                .expect("avail");
            q.try_set_used_ring_address(GuestAddress(l.used))
                .expect("used");
            q.set_event_idx(true);
            q.set_ready(true);
            let mut served = 0;
            while !stop.load(Ordering::Relaxed) {
                let chains: Vec<_> = q.iter(&dm).expect("iter").collect();
                for c in chains {
                    let head = c.head_index();
                    let descs: Vec<_> = c.collect();
                    let mut hdr = [0u8; 40];
                    dm.read_slice(&mut hdr, descs[0].addr()).expect("req");
                    let out = descs.iter().find(|d| d.is_write_only()).expect("reply");
                    let mut reply = Vec::new();
                    reply.extend_from_slice(&24u32.to_le_bytes());
                    reply.extend_from_slice(&0u32.to_le_bytes());
                    reply.extend_from_slice(&hdr[8..16]); // unique
                    reply.extend_from_slice(&hdr[16..24]); // nodeid as the body
                    dm.write_slice(&reply, out.addr()).expect("reply");
                    q.add_used(&dm, head, 24).expect("used");
                    served += 1;
                }
                if q.needs_notification(&dm).expect("needs") {
                    call.write(1).expect("call");
                }
                std::thread::yield_now();
            }
            served
        })
    }

    fn request(nodeid: u64) -> Request {
        Request {
            op: "GETATTR",
            bytes: fuse::getattr(0, nodeid),
            data: Data::None,
            want_body: true,
        }
    }

    /// Two threads, two slots each, sharing one queue, in both wait modes:
    /// every reply reaches the thread and slot that sent the request.
    #[test]
    fn replies_reach_their_slots() {
        for wait in [Wait::Event, Wait::Poll] {
            let mem = Arc::new(GuestMem::new(1 << 20).expect("mem"));
            let l = Layout::new(0, SIZE);
            let ring = DriverRing::new(mem.clone(), l);
            let bufs = (0..4u64)
                .map(|s| SlotBufs {
                    req: 0x10_0000 + s * 0x3000,
                    out: 0x10_1000 + s * 0x3000,
                    payload: 0x10_2000 + s * 0x3000,
                })
                .collect();
            let chan = Arc::new(Channel::new(mem.clone(), ring, bufs).expect("channel"));
            if wait == Wait::Poll {
                chan.suppress_calls();
            }
            let stop = Arc::new(AtomicBool::new(false));
            let dev = fake_device(&mem, l, chan.call.try_clone().expect("call"), stop.clone());
            let threads: Vec<_> = (0..2u16)
                .map(|t| {
                    let mut c =
                        Client::new(chan.clone(), vec![2 * t, 2 * t + 1], wait, u32::from(t));
                    std::thread::spawn(move || {
                        // Slot i of thread t always asks about node 100 t + i.
                        let node = |i: usize| 100 * u64::from(t) + i as u64;
                        for i in 0..2 {
                            c.submit(i, request(node(i))).expect("submit");
                        }
                        for _ in 0..500 {
                            let (i, r) = c.wait_any().expect("reply");
                            assert_eq!(r.body, node(i).to_le_bytes());
                            c.submit(i, request(node(i))).expect("submit");
                        }
                        while c.in_flight() > 0 {
                            c.wait_any().expect("drain");
                        }
                        c.stats
                    })
                })
                .collect();
            let mut total = ThreadStats::default();
            for t in threads {
                total.merge(t.join().expect("client"));
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!(dev.join().expect("device"), 2 * 502);
            assert_eq!(total.requests, 2 * 502);
            if wait == Wait::Poll {
                assert_eq!(total.sleeps, 0);
            }
        }
    }
}
