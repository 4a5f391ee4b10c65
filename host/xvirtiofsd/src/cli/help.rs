// SPDX-License-Identifier: Apache-2.0
//! The words of `--help` and of the manual page: the description, and the
//! sections after the options, each a title and its text, so that
//! `--help` prints them and the manual page makes each a section of its
//! own (examples/xvirtiofsd-man.rs).

use std::sync::OnceLock;

pub const ABOUT: &str =
    "vhost-user-fs back-end: serves a host directory to virtual machines over virtio-fs";

pub const LONG_ABOUT: &str = "\
xvirtiofsd serves the directory SHARED_DIR to a virtual machine as a virtio-fs file \
system. QEMU (or libvirt) connects to it over a vhost-user Unix socket; the guest \
mounts the share with `mount -t virtiofs TAG /mnt`.

The daemon listens on --socket-path (or on the listening socket passed as --fd), \
accepts one front-end connection, serves it with one worker thread per virtqueue, \
and exits when the front-end disconnects.

Nothing a guest sends can reach outside SHARED_DIR: every path is resolved one \
component at a time relative to file descriptors inside it, symbolic links are never \
followed, and the process is confined with --sandbox.

A running daemon is inspected and replaced with the commands `xvirtiofsd status` \
and `xvirtiofsd upgrade` (see Commands); `xvirtiofsd completions SHELL` prints \
shell completions.";

