// SPDX-License-Identifier: Apache-2.0
//! Command line: a drop-in for virtiofsd's common use, as libvirt, QEMU users and
//! scripts spell it (`--socket-path`, `--fd`, `--shared-dir`, `-o source=…`, …).

use std::os::fd::RawFd;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

pub use crate::confine::landlock::LandlockMode;
pub use virtio_fs_ext::config::{
    CacheMode, CrashRestartKeep, LogLevel, MigrationMode, MigrationOnError, MigrationTarget,
    Negotiation, PollMode, SandboxMode, SeccompAction,
};

pub use crate::{COMMIT, VERSION, VERSION_LINE};

pub mod commands;
pub mod completions;
pub mod config;
pub mod help;

pub use commands::{Command, CompletionsOpt, Shell, StatusFormat, StatusOpt, UpgradeOpt};
pub use help::{ABOUT, LONG_ABOUT};

/// `--version`: the version, the commit, and each encoded format this
/// build writes and the versions it reads (docs/live-upgrade.md,
/// "Compatibility").
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| format!("{VERSION_LINE}\n{}", virtio_fs_ext::formats::describe()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InodeFileHandles {
    Never,
    Prefer,
    Mandatory,
    Fallback,
}

#[derive(Debug, Parser)]
#[command(
    name = "xvirtiofsd",
    version = VERSION_LINE,
    long_version = long_version(),
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = help::after_help(),
    override_usage = help::USAGE,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    subcommand_value_name = "COMMAND",
    subcommand_help_heading = "Commands",
    args_override_self = true
)]
pub struct Opt {
    /// Talk to a running daemon, or print completions, instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read options from FILE, `key=value` per line with the long options
    /// as keys (see CONFIGURATION FILE); the command line wins.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory to share with the guest (or give it as `-o source=DIR`).
    #[arg(long, value_name = "DIR")]
    pub shared_dir: Option<PathBuf>,

    /// Create a vhost-user Unix socket at PATH and wait there for the front-end.
    #[arg(long, value_name = "PATH", conflicts_with = "fd")]
    pub socket_path: Option<PathBuf>,

    /// Deprecated alias of --socket-path.
    #[arg(long = "socket", value_name = "PATH", hide = true, conflicts_with_all = ["fd", "socket_path"])]
    pub socket_alias: Option<PathBuf>,

    /// Give the socket created with --socket-path to this group (mode 0770), e.g.
    /// libvirt-qemu, so that a QEMU running as another user can connect.
    #[arg(long, value_name = "GROUP", conflicts_with = "fd")]
    pub socket_group: Option<String>,

    /// Use the already listening socket FD (inherited from the parent, as libvirt does).
    #[arg(long, value_name = "FD")]
    pub fd: Option<i32>,

    /// Guest caching of file data and metadata (see CACHE MODES).
    #[arg(long, value_enum, value_name = "MODE", default_value = "auto")]
    pub cache: CacheMode,

    /// Serve extended attributes (getxattr, setxattr, listxattr, removexattr).
    #[arg(long)]
    pub xattr: bool,

    /// Refuse every change to the shared directory (the guest gets EROFS).
    #[arg(long)]
    pub readonly: bool,

    /// Enable the FUSE writeback cache in the guest.
    #[arg(long)]
    pub writeback: bool,

    /// Honour O_DIRECT opens from the guest.
    #[arg(long)]
    pub allow_direct_io: bool,

    /// Do not offer READDIRPLUS (the guest then looks up each entry itself).
    #[arg(long)]
    pub no_readdirplus: bool,

    /// How the process confines itself to the shared directory.
    #[arg(long, value_enum, value_name = "MODE", default_value = "namespace")]
    pub sandbox: SandboxMode,

    /// What happens on a system call outside the allow-list.
    #[arg(long, value_enum, value_name = "ACTION", default_value = "kill")]
    pub seccomp: SeccompAction,

    /// Landlock, a second wall beyond the sandbox: the serving process may
    /// open files only beneath the shared directory (and the metrics writer
    /// only in its directory), whatever descriptor a path starts from, with
    /// no TCP and no signal or abstract socket out of its domain. `auto`:
    /// enforce what the kernel's Landlock offers, and serve without it
    /// (logged) on a kernel that has none; `required`: refuse to start
    /// there; `off`: no Landlock.
    #[arg(long, value_enum, value_name = "MODE", default_value = "auto")]
    pub landlock: LandlockMode,

