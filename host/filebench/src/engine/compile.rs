// SPDX-License-Identifier: Apache-2.0
//! From the script to what runs: fileset specifications from `define
//! fileset|file`, and the per-thread plans of compiled flowops (attributes
//! resolved, names linked: semaphores, wake points, limit and finish
//! targets).

use super::*;

/// One thread instance's copy of its flowops: every thread's semblock gets
/// a semaphore pair of its own (registered by name in `shared`).
fn instance_ops(ops: &[Op], shared: &mut Shared) -> Vec<Op> {
    let mut ops = ops.to_vec();
    for op in ops.iter_mut().filter(|o| o.kind == FlowopKind::SemBlock) {
        let pair = Arc::new(SemPair::new(op.highwater.unwrap_or(1)));
        shared
            .sems
            .entry(op.name.clone())
            .or_default()
            .push(pair.clone());
        op.sem = Some(pair);
    }
    ops
}

/// What differs for a thread's `memsize=`.
const MEMSIZE_DIFF: &str =
    "each thread's I/O buffer is its largest iosize, not memsize (no memory is reserved)";
/// What differs for a thread's `useism`.
const USEISM_DIFF: &str =
    "intimate shared memory (Solaris) is not used; threads share their process's memory";

impl Engine {
    fn fileset_spec(
        &self,
        line: usize,
        attrs: &Attrs,
        is_file: bool,
    ) -> Result<FilesetSpec, Error> {
        let ev = |e: String| Error::run(&self.file, line, e);
        let text = |n: &str| self.attr_text(attrs, n, line);
        let num = |n: &str| self.attr_num(attrs, n, line);
        let flag = |n: &str| self.attr_flag(attrs, n);
        let name = text("name")?.ok_or_else(|| self.err(line, "fileset needs name"))?;
        let path = text("path")?.ok_or_else(|| self.err(line, "fileset needs path"))?;
        // No size: empty files (Filebench's default of 0).
        let size = match attrs.get("size") {
            Some(Attr { value: Some(v), .. }) => self.vars.eval(v).map_err(ev)?,
            _ => Value::Text("0".into()),
        };
        if let Value::Text(t) = &size {
            if crate::value::parse_number(t).is_none() {
                return Err(self.err(line, format!("size='{t}' is not a number")));
            }
        }
        // No entries: none (Filebench's default), as for a fileset of leaf
        // directories only (makedir/removedir).
        let entries = if is_file {
            1
        } else {
            num("entries")?.unwrap_or(0.0) as u64
        };
        let prealloc = match attrs.get("prealloc") {
            None => None,
            Some(Attr { value: None, .. }) => Some(100.0),
            Some(Attr {
                value: Some(v),
                line: l,
                ..
            }) => {
                let t = self
                    .vars
                    .text(v)
                    .map_err(|e| Error::run(&self.file, *l, e))?;
                match crate::value::parse_bool(&t) {
                    Some(true) if t != "1" => Some(100.0),
                    Some(false) if t != "0" => None,
                    _ => Some(crate::value::parse_number(&t).ok_or_else(|| {
                        self.err(*l, format!("prealloc='{t}' is not a percentage"))
                    })?),
                }
            }
        };
        if let Some(p) = prealloc {
            if p > 100.0 {
                return Err(self.err(line, format!("prealloc={p} is more than 100 %")));
            }
        }
        Ok(FilesetSpec {
            name,
            path: PathBuf::from(path),
            is_file,
            size,
            entries,
            dirwidth: num("dirwidth")?.unwrap_or(DEFAULT_DIRWIDTH),
            dirgamma: num("dirgamma")?.unwrap_or(DEFAULT_DIRGAMMA) / 1000.0,
            filesizegamma: num("filesizegamma")?.unwrap_or(0.0) / 1000.0,
            prealloc,
            reuse: flag("reuse")?,
            paralloc: flag("paralloc")?,
            readonly: flag("readonly")?,
            trusttree: flag("trusttree")?,
            leafdirs: num("leafdirs")?.unwrap_or(0.0) as u64,
            purge: attrs.has("cached") && !flag("cached")?,
        })
    }

