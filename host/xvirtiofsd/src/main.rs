//! The `xvirtiofsd` command: parses the command line, opens the shared directory
//! and the socket, enters the sandbox, and serves one front-end connection —
//! or takes a running daemon's connection over (live upgrade), or talks to a
//! running daemon (`status`, `upgrade`).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::Parser;
use log::{error, info, warn};

use virtio_fs_ext::state::ConfigState;
use xvfs_fs::{CachePolicy, Config, PassthroughFs, Server};
use xvirtiofsd::cli::{self, CacheMode, LogLevel, Opt, SandboxMode, SeccompAction};
use xvirtiofsd::control::{self, StatusInfo};
use xvirtiofsd::metrics_file::{MetricsHandle, MetricsWriter};
use xvirtiofsd::queue::{measure_wake_cost, PollConfig, PollMode};
use xvirtiofsd::upgrade::{self, Outgoing};
use xvirtiofsd::vhost_user::{Connection, Device, DeviceConfig, ServeEnd, VhostUserError};
use xvirtiofsd::{error_chain, logger, sandbox, sys};

/// Exit status: a runtime error ended serving.
const EXIT_RUNTIME: u8 = 1;
/// Exit status: invalid command line (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit status: set-up failed (shared directory, socket, sandbox, seccomp).
const EXIT_SETUP: u8 = 3;
/// How long `upgrade` waits for the old daemon to exit after the handover.
const OLD_DAEMON_EXIT_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error("shared directory {0}")]
    SharedDir(PathBuf, #[source] std::io::Error),
    #[error("cannot open the shared directory")]
    Fs(#[source] xvfs_fs::passthrough::Error),
    #[error("restoring the FUSE session")]
    Session(#[source] xvfs_fs::SessionError),
    #[error("socket {0}")]
    Socket(PathBuf, #[source] std::io::Error),
    #[error("--fd {0} is not a listening socket")]
    NotListening(i32),
    #[error("--fd {0}")]
    BadFd(i32, #[source] std::io::Error),
    #[error("unknown group `{0}`")]
    UnknownGroup(String),
    #[error("metrics file {0}")]
    Metrics(PathBuf, #[source] std::io::Error),
    #[error("sandbox")]
    Sandbox(#[from] sandbox::SandboxError),
    #[error("live upgrade")]
    Upgrade(#[from] upgrade::UpgradeError),
    #[error("restoring the device")]
    Device(#[from] VhostUserError),
    #[error("{0}")]
    Io(&'static str, #[source] std::io::Error),
}

enum RunError {
    Setup(SetupError),
    Serve(VhostUserError),
}

impl From<SetupError> for RunError {
    fn from(e: SetupError) -> Self {
        RunError::Setup(e)
    }
}

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
        println!("{}", cli::capabilities_json());
        return ExitCode::SUCCESS;
    }
    let result = match &opt.handover_from {
        Some(control) => take_over(control),
        None => run(&opt),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Setup(e)) => {
            error!("{}", error_chain(&e));
            ExitCode::from(EXIT_SETUP)
        }
        Err(RunError::Serve(e)) => {
            error!("{}", error_chain(&e));
            ExitCode::from(EXIT_RUNTIME)
        }
    }
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
    let before = control::query_status(&path).ok();
    match upgrade::run_client(&path, &binary, Duration::from_secs(o.timeout)) {
        Ok(msg) => {
            // The old daemon exits right after the handover; "upgraded" also
            // means it is gone, so that whoever called us (libvirt's pid
            // file, a service manager) never sees two daemons. The new one
            // serves already: this wait costs the guest nothing.
            if let Some(old) = before.as_deref().and_then(control::status_pid) {
                if !upgrade::wait_exited(old, OLD_DAEMON_EXIT_WAIT) {
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

fn config_state(opt: &Opt, shared_dir: &Path) -> ConfigState {
    ConfigState {
        shared_dir: shared_dir.display().to_string(),
        cache: match opt.cache {
            CacheMode::Never => 0,
            CacheMode::Auto => 1,
            CacheMode::Metadata => 2,
            CacheMode::Always => 3,
        },
        xattr: opt.xattr,
        readonly: opt.readonly,
        writeback: opt.writeback,
        allow_direct_io: opt.allow_direct_io,
        readdirplus: !opt.no_readdirplus,
        sandbox: match opt.sandbox {
            SandboxMode::Namespace => 0,
            SandboxMode::Chroot => 1,
            SandboxMode::None => 2,
        },
        seccomp: match opt.seccomp {
            SeccompAction::None => 0,
            SeccompAction::Kill => 1,
            SeccompAction::Log => 2,
            SeccompAction::Trap => 3,
        },
        queues: opt.queues,
        poll_mode: match opt.poll {
            cli::PollArg::Never => 0,
            cli::PollArg::Always => 1,
            cli::PollArg::Adaptive => 2,
        },
        poll_us: opt
            .poll_us
            .unwrap_or(if sys::online_cpus() <= 2 { 0 } else { 50 }),
        queue_cpus: opt.queue_cpus.iter().map(|&c| c as u32).collect(),
        metrics_file: opt.metrics_file.as_ref().map(|p| p.display().to_string()),
        log_level: opt.log_level as u8,
        socket_path: opt.socket_path.as_ref().map(|p| p.display().to_string()),
    }
}

fn fs_config(c: &ConfigState) -> Config {
    Config {
        root_dir: PathBuf::from(&c.shared_dir),
        cache: match c.cache {
            0 => CachePolicy::Never,
            2 => CachePolicy::Metadata,
            3 => CachePolicy::Always,
            _ => CachePolicy::Auto,
        },
        xattr: c.xattr,
        readonly: c.readonly,
        writeback: c.writeback,
        allow_direct_io: c.allow_direct_io,
        readdirplus: c.readdirplus,
    }
}

fn sandbox_mode(c: &ConfigState) -> SandboxMode {
    match c.sandbox {
        0 => SandboxMode::Namespace,
        1 => SandboxMode::Chroot,
        _ => SandboxMode::None,
    }
}

fn seccomp_action(c: &ConfigState) -> SeccompAction {
    match c.seccomp {
        0 => SeccompAction::None,
        2 => SeccompAction::Log,
        3 => SeccompAction::Trap,
        _ => SeccompAction::Kill,
    }
}

/// The device settings: queues, busy-wait (documented in --help), pinning.
fn device_config(c: &ConfigState, wake_cost: Duration) -> DeviceConfig {
    let mode = match c.poll_mode {
        0 => PollMode::Never,
        1 => PollMode::Always,
        _ => PollMode::Adaptive,
    };
    if mode == PollMode::Never || c.poll_us == 0 {
        info!(
            "polling: off (mode {mode:?}, window {} µs, {} host CPUs)",
            c.poll_us,
            sys::online_cpus()
        );
    } else {
        info!(
            "polling: {mode:?}, window {} µs, measured wake-up cost {} µs",
            c.poll_us,
            wake_cost.as_micros()
        );
    }
    DeviceConfig {
        max_queues: usize::from(c.queues) + 1,
        poll: PollConfig {
            mode,
            window: Duration::from_micros(c.poll_us),
            wake_cost,
        },
        queue_cpus: c.queue_cpus.iter().map(|&c| c as usize).collect(),
    }
}

fn open_metrics(c: &ConfigState) -> Result<Option<MetricsWriter>, SetupError> {
    c.metrics_file
        .as_ref()
        .map(|p| MetricsWriter::open(Path::new(p)).map_err(|e| SetupError::Metrics(p.into(), e)))
        .transpose()
}

fn confine(c: &ConfigState) -> Result<(), SetupError> {
    sandbox::enter(sandbox_mode(c), Path::new(&c.shared_dir))?;
    sandbox::seccomp(seccomp_action(c))?;
    Ok(())
}

/// A fresh daemon: open everything, wait for the front-end, serve.
fn run(opt: &Opt) -> Result<(), RunError> {
    let shared_dir = opt.shared_dir.clone().ok_or_else(|| {
        SetupError::SharedDir(PathBuf::new(), std::io::ErrorKind::NotFound.into())
    })?;
    let shared_dir = std::fs::canonicalize(&shared_dir)
        .map_err(|e| SetupError::SharedDir(shared_dir.clone(), e))?;
    if opt.thread_pool_size.is_some() {
        info!("--thread-pool-size accepted: requests are served by one worker per queue");
    }
    match sys::raise_nofile_limit(opt.rlimit_nofile) {
        Ok(n) => info!("open file limit: {n}"),
        Err(e) => warn!("cannot raise the open file limit: {e}"),
    }
    let cfg = config_state(opt, &shared_dir);
    let pid_files = sys::inherited_pid_files(&opt.fd.into_iter().collect::<Vec<_>>());
    if !pid_files.is_empty() {
        info!(
            "holding {} inherited pid file(s); a successor takes them over",
            pid_files.len()
        );
    }
    let dev_cfg = device_config(&cfg, measure_wake_cost(200));

    // Sockets first: the file system sets the process umask to 0 (the guest
    // kernel has already applied the caller's), and sockets must not be
    // created under it.
    let listener = listen(opt)?;
    let (control, control_path) = if opt.no_control {
        (None, None)
    } else {
        let path = opt
            .control
            .clone()
            .unwrap_or_else(|| control::default_path(std::process::id()));
        match control::bind(&path) {
            Ok(l) => (Some(l), Some(path)),
            Err(e) => {
                warn!(
                    "control socket {}: {e}; status and live upgrade are unavailable",
                    path.display()
                );
                (None, None)
            }
        }
    };
    let fs = PassthroughFs::new(fs_config(&cfg)).map_err(SetupError::Fs)?;
    let server = Arc::new(Server::new(fs));
    let metrics = open_metrics(&cfg)?;
    confine(&cfg)?;

    info!(
        "serving {} ({} request queue(s) offered, cache {:?}, sandbox {:?}, control {})",
        shared_dir.display(),
        opt.queues,
        opt.cache,
        opt.sandbox,
        control_path
            .as_ref()
            .map_or("none".to_string(), |p| p.display().to_string())
    );
    info!("Waiting for vhost-user socket connection...");
    let stream = accept(&listener, opt)?;
    drop(listener);
    info!("Client connected, servicing requests");

    let dev = Device::new(dev_cfg, server);
    let conn = Connection::new(stream);
    let status = StatusInfo {
        version: cli::VERSION,
        started_unix_ms: control::now_unix_ms(),
        upgrades: 0,
        shared_dir: cfg.shared_dir.clone(),
        connection: sys::socket_ident(conn.stream().as_fd()),
        control_path: control_path
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string()),
        stats: OnceLock::new(),
    };
    let result = serve(cfg, dev, conn, control, status, metrics, pid_files);
    if result.is_ok() && opt.sandbox == SandboxMode::None {
        // Inside a sandbox the socket's path is not visible; a stale socket
        // file is removed by the next daemon on that path.
        if let Some(p) = &opt.socket_path {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// A successor: receive a running daemon's state and continue its work.
fn take_over(control_path: &Path) -> Result<(), RunError> {
    // Calibrate before asking: the running daemon's queues are stopped from
    // the moment it answers until this one confirms.
    let wake_cost = measure_wake_cost(200);
    let mut inc = upgrade::receive(control_path).map_err(SetupError::from)?;
    let st = inc.state.clone();
    let level = match st.config.log_level {
        0 => LogLevel::Error,
        1 => LogLevel::Warn,
        3 => LogLevel::Debug,
        4 => LogLevel::Trace,
        5 => LogLevel::Off,
        _ => LogLevel::Info,
    };
    logger::init(level);
    // (Not SO_PEERCRED: on the connecting side it names whoever created the
    // listening control socket, the first daemon, not the one being replaced.)
    xvirtiofsd::cgroup::join_cgroups_of(st.writer_pid as i32);
    let pid_files: Vec<OwnedFd> = st
        .pid_file_fds
        .iter()
        .filter_map(|&i| inc.take(i).ok())
        .collect();
    let restored = restore(&mut inc, &st, wake_cost);
    let (dev, conn, control, metrics) = match restored {
        Ok(r) => r,
        Err(e) => {
            inc.fail(&error_chain(&e));
            return Err(e.into());
        }
    };
    inc.confirm().map_err(SetupError::from)?;
    let mut dev = dev;
    dev.resume().map_err(SetupError::from)?;
    dev.notify_started();
    // libvirt's pid file: its lock went away with the old daemon; take it
    // (waiting for the old daemon to exit) and record this pid.
    let pid_file_raw: Vec<i32> = pid_files.iter().map(|f| f.as_raw_fd()).collect();
    for f in pid_files {
        std::thread::spawn(move || {
            if let Err(e) = sys::lock_and_write(f.as_fd(), &std::process::id().to_string()) {
                warn!("pid file: {e}");
            }
            // Keep the descriptor (and its lock) for the life of the process.
            std::mem::forget(f);
        });
    }
    info!(
        "upgrade: now serving as {} (pid {}), taken over from {}",
        cli::VERSION,
        std::process::id(),
        st.writer_version
    );
    // Tell `xvirtiofsd upgrade` and let go of its pipe.
    println!(
        "XVFS-UPGRADED pid {} version {} from {}",
        std::process::id(),
        cli::VERSION,
        st.writer_version
    );
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = sys::dup_onto(null.as_fd(), 1);
    }
    drop(inc);
    let status = StatusInfo {
        version: cli::VERSION,
        started_unix_ms: st.started_unix_ms,
        upgrades: st.upgrades + 1,
        shared_dir: st.config.shared_dir.clone(),
        connection: sys::socket_ident(conn.stream().as_fd()),
        control_path: st.control_path.clone().unwrap_or_default(),
        stats: OnceLock::new(),
    };
    serve(st.config, dev, conn, control, status, metrics, pid_file_raw)
}

type Restored = (
    Device,
    Connection,
    Option<UnixListener>,
    Option<MetricsWriter>,
);

fn restore(
    inc: &mut upgrade::Incoming,
    st: &virtio_fs_ext::state::DaemonState,
    wake_cost: Duration,
) -> Result<Restored, SetupError> {
    if let Some(i) = st.log_fd {
        let log = inc
            .take(i)
            .map_err(|e| SetupError::Io("log descriptor", e))?;
        let _ = sys::dup_onto(log.as_fd(), 2);
    }
    let _ = sys::raise_nofile_limit(0);
    let fs = PassthroughFs::restore(fs_config(&st.config), &st.fs, inc.take_fs_fds())
        .map_err(SetupError::Fs)?;
    let server = Arc::new(Server::new(fs));
    if let Some(s) = st.session {
        server.restore_session(s).map_err(SetupError::Session)?;
    }
    let mut take = |i: u32| inc.take(i);
    let dev = Device::import(
        device_config(&st.config, wake_cost),
        server,
        &st.device,
        &mut take,
    )?;
    let conn = Connection::from_fd(
        take(st.vhost_socket_fd).map_err(|e| SetupError::Io("vhost-user socket", e))?,
    );
    let control = st
        .control_socket_fd
        .map(|i| take(i).map(UnixListener::from))
        .transpose()
        .map_err(|e| SetupError::Io("control socket", e))?;
    let metrics = open_metrics(&st.config)?;
    confine(&st.config)?;
    Ok((dev, conn, control, metrics))
}

/// Serves the connection until the front-end leaves, handing it over when a
/// successor asks on the control socket.
fn serve(
    cfg: ConfigState,
    mut dev: Device,
    mut conn: Connection,
    control: Option<UnixListener>,
    status: StatusInfo,
    metrics: Option<MetricsWriter>,
    pid_files: Vec<i32>,
) -> Result<(), RunError> {
    let status = Arc::new(status);
    let _ = status.stats.set(dev.stats());
    let metrics: Option<MetricsHandle> = metrics.map(|w| w.start(dev.stats()));
    let wake = Arc::new(sys::eventfd().map_err(|e| SetupError::Io("eventfd", e))?);
    let slot: control::HandoverSlot = Arc::new(Mutex::new(None));
    let control_fd = control.as_ref().map(|l| l.as_raw_fd());
    if let Some(l) = control {
        control::spawn(l, Arc::clone(&status), Arc::clone(&slot), Arc::clone(&wake))
            .map_err(|e| SetupError::Io("control thread", e))?;
    }
    let result = loop {
        match conn.serve(&mut dev, Some(wake.as_fd())) {
            Ok(ServeEnd::Disconnected) => break Ok(()),
            Ok(ServeEnd::Interrupted) => {
                let _ = sys::eventfd_drain(wake.as_fd());
                let peer = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(peer) = peer {
                    let server = Arc::clone(dev.server_arc());
                    let out = Outgoing {
                        config: &cfg,
                        started_unix_ms: status.started_unix_ms,
                        upgrades: status.upgrades,
                        control_fd,
                        control_path: Some(status.control_path.clone()).filter(|p| !p.is_empty()),
                        pid_files: &pid_files,
                        server: &server,
                    };
                    if upgrade::hand_over(&out, &mut dev, &conn, peer).is_ok() {
                        std::process::exit(0);
                    }
                }
            }
            Err(e) => break Err(RunError::Serve(e)),
        }
    };
    dev.stop_all();
    if let Some(m) = metrics {
        m.finish();
    }
    let served: Vec<String> = dev
        .stats()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.requests.load(std::sync::atomic::Ordering::Relaxed) > 0)
        .map(|(i, s)| {
            format!(
                "q{i}={}",
                s.requests.load(std::sync::atomic::Ordering::Relaxed)
            )
        })
        .collect();
    info!(
        "requests served: {}",
        if served.is_empty() {
            "none".into()
        } else {
            served.join(" ")
        }
    );
    if result.is_ok() {
        info!("Client disconnected, shutting down");
    }
    result
}

fn listen(opt: &Opt) -> Result<UnixListener, SetupError> {
    if let Some(fd) = opt.fd {
        match sys::is_listening_socket(fd) {
            Ok(true) => {}
            Ok(false) => return Err(SetupError::NotListening(fd)),
            Err(e) => return Err(SetupError::BadFd(fd, e)),
        }
        let _ = sys::set_cloexec(fd, true);
        // SAFETY: the fd was handed to us by the parent and checked to be a
        // listening socket; nothing else in this process owns it.
        return Ok(unsafe { UnixListener::from_raw_fd(fd) });
    }
    let path = opt.socket_path.clone().unwrap_or_default();
    remove_stale_socket(&path);
    let listener = UnixListener::bind(&path).map_err(|e| SetupError::Socket(path.clone(), e))?;
    if let Some(group) = &opt.socket_group {
        let gid = sys::group_id(group).ok_or_else(|| SetupError::UnknownGroup(group.clone()))?;
        sys::chown_group(&path, gid).map_err(|e| SetupError::Socket(path.clone(), e))?;
        set_mode(&path, 0o770).map_err(|e| SetupError::Socket(path.clone(), e))?;
    } else {
        set_mode(&path, 0o700).map_err(|e| SetupError::Socket(path.clone(), e))?;
    }
    Ok(listener)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Removes a socket file nobody listens on any more (left by a killed daemon).
fn remove_stale_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if md.file_type().is_socket() && UnixStream::connect(path).is_err() {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn accept(listener: &UnixListener, opt: &Opt) -> Result<UnixStream, SetupError> {
    let name = opt
        .socket_path
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("fd {}", opt.fd.unwrap_or(-1))));
    loop {
        match listener.accept() {
            Ok((s, _)) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SetupError::Socket(name, e)),
        }
    }
}
