// SPDX-License-Identifier: Apache-2.0
//! Joining another process's cgroups: a successor started by `xvirtiofsd
//! upgrade` begins in the caller's cgroups and moves itself into those of the
//! daemon it replaces (libvirt puts its daemons in the domain's cgroups).

use std::path::PathBuf;

use log::{info, warn};

/// Where the hierarchy of a `/proc/PID/cgroup` controller list is mounted.
fn mount_point(controllers: &str, mounts: &str) -> Option<PathBuf> {
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        if controllers.is_empty() {
            if f[2] == "cgroup2" {
                return Some(PathBuf::from(f[1]));
            }
        } else if f[2] == "cgroup" {
            let opts: Vec<&str> = f[3].split(',').collect();
            if controllers.split(',').all(|c| opts.contains(&c)) {
                return Some(PathBuf::from(f[1]));
            }
        }
    }
    None
}

/// Whether process `pid` has a descriptor open on the socket `ident`
/// (`socket:[inode]`, as [`crate::sys::socket_ident`] renders it).
pub fn holds_socket(pid: i32, ident: &str) -> bool {
    if pid <= 0 || ident.is_empty() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == ident))
}

/// Moves this process into every cgroup `pid` is in (best effort, logged).
pub fn join_cgroups_of(pid: i32) {
    let (Ok(list), Ok(mounts)) = (
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")),
        std::fs::read_to_string("/proc/mounts"),
    ) else {
        warn!("cannot read the cgroups of pid {pid}; staying in this process's own");
        return;
    };
    let me = std::process::id().to_string();
    let mut moved = 0;
    for line in list.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let Some(root) = mount_point(controllers, &mounts) else {
            continue;
        };
        let procs = root.join(path.trim_start_matches('/')).join("cgroup.procs");
        match std::fs::write(&procs, &me) {
            Ok(()) => moved += 1,
            Err(e) => warn!("cannot join cgroup {}: {e}", procs.display()),
        }
    }
    if moved > 0 {
        info!("joined the {moved} cgroup(s) of pid {pid}");
    }
}

#[cfg(test)]
mod tests {
    use super::mount_point;

    #[test]
    fn finds_v1_and_v2_hierarchies() {
        let mounts = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            mount_point("cpu,cpuacct", mounts).as_deref(),
            Some(std::path::Path::new("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            mount_point("memory", mounts).as_deref(),
            Some(std::path::Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(
            mount_point("", mounts).as_deref(),
            Some(std::path::Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(mount_point("blkio", mounts).is_none());
    }
}
