// SPDX-License-Identifier: Apache-2.0
//! The daemon's lifecycle, in three steps: set up ([`Daemon::fresh`] from the
//! command line, or [`Daemon::adopt`] from a predecessor's state), then
//! [`Daemon::serve`] until the front-end leaves or a successor takes over.
//! Nothing here exits the process: the caller maps the result to an exit
//! status.

pub mod successor;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use log::{info, warn};
use virtio_fs_ext::settings::Settings;
use virtio_fs_ext::state::DaemonState;
use xvfs_fs::passthrough::SharedDir;
use xvfs_fs::PassthroughFs;

use crate::cli::{self, Opt, SandboxMode};
use crate::confine::sandbox;
use crate::crash_restart::checkpoint::HolderLink;
pub use crate::error::{ServeError, SetupError};
use crate::ops::control::{self, StatusInfo};
use crate::ops::logger;
use crate::ops::metrics_file::{MetricsHandle, MetricsWriter};
use crate::ops::service_manager::Notifier;
use crate::settings::{device_config, from_options, fs_config, max_open};
use crate::setup::Prepared;
use crate::setup::{caps_mask, confine, open_metrics, walls, CAP_DAC_READ_SEARCH};
use crate::upgrade::handover::{self, Incoming, Outgoing};
use crate::vhost_user::backend::BackendChannel;
use crate::vhost_user::{Connection, Device, ServeEnd};
use crate::virtqueue::worker::measure_wake_cost;
use crate::{error_chain, sys, FsServer};

/// A successor's settings that are not part of the state: from its own
/// command line only.
/// Where the state a process adopts ([`Daemon::adopt`]) comes from. (A
/// fresh start adopts nothing: [`Daemon::fresh`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A live upgrade: the predecessor sent its state over the control
    /// socket and waits for the confirmation; it keeps serving on an error.
    Upgrade,
    /// A crash restart: the state is the holder's last checkpoint of the
    /// process that died, the file system is in the journal, and the rings'
    /// positions are read back from guest memory.
    CrashRestart,
}

pub struct Own {
    /// Capabilities to keep ([`crate::confine::caps::mask`]).
    pub caps: u64,
    /// `--max-open`.
    pub max_open: Option<usize>,
    /// `--migration-target` (not part of the state: a successor writes
    /// what its own command line says).
    pub migration_target: virtio_fs_ext::config::MigrationTarget,
    /// `--dax-window`: must be the predecessor's window (the front-end
    /// sized the device's region by it).
    pub dax_window: Option<u64>,
    /// The pid whose cgroups this process joined before the handover
    /// began (outside the guest-visible pause).
    pub joined: Option<u32>,
    /// Opened and entered before anything the predecessor wrote was read:
    /// nothing in the pause needs a host path.
    pub prepared: Prepared,
}

/// How serving ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The front-end closed the connection.
    Disconnected,
    /// A successor took the connection over; this process has nothing left.
    HandedOver,
}

/// A daemon that is set up and connected, ready to serve.
pub struct Daemon {
    cfg: Settings,
    dev: Device,
    conn: Connection,
    control: Option<UnixListener>,
    status: StatusInfo,
    metrics: Option<MetricsWriter>,
    /// Inherited pid files (libvirt's), held for the life of the process.
    pid_files: Vec<RawFd>,
    /// The socket file to remove after the front-end leaves.
    socket_file: Option<PathBuf>,
    /// The service manager (systemd `Type=notify`), if one started us.
    notifier: Option<Notifier>,
    /// With --crash-restart: the holder.
    link: Option<HolderLink>,
}

