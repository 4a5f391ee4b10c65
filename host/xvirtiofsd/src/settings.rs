// SPDX-License-Identifier: Apache-2.0
//! The daemon's settings: the command line parsed once into typed
//! [`Settings`] (what a live upgrade or a crash restart hands on), and the
//! configuration of each component derived from them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use log::info;
use virtio_fs_ext::settings::{Operations, Security, Serving, Settings};
use xvfs_fs::passthrough::{XattrMap, XattrMapError};
use xvfs_fs::Config;

use crate::cli::{Negotiation, Opt, PollMode};
use crate::migration::MigrationConfig;
use crate::sys;
use crate::vhost_user::DeviceConfig;
use crate::virtqueue::worker::PollConfig;

/// The settings a daemon runs with, parsed once from its command line
/// (what a live upgrade or a crash restart hands on).
pub(crate) fn from_options(opt: &Opt, shared_dir: &Path) -> Settings {
    Settings {
        security: Security {
            shared_dir: shared_dir.display().to_string(),
            sandbox: opt.sandbox,
            seccomp: opt.seccomp,
            readonly: opt.readonly,
            xattr: opt.xattr,
            xattrmap: opt.xattrmap.clone(),
            writeback: opt.writeback,
            preserve_noatime: opt.preserve_noatime,
            no_device_nodes: opt.no_device_nodes,
            no_setid: opt.no_setid,
            killpriv_v2: opt.killpriv_v2,
            allow_mmap: opt.allow_mmap,
            announce_submounts: opt.announce_submounts,
            translate_uid: opt.translate_uid.clone(),
            translate_gid: opt.translate_gid.clone(),
            posix_acl: opt.posix_acl.unwrap_or(Negotiation::Never),
            security_label: opt.security_label.unwrap_or(Negotiation::Never),
            posix_lock: opt.posix_lock,
            flock: opt.flock,
            inode_file_handles: opt.file_handles(),
            migration_mode: opt.migration_mode,
            migration_on_error: opt.migration_on_error,
            migration_verify_handles: opt.migration_verify_handles,
            migration_confirm_paths: opt.migration_confirm_paths,
            tag: opt.tag.clone(),
        },
        serving: Serving {
            cache: opt.cache,
            allow_direct_io: opt.allow_direct_io,
            readdirplus: !opt.no_readdirplus,
            queues: opt.queues,
            poll_mode: opt.poll,
            poll_us: opt
                .poll_us
                .unwrap_or(if sys::online_cpus() <= 2 { 0 } else { 50 }),
            poll_cpu_max: opt.poll_cpu_max,
            queue_cpus: opt.queue_cpus.iter().map(|&c| c as u32).collect(),
            log_level: opt.log_level,
        },
        operations: Operations {
            socket_path: opt.socket_path.as_ref().map(|p| p.display().to_string()),
            metrics_file: opt.metrics_file.as_ref().map(|p| p.display().to_string()),
            syslog: opt.syslog,
            crash_restart_keep: opt.crash_restart_keep,
        },
    }
}

/// The command line's values that make no valid settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("invalid --xattrmap")]
    XattrMap(#[from] XattrMapError),
    #[error("invalid --translate-uid/--translate-gid")]
    Translate(#[source] xvfs_fs::ids::RuleError),
    #[error(
        "--xattrmap renames security.capability, which the host kernel would then not clear \
         on write or chown; map it to itself (an `ok` rule) or hide it (`bad`)"
    )]
    CapabilityRemapped,
    #[error("--max-open {0}: must be from 1 to {1} (the open-file limit {2} minus headroom)")]
    MaxOpen(usize, usize, u64),
}

