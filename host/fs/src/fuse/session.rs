// SPDX-License-Identifier: Apache-2.0
//! The negotiated FUSE session: what INIT settled, saved and restored across
//! a live upgrade.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::abi::{KERNEL_MINOR_VERSION, MIN_KERNEL_MINOR_VERSION};

/// The negotiated FUSE session (what INIT settled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// Protocol minor version in use.
    pub minor: u32,
    /// Negotiated INIT flags (`flags | flags2 << 32`).
    pub flags: u64,
}

/// Why a saved session cannot be resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The minor version is not one this server speaks.
    #[error("saved FUSE session speaks 7.{minor}; this server speaks 7.{min}..=7.{max}")]
    Minor {
        /// The saved minor version.
        minor: u32,
        /// Oldest minor version spoken.
        min: u32,
        /// Newest minor version spoken.
        max: u32,
    },
    /// Flags this configuration does not support.
    #[error("saved FUSE session has flags {unsupported:#x} this configuration does not support")]
    Flags {
        /// The offending flags.
        unsupported: u64,
    },
}

impl SessionState {
    /// Checks the state could have been negotiated by this server with a file
    /// system supporting `supported` flags.
    pub fn validate(&self, supported: u64) -> Result<(), SessionError> {
        if !(MIN_KERNEL_MINOR_VERSION..=KERNEL_MINOR_VERSION).contains(&self.minor) {
            return Err(SessionError::Minor {
                minor: self.minor,
                min: MIN_KERNEL_MINOR_VERSION,
                max: KERNEL_MINOR_VERSION,
            });
        }
        let unsupported = self.flags & !supported;
        if unsupported != 0 {
            return Err(SessionError::Flags { unsupported });
        }
        Ok(())
    }
}

/// The live session, shared by every worker (lock-free).
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// Negotiated minor version; 0 until INIT.
    minor: AtomicU32,
    flags: AtomicU64,
}

impl Session {
    /// The session, if INIT was done.
    pub(crate) fn get(&self) -> Option<SessionState> {
        match self.minor.load(Ordering::Acquire) {
            0 => None,
            minor => Some(SessionState {
                minor,
                flags: self.flags.load(Ordering::Relaxed),
            }),
        }
    }

    /// Whether `flag` was negotiated.
    pub(crate) fn has(&self, flag: u64) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    pub(crate) fn start(&self, s: SessionState) {
        self.flags.store(s.flags, Ordering::Relaxed);
        self.minor.store(s.minor.max(1), Ordering::Release);
    }

    pub(crate) fn end(&self) {
        self.minor.store(0, Ordering::Release);
        self.flags.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_bounds() {
        let ok = |minor, flags| SessionState { minor, flags }.validate(0b1010);
        assert_eq!(ok(MIN_KERNEL_MINOR_VERSION, 0b1000), Ok(()));
        assert_eq!(ok(KERNEL_MINOR_VERSION, 0b1010), Ok(()));
        assert!(matches!(
            ok(MIN_KERNEL_MINOR_VERSION - 1, 0),
            Err(SessionError::Minor { .. })
        ));
        assert!(matches!(
            ok(KERNEL_MINOR_VERSION + 1, 0),
            Err(SessionError::Minor { .. })
        ));
        assert_eq!(
            ok(KERNEL_MINOR_VERSION, 0b0111),
            Err(SessionError::Flags {
                unsupported: 0b0101
            })
        );
    }

    #[test]
    fn live_session_start_end() {
        let s = Session::default();
        assert_eq!(s.get(), None);
        s.start(SessionState {
            minor: 41,
            flags: 4,
        });
        assert_eq!(
            s.get(),
            Some(SessionState {
                minor: 41,
                flags: 4
            })
        );
        assert!(s.has(4) && !s.has(1));
        s.end();
        assert_eq!(s.get(), None);
        assert!(!s.has(4));
    }
}
