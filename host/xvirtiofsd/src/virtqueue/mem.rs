// SPDX-License-Identifier: Apache-2.0
//! Guest memory: the regions the front-end shares with us (SET_MEM_TABLE,
//! ADD/REM_MEM_REG), mapped into this process as vm-memory regions, and the
//! address translation the rings need (front-end virtual address → guest
//! physical address). The data path reaches guest memory only through
//! vm-memory's slices ([`crate::virtqueue::chain`]).

use std::fs::File;
use std::sync::Arc;

use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

/// The mapped guest memory the queues use.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<()>;

#[derive(Debug, thiserror::Error)]
pub enum MemError {
    #[error("memory region {index} is invalid (size 0 or address overflow)")]
    InvalidRegion { index: usize },
    #[error("memory regions overlap")]
    Overlap,
    #[error("cannot map memory region at guest address {gpa:#x} ({size} bytes)")]
    Map {
        gpa: u64,
        size: u64,
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
    #[error("no memory region holds front-end address {0:#x}")]
    UnknownAddress(u64),
    #[error("too many memory regions (at most {0})")]
    TooMany(usize),
}

/// One shared region, as the front-end described it, with its file.
#[derive(Debug, Clone)]
pub struct Region {
    pub gpa: u64,
    pub size: u64,
    /// The front-end's (QEMU's) virtual address of the region's start.
    pub user_addr: u64,
    pub mmap_offset: u64,
    pub file: Arc<File>,
    /// A chunk of the DAX window: QEMU adds each file range it maps for
    /// the guest to guest memory, backed by that file of the share. Kept
    /// in the table (addresses, slots) but never mapped here: a host
    /// process may shrink the file, and a touch would be SIGBUS in the
    /// daemon. A descriptor that points into it is refused.
    pub window_chunk: bool,
}

/// Upper bound on regions (QEMU uses up to 509 memory slots with CONFIGURE_MEM_SLOTS).
pub const MAX_REGIONS: usize = 509;

/// The memory table: each region with its mapping, sorted by guest address.
/// ADD_MEM_REG maps only the new region and REM_MEM_REG unmaps only the old
/// one: with a DAX window every guest map is a region of its own, hundreds
/// at a time, so redoing the whole table per message would cost one mmap per
/// live region for every map the guest makes.
#[derive(Debug, Default)]
pub struct MemoryTable {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    region: Region,
    /// None for a chunk of the DAX window.
    mapped: Option<Arc<GuestRegionMmap>>,
}

impl Entry {
    fn new(region: Region) -> Result<Self, MemError> {
        let mapped = if region.window_chunk {
            None
        } else {
            Some(map_region(&region)?)
        };
        Ok(Entry { region, mapped })
    }
}

impl MemoryTable {
    /// The regions, by guest address.
    pub fn regions(&self) -> impl ExactSizeIterator<Item = &Region> {
        self.entries.iter().map(|e| &e.region)
    }

    /// Replaces the whole table (SET_MEM_TABLE) after validating it.
    pub fn set(&mut self, regions: Vec<Region>) -> Result<GuestMemoryMmap, MemError> {
        if regions.len() > MAX_REGIONS {
            return Err(MemError::TooMany(MAX_REGIONS));
        }
        for (i, r) in regions.iter().enumerate() {
            check_region(r, i)?;
        }
        let mut sorted = regions;
        sorted.sort_by_key(|r| r.gpa);
        if sorted.windows(2).any(|w| w[0].gpa + w[0].size > w[1].gpa) {
            return Err(MemError::Overlap);
        }
        let mut entries = Vec::with_capacity(sorted.len());
        for region in sorted {
            entries.push(Entry::new(region)?);
        }
        self.entries = entries;
        self.collection()
    }

    /// Adds one region (ADD_MEM_REG), mapping only it.
    pub fn add(&mut self, region: Region) -> Result<GuestMemoryMmap, MemError> {
        if self.entries.len() >= MAX_REGIONS {
            return Err(MemError::TooMany(MAX_REGIONS));
        }
        check_region(&region, self.entries.len())?;
        let at = self.entries.partition_point(|e| e.region.gpa < region.gpa);
        let end = region.gpa + region.size;
        let before = at.checked_sub(1).map(|i| &self.entries[i].region);
        let after = self.entries.get(at).map(|e| &e.region);
        if before.is_some_and(|b| b.gpa + b.size > region.gpa) || after.is_some_and(|a| end > a.gpa)
        {
            return Err(MemError::Overlap);
        }
        let entry = Entry::new(region)?;
        self.entries.insert(at, entry);
        self.collection()
    }

    /// Removes the region matching `gpa`/`size` (REM_MEM_REG); unknown ones
    /// are ignored. Its mapping goes once no queue holds the old table.
    pub fn remove(&mut self, gpa: u64, size: u64) -> Result<GuestMemoryMmap, MemError> {
        self.entries
            .retain(|e| !(e.region.gpa == gpa && e.region.size == size));
        self.collection()
    }

    /// Translates a front-end virtual address (as in SET_VRING_ADDR) to a guest address.
    pub fn vmm_va_to_gpa(&self, va: u64) -> Result<u64, MemError> {
        self.regions()
            .find(|r| va >= r.user_addr && va - r.user_addr < r.size)
            .map(|r| r.gpa + (va - r.user_addr))
            .ok_or(MemError::UnknownAddress(va))
    }

