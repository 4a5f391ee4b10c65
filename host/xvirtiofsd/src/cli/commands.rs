// SPDX-License-Identifier: Apache-2.0
//! The commands beside the daemon: `status`, `upgrade` and `completions`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::help;

/// `xvirtiofsd COMMAND`: what talks to a running daemon instead of serving.
#[derive(Debug, Subcommand)]
pub enum Command {
    #[command(about = help::STATUS_ABOUT, long_about = help::STATUS_LONG_ABOUT)]
    Status(StatusOpt),
    #[command(
        about = help::UPGRADE_ABOUT,
        long_about = help::UPGRADE_LONG_ABOUT,
        after_long_help = help::UPGRADE_AFTER_HELP
    )]
    Upgrade(UpgradeOpt),
    #[command(about = help::COMPLETIONS_ABOUT, long_about = help::COMPLETIONS_LONG_ABOUT)]
    Completions(CompletionsOpt),
}

/// The names of [`Command`], as the first argument.
pub const NAMES: [&str; 3] = ["status", "upgrade", "completions"];

/// How `status` prints a daemon's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// The daemon's own JSON object (a list of them without --pid/--control).
    Json,
    /// Prometheus's text exposition format (docs/metrics.md).
    Prometheus,
}

/// `xvirtiofsd status`: print a running daemon's state.
#[derive(Debug, Args)]
pub struct StatusOpt {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// The daemon's pid (its control socket is /run/xvirtiofsd/PID.sock).
    #[arg(long, value_name = "PID", conflicts_with = "control")]
    pub pid: Option<u32>,
    /// Output format. Without --pid or --control: `json` lists every
    /// daemon's status, and the default is a table.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<StatusFormat>,
}

/// `xvirtiofsd upgrade`: replace a running daemon without guest downtime.
#[derive(Debug, Args)]
pub struct UpgradeOpt {
    /// The running daemon's control socket.
    #[arg(long, value_name = "PATH", required_unless_present = "pid")]
    pub control: Option<PathBuf>,
    /// The running daemon's pid (its control socket is /run/xvirtiofsd/PID.sock).
    #[arg(long, value_name = "PID", conflicts_with = "control")]
    pub pid: Option<u32>,
    /// The new daemon binary [default: this program].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Seconds to wait for the new daemon to confirm.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub timeout: u64,
    /// The new daemon's options (after `--`): the running daemon's, as
    /// recorded at its first start in CONTROL.args. Only the cache mode,
    /// direct I/O, readdirplus, queues, polling and log level may differ:
    /// `upgrade` refuses other differences (--modcaps included) before it
    /// starts anything, and the new daemon refuses to take over unless its
    /// settings equal the running daemon's.
    #[arg(last = true, value_name = "DAEMON-OPTIONS")]
    pub daemon_args: Vec<String>,
}

/// The shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    #[value(name = "powershell")]
    PowerShell,
}

/// `xvirtiofsd completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsOpt {
    /// The shell to write the completion script of.
    #[arg(value_enum)]
    pub shell: Shell,
}
