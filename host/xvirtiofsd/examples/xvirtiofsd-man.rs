// SPDX-License-Identifier: Apache-2.0
//! Writes the manual pages of `xvirtiofsd` from its clap definition:
//! `xvirtiofsd.1`, and `xvirtiofsd-status.1`, `xvirtiofsd-upgrade.1`,
//! `xvirtiofsd-completions.1` for its commands, in DIR.
//!
//! `cargo run -p xvirtiofsd --example xvirtiofsd-man -- DIR`
//! (used by `make deb` and `make install`). An example, not a binary:
//! clap_mangen is a dev-dependency and the daemon does not carry it.
//!
//! clap_mangen renders the text after the options as one section called
//! EXTRA; here each of its `TITLE:` blocks (EXAMPLES, EXIT STATUS, ...)
//! becomes a section of its own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use xvirtiofsd::cli::Opt;

/// The `TITLE:` blocks of a help text after the options: (title, lines).
pub fn sections(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let title = line
            .strip_suffix(':')
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_uppercase() || b == b' '));
        match (title, out.last_mut()) {
            (Some(t), _) => out.push((t.to_string(), Vec::new())),
            (None, Some((_, lines))) => lines.push(line.to_string()),
            (None, None) => {}
        }
    }
    out
}

/// A line of text as roff prints it verbatim.
fn roff_line(line: &str) -> String {
    let s = line.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The manual page of `cmd`, named `name`.
pub fn page(cmd: clap::Command, name: &str) -> std::io::Result<Vec<u8>> {
    let after = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    // A program that writes a few pages and exits: the names may live on.
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let cmd = cmd
        .name(name)
        .after_help("")
        .after_long_help("")
        .subcommand_help_heading("COMMANDS");
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    for (title, lines) in sections(&after) {
        out.extend_from_slice(format!(".SH \"{title}\"\n.nf\n").as_bytes());
        for l in lines {
            let l = l.strip_prefix("    ").unwrap_or(&l);
            out.extend_from_slice(roff_line(l).as_bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(b".fi\n");
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// Every page: (file name, contents).
pub fn pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let top = Opt::command();
    let mut all = vec![("xvirtiofsd.1".to_string(), page(top.clone(), "xvirtiofsd")?)];
    for sub in top.get_subcommands() {
        let name = format!("xvirtiofsd-{}", sub.get_name());
        all.push((format!("{name}.1"), page(sub.clone(), &name)?));
    }
    Ok(all)
}

fn write_all(dir: &Path) -> Result<(), String> {
    let pages = pages().map_err(|e| e.to_string())?;
    for (file, text) in pages {
        std::fs::write(dir.join(&file), text)
            .map_err(|e| format!("{}: {e}", dir.join(file).display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: xvirtiofsd-man DIR");
        return ExitCode::from(2);
    };
    match write_all(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xvirtiofsd-man: {e}");
            ExitCode::FAILURE
        }
    }
}