    /// The guest memory the queues use: the current mappings, shared
    /// (the DAX window's chunks left out).
    fn collection(&self) -> Result<GuestMemoryMmap, MemError> {
        let regions: Vec<_> = self
            .entries
            .iter()
            .filter_map(|e| e.mapped.clone())
            .collect();
        if regions.is_empty() {
            return Ok(GuestMemoryMmap::default());
        }
        GuestMemoryMmap::from_arc_regions(regions).map_err(|_| MemError::Overlap)
    }
}

/// A region whose sizes and addresses fit (`index` names it in the error).
fn check_region(r: &Region, index: usize) -> Result<(), MemError> {
    let ok = r.size != 0
        && r.gpa.checked_add(r.size).is_some()
        && r.user_addr.checked_add(r.size).is_some()
        && r.mmap_offset.checked_add(r.size).is_some()
        && usize::try_from(r.size).is_ok();
    if ok {
        Ok(())
    } else {
        Err(MemError::InvalidRegion { index })
    }
}

fn map_region(r: &Region) -> Result<Arc<GuestRegionMmap>, MemError> {
    let fo = FileOffset::from_arc(Arc::clone(&r.file), r.mmap_offset);
    let map = MmapRegion::from_file(fo, r.size as usize).map_err(|source| MemError::Map {
        gpa: r.gpa,
        size: r.size,
        source,
    })?;
    let region = GuestRegionMmap::new(map, GuestAddress(r.gpa))
        .ok_or(MemError::InvalidRegion { index: 0 })?;
    Ok(Arc::new(region))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestMemoryBackend};

    fn region(gpa: u64, size: u64) -> Region {
        let file = crate::sys::memfd("mem-test").expect("memfd");
        file.set_len(size).expect("set_len");
        Region {
            gpa,
            size,
            user_addr: 0x7f00_0000_0000 + gpa,
            mmap_offset: 0,
            file: Arc::new(file),
            window_chunk: false,
        }
    }

    #[test]
    fn add_keeps_the_mappings_it_had() {
        let mut t = MemoryTable::default();
        let m1 = t.set(vec![region(0x10_0000, 0x1000)]).expect("set");
        m1.write_obj(0xabcd_u32, GuestAddress(0x10_0000))
            .expect("write");
        let m2 = t.add(region(0, 0x2000)).expect("add");
        assert_eq!(m2.num_regions(), 2);
        let first = m1.find_region(GuestAddress(0x10_0000)).expect("old");
        let again = m2.find_region(GuestAddress(0x10_0000)).expect("new");
        assert_eq!(
            first.as_ptr(),
            again.as_ptr(),
            "the old region was not mapped again"
        );
        assert_eq!(
            m2.read_obj::<u32>(GuestAddress(0x10_0000)).expect("read"),
            0xabcd
        );
        assert_eq!(
            t.regions().map(|r| r.gpa).collect::<Vec<_>>(),
            [0, 0x10_0000]
        );
    }

    #[test]
    fn add_refuses_overlap_and_bad_regions() {
        let mut t = MemoryTable::default();
        t.set(vec![region(0x1000, 0x2000)]).expect("set");
        assert!(matches!(
            t.add(region(0x2000, 0x1000)),
            Err(MemError::Overlap)
        ));
        assert!(matches!(t.add(region(0, 0x1001)), Err(MemError::Overlap)));
        let mut bad = region(0x10_0000, 0x1000);
        bad.gpa = u64::MAX - 0x10;
        assert!(matches!(t.add(bad), Err(MemError::InvalidRegion { .. })));
        assert_eq!(t.regions().len(), 1);
        t.add(region(0, 0x1000)).expect("adjacent is fine");
        t.add(region(0x3000, 0x1000)).expect("adjacent is fine");
    }

    #[test]
    fn remove_down_to_nothing() {
        let mut t = MemoryTable::default();
        t.set(vec![region(0, 0x1000), region(0x1000, 0x1000)])
            .expect("set");
        assert_eq!(t.remove(0x5000, 0x1000).expect("unknown").num_regions(), 2);
        assert_eq!(t.remove(0, 0x1000).expect("remove").num_regions(), 1);
        assert_eq!(
            t.remove(0x1000, 0x1000).expect("remove last").num_regions(),
            0
        );
        assert!(t.vmm_va_to_gpa(0x7f00_0000_1000).is_err());
    }

    #[test]
    fn a_window_chunk_is_recorded_but_never_mapped() {
        let mut t = MemoryTable::default();
        t.set(vec![region(0, 0x2000)]).expect("set");
        let mut chunk = region(0x10_0000, 0x1000);
        chunk.window_chunk = true;
        // A file shrunk under the chunk: mapping it would fault on touch.
        chunk.file.set_len(0).expect("truncate");
        let m = t.add(chunk).expect("add");
        assert_eq!(m.num_regions(), 1, "only guest RAM is mapped");
        assert!(m.read_obj::<u32>(GuestAddress(0x10_0000)).is_err());
        assert_eq!(t.regions().len(), 2, "the chunk holds its place");
        assert!(matches!(
            t.add(region(0x10_0800, 0x1000)),
            Err(MemError::Overlap)
        ));
        assert_eq!(
            t.vmm_va_to_gpa(0x7f00_0010_0010).expect("translated"),
            0x10_0010
        );
        assert_eq!(
            t.remove(0x10_0000, 0x1000).expect("remove").num_regions(),
            1
        );
        assert_eq!(t.regions().len(), 1);
    }

    #[test]
    fn set_refuses_overlap() {
        let mut t = MemoryTable::default();
        let r = t.set(vec![region(0x1000, 0x2000), region(0, 0x1800)]);
        assert!(matches!(r, Err(MemError::Overlap)));
    }
}
