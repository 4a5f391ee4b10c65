// SPDX-License-Identifier: Apache-2.0
//! Tells a service manager (systemd, `Type=notify`) about the daemon:
//! `READY=1` once it waits for the front-end, and the main pid after a live
//! upgrade, so that the unit follows the new process (sd_notify(3) protocol:
//! one datagram of `KEY=VALUE` lines to the socket named by `$NOTIFY_SOCKET`).
//!
//! The socket is connected when the daemon starts, before it enters its
//! sandbox (where the path no longer exists); messages go through that
//! connection. Without `$NOTIFY_SOCKET` nothing is sent. A failure is logged
//! and otherwise ignored: serving the guest matters more than the unit's
//! state.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use log::warn;

/// The variable naming the service manager's socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    sock: UnixDatagram,
}

impl Notifier {
    /// Connects to the socket in `$NOTIFY_SOCKET`; None when the variable is
    /// not set (or cannot be used, which is logged).
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os(NOTIFY_SOCKET)?;
        match Notifier::connect(&path.to_string_lossy()) {
            Ok(n) => Some(n),
            Err(e) => {
                warn!("{NOTIFY_SOCKET}: {e}; the service manager is not told of this daemon");
                None
            }
        }
    }

    /// Connects to `path` (a path, or `@name` for an abstract socket).
    pub fn connect(path: &str) -> io::Result<Notifier> {
        let addr = match path.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None if path.starts_with('/') => SocketAddr::from_pathname(path)?,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("`{path}` is neither a path nor an abstract name"),
                ))
            }
        };
        let sock = UnixDatagram::unbound()?;
        sock.connect_addr(&addr)?;
        Ok(Notifier { sock })
    }

    /// Sends `state`: newline-separated `KEY=VALUE` assignments.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.sock.send(state.as_bytes()).map(drop)
    }

    /// `READY=1`, with the status line `systemctl status` shows.
    pub fn ready(&self, status: &str) {
        self.report(&format!("READY=1\nSTATUS={status}"));
    }

    /// The service's main process is now `pid` (after a live upgrade).
    pub fn main_pid(&self, pid: u32, status: &str) {
        self.report(&format!("MAINPID={pid}\nREADY=1\nSTATUS={status}"));
    }

    fn report(&self, state: &str) {
        if let Err(e) = self.notify(state) {
            warn!("cannot notify the service manager: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_datagrams_to_path_and_abstract_sockets() {
        let dir = std::env::temp_dir().join(format!("xvfs-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::connect(path.to_str().unwrap()).unwrap();
        n.ready("waiting");
        let mut buf = [0u8; 64];
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=waiting");

        let name = format!("xvfs-notify-test-{}", std::process::id());
        let abs_addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abs = UnixDatagram::bind_addr(&abs_addr).unwrap();
        Notifier::connect(&format!("@{name}"))
            .unwrap()
            .main_pid(42, "upgraded");
        let len = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"MAINPID=42\nREADY=1\nSTATUS=upgraded");

        assert!(Notifier::connect("relative").is_err());
        assert!(Notifier::connect(dir.join("none").to_str().unwrap()).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
