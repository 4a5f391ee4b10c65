// SPDX-License-Identifier: Apache-2.0
//! Writes the manual pages of `xvirtiofsd` from its clap definition:
//! `xvirtiofsd.1`, `xvirtiofsd-status.1` and `xvirtiofsd-upgrade.1` in DIR.
//!
//! `cargo run --release -p xvirtiofsd --example xvirtiofsd-man -- DIR`
//! (used by `make deb`). An example, not a binary: clap_mangen is a
//! dev-dependency and the daemon does not carry it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use xvirtiofsd::cli::{Opt, StatusOpt, UpgradeOpt};

fn write_page(dir: &Path, file: &str, cmd: clap::Command) -> std::io::Result<()> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out)?;
    std::fs::write(dir.join(file), out)
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: xvirtiofsd-man DIR");
        return ExitCode::from(2);
    };
    let pages = [
        ("xvirtiofsd.1", Opt::command().name("xvirtiofsd")),
        (
            "xvirtiofsd-status.1",
            StatusOpt::command().name("xvirtiofsd-status"),
        ),
        (
            "xvirtiofsd-upgrade.1",
            UpgradeOpt::command().name("xvirtiofsd-upgrade"),
        ),
    ];
    for (file, cmd) in pages {
        if let Err(e) = write_page(&dir, file, cmd) {
            eprintln!("xvirtiofsd-man: {}: {e}", dir.join(file).display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