    /// Number of request queues offered to the front-end (QEMU's num-request-queues
    /// may be up to this), from 1 to 16.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..=16))]
    pub queues: u16,

    /// Busy-event wait: after a batch, poll the ring before sleeping on the kick
    /// eventfd (see POLLING).
    #[arg(long, value_enum, value_name = "MODE", default_value = "adaptive")]
    pub poll: PollMode,

    /// Poll window in microseconds. Default: 0 (no polling) on hosts with at most
    /// 2 CPUs, whose polling would take time from the guest's vCPUs; 50 otherwise.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub poll_us: Option<u64>,

    /// CPU budget of polling: each queue worker spends at most PERCENT of a
    /// CPU's time spinning (credit earned with wall-clock time, at most
    /// PERCENT of 100 ms banked); 100 leaves only the window and the adaptive
    /// rule (see POLLING).
    #[arg(long, value_name = "PERCENT", default_value_t = 100,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub poll_cpu_max: u8,

    /// Pin request-queue workers to these host CPUs (queue i on the
    /// ((i-1) mod n)-th CPU of the list), e.g. `--queue-cpus 2,3`.
    #[arg(long, value_name = "CPUS", value_delimiter = ',')]
    pub queue_cpus: Vec<usize>,

    /// Write per-queue metrics (requests, bytes, polling, latency histogram) as
    /// JSON to PATH, replaced atomically every second.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    /// Control socket for `xvirtiofsd status` and `xvirtiofsd upgrade`
    /// [default: /run/xvirtiofsd/<pid>.sock, the pid of the process started:
    /// with --crash-restart, the holder].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,

    /// Do not create a control socket (no status, no live upgrade).
    #[arg(long, conflicts_with = "control")]
    pub no_control: bool,

    /// Take over from the daemon behind this control socket (started by
    /// `xvirtiofsd upgrade`). The settings come from this command line and
    /// must equal the running daemon's, except the cache mode, direct I/O,
    /// readdirplus, queues, polling and log level, which come from its
    /// state (see trust.rs).
    #[arg(long, value_name = "PATH", hide = true, conflicts_with = "fd")]
    pub handover_from: Option<PathBuf>,

    /// Survive crashes: a small holder process keeps the vhost-user
    /// connection, guest memory, eventfds and a journal of the file system
    /// state while a serving process does the work. When the serving
    /// process dies (killed, out of memory, a panic) the holder starts a new
    /// one at once, which rebuilds the state from the journal and answers
    /// the requests in flight exactly once: the guest sees a pause, no
    /// error. The pid given to whoever started the daemon is the holder's;
    /// signals sent to it reach the serving process. See
    /// docs/crash-restart.md.
    #[arg(long)]
    pub crash_restart: bool,

    /// With --crash-restart: after more than N crashes within SECONDS, or
    /// more than N restarts in a row that never got ready (a restart whose
    /// rebuild shows no progress for 15 s is stopped), the holder gives up:
    /// it answers every request still coming with EIO (the guest sees I/O
    /// errors, never a hang), as an unprivileged uid in namespaces of its
    /// own, and exits once the front-end leaves.
    #[arg(long, value_name = "N/SECONDS", default_value = "5/60", value_parser = parse_limit)]
    pub crash_restart_limit: (u32, u64),