    pub(super) fn create_filesets(&mut self, _line: usize) -> Result<(), Error> {
        let defs = std::mem::take(&mut self.fileset_defs);
        for (line, attrs, is_file) in &defs {
            let spec = self.fileset_spec(*line, attrs, *is_file)?;
            if self.fileset(&spec.name).is_some() {
                return Err(self.err(*line, format!("fileset {} is defined twice", spec.name)));
            }
            let kind = if *is_file { "file" } else { "fileset" };
            let t0 = Instant::now();
            let fs = Fileset::layout(spec, &mut self.rng).map_err(|e| self.err(*line, e))?;
            fs.create_on_disk().map_err(|e| {
                self.err(*line, format!("creating {kind} {}: {e}", fs.root.display()))
            })?;
            let st = fs.stats();
            let pre = fs.existing_files();
            if *is_file {
                self.say(format!(
                    "{} populated: {:.3}MB, {} in {:.1} s",
                    fs.spec.name,
                    st.bytes as f64 / 1048576.0,
                    if pre > 0 {
                        "preallocated"
                    } else {
                        "not preallocated"
                    },
                    t0.elapsed().as_secs_f64()
                ));
            } else {
                self.say(format!(
                    "{} populated: {} files, avg. dir. width = {:.1}, avg. dir. depth = {:.1}, {} leafdirs, {:.3}MB total size, {} preallocated in {:.1} s",
                    fs.spec.name,
                    st.files,
                    st.mean_width,
                    st.mean_depth,
                    fs.leafdirs.len(),
                    st.bytes as f64 / 1048576.0,
                    pre,
                    t0.elapsed().as_secs_f64()
                ));
            }
            self.filesets.push(Arc::new(fs));
        }
        Ok(())
    }

    pub(super) fn compile(&mut self, shared: &mut Shared) -> Result<Vec<ThreadPlan>, Error> {
        let defs = self.process_defs.clone();
        if defs.is_empty() {
            return Err(self.err(1, "no process is defined"));
        }
        let pacing = if self.opts.exact {
            crate::limit::Pacing::Exact
        } else {
            crate::limit::Pacing::Filebench
        };
        let events = match &self.eventgen {
            Some((line, e)) => {
                let rate = self.vars.number(e).map_err(|m| self.err(*line, m))?;
                EventGen::new(rate, pacing).map(Arc::new)
            }
            None => None,
        };
        shared.events = events.clone();
        self.link_names(&defs, shared)?;
        let mut plans = Vec::new();
        let mut later_warnings: Vec<(usize, &str, &str)> = Vec::new();
        for (pline, pattrs, threads) in &defs {
            let pname = self.attr_text(pattrs, "name", *pline)?.unwrap_or_default();
            let pinst = self.attr_num(pattrs, "instances", *pline)?.unwrap_or(1.0) as u64;
            // One set of counts per process instance, shared by its threads.
            let procs: Vec<(u64, Arc<ProcCounts>)> =
                (0..pinst.max(1)).map(|p| (p, Arc::default())).collect();
            for t in threads {
                let tname = self
                    .attr_text(&t.attrs, "name", t.line)?
                    .unwrap_or_default();
                let tinst = self.attr_num(&t.attrs, "instances", t.line)?.unwrap_or(1.0) as u64;
                if pinst == 0 || tinst == 0 {
                    return Err(self.err(t.line, "instances must be at least 1"));
                }
                let memsize = self
                    .attr_num(&t.attrs, "memsize", t.line)?
                    .map(|m| m as u64)
                    .unwrap_or(DEFAULT_MEMSIZE);
                if let Some(a) = t.attrs.get("memsize") {
                    later_warnings.push((a.line, "memsize", MEMSIZE_DIFF));
                }
                if let Some(a) = t.attrs.get("useism") {
                    later_warnings.push((a.line, "useism", USEISM_DIFF));
                }
                let ops = self.thread_ops(t, shared, &events)?;
                for (p, proc) in &procs {
                    for i in 0..tinst {
                        plans.push(ThreadPlan {
                            file: self.file.clone(),
                            label: format!("{pname}.{p}/{tname}.{i}"),
                            memsize,
                            ops: instance_ops(&ops, shared),
                            proc: proc.clone(),
                        });
                    }
                }
            }
        }
        for (line, what, why) in later_warnings {
            self.warn(line, what, why);
        }
        // A sempost posts to every thread's semblock of its target.
        for op in plans.iter_mut().flat_map(|p| p.ops.iter_mut()) {
            if op.kind == FlowopKind::SemPost {
                let pairs = op.target.as_ref().and_then(|t| shared.sems.get(t));
                op.sem_targets = pairs.map(|v| Arc::from(v.clone()));
            }
        }
        Ok(plans)
    }

