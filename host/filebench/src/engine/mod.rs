// SPDX-License-Identifier: Apache-2.0
//! Runs a parsed workload statement by statement: variables, filesets,
//! processes (thread instances), runs and their statistics.
//!
//! A run ends at its run time or earlier by itself, as Filebench's (see
//! `run.rs`): on the first error, when a thread is done (a finish condition
//! or no file left to pick, Filebench's "out of resources") unless the quit
//! mode is `alldone`, or when no thread is left. Then every thread is told to
//! stop; they look at the stop flag between operations and inside every
//! wait, and the run waits at most [`Options::shutdown_timeout`] for them
//! before it reports an error.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ast::*;
use crate::error::Error;
use crate::fileset::{Fileset, FilesetSpec};
use crate::flowop::{Op, ThreadPlan, Worker};
use crate::limit::{EventGen, ProcCounts};
use crate::rng::Rng;
use crate::sem::SemPair;
use crate::shared::{Shared, WakePoint};
use crate::stats::{summarize, FlowopResult, OpStats, Summary};
use crate::value::{Value, Vars};

mod compile;
mod run;

/// Defaults of attributes a workload may leave out.
pub const DEFAULT_RUNTIME_S: f64 = 60.0;
pub const DEFAULT_MEMSIZE: u64 = 1 << 20;
pub const DEFAULT_IOSIZE: u64 = 8 << 10;
/// The largest draw of a random `iosize` (it sizes each thread's buffer).
pub const MAX_RANDOM_IOSIZE: u64 = 16 << 20;
pub const DEFAULT_WHOLEFILE_IOSIZE: u64 = 1 << 20;
pub const DEFAULT_DIRWIDTH: f64 = 20.0;
/// Filebench's default `dirgamma` (1500, i.e. shape 1.5).
pub const DEFAULT_DIRGAMMA: f64 = 1500.0;

/// How the runner runs (command line options).
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Print nothing (the transcript is still kept).
    pub quiet: bool,
    /// `sync` and drop the kernel caches after the filesets are created.
    pub drop_caches: bool,
    /// A shell command run after the filesets are created, before the run.
    pub pre_run: Option<String>,
    /// How long stopping the threads of a run may take.
    pub shutdown_timeout: Duration,
    /// Exact figures instead of Filebench's artefacts: a run that ends
    /// itself is divided by the time it took (not by whole seconds), and
    /// the event generator posts every event on time (not in batches).
    pub exact: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            quiet: true,
            drop_caches: false,
            pre_run: None,
            shutdown_timeout: Duration::from_secs(30),
            exact: false,
        }
    }
}

/// The outcome of one run (or one `stats snap`).
#[derive(Debug, Clone)]
pub struct RunResult {
    pub line: usize,
    /// The seconds the figures are divided by (Filebench's count; see
    /// `counted_seconds` in engine/run.rs).
    pub elapsed_s: f64,
    /// The seconds the run took.
    pub took_s: f64,
    pub threads: usize,
    /// Why it ended: "timeout", "firstdone", "alldone", "out of resources: …",
    /// "error", "snap".
    pub end: String,
    pub error: Option<String>,
    pub flowops: Vec<FlowopResult>,
    pub summary: Summary,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

struct ThreadHandle {
    stats: Arc<Mutex<Vec<OpStats>>>,
    ops: Vec<(String, FlowopKind)>,
}

struct Running {
    line: usize,
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    threads: Vec<ThreadHandle>,
    clear_at: Instant,
    cpu_at: (f64, f64),
}

/// Executes statements; keeps the results of every run.
pub struct Engine {
    file: String,
    pub vars: Vars,
    opts: Options,
    mode: QuitMode,
    fileset_defs: Vec<(usize, Attrs, bool)>,
    filesets: Vec<Arc<Fileset>>,
    process_defs: Vec<(usize, Attrs, Vec<ThreadDef>)>,
    eventgen: Option<(usize, Expr)>,
    running: Option<Running>,
    lathist: bool,
    /// (line, construct) already warned about.
    warned: std::collections::HashSet<(usize, String)>,
    start: Instant,
    rng: Rng,
    thread_seq: u64,
    pub usage: Vec<String>,
    pub runs: Vec<RunResult>,
    pub transcript: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    pub fn new(file: &str, vars: Vars, opts: Options) -> Self {
        let rng = Rng::new(opts.seed);
        Engine {
            file: file.to_string(),
            vars,
            opts,
            mode: QuitMode::Timeout,
            fileset_defs: Vec::new(),
            filesets: Vec::new(),
            process_defs: Vec::new(),
            eventgen: None,
            running: None,
            lathist: false,
            warned: Default::default(),
            start: Instant::now(),
            rng,
            thread_seq: 0,
            usage: Vec::new(),
            runs: Vec::new(),
            transcript: Vec::new(),
        }
    }