impl Daemon {
    /// A fresh daemon: open everything, enter the sandbox, wait for the
    /// front-end to connect.
    pub fn fresh(opt: &Opt, link: Option<HolderLink>) -> Result<Daemon, SetupError> {
        let shared_dir = canonical_shared_dir(opt)?;
        if opt.thread_pool_size.is_some() {
            info!("--thread-pool-size has no effect: requests are served by one worker per queue");
        }
        let limit = match sys::raise_nofile_limit(opt.rlimit_nofile) {
            Ok(n) => {
                info!("open file limit: {n}");
                n
            }
            Err(e) => {
                warn!("cannot raise the open file limit: {e}");
                sys::nofile_limit()
            }
        };
        let max_open = max_open(opt.max_open, limit)?;
        info!("at most {max_open} inodes plus open files for the guest (--max-open)");
        let cfg = from_options(opt, &shared_dir);
        // Under a holder the pid files are the holder's: it is the process
        // whoever started the daemon knows.
        let pid_files = match link {
            Some(_) => Vec::new(),
            None => sys::inherited_pid_files(&opt.fd.into_iter().collect::<Vec<_>>()),
        };
        if !pid_files.is_empty() {
            info!(
                "holding {} inherited pid file(s); a successor takes them over",
                pid_files.len()
            );
        }
        let mut dev_cfg = device_config(&cfg, measure_wake_cost(200));
        dev_cfg.migration.target = opt.migration_target;
        dev_cfg.journal = link.as_ref().map(HolderLink::journal);

        // Sockets first: the file system sets the process umask to 0 (the
        // guest kernel has already applied the caller's), and sockets must
        // not be created under it.
        let listener = listen(opt)?;
        let (control, control_path) = bind_control(opt, starter_pid(link.as_ref()));
        let notifier = Notifier::from_env();
        let walls = walls(opt, 0)?;
        let metrics = open_metrics(&cfg, &walls)?;
        let fs_cfg = fs_config(&cfg, max_open)?;
        let dir = confine(&cfg, walls)?;
        let mut fs = PassthroughFs::on(fs_cfg, dir).map_err(SetupError::Fs)?;
        if let Some(size) = opt.dax_window {
            let channel = Arc::new(BackendChannel::default());
            fs.attach_mapper(channel.clone(), size);
            dev_cfg.dax = Some((size, channel));
            info!("DAX: a window of {size} bytes is offered (experimental)");
        }
        if let Some(l) = &link {
            fs.attach_journal(l.journal());
            fs.attach_keeper(l.keeper(), l.keep_all());
        }
        let server = Arc::new(FsServer::new(fs));

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
        if let Some(n) = &notifier {
            n.ready(&format!(
                "serving {}, waiting for the front-end",
                shared_dir.display()
            ));
        }
        let stream = accept(&listener, opt)?;
        drop(listener);
        info!("Client connected, servicing requests");

        let conn = Connection::new(stream);
        let status = StatusInfo {
            version: cli::VERSION,
            started_unix_ms: control::now_unix_ms(),
            upgrades: 0,
            shared_dir: cfg.security.shared_dir.clone(),
            connection: sys::socket_ident(conn.stream().as_fd()),
            control_path: control_path
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string()),
            stats: OnceLock::new(),
            journal: link.as_ref().map(HolderLink::journal),
        };
        // Inside a sandbox the socket's path is not visible; a stale socket
        // file is removed by the next daemon on that path.
        let socket_file = opt
            .socket_path
            .clone()
            .filter(|_| opt.sandbox == SandboxMode::None);
        Ok(Daemon {
            cfg,
            dev: Device::new(dev_cfg, server)?,
            conn,
            control,
            status,
            metrics,
            pid_files,
            socket_file,
            notifier,
            link,
        })
    }

    /// A crash restart: the holder hands over the crashed serving process's
    /// last checkpoint; the file system comes from the journal.
    /// The checkpoint and the journal came from a process the guest may
    /// have compromised: this process enters its sandbox before it reads
    /// either (keeping `CAP_DAC_READ_SEARCH` until the journal's file
    /// handles are reopened), and the checkpoint's security settings must
    /// equal this command line's, as a live upgrade's state must.
    pub fn restart(opt: &Opt) -> Result<Daemon, SetupError> {
        let wake_cost = measure_wake_cost(50);
        let shared_dir = canonical_shared_dir(opt)?;
        let prepared = crate::setup::prepare(opt, &shared_dir, CAP_DAC_READ_SEARCH)?;
        let link = HolderLink::from_opt(opt)?.ok_or(SetupError::Io(
            "--holder-restart needs --holder-socket and --holder-journal",
            std::io::ErrorKind::InvalidInput.into(),
        ))?;
        let mut inc = link.receive()?;
        own_settings(opt, &shared_dir, &mut inc)?;
        let own = Own {
            caps: caps_mask(opt)?,
            max_open: opt.max_open,
            migration_target: opt.migration_target,
            dax_window: opt.dax_window,
            joined: None,
            prepared,
        };
        Daemon::adopt(inc, wake_cost, own, Some(link), Origin::CrashRestart)
    }

    /// Continues a predecessor's work from the state it sent: restores the
    /// device and file system, confirms, and starts the queues. On an error
    /// before confirming, the predecessor is told and keeps serving.
    /// `own` holds what comes from the successor's own command line only;
    /// `origin` says whether the predecessor handed over or crashed.
    pub fn adopt(
        mut inc: Incoming,
        wake_cost: Duration,
        mut own: Own,
        link: Option<HolderLink>,
        origin: Origin,
    ) -> Result<Daemon, SetupError> {
        let st = inc.state.clone();
        logger::init(st.settings.serving.log_level, logger::to_syslog());
        let notifier = own.prepared.notifier.take();
        let dev_null = own.prepared.dev_null.take();
        match origin {
            // The holder's child: in the holder's cgroups already.
            Origin::CrashRestart => {}
            // Joined before the handover began (the pid is only believed
            // if that process held the vhost-user connection then).
            Origin::Upgrade if own.joined == Some(st.writer_pid) => {}
            Origin::Upgrade => warn!(
                "the cgroups of pid {} were not joined before the handover (it did not hold \
                 the connection its status named): they are not joined",
                st.writer_pid
            ),
        }
        let pid_files: Vec<OwnedFd> = st
            .pid_file_fds
            .iter()
            .filter_map(|&i| inc.take(i).ok())
            .filter(|_| link.is_none())
            .collect();
        let journal = link.as_ref().map(HolderLink::journal);
        let restored = match restore(&mut inc, &st, wake_cost, own, link.as_ref(), origin) {
            Ok(r) => r,
            Err(e) => {
                inc.fail(&error_chain(&e));
                return Err(e);
            }
        };
        inc.confirm()?;
        if let Some(n) = &notifier {
            // The predecessor says so too, before it exits; whichever comes
            // first, the unit follows this process.
            n.main_pid(
                sandbox::daemon_pid(),
                &format!(
                    "serving {} (live-upgraded)",
                    st.settings.security.shared_dir
                ),
            );
        }
        let Restored {
            mut dev,
            conn,
            control,
            metrics,
        } = restored;
        dev.resume()?;
        dev.notify_started();
        let pid_files = take_pid_files(pid_files);
        if origin == Origin::CrashRestart {
            info!(
                "crash restart: now serving as pid {} (restart {})",
                sandbox::daemon_pid(),
                journal.map_or(0, |j| j.restarts())
            );
        } else {
            info!(
                "upgrade: now serving as {} (pid {}), taken over from {}",
                cli::VERSION,
                sandbox::daemon_pid(),
                st.writer_version
            );
            // Tell `xvirtiofsd upgrade` and let go of its pipe.
            println!(
                "XVFS-UPGRADED pid {} version {} from {}",
                sandbox::daemon_pid(),
                cli::VERSION,
                st.writer_version
            );
            let null = dev_null.or_else(|| {
                let f = std::fs::OpenOptions::new().write(true).open("/dev/null");
                f.ok().map(OwnedFd::from)
            });
            if let Some(null) = null {
                let _ = sys::dup_onto(null.as_fd(), 1);
            }
        }
        drop(inc);
        let status = StatusInfo {
            version: cli::VERSION,
            started_unix_ms: st.started_unix_ms,
            upgrades: st.upgrades + u32::from(origin == Origin::Upgrade),
            shared_dir: st.settings.security.shared_dir.clone(),
            connection: sys::socket_ident(conn.stream().as_fd()),
            control_path: st.control_path.clone().unwrap_or_default(),
            stats: OnceLock::new(),
            journal,
        };
        Ok(Daemon {
            cfg: st.settings,
            dev,
            conn,
            control,
            status,
            metrics,
            pid_files,
            socket_file: None,
            notifier,
            link,
        })
    }

    /// Serves the connection until the front-end leaves, handing it over when
    /// a successor asks on the control socket.
    pub fn serve(self) -> Result<Ended, ServeError> {
        let Daemon {
            cfg,
            mut dev,
            mut conn,
            control,
            status,
            metrics,
            pid_files,
            socket_file,
            notifier,
            link,
        } = self;
        let status = Arc::new(status);
        let _ = status.stats.set(dev.stats());
        let metrics: Option<MetricsHandle> =
            metrics.map(|w| w.start(dev.stats(), Arc::clone(dev.server_arc())));
        let wake = Arc::new(sys::eventfd().map_err(|e| SetupError::Io("eventfd", e))?);
        let slot: control::HandoverSlot = Arc::new(Mutex::new(None));
        let control_fd = control.as_ref().map(|l| l.as_raw_fd());
        let server = Arc::clone(dev.server_arc());
        let preload: control::PreloadSource = Arc::new(move || server.fs().preload_fds());
        let spawn_control = |l| {
            let (info, slot, wake) = (Arc::clone(&status), Arc::clone(&slot), Arc::clone(&wake));
            control::spawn(l, info, slot, wake, Arc::clone(&preload))
                .map_err(|e| SetupError::Io("control thread", e))
        };
        let mut control_thread = control.map(spawn_control).transpose()?;
        let conn_fd = conn.stream().as_raw_fd();
        let mut checkpoint = |dev: &Device| {
            if let Some(l) = &link {
                let out = outgoing(&cfg, &status, control_fd, &pid_files, dev.server_arc());
                l.checkpoint_device(&out, dev, conn_fd);
            }
        };
        checkpoint(&dev);
        let result = loop {
            match conn.serve(&mut dev, Some(wake.as_fd()), &mut checkpoint) {
                Ok(ServeEnd::Disconnected) => break Ok(Ended::Disconnected),
                Ok(ServeEnd::Interrupted) => {
                    let _ = sys::eventfd_drain(wake.as_fd());
                    let peer = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let Some(peer) = peer else { continue };
                    let successor = sys::peer_pid(peer.as_fd()).ok();
                    let server = Arc::clone(dev.server_arc());
                    let out = outgoing(&cfg, &status, control_fd, &pid_files, &server);
                    if handover::hand_over(&out, &mut dev, &conn, peer).is_ok() {
                        if let Some(l) = &link {
                            l.bye("handed over");
                        }
                        // The successor serves now: leave everything (queues
                        // are stopped, the metrics file is its) as it is.
                        // A successor in its own PID namespace is not
                        // visible from this one (pid 0): it announces itself.
                        if let (Some(n), Some(pid)) = (&notifier, successor.filter(|&p| p > 0)) {
                            n.main_pid(pid as u32, "live-upgraded");
                        }
                        return Ok(Ended::HandedOver);
                    }
                    // The control thread stopped when it queued the request:
                    // accept again.
                    if let Some(t) = control_thread.take() {
                        match t.join() {
                            Ok(l) => control_thread = Some(spawn_control(l)?),
                            Err(_) => warn!("control thread panicked; no more status or upgrade"),
                        }
                    }
                }
                Err(e) => break Err(ServeError::Connection(e)),
            }
        };
        dev.stop_all();
        if let Some(l) = &link {
            l.bye(if result.is_ok() {
                "disconnected"
            } else {
                "failed"
            });
        }
        if let Some(m) = metrics {
            m.finish();
        }
        log_served(&dev);
        if result.is_ok() {
            info!("Client disconnected, shutting down");
            if let Some(p) = socket_file {
                let _ = std::fs::remove_file(p);
            }
        }
        result
    }
}

