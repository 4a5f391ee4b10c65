// SPDX-License-Identifier: Apache-2.0
//! `run` and `psrun`: start the processes, wait for the end of the run,
//! report its figures.
//!
//! When the run ends and how long it took are Filebench's
//! (`parser_run`/`parser_pause` in `parser_gram.y`, `stats_snap` in
//! `stats.c`, the worker loop of `flowop.c`):
//! - `run N` ends after N seconds, or earlier by itself: on an error, when
//!   a thread is done (a finish condition, or no file left to pick) unless
//!   the quit mode is `alldone`, or when no thread is left. `run` without N
//!   runs 60 s in the `timeout` mode and without a time limit in the
//!   `alldone`/`firstdone` modes.
//! - Filebench's controller looks at the end condition once a second and
//!   divides by the time from the start to that look, so a run that ends by
//!   itself after t seconds counts ⌈t⌉ seconds (at least 1). That is the
//!   default; with `Options::exact` (`--exact`) it counts t.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// The seconds a run's figures are divided by: `t` measured; with Filebench's
/// once-a-second look a run that ended by itself counts whole seconds.
pub fn counted_seconds(t: f64, ended_itself: bool, limit: Option<f64>, exact: bool) -> f64 {
    if exact || !ended_itself {
        return t;
    }
    let whole = t.ceil().max(1.0);
    match limit {
        Some(l) if l > 0.0 => whole.min(l.max(t)),
        _ => whole,
    }
}

impl Engine {
    /// `run`/`psrun` without a time: 60 s, but no limit in the quit modes
    /// that end the run by themselves (Filebench's `parser_run`).
    pub(super) fn default_runtime(&self) -> Option<f64> {
        match self.mode {
            QuitMode::Timeout => Some(DEFAULT_RUNTIME_S),
            QuitMode::AllDone | QuitMode::FirstDone => None,
        }
    }

    pub(super) fn run(
        &mut self,
        line: usize,
        secs: Option<f64>,
        interval: Option<f64>,
    ) -> Result<(), Error> {
        if self.running.is_some() {
            return Err(self.err(
                line,
                "run: processes are already running (shutdown processes first)",
            ));
        }
        self.prepare_run(line)?;
        self.start_processes(line)?;
        match secs {
            Some(s) => self.say(format!("Running for {s} seconds...")),
            None => self.say("Running until the processes are done..."),
        }
        let (shared, t0) = {
            let r = self
                .running
                .as_mut()
                .ok_or_else(|| Error::run(&self.file, line, "no processes"))?;
            for t in &r.threads {
                for s in lock(&t.stats).iter_mut() {
                    *s = OpStats::default();
                }
            }
            r.cpu_at = crate::sys::cpu_times();
            r.clear_at = Instant::now();
            r.shared.start();
            (r.shared.clone(), r.clear_at)
        };
        let deadline = secs.map(|s| t0 + Duration::from_secs_f64(s.clamp(0.0, 1e9)));
        let end = self.wait_end(line, &shared, t0, deadline, interval);
        let took = t0.elapsed().as_secs_f64();
        shared.stop.store(true, Ordering::Release);
        let stopped = self.join(line);
        let counted = counted_seconds(took, end != "timeout", secs, self.opts.exact);
        let mut result = self.snapshot(line, end.clone(), Some(counted));
        result.took_s = took;
        if counted == took {
            self.say(format!("Run took {took:.3} seconds ({end})"));
        } else {
            self.say(format!(
                "Run took {took:.3} seconds ({end}); counted as {counted:.0} s, Filebench's \
                 once-a-second check (--exact: the time taken)"
            ));
        }
        self.report(&result);
        let error = result.error.clone();
        self.runs.push(result);
        self.running = None;
        self.say("Shutting down processes");
        stopped?;
        match error {
            Some(e) => Err(self.err(line, format!("the run failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Creates the filesets, drops the caches and runs `--pre-run`.
    fn prepare_run(&mut self, line: usize) -> Result<(), Error> {
        self.create_filesets(line)?;
        if self.opts.drop_caches {
            crate::sys::drop_caches()
                .map_err(|e| self.err(line, format!("dropping caches: {e}")))?;
            self.say("Dropped the kernel caches");
        }
        if let Some(cmd) = self.opts.pre_run.clone() {
            let st = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&cmd)
                .status()
                .map_err(|e| self.err(line, format!("pre-run command: {e}")))?;
            if !st.success() {
                return Err(self.err(line, format!("pre-run command '{cmd}' failed: {st}")));
            }
        }
        Ok(())
    }

    /// Waits until the run ends; returns why ("timeout", or
    /// [`Shared::end_reason`]), printing progress every `interval` seconds.
    fn wait_end(
        &mut self,
        line: usize,
        shared: &Arc<Shared>,
        t0: Instant,
        deadline: Option<Instant>,
        interval: Option<f64>,
    ) -> String {
        let mut next_progress = interval.map(|i| t0 + Duration::from_secs_f64(i));
        loop {
            if let Some(why) = shared.end_reason(self.mode) {
                return why;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return "timeout".to_string();
            }
            if let Some(p) = next_progress.filter(|p| now >= *p) {
                let snap = self.snapshot(line, String::new(), None);
                self.say(format!(
                    "{:.0} s: {} ops, {:.1} ops/s",
                    now.duration_since(t0).as_secs_f64(),
                    snap.summary.ops,
                    snap.summary.ops_per_s
                ));
                next_progress = interval.map(|i| p + Duration::from_secs_f64(i));
            }
            let left = deadline.map_or(Duration::from_secs(1), |d| d - now);
            shared.wait_change(left);
        }
    }

    /// Waits for the threads of the running processes to end (bounded).
    pub(super) fn join(&mut self, line: usize) -> Result<(), Error> {
        let Some(r) = self.running.as_mut() else {
            return Ok(());
        };
        let deadline = Instant::now() + self.opts.shutdown_timeout;
        while r.shared.live.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            r.shared.wait_change(deadline - Instant::now());
        }
        let left = r.shared.live.load(Ordering::Acquire);
        if left > 0 {
            let t = self.opts.shutdown_timeout.as_secs_f64();
            return Err(Error::run(
                &self.file,
                line,
                format!("{left} threads did not stop within {t:.0} s"),
            ));
        }
        for h in r.handles.drain(..) {
            let _ = h.join();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::counted_seconds;

    #[test]
    fn a_run_that_ends_itself_counts_whole_seconds() {
        // copyfiles out of files after 0.04 s: Filebench divides by 1 s.
        assert_eq!(counted_seconds(0.04, true, Some(5.0), false), 1.0);
        assert_eq!(counted_seconds(1.2, true, None, false), 2.0);
        // Never more than the run time.
        assert_eq!(counted_seconds(4.5, true, Some(4.5), false), 4.5);
        // A timed run, or --exact: the time taken.
        assert_eq!(counted_seconds(5.001, false, Some(5.0), false), 5.001);
        assert_eq!(counted_seconds(0.04, true, Some(5.0), true), 0.04);
    }
}
