// SPDX-License-Identifier: Apache-2.0
//! `xfilebench -f WORKLOAD.f [-D var=value]… [--json OUT]`: runs a Filebench
//! workload and prints Filebench's per-flowop breakdown and IO Summary.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use xvfs_filebench::{parse, result, Engine, Error, Options};

/// Runs a Filebench workload (.f file) with threads; prints Filebench's
/// summary and writes a JSON result.
#[derive(Debug, Parser)]
#[command(name = "xfilebench", version)]
struct Cli {
    /// The workload file.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Override a $variable (wins over `set` in the file); repeatable.
    #[arg(short = 'D', value_name = "VAR=VALUE")]
    defines: Vec<String>,
    /// A file of VAR=VALUE lines (# comments), applied before -D.
    #[arg(long, value_name = "FILE")]
    vars: Vec<PathBuf>,
    /// Write the JSON result here (also when the run fails).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Seed of the random choices (file sizes, tree, offsets).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// sync and drop the kernel caches after creating the filesets (root).
    #[arg(long)]
    drop_caches: bool,
    /// Shell command run after creating the filesets, before each run.
    #[arg(long, value_name = "CMD")]
    pre_run: Option<String>,
    /// Seconds the threads of a run may take to stop.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Exact figures instead of Filebench's: a run that ends itself (quit
    /// mode, finish condition, out of files) is divided by the time it took,
    /// not by the whole seconds Filebench's once-a-second check counts, and
    /// `eventgen` posts each event on time instead of in batches of ten.
    #[arg(long)]
    exact: bool,
    /// Parse only; print nothing but errors.
    #[arg(long)]
    check: bool,
    /// Print nothing but the summary lines and errors.
    #[arg(short, long)]
    quiet: bool,
}

/// Exit codes.
#[repr(u8)]
enum Exit {
    /// The workload ran (or parsed, with --check).
    Ok = 0,
    /// A run failed or the workload is malformed.
    Failed = 1,
    /// Bad command line (clap's own code).
    Usage = 2,
}

fn split_define(s: &str) -> Result<(&str, &str), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim(), v.trim()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("-D {s}: expected VAR=VALUE"))
}

fn run(cli: &Cli) -> Result<(), (Error, Option<Box<Engine>>)> {
    let name = cli.file.display().to_string();
    let src = std::fs::read_to_string(&cli.file).map_err(|e| {
        (
            Error::Read {
                path: name.clone(),
                source: e,
            },
            None,
        )
    })?;
    let script = parse(&name, &src).map_err(|e| (e.into(), None))?;
    if cli.check {
        return Ok(());
    }
    let mut vars = xvfs_filebench::value::Vars::default();
    for vf in &cli.vars {
        let text = std::fs::read_to_string(vf).map_err(|e| {
            (
                Error::Read {
                    path: vf.display().to_string(),
                    source: e,
                },
                None,
            )
        })?;
        for (n, l) in text.lines().enumerate() {
            let l = l.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let (k, v) = split_define(l)
                .map_err(|m| (Error::run(&vf.display().to_string(), n + 1, m), None))?;
            vars.pin(k, v);
        }
    }
    for d in &cli.defines {
        let (k, v) = split_define(d).map_err(|m| (Error::run("command line", 0, m), None))?;
        vars.pin(k, v);
    }
    let opts = Options {
        seed: cli.seed,
        quiet: cli.quiet,
        drop_caches: cli.drop_caches,
        pre_run: cli.pre_run.clone(),
        shutdown_timeout: Duration::from_secs(cli.shutdown_timeout),
        exact: cli.exact,
    };
    let mut engine = Engine::new(&name, vars, opts);
    let r = engine.execute(&script);
    if cli.quiet {
        if let Some(last) = engine.runs.last() {
            println!("{}", last.summary.line());
        }
    }
    match r {
        Ok(()) => {
            write_json(cli, &engine, None).map_err(|e| (e, None))?;
            Ok(())
        }
        Err(e) => Err((e, Some(Box::new(engine)))),
    }
}

fn write_json(cli: &Cli, engine: &Engine, error: Option<&str>) -> Result<(), Error> {
    let Some(path) = &cli.json else {
        return Ok(());
    };
    let workload = cli.file.display().to_string();
    let vars = engine.vars.all();
    let doc = result::document(&workload, &vars, cli.seed, &engine.runs, error);
    let text = doc.render().map_err(|e| Error::Write {
        path: path.display().to_string(),
        source: e.into(),
    })?;
    std::fs::write(path, text).map_err(|e| Error::Write {
        path: path.display().to_string(),
        source: e,
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                Exit::Usage as u8
            } else {
                Exit::Ok as u8
            });
        }
    };
    match run(&cli) {
        Ok(()) => ExitCode::from(Exit::Ok as u8),
        Err((e, engine)) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("xfilebench: error: {msg}");
            let empty = Engine::new("", Default::default(), Options::default());
            let eng = engine.as_deref().unwrap_or(&empty);
            if let Err(w) = write_json(&cli, eng, Some(&msg)) {
                eprintln!("xfilebench: error: {w}");
            }
            // Threads that did not stop end with the process.
            ExitCode::from(Exit::Failed as u8)
        }
    }
}