/// `--shared-dir`, made absolute with every link resolved.
pub(crate) fn canonical_shared_dir(opt: &Opt) -> Result<PathBuf, SetupError> {
    let shared_dir = opt.shared_dir.clone().ok_or_else(|| {
        SetupError::SharedDir(PathBuf::new(), std::io::ErrorKind::NotFound.into())
    })?;
    let canonical = std::fs::canonicalize(&shared_dir)
        .map_err(|e| SetupError::SharedDir(shared_dir.clone(), e))?;
    // Said here, before the sandbox would fail on it with advice that
    // does not help (another --sandbox).
    if !canonical.is_dir() {
        return Err(SetupError::SharedDirNotDir(shared_dir));
    }
    Ok(canonical)
}

/// A received state's security settings must equal `opt`'s (see
/// [`crate::upgrade::trust`]); the rest is taken from the state. A refusal is told
/// to the sender.
pub(crate) fn own_settings(
    opt: &Opt,
    shared_dir: &Path,
    inc: &mut Incoming,
) -> Result<(), SetupError> {
    let own = from_options(opt, shared_dir);
    let own_control = opt.control.as_ref().map(|p| p.display().to_string());
    match crate::upgrade::trust::check_settings(
        &own,
        &inc.state.settings,
        own_control.as_deref(),
        inc.state.control_path.as_deref(),
    ) {
        Ok(cfg) => {
            inc.state.settings = cfg;
            Ok(())
        }
        Err(reason) => {
            inc.fail(&reason);
            Err(handover::UpgradeError::Settings(reason).into())
        }
    }
}