    fn say(&mut self, msg: impl AsRef<str>) {
        let line = format!(
            "{:.3}: {}",
            self.start.elapsed().as_secs_f64(),
            msg.as_ref()
        );
        if !self.opts.quiet {
            println!("{line}");
        }
        self.transcript.push(line);
    }

    fn plain(&mut self, msg: String) {
        if !self.opts.quiet {
            println!("{msg}");
        }
        self.transcript.push(msg);
    }

    fn err(&self, line: usize, msg: impl Into<String>) -> Error {
        Error::run(&self.file, line, msg)
    }

    /// A created fileset by name.
    pub fn fileset(&self, name: &str) -> Option<Arc<Fileset>> {
        self.filesets.iter().find(|f| f.spec.name == name).cloned()
    }

    /// Runs every statement; processes still running at the end are stopped.
    pub fn execute(&mut self, script: &Script) -> Result<(), Error> {
        for (line, what, why) in &script.warnings {
            self.warn(*line, what, why);
        }
        let r = self.statements(script);
        let stop = self.stop_processes(script.stmts.last().map(|s| s.line).unwrap_or(1));
        r.and(stop)
    }

    fn statements(&mut self, script: &Script) -> Result<(), Error> {
        for st in &script.stmts {
            let line = st.line;
            let ev = |e: String| Error::run(&self.file, line, e);
            match &st.kind {
                StmtKind::SetVar { name, value } => {
                    let v = self.vars.eval(value).map_err(ev)?;
                    self.vars.set(name, v);
                }
                StmtKind::SetMode(m) => self.mode = *m,
                StmtKind::DefineFileset { attrs, is_file } => {
                    self.fileset_defs.push((line, attrs.clone(), *is_file));
                }
                StmtKind::DefineProcess { attrs, threads } => {
                    self.process_defs
                        .push((line, attrs.clone(), threads.clone()));
                }
                StmtKind::Eventgen { attrs } => {
                    if let Some(Attr { value: Some(v), .. }) = attrs.get("rate") {
                        self.eventgen = Some((line, v.clone()));
                    }
                }
                StmtKind::Run(_) | StmtKind::Psrun { .. } => self.run_statement(line, &st.kind)?,
                StmtKind::Create(CreateWhat::Files) => self.create_filesets(line)?,
                StmtKind::Create(CreateWhat::Processes) => {
                    self.create_filesets(line)?;
                    self.start_processes(line)?;
                    if let Some(r) = &self.running {
                        r.shared.start();
                    }
                    self.stats_clear();
                }
                StmtKind::Shutdown => self.stop_processes(line)?,
                StmtKind::Sleep(e) => {
                    let secs = self.vars.number(e).map_err(ev)?;
                    self.sleep(secs);
                }
                StmtKind::StatsClear => self.stats_clear(),
                StmtKind::StatsSnap => {
                    if self.running.is_none() {
                        return Err(self.err(line, "stats snap: no processes are running"));
                    }
                    let r = self.snapshot(line, "snap".into(), None);
                    self.report(&r);
                    self.runs.push(r);
                }
                StmtKind::Echo(e) => {
                    let t = self.message(line, e);
                    let t = t.map_err(|e| Error::run(&self.file, line, e))?;
                    self.say(t);
                }
                StmtKind::Usage(e) => {
                    let t = self.message(line, e);
                    let t = t.map_err(|e| Error::run(&self.file, line, e))?;
                    self.usage.push(t);
                }
                StmtKind::EnableLathist => self.lathist = true,
                StmtKind::System(e) => self.system(line, e)?,
                StmtKind::Quit => break,
                StmtKind::DefineComposite => {}
                StmtKind::Vars | StmtKind::List | StmtKind::Unhonoured { .. } => {
                    self.inspect(line, &st.kind)
                }
            }
        }
        Ok(())
    }

