// SPDX-License-Identifier: Apache-2.0
//! State format 7 (release 0.2.0): the settings as one flat structure and
//! the whole state as one postcard structure. This build reads it (an
//! upgrade from 0.2.0) and writes it for a successor that reads nothing
//! newer (a rollback to 0.2.0), when the state holds nothing format 7
//! cannot carry. The layout is frozen: `tests/golden.rs` pins its bytes.

use serde::{Deserialize, Serialize};
use xvfs_fs::state::FsState;
use xvfs_fs::SessionState;

use super::{DaemonState, DeviceState, StateError};
use crate::config::{
    CacheMode, CrashRestartKeep, FileHandles, LogLevel, MigrationMode, MigrationOnError,
    Negotiation, PollMode, SandboxMode, SeccompAction,
};
use crate::settings::{Operations, Security, Serving, Settings};

/// Format 7's settings, field by field in its order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigState {
    pub shared_dir: String,
    pub cache: CacheMode,
    pub xattr: bool,
    pub readonly: bool,
    pub writeback: bool,
    pub allow_direct_io: bool,
    pub readdirplus: bool,
    pub sandbox: SandboxMode,
    pub seccomp: SeccompAction,
    pub queues: u16,
    pub poll_mode: PollMode,
    pub poll_us: u64,
    pub poll_cpu_max: u8,
    pub syslog: bool,
    pub preserve_noatime: bool,
    pub queue_cpus: Vec<u32>,
    pub metrics_file: Option<String>,
    pub log_level: LogLevel,
    pub socket_path: Option<String>,
    pub migration_mode: MigrationMode,
    pub migration_on_error: MigrationOnError,
    pub migration_verify_handles: bool,
    pub migration_confirm_paths: bool,
    pub xattrmap: Option<String>,
    pub no_device_nodes: bool,
    pub no_setid: bool,
    pub killpriv_v2: bool,
    pub allow_mmap: bool,
    pub announce_submounts: bool,
    pub translate_uid: Vec<String>,
    pub translate_gid: Vec<String>,
    pub posix_acl: Negotiation,
    pub security_label: Negotiation,
    pub posix_lock: bool,
    pub flock: bool,
    pub inode_file_handles: FileHandles,
    pub tag: Option<String>,
}

/// Format 7's state, field by field in its order (`Fs` is [`FsState`] when
/// reading, a reference to it when writing).
#[derive(Debug, Serialize, Deserialize)]
struct Layout<Fs> {
    writer_version: String,
    writer_pid: u32,
    started_unix_ms: u64,
    upgrades: u32,
    config: ConfigState,
    vhost_socket_fd: u32,
    control_socket_fd: Option<u32>,
    control_path: Option<String>,
    log_fd: Option<u32>,
    pid_file_fds: Vec<u32>,
    device: DeviceState,
    fs: Fs,
    session: Option<SessionState>,
    fs_fd_base: u32,
}

impl From<ConfigState> for Settings {
    fn from(c: ConfigState) -> Self {
        Settings {
            security: Security {
                shared_dir: c.shared_dir,
                sandbox: c.sandbox,
                seccomp: c.seccomp,
                readonly: c.readonly,
                xattr: c.xattr,
                xattrmap: c.xattrmap,
                writeback: c.writeback,
                preserve_noatime: c.preserve_noatime,
                no_device_nodes: c.no_device_nodes,
                no_setid: c.no_setid,
                killpriv_v2: c.killpriv_v2,
                allow_mmap: c.allow_mmap,
                announce_submounts: c.announce_submounts,
                translate_uid: c.translate_uid,
                translate_gid: c.translate_gid,
                posix_acl: c.posix_acl,
                security_label: c.security_label,
                posix_lock: c.posix_lock,
                flock: c.flock,
                inode_file_handles: c.inode_file_handles,
                migration_mode: c.migration_mode,
                migration_on_error: c.migration_on_error,
                migration_verify_handles: c.migration_verify_handles,
                migration_confirm_paths: c.migration_confirm_paths,
                tag: c.tag,
            },
            serving: Serving {
                cache: c.cache,
                allow_direct_io: c.allow_direct_io,
                readdirplus: c.readdirplus,
                queues: c.queues,
                poll_mode: c.poll_mode,
                poll_us: c.poll_us,
                poll_cpu_max: c.poll_cpu_max,
                queue_cpus: c.queue_cpus,
                log_level: c.log_level,
            },
            // Release 0.2.0 kept the files with no name left, nothing else.
            operations: Operations {
                socket_path: c.socket_path,
                metrics_file: c.metrics_file,
                syslog: c.syslog,
                crash_restart_keep: CrashRestartKeep::Nameless,
            },
        }
    }
}

