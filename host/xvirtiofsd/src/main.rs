// SPDX-License-Identifier: Apache-2.0
//! The `xvirtiofsd` command: parses the command line, runs the daemon's
//! lifecycle ([`xvirtiofsd::daemon`]) — fresh, or taking a running daemon's
//! connection over (live upgrade) — or talks to a running daemon (`status`,
//! `upgrade`), and maps the outcome to an exit status:
//!
//! - 0: the front-end disconnected, or the connection was handed over;
//! - 1: a runtime error ended serving;
//! - 2: invalid command line;
//! - 3: set-up failed (shared directory, socket, sandbox, seccomp, restore);
//! - 128 + N: ended by signal N (the PID-namespace supervisor passes the
//!   daemon's status on).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use log::warn;

use xvirtiofsd::cli::{self, Command, Opt, StatusFormat};
use xvirtiofsd::confine::sandbox;
use xvirtiofsd::crash_restart::checkpoint::HolderLink;
use xvirtiofsd::crash_restart::holder;
use xvirtiofsd::daemon::{self, Daemon, ServeError};
use xvirtiofsd::ops::control;
use xvirtiofsd::ops::{logger, status_client};
use xvirtiofsd::upgrade::{handover, record};
use xvirtiofsd::{error_chain, sys};

/// Exit status: a runtime error ended serving.
const EXIT_RUNTIME: u8 = 1;
/// Exit status: invalid command line (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit status: set-up failed (shared directory, socket, sandbox, seccomp).
const EXIT_SETUP: u8 = 3;
/// How long `upgrade` waits for the old daemon to exit after the handover.
const OLD_DAEMON_EXIT_WAIT: Duration = Duration::from_secs(10);

/// An error that ends start-up: logged, or on standard error when the log
/// level would drop it (`--log-level off`).
fn fatal(message: &str) {
    logger::fatal(module_path!(), message);
}

fn main() -> ExitCode {
    let args = match cli::config::expand(std::env::args().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("xvirtiofsd: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut opt = match Opt::try_parse_from(&args) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match opt.command.take() {
        Some(Command::Status(o)) => return status_command(o),
        Some(Command::Upgrade(o)) => return upgrade_command(o),
        Some(Command::Completions(o)) => {
            cli::completions::write(o.shell, &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        None => {}
    }
    logger::init(opt.log_level, opt.syslog);
    if let Err(e) = opt.resolve() {
        eprintln!("xvirtiofsd: {e}");
        eprintln!("Try 'xvirtiofsd --help' for more information.");
        return ExitCode::from(EXIT_USAGE);
    }
    if opt.print_capabilities {
        println!("{}", cli::capabilities_json(opt.dax_window.is_some()));
        return ExitCode::SUCCESS;
    }
    if opt.syslog {
        if let Err(e) = logger::use_syslog() {
            eprintln!(
                "xvirtiofsd: --syslog: no system logger at {}: {e}",
                logger::SYSLOG_SOCKET
            );
            return ExitCode::from(EXIT_SETUP);
        }
    }
    record_first_start(&opt, &args);
    if opt.crash_restart && opt.holder_socket.is_none() {
        return run_holder(&opt);
    }
    if opt.sandbox != cli::SandboxMode::None {
        let namespace = opt.sandbox == cli::SandboxMode::Namespace;
        let maps = opt.id_maps().filter(|_| namespace);
        if maps.is_some() {
            // Inside the user namespace the daemon has no rights over host
            // paths: its sockets are made now.
            if let Err(e) = daemon::bind_before_user_namespace(&mut opt) {
                fatal(&error_chain(&e));
                return ExitCode::from(EXIT_SETUP);
            }
        }
        match sandbox::enter_pid_namespace(maps.as_ref(), namespace) {
            Ok(sandbox::Role::Supervisor(child)) => {
                return ExitCode::from(u8::try_from(sandbox::supervise(child)).unwrap_or(1));
            }
            Ok(sandbox::Role::Daemon) => {
                if let Err(e) = let_go_of_inheritance(&opt) {
                    fatal(&error_chain(&e));
                    return ExitCode::from(EXIT_SETUP);
                }
            }
            Err(e) => {
                fatal(&error_chain(&e));
                return ExitCode::from(EXIT_SETUP);
            }
        }
    }
    crash_fault(opt.holder_socket.is_some(), opt.holder_restart);
    let daemon = if opt.holder_restart {
        // Takes the holder's journal only once it is confined.
        Daemon::restart(&opt)
    } else {
        match HolderLink::from_opt(&opt) {
            Ok(link) => match &opt.handover_from {
                Some(control) => Daemon::take_over(control, &opt, link),
                None => Daemon::fresh(&opt, link),
            },
            Err(e) => Err(e.into()),
        }
    };
    let daemon = match daemon {
        Ok(d) => d,
        Err(e) => {
            fatal(&error_chain(&e));
            return ExitCode::from(EXIT_SETUP);
        }
    };
    match daemon.serve() {
        Ok(_ended) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(&error_chain(&e));
            ExitCode::from(match e {
                ServeError::Setup(_) => EXIT_SETUP,
                ServeError::Connection(_) => EXIT_RUNTIME,
            })
        }
    }
}

/// The serving process (the supervisor's child) closes every descriptor
/// it inherited but those its command line names: whatever its starter
/// left open (libvirt's pid file, a directory, a socket) stays with the
/// supervisor, outside the sandbox, and never with the process the guest
/// talks to. The system logger is connected anew, tagged with this
/// process's host pid.
fn let_go_of_inheritance(opt: &Opt) -> Result<(), daemon::SetupError> {
    if opt.syslog {
        sys::close_syslog();
    }
    let keep: Vec<i32> = [
        opt.fd,
        opt.control_fd,
        opt.holder_socket,
        opt.holder_journal,
        opt.holder_keeper,
    ]
    .into_iter()
    .flatten()
    .collect();
    sys::close_inherited(&keep)
        .map_err(|e| daemon::SetupError::Io("closing inherited descriptors", e))?;
    if opt.syslog {
        let _ = logger::use_syslog();
    }
    Ok(())
}

/// A fresh start (the process its operator started: not a successor, not
/// a crash-restart serving process) records its command line beside its
/// control socket before anything is served or sandboxed, for live
/// upgrades to take the successor's options from
/// ([`record::record_fresh_start`]). A failure costs only that.
fn record_first_start(opt: &Opt, args: &[String]) {
    if let Err(e) = record::record_fresh_start(opt, args) {
        warn!(
            "{}; a live upgrade checks the new daemon's options against the running \
             daemon's state alone",
            error_chain(&e)
        );
    }
}

/// `--crash-restart`: this process holds the connection while a serving
/// process (this binary again) does the work.
fn run_holder(opt: &Opt) -> ExitCode {
    // The serving process inherits the raised limit; the journal has room
    // for as many nodes and handles as it may hold.
    let limit = sys::raise_nofile_limit(opt.rlimit_nofile).unwrap_or_else(|_| sys::nofile_limit());
    let slots = opt
        .max_open
        .unwrap_or_else(|| usize::try_from(limit).unwrap_or(usize::MAX));
    match holder::run(opt, slots) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            fatal(&error_chain(&e));
            ExitCode::from(EXIT_SETUP)
        }
    }
}