    /// `run [N]` and `psrun [-I] [N]`.
    fn run_statement(&mut self, line: usize, kind: &StmtKind) -> Result<(), Error> {
        let ev = |e: String| Error::run(&self.file, line, e);
        let (runtime, interval) = match kind {
            StmtKind::Run(rt) => (rt, None),
            StmtKind::Psrun { interval, runtime } => (runtime, Some(interval)),
            _ => return Ok(()),
        };
        let secs = match runtime {
            Some(e) => Some(self.vars.number(e).map_err(ev)?),
            None => self.default_runtime(),
        };
        let iv = match interval {
            Some(Some(e)) => Some(self.vars.number(e).map_err(ev)?.max(0.1)),
            Some(None) => Some(10.0),
            None => None,
        };
        self.run(line, secs, iv)
    }

    /// `system "CMD"`: runs it with `/bin/sh -c`; a failure is reported, not
    /// an error (as Filebench).
    fn system(&mut self, line: usize, e: &crate::ast::Expr) -> Result<(), Error> {
        let cmd = self
            .vars
            .text(e)
            .map_err(|m| Error::run(&self.file, line, m))?;
        self.say(format!("system: {cmd}"));
        let st = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&cmd)
            .status()
            .map_err(|e| self.err(line, format!("system: cannot run sh: {e}")))?;
        if !st.success() {
            self.say(format!("system: '{cmd}' exited with {st}"));
        }
        Ok(())
    }

    /// `vars`, `list`, and the warning of a statement not honoured.
    fn inspect(&mut self, line: usize, kind: &StmtKind) {
        match kind {
            StmtKind::Vars => {
                for (k, v) in self.vars.all() {
                    self.say(format!("${k} = {v}"));
                }
            }
            StmtKind::List => {
                let mut names: Vec<String> = self
                    .fileset_defs
                    .iter()
                    .map(|(_, a, f)| (a, if *f { "file" } else { "fileset" }))
                    .chain(self.process_defs.iter().map(|(_, a, _)| (a, "process")))
                    .map(|(a, what)| {
                        let n = a.get("name").and_then(|x| x.value.as_ref());
                        format!("{what} {}", n.map(|e| e.to_string()).unwrap_or_default())
                    })
                    .collect();
                names.extend(
                    self.filesets
                        .iter()
                        .map(|f| format!("fileset {} (created)", f.spec.name)),
                );
                for n in names {
                    self.say(n);
                }
            }
            StmtKind::Unhonoured { what, why } => self.warn(line, what, why),
            _ => {}
        }
    }

    /// A message's text; a variable that is not set reads as nothing, with
    /// one warning.
    fn message(&mut self, line: usize, e: &crate::ast::Expr) -> Result<String, String> {
        let (text, unset) = self.vars.message(e)?;
        for name in unset {
            let what = format!("${name}");
            self.warn(
                line,
                &what,
                "not set; printed as nothing (Filebench prints the message too)",
            );
        }
        Ok(text)
    }

    /// One warning per line and construct: `file:line: what: why`.
    fn warn(&mut self, line: usize, what: &str, why: &str) {
        if self.warned.insert((line, what.to_string())) {
            eprintln!("xfilebench: warning: {}:{line}: {what}: {why}", self.file);
        }
    }

