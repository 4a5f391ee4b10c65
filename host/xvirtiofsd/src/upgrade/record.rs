// SPDX-License-Identifier: Apache-2.0
//! The record of a daemon's first start: the command line of the process
//! its operator (libvirt, systemd, a person) started, as a JSON array of
//! strings in a file beside the control socket, `<control>.args` (e.g.
//! `/run/xvirtiofsd/1234.sock.args`), mode 0600, written before anything
//! is served.
//!
//! A live upgrade takes the new daemon's options from here, never from
//! `/proc/PID/cmdline` of the serving process, which that process (exposed
//! to the guest) can rewrite: `xvirtiofsd upgrade` refuses a successor
//! command line whose security settings differ from the record's
//! ([`check_successor`]), and `vmm-config/xvfs-libvirt-upgrade` builds the
//! successor's command line from it. Only a fresh start writes it; a
//! successor or a crash-restart serving process leaves it as the first
//! start wrote it.
//!
//! With `--sandbox namespace` or `chroot` the serving process cannot reach
//! the file; with `--sandbox none` a root daemon could rewrite it like
//! anything else on the host.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use clap::Parser;

use crate::cli::Opt;
use crate::ops::control;

/// Appended to the control socket's path.
pub const SUFFIX: &str = ".args";
/// A record larger than this is not one this daemon wrote.
const MAX_LEN: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write the record of the first start's options {0}")]
    Write(PathBuf, #[source] io::Error),
    #[error("cannot read the record of the first start's options {0}")]
    Read(PathBuf, #[source] io::Error),
    #[error("{0} is not a record of options (a JSON array of strings)")]
    Format(PathBuf, #[source] serde_json::Error),
    #[error("another daemon serves the control socket {0}: its record is left as it is")]
    Serving(PathBuf),
    #[error("{0} is not to be trusted: {1}")]
    Untrusted(PathBuf, String),
    #[error("the options recorded in {0} do not parse: {1}")]
    Recorded(PathBuf, String),
    #[error("the new daemon's options do not parse: {0}")]
    Successor(String),
    #[error(
        "the new daemon's options differ from the first start's (recorded in {0}): {1}; \
         give the same security options, or restart the daemon to change them"
    )]
    Differ(PathBuf, String),
}

/// The record beside the control socket `control`.
pub fn path_for(control: &Path) -> PathBuf {
    let mut p = control.as_os_str().to_owned();
    p.push(SUFFIX);
    PathBuf::from(p)
}

/// Where a freshly started daemon with these options records them: beside
/// its control socket (`--control`, or the default named after this
/// process, the pid its starter knows); none with `--no-control`.
pub fn path_of(opt: &Opt) -> Option<PathBuf> {
    if opt.no_control {
        return None;
    }
    let control = opt
        .control
        .clone()
        .unwrap_or_else(|| control::default_path(std::process::id()));
    Some(path_for(&control))
}

/// What a fresh start calls before it sandboxes itself or serves: records
/// `argv` (its whole command line) beside its control socket. Nothing for
/// a successor or a crash-restart serving process (they keep the first
/// start's record), nor with `--no-control`; a control socket another
/// daemon still serves keeps its record (this daemon will not get the
/// socket).
pub fn record_fresh_start(opt: &Opt, argv: &[String]) -> Result<(), RecordError> {
    if opt.handover_from.is_some() || opt.holder_socket.is_some() {
        return Ok(());
    }
    let Some(path) = path_of(opt) else {
        return Ok(());
    };
    let control = opt
        .control
        .clone()
        .unwrap_or_else(|| control::default_path(std::process::id()));
    if std::os::unix::net::UnixStream::connect(&control).is_ok() {
        return Err(RecordError::Serving(control));
    }
    write(&path, argv)
}