/// What a successor or the holder is sent beside the device.
fn outgoing<'a>(
    cfg: &'a Settings,
    status: &StatusInfo,
    control_fd: Option<RawFd>,
    pid_files: &'a [RawFd],
    server: &'a FsServer,
) -> Outgoing<'a> {
    Outgoing {
        settings: cfg,
        started_unix_ms: status.started_unix_ms,
        upgrades: status.upgrades,
        control_fd,
        control_path: Some(status.control_path.clone()).filter(|p| !p.is_empty()),
        pid_files,
        server,
    }
}

fn log_served(dev: &Device) {
    use std::sync::atomic::Ordering;
    let served: Vec<String> = dev
        .stats()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.requests.load(Ordering::Relaxed) > 0)
        .map(|(i, s)| format!("q{i}={}", s.requests.load(Ordering::Relaxed)))
        .collect();
    info!(
        "requests served: {}",
        if served.is_empty() {
            "none".into()
        } else {
            served.join(" ")
        }
    );
}

/// libvirt's pid file: its lock went away with the old daemon; take it
/// (waiting for the old daemon to exit) and record this pid. Returns the
/// descriptors, which stay open for the life of the process.
fn take_pid_files(pid_files: Vec<OwnedFd>) -> Vec<RawFd> {
    let raw: Vec<RawFd> = pid_files.iter().map(|f| f.as_raw_fd()).collect();
    for f in pid_files {
        std::thread::spawn(move || {
            if let Err(e) = sys::lock_and_write(f.as_fd(), &sandbox::daemon_pid().to_string()) {
                warn!("pid file: {e}");
            }
            // Keep the descriptor (and its lock) for the life of the process.
            std::mem::forget(f);
        });
    }
    raw
}