/// The cap on inodes plus open handles: `--max-open`, or by default the
/// open-file limit minus headroom for the daemon's own descriptors (guest
/// memory, eventfds, sockets, a successor's transfer): an eighth of the
/// limit, at least 1024, or half of a small limit.
pub(crate) fn max_open(requested: Option<usize>, limit: u64) -> Result<usize, SettingsError> {
    let limit_n = usize::try_from(limit).unwrap_or(usize::MAX);
    let headroom = if limit_n > 4096 {
        (limit_n / 8).max(1024)
    } else {
        limit_n / 2
    };
    let most = limit_n - headroom;
    match requested {
        None => Ok(most),
        Some(n) if (1..=most).contains(&n) => Ok(n),
        Some(n) => Err(SettingsError::MaxOpen(n, most, limit)),
    }
}

pub(crate) fn fs_config(s: &Settings, max_open: usize) -> Result<Config, SettingsError> {
    let (c, srv) = (&s.security, &s.serving);
    let xattrmap = c.xattrmap.as_deref().map(XattrMap::parse).transpose()?;
    if xattrmap.as_ref().is_some_and(XattrMap::remaps_capability) {
        return Err(SettingsError::CapabilityRemapped);
    }
    Ok(Config {
        root_dir: PathBuf::from(&c.shared_dir),
        cache: srv.cache.into(),
        xattr: c.xattr,
        readonly: c.readonly,
        writeback: c.writeback,
        allow_direct_io: srv.allow_direct_io,
        readdirplus: srv.readdirplus,
        preserve_noatime: c.preserve_noatime,
        max_open,
        xattrmap,
        no_device_nodes: c.no_device_nodes,
        no_setid: c.no_setid,
        killpriv_v2: c.killpriv_v2,
        allow_mmap: c.allow_mmap,
        announce_submounts: c.announce_submounts,
        posix_acl: c.posix_acl.into(),
        security_label: c.security_label.into(),
        posix_lock: c.posix_lock,
        flock: c.flock,
        inode_file_handles: c.inode_file_handles.into(),
        ids: xvfs_fs::ids::Translation::parse(&c.translate_uid, &c.translate_gid)
            .map_err(SettingsError::Translate)?,
    })
}

/// The device settings: queues, busy-wait (documented in --help), pinning.
pub(crate) fn device_config(s: &Settings, wake_cost: Duration) -> DeviceConfig {
    let (c, sec) = (&s.serving, &s.security);
    let mode = c.poll_mode;
    if mode == PollMode::Never || c.poll_us == 0 {
        info!(
            "polling: off (mode {mode:?}, window {} µs, {} host CPUs)",
            c.poll_us,
            sys::online_cpus()
        );
    } else {
        info!(
            "polling: {mode:?}, window {} µs, measured wake-up cost {} µs",
            c.poll_us,
            wake_cost.as_micros()
        );
    }
    DeviceConfig {
        max_queues: usize::from(c.queues) + 1,
        poll: PollConfig {
            mode,
            window: Duration::from_micros(c.poll_us),
            wake_cost,
            cpu_max: c.poll_cpu_max,
        },
        queue_cpus: c.queue_cpus.iter().map(|&c| c as usize).collect(),
        migration: MigrationConfig {
            mode: sec.migration_mode,
            on_error: sec.migration_on_error,
            verify_handles: sec.migration_verify_handles,
            confirm_paths: sec.migration_confirm_paths,
            target: Default::default(),
        },
        journal: None,
        tag: sec.tag.clone(),
        dax: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `Settings::default()` is the command line's defaults: fixtures
    /// built from it mean what a daemon started without options runs with.
    #[test]
    fn the_default_settings_are_the_command_lines() {
        let mut opt = Opt::try_parse_from(["xvirtiofsd", "--shared-dir=/s", "--socket-path=/x"])
            .expect("parse");
        opt.resolve().expect("resolve");
        let got = from_options(&opt, Path::new("/s"));
        let want = Settings {
            security: Security {
                shared_dir: "/s".into(),
                ..Default::default()
            },
            serving: Serving {
                poll_us: got.serving.poll_us,
                ..Default::default()
            },
            operations: Operations {
                socket_path: Some("/x".into()),
                ..Default::default()
            },
        };
        assert_eq!(got, want);
    }
}
