// SPDX-License-Identifier: Apache-2.0
//! The daemon's settings, typed by meaning: what a live upgrade or a crash
//! restart hands on, parsed once from the command line.
//!
//! - [`Security`]: which files are served, as whom, with which rights and
//!   which identity: a successor must be started with the same (it never
//!   takes these from a predecessor, which may be compromised);
//! - [`Serving`]: how fast or how verbosely the same files are served
//!   (cache, queues, polling, log level): a successor takes them from the
//!   state, so an upgrade never changes them under the guest;
//! - [`Operations`]: where the daemon writes and how it is run (socket,
//!   metrics, syslog, crash restart): equal on both sides too, since they
//!   decide where the audit trail and the guest's kept files go.
//!
//! Each part is one part of the state (format 8 and later) with its own
//! version; format 7 carried them as one flat structure ([`crate::state::v7`]).

use serde::{Deserialize, Serialize};

use crate::config::{
    CacheMode, CrashRestartKeep, FileHandles, LogLevel, MigrationMode, MigrationOnError,
    Negotiation, PollMode, SandboxMode, SeccompAction,
};

/// Everything the command line decides.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Settings {
    pub security: Security,
    pub serving: Serving,
    pub operations: Operations,
}

/// Which files, as whom, with which rights, under which identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Security {
    /// `--shared-dir`, canonical.
    pub shared_dir: String,
    pub sandbox: SandboxMode,
    pub seccomp: SeccompAction,
    pub readonly: bool,
    pub xattr: bool,
    /// `--xattrmap`, as given.
    pub xattrmap: Option<String>,
    /// `--writeback` (changes the open flags the host sees).
    pub writeback: bool,
    pub preserve_noatime: bool,
    pub no_device_nodes: bool,
    pub no_setid: bool,
    pub killpriv_v2: bool,
    pub allow_mmap: bool,
    pub announce_submounts: bool,
    /// `--translate-uid` / `--translate-gid` rules, as given.
    pub translate_uid: Vec<String>,
    pub translate_gid: Vec<String>,
    pub posix_acl: Negotiation,
    pub security_label: Negotiation,
    /// `-o posix_lock`, `-o flock`.
    pub posix_lock: bool,
    pub flock: bool,
    pub inode_file_handles: FileHandles,
    /// `--migration-*`: what a migration destination trusts.
    pub migration_mode: MigrationMode,
    pub migration_on_error: MigrationOnError,
    pub migration_verify_handles: bool,
    pub migration_confirm_paths: bool,
    /// `--tag`: the device's identity.
    pub tag: Option<String>,
}

/// How the same files are served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serving {
    pub cache: CacheMode,
    pub allow_direct_io: bool,
    /// Inverse of `--no-readdirplus`.
    pub readdirplus: bool,
    /// Request queues offered.
    pub queues: u16,
    pub poll_mode: PollMode,
    pub poll_us: u64,
    /// `--poll-cpu-max`: percent of a CPU a worker may spend polling.
    pub poll_cpu_max: u8,
    pub queue_cpus: Vec<u32>,
    pub log_level: LogLevel,
}

/// Where the daemon writes and how it is run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Operations {
    /// `--socket-path` (informational).
    pub socket_path: Option<String>,
    pub metrics_file: Option<String>,
    pub syslog: bool,
    /// `--crash-restart-keep` (state format 8; format 7 implies `nameless`).
    pub crash_restart_keep: CrashRestartKeep,
}

/// The command line's defaults (`xvirtiofsd --shared-dir ""` on a host
/// with at most 2 CPUs, where the poll window defaults to 0): fixtures
/// spell out only what they change (`..Default::default()`).
/// `settings::tests` in xvirtiofsd checks this against the parser.
impl Default for Security {
    fn default() -> Self {
        Security {
            shared_dir: String::new(),
            sandbox: SandboxMode::Namespace,
            seccomp: SeccompAction::Kill,
            readonly: false,
            xattr: false,
            xattrmap: None,
            writeback: false,
            preserve_noatime: false,
            no_device_nodes: false,
            no_setid: false,
            killpriv_v2: false,
            allow_mmap: false,
            announce_submounts: false,
            translate_uid: Vec::new(),
            translate_gid: Vec::new(),
            posix_acl: Negotiation::Never,
            security_label: Negotiation::Never,
            posix_lock: false,
            flock: false,
            inode_file_handles: FileHandles::Never,
            migration_mode: MigrationMode::FindPaths,
            migration_on_error: MigrationOnError::Abort,
            migration_verify_handles: false,
            migration_confirm_paths: false,
            tag: None,
        }
    }
}

/// See [`Security`]'s `Default`.
impl Default for Serving {
    fn default() -> Self {
        Serving {
            cache: CacheMode::Auto,
            allow_direct_io: false,
            readdirplus: true,
            queues: 16,
            poll_mode: PollMode::Adaptive,
            poll_us: 0,
            poll_cpu_max: 100,
            queue_cpus: Vec::new(),
            log_level: LogLevel::Info,
        }
    }
}
