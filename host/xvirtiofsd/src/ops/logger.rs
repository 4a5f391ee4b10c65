// SPDX-License-Identifier: Apache-2.0
//! A small logger to standard error (UTC timestamp, level, thread, message),
//! or, after [`use_syslog`], to the system logger (level as priority, thread
//! and message; syslog adds the time and pid).
//!
//! What is logged: `--log-level`, or, as in virtiofsd, `RUST_LOG` when it
//! is set and the daemon does not log to syslog: a level, and
//! `MODULE=LEVEL` directives for a module and the modules under it
//! ([`Filter::parse`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
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

/// What is logged: a level for every message, and levels for the
/// messages of some modules (the record's target and those under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub default: LevelFilter,
    /// (module path, level), longest path first.
    pub modules: Vec<(String, LevelFilter)>,
}

/// The filter in force (replaced when a successor takes its
/// predecessor's log level).
static FILTER: RwLock<Option<Filter>> = RwLock::new(None);

fn with_filter(f: impl FnOnce(&Filter) -> bool) -> bool {
    FILTER
        .read()
        .ok()
        .and_then(|g| g.as_ref().map(f))
        .unwrap_or(false)
}

/// Whether messages go to the system logger ([`use_syslog`]).
pub fn to_syslog() -> bool {
    SYSLOG.load(Ordering::Acquire)
}

impl Filter {
    /// `RUST_LOG`'s form, as virtiofsd (env_logger) reads it:
    /// comma-separated directives, each `LEVEL` (every message) or
    /// `MODULE=LEVEL` or a bare `MODULE` (all of its messages). Directives
    /// it cannot read are reported in the second value and skipped.
    pub fn parse(spec: &str) -> (Filter, Vec<String>) {
        let mut f = Filter {
            default: LevelFilter::Error,
            modules: Vec::new(),
        };
        let mut bad = Vec::new();
        // env_logger's `/REGEX` message filter is not supported.
        let spec = spec.split('/').next().unwrap_or("");
        for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match d.split_once('=') {
                None => match d.parse::<LevelFilter>() {
                    Ok(l) => f.default = l,
                    Err(_) => f.modules.push((d.to_string(), LevelFilter::Trace)),
                },
                Some((m, l)) => match l.trim().parse::<LevelFilter>() {
                    Ok(l) if !m.trim().is_empty() => f.modules.push((m.trim().to_string(), l)),
                    _ => bad.push(d.to_string()),
                },
            }
        }
        f.modules.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        (f, bad)
    }

    /// The level of `--log-level`.
    pub fn level(level: LogLevel) -> Filter {
        let default = match level {
            LogLevel::Error => LevelFilter::Error,
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
            LogLevel::Trace => LevelFilter::Trace,
            LogLevel::Off => LevelFilter::Off,
        };
        Filter {
            default,
            modules: Vec::new(),
        }
    }

    /// The most verbose level anything may be logged at.
    pub fn max(&self) -> LevelFilter {
        self.modules
            .iter()
            .map(|(_, l)| *l)
            .fold(self.default, std::cmp::max)
    }

    /// Whether a message of `target` at `level` is logged.
    pub fn enabled(&self, target: &str, level: log::Level) -> bool {
        let of_module = |m: &str| {
            target
                .strip_prefix(m)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        };
        let limit = self
            .modules
            .iter()
            .find(|(m, _)| of_module(m))
            .map_or(self.default, |(_, l)| *l);
        level <= limit
    }
}

/// Installs the logger: at `level`, or as `RUST_LOG` says when it is set
/// and the messages go to standard error (`syslog` false), as virtiofsd
/// does.
pub fn init(level: LogLevel, syslog: bool) {
    let rust_log = std::env::var("RUST_LOG").ok().filter(|_| !syslog);
    let (filter, bad) = match rust_log {
        Some(spec) => Filter::parse(&spec),
        None => (Filter::level(level), Vec::new()),
    };
    log::set_max_level(filter.max());
    if let Ok(mut g) = FILTER.write() {
        *g = Some(filter);
    }
    let _ = log::set_logger(&LOGGER);
    for d in bad {
        eprintln!("xvirtiofsd: RUST_LOG: ignoring `{d}` (not MODULE=LEVEL)");
    }
}

/// Whether an error of `target` is logged: when not, an error that ends
/// the process is printed to standard error by [`fatal`].
fn errors_logged(target: &str) -> bool {
    with_filter(|f| f.enabled(target, log::Level::Error))
}

/// An error that ends the process: logged, or printed to standard error
/// when the logger would drop it (`--log-level off`), so that a failed
/// start is never silent.
pub fn fatal(target: &str, message: &str) {
    if errors_logged(target) {
        log::error!(target: target, "{message}");
    } else {
        eprintln!("xvirtiofsd: {message}");
    }
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
        with_filter(|f| f.enabled(metadata.target(), metadata.level()))
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
    use super::{Filter, LevelFilter};
    use log::Level;

    #[test]
    fn rust_log_as_virtiofsd_reads_it() {
        let (f, bad) = Filter::parse("debug");
        assert_eq!(f.default, LevelFilter::Debug);
        assert!(bad.is_empty());
        let (f, bad) = Filter::parse("warn,xvirtiofsd::virtqueue=trace,xvfs_fs=off,x=loud");
        assert_eq!(bad, ["x=loud"]);
        assert!(f.enabled("xvirtiofsd::virtqueue::worker", Level::Trace));
        assert!(f.enabled("xvirtiofsd::virtqueue", Level::Debug));
        assert!(
            !f.enabled("xvirtiofsd::virtqueuex", Level::Info),
            "a module boundary"
        );
        assert!(f.enabled("xvirtiofsd::daemon", Level::Warn));
        assert!(!f.enabled("xvirtiofsd::daemon", Level::Info));
        assert!(!f.enabled("xvfs_fs::passthrough", Level::Error));
        assert_eq!(f.max(), LevelFilter::Trace);
        // A bare module name: all of its messages; the rest at error.
        let (f, _) = Filter::parse("xvirtiofsd::ops");
        assert!(f.enabled("xvirtiofsd::ops::control", Level::Trace));
        assert!(!f.enabled("xvirtiofsd::daemon", Level::Warn));
        assert!(f.enabled("xvirtiofsd::daemon", Level::Error));
        // env_logger's message regex is not applied.
        assert_eq!(Filter::parse("info/foo").0.default, LevelFilter::Info);
    }

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
