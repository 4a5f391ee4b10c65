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
}

/// Upper bound on regions (QEMU uses up to 509 memory slots with CONFIGURE_MEM_SLOTS).
pub const MAX_REGIONS: usize = 509;

/// The memory table: regions plus their mapping.
#[derive(Debug, Default)]
pub struct MemoryTable {
    regions: Vec<Region>,
}

impl MemoryTable {
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Replaces the whole table (SET_MEM_TABLE) after validating it.
    pub fn set(&mut self, regions: Vec<Region>) -> Result<GuestMemoryMmap, MemError> {
        let mapped = map_regions(&regions)?;
        self.regions = regions;
        Ok(mapped)
    }

    /// Adds one region (ADD_MEM_REG).
    pub fn add(&mut self, region: Region) -> Result<GuestMemoryMmap, MemError> {
        if self.regions.len() >= MAX_REGIONS {
            return Err(MemError::TooMany(MAX_REGIONS));
        }
        let mut regions = self.regions.clone();
        regions.push(region);
        self.set(regions)
    }

    /// Removes the region matching `gpa`/`size` (REM_MEM_REG); unknown ones are ignored.
    pub fn remove(&mut self, gpa: u64, size: u64) -> Result<GuestMemoryMmap, MemError> {
        let regions: Vec<Region> = self
            .regions
            .iter()
            .filter(|r| !(r.gpa == gpa && r.size == size))
            .cloned()
            .collect();
        self.set(regions)
    }

    /// Translates a front-end virtual address (as in SET_VRING_ADDR) to a guest address.
    pub fn vmm_va_to_gpa(&self, va: u64) -> Result<u64, MemError> {
        self.regions
            .iter()
            .find(|r| va >= r.user_addr && va - r.user_addr < r.size)
            .map(|r| r.gpa + (va - r.user_addr))
            .ok_or(MemError::UnknownAddress(va))
    }
}

fn map_regions(regions: &[Region]) -> Result<GuestMemoryMmap, MemError> {
    let mut sorted: Vec<&Region> = regions.iter().collect();
    sorted.sort_by_key(|r| r.gpa);
    for (i, r) in regions.iter().enumerate() {
        let ok = r.size != 0
            && r.gpa.checked_add(r.size).is_some()
            && r.user_addr.checked_add(r.size).is_some()
            && r.mmap_offset.checked_add(r.size).is_some()
            && usize::try_from(r.size).is_ok();
        if !ok {
            return Err(MemError::InvalidRegion { index: i });
        }
    }
    for w in sorted.windows(2) {
        if w[0].gpa + w[0].size > w[1].gpa {
            return Err(MemError::Overlap);
        }
    }
    let mut mapped = Vec::with_capacity(regions.len());
    for r in sorted {
        let fo = FileOffset::from_arc(Arc::clone(&r.file), r.mmap_offset);
        let map = MmapRegion::from_file(fo, r.size as usize).map_err(|source| MemError::Map {
            gpa: r.gpa,
            size: r.size,
            source,
        })?;
        let region = GuestRegionMmap::new(map, GuestAddress(r.gpa))
            .ok_or(MemError::InvalidRegion { index: 0 })?;
        mapped.push(region);
    }
    GuestMemoryMmap::from_regions(mapped).map_err(|_| MemError::Overlap)
}