struct Restored {
    dev: Device,
    conn: Connection,
    control: Option<UnixListener>,
    metrics: Option<MetricsWriter>,
}

fn restore(
    inc: &mut Incoming,
    st: &DaemonState,
    wake_cost: Duration,
    own: Own,
    link: Option<&HolderLink>,
    origin: Origin,
) -> Result<Restored, SetupError> {
    let crashed = origin == Origin::CrashRestart;
    let journal = link.map(HolderLink::journal);
    if let Some(i) = st.log_fd {
        let log = inc
            .take(i)
            .map_err(|e| SetupError::Io("log descriptor", e))?;
        let _ = sys::dup_onto(log.as_fd(), 2);
    }
    logger::release();
    let started = std::time::Instant::now();
    let migration_target = own.migration_target;
    let p = own.prepared;
    let max_open = max_open(own.max_open, p.limit)?;
    let mut fs = restore_fs(inc, st, max_open, p.dir, link, origin)?;
    let dax = restore_window(inc, st, own.dax_window, &mut fs, crashed)?;
    if crashed {
        // The journal's file handles are open: CAP_DAC_READ_SEARCH goes,
        // unless the command line keeps it.
        crate::setup::release_extra_caps(own.caps)?;
    }
    let fs_done = started.elapsed();
    let server = Arc::new(FsServer::new(fs));
    let session = match journal.filter(|_| crashed) {
        Some(j) => j.session(),
        None => st.session,
    };
    if let Some(s) = session {
        server.restore_session(s).map_err(SetupError::Session)?;
    }
    let mut take = |i: u32| inc.take(i);
    let mut dev_cfg = device_config(&st.settings, wake_cost);
    dev_cfg.journal = journal;
    dev_cfg.migration.target = migration_target;
    dev_cfg.dax = dax;
    let dev = Device::import(dev_cfg, server, &st.device, &mut take, crashed)?;
    info!(
        "restored in {} µs (sandbox entered before): file system {} µs, device {} µs",
        started.elapsed().as_micros(),
        fs_done.as_micros(),
        (started.elapsed() - fs_done).as_micros()
    );
    let conn = Connection::from_fd(
        take(st.vhost_socket_fd).map_err(|e| SetupError::Io("vhost-user socket", e))?,
    );
    let control = st
        .control_socket_fd
        .map(|i| take(i).map(UnixListener::from))
        .transpose()
        .map_err(|e| SetupError::Io("control socket", e))?;
    Ok(Restored {
        dev,
        conn,
        control,
        metrics: p.metrics,
    })
}

