// SPDX-License-Identifier: Apache-2.0
//! [`Session`] for [`PassthroughFs`]: the INIT flags a configuration offers,
//! and what a FUSE session's start, resumption and end do to the tables.

use std::sync::atomic::Ordering;

use super::{CachePolicy, Lost, Offer, PassthroughFs};
use crate::abi::init_flags;
use crate::filesystem::{Capabilities, Session};

impl PassthroughFs {
    /// INIT flags this configuration supports.
    pub fn supported_init_flags(&self) -> u64 {
        use init_flags::*;
        let cfg = &self.cfg;
        let mut f = ASYNC_READ
            | ATOMIC_O_TRUNC
            | EXPORT_SUPPORT
            | BIG_WRITES
            | PARALLEL_DIROPS
            | MAX_PAGES
            | INIT_EXT;
        if cfg.readdirplus {
            f |= DO_READDIRPLUS | READDIRPLUS_AUTO;
        }
        if cfg.writeback && !cfg.readonly {
            f |= WRITEBACK_CACHE;
        }
        if cfg.xattr {
            f |= SETXATTR_EXT;
        }
        if cfg.posix_acl != Offer::Never {
            f |= POSIX_ACL | DONT_MASK | SETXATTR_EXT;
        }
        if cfg.security_label != Offer::Never {
            f |= SECURITY_CTX;
        }
        if cfg.killpriv_v2 {
            f |= HANDLE_KILLPRIV_V2;
        }
        if cfg.posix_lock {
            f |= POSIX_LOCKS;
        }
        if cfg.flock {
            f |= FLOCK_LOCKS;
        }
        if cfg.allow_mmap {
            f |= DIRECT_IO_ALLOW_MMAP;
        }
        if self.has_dax_window() {
            // Per-inode DAX (`dax=inode`, the kernel's default mode with a
            // window) needs the server to say so; `dax=always` needs only
            // the alignment.
            f |= MAP_ALIGNMENT | HAS_INODE_DAX;
        }
        // Not an answer the guest acts on (it offers SUBMOUNTS to say it
        // can make them), but kept in the session's flags so that an
        // upgrade or restart goes on announcing them.
        if cfg.announce_submounts {
            f |= SUBMOUNTS;
        }
        match cfg.cache {
            CachePolicy::Never => {}
            CachePolicy::Metadata => f |= CACHE_SYMLINKS,
            CachePolicy::Auto => f |= AUTO_INVAL_DATA | CACHE_SYMLINKS,
            CachePolicy::Always => f |= CACHE_SYMLINKS,
        }
        f
    }
}

impl Session for PassthroughFs {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            init_flags: self.supported_init_flags(),
            xattr: self.cfg.xattr,
            readdirplus: self.cfg.readdirplus,
            readonly: self.cfg.readonly,
            timeout: self.cfg.cache.timeout(),
            ids: self.cfg.ids.clone(),
            map_alignment: super::MAP_ALIGNMENT_LOG2,
            required_init_flags: {
                use crate::abi::init_flags::{POSIX_ACL, SECURITY_CTX};
                let always =
                    |o: super::Offer, f: u64| if o == super::Offer::Always { f } else { 0 };
                always(self.cfg.posix_acl, POSIX_ACL)
                    | always(self.cfg.security_label, SECURITY_CTX)
            },
        }
    }

    /// Starts a session with `flags`; forgets everything of an earlier one.
    fn init(&self, flags: u64) {
        self.destroy();
        self.negotiated.store(flags, Ordering::Relaxed);
    }

    /// Resumes a restored session with `flags`, keeping the tables.
    fn resume(&self, flags: u64) {
        self.negotiated.store(flags, Ordering::Relaxed);
    }

    /// Ends the session (DESTROY or a new INIT): drops every inode but the root
    /// and closes every handle.
    fn destroy(&self) {
        self.negotiated.store(0, Ordering::Relaxed);
        self.unmap_all();
        self.locks.clear();
        self.handles.clear();
        self.inodes.clear();
        *self.lost_lock() = Lost::default();
    }

    /// Records the FUSE session in the journal, if one is attached.
    fn session_changed(&self, s: Option<crate::SessionState>) {
        if let Some(j) = self.inodes.journal() {
            j.set_session(s);
        }
    }
}
