// SPDX-License-Identifier: Apache-2.0
//! `--config FILE`: options read from a file of `key=value` lines whose
//! keys are the long options, turned into command-line arguments placed
//! before the real ones (which therefore win: the command is parsed with
//! `args_override_self`). The systemd unit's own keys (SHARED_DIR, SOCKET,
//! OPTIONS) are read too, so that its EnvironmentFile serves as is.

use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory};

use super::{commands, Opt};

/// The largest configuration file read: a few hundred lines at most.
const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--config given more than once")]
    Twice,
    #[error("--config needs a FILE")]
    NoFile,
    #[error("--config {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("--config {0}: larger than {MAX_BYTES} bytes: not a configuration file")]
    TooLarge(PathBuf),
    #[error("--config {0}:{1}: {2}")]
    Line(PathBuf, usize, String),
}

/// `argv` with `--config FILE` replaced by the file's options, put right
/// after the program name. The commands (`status`, `upgrade`,
/// `completions`) take no configuration file: their arguments (an
/// upgrade's new daemon's options) are left alone.
pub fn expand(argv: Vec<String>) -> Result<Vec<String>, ConfigError> {
    if argv
        .get(1)
        .is_some_and(|a| commands::NAMES.contains(&a.as_str()))
    {
        return Ok(argv);
    }
    let mut rest = Vec::with_capacity(argv.len());
    let mut file: Option<PathBuf> = None;
    let mut it = argv.into_iter();
    let program = it.next();
    while let Some(a) = it.next() {
        if a == "--" {
            rest.push(a);
            rest.extend(it.by_ref());
            break;
        }
        let given = match a.strip_prefix("--config") {
            Some("") => Some(it.next().ok_or(ConfigError::NoFile)?),
            Some(v) if v.starts_with('=') => Some(v[1..].to_string()),
            _ => None,
        };
        match given {
            Some(_) if file.is_some() => return Err(ConfigError::Twice),
            Some(f) if f.is_empty() => return Err(ConfigError::NoFile),
            Some(f) => file = Some(PathBuf::from(f)),
            None => rest.push(a),
        }
    }
    let mut out: Vec<String> = program.into_iter().collect();
    if let Some(f) = file {
        out.extend(read(&f)?);
    }
    out.extend(rest);
    Ok(out)
}

/// The arguments a configuration file stands for.
pub fn read(path: &Path) -> Result<Vec<String>, ConfigError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| ConfigError::Read(path.into(), e))?;
    let mut text = String::new();
    f.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| ConfigError::Read(path.into(), e))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(ConfigError::TooLarge(path.into()));
    }
    parse(&text).map_err(|(n, why)| ConfigError::Line(path.into(), n, why))
}

/// The arguments of a configuration file's text, or the number of the
/// first bad line and what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<String>, (usize, String)> {
    let cmd = Opt::command();
    let mut args = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), unquote(v.trim())),
            None => (line, ""),
        };
        let key = key.to_ascii_lowercase().replace('_', "-");
        option_args(&cmd, &key, value, &mut args).map_err(|why| (i + 1, why))?;
    }
    Ok(args)
}

/// A value without the one pair of quotes around it.
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// Appends what `key=value` stands for to `args`.
fn option_args(
    cmd: &clap::Command,
    key: &str,
    value: &str,
    args: &mut Vec<String>,
) -> Result<(), String> {
    let long = match key {
        // The systemd unit's EnvironmentFile keys.
        "socket" => "socket-path",
        "options" => {
            args.extend(value.split_whitespace().map(unquote).map(str::to_owned));
            return Ok(());
        }
        k => k,
    };
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some(long) && !a.is_hide_set() && long != "config")
        .ok_or_else(|| {
            format!("unknown key `{key}` (the keys are the long options, e.g. shared-dir=DIR)")
        })?;
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        match value.to_ascii_lowercase().as_str() {
            "" | "true" | "yes" | "1" | "on" => args.push(format!("--{long}")),
            "false" | "no" | "0" | "off" => {}
            _ => return Err(format!("`{key}` is a flag: give true or false")),
        }
    } else if value.is_empty() && arg.get_num_args().is_some_and(|r| r.min_values() == 0) {
        args.push(format!("--{long}"));
    } else if value.is_empty() {
        return Err(format!("`{key}` needs a value ({key}=VALUE)"));
    } else {
        args.push(format!("--{long}={value}"));
    }
    Ok(())
}