/// The predecessor's DAX window, if it served one: `own` (this daemon's
/// `--dax-window`) must be the same size, the back-end channel is taken
/// over with the replies it is owed, and the mappings the front-end still
/// has are known again. After a crash they are not (the table died with
/// the process), nor how many replies are owed: the file system is told
/// so, and the channel finds out before its first request.
fn restore_window(
    inc: &mut Incoming,
    st: &DaemonState,
    own: Option<u64>,
    fs: &mut PassthroughFs,
    crashed: bool,
) -> Result<Option<(u64, Arc<BackendChannel>)>, SetupError> {
    let window = st.dax.as_ref().map(|d| d.window);
    if window != own {
        let size = |w: Option<u64>| w.map_or("none".to_string(), |w| w.to_string());
        return Err(SetupError::DaxWindow(format!(
            "the running daemon's DAX window is {} bytes, this one's --dax-window {}: the \
             front-end sized the device by the first",
            size(window),
            size(own)
        )));
    }
    let Some(d) = &st.dax else {
        return Ok(None);
    };
    let channel = Arc::new(BackendChannel::default());
    if let Some(i) = d.channel_fd {
        let fd = inc
            .take(i)
            .map_err(|e| SetupError::Io("DAX back-end channel", e))?;
        channel.set(UnixStream::from(fd));
    }
    fs.attach_mapper(channel.clone(), d.window);
    let owed = d.late_replies.filter(|_| !crashed);
    channel.restore_owed(owed);
    let w = xvfs_fs::passthrough::WindowState {
        mappings: d.mappings.clone(),
        complete: d.complete,
        abandoned: d.abandoned,
        devices: d.devices.clone(),
    };
    fs.restore_window(&w, owed.is_none())
        .map_err(|e| SetupError::Io("DAX mappings", e))?;
    info!(
        "DAX: a window of {} bytes taken over with {} mapping(s)",
        d.window,
        d.mappings.len()
    );
    Ok(Some((d.window, channel)))
}