/// Test hook (`fault-injection` builds only): XVFS_CRASH_FAULT=die-at-start
/// makes a holder's serving process die at once, `die-on-restart` only
/// when it replaces a crashed one (the crash-loop tests).
fn crash_fault(serving: bool, restart: bool) {
    #[cfg(feature = "fault-injection")]
    if serving {
        let die = match std::env::var("XVFS_CRASH_FAULT").as_deref() {
            Ok("die-at-start") => true,
            Ok("die-on-restart") => restart,
            _ => false,
        };
        if die {
            // SAFETY: abort takes no arguments; this is the fault being tested.
            unsafe { libc::abort() };
        }
    }
    let _ = (serving, restart);
}

fn control_path_of(control: Option<PathBuf>, pid: Option<u32>) -> PathBuf {
    control.unwrap_or_else(|| control::default_path(pid.unwrap_or(0)))
}

/// `xvirtiofsd status`: one daemon's status, or every one found.
fn status_command(o: cli::StatusOpt) -> ExitCode {
    if o.control.is_none() && o.pid.is_none() {
        return list_daemons(o.format);
    }
    let path = control_path_of(o.control, o.pid);
    match status_client::query(&path, o.pid, Duration::from_secs(5)) {
        Ok(v) => {
            match o.format {
                Some(StatusFormat::Prometheus) => {
                    print!(
                        "{}",
                        status_client::prometheus(&[(path.display().to_string(), v)])
                    )
                }
                _ => println!("{v}"),
            }
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("xvirtiofsd status: {why}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// `xvirtiofsd status` without a daemon named: every control socket in
/// /run/xvirtiofsd that answers (exit 0 when at least one did).
fn list_daemons(format: Option<StatusFormat>) -> ExitCode {
    let dir = std::path::Path::new(control::DEFAULT_DIR);
    let controls = match status_client::find_controls(dir) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("xvirtiofsd status: {}: {e}", dir.display());
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let found: Vec<_> = controls
        .into_iter()
        .map(|c| {
            // A daemon still waiting for QEMU answers nothing: short.
            let s = status_client::query(&c, None, Duration::from_secs(1));
            (c, s)
        })
        .collect();
    let answering: Vec<(String, serde_json::Value)> = found
        .iter()
        .filter_map(|(c, s)| Some((c.display().to_string(), s.as_ref().ok()?.clone())))
        .collect();
    match format {
        Some(StatusFormat::Prometheus) => print!("{}", status_client::prometheus(&answering)),
        Some(StatusFormat::Json) => {
            let list: Vec<_> = answering.iter().map(|(_, v)| v.clone()).collect();
            println!("{}", serde_json::Value::Array(list));
        }
        None if found.is_empty() => println!(
            "no xvirtiofsd control socket in {} (a daemon started with --control PATH \
             is asked with `xvirtiofsd status --control PATH`)",
            dir.display()
        ),
        None => {
            println!("{}", status_client::TABLE_HEADING);
            for (c, s) in &found {
                println!("{}", status_client::table_line(c, s));
            }
        }
    }
    if answering.is_empty() && !found.is_empty() {
        return ExitCode::from(EXIT_RUNTIME);
    }
    ExitCode::SUCCESS
}

/// The new daemon's options against the record of the first start's
/// ([`record::check_successor`]): false (after saying why) if they differ
/// or the record cannot be read. Without a record the successor checks
/// its options against the running daemon's state, which has no
/// capabilities (--modcaps).
fn successor_options_match(control: &std::path::Path, daemon_args: &[String]) -> bool {
    match record::check_successor(control, daemon_args) {
        Ok(Some(_)) => true,
        Ok(None) => {
            eprintln!(
                "xvirtiofsd upgrade: note: no record of the first start's options ({}): the \
                 new daemon checks its options against the running daemon's state only",
                record::path_for(control).display()
            );
            true
        }
        Err(e) => {
            eprintln!(
                "xvirtiofsd upgrade: {}; nothing was started, the running daemon keeps serving",
                error_chain(&e)
            );
            false
        }
    }
}

fn upgrade_command(o: cli::UpgradeOpt) -> ExitCode {
    let path = control_path_of(o.control, o.pid);
    let binary = match o.binary {
        Some(b) => b,
        None => match std::env::current_exe() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("xvirtiofsd upgrade: cannot find this program: {e}; give --binary");
                return ExitCode::from(EXIT_RUNTIME);
            }
        },
    };
    if !successor_options_match(&path, &o.daemon_args) {
        return ExitCode::from(EXIT_RUNTIME);
    }
    let before = control::query_status(&path).ok();
    let summary = before
        .as_deref()
        .and_then(|s| serde_json::from_str::<control::StatusSummary>(s.trim()).ok());
    if summary.as_ref().is_some_and(|s| s.user_namespace) {
        eprintln!(
            "xvirtiofsd upgrade: the daemon runs in a user namespace (--uid-map/--gid-map, or \
             not root): live upgrade is not supported there; it keeps serving"
        );
        return ExitCode::from(EXIT_RUNTIME);
    }
    match handover::run_client(
        &path,
        &binary,
        &o.daemon_args,
        Duration::from_secs(o.timeout),
    ) {
        Ok(msg) => {
            // The old daemon exits right after the handover; "upgraded" also
            // means it is gone, so that whoever called us (libvirt's pid
            // file, a service manager) never sees two daemons. The new one
            // serves already: this wait costs the guest nothing.
            if let Some(old) = before.as_deref().and_then(control::status_pid) {
                if !handover::wait_exited(old, OLD_DAEMON_EXIT_WAIT) {
                    eprintln!(
                        "xvirtiofsd upgrade: warning: the old daemon (pid {old}) is still \
                         running {} s after the handover",
                        OLD_DAEMON_EXIT_WAIT.as_secs()
                    );
                }
            }
            println!("upgraded: {msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xvirtiofsd upgrade: {}", error_chain(&e));
            eprintln!(
                "xvirtiofsd upgrade: the new daemon's messages: until it reached the running \
                 daemon, above (it writes to this command's standard error); after that, in \
                 the running daemon's log ({})",
                log_destination(summary.as_ref().map(|s| s.serving_pid.max(s.pid)))
            );
            if before.is_some() && control::query_status(&path).is_ok() {
                eprintln!("xvirtiofsd upgrade: the running daemon keeps serving");
            }
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Where the daemon `pid` writes its messages: its standard error, named.
fn log_destination(pid: Option<u32>) -> String {
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return "its standard error, or syslog with --syslog".into();
    };
    match std::fs::read_link(format!("/proc/{pid}/fd/2")) {
        Ok(p) if p.is_absolute() && p != std::path::Path::new("/dev/null") => {
            format!("{}, or syslog with --syslog", p.display())
        }
        Ok(p) if p.to_string_lossy().starts_with("socket:") => format!(
            "a socket: with systemd, `journalctl _PID={pid}` or `journalctl -u UNIT`; or \
             syslog with --syslog"
        ),
        Ok(p) => format!("{}, standard error of process {pid}", p.display()),
        Err(e) => format!("standard error of process {pid}, unreadable here: {e}"),
    }
}