/// Records `argv` (the whole command line, program first) at `path`: a new
/// file, mode 0600, written completely and then renamed over whatever was
/// there (a symlink is replaced, never followed). The default directory is
/// created private, as for the control socket.
pub fn write(path: &Path, argv: &[String]) -> Result<(), RecordError> {
    let err = |e| RecordError::Write(path.to_path_buf(), e);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if dir == Some(Path::new(control::DEFAULT_DIR)) {
        crate::socket::private_dir(Path::new(control::DEFAULT_DIR)).map_err(err)?;
    }
    let json = serde_json::to_vec(argv).map_err(|e| err(io::Error::other(e)))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&json))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        // A stale record (an earlier daemon's at this path) must not stand
        // for this one.
        let _ = std::fs::remove_file(path);
        return Err(err(e));
    }
    Ok(())
}

/// The command line recorded at `path`; `None` if there is no record. The
/// file must be a regular file of root or this user, readable and
/// writable by its owner alone.
pub fn read(path: &Path) -> Result<Option<Vec<String>>, RecordError> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RecordError::Read(path.to_path_buf(), e)),
    };
    let md = f
        .metadata()
        .map_err(|e| RecordError::Read(path.to_path_buf(), e))?;
    let me = crate::sys::effective_uid();
    let untrusted = |why: String| RecordError::Untrusted(path.to_path_buf(), why);
    if !md.file_type().is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    if md.uid() != 0 && md.uid() != me {
        return Err(untrusted(format!("owned by uid {}", md.uid())));
    }
    if md.mode() & 0o077 != 0 {
        return Err(untrusted(format!("mode {:o}", md.mode() & 0o7777)));
    }
    let mut text = Vec::new();
    f.take(MAX_LEN)
        .read_to_end(&mut text)
        .map_err(|e| RecordError::Read(path.to_path_buf(), e))?;
    let argv =
        serde_json::from_slice(&text).map_err(|e| RecordError::Format(path.to_path_buf(), e))?;
    Ok(Some(argv))
}

/// `xvirtiofsd upgrade`'s check of the new daemon's options
/// (`daemon_args`, as it will be started: `--handover-from CONTROL
/// DAEMON-ARGS`) against the record beside `control`, with
/// [`crate::upgrade::trust::check_options`]. `Ok(None)`: there is no record (a daemon
/// started by an older version, or with a record it could not write); the
/// successor's own check against the state is then the only one.
pub fn check_successor(
    control: &Path,
    daemon_args: &[String],
) -> Result<Option<PathBuf>, RecordError> {
    let path = path_for(control);
    let Some(first) = read(&path)? else {
        return Ok(None);
    };
    let first = parse(&first).map_err(|e| RecordError::Recorded(path.clone(), e))?;
    let mut argv = vec![
        "xvirtiofsd".to_string(),
        "--handover-from".to_string(),
        control.display().to_string(),
    ];
    argv.extend_from_slice(daemon_args);
    let successor = parse(&argv).map_err(RecordError::Successor)?;
    crate::upgrade::trust::check_options(&first, &successor)
        .map_err(|diffs| RecordError::Differ(path.clone(), diffs))?;
    Ok(Some(path))
}

