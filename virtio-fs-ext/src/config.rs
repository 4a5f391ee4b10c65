// SPDX-License-Identifier: Apache-2.0
//! The daemon's domain settings, defined once: the command line parses them
//! (`clap::ValueEnum`) and the state blob carries them (serde). A state blob
//! naming a value this build does not know is refused when it is decoded;
//! nothing is ever mapped to a default.

use serde::{Deserialize, Serialize};

/// Whether a FUSE feature is offered: not at all, if the guest takes it,
/// or as a condition of the session (`--posix-acl`, `--security-label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Negotiation {
    Never,
    Auto,
    Always,
}

/// `--inode-file-handles`: inodes held as O_PATH descriptors or as file
/// handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FileHandles {
    #[default]
    Never,
    Prefer,
    Mandatory,
}

impl From<FileHandles> for xvfs_fs::passthrough::HandleMode {
    fn from(m: FileHandles) -> Self {
        match m {
            FileHandles::Never => xvfs_fs::passthrough::HandleMode::Never,
            FileHandles::Prefer => xvfs_fs::passthrough::HandleMode::Prefer,
            FileHandles::Mandatory => xvfs_fs::passthrough::HandleMode::Mandatory,
        }
    }
}

impl From<Negotiation> for xvfs_fs::passthrough::Offer {
    fn from(n: Negotiation) -> Self {
        match n {
            Negotiation::Never => xvfs_fs::passthrough::Offer::Never,
            Negotiation::Auto => xvfs_fs::passthrough::Offer::Auto,
            Negotiation::Always => xvfs_fs::passthrough::Offer::Always,
        }
    }
}

/// `--crash-restart-keep`: which files the holder keeps for a restarted
/// serving process (those with no name left, or every one the guest holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum CrashRestartKeep {
    #[default]
    Nameless,
    All,
}

/// `--migration-target`: whose device-state format a migration source
/// writes (virtiofsd's, for a destination that runs virtiofsd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum MigrationTarget {
    #[default]
    Xvirtiofsd,
    Virtiofsd,
}

/// How long the guest may cache metadata and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum CacheMode {
    Never,
    Auto,
    Metadata,
    Always,
}

impl From<CacheMode> for xvfs_fs::CachePolicy {
    fn from(c: CacheMode) -> Self {
        match c {
            CacheMode::Never => xvfs_fs::CachePolicy::Never,
            CacheMode::Auto => xvfs_fs::CachePolicy::Auto,
            CacheMode::Metadata => xvfs_fs::CachePolicy::Metadata,
            CacheMode::Always => xvfs_fs::CachePolicy::Always,
        }
    }
}

/// How the daemon confines itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum SandboxMode {
    /// New PID, mount, network and IPC namespaces; a bind mount of the shared directory
    /// becomes `/` (pivot_root) and is opened from inside; /proc is the daemon's own fds.
    Namespace,
    /// chroot(2) into the shared directory (containers without namespace rights; the host's
    /// /proc and mount stay reachable to a compromised daemon, see docs/security.md).
    Chroot,
    /// No sandbox (the file system layer still confines every path).
    None,
}

/// What the system call filter does with a call outside its allow-list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum SeccompAction {
    /// No system call filter.
    None,
    /// Kill the process on a system call outside the allow-list.
    Kill,
    /// Log it and allow it (for finding missing entries).
    Log,
    /// Send SIGSYS.
    Trap,
}

/// How a queue worker waits for the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum PollMode {
    /// Sleep on the kick eventfd right after each batch of requests.
    Never,
    /// Poll for the whole window after every batch.
    Always,
    /// Poll only while requests arrive faster than the window plus the cost of
    /// a wake-up (measured at start).
    Adaptive,
}

/// The daemon's log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
    Off,
}

/// How a VM live migration's source describes the inodes the guest holds
/// (`--migration-mode`, virtiofsd's option and values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum MigrationMode {
    /// By path inside the shared directory (the kernel's path of each
    /// descriptor, proven by walking it; else a search of the share).
    #[default]
    FindPaths,
    /// By file handle: the destination must serve the very same file system
    /// and have CAP_DAC_READ_SEARCH (`--modcaps=+dac_read_search`).
    FileHandles,
}

/// What a VM live migration's destination does with an inode it cannot find
/// (`--migration-on-error`, virtiofsd's option and values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum MigrationOnError {
    /// Fail the migration: the source VM keeps running and serving.
    #[default]
    Abort,
    /// Finish it; the guest gets EIO for that inode and its open files only.
    GuestError,
}