    fn sleep(&mut self, secs: f64) {
        let until = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
        while Instant::now() < until {
            match &self.running {
                Some(r) => {
                    if r.shared.end_reason(self.mode).is_some() {
                        break;
                    }
                    r.shared.wait_change(until - Instant::now());
                }
                None => {
                    std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)))
                }
            }
        }
    }

    fn start_processes(&mut self, line: usize) -> Result<(), Error> {
        if self.running.is_some() {
            return Err(self.err(line, "processes are already running"));
        }
        let mut shared = Shared::default();
        let plans = self.compile(&mut shared)?;
        let shared = Arc::new(shared);
        shared.live.store(plans.len(), Ordering::Release);
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        for plan in plans {
            let stats = Arc::new(Mutex::new(vec![OpStats::default(); plan.ops.len()]));
            threads.push(ThreadHandle {
                stats: stats.clone(),
                ops: plan.ops.iter().map(|o| (o.name.clone(), o.kind)).collect(),
            });
            self.thread_seq += 1;
            let seed = self
                .opts
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add(self.thread_seq);
            let sh = shared.clone();
            let fsets = self.filesets.clone();
            let label = plan.label.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("fb-{}", label.chars().take(12).collect::<String>()))
                .spawn(move || {
                    let w = Worker::new(plan, fsets, sh.clone(), stats, seed);
                    let end = w.run();
                    sh.thread_ended(&end);
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.stop.store(true, Ordering::Release);
                    // The threads already started see the stop flag and end.
                    return Err(self.err(line, format!("cannot start thread {label}: {e}")));
                }
            }
        }
        let n = handles.len();
        self.running = Some(Running {
            line,
            shared,
            handles,
            threads,
            clear_at: Instant::now(),
            cpu_at: crate::sys::cpu_times(),
        });
        self.say(format!("Starting {n} threads"));
        Ok(())
    }

    fn stats_clear(&mut self) {
        if let Some(r) = &mut self.running {
            for t in &r.threads {
                for s in lock(&t.stats).iter_mut() {
                    *s = OpStats::default();
                }
            }
            r.clear_at = Instant::now();
            r.cpu_at = crate::sys::cpu_times();
        }
    }

    /// Current figures of the running threads, over the time since the last
    /// clear (or over `elapsed` when given).
    fn snapshot(&self, line: usize, end: String, elapsed: Option<f64>) -> RunResult {
        let Some(r) = &self.running else {
            return RunResult {
                line,
                elapsed_s: 0.0,
                took_s: 0.0,
                threads: 0,
                end,
                error: None,
                flowops: Vec::new(),
                summary: Summary::default(),
                cpu_user_s: 0.0,
                cpu_sys_s: 0.0,
            };
        };
        let elapsed_s = elapsed.unwrap_or_else(|| r.clear_at.elapsed().as_secs_f64());
        let mut order: Vec<(String, FlowopKind)> = Vec::new();
        let mut merged: HashMap<String, OpStats> = HashMap::new();
        for t in &r.threads {
            let st = lock(&t.stats);
            for ((name, kind), s) in t.ops.iter().zip(st.iter()) {
                if !merged.contains_key(name) {
                    order.push((name.clone(), *kind));
                }
                merged.entry(name.clone()).or_default().merge(s);
            }
        }
        let flowops: Vec<FlowopResult> = order
            .iter()
            .map(|(n, k)| FlowopResult::new(n, *k, &merged[n], elapsed_s))
            .collect();
        let summary = summarize(&flowops, elapsed_s);
        let (u, s) = crate::sys::cpu_times();
        let errors = r.shared.errors();
        RunResult {
            line,
            elapsed_s,
            took_s: r.clear_at.elapsed().as_secs_f64(),
            threads: r.threads.len(),
            end,
            error: if errors.is_empty() {
                None
            } else {
                Some(errors.join("; "))
            },
            flowops,
            summary,
            cpu_user_s: u - r.cpu_at.0,
            cpu_sys_s: s - r.cpu_at.1,
        }
    }

    fn report(&mut self, r: &RunResult) {
        self.say("Per-Operation Breakdown");
        for f in &r.flowops {
            self.plain(f.line());
            if self.lathist && f.ops > 0 {
                for (ns, c) in f.hist.rows() {
                    self.plain(format!("    {:>12.3}us {c}", ns / 1000.0));
                }
            }
        }
        self.say(r.summary.line());
    }

    fn stop_processes(&mut self, line: usize) -> Result<(), Error> {
        let Some(r) = &self.running else {
            return Ok(());
        };
        let started = r.line;
        r.shared.stop.store(true, Ordering::Release);
        let res = self.join(line);
        let errors = self
            .running
            .as_ref()
            .map(|r| r.shared.errors())
            .unwrap_or_default();
        self.running = None;
        self.say("Shutting down processes");
        res?;
        if !errors.is_empty() {
            return Err(self.err(started, format!("processes failed: {}", errors.join("; "))));
        }
        Ok(())
    }
}