    /// Pass 1 over every thread: the names of semblocks and block flowops.
    fn link_names(
        &self,
        defs: &[(usize, Attrs, Vec<ThreadDef>)],
        shared: &mut Shared,
    ) -> Result<(), Error> {
        for t in defs.iter().flat_map(|(_, _, threads)| threads) {
            for f in &t.flowops {
                let name = self
                    .attr_text(&f.attrs, "name", f.line)?
                    .unwrap_or_default();
                match f.kind {
                    FlowopKind::SemBlock => {
                        shared.sems.entry(name).or_default();
                    }
                    FlowopKind::Block => {
                        shared
                            .wakepoints
                            .entry(name)
                            .or_insert_with(|| Arc::new(WakePoint::default()));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The compiled flowops of one thread definition (composites linked,
    /// limit targets resolved).
    fn thread_ops(
        &self,
        t: &ThreadDef,
        shared: &Shared,
        events: &Option<Arc<EventGen>>,
    ) -> Result<Vec<Op>, Error> {
        let mut ops: Vec<Op> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        for f in &t.flowops {
            let mut op = self.compile_op(f, shared, events)?;
            match f.kind {
                FlowopKind::Composite => {
                    open.push(ops.len());
                    // The passes belong to the end marker.
                    op.repeat = Some((ops.len(), op.iters));
                    op.iters = 1;
                }
                FlowopKind::CompositeEnd => {
                    let begin = open
                        .pop()
                        .ok_or_else(|| self.err(f.line, "composite flowop end without a start"))?;
                    let start: &mut Op = &mut ops[begin];
                    op.repeat = start.repeat.take().map(|(_, n)| (begin, n));
                }
                _ => {}
            }
            ops.push(op);
        }
        self.link_targets(&mut ops)?;
        Ok(ops)
    }

    /// Resolves the `target=` of the limit and finish flowops of one
    /// thread: a flowop of the same thread; `iopslimit`, `bwlimit` and
    /// `finishonbytes` need one that reads or writes (Filebench stops the run
    /// otherwise).
    fn link_targets(&self, ops: &mut [Op]) -> Result<(), Error> {
        for k in 0..ops.len() {
            let op = &ops[k];
            let limit = matches!(
                op.kind,
                FlowopKind::IopsLimit
                    | FlowopKind::OpsLimit
                    | FlowopKind::BwLimit
                    | FlowopKind::FinishOnCount
                    | FlowopKind::FinishOnBytes
            );
            let Some(t) = op.target.as_ref().filter(|_| limit) else {
                continue;
            };
            let Some(j) = ops.iter().position(|o| &o.name == t) else {
                return Err(self.err(
                    op.line,
                    format!("{}: no flowop named {t} in this thread", op.kind.name()),
                ));
            };
            let io = ops[j].kind.is_read() || ops[j].kind.is_write();
            let any = matches!(op.kind, FlowopKind::OpsLimit | FlowopKind::FinishOnCount);
            if !any && !io {
                return Err(self.err(
                    op.line,
                    format!("{}: flowop {t} does no reads or writes", op.kind.name()),
                ));
            }
            ops[k].target_op = Some(j);
        }
        Ok(())
    }

    fn attr_text(&self, attrs: &Attrs, name: &str, _line: usize) -> Result<Option<String>, Error> {
        match attrs.get(name) {
            Some(Attr {
                value: Some(v),
                line: l,
                ..
            }) => self
                .vars
                .text(v)
                .map(Some)
                .map_err(|e| Error::run(&self.file, *l, e)),
            Some(Attr {
                value: None,
                line: l,
                ..
            }) => Err(self.err(*l, format!("attribute {name} needs a value"))),
            None => Ok(None),
        }
    }

    fn attr_num(&self, attrs: &Attrs, name: &str, line: usize) -> Result<Option<f64>, Error> {
        match self.attr_text(attrs, name, line)? {
            Some(t) => crate::value::parse_number(&t).map(Some).ok_or_else(|| {
                self.err(
                    attrs.get(name).map(|a| a.line).unwrap_or(line),
                    format!("{name}='{t}' is not a number"),
                )
            }),
            None => Ok(None),
        }
    }

    /// `iosize=`: a number, or a random variable with the cap of its draws
    /// (the upper bound of uniform and triangular, else 8 × the mean, at
    /// most [`MAX_RANDOM_IOSIZE`]).
    fn io_size_attr(
        &self,
        attrs: &Attrs,
        default: u64,
    ) -> Result<(u64, Option<crate::dist::Dist>), Error> {
        use crate::dist::Dist;
        let Some(Attr {
            value: Some(v),
            line: l,
            ..
        }) = attrs.get("iosize")
        else {
            return Ok((default, None));
        };
        match self.vars.eval(v).map_err(|e| self.err(*l, e))? {
            Value::Text(t) => crate::value::parse_number(&t)
                .map(|n| (n as u64, None))
                .ok_or_else(|| self.err(*l, format!("iosize='{t}' is not a number"))),
            Value::Random(d) => {
                let cap = match d {
                    Dist::Uniform { upper, .. } | Dist::Triangular { upper, .. } => upper,
                    _ => d.mean() * 8.0,
                };
                Ok(((cap.ceil() as u64).clamp(1, MAX_RANDOM_IOSIZE), Some(d)))
            }
        }
    }

    /// A number attribute that may also be a random variable (drawn anew
    /// at each use).
    fn maybe_random_attr(
        &self,
        attrs: &Attrs,
        name: &str,
    ) -> Result<(Option<f64>, Option<crate::dist::Dist>), Error> {
        let Some(Attr {
            value: Some(v),
            line: l,
            ..
        }) = attrs.get(name)
        else {
            return Ok((None, None));
        };
        match self.vars.eval(v).map_err(|e| self.err(*l, e))? {
            Value::Text(t) => crate::value::parse_number(&t)
                .map(|n| (Some(n), None))
                .ok_or_else(|| self.err(*l, format!("{name}='{t}' is not a number"))),
            Value::Random(d) => Ok((None, Some(d))),
        }
    }

    fn attr_flag(&self, attrs: &Attrs, name: &str) -> Result<bool, Error> {
        match attrs.get(name) {
            None => Ok(false),
            Some(Attr { value: None, .. }) => Ok(true),
            Some(Attr {
                value: Some(v),
                line,
                ..
            }) => self.vars.boolean(v).map_err(|e| self.err(*line, e)),
        }
    }

    fn compile_op(
        &self,
        f: &FlowopDef,
        shared: &Shared,
        events: &Option<Arc<EventGen>>,
    ) -> Result<Op, Error> {
        let a = &f.attrs;
        let line = f.line;
        let name = self.attr_text(a, "name", line)?.unwrap_or_default();
        let (fileset, fd) = self.op_fileset(f, &name)?;
        let wholefile = matches!(
            f.kind,
            FlowopKind::ReadWholeFile | FlowopKind::WriteWholeFile
        );
        let default_io = if wholefile {
            DEFAULT_WHOLEFILE_IOSIZE
        } else {
            DEFAULT_IOSIZE
        };
        let (iosize, iosize_dist) = self.io_size_attr(a, default_io)?;
        let (indexed, indexed_dist) = self.maybe_random_attr(a, "indexed")?;
        let value = self.attr_num(a, "value", line)?.unwrap_or(0.0);
        let target = self.attr_text(a, "target", line)?;
        let wake = self.op_links(f, &name, &target, shared)?;
        let finish = matches!(
            f.kind,
            FlowopKind::FinishOnCount | FlowopKind::FinishOnBytes
        );
        if finish && !a.has("value") {
            return Err(self.err(line, format!("{} needs value=…", f.kind.name())));
        }
        // Without an eventgen rate a limit flowop does nothing (Filebench).
        let is_limit = matches!(
            f.kind,
            FlowopKind::EventLimit
                | FlowopKind::IopsLimit
                | FlowopKind::OpsLimit
                | FlowopKind::BwLimit
        );
        let highwater = self.attr_num(a, "highwater", line)?.map(|v| v as i64);
        Ok(Op {
            line,
            name: name.clone(),
            kind: f.kind,
            fileset,
            // No fd=: Filebench's default descriptor of the thread, 0.
            fd: fd.unwrap_or(0),
            srcfd: self.attr_num(a, "srcfd", line)?.map(|v| v as usize),
            iosize,
            iosize_dist,
            repeat: None,
            random: self.attr_flag(a, "random")?,
            workingset: self.attr_num(a, "workingset", line)?.unwrap_or(0.0) as u64,
            dsync: self.attr_flag(a, "dsync")?,
            directio: self.attr_flag(a, "directio")?,
            opennext: self.attr_flag(a, "opennext")?,
            iters: self.attr_num(a, "iters", line)?.unwrap_or(1.0).max(1.0) as u64,
            indexed: indexed.map(|v| v as u64),
            indexed_dist,
            value,
            highwater,
            blocking: self.attr_flag(a, "blocking")?,
            target,
            target_op: None,
            sem: None,
            sem_targets: None,
            wake,
            events: if is_limit { events.clone() } else { None },
        })
    }

    /// A flowop's fileset (`filesetname=` or `filename=`) and `fd=`; the
    /// flowops that pick files need a fileset (but `deletefile fd=N`).
    fn op_fileset(
        &self,
        f: &FlowopDef,
        name: &str,
    ) -> Result<(Option<usize>, Option<usize>), Error> {
        let (a, line) = (&f.attrs, f.line);
        let fsname = match self.attr_text(a, "filesetname", line)? {
            Some(n) => Some(n),
            None => self.attr_text(a, "filename", line)?,
        };
        let fileset = match &fsname {
            Some(n) => Some(
                self.filesets
                    .iter()
                    .position(|f| &f.spec.name == n)
                    .ok_or_else(|| {
                        self.err(line, format!("flowop {name}: no fileset or file named {n}"))
                    })?,
            ),
            None => None,
        };
        let fd = self.attr_num(a, "fd", line)?.map(|v| v as usize);
        let needs_file = matches!(
            f.kind,
            FlowopKind::CreateFile
                | FlowopKind::OpenFile
                | FlowopKind::DeleteFile
                | FlowopKind::StatFile
                | FlowopKind::Mkdir
                | FlowopKind::Rmdir
                | FlowopKind::ListDir
                | FlowopKind::FsyncSet
        );
        // deletefile fd=N: the file last opened in N (Filebench).
        let by_fd = f.kind == FlowopKind::DeleteFile && fd.is_some();
        if needs_file && fileset.is_none() && !by_fd {
            return Err(self.err(
                line,
                format!("flowop {name}: {} needs filesetname=…", f.kind.name()),
            ));
        }
        Ok((fileset, fd))
    }

    /// What a flowop's name or `target=` links it to: a sempost's semblock
    /// (checked here, linked per thread later), a block/wakeup's wake point.
    fn op_links(
        &self,
        f: &FlowopDef,
        name: &str,
        target: &Option<String>,
        shared: &Shared,
    ) -> Result<Option<Arc<WakePoint>>, Error> {
        let line = f.line;
        if f.kind == FlowopKind::SemPost {
            let t = target
                .clone()
                .ok_or_else(|| self.err(line, format!("sempost {name} needs target=…")))?;
            if !shared.sems.contains_key(&t) {
                return Err(self.err(
                    line,
                    format!("sempost {name}: no semblock flowop named {t}"),
                ));
            }
        }
        let wake = match f.kind {
            FlowopKind::Block => shared.wakepoints.get(name).cloned(),
            FlowopKind::Wakeup => {
                let t = target
                    .clone()
                    .ok_or_else(|| self.err(line, format!("wakeup {name} needs target=…")))?;
                Some(shared.wakepoints.get(&t).cloned().ok_or_else(|| {
                    self.err(line, format!("wakeup {name}: no block flowop named {t}"))
                })?)
            }
            _ => None,
        };
        Ok(wake)
    }
}
