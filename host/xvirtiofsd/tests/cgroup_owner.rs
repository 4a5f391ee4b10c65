// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A live-upgrade successor joins the cgroups of the daemon it replaces
//! only once it has proven which process that is (issue 45): the process
//! the `status` answer names must be the one that accepted the successor's
//! control connection, and must hold the vhost-user connection the answer
//! names. A forged answer naming another process (a compromised daemon
//! steering its successor out of the domain's cgroups, or into anyone's)
//! is not followed.
//!
//! The running daemon is played by this test on a control socket of its
//! own; the successor is the real binary. Needs root (cgroups).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A cgroup hierarchy this test may make cgroups in: its mount point, the
/// hierarchy's line prefix in /proc/PID/cgroup and this process's cgroup
/// there.
struct Hierarchy {
    root: PathBuf,
    id: String,
    own: String,
}

fn mount_of(controllers: &str, mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let ok = match (controllers, f.get(2).copied()) {
            ("", Some("cgroup2")) => true,
            (c, Some("cgroup")) if !c.is_empty() => {
                let opts: Vec<&str> = f[3].split(',').collect();
                c.split(',').all(|x| opts.contains(&x))
            }
            _ => false,
        };
        ok.then(|| PathBuf::from(f[1]))
    })
}

/// The first hierarchy of this process where a cgroup can be made.
fn hierarchy() -> Hierarchy {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let list = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in list.lines() {
        let mut f = line.splitn(3, ':');
        let (id, controllers, path) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        let Some(root) = mount_of(controllers, &mounts) else {
            continue;
        };
        let probe = cgroup_dir(&root, path, "probe");
        if std::fs::create_dir(&probe).is_ok() {
            std::fs::remove_dir(&probe).unwrap();
            return Hierarchy {
                root,
                id: format!("{id}:{controllers}:"),
                own: path.to_string(),
            };
        }
    }
    panic!("no cgroup hierarchy where this test can make a cgroup");
}

fn cgroup_dir(root: &Path, parent: &str, name: &str) -> PathBuf {
    root.join(parent.trim_start_matches('/'))
        .join(format!("xvfs-owner-{}-{name}", std::process::id()))
}

impl Hierarchy {
    /// Makes cgroup `name` beside this process's; its path in the hierarchy.
    fn make(&self, name: &str) -> String {
        let d = cgroup_dir(&self.root, &self.own, name);
        let _ = std::fs::create_dir(&d);
        format!("/{}", d.strip_prefix(&self.root).unwrap().display())
    }

    fn put(&self, pid: u32, cgroup: &str) {
        let procs = self
            .root
            .join(cgroup.trim_start_matches('/'))
            .join("cgroup.procs");
        std::fs::write(procs, pid.to_string()).unwrap();
    }

    /// The cgroup of process `pid` in this hierarchy.
    fn of(&self, pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&self.id).map(str::to_string))
            .unwrap()
    }

    fn remove(&self, cgroup: &str) {
        let _ = std::fs::remove_dir(self.root.join(cgroup.trim_start_matches('/')));
    }
}

fn socket_ident(s: impl AsFd) -> String {
    let f = std::fs::File::from(s.as_fd().try_clone_to_owned().unwrap());
    format!("socket:[{}]", f.metadata().unwrap().ino())
}

fn read_line(s: &mut UnixStream) -> String {
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

/// Plays the running daemon for one successor: answers its `status` with
/// (`pid`, `connection`) once it has put the successor in cgroup `start`,
/// then waits for the successor's next command (it has joined whatever it
/// joins by then) and returns the successor's cgroup at that moment.
fn serve_one(
    listener: &UnixListener,
    h: &Hierarchy,
    start: &str,
    pid: u32,
    connection: &str,
) -> (u32, String) {
    let (mut status, _) = listener.accept().unwrap();
    let successor = peer_pid(&status);
    h.put(successor, start);
    assert_eq!(read_line(&mut status).trim(), "status");
    let answer = format!(
        "{{\"version\":\"test\",\"pid\":{pid},\"serving_pid\":{pid},\"connection\":\"{connection}\",\
         \"user_namespace\":false}}\n"
    );
    status.write_all(answer.as_bytes()).unwrap();
    drop(status);
    let (mut next, _) = listener.accept().unwrap();
    next.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut b = [0u8; 1];
    let _ = next.read(&mut b);
    (successor, h.of(successor))
}

fn peer_pid(s: &UnixStream) -> u32 {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for the sizes given.
    let r = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "SO_PEERCRED");
    cred.pid as u32
}

fn successor(control: &Path, share: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_xvirtiofsd"))
        .arg("--handover-from")
        .arg(control)
        .arg("--shared-dir")
        .arg(share)
        .args(["--sandbox", "none", "--seccomp", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The successor's standard error, once it has given up (the handover is
/// refused: this test serves nothing more).
fn finish(mut child: Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    err
}

/// What the test made, undone even when it fails: the victim process,
/// the cgroups (once empty) and the directory.
struct Cleanup<'h> {
    h: &'h Hierarchy,
    cgroups: Vec<String>,
    victim: Option<Child>,
    dir: PathBuf,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(v) = &mut self.victim {
            let _ = v.kill();
            let _ = v.wait();
        }
        for c in &self.cgroups {
            self.h.remove(c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_successor_joins_the_cgroups_only_of_the_proven_owner() {
    // SAFETY: geteuid has no arguments.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
    let dir = std::env::temp_dir().join(format!("xvfs-owner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    let h = hierarchy();
    let start = h.make("start");
    let victim_cg = h.make("victim");
    let mut cleanup = Cleanup {
        h: &h,
        cgroups: vec![start.clone(), victim_cg.clone()],
        victim: None,
        dir: dir.clone(),
    };

    // Another process in a cgroup of its own, holding a socket.
    let (kept, given) = UnixStream::pair().unwrap();
    let given_ident = socket_ident(&given);
    let victim = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::from(OwnedFd::from(given)))
        .spawn()
        .unwrap();
    let victim_pid = victim.id();
    cleanup.victim = Some(victim);
    h.put(victim_pid, &victim_cg);

    // A forged status: the victim, with the socket it holds as the
    // vhost-user connection.
    let control = dir.join("ctl-forged.sock");
    let listener = UnixListener::bind(&control).unwrap();
    let child = successor(&control, &dir.join("share"));
    let (pid, cg) = serve_one(&listener, &h, &start, victim_pid, &given_ident);
    drop(listener);
    let err = finish(child);
    assert_ne!(cg, victim_cg, "pid {pid} joined the victim's cgroup: {err}");
    assert_eq!(cg, start, "pid {pid} stayed where it was started: {err}");
    assert!(
        err.contains("not joining the running daemon's cgroups")
            && err.contains("not the process that answers on the control socket"),
        "{err}"
    );

    // The genuine case: this process answers and holds the connection
    // its status names.
    let control = dir.join("ctl-genuine.sock");
    let listener = UnixListener::bind(&control).unwrap();
    let child = successor(&control, &dir.join("share"));
    let me = std::process::id();
    let (pid, cg) = serve_one(&listener, &h, &start, me, &socket_ident(&kept));
    drop(listener);
    let err = finish(child);
    assert_eq!(
        cg,
        h.of(me),
        "pid {pid} joined this process's cgroup: {err}"
    );

    drop(kept);
    drop(cleanup);
}
