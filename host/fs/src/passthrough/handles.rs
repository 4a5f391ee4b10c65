// SPDX-License-Identifier: Apache-2.0
//! `--inode-file-handles`: inodes held as file handles (`name_to_handle_at`)
//! instead of `O_PATH` descriptors, so that the inodes a guest holds cost
//! no descriptor; each use opens the handle (`open_by_handle_at`, which
//! needs CAP_DAC_READ_SEARCH) on a descriptor of the file's own mount.
//!
//! Handles are made here from files found inside the shared directory and
//! never come from the guest. A mount is known by its id and its device: a
//! mount id reused by a later mount of another file system gets a
//! descriptor of its own, never the old one's.
//!
//! `prefer`: a file whose file system gives no handle (EOPNOTSUPP,
//! EOVERFLOW), or whose mount is first met through something other than a
//! directory, is held as a descriptor; if opening handles does not work at
//! all (no CAP_DAC_READ_SEARCH, e.g. in a user namespace), handles are
//! given up for good, with a warning. `mandatory`: such a file cannot be
//! looked up (EOPNOTSUPP), and a shared directory without usable handles
//! fails start-up.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::table::{lock, InodeFile};
use super::{err, Error, HandleMode, PassthroughFs};
use crate::sys;

/// The descriptors handles are opened on: mount id → (device, descriptor).
pub(crate) type Mounts = Mutex<HashMap<i32, (u64, Arc<OwnedFd>)>>;

impl PassthroughFs {
    /// Whether new inodes are held as file handles.
    fn handles_on(&self) -> bool {
        self.cfg.inode_file_handles != HandleMode::Never
            && !self.handles_off.load(Ordering::Relaxed)
    }

    /// Checks at start-up that the shared directory gives a file handle
    /// that opens again: `mandatory` fails without, `prefer` does without.
    pub(crate) fn check_file_handles(&self) -> Result<(), Error> {
        if self.cfg.inode_file_handles == HandleMode::Never {
            return Ok(());
        }
        // The root's mount goes through the same check as every other.
        let (fd, dev) = (self.inodes.root_fd(), self.inodes.root().key.0);
        let works = sys::handle_and_mount(fd).and_then(|(t, bytes, mount)| {
            self.mount_fd(fd, dev, mount, libc::S_IFDIR, (t, &bytes))
                .map(drop)
        });
        match (works, self.cfg.inode_file_handles) {
            (Ok(()), _) => Ok(()),
            (Err(e), HandleMode::Mandatory) => Err(Error::FileHandles(e)),
            (Err(e), _) => {
                self.give_up_handles(&e);
                Ok(())
            }
        }
    }

    fn give_up_handles(&self, e: &io::Error) {
        if !self.handles_off.swap(true, Ordering::Relaxed) {
            log::warn!(
                "--inode-file-handles=prefer: file handles do not work here ({e}); \
                 inodes are held as O_PATH descriptors"
            );
        }
    }

    /// How the new inode of `fd` (on device `dev`, type `file_type`) is
    /// held.
    pub(crate) fn hold(&self, fd: OwnedFd, dev: u64, file_type: u32) -> io::Result<InodeFile> {
        Ok(match self.handle_for(&fd, dev, file_type)? {
            Some(h) => h,
            None => InodeFile::Fd(fd),
        })
    }

    /// [`PassthroughFs::hold`] for an inode received from a predecessor or
    /// a migration source: held as a descriptor where a handle fails.
    pub(crate) fn hold_restored(&self, fd: OwnedFd, dev: u64, file_type: u32) -> InodeFile {
        match self.handle_for(&fd, dev, file_type) {
            Ok(Some(h)) => h,
            _ => InodeFile::Fd(fd),
        }
    }

    /// The file handle `fd`'s inode is to be held as; None: as `fd`.
    fn handle_for(&self, fd: &OwnedFd, dev: u64, file_type: u32) -> io::Result<Option<InodeFile>> {
        if !self.handles_on() {
            return Ok(None);
        }
        let made = sys::handle_and_mount(fd.as_fd()).and_then(|(t, bytes, mount_id)| {
            let mount = self.mount_fd(fd.as_fd(), dev, mount_id, file_type, (t, &bytes))?;
            Ok(InodeFile::Handle {
                handle_type: t,
                bytes: bytes.into_boxed_slice(),
                mount,
            })
        });
        match made {
            Ok(h) => Ok(Some(h)),
            Err(e) if self.cfg.inode_file_handles == HandleMode::Mandatory => {
                log::debug!("--inode-file-handles=mandatory: no file handle: {e}");
                Err(err(libc::EOPNOTSUPP))
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::EOVERFLOW | libc::ENOENT) => Ok(None),
                Some(libc::EPERM | libc::EACCES) => {
                    self.give_up_handles(&e);
                    Ok(None)
                }
                _ => Err(e),
            },
        }
    }

    /// The descriptor of mount `mount_id` (device `dev`) that `fd`'s file
    /// is on: known, or made from `fd` when it is a directory (tried once
    /// to open the file's own handle `handle`). ENOENT when there is none
    /// yet.
    fn mount_fd(
        &self,
        fd: BorrowedFd<'_>,
        dev: u64,
        mount_id: i32,
        file_type: u32,
        handle: (i32, &[u8]),
    ) -> io::Result<Arc<OwnedFd>> {
        let mut mounts = lock(&self.mounts);
        if let Some((d, m)) = mounts.get(&mount_id) {
            if *d == dev {
                return Ok(Arc::clone(m));
            }
        }
        if file_type != libc::S_IFDIR {
            return Err(err(libc::ENOENT));
        }
        let name = sys::fd_name(fd.as_raw_fd());
        let dir = sys::openat(
            self.proc_self_fd.as_fd(),
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        sys::open_by_handle(dir.as_fd(), handle.0, handle.1, libc::O_PATH)?;
        let dir = Arc::new(dir);
        mounts.insert(mount_id, (dev, Arc::clone(&dir)));
        Ok(dir)
    }
}
