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
use log::{error, warn};

use xvirtiofsd::cli::{self, Opt};
use xvirtiofsd::confine::sandbox;
use xvirtiofsd::crash_restart::checkpoint::HolderLink;
use xvirtiofsd::crash_restart::holder;
use xvirtiofsd::daemon::{self, Daemon, ServeError};
use xvirtiofsd::ops::control;
use xvirtiofsd::ops::logger;
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("status") => return status_command(&args[1..]),
        Some("upgrade") => return upgrade_command(&args[1..]),
        _ => {}
    }
    let mut opt = match Opt::try_parse() {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    logger::init(opt.log_level);
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
                error!("{}", error_chain(&e));
                return ExitCode::from(EXIT_SETUP);
            }
        }
        match sandbox::enter_pid_namespace(maps.as_ref(), namespace) {
            Ok(sandbox::Role::Supervisor(child)) => {
                return ExitCode::from(u8::try_from(sandbox::supervise(child)).unwrap_or(1));
            }
            Ok(sandbox::Role::Daemon) => {
                if let Err(e) = let_go_of_inheritance(&opt) {
                    error!("{}", error_chain(&e));
                    return ExitCode::from(EXIT_SETUP);
                }
            }
            Err(e) => {
                error!("{}", error_chain(&e));
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
            error!("{}", error_chain(&e));
            return ExitCode::from(EXIT_SETUP);
        }
    };
    match daemon.serve() {
        Ok(_ended) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{}", error_chain(&e));
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
            error!("{}", error_chain(&e));
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

fn status_command(args: &[String]) -> ExitCode {
    let o = match cli::StatusOpt::try_parse_from(args) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let path = control_path_of(o.control, o.pid);
    match control::query_status(&path) {
        Ok(s) if !s.trim().is_empty() => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Ok(_) => {
            eprintln!("xvirtiofsd status: {} answered nothing", path.display());
            ExitCode::from(EXIT_RUNTIME)
        }
        Err(e) => {
            eprintln!("xvirtiofsd status: {}: {e}", path.display());
            ExitCode::from(EXIT_RUNTIME)
        }
    }
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

fn upgrade_command(args: &[String]) -> ExitCode {
    let o = match cli::UpgradeOpt::try_parse_from(args) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
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
    if summary.is_some_and(|s| s.user_namespace) {
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
            if before.is_some() && control::query_status(&path).is_ok() {
                eprintln!("xvirtiofsd upgrade: the running daemon keeps serving");
            }
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}