    /// With --crash-restart: which files the holder keeps a descriptor of.
    /// `nameless`: those the guest holds that lose their name by the
    /// guest's own doing (unlinked or removed while open or a cwd, renamed
    /// over, O_TMPFILE), enough for everything the guest does. `all`: every
    /// node and open file the guest holds, so that a file another host
    /// process deletes or renames over also survives a crash, at the cost
    /// of a message to the holder per new node, open and release.
    #[arg(
        long,
        value_enum,
        value_name = "WHAT",
        default_value = "nameless",
        requires = "crash_restart"
    )]
    pub crash_restart_keep: CrashRestartKeep,

    /// Internal (the holder's serving process): the holder's socket.
    #[arg(long, value_name = "FD", hide = true, requires = "holder_journal")]
    pub holder_socket: Option<i32>,

    /// Internal (the holder's serving process): the journal's memory file.
    #[arg(long, value_name = "FD", hide = true, requires = "holder_socket")]
    pub holder_journal: Option<i32>,

    /// Internal (the holder's serving process): the socket over which the
    /// holder keeps files with no name left.
    #[arg(long, value_name = "FD", hide = true, requires = "holder_socket")]
    pub holder_keeper: Option<i32>,

    /// Internal (the holder's serving process): a crashed predecessor's
    /// state comes from the holder.
    #[arg(
        long,
        hide = true,
        requires = "holder_socket",
        conflicts_with = "handover_from"
    )]
    pub holder_restart: bool,

    /// Accepted for compatibility with virtiofsd and has no effect:
    /// requests are served by one worker thread per request queue (see
    /// --queues), which takes the place of virtiofsd's thread pool.
    #[arg(long, value_name = "N")]
    pub thread_pool_size: Option<usize>,

    /// The most inodes plus open files held for the guest at once (each is a
    /// host descriptor); past it the guest gets EMFILE. Default: the open-file
    /// limit minus headroom for the daemon's own descriptors (an eighth of the
    /// limit, at least 1024).
    #[arg(long, value_name = "N")]
    pub max_open: Option<usize>,

    /// Raise the open-file limit to N (0: to the hard limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub rlimit_nofile: u64,

    /// Log level.
    #[arg(long, value_enum, value_name = "LEVEL", default_value = "info")]
    pub log_level: LogLevel,

    /// Log to syslog (facility daemon, through /dev/log, connected before the
    /// sandbox) instead of standard error.
    #[arg(long)]
    pub syslog: bool,

    /// Print the vhost-user back-end capabilities as JSON and exit (used by libvirt).
    #[arg(long)]
    pub print_capabilities: bool,

    /// The tag the device advertises in its configuration space (at most
    /// 36 bytes): VHOST_USER_PROTOCOL_F_CONFIG is offered and GET_CONFIG
    /// answered with it. A front-end may ignore it: QEMU's vhost-user-fs
    /// does not take CONFIG and uses its own `tag=` (as virtiofsd warns).
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,

    /// DAX, experimental and off by default: offer the guest a shared-memory
    /// window of SIZE bytes (a power of two, at least 2M; K, M and G
    /// suffixes) that file ranges are mapped into on its request
    /// (FUSE_SETUPMAPPING), for a front-end that takes
    /// VHOST_USER_PROTOCOL_F_SHMEM (QEMU 11's vhost-user-test-device-pci;
    /// docs/dax-design.md). Needs --tag and a writable share. A live
    /// upgrade hands the window over (the new daemon must be given the
    /// same SIZE); a crash restart keeps it.
    #[arg(long, value_name = "SIZE", value_parser = parse_window)]
    pub dax_window: Option<u64>,

    /// How the daemon holds on to the files the guest knows: `never` (the
    /// default): an O_PATH descriptor each; `prefer` (or `fallback`): a
    /// file handle where the file system gives one, so that they cost no
    /// descriptor (each use opens the handle), else a descriptor; if
    /// handles cannot be opened at all (no CAP_DAC_READ_SEARCH, as in a
    /// user namespace) they are given up with a warning; `mandatory`: file
    /// handles only: start-up fails (exit 3) when the shared directory
    /// gives none, and a file without one cannot be looked up (EOPNOTSUPP).
    /// File handles need CAP_DAC_READ_SEARCH, which is then kept (it may
    /// not be removed with --modcaps).
    #[arg(long, value_enum, value_name = "MODE")]
    pub inode_file_handles: Option<InodeFileHandles>,

    /// Tell the guest about host mounts inside the shared directory: a
    /// directory on another mount (or device) than its parent is marked
    /// FUSE_ATTR_SUBMOUNT, and the guest mounts it as a submount with its
    /// own device number, so that inode numbers of the two file systems do
    /// not mix in one guest device (and `find -xdev`, `du -x` stop there).
    /// Needs a guest that offers FUSE_SUBMOUNTS (Linux 5.10+).
    #[arg(long, overrides_with = "no_announce_submounts")]
    pub announce_submounts: bool,

    /// Do not announce submounts (the default): the whole share is one
    /// device in the guest.
    #[arg(long, overrides_with = "announce_submounts")]
    pub no_announce_submounts: bool,

    /// Offer FUSE_HANDLE_KILLPRIV_V2: the guest kernel stops clearing
    /// setuid/setgid itself (with SETATTR) on write, truncate and
    /// open(O_TRUNC) and asks the daemon to, which does the call without
    /// CAP_FSETID so the host kernel clears them, and file capabilities,
    /// as for an unprivileged writer. As in virtiofsd, off by default.
    #[arg(long, overrides_with = "no_killpriv_v2")]
    pub killpriv_v2: bool,

    /// Do not negotiate FUSE_HANDLE_KILLPRIV_V2 (the default): the guest
    /// kernel clears setuid/setgid itself.
    #[arg(long, overrides_with = "killpriv_v2")]
    pub no_killpriv_v2: bool,

    /// Let the guest mmap files opened for direct I/O (with `--cache never`
    /// or `metadata`, or a guest's O_DIRECT open), by offering
    /// FUSE_DIRECT_IO_ALLOW_MMAP (guest Linux 6.6+). Without it, as in
    /// virtiofsd, a shared mmap of such a file fails (ENODEV).
    #[arg(long)]
    pub allow_mmap: bool,

    /// Refuse (EPERM) the guest's MKNOD of character and block devices, so
    /// that no device node of the guest's making appears in the share
    /// (FIFOs and sockets are still allowed). Off by default, as in
    /// virtiofsd.
    #[arg(long)]
    pub no_device_nodes: bool,

    /// The guest can make no setuid or setgid file: the bits are dropped
    /// from the modes of files it creates and from its chmod, and cleared
    /// after its chown (a directory keeps setgid, which only passes its
    /// group on). Off by default, as in virtiofsd.
    #[arg(long)]
    pub no_setid: bool,

    /// Keep O_NOATIME on the guest's opens. By default it is cleared, as
    /// virtiofsd does, because O_NOATIME on a file the daemon does not own
    /// fails with EPERM when the daemon runs unprivileged.
    #[arg(long)]
    pub preserve_noatime: bool,

    /// POSIX ACLs (implies --xattr): offer FUSE_POSIX_ACL, so that the
    /// guest enforces ACLs and reads and sets them (getfacl/setfacl) on the
    /// host files; new files inherit a directory's default ACL, else get
    /// the caller's umask (the guest leaves it to the daemon,
    /// FUSE_DONT_MASK). `auto`: if the guest takes it; `always` (also the
    /// bare option): a guest that does not is refused at INIT; `never`
    /// (the default): the ACL attributes get EOPNOTSUPP. Not with
    /// --translate-uid/--translate-gid (ACL entries hold host IDs).
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "always")]
    pub posix_acl: Option<Negotiation>,

    /// Security labels (implies --xattr): offer FUSE_SECURITY_CTX, so that
    /// a file the guest creates gets, before the guest sees it, the security
    /// context its security module (SELinux) gave it, as the `security.`
    /// attribute it names; a file that cannot be labelled is removed and
    /// the create fails. `security.capability` is never accepted. `auto`: if
    /// the guest takes it; `always` (also the bare option): a guest that
    /// does not is refused at INIT; `never` (the default). On a host whose
    /// own security module does not handle the attribute, setting it needs
    /// CAP_SYS_ADMIN (--modcaps=+sys_admin).
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "always")]
    pub security_label: Option<Negotiation>,

    /// Change the capabilities kept as root (default: chown, dac_override,
    /// fowner, fsetid, setgid, setuid, mknod, setfcap), virtiofsd's syntax:
    /// `+name` adds, `-name` removes, `:`-separated, e.g.
    /// `--modcaps=+sys_admin:-mknod`.
    #[arg(long, value_name = "CAPS")]
    pub modcaps: Option<String>,

    /// Translate extended attribute names between guest and host, with
    /// virtiofsd's rules `<s>type<s>scope<s>key<s>prepend<s>` (type prefix,
    /// ok, bad or unsupported; scope client, server or all) or the short
    /// form `<s>map<s>key<s>prepend<s>`, e.g. `:map::user.virtiofs.:` (every
    /// guest attribute stored under user.virtiofs.). A guest name no rule
    /// matches is refused with EPERM; a host name no rule matches is hidden.
    /// A map that renames security.capability is refused (the host kernel
    /// would no longer clear it). Implies --xattr, as in virtiofsd.
    #[arg(long, value_name = "MAP")]
    pub xattrmap: Option<String>,

    /// Translate UIDs between guest and host in the daemon itself (no user
    /// namespace, as opposed to --uid-map), given as TYPE:FROM:TO:COUNT
    /// (any non-alphanumeric separator); repeat for more rules. TYPE:
    /// `guest` maps guest FROM.. to host TO.. (the caller's ID and a new
    /// owner); `host` maps host FROM.. to guest TO.. (the owners the guest
    /// sees); `map` does both (FROM is the guest's, TO the host's);
    /// `squash-guest` maps every guest ID of FROM.. to the one host ID TO;
    /// `squash-host` every host ID of FROM.. to the one guest ID TO;
    /// `forbid-guest:FROM:COUNT` refuses (EPERM) to create files as, or
    /// give files to, those guest IDs. IDs no rule covers stay as they are;
    /// rules may not overlap in one direction.
    #[arg(long, value_name = "MAP", action = clap::ArgAction::Append)]
    pub translate_uid: Vec<String>,

    /// As --translate-uid, for GIDs.
    #[arg(long, value_name = "MAP", action = clap::ArgAction::Append)]
    pub translate_gid: Vec<String>,

    /// VM live migration, on the source: how the inodes the guest holds are
    /// described to the destination (see MIGRATION). `find-paths`: by path
    /// inside the shared directory; `file-handles`: by file handle (the
    /// destination serves the same file system and runs with
    /// `--modcaps=+dac_read_search`). Ignored on the destination.
    #[arg(long, value_enum, value_name = "MODE", default_value = "find-paths")]
    pub migration_mode: MigrationMode,

    /// VM live migration, on the destination: what to do with an inode that
    /// cannot be found again. `abort`: fail the migration (the VM keeps
    /// running on the source); `guest-error`: finish it, the guest gets EIO
    /// for that file only. Ignored on the source.
    #[arg(long, value_enum, value_name = "MODE", default_value = "abort")]
    pub migration_on_error: MigrationOnError,

    /// VM live migration with find-paths, on the source: send each inode's
    /// file handle too; the destination checks that the file it opens has
    /// it (same shared directory on the same file system only), so that a
    /// file renamed or replaced by another process during the migration is
    /// detected rather than silently swapped.
    #[arg(long)]
    pub migration_verify_handles: bool,

    /// VM live migration with find-paths, on the source: prove each path at
    /// switch-over. This daemon proves every path with or without the
    /// option: the paths are taken while the device is stopped, and each is
    /// walked from the shared directory to the same file before it is sent.
    #[arg(long)]
    pub migration_confirm_paths: bool,

    /// VM live migration and snapshots, on the source: whose format the
    /// device state is written in. `xvirtiofsd` (the default) is read by
    /// xvirtiofsd; `virtiofsd` is upstream virtiofsd's own (its version 1,
    /// read by virtiofsd 1.11 to 1.14 and by xvirtiofsd), to move a VM to a
    /// host that runs virtiofsd. With `virtiofsd`, every node travels by
    /// path (`--migration-mode find-paths`) and the FUSE session stays as
    /// the destination's virtiofsd negotiated it; a node it cannot carry (a
    /// name that is not UTF-8) fails the migration, the VM running on here.
    #[arg(long, value_enum, default_value = "xvirtiofsd", value_name = "DAEMON")]
    pub migration_target: MigrationTarget,

    /// Old virtiofsd options: source=DIR, cache=auto|always|none|metadata, xattr,
    /// no_xattr, readdirplus, no_readdirplus, writeback, no_writeback, sandbox=…,
    /// loglevel=…, allow_direct_io, no_allow_direct_io, modcaps=…, xattrmap=…,
    /// killpriv_v2, no_killpriv_v2, announce_submounts, posix_acl,
    /// no_posix_acl, security_label, no_security_label, and the locks:
    /// posix_lock (the guest's POSIX record locks, fcntl F_SETLK/F_SETLKW,
    /// are held on the host as OFD locks, so other guests sharing the
    /// directory and host processes see them) and flock (flock(2) locks,
    /// likewise), no_posix_lock and no_flock (the defaults: the guest
    /// keeps its locks to itself). A guest waiting for a lock (F_SETLKW,
    /// blocking flock) waits without holding up its queue; a live upgrade,
    /// migration or ring stop ends such a wait with EINTR. Not with
    /// --crash-restart (a crash would drop the locks).
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub compat: Vec<String>,

    /// `-o posix_lock`.
    #[arg(skip)]
    pub posix_lock: bool,

    /// `-o flock`.
    #[arg(skip)]
    pub flock: bool,

    /// Run in a user namespace whose UIDs map to host UIDs, given as
    /// :INSIDE:OUTSIDE:COUNT: (INSIDE .. INSIDE+COUNT in the namespace are
    /// OUTSIDE .. OUTSIDE+COUNT on the host); repeat for more ranges. What
    /// the guest creates as uid 0 is then owned on the host by the uid 0
    /// maps to, and host files of unmapped UIDs belong to nobody (65534) in
    /// the guest. libvirt's `<idmap>` passes these. The kernel does the
    /// mapping (as opposed to --translate-uid); needs --sandbox namespace.
    /// As root the daemon writes the maps itself (unlike virtiofsd, which
    /// refuses them as root); unprivileged, ranges beyond its own uid need
    /// newuidmap (package uidmap) and /etc/subuid. An unprivileged daemon
    /// without maps maps its own uid and gid. In a user namespace the
    /// daemon cannot be live-upgraded and --crash-restart is refused.
    #[arg(long, value_name = "MAP", action = clap::ArgAction::Append)]
    pub uid_map: Vec<String>,

    /// As --uid-map, for GIDs (newgidmap and /etc/subgid when unprivileged).
    #[arg(long, value_name = "MAP", action = clap::ArgAction::Append)]
    pub gid_map: Vec<String>,

    /// The control socket, bound before the daemon entered its user
    /// namespace (set by main, never on the command line).
    #[arg(skip)]
    pub control_fd: Option<RawFd>,

    /// Deprecated: same as --log-level debug.
    #[arg(short = 'd', hide = true)]
    pub debug: bool,

    /// Accepted for compatibility (the daemon always stays in the foreground).
    #[arg(short = 'f', hide = true)]
    pub foreground: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--holder-socket is internal to --crash-restart")]
    HolderOnly,
    #[error("no shared directory: give --shared-dir DIR or -o source=DIR")]
    NoSharedDir,
    #[error("no socket: give --socket-path PATH or --fd FD")]
    NoSocket,
    #[error("invalid -o option `{0}`")]
    BadCompat(String),
    #[error("--tag `{0}`: a tag is 1 to 36 bytes (the virtio-fs configuration space)")]
    Tag(String),
    #[error("--dax-window {0}")]
    DaxWindow(&'static str),
    #[error("--posix-acl cannot be used with --translate-uid/--translate-gid: ACL entries name host IDs the guest would see untranslated")]
    PosixAclTranslate,
    #[error("--translate-uid/--translate-gid: {0}")]
    Translate(xvfs_fs::ids::RuleError),
    #[error("--uid-map/--gid-map: {0}")]
    IdMap(#[from] crate::confine::idmap::IdMapError),
    #[error("--uid-map/--gid-map need --sandbox namespace (a user namespace does the mapping)")]
    IdMapSandbox,
    #[error(
        "--crash-restart is not supported in a user namespace (--uid-map/--gid-map, or not root)"
    )]
    IdMapCrashRestart,
    #[error("--crash-restart cannot be used with -o posix_lock or -o flock: the locks live in the serving process's open files, which a crash closes")]
    LocksCrashRestart,
    #[error("--inode-file-handles needs CAP_DAC_READ_SEARCH: --modcaps may not remove it")]
    HandlesNeedCap,
    #[error("{option} is not supported: {why}")]
    Unsupported { option: String, why: &'static str },
    #[error("{0}")]
    ModCaps(String),
    #[error("{0}")]
    XattrMap(String),
}

