// SPDX-License-Identifier: Apache-2.0
//! `--uid-map` / `--gid-map`: the daemon runs in a user namespace whose IDs
//! map to a range of host IDs (libvirt's `<idmap>`), so that what the guest
//! creates as uid 0 is owned on the host by the mapped uid, and host files
//! outside the range are nobody's to the daemon. The mapping is done by the
//! kernel, not by the daemon: with `--sandbox namespace` only.
//!
//! Also used without maps when the daemon is not root: a user namespace
//! mapping its own IDs is what lets it build the namespace sandbox.

use std::fmt;
use std::io;
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

/// Set once this process is in a user namespace of its own making.
static IN_USER_NAMESPACE: AtomicBool = AtomicBool::new(false);

/// Whether this process entered a user namespace ([`set_in_user_namespace`]).
pub fn in_user_namespace() -> bool {
    IN_USER_NAMESPACE.load(Ordering::Relaxed)
}

/// Records that this process is in its user namespace.
pub fn set_in_user_namespace() {
    IN_USER_NAMESPACE.store(true, Ordering::Relaxed);
}

/// One range: `inside` .. `inside + count` in the namespace are
/// `outside` .. `outside + count` on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// First ID in the namespace.
    pub inside: u32,
    /// First host ID.
    pub outside: u32,
    /// How many.
    pub count: u32,
}

/// Why a map does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdMapError {
    #[error("`{0}`: expected :INSIDE:OUTSIDE:COUNT: (any non-alphanumeric separator, also first and last)")]
    Form(String),
    #[error("`{0}`: a count of 0 maps nothing")]
    Empty(String),
    #[error("`{0}`: the range runs past the largest ID")]
    Overflow(String),
    #[error("`{0}` and `{1}` overlap")]
    Overlap(String, String),
    #[error("at most 340 ranges per map (the kernel's limit)")]
    TooMany,
}

impl FromStr for IdRange {
    type Err = IdMapError;

    /// virtiofsd's form: the last character is the separator, the first is
    /// the same, three numbers between (`:0:100000:65536:`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let form = || IdMapError::Form(s.to_string());
        let sep = s.chars().last().ok_or_else(form)?;
        if sep.is_alphanumeric() || s.len() < 2 {
            return Err(form());
        }
        let inner = s[..s.len() - sep.len_utf8()]
            .strip_prefix(sep)
            .ok_or_else(form)?;
        let v: Vec<u32> = inner
            .split(sep)
            .map(|f| f.parse::<u32>().map_err(|_| form()))
            .collect::<Result<_, _>>()?;
        let [inside, outside, count] = v[..] else {
            return Err(form());
        };
        if count == 0 {
            return Err(IdMapError::Empty(s.to_string()));
        }
        let fits = |base: u32| base.checked_add(count - 1).is_some_and(|e| e < u32::MAX);
        if !fits(inside) || !fits(outside) {
            return Err(IdMapError::Overflow(s.to_string()));
        }
        Ok(IdRange {
            inside,
            outside,
            count,
        })
    }
}

impl fmt::Display for IdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ":{}:{}:{}:", self.inside, self.outside, self.count)
    }
}

/// Parses every `--uid-map` (or `--gid-map`); ranges may not overlap on
/// either side.
pub fn parse(maps: &[String]) -> Result<Vec<IdRange>, IdMapError> {
    if maps.len() > 340 {
        return Err(IdMapError::TooMany);
    }
    let ranges: Vec<IdRange> = maps.iter().map(|m| m.parse()).collect::<Result<_, _>>()?;
    let overlap = |a: u32, b: u32, n: u32, m: u32| a < b + m && b < a + n;
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            if overlap(a.inside, b.inside, a.count, b.count)
                || overlap(a.outside, b.outside, a.count, b.count)
            {
                return Err(IdMapError::Overlap(a.to_string(), b.to_string()));
            }
        }
    }
    Ok(ranges)
}

/// The user namespace a daemon runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdMaps {
    pub uid: Vec<IdRange>,
    pub gid: Vec<IdRange>,
}

impl IdMaps {
    /// The namespace for these options: the maps given, or, for a daemon
    /// that is not root, its own uid and gid mapped to themselves; `None`
    /// for root without maps (no user namespace).
    pub fn plan(uid: Vec<IdRange>, gid: Vec<IdRange>) -> Option<IdMaps> {
        let (euid, egid) = (sys::effective_uid(), sys::effective_gid());
        if uid.is_empty() && gid.is_empty() && euid == 0 {
            return None;
        }
        let own = |id| {
            vec![IdRange {
                inside: id,
                outside: id,
                count: 1,
            }]
        };
        Some(IdMaps {
            uid: if uid.is_empty() { own(euid) } else { uid },
            gid: if gid.is_empty() { own(egid) } else { gid },
        })
    }

