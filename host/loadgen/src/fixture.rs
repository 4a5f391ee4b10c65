// SPDX-License-Identifier: Apache-2.0
//! The files the workloads use, created on the host side of the shared
//! directory under `xvfs-loadgen/` (kept between runs; rebuilt when wrong).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Directory under the shared directory.
pub const ROOT: &str = "xvfs-loadgen";
/// File READ workloads read (page-cached).
pub const DATA: &str = "data";
/// File WRITE workloads overwrite.
pub const WDATA: &str = "wdata";
/// Directory with `DIR_ENTRIES` empty files.
pub const FILES: &str = "files";
/// Directory CREATE+RELEASE+UNLINK works in.
pub const CREATE: &str = "create";
/// Size of `DATA` and `WDATA`.
pub const DATA_SIZE: u64 = 64 << 20;
/// Entries in `FILES`.
pub const DIR_ENTRIES: usize = 10_000;

/// The prepared fixture.
pub struct Fixture {
    /// `<shared>/xvfs-loadgen`.
    pub root: PathBuf,
}

fn sized_file(path: &Path, size: u64) -> io::Result<()> {
    if fs::metadata(path).map(|m| m.len() == size).unwrap_or(false) {
        return Ok(());
    }
    let mut f = File::create(path)?;
    let mut chunk = vec![0u8; 1 << 20];
    for (i, b) in chunk.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

/// Name of entry `i` of `FILES`.
pub fn entry_name(i: usize) -> String {
    format!("f{i:05}")
}

impl Fixture {
    /// Creates (or checks) the fixture under `shared`.
    pub fn prepare(shared: &Path) -> io::Result<Fixture> {
        Self::prepare_sized(shared, DATA_SIZE, DIR_ENTRIES)
    }

    fn prepare_sized(shared: &Path, data_size: u64, entries: usize) -> io::Result<Fixture> {
        let root = shared.join(ROOT);
        fs::create_dir_all(root.join(FILES))?;
        sized_file(&root.join(DATA), data_size)?;
        sized_file(&root.join(WDATA), data_size)?;
        let files = root.join(FILES);
        if fs::read_dir(&files)?.count() != entries {
            fs::remove_dir_all(&files)?;
            fs::create_dir(&files)?;
            for i in 0..entries {
                File::create(files.join(entry_name(i)))?;
            }
        }
        // Leftovers of an interrupted CREATE run would only slow lookups down.
        let create = root.join(CREATE);
        let _ = fs::remove_dir_all(&create);
        fs::create_dir(&create)?;
        Ok(Fixture { root })
    }

    /// Reads `DATA` once so READ workloads hit the page cache, and touches the
    /// directory so its inodes are cached too.
    pub fn warm(&self) -> io::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        for name in [DATA, WDATA] {
            let mut f = File::open(self.root.join(name))?;
            while f.read(&mut buf)? > 0 {}
        }
        for e in fs::read_dir(self.root.join(FILES))? {
            e?.metadata()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepares_once_and_cleans_create_dir() {
        let d = std::env::temp_dir().join(format!("xvfs-loadgen-fixture-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("dir");
        let f = Fixture::prepare_sized(&d, 3 << 20, 10).expect("prepare");
        assert_eq!(
            fs::metadata(f.root.join(DATA)).expect("data").len(),
            3 << 20
        );
        assert_eq!(fs::read_dir(f.root.join(FILES)).expect("files").count(), 10);
        File::create(f.root.join(CREATE).join("leftover")).expect("leftover");
        let f = Fixture::prepare_sized(&d, 3 << 20, 12).expect("again");
        assert_eq!(fs::read_dir(f.root.join(FILES)).expect("files").count(), 12);
        assert_eq!(
            fs::read_dir(f.root.join(CREATE)).expect("create").count(),
            0
        );
        f.warm().expect("warm");
        fs::remove_dir_all(&d).expect("cleanup");
    }
}