fn unsupported(option: impl Into<String>, why: &'static str) -> CliError {
    CliError::Unsupported {
        option: option.into(),
        why,
    }
}

/// `--dax-window SIZE`: bytes, with an optional K, M or G suffix; a power of
/// two of at least 2 MiB (the guest maps 2 MiB chunks; QEMU needs a power
/// of two for the BAR).
fn parse_window(s: &str) -> Result<u64, String> {
    let (num, shift) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (bytes, or a number with K, M or G)"))?;
    let bytes = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 2 << 20 || !bytes.is_power_of_two() {
        return Err(format!(
            "`{s}`: the window is a power of two of at least 2M"
        ));
    }
    Ok(bytes)
}

impl Opt {
    /// `--dax-window` needs what the window is served with.
    fn check_dax(&self) -> Result<(), CliError> {
        if self.tag.is_none() {
            return Err(CliError::DaxWindow(
                "needs --tag: the device that has a window reads the virtio-fs \
                 configuration space from the daemon",
            ));
        }
        if self.readonly {
            return Err(CliError::DaxWindow(
                "needs a writable share: the VMM maps every range with a descriptor \
                 open for writing",
            ));
        }
        Ok(())
    }

    /// `--inode-file-handles` (`fallback` is `prefer`).
    pub fn file_handles(&self) -> virtio_fs_ext::config::FileHandles {
        use virtio_fs_ext::config::FileHandles;
        match self.inode_file_handles {
            None | Some(InodeFileHandles::Never) => FileHandles::Never,
            Some(InodeFileHandles::Prefer | InodeFileHandles::Fallback) => FileHandles::Prefer,
            Some(InodeFileHandles::Mandatory) => FileHandles::Mandatory,
        }
    }

