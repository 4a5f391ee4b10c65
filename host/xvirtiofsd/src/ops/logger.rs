// SPDX-License-Identifier: Apache-2.0
//! A small logger to standard error (UTC timestamp, level, thread, message),
//! or, after [`use_syslog`], to the system logger (level as priority, thread
//! and message; syslog adds the time and pid).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

use virtio_fs_ext::config::LogLevel;

struct StderrLogger;

static LOGGER: StderrLogger = StderrLogger;

/// Set once `--syslog` has connected to the system logger.
static SYSLOG: AtomicBool = AtomicBool::new(false);

/// Lines kept back by [`hold`] until [`release`].
static HELD: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Keeps later lines for standard error back until [`release`]: a live
/// upgrade's successor logs its set-up before it receives the log
/// descriptor its predecessor writes to.
pub fn hold() {
    if let Ok(mut h) = HELD.lock() {
        h.get_or_insert_with(Vec::new);
    }
}

/// Writes the lines kept back by [`hold`] to standard error (whatever it is
/// now) and stops keeping them back.
pub fn release() {
    let lines = HELD.lock().ok().and_then(|mut h| h.take());
    let mut err = std::io::stderr().lock();
    for line in lines.unwrap_or_default() {
        let _ = err.write_all(line.as_bytes());
    }
}

/// Where the system logger listens.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Sends every later message to syslog instead of standard error
/// (`--syslog`). Call before the sandbox: it connects to `/dev/log` now.
/// Fails, leaving standard error in use, when no system logger listens
/// there (messages would otherwise be lost without a word).
/// Messages are tagged `xvirtiofsd[PID]` with the host pid of the process
/// that serves (inside its PID namespace the C library's would be 1): call
/// again in the daemon once it is known.
pub fn use_syslog() -> std::io::Result<()> {
    std::os::unix::net::UnixDatagram::unbound()?.connect(SYSLOG_SOCKET)?;
    let ident = format!("xvirtiofsd[{}]", crate::confine::sandbox::serving_pid());
    // openlog keeps the pointer: the tag lives as long as the process.
    let ident = std::ffi::CString::new(ident).map_err(std::io::Error::other)?;
    crate::sys::open_syslog(Box::leak(ident.into_boxed_c_str()));
    SYSLOG.store(true, Ordering::Release);
    Ok(())
}

fn syslog_priority(level: log::Level) -> libc::c_int {
    match level {
        log::Level::Error => libc::LOG_ERR,
        log::Level::Warn => libc::LOG_WARNING,
        log::Level::Info => libc::LOG_INFO,
        log::Level::Debug | log::Level::Trace => libc::LOG_DEBUG,
    }
}

/// Installs the logger at `level`.
pub fn init(level: LogLevel) {
    let filter = match level {
        LogLevel::Error => LevelFilter::Error,
        LogLevel::Warn => LevelFilter::Warn,
        LogLevel::Info => LevelFilter::Info,
        LogLevel::Debug => LevelFilter::Debug,
        LogLevel::Trace => LevelFilter::Trace,
        LogLevel::Off => LevelFilter::Off,
    };
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(filter);
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a time since the epoch.
fn timestamp(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let thread = std::thread::current();
        let thread_name = thread.name().unwrap_or("xvirtiofsd");
        if SYSLOG.load(Ordering::Acquire) {
            let msg = format!("[{thread_name}] {}", record.args());
            crate::sys::syslog(syslog_priority(record.level()), &msg);
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let line = format!(
            "[{} {:<5} {}] {}\n",
            timestamp(now.as_secs(), now.subsec_millis()),
            record.level(),
            thread_name,
            record.args()
        );
        if let Ok(mut h) = HELD.lock() {
            if let Some(held) = h.as_mut() {
                held.push(line);
                return;
            }
        }
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_civil_utc() {
        assert_eq!(super::timestamp(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::timestamp(1_795_436_645, 7),
            "2026-11-23T12:24:05.007Z"
        );
        assert_eq!(super::timestamp(951_825_600, 0), "2000-02-29T12:00:00.000Z");
    }
}