    /// The namespace IDs the daemon takes once the maps are written: 0 if
    /// mapped (the daemon is root in its namespace), else its own IDs as
    /// seen inside.
    pub fn inside_ids(&self, euid: u32, egid: u32) -> (u32, u32) {
        let pick = |ranges: &[IdRange], own: u32| {
            if ranges.iter().any(|r| r.inside == 0) {
                return 0;
            }
            ranges
                .iter()
                .find(|r| own >= r.outside && own - r.outside < r.count)
                .map_or(own, |r| r.inside + (own - r.outside))
        };
        (pick(&self.uid, euid), pick(&self.gid, egid))
    }

    /// Writes the maps of the user namespace of process `pid` (a child of
    /// this process, waiting). Root writes them itself; anyone else needs
    /// newuidmap/newgidmap (package `uidmap`, ranges from /etc/subuid and
    /// /etc/subgid) unless it maps only its own ID.
    pub fn write_for(&self, pid: libc::pid_t) -> io::Result<()> {
        let (euid, egid) = (sys::effective_uid(), sys::effective_gid());
        let only_own =
            |r: &[IdRange], own: u32| r.len() == 1 && r[0].outside == own && r[0].count == 1;
        if euid == 0 {
            std::fs::write(format!("/proc/{pid}/uid_map"), lines(&self.uid))?;
            return std::fs::write(format!("/proc/{pid}/gid_map"), lines(&self.gid));
        }
        if only_own(&self.uid, euid) {
            std::fs::write(format!("/proc/{pid}/uid_map"), lines(&self.uid))?;
        } else {
            helper("newuidmap", pid, &self.uid)?;
        }
        if only_own(&self.gid, egid) {
            // An unprivileged writer must give up setgroups(2) first.
            std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
            std::fs::write(format!("/proc/{pid}/gid_map"), lines(&self.gid))
        } else {
            helper("newgidmap", pid, &self.gid)
        }
    }
}

impl fmt::Display for IdMaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |r: &[IdRange]| {
            r.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        write!(f, "uid {} gid {}", list(&self.uid), list(&self.gid))
    }
}

fn lines(ranges: &[IdRange]) -> String {
    ranges
        .iter()
        .map(|r| format!("{} {} {}\n", r.inside, r.outside, r.count))
        .collect()
}

/// Runs newuidmap or newgidmap for `pid`; its message on failure.
fn helper(name: &str, pid: libc::pid_t, ranges: &[IdRange]) -> io::Result<()> {
    let mut cmd = Command::new(name);
    cmd.arg(pid.to_string());
    for r in ranges {
        cmd.args([
            r.inside.to_string(),
            r.outside.to_string(),
            r.count.to_string(),
        ]);
    }
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{name} (package uidmap): {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtiofsd_forms() {
        let r: IdRange = ":0:100000:65536:".parse().unwrap();
        assert_eq!(
            r,
            IdRange {
                inside: 0,
                outside: 100000,
                count: 65536
            }
        );
        assert_eq!(r.to_string(), ":0:100000:65536:");
        assert_eq!("/1/1000/1/".parse::<IdRange>().unwrap().outside, 1000);
        for bad in [
            "",
            ":",
            "0:1:2",
            ":0:1:2",
            ":0:1:2:3:",
            "a0a1a2a",
            ":0:x:1:",
            ":0:-1:1:",
            "0:1:2:",
        ] {
            assert!(bad.parse::<IdRange>().is_err(), "{bad}");
        }
        assert!(matches!(
            ":0:0:0:".parse::<IdRange>(),
            Err(IdMapError::Empty(_))
        ));
        assert!(matches!(
            ":4294967290:0:10:".parse::<IdRange>(),
            Err(IdMapError::Overflow(_))
        ));
    }

    #[test]
    fn overlapping_ranges_are_refused() {
        let m = |v: &[&str]| parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(m(&[":0:1000:1:", ":1:100000:65536:"]).is_ok());
        assert!(matches!(
            m(&[":0:1000:10:", ":5:200000:10:"]),
            Err(IdMapError::Overlap(..))
        ));
        assert!(matches!(
            m(&[":0:1000:10:", ":100:1005:10:"]),
            Err(IdMapError::Overlap(..))
        ));
    }

    #[test]
    fn the_daemon_is_root_inside_when_0_is_mapped() {
        let maps = IdMaps {
            uid: vec![":0:100000:65536:".parse().unwrap()],
            gid: vec![":5:1000:1:".parse().unwrap()],
        };
        assert_eq!(maps.inside_ids(0, 1000), (0, 5));
        assert_eq!(maps.inside_ids(0, 7), (0, 7));
    }
}
