// SPDX-License-Identifier: Apache-2.0
//! `loadgen`: a load generator for vhost-user-fs back-ends. It plays the VMM
//! (vhost-user front-end: features, memory table, vrings) and the guest's
//! virtio-fs driver (split rings in a memfd, FUSE requests) at once, runs one
//! workload from T client threads per request queue, and prints throughput
//! and latency percentiles as JSON. `loadgen native` runs the same operations
//! as plain system calls on the host, as the limit to compare with.

mod cli;
mod client;
mod fixture;
mod fuse;
mod mem;
mod native;
mod ring;
mod run;
mod stats;
mod vmm;
mod workload;

use std::process::ExitCode;

use clap::Parser;

/// Exit status: the run failed (back-end, protocol, fixture, output).
const EXIT_RUNTIME: u8 = 1;
/// Exit status: invalid command line.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let args = match cli::Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match run::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("loadgen: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("{msg}");
            ExitCode::from(if e.is_usage() {
                EXIT_USAGE
            } else {
                EXIT_RUNTIME
            })
        }
    }
}