    /// Folds the `-o` options into the typed ones and checks what must be present.
    pub fn resolve(&mut self) -> Result<(), CliError> {
        if self.holder_socket.is_some() && !self.crash_restart {
            return Err(CliError::HolderOnly);
        }
        let items: Vec<String> = self
            .compat
            .iter()
            .flat_map(|s| s.split(','))
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        for item in items {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item.as_str(), None),
            };
            match (key, value) {
                ("source", Some(v)) => self.shared_dir = Some(PathBuf::from(v)),
                ("cache", Some(v)) => {
                    self.cache = match v {
                        "none" | "never" => CacheMode::Never,
                        "auto" => CacheMode::Auto,
                        "metadata" => CacheMode::Metadata,
                        "always" => CacheMode::Always,
                        _ => return Err(CliError::BadCompat(item.clone())),
                    }
                }
                ("loglevel", Some(v)) => {
                    self.log_level = match v {
                        "debug" => LogLevel::Debug,
                        "info" => LogLevel::Info,
                        "warn" => LogLevel::Warn,
                        "err" | "error" => LogLevel::Error,
                        _ => return Err(CliError::BadCompat(item.clone())),
                    }
                }
                ("sandbox", Some(v)) => {
                    self.sandbox = SandboxMode::from_str(v, true)
                        .map_err(|_| CliError::BadCompat(item.clone()))?
                }
                ("xattr", None) => self.xattr = true,
                ("no_xattr", None) => self.xattr = false,
                ("readdirplus", None) => self.no_readdirplus = false,
                ("no_readdirplus", None) => self.no_readdirplus = true,
                ("writeback", None) => self.writeback = true,
                ("no_writeback", None) => self.writeback = false,
                ("allow_direct_io", None) => self.allow_direct_io = true,
                ("no_allow_direct_io", None) => self.allow_direct_io = false,
                // The defaults, named.
                ("no_killpriv_v2", None) => self.killpriv_v2 = false,
                ("no_flock", None) => self.flock = false,
                ("no_posix_lock", None) => self.posix_lock = false,
                ("no_posix_acl", None) => self.posix_acl = Some(Negotiation::Never),
                ("no_security_label", None) => self.security_label = Some(Negotiation::Never),
                ("flock", None) => self.flock = true,
                ("posix_lock", None) => self.posix_lock = true,
                ("killpriv_v2", None) => self.killpriv_v2 = true,
                ("posix_acl", None) => self.posix_acl = Some(Negotiation::Always),
                ("security_label", None) => self.security_label = Some(Negotiation::Always),
                ("announce_submounts", None) => self.announce_submounts = true,
                ("xattrmap", Some(v)) => self.xattrmap = Some(v.to_string()),
                ("modcaps", Some(v)) => self.modcaps = Some(v.to_string()),
                _ => return Err(CliError::BadCompat(item.clone())),
            }
        }
        if self.socket_path.is_none() {
            self.socket_path = self.socket_alias.take();
        }
        if self.debug {
            self.log_level = LogLevel::Debug;
        }
        if !self.uid_map.is_empty() || !self.gid_map.is_empty() {
            crate::confine::idmap::parse(&self.uid_map)?;
            crate::confine::idmap::parse(&self.gid_map)?;
            if self.sandbox != SandboxMode::Namespace {
                return Err(CliError::IdMapSandbox);
            }
        }
        if self.crash_restart && self.sandbox == SandboxMode::Namespace && self.id_maps().is_some()
        {
            return Err(CliError::IdMapCrashRestart);
        }
        if self.crash_restart && (self.posix_lock || self.flock) {
            return Err(CliError::LocksCrashRestart);
        }
        if let Some(t) = self.tag.as_ref().filter(|t| t.is_empty() || t.len() > 36) {
            return Err(CliError::Tag(t.clone()));
        }
        if self.dax_window.is_some() {
            self.check_dax()?;
        }
        xvfs_fs::ids::Translation::parse(&self.translate_uid, &self.translate_gid)
            .map_err(CliError::Translate)?;
        if matches!(
            self.security_label,
            Some(Negotiation::Auto | Negotiation::Always)
        ) {
            self.xattr = true;
        }
        if matches!(
            self.posix_acl,
            Some(Negotiation::Auto | Negotiation::Always)
        ) {
            if !self.translate_uid.is_empty() || !self.translate_gid.is_empty() {
                return Err(CliError::PosixAclTranslate);
            }
            self.xattr = true;
        }
        self.refuse_unsupported()?;
        if let Some(m) = &self.xattrmap {
            xvfs_fs::passthrough::XattrMap::parse(m)
                .map_err(|e| CliError::XattrMap(e.to_string()))?;
            // As in virtiofsd: a map is of no use without extended attributes.
            self.xattr = true;
        }
        if let Some(m) = &self.modcaps {
            crate::confine::caps::mask(Some(m)).map_err(|e| CliError::ModCaps(e.to_string()))?;
            let removed = m.split(':').any(|c| {
                let c = c.trim().to_ascii_lowercase();
                c.strip_prefix('-')
                    .map(|n| n.strip_prefix("cap_").unwrap_or(n) == "dac_read_search")
                    .unwrap_or(false)
            });
            if removed && self.file_handles() != virtio_fs_ext::config::FileHandles::Never {
                return Err(CliError::HandlesNeedCap);
            }
        }
        if self.print_capabilities {
            return Ok(());
        }
        if self.shared_dir.is_none() {
            return Err(CliError::NoSharedDir);
        }
        if self.handover_from.is_some() {
            // A successor's security settings come from here, never from the
            // state it receives; it binds no socket.
            return Ok(());
        }
        if self.socket_path.is_none() && self.fd.is_none() {
            return Err(CliError::NoSocket);
        }
        Ok(())
    }
}

