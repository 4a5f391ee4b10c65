// SPDX-License-Identifier: Apache-2.0
//! The driver side of a split virtqueue (virtio 1.x, section 2.7), as a guest
//! driver keeps it: descriptors and the avail ring written by us, the used ring
//! read by us, EVENT_IDX in both directions.
//!
//! Descriptors are not managed with a free list: every in-flight request owns
//! a fixed slot of `DESCS_PER_SLOT` consecutive descriptors, so a used entry's
//! id names its slot directly (`id / DESCS_PER_SLOT`). A queue of size N thus
//! holds at most N / DESCS_PER_SLOT requests in flight.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::mem::GuestMem;

/// Descriptors reserved per request slot (request, write payload, reply,
/// read payload).
pub const DESCS_PER_SLOT: u16 = 4;

const VRING_DESC_F_NEXT: u16 = 1;
const VRING_DESC_F_WRITE: u16 = 2;

/// Where the three parts of a split ring sit in guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Queue size (a power of two).
    pub size: u16,
    /// Descriptor table (16 bytes per entry).
    pub desc: u64,
    /// Avail ring: flags, idx, ring[size], used_event.
    pub avail: u64,
    /// Used ring: flags, idx, ring[size] of (id, len), avail_event.
    pub used: u64,
}

impl Layout {
    /// Lays a ring of `size` entries out from `base` (page aligned). The used
    /// ring starts on its own page, as legacy virtio required and as keeps the
    /// device's writes off the driver's cache lines.
    pub fn new(base: u64, size: u16) -> Layout {
        assert!(size.is_power_of_two(), "queue size must be a power of two");
        let n = u64::from(size);
        let desc = base;
        let avail = desc + 16 * n;
        let used = (avail + 6 + 2 * n).next_multiple_of(4096);
        Layout {
            size,
            desc,
            avail,
            used,
        }
    }

    /// Bytes one ring of `size` entries takes, rounded up to whole pages.
    pub fn bytes(size: u16) -> u64 {
        let l = Layout::new(0, size);
        (l.used + 6 + 8 * u64::from(size)).next_multiple_of(4096)
    }

    /// How many request slots fit.
    pub fn slots(&self) -> u16 {
        self.size / DESCS_PER_SLOT
    }

    fn avail_idx(&self) -> u64 {
        self.avail + 2
    }
    fn avail_slot(&self, i: u16) -> u64 {
        self.avail + 4 + 2 * u64::from(i % self.size)
    }
    fn used_event(&self) -> u64 {
        self.avail + 4 + 2 * u64::from(self.size)
    }
    fn used_idx(&self) -> u64 {
        self.used + 2
    }
    fn used_elem(&self, i: u16) -> u64 {
        self.used + 4 + 8 * u64::from(i % self.size)
    }
    fn avail_event(&self) -> u64 {
        self.used + 4 + 8 * u64::from(self.size)
    }
}

/// One buffer of a request: guest address, length, device-writable or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Guest physical address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Device-writable (a reply buffer).
    pub write: bool,
}

/// virtio's `vring_need_event`: whether moving an index from `old` to `new`
/// crosses `event` (the other side's "notify me when you pass this").
pub fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// The driver's view of one split ring.
pub struct DriverRing {
    mem: Arc<GuestMem>,
    layout: Layout,
    /// Our shadow of avail->idx (only we write it).
    avail_idx: u16,
    /// avail->idx at the last kick decision.
    kicked_idx: u16,
    /// Used entries consumed so far.
    last_used: u16,
}

impl DriverRing {
    /// Zeroes the ring memory and takes over the ring at index 0 (the state
    /// SET_VRING_BASE 0 gives the device).
    pub fn new(mem: Arc<GuestMem>, layout: Layout) -> DriverRing {
        mem.fill(layout.desc, 0, Layout::bytes(layout.size) as usize);
        DriverRing {
            mem,
            layout,
            avail_idx: 0,
            kicked_idx: 0,
            last_used: 0,
        }
    }

