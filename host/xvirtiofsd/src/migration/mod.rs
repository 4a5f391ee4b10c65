// SPDX-License-Identifier: Apache-2.0
//! VM live migration of the device state: what the source writes into QEMU's
//! migration stream and what the destination makes of it (the vhost-user
//! messages are in `vhost_user::device`). The rings are stopped meanwhile.
//!
//! The source describes every inode the guest holds by where to find it
//! (`--migration-mode`), and the open files by node and flags; the
//! destination opens them again under the same ids and resumes the FUSE
//! session, so the guest neither re-INITs nor loses a descriptor. A stream
//! from virtiofsd is accepted too (see [`virtio_fs_ext::migration`]).

pub mod dirty_log;

use log::{info, warn};
use virtio_fs_ext::config::{MigrationMode, MigrationOnError, MigrationTarget};
use virtio_fs_ext::migration::{self, MigrationStream, Received};
use xvfs_fs::abi::{init_flags, KERNEL_MINOR_VERSION};
use xvfs_fs::passthrough::{LoadReport, SaveOptions};
use xvfs_fs::SessionState;

use crate::FsServer as Server;

/// The `--migration-*` settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrationConfig {
    pub mode: MigrationMode,
    pub on_error: MigrationOnError,
    /// Source: attach each inode's file handle for the destination to check.
    pub verify_handles: bool,
    /// Source: prove each path at switch-over (always done: the paths are
    /// taken while the device is stopped, and each is walked from the
    /// shared directory before it is sent).
    pub confirm_paths: bool,
    /// Source: whose format to write (`--migration-target`).
    pub target: MigrationTarget,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("device state")]
    Stream(#[from] migration::MigrationError),
    #[error("the inodes and open files of the guest")]
    Fs(#[from] xvfs_fs::passthrough::Error),
    #[error("the FUSE session")]
    Session(#[from] xvfs_fs::SessionError),
    #[error("the source negotiated {0}, which this daemon does not serve")]
    Unserved(&'static str),
    #[error("virtiofsd's format cannot carry the state: {0}")]
    Virtiofsd(String),
    #[error("the guest holds {0} lock(s) on this host (-o posix_lock/flock), and locks cannot move to another host: the migration is refused, the guest keeps running here")]
    LocksHeld(usize),
}

/// The source's state, in our format.
pub fn save(server: &Server, cfg: &MigrationConfig) -> Result<Vec<u8>, MigrationError> {
    let locks = server.fs().lock_count();
    if locks > 0 {
        return Err(MigrationError::LocksHeld(locks));
    }
    let fs = server.fs().migration_state(SaveOptions {
        file_handles: cfg.mode == MigrationMode::FileHandles,
        verify_handles: cfg.verify_handles,
    });
    let invalid = fs
        .inodes
        .iter()
        .filter(|i| matches!(i.location, xvfs_fs::state::Location::Invalid { .. }))
        .count();
    info!(
        "migration: saving {} inode(s) and {} open file(s) ({:?}){}",
        fs.inodes.len(),
        fs.handles.len(),
        cfg.mode,
        if invalid > 0 {
            format!("; {invalid} could not be located")
        } else {
            String::new()
        }
    );
    let stream = MigrationStream {
        writer_version: crate::VERSION.to_string(),
        session: server.session(),
        fs,
    };
    match cfg.target {
        MigrationTarget::Xvirtiofsd => Ok(fault(stream.encode()?)),
        MigrationTarget::Virtiofsd => {
            let blob = migration::virtiofsd::encode(&stream).map_err(MigrationError::Virtiofsd)?;
            info!("migration: written in virtiofsd's format (version 1)");
            Ok(blob)
        }
    }
}

/// Test hook: with the `fault-injection` feature and
/// `XVFS_MIGRATION_FAULT=newer-format`, the source claims a stream version
/// the destination does not read (as a newer source would), which the
/// destination must refuse. Any other build writes the stream unchanged.
#[cfg(feature = "fault-injection")]
fn fault(mut blob: Vec<u8>) -> Vec<u8> {
    if std::env::var("XVFS_MIGRATION_FAULT").as_deref() == Ok("newer-format") && blob.len() >= 12 {
        let newer = migration::MIGRATION_READS.end() + 1;
        blob[8..12].copy_from_slice(&newer.to_le_bytes());
    }
    blob
}

#[cfg(not(feature = "fault-injection"))]
fn fault(blob: Vec<u8>) -> Vec<u8> {
    blob
}

/// Test hook: with the `fault-injection` feature and
/// `XVFS_MIGRATION_DUMP=PATH`, a destination writes the device state it
/// received to PATH (inside its sandbox: the share), so that a test can
/// keep what another daemon wrote (virtiofsd's samples,
/// `tests/vm/capture_virtiofsd_sample.sh`).
#[cfg(feature = "fault-injection")]
fn dump(blob: &[u8]) {
    if let Some(path) = std::env::var_os("XVFS_MIGRATION_DUMP") {
        if let Err(e) = std::fs::write(&path, blob) {
            warn!("migration: cannot dump the device state: {e}");
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
fn dump(_: &[u8]) {}

/// Applies a received state (ours or virtiofsd's) to a server that has not
/// served this guest yet.
pub fn load(
    server: &Server,
    cfg: &MigrationConfig,
    blob: &[u8],
) -> Result<LoadReport, MigrationError> {
    let abort = cfg.on_error == MigrationOnError::Abort;
    dump(blob);
    let (fs, session) = match migration::decode(blob)? {
        Received::Ours(s) => {
            info!("migration: state from xvirtiofsd {}", s.writer_version);
            (s.fs, s.session)
        }
        Received::Virtiofsd { fs, opts, version } => {
            info!("migration: state from virtiofsd (format V{version})");
            (fs, Some(virtiofsd_session(server, opts)?))
        }
    };
    let report = server.fs().load_migration(&fs, abort)?;
    if let Some(s) = session {
        server.restore_session(s)?;
    }
    for f in &report.failed {
        warn!("migration: {f}; the guest gets EIO for it");
    }
    info!(
        "migration: {} inode(s) and {} open file(s) opened again, {} lost",
        report.inodes,
        report.handles,
        report.failed.len()
    );
    Ok(report)
}

/// virtiofsd's stream does not carry the FUSE session: the guest negotiated
/// every flag both sides offer (a current kernel offers them all), so the
/// session is ours, with write-back caching as virtiofsd settled it.
fn virtiofsd_session(
    server: &Server,
    opts: migration::virtiofsd::NegotiatedOpts,
) -> Result<SessionState, MigrationError> {
    if opts.announce_submounts {
        warn!(
            "migration: virtiofsd announced submounts to the guest; this daemon does not, \
             so a mount inside the share looks like a plain directory to new lookups"
        );
    }
    if opts.posix_acl {
        return Err(MigrationError::Unserved("POSIX ACLs"));
    }
    let mut flags = server.supported_init_flags();
    if opts.writeback {
        if flags & init_flags::WRITEBACK_CACHE == 0 {
            return Err(MigrationError::Unserved(
                "write-back caching (give --writeback)",
            ));
        }
    } else {
        flags &= !init_flags::WRITEBACK_CACHE;
    }
    if opts.sup_group_extension {
        warn!(
            "migration: the guest sends supplementary groups with creates; \
             this daemon skips that request extension"
        );
    }
    Ok(SessionState {
        minor: KERNEL_MINOR_VERSION,
        flags,
    })
}