/// A command line as the daemon reads it, or clap's or the daemon's
/// complaint on one line.
fn parse(argv: &[String]) -> Result<Opt, String> {
    // `--config FILE` as the daemon itself reads it (main expands it first).
    let argv = crate::cli::config::expand(argv.to_vec()).map_err(|e| e.to_string())?;
    let mut o = Opt::try_parse_from(argv).map_err(|e| {
        let s = e.to_string();
        s.lines().next().unwrap_or("").trim().to_string()
    })?;
    o.resolve().map_err(|e| e.to_string())?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xvfs-record-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_are_named_after_the_control_socket() {
        assert_eq!(
            path_for(Path::new("/run/xvirtiofsd/data.control")),
            Path::new("/run/xvirtiofsd/data.control.args")
        );
        let o = Opt::try_parse_from(["x", "--shared-dir=/", "--no-control"]).unwrap();
        assert_eq!(path_of(&o), None);
        let o = Opt::try_parse_from(["x", "--shared-dir=/"]).unwrap();
        let want = format!("/run/xvirtiofsd/{}.sock.args", std::process::id());
        assert_eq!(path_of(&o), Some(PathBuf::from(want)));
    }

    #[test]
    fn only_a_fresh_start_records_and_never_over_a_live_socket() {
        let d = dir("fresh");
        let control = d.join("c.sock");
        let c = control.display().to_string();
        let argv = args(&["xvirtiofsd", "--shared-dir=/", "--fd=3", "--control", &c]);
        let mut o = Opt::try_parse_from(&argv).unwrap();
        o.handover_from = Some(control.clone());
        record_fresh_start(&o, &argv).unwrap();
        o.handover_from = None;
        o.holder_socket = Some(3);
        record_fresh_start(&o, &argv).unwrap();
        assert!(!path_for(&control).exists(), "successors do not record");
        o.holder_socket = None;
        let live = std::os::unix::net::UnixListener::bind(&control).unwrap();
        let e = record_fresh_start(&o, &argv).unwrap_err();
        assert!(matches!(e, RecordError::Serving(_)), "{e}");
        assert!(!path_for(&control).exists(), "not over a live socket");
        drop(live);
        record_fresh_start(&o, &argv).unwrap();
        assert_eq!(read(&path_for(&control)).unwrap(), Some(argv));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_record_is_private_and_read_back() {
        let d = dir("rw");
        let p = d.join("c.sock.args");
        assert!(read(&p).unwrap().is_none(), "no record");
        // A symlink planted at the path is replaced, not followed.
        let target = d.join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let argv = args(&["/usr/libexec/xvirtiofsd", "--shared-dir=/srv", "--fd=3"]);
        write(&p, &argv).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let md = std::fs::symlink_metadata(&p).unwrap();
        assert!(md.file_type().is_file());
        assert_eq!(md.mode() & 0o777, 0o600);
        assert_eq!(read(&p).unwrap(), Some(argv));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(read(&p), Err(RecordError::Untrusted(..))));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, "{\"not\": \"a list\"}").unwrap();
        assert!(matches!(read(&p), Err(RecordError::Format(..))));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_successor_must_match_the_record() {
        let d = dir("check");
        let control = d.join("c.sock");
        let first = ["xvirtiofsd", "--fd=3", "--shared-dir=/tmp", "--cache=auto"];
        assert!(
            check_successor(&control, &[]).unwrap().is_none(),
            "no record"
        );
        write(&path_for(&control), &args(&first)).unwrap();
        let same = args(&["--shared-dir=/tmp", "--cache=never", "--queues=2"]);
        assert_eq!(
            check_successor(&control, &same).unwrap(),
            Some(path_for(&control))
        );
        // What an attacker wrote into the serving process's cmdline.
        let forged = args(&[
            "--shared-dir=/",
            "--sandbox=none",
            "--seccomp=none",
            "--modcaps=+sys_admin",
        ]);
        let e = check_successor(&control, &forged).unwrap_err().to_string();
        for what in ["--shared-dir", "--sandbox", "--seccomp", "--modcaps"] {
            assert!(e.contains(what), "{what}: {e}");
        }
        assert!(!e.contains('\n'), "one line: {e}");
        // A configuration file is read as the daemon reads it.
        let conf = d.join("c.conf");
        std::fs::write(&conf, "shared-dir=/tmp\ncache=never\n").unwrap();
        let with_config = args(&[&format!("--config={}", conf.display())]);
        assert!(check_successor(&control, &with_config).is_ok());
        std::fs::write(&conf, "shared-dir=/\n").unwrap();
        let e = check_successor(&control, &with_config)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--shared-dir"), "{e}");
        let e = check_successor(&control, &args(&["--bogus"])).unwrap_err();
        assert!(matches!(e, RecordError::Successor(_)), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