    /// The ring's layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Writes the chain of `segs` into slot `slot`'s descriptors and puts its
    /// head on the avail ring, without publishing it (see `publish`).
    ///
    /// # Panics
    /// When `slot` is out of range or `segs` is empty or too long.
    pub fn push(&mut self, slot: u16, segs: &[Seg]) {
        assert!(slot < self.layout.slots(), "slot {slot} out of range");
        assert!(
            !segs.is_empty() && segs.len() <= usize::from(DESCS_PER_SLOT),
            "a chain has 1..={DESCS_PER_SLOT} segments"
        );
        let head = slot * DESCS_PER_SLOT;
        for (i, s) in segs.iter().enumerate() {
            let idx = head + i as u16;
            let mut flags = if s.write { VRING_DESC_F_WRITE } else { 0 };
            let next = if i + 1 < segs.len() {
                flags |= VRING_DESC_F_NEXT;
                idx + 1
            } else {
                0
            };
            let mut d = [0u8; 16];
            d[0..8].copy_from_slice(&s.addr.to_le_bytes());
            d[8..12].copy_from_slice(&s.len.to_le_bytes());
            d[12..14].copy_from_slice(&flags.to_le_bytes());
            d[14..16].copy_from_slice(&next.to_le_bytes());
            self.mem.write(self.layout.desc + 16 * u64::from(idx), &d);
        }
        self.mem
            .write_u16(self.layout.avail_slot(self.avail_idx), head);
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    /// Makes every pushed chain visible to the device (release store of
    /// avail->idx, so descriptors and ring entries are seen first). Returns
    /// whether the device asked to be kicked for them (EVENT_IDX avail_event).
    pub fn publish(&mut self) -> bool {
        self.mem
            .u16_at(self.layout.avail_idx())
            .store(self.avail_idx, Ordering::Release);
        // The store above must be visible before we read avail_event, or the
        // device may go to sleep having seen neither (virtio_mb in Linux).
        fence(Ordering::SeqCst);
        let event = self
            .mem
            .u16_at(self.layout.avail_event())
            .load(Ordering::Acquire);
        let need = need_event(event, self.avail_idx, self.kicked_idx);
        self.kicked_idx = self.avail_idx;
        need
    }

    /// Whether the device has used entries we have not consumed.
    pub fn has_used(&self) -> bool {
        self.mem
            .u16_at(self.layout.used_idx())
            .load(Ordering::Acquire)
            != self.last_used
    }

    /// Consumes the next used entry: (descriptor id, bytes written).
    pub fn pop_used(&mut self) -> Option<(u32, u32)> {
        if !self.has_used() {
            return None;
        }
        let e = self.layout.used_elem(self.last_used);
        let id = self.mem.read_u32(e);
        let len = self.mem.read_u32(e + 4);
        self.last_used = self.last_used.wrapping_add(1);
        Some((id, len))
    }

    /// Asks for a call (interrupt) when the next used entry arrives, then
    /// re-checks the used ring: true means entries arrived meanwhile, so do
    /// not sleep.
    pub fn arm_call(&self) -> bool {
        self.mem
            .u16_at(self.layout.used_event())
            .store(self.last_used, Ordering::Release);
        fence(Ordering::SeqCst);
        self.has_used()
    }

    /// Asks for no calls for a while: used_event half the index space away,
    /// so the device does not cross it before the next `suppress_calls` (the
    /// EVENT_IDX way; the NO_INTERRUPT flag is ignored with EVENT_IDX).
    pub fn suppress_calls(&self) {
        self.mem
            .u16_at(self.layout.used_event())
            .store(self.last_used.wrapping_add(0x8000), Ordering::Relaxed);
    }

    /// Chains published and not yet used.
    #[cfg(test)]
    pub fn in_flight(&self) -> u16 {
        self.avail_idx.wrapping_sub(self.last_used)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use virtio_queue::{Queue, QueueOwnedT, QueueT};
    use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

    use super::*;

    const SIZE: u16 = 16;

    /// The same memfd, seen by virtio-queue's device-side `Queue`.
    fn device_view(mem: &GuestMem) -> GuestMemoryMmap {
        let f = mem.file().try_clone().expect("dup");
        assert!(f.as_raw_fd() >= 0);
        let region = MmapRegion::from_file(FileOffset::new(f, 0), mem.len()).expect("mmap");
        GuestMemoryMmap::from_regions(vec![
            GuestRegionMmap::new(region, GuestAddress(0)).expect("region")
        ])
        .expect("memory")
    }

    fn device_queue(l: Layout) -> Queue {
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
        q
    }

    fn setup() -> (Arc<GuestMem>, DriverRing, GuestMemoryMmap, Queue) {
        let mem = Arc::new(GuestMem::new(1 << 20).expect("mem"));
        let l = Layout::new(0x1000, SIZE);
        let ring = DriverRing::new(mem.clone(), l);
        let dm = device_view(&mem);
        let q = device_queue(l);
        (mem, ring, dm, q)
    }

    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = Layout::new(0x10_0000, 256);
        assert_eq!(l.desc, 0x10_0000);
        assert_eq!(l.avail, 0x10_0000 + 4096);
        assert_eq!(l.used % 4096, 0);
        assert!(l.used >= l.avail + 6 + 512);
        assert_eq!(Layout::bytes(256), 4096 + 4096 + 4096);
        assert_eq!(l.slots(), 64);
    }

    #[test]
    fn need_event_matches_virtio() {
        // The other side asks to hear about entry 5: publishing entry 4
        // (index 4 -> 5) does not concern it, publishing entry 5 (5 -> 6) does.
        assert!(!need_event(5, 5, 4));
        assert!(need_event(5, 6, 5));
        assert!(need_event(4, 5, 4));
        // A batch 3 -> 7 crossing 5.
        assert!(need_event(5, 7, 3));
        // Wrap-around.
        assert!(need_event(0xffff, 1, 0xfffe));
        assert!(!need_event(0x8000, 1, 0));
    }

    #[test]
    fn device_sees_our_chains_and_we_see_its_used_entries() {
        let (_mem, mut ring, dm, mut q) = setup();
        ring.push(
            2,
            &[
                Seg {
                    addr: 0x8000,
                    len: 40,
                    write: false,
                },
                Seg {
                    addr: 0x9000,
                    len: 16,
                    write: true,
                },
                Seg {
                    addr: 0xa000,
                    len: 4096,
                    write: true,
                },
            ],
        );
        // A fresh device has avail_event 0: the first publish must kick.
        assert!(ring.publish());
        assert_eq!(ring.in_flight(), 1);
        let chain = q.pop_descriptor_chain(&dm).expect("a chain");
        assert_eq!(chain.head_index(), 2 * DESCS_PER_SLOT);
        let descs: Vec<_> = chain.collect();
        assert_eq!(descs.len(), 3);
        assert_eq!((descs[0].addr().0, descs[0].len()), (0x8000, 40));
        assert!(!descs[0].is_write_only());
        assert!(descs[1].is_write_only() && descs[2].is_write_only());
        assert_eq!(descs[2].len(), 4096);

        assert!(!ring.has_used());
        q.add_used(&dm, 2 * DESCS_PER_SLOT, 123).expect("used");
        assert_eq!(ring.pop_used(), Some((u32::from(2 * DESCS_PER_SLOT), 123)));
        assert_eq!(ring.pop_used(), None);
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn kicks_follow_avail_event_and_calls_follow_used_event() {
        let (_mem, mut ring, dm, mut q) = setup();
        let seg = [Seg {
            addr: 0x8000,
            len: 8,
            write: false,
        }];
        // Device re-arms (avail_event = next_avail = 0) and then sleeps.
        q.enable_notification(&dm).expect("enable");
        ring.push(0, &seg);
        assert!(ring.publish(), "device armed at 0: kick");
        // Device pops and does not re-arm (busy polling): no further kicks.
        let _ = q.pop_descriptor_chain(&dm).expect("chain");
        ring.push(1, &seg);
        assert!(!ring.publish(), "device polling: no kick");
        // Device re-arms: avail_event = 1, and index 1 is already published,
        // so enable_notification reports more work instead of sleeping.
        assert!(q.enable_notification(&dm).expect("enable"));
        let _ = q.pop_descriptor_chain(&dm).expect("chain");
        q.enable_notification(&dm).expect("enable");
        ring.push(2, &seg);
        assert!(ring.publish(), "device armed at 2: kick");

        // Calls: suppressed, the device does not need to notify.
        ring.suppress_calls();
        q.add_used(&dm, 0, 0).expect("used");
        assert!(!q.needs_notification(&dm).expect("needs"));
        assert!(ring.pop_used().is_some());
        // Armed with nothing pending: sleep is allowed, and the next used
        // entry must notify.
        assert!(!ring.arm_call());
        q.add_used(&dm, DESCS_PER_SLOT, 0).expect("used");
        assert!(q.needs_notification(&dm).expect("needs"));
        // Armed while an entry is already there: do not sleep.
        assert!(ring.arm_call());
    }

    #[test]
    fn indices_wrap_around() {
        let (_mem, mut ring, dm, mut q) = setup();
        let seg = [Seg {
            addr: 0x8000,
            len: 8,
            write: true,
        }];
        // 70 000 round trips: both 16-bit indices wrap, the ring wraps often.
        for i in 0..70_000u32 {
            let slot = (i % u32::from(ring.layout().slots())) as u16;
            ring.push(slot, &seg);
            ring.publish();
            let c = q.pop_descriptor_chain(&dm).expect("chain");
            assert_eq!(c.head_index(), slot * DESCS_PER_SLOT);
            q.add_used(&dm, c.head_index(), i).expect("used");
            assert_eq!(ring.pop_used(), Some((u32::from(slot * DESCS_PER_SLOT), i)));
        }
        assert_eq!(ring.in_flight(), 0);
        // The device-side iterator agrees that nothing is pending.
        assert!(q.iter(&dm).expect("iter").next().is_none());
    }
}
