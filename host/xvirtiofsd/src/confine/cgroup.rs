// SPDX-License-Identifier: Apache-2.0
//! Joining another process's cgroups: a successor started by `xvirtiofsd
//! upgrade` begins in the caller's cgroups and moves itself into those of the
//! daemon it replaces (libvirt puts its daemons in the domain's cgroups),
//! once it has proven which process that is ([`prove_owner`]).

use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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

/// Which of the sockets `idents` (`socket:[inode]`, as
/// [`crate::sys::socket_ident`] renders them) process `pid` has a
/// descriptor open on: one pass over `/proc/PID/fd`, which ends once all
/// are found.
fn held_sockets(pid: i32, idents: &[&str]) -> Vec<bool> {
    let mut held = vec![false; idents.len()];
    if pid <= 0 {
        return held;
    }
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return held;
    };
    for e in entries.flatten() {
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        for (i, id) in idents.iter().enumerate() {
            if !id.is_empty() && link.as_os_str() == *id {
                held[i] = true;
            }
        }
        if held.iter().all(|&h| h) {
            break;
        }
    }
    held
}

/// How long a successor waits for the running daemon to accept its
/// connection (it serves one control client at a time, each for at most
/// 5 s).
const ACCEPT_WAIT: Duration = Duration::from_secs(6);

/// Proves that process `pid`, which a `status` answer names as the
/// running daemon, is the one on the other end of `witness` (a control
/// connection it has not answered yet, so still holds) and holds the
/// vhost-user connection `connection` (`socket:[inode]`) that `status`
/// names. A forged `status` (a compromised daemon naming another
/// process, to have its successor join that process's cgroups) fails:
/// the kernel, not the answer, says which socket accepted `witness`.
/// The error says why, for the log.
pub fn prove_owner(pid: u32, connection: &str, witness: BorrowedFd<'_>) -> Result<(), String> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("pid {pid} is no process"))?;
    let deadline = Instant::now() + ACCEPT_WAIT;
    let accepted = loop {
        match crate::sys::unix_peer_inode(witness) {
            Ok(0) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(0) => return Err("the running daemon did not accept a control connection".into()),
            Ok(ino) => break format!("socket:[{ino}]"),
            Err(e) => {
                return Err(format!(
                    "cannot tell who answers on the control socket: {e}"
                ))
            }
        }
    };
    match held_sockets(pid, &[&accepted, connection])[..] {
        [true, true] => Ok(()),
        [false, _] => Err(format!(
            "pid {pid} is not the process that answers on the control socket"
        )),
        _ => Err(format!(
            "pid {pid} does not hold the vhost-user connection {connection} its status names"
        )),
    }
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
