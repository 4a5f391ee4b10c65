// SPDX-License-Identifier: Apache-2.0
//! `xvirtiofsd completions SHELL`: the shell's completion script, made by
//! clap_complete from the same clap definition as `--help`, so that it
//! always offers the options and commands of this build.

use clap::CommandFactory;

use super::{Opt, Shell};

/// Writes `shell`'s completion script for `xvirtiofsd` to `out`.
pub fn write(shell: Shell, out: &mut dyn std::io::Write) {
    use clap_complete::Shell as S;
    let shell = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
        Shell::Elvish => S::Elvish,
        Shell::PowerShell => S::PowerShell,
    };
    clap_complete::generate(shell, &mut Opt::command(), "xvirtiofsd", out);
}