/// The sections after the options: (title, text indented by four spaces).
pub const SECTIONS: &[(&str, &str)] = &[
    (
        "EXAMPLES",
        "\
    Serve /srv/share to QEMU:
        xvirtiofsd --socket-path /run/vfs.sock --shared-dir /srv/share --cache auto &
        qemu-system-x86_64 ... \\
          -object memory-backend-memfd,id=mem,size=4G,share=on -numa node,memdev=mem \\
          -chardev socket,id=char0,path=/run/vfs.sock \\
          -device vhost-user-fs-pci,chardev=char0,tag=share,queue-size=1024
    In the guest:
        mount -t virtiofs share /mnt

    As libvirt starts it (domain XML <filesystem> with <driver type='virtiofs'/>):
        xvirtiofsd --fd=31 --shared-dir /srv/share

    Old virtiofsd compat syntax:
        xvirtiofsd --socket-path /run/vfs.sock -o source=/srv/share,cache=always,xattr

    The daemons running on this host, and one's counters for Prometheus:
        xvirtiofsd status
        xvirtiofsd status --pid 1234 --format prometheus",
    ),
    (
        "CONFIGURATION FILE",
        "\
    --config FILE reads options from FILE, one `key=value` per line, where
    the key is a long option without its dashes (`shared-dir=/srv/share`,
    `cache=never`); a flag takes `true` or `false` (`xattr=true`); an
    option given more than once on the command line (--translate-uid) may
    be given on more lines. Blank lines and lines starting with `#` are
    skipped, and a value may be quoted with \"...\" or '...'. The command
    line wins over the file. The keys of the systemd unit's file
    /etc/xvirtiofsd/NAME.conf are read too: SHARED_DIR, SOCKET (the socket
    path) and OPTIONS (more options, split at white space), so that
        xvirtiofsd --config /etc/xvirtiofsd/data.conf
    serves what xvirtiofsd@data.service serves. Upper case and `_` are
    read as lower case and `-`.",
    ),
    (
        "ENVIRONMENT",
        "\
    RUST_LOG
        As in virtiofsd: when set, it chooses what is logged instead of
        --log-level (not with --syslog, which uses --log-level): a level
        (error, warn, info, debug, trace, off) for everything, and
        `MODULE=LEVEL` for the messages of one module and the modules
        under it, comma-separated, e.g.
        `RUST_LOG=warn,xvirtiofsd::virtqueue=debug`. An error that ends
        start-up is printed to standard error whatever the level.",
    ),
    (
        "POLLING",
        "\
    One worker thread serves each virtqueue. After a batch of requests it keeps
    guest notifications off and polls the ring for --poll-us microseconds; only
    if nothing arrives does it re-enable notifications, check the ring once more
    and sleep on the kick eventfd. Polling saves the wake-up (tens of
    microseconds) on every request of a busy queue, but each polling microsecond
    is a host CPU taken from the guest: on a host with 2 CPUs or fewer the
    default window is 0, and --poll adaptive stops polling while requests arrive
    more slowly than the window plus the measured wake-up cost (the gap beyond
    which a poll would spin through the whole window and still sleep), and
    pauses polling (100 ms, doubling up to 1.6 s while it persists) when the
    scheduler keeps preempting the worker while it polls: another thread, a
    vCPU or a client, wants that CPU, and spinning would take it from them.
    --poll-cpu-max bounds the spinning itself: with --poll-cpu-max 20 a worker
    polls at most 20 % of the time, whatever the traffic, and sleeps on the
    kick eventfd once its credit is spent.",
    ),
    (
        "MIGRATION",
        "\
    A VM with an xvirtiofsd share can be live-migrated (QEMU >= 8.2, `virsh
    migrate --live`): both hosts serve the same directory (NFS, CephFS, or one
    directory for two QEMU processes), and the destination QEMU starts its own
    xvirtiofsd. While QEMU copies memory the daemon logs the guest pages it
    writes; at switch-over it describes every inode the guest holds and every
    open file (--migration-mode) into QEMU's migration stream, and the
    destination opens them again under the same ids: open files, the working
    directory and inode numbers carry on. A destination also accepts the
    stream of virtiofsd 1.11-1.14. See docs/migration.md.",
    ),
    (
        "CACHE MODES",
        "\
    never     no caching in the guest: every access goes to the host (direct I/O)
    auto      metadata and page cache valid for 1 s (default)
    metadata  metadata cached for a day, file data not cached across opens
    always    metadata cached for a day, page cache kept across opens
              (only when nothing but this guest changes the directory)",
    ),
    (
        "EXIT STATUS",
        "\
    0   the front-end disconnected (normal end of a VM), the connection was
        handed over to a successor (live upgrade), or --help/--version/
        --print-capabilities
    1   a runtime error ended serving (the message says what failed)
    2   invalid command line (or --config FILE)
    3   set-up failed: shared directory, socket, sandbox or seccomp, or (with
        --handover-from) the predecessor's state was refused
    128+N
        the daemon was ended by signal N (with --sandbox namespace the started
        process supervises the daemon in its PID namespace, passes TERM, INT,
        HUP, QUIT, USR1 and USR2 on, and exits with the daemon's status)",
    ),
    (
        "SEE ALSO",
        "\
    xvirtiofsd-status(1), xvirtiofsd-upgrade(1), xvirtiofsd-completions(1);
    /usr/share/doc/xvirtiofsd, and in the source tree README.md and docs/
    (troubleshooting.md: the usual failures, with the message and the fix).",
    ),
];

/// `--help`'s text after the options: every section, titled.
pub fn after_help() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        SECTIONS
            .iter()
            .map(|(title, text)| format!("{title}:\n{text}"))
            .collect::<Vec<_>>()
            .join("\n\n")
    })
}

pub const USAGE: &str = "xvirtiofsd [OPTIONS] --shared-dir DIR (--socket-path PATH | --fd FD)
       xvirtiofsd [OPTIONS] --config FILE
       xvirtiofsd <COMMAND> [ARGS]";

pub const STATUS_ABOUT: &str = "Print running daemons: every one found (no argument), or one's \
version, pid, uptime, connection and per-queue counters (JSON or Prometheus text)";

pub const STATUS_LONG_ABOUT: &str = "\
Without --pid or --control, lists the daemons it can find: each control socket in \
/run/xvirtiofsd (the default `PID.sock` ones and those a systemd unit names, \
`NAME.control`), with its pid, shared directory and uptime, or why it does not \
answer. With --pid or --control, prints that daemon's status: version, pid, uptime, \
upgrades, connection and per-queue counters, as JSON (the default) or, with \
--format prometheus, in Prometheus's text exposition format (the metric names are \
listed in docs/metrics.md).";

pub const UPGRADE_ABOUT: &str =
    "Replace a running xvirtiofsd by a new binary without disconnecting the guest";

pub const UPGRADE_LONG_ABOUT: &str = "\
Starts BINARY (default: this program) detached, which takes over the \
running daemon's vhost-user connection, guest memory, eventfds and open files over \
the control socket. The guest sees a pause of milliseconds. If the new daemon fails \
before it is ready, the running daemon keeps serving and this command exits 1, \
saying where the new daemon's messages went. \
On success it returns once the old daemon has exited (waiting up to 10 s, with a \
warning if it has not).";

pub const UPGRADE_AFTER_HELP: &str = "\
EXIT STATUS:
    0   upgraded
    1   not upgraded (the running daemon still serves)
    2   invalid command line";

pub const COMPLETIONS_ABOUT: &str = "Print the completion script of a shell";

pub const COMPLETIONS_LONG_ABOUT: &str = "\
Prints the completion script of SHELL for xvirtiofsd, its options and its commands, \
to standard output. For example:
    xvirtiofsd completions bash > /etc/bash_completion.d/xvirtiofsd
    xvirtiofsd completions zsh > /usr/local/share/zsh/site-functions/_xvirtiofsd
    xvirtiofsd completions fish > ~/.config/fish/completions/xvirtiofsd.fish
`make install` and the Debian package install the bash, zsh and fish ones.";