impl Opt {
    /// The user namespace the daemon runs in (`--sandbox namespace` only):
    /// see [`crate::confine::idmap::IdMaps::plan`]. Call after [`Opt::resolve`].
    pub fn id_maps(&self) -> Option<crate::confine::idmap::IdMaps> {
        if self.sandbox != SandboxMode::Namespace {
            return None;
        }
        let uid = crate::confine::idmap::parse(&self.uid_map).unwrap_or_default();
        let gid = crate::confine::idmap::parse(&self.gid_map).unwrap_or_default();
        crate::confine::idmap::IdMaps::plan(uid, gid)
    }

    /// Every virtiofsd option this daemon cannot honour is refused, never
    /// accepted and ignored.
    fn refuse_unsupported(&self) -> Result<(), CliError> {
        let handles = self.migration_mode == MigrationMode::FileHandles;
        let refused: [(bool, &str, &'static str); 2] = [
            (
                handles && (self.migration_verify_handles || self.migration_confirm_paths),
                "--migration-verify-handles/--migration-confirm-paths",
                "they only apply to --migration-mode=find-paths (file handles need no check)",
            ),
            (
                handles && self.migration_target == MigrationTarget::Virtiofsd,
                "--migration-target=virtiofsd with --migration-mode=file-handles",
                "virtiofsd reads file handles only from its own mounts; use find-paths",
            ),
        ];
        match refused.into_iter().find(|(given, _, _)| *given) {
            Some((_, option, why)) => Err(unsupported(option, why)),
            None => Ok(()),
        }
    }
}

/// What `--print-capabilities` describes: the vhost-user back-end type and
/// its features, in the vhost-user JSON form libvirt reads.
#[derive(Debug, serde::Serialize)]
struct Capabilities {
    #[serde(rename = "type")]
    kind: &'static str,
    features: &'static [&'static str],
}