/// The file system of a predecessor, on `dir` (opened inside the sandbox):
/// rebuilt from the journal after a crash, else from the tables (and
/// descriptors) it sent, journaled on if there is a journal.
fn restore_fs(
    inc: &mut Incoming,
    st: &DaemonState,
    max_open: usize,
    dir: SharedDir,
    link: Option<&HolderLink>,
    origin: Origin,
) -> Result<PassthroughFs, SetupError> {
    let cfg = fs_config(&st.settings, max_open)?;
    let fs = match link.filter(|_| origin == Origin::CrashRestart) {
        Some(l) => {
            let mut fs = PassthroughFs::on(cfg, dir).map_err(SetupError::Fs)?;
            let report = fs
                .recover(l.journal(), l.take_kept())
                .map_err(SetupError::Fs)?;
            fs.attach_keeper(l.keeper(), l.keep_all());
            info!(
                "crash restart: {} inodes and {} open files found again ({} nodes and {} \
                 open files from descriptors the holder kept)",
                report.inodes,
                report.handles,
                report.kept_nodes.len(),
                report.kept_handles.len()
            );
            if let Some(first) = report.failed.first() {
                // Typically files deleted while the guest still held them.
                warn!(
                    "crash restart: {} node(s) or handle(s) not found again (the guest gets \
                     EIO for them until it lets go), e.g. {first}",
                    report.failed.len()
                );
            }
            fs
        }
        None => {
            let fs = PassthroughFs::restore(cfg, dir, &st.fs, inc.take_fs_fds());
            let mut fs = fs.map_err(SetupError::Fs)?;
            if let Some(l) = link {
                fs.attach_journal(l.journal());
                fs.attach_keeper(l.keeper(), l.keep_all());
            }
            fs
        }
    };
    Ok(fs)
}

/// A daemon about to enter a user namespace (`--uid-map`, or not root)
/// binds its vhost-user socket (unless given `--fd`) and control socket
/// first; [`Daemon::fresh`] then takes them from `opt`.
pub fn bind_before_user_namespace(opt: &mut Opt) -> Result<(), SetupError> {
    if opt.handover_from.is_some() || opt.holder_socket.is_some() {
        return Ok(());
    }
    if opt.fd.is_none() {
        opt.fd = Some(listen(opt)?.into_raw_fd());
    }
    let (control, path) = bind_control(opt, sandbox::daemon_pid());
    opt.control_fd = control.map(IntoRawFd::into_raw_fd);
    opt.control = path;
    Ok(())
}

/// The pid the default control socket is named after: the process whoever
/// started the daemon knows, whose first-start record
/// ([`crate::upgrade::record`]) bears the same name. Under a holder
/// (`--crash-restart`) that is the holder, not this serving process.
fn starter_pid(link: Option<&HolderLink>) -> u32 {
    link.map(|l| l.journal().holder_pid())
        .filter(|&pid| pid > 0)
        .unwrap_or_else(sandbox::daemon_pid)
}

/// The control socket, unless disabled (by default named after
/// `starter`); a failure to bind only loses `status` and live upgrade.
fn bind_control(opt: &Opt, starter: u32) -> (Option<UnixListener>, Option<PathBuf>) {
    if opt.no_control {
        return (None, None);
    }
    if let (Some(fd), Some(path)) = (opt.control_fd, &opt.control) {
        // SAFETY: bound by `bind_before_user_namespace` in this process and
        // owned by nothing else.
        return (
            Some(unsafe { UnixListener::from_raw_fd(fd) }),
            Some(path.clone()),
        );
    }
    let path = opt
        .control
        .clone()
        .unwrap_or_else(|| control::default_path(starter));
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
    let group = opt
        .socket_group
        .as_ref()
        .map(|g| sys::group_id(g).ok_or_else(|| SetupError::UnknownGroup(g.clone())))
        .transpose()?;
    let mode = if group.is_some() { 0o770 } else { 0o700 };
    crate::socket::bind(&path, mode, group).map_err(|e| SetupError::Socket(path.clone(), e))
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
