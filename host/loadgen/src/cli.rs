// SPDX-License-Identifier: Apache-2.0
//! Command line.

use std::path::PathBuf;

use crate::client::Wait;
use crate::workload::Kind;

/// Load generator for vhost-user-fs back-ends (xvirtiofsd, virtiofsd, ...).
///
/// `run` connects to a back-end's socket (starting it first when a command is
/// given after `--`), plays VMM and guest driver, runs one workload and prints
/// JSON. `native` runs the same operations as host system calls. Both create
/// their files under DIR/xvfs-loadgen/ (DIR = the back-end's shared directory).
#[derive(Debug, clap::Parser)]
#[command(version, after_help = EXAMPLES)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
}

const EXAMPLES: &str = "EXAMPLES:
    4 KB reads at depth 1 against xvirtiofsd, started by loadgen:
        loadgen run --socket /tmp/lg.sock --dir /tmp/share --workload read --bs 4k -- \\
            host/target/release/xvirtiofsd --socket-path /tmp/lg.sock --shared-dir /tmp/share \\
            --cache auto --sandbox none
    The same on the host (the limit):
        loadgen native --dir /tmp/share --workload read --bs 4k";

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Run a workload against a vhost-user-fs back-end.
    Run(RunArgs),
    /// Run the same workload as plain system calls on the host.
    Native(Common),
    /// Only create the fixture files under DIR/xvfs-loadgen/.
    Prepare {
        /// The shared directory.
        #[arg(long)]
        dir: PathBuf,
    },
}

/// Options of both `run` and `native`.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Host path of the shared directory (fixture files go in DIR/xvfs-loadgen/)
    #[arg(long)]
    pub dir: PathBuf,
    /// Workload
    #[arg(long, value_enum, default_value = "read")]
    pub workload: Kind,
    /// READ/WRITE size: bytes, or with a k/m suffix (at most 1m)
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub bs: u32,
    /// Client threads (per request queue for `run`; in total for `native`)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// Operations each client thread keeps in flight (`native`: always 1)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub depth: u32,
    /// Measured seconds (after the warm-up)
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Warm-up seconds before the measured window (operations not recorded)
    #[arg(long, default_value_t = 0.5)]
    pub warmup: f64,
    /// Measure this many operations per thread instead of a duration
    #[arg(long)]
    pub count: Option<u64>,
    /// READDIRPLUS buffer size (a 6.x guest asks for up to the getdents buffer, 32 KiB with glibc)
    #[arg(long, default_value = "32k", value_parser = parse_size)]
    pub readdir_buf: u32,
    /// Free-form label copied into the JSON
    #[arg(long, default_value = "")]
    pub label: String,
    /// Write the JSON here instead of standard output
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// Options of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,
    /// The back-end's vhost-user socket
    #[arg(long)]
    pub socket: PathBuf,
    /// Request queues to set up (plus the hiprio queue)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub queues: u32,
    /// How client threads wait for replies: sleep on the call eventfd (as a
    /// guest takes an interrupt) or spin on the used index
    #[arg(long, value_enum, default_value = "event")]
    pub wait: Wait,
    /// Client threads in total, spread over the request queues round-robin
    /// (instead of --threads per queue); with more queues than clients the
    /// other queues stay idle
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients: Option<u32>,
    /// Virtqueue size (power of two; 4 descriptors per request in flight)
    #[arg(long, default_value_t = 256)]
    pub queue_size: u16,
    /// Back-end command to start (after `--`); it must listen on --socket.
    /// Without it, loadgen connects to a back-end that is already listening.
    #[arg(last = true)]
    pub daemon: Vec<String>,
}

/// Parses `4096`, `4k`, `1m`.
pub fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 1024),
        Some(b'm') => (&t[..t.len() - 1], 1024 * 1024),
        _ => (&t[..], 1),
    };
    let n: u32 = num.parse().map_err(|_| format!("`{s}` is not a size"))?;
    let v = n
        .checked_mul(mul)
        .filter(|&v| v > 0 && v <= 1 << 20)
        .ok_or_else(|| format!("`{s}`: sizes go from 1 byte to 1m"))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("2m").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn daemon_after_double_dash() {
        let a = Args::try_parse_from([
            "loadgen", "run", "--socket", "/s", "--dir", "/d", "--queues", "2", "--", "/bin/d",
            "--x",
        ])
        .expect("parse");
        match a.cmd {
            Cmd::Run(r) => {
                assert_eq!(r.daemon, ["/bin/d", "--x"]);
                assert_eq!(r.queues, 2);
                assert_eq!(r.common.bs, 4096);
            }
            _ => panic!("not run"),
        }
    }
}