/// The JSON libvirt reads from `--print-capabilities` (of a daemon with a
/// DAX window if `dax`).
pub fn capabilities_json(dax: bool) -> String {
    let caps = Capabilities {
        kind: "fs",
        // "migrate-precopy": the device state travels in QEMU's migration
        // stream (VHOST_USER_PROTOCOL_F_DEVICE_STATE), so libvirt may
        // migrate the domain. Not with a DAX window: QEMU 11 refuses to
        // migrate a device with shared-memory regions, and the mappings
        // could not travel.
        features: if dax {
            &["separate-options"]
        } else {
            &["migrate-precopy", "separate-options"]
        },
    };
    // Serializing two static strings cannot fail; an empty object would
    // only make libvirt see no features.
    serde_json::to_string_pretty(&caps).unwrap_or_else(|_| String::from("{}"))
}

#[cfg(test)]
mod tests;

/// `N/SECONDS` of --crash-restart-limit: both at least 1.
fn parse_limit(s: &str) -> Result<(u32, u64), String> {
    let bad = || format!("`{s}`: expected N/SECONDS, both at least 1 (e.g. 5/60)");
    let (n, secs) = s.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let secs: u64 = secs.trim().parse().map_err(|_| bad())?;
    if n == 0 || secs == 0 {
        return Err(bad());
    }
    Ok((n, secs))
}
