// SPDX-License-Identifier: Apache-2.0
//! Creating the daemon's listening sockets without a race: the mode is set
//! by the umask in force at `bind` (never by a later chmod of the path), the
//! group is changed relative to the parent directory's descriptor without
//! following a symlink, and the default directory of control sockets is
//! created private and checked to be this user's.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::sys;

/// Binds a Unix socket at `path` with permission bits `mode` (e.g. 0o600),
/// its group changed to `group` if given.
pub fn bind(path: &Path, mode: u32, group: Option<u32>) -> io::Result<UnixListener> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(parent)
        .map_err(|e| missing_dir(parent, e))?
        .into();
    // Only this thread runs while sockets are created (start-up); the mask
    // is restored right after.
    let old = sys::set_umask(!mode & 0o777);
    let bound = UnixListener::bind(path);
    sys::set_umask(old);
    let listener = bound?;
    if let Some(gid) = group {
        sys::chown_group_at(dir.as_fd(), Path::new(name), gid)?;
    }
    Ok(listener)
}

/// A socket's directory that cannot be opened, said to be the directory.
fn missing_dir(parent: &Path, e: io::Error) -> io::Error {
    let p = parent.display();
    let why = match e.kind() {
        io::ErrorKind::NotFound => {
            format!("its directory {p} does not exist (create it first: mkdir -p {p})")
        }
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => format!("{p} is not a directory"),
        _ => format!("its directory {p}: {e}"),
    };
    io::Error::new(e.kind(), why)
}

/// Creates `dir` mode 0700 if missing; an existing one must be a real
/// directory (not a symlink) owned by this process's effective uid and
/// writable by nobody else.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = std::fs::symlink_metadata(dir)?;
    let me = crate::sys::effective_uid();
    if !md.file_type().is_dir() || md.uid() != me || md.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory owned by uid {me} and writable only by it",
                dir.display()
            ),
        ));
    }
    Ok(())
}
