//! Tells a service manager (systemd, `Type=notify`) about the daemon:
//! `READY=1` once the socket listens, and the main pid after a live
//! upgrade, so that the unit follows the new process (sd_notify(3) protocol:
//! one datagram of `KEY=VALUE` lines to the socket named by `$NOTIFY_SOCKET`).
//!
//! Without `$NOTIFY_SOCKET` every call does nothing. A failure is logged once
//! and otherwise ignored: serving the guest matters more than the unit's
//! state.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use log::warn;

/// The variable naming the service manager's socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (newline-separated `KEY=VALUE` assignments) to the socket
/// in `$NOTIFY_SOCKET`; Ok(false) when there is none.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os(NOTIFY_SOCKET) else {
        return Ok(false);
    };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None if path.starts_with('/') => SocketAddr::from_pathname(&path)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{NOTIFY_SOCKET}={path} is neither a path nor an abstract name"),
            ))
        }
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

/// `READY=1`, with the status line shown by `systemctl status`.
pub fn ready(status: &str) {
    report(&format!("READY=1\nSTATUS={status}"));
}

/// The service's main process is now `pid` (after a live upgrade).
pub fn main_pid(pid: u32, status: &str) {
    report(&format!("MAINPID={pid}\nREADY=1\nSTATUS={status}"));
}

fn report(state: &str) {
    if let Err(e) = notify(state) {
        warn!("cannot notify the service manager: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: it sets the process environment.
    #[test]
    fn sends_one_datagram_to_path_and_abstract_sockets() {
        let dir = std::env::temp_dir().join(format!("xvfs-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        std::env::set_var(NOTIFY_SOCKET, &path);
        assert!(notify("READY=1\nSTATUS=x").unwrap());
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");

        let name = format!("xvfs-notify-test-{}", std::process::id());
        let abs =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        std::env::set_var(NOTIFY_SOCKET, format!("@{name}"));
        main_pid(42, "upgraded");
        let n = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"MAINPID=42\nREADY=1\nSTATUS=upgraded");

        std::env::set_var(NOTIFY_SOCKET, "relative");
        assert!(notify("READY=1").is_err());
        std::env::remove_var(NOTIFY_SOCKET);
        assert!(!notify("READY=1").unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