/// `s` as format 7's settings, or what format 7 cannot carry.
pub fn config(s: &Settings) -> Result<ConfigState, String> {
    let (sec, srv, ops) = (&s.security, &s.serving, &s.operations);
    if ops.crash_restart_keep != CrashRestartKeep::Nameless {
        return Err(format!(
            "--crash-restart-keep {:?} (release 0.2.0 keeps only files with no name left)",
            ops.crash_restart_keep
        )
        .to_lowercase());
    }
    Ok(ConfigState {
        shared_dir: sec.shared_dir.clone(),
        cache: srv.cache,
        xattr: sec.xattr,
        readonly: sec.readonly,
        writeback: sec.writeback,
        allow_direct_io: srv.allow_direct_io,
        readdirplus: srv.readdirplus,
        sandbox: sec.sandbox,
        seccomp: sec.seccomp,
        queues: srv.queues,
        poll_mode: srv.poll_mode,
        poll_us: srv.poll_us,
        poll_cpu_max: srv.poll_cpu_max,
        syslog: ops.syslog,
        preserve_noatime: sec.preserve_noatime,
        queue_cpus: srv.queue_cpus.clone(),
        metrics_file: ops.metrics_file.clone(),
        log_level: srv.log_level,
        socket_path: ops.socket_path.clone(),
        migration_mode: sec.migration_mode,
        migration_on_error: sec.migration_on_error,
        migration_verify_handles: sec.migration_verify_handles,
        migration_confirm_paths: sec.migration_confirm_paths,
        xattrmap: sec.xattrmap.clone(),
        no_device_nodes: sec.no_device_nodes,
        no_setid: sec.no_setid,
        killpriv_v2: sec.killpriv_v2,
        allow_mmap: sec.allow_mmap,
        announce_submounts: sec.announce_submounts,
        translate_uid: sec.translate_uid.clone(),
        translate_gid: sec.translate_gid.clone(),
        posix_acl: sec.posix_acl,
        security_label: sec.security_label,
        posix_lock: sec.posix_lock,
        flock: sec.flock,
        inode_file_handles: sec.inode_file_handles,
        tag: sec.tag.clone(),
    })
}

/// Format 7's payload of `st`.
pub(super) fn encode(st: &DaemonState) -> Result<Vec<u8>, StateError> {
    let config =
        config(&st.settings).map_err(|why| StateError::Unrepresentable { version: 7, why })?;
    if st.dax.is_some() {
        return Err(StateError::Unrepresentable {
            version: 7,
            why: "a DAX window (--dax-window) came after release 0.2.0".into(),
        });
    }
    let layout = Layout {
        writer_version: st.writer_version.clone(),
        writer_pid: st.writer_pid,
        started_unix_ms: st.started_unix_ms,
        upgrades: st.upgrades,
        config,
        vhost_socket_fd: st.vhost_socket_fd,
        control_socket_fd: st.control_socket_fd,
        control_path: st.control_path.clone(),
        log_fd: st.log_fd,
        pid_file_fds: st.pid_file_fds.clone(),
        device: st.device.clone(),
        fs: &st.fs,
        session: st.session,
        fs_fd_base: st.fs_fd_base,
    };
    Ok(postcard::to_stdvec(&layout)?)
}

/// A format-7 payload as this build's state.
pub(super) fn decode(payload: &[u8]) -> Result<DaemonState, StateError> {
    let budget = crate::bounded::Budget::for_input(payload.len());
    let (l, rest): (Layout<FsState>, _) = crate::bounded::take_from_bytes(payload, &budget)?;
    if !rest.is_empty() {
        return Err(StateError::Trailing(rest.len()));
    }
    Ok(DaemonState {
        writer_version: l.writer_version,
        writer_pid: l.writer_pid,
        started_unix_ms: l.started_unix_ms,
        upgrades: l.upgrades,
        settings: l.config.into(),
        vhost_socket_fd: l.vhost_socket_fd,
        control_socket_fd: l.control_socket_fd,
        control_path: l.control_path,
        log_fd: l.log_fd,
        pid_file_fds: l.pid_file_fds,
        device: l.device,
        fs: l.fs,
        session: l.session,
        fs_fd_base: l.fs_fd_base,
        dax: None,
    })
}
