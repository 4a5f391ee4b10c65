// SPDX-License-Identifier: Apache-2.0
//! Capabilities: a daemon running as root keeps only what serving files as
//! their owners needs, adjusted with `--modcaps` (virtiofsd's syntax:
//! `+name` adds, `-name` removes, `:`-separated, case-insensitive, with or
//! without the `cap_` prefix), and drops its supplementary groups.

use log::info;

use crate::sys;

/// Capability names, in the kernel's numbering (linux/capability.h).
const NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// What the file system needs: chown, dac_override, fowner, fsetid, setgid,
/// setuid, mknod, setfcap (the same set as virtiofsd).
pub const DEFAULT: &[&str] = &[
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "setgid",
    "setuid",
    "mknod",
    "setfcap",
];

#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    #[error("--modcaps: `{0}` is not +NAME or -NAME")]
    Syntax(String),
    #[error("--modcaps: unknown capability `{0}`")]
    Unknown(String),
    #[error("cannot drop capabilities")]
    Apply(#[source] std::io::Error),
}

fn number(name: &str) -> Option<u32> {
    let n = name.to_ascii_lowercase();
    let n = n.strip_prefix("cap_").unwrap_or(&n);
    NAMES.iter().position(|&c| c == n).map(|i| i as u32)
}

/// The capability mask: [`DEFAULT`] changed by `modcaps`.
pub fn mask(modcaps: Option<&str>) -> Result<u64, CapsError> {
    let mut m = DEFAULT
        .iter()
        .filter_map(|c| number(c))
        .fold(0u64, |m, n| m | 1 << n);
    for item in modcaps.unwrap_or("").split(':') {
        if modcaps.is_none() {
            break;
        }
        let (add, name) = match item.split_at_checked(1) {
            Some(("+", n)) if !n.is_empty() => (true, n),
            Some(("-", n)) if !n.is_empty() => (false, n),
            _ => return Err(CapsError::Syntax(item.to_string())),
        };
        let n = number(name).ok_or_else(|| CapsError::Unknown(name.to_string()))?;
        if add {
            m |= 1 << n;
        } else {
            m &= !(1 << n);
        }
    }
    Ok(m)
}

/// The names in `mask`, for logs.
pub fn names(mask: u64) -> String {
    let v: Vec<&str> = (0..NAMES.len())
        .filter(|&i| mask & (1 << i) != 0)
        .map(|i| NAMES[i])
        .collect();
    v.join(",")
}

/// As root: drops the supplementary groups, every capability outside `mask`
/// from the bounding set, the ambient set and the inheritable set, and keeps
/// `mask` as permitted and effective. Call on the only thread (threads
/// started later inherit it). Unprivileged, there is nothing to drop.
pub fn drop_to(mask: u64) -> Result<(), CapsError> {
    if sys::effective_uid() != 0 {
        info!("capabilities: not root, none held");
        return Ok(());
    }
    apply(mask)?;
    info!(
        "capabilities: {} (supplementary groups dropped)",
        names(mask)
    );
    Ok(())
}

/// [`drop_to`] without a word (for a forked helper process, which must not
/// take the logger's locks); unprivileged, nothing to drop.
pub fn apply(mask: u64) -> Result<(), CapsError> {
    if sys::effective_uid() != 0 {
        return Ok(());
    }
    sys::drop_supplementary_groups().map_err(CapsError::Apply)?;
    for cap in 0..NAMES.len() as u32 {
        if mask & (1 << cap) == 0 {
            sys::drop_bounding_cap(cap).map_err(CapsError::Apply)?;
        }
    }
    sys::clear_ambient_caps().map_err(CapsError::Apply)?;
    sys::set_caps(mask).map_err(CapsError::Apply)?;
    Ok(())
}

/// Narrows the permitted and effective sets to `mask` (after
/// [`drop_to`] kept more for a while). Unprivileged, nothing to do.
pub fn keep_only(mask: u64) -> Result<(), CapsError> {
    if sys::effective_uid() != 0 {
        return Ok(());
    }
    sys::set_caps(mask).map_err(CapsError::Apply)?;
    info!("capabilities: now {}", names(mask));
    Ok(())
}

/// Drops every capability (bounding, ambient, inheritable, permitted,
/// effective), whatever the uid: a process that entered a user namespace
/// of its own holds all of them there.
pub fn drop_all() -> Result<(), CapsError> {
    for cap in 0..64 {
        sys::drop_bounding_cap(cap).map_err(CapsError::Apply)?;
    }
    sys::clear_ambient_caps().map_err(CapsError::Apply)?;
    sys::set_caps(0).map_err(CapsError::Apply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_modcaps() {
        assert_eq!(mask(None).unwrap(), 0x8800_00db);
        assert_eq!(
            mask(Some("+sys_admin:-mknod")).unwrap(),
            (0x8800_00db | 1 << 21) & !(1 << 27)
        );
        assert_eq!(mask(Some("+CAP_DAC_READ_SEARCH")).unwrap(), 0x8800_00df);
        assert_eq!(mask(Some("-chown:-setfcap")).unwrap(), 0x0800_00da);
        assert!(matches!(mask(Some("sys_admin")), Err(CapsError::Syntax(_))));
        assert!(matches!(mask(Some("+")), Err(CapsError::Syntax(_))));
        assert!(matches!(mask(Some("+chown:")), Err(CapsError::Syntax(_))));
        assert!(matches!(mask(Some("+nope")), Err(CapsError::Unknown(_))));
        assert_eq!(names(0x8800_00db), DEFAULT.join(","));
    }
}
