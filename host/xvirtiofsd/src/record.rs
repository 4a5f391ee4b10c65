//! The record of a daemon's first start: the command line of the process
//! its operator (libvirt, systemd, a person) started, as a JSON array of
//! strings in a file beside the control socket, `<control>.args` (e.g.
//! `/run/xvirtiofsd/1234.sock.args`), mode 0600, written before anything
//! is served.
//!
//! A live upgrade takes the new daemon's options from here, never from
//! `/proc/PID/cmdline` of the serving process, which that process (exposed
//! to the guest) can rewrite (`vmm-config/xvfs-libvirt-upgrade` builds the
//! successor's command line from it). Only a fresh start writes it; a
//! successor or a crash-restart serving process leaves it as the first
//! start wrote it.
//!
//! With `--sandbox namespace` or `chroot` the serving process cannot reach
//! the file; with `--sandbox none` a root daemon could rewrite it like
//! anything else on the host.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::cli::Opt;
use crate::control;

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
    #[error("{0} is not to be trusted: {1}")]
    Untrusted(PathBuf, String),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
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
}
