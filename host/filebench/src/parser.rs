// SPDX-License-Identifier: Apache-2.0
//! Parser of the workload model language into [`Script`].
//!
//! Every construct the runner does not know is an error naming the file and
//! the line; nothing is skipped silently.

use crate::ast::*;
use crate::error::ParseError;
use crate::lexer::{tokenize, Tok, Token};

/// Parses a workload; `file` names it in errors.
pub fn parse(file: &str, src: &str) -> Result<Script, ParseError> {
    let tokens = tokenize(file, src)?;
    let mut p = Parser {
        file,
        toks: tokens,
        pos: 0,
        composites: Default::default(),
        warnings: Vec::new(),
    };
    let mut stmts = Vec::new();
    loop {
        p.skip_newlines();
        if p.at_end() {
            break;
        }
        stmts.push(p.statement()?);
    }
    Ok(Script {
        file: file.to_string(),
        stmts,
        warnings: p.warnings,
    })
}

struct Parser<'a> {
    file: &'a str,
    toks: Vec<Token>,
    pos: usize,
    /// Constructs parsed but not honoured (see [`Script::warnings`]).
    warnings: Vec<(usize, String, &'static str)>,
    /// Composite flowops defined so far (`define flowop`).
    composites: std::collections::HashMap<String, crate::composite::Composite>,
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map(|t| t.line)
            .unwrap_or(1)
    }

    fn err(&self, line: usize, msg: impl Into<String>) -> ParseError {
        ParseError::new(self.file, line, msg)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn skip_newlines(&mut self) {
        while self.peek() == Some(&Tok::Newline) {
            self.pos += 1;
        }
    }

    fn word(&mut self, what: &str) -> Result<(String, usize), ParseError> {
        let line = self.line();
        match self.next() {
            Some(Token {
                kind: Tok::Word(w), ..
            }) => Ok((w, line)),
            Some(t) => Err(self.err(
                t.line,
                format!("expected {what}, found {}", t.kind.describe()),
            )),
            None => Err(self.err(line, format!("expected {what}, found end of file"))),
        }
    }

    fn expect(&mut self, want: Tok) -> Result<(), ParseError> {
        let line = self.line();
        match self.next() {
            Some(t) if t.kind == want => Ok(()),
            Some(t) => Err(self.err(
                t.line,
                format!("expected {}, found {}", want.describe(), t.kind.describe()),
            )),
            None => Err(self.err(
                line,
                format!("expected {}, found end of file", want.describe()),
            )),
        }
    }

    fn end_of_statement(&mut self) -> Result<(), ParseError> {
        match self.peek() {
            None | Some(Tok::Newline) => {
                self.pos += 1;
                Ok(())
            }
            Some(t) => {
                let d = t.describe();
                Err(self.err(self.line(), format!("unexpected {d} after the statement")))
            }
        }
    }

    fn at_statement_end(&self) -> bool {
        matches!(self.peek(), None | Some(Tok::Newline))
    }

    fn statement(&mut self) -> Result<Stmt, ParseError> {
        let (kw, line) = self.word("a statement")?;
        let kind = match kw.as_str() {
            "set" => self.set(line)?,
            "define" => self.define(line)?,
            "eventgen" => {
                let attrs = self.attrs(EVENTGEN_ATTRS, "eventgen")?;
                if !attrs.has("rate") {
                    return Err(self.err(line, "eventgen needs rate=…"));
                }
                StmtKind::Eventgen { attrs }
            }
            "run" => StmtKind::Run(self.optional_value()?),
            "psrun" => self.psrun()?,
            "create" => {
                let (what, l) = self.word("files or processes")?;
                match what.as_str() {
                    "files" | "filesets" | "fileset" => StmtKind::Create(CreateWhat::Files),
                    "processes" | "process" => StmtKind::Create(CreateWhat::Processes),
                    other => {
                        return Err(
                            self.err(l, format!("cannot create '{other}' (files or processes)"))
                        )
                    }
                }
            }
            "shutdown" => {
                let (what, l) = self.word("processes")?;
                if what != "processes" && what != "process" {
                    return Err(self.err(l, format!("cannot shut down '{what}' (processes)")));
                }
                StmtKind::Shutdown
            }
            "sleep" => match self.optional_value()? {
                Some(v) => StmtKind::Sleep(v),
                None => return Err(self.err(line, "sleep needs a number of seconds")),
            },
            "stats" => {
                let (what, l) = self.word("clear or snap")?;
                match what.as_str() {
                    "clear" => StmtKind::StatsClear,
                    "snap" => StmtKind::StatsSnap,
                    other => {
                        return Err(self.err(
                            l,
                            format!("unsupported stats command '{other}' (clear, snap)"),
                        ))
                    }
                }
            }
            "echo" => StmtKind::Echo(self.text(line, "echo")?),
            "usage" => StmtKind::Usage(self.text(line, "usage")?),
            "system" => StmtKind::System(self.text(line, "system")?),
            "enable" => {
                let (what, l) = self.word("lathist or multi")?;
                match what.as_str() {
                    "lathist" => StmtKind::EnableLathist,
                    "multi" => {
                        // `enable multi master=… client=…`: the attributes
                        // are read and dropped with the warning.
                        while !self.at_statement_end() {
                            self.next();
                        }
                        StmtKind::Unhonoured {
                            what: "enable multi".into(),
                            why: "multi-client synchronisation is not implemented; this runs as one client",
                        }
                    }
                    _ => {
                        return Err(self.err(l, format!("cannot enable '{what}' (lathist, multi)")))
                    }
                }
            }
            "debug" => {
                let level = self.optional_value()?;
                StmtKind::Unhonoured {
                    what: format!("debug {}", level.map(|e| e.to_string()).unwrap_or_default()),
                    why: "xfilebench has no debug levels (it always prints its own errors)",
                }
            }
            "vars" => StmtKind::Vars,
            "list" => StmtKind::List,
            "quit" => StmtKind::Quit,
            "{" | "}" => return Err(self.err(line, format!("unexpected '{kw}'"))),
            other => return Err(self.err(line, format!("unknown statement '{other}'"))),
        };
        if !matches!(
            kind,
            StmtKind::DefineProcess { .. } | StmtKind::DefineComposite
        ) {
            self.end_of_statement()?;
        }
        Ok(Stmt { line, kind })
    }

    fn set(&mut self, line: usize) -> Result<StmtKind, ParseError> {
        let (target, l) = self.word("$variable or mode")?;
        if target == "mode" {
            let (q, lq) = self.word("quit")?;
            if q != "quit" {
                return Err(self.err(lq, format!("unsupported mode '{q}' (set mode quit …)")));
            }
            let (m, lm) = self.word("timeout, alldone or firstdone")?;
            let mode = match m.as_str() {
                "timeout" => QuitMode::Timeout,
                "alldone" => QuitMode::AllDone,
                "firstdone" => QuitMode::FirstDone,
                other => {
                    return Err(self.err(
                        lm,
                        format!("unknown quit mode '{other}' (timeout, alldone, firstdone)"),
                    ))
                }
            };
            return Ok(StmtKind::SetMode(mode));
        }
        let Some(name) = target.strip_prefix('$') else {
            return Err(self.err(l, format!("set needs a $variable, found '{target}'")));
        };
        check_var_name(self.file, l, name)?;
        self.expect(Tok::Eq)?;
        if self.at_statement_end() {
            return Err(self.err(line, format!("set ${name} has no value")));
        }
        let value = self.sum()?;
        Ok(StmtKind::SetVar {
            name: name.to_string(),
            value,
        })
    }

    fn define(&mut self, line: usize) -> Result<StmtKind, ParseError> {
        let (what, l) = self.word("fileset, file or process")?;
        match what.as_str() {
            "fileset" | "file" => {
                let attrs = self.attrs(FILESET_ATTRS, &format!("define {what}"))?;
                for needed in ["name", "path"] {
                    if !attrs.has(needed) {
                        return Err(self.err(line, format!("define {what} needs {needed}=…")));
                    }
                }
                Ok(StmtKind::DefineFileset {
                    attrs,
                    is_file: what == "file",
                })
            }
            "process" => {
                let attrs = self.attrs(PROCESS_ATTRS, "define process")?;
                if !attrs.has("name") {
                    return Err(self.err(line, "define process needs name=…"));
                }
                self.skip_newlines();
                self.expect(Tok::LBrace)?;
                let mut threads = Vec::new();
                loop {
                    self.skip_newlines();
                    match self.peek() {
                        Some(Tok::RBrace) => {
                            self.pos += 1;
                            break;
                        }
                        None => return Err(self.err(line, "define process: missing '}'")),
                        _ => {}
                    }
                    let (kw, tl) = self.word("thread")?;
                    if kw != "thread" {
                        return Err(self.err(tl, format!("expected thread, found '{kw}'")));
                    }
                    threads.push(self.thread(tl)?);
                }
                if threads.is_empty() {
                    return Err(self.err(line, "define process has no thread"));
                }
                self.end_of_statement()?;
                Ok(StmtKind::DefineProcess { attrs, threads })
            }
            "flowop" => self.define_composite(line),
            "randvar" => {
                let (name, value) = self.randvar_attrs(line, None)?;
                let Some(name) = name else {
                    return Err(self.err(line, "define randvar needs name=$…"));
                };
                Ok(StmtKind::SetVar { name, value })
            }
            other => Err(self.err(
                l,
                format!("cannot define '{other}' (fileset, file, process, flowop)"),
            )),
        }
    }

    fn thread(&mut self, line: usize) -> Result<ThreadDef, ParseError> {
        let attrs = self.attrs(THREAD_ATTRS, "thread")?;
        if !attrs.has("name") {
            return Err(self.err(line, "thread needs name=…"));
        }
        let flowops = self.flowop_block(line, "thread")?;
        Ok(ThreadDef {
            line,
            attrs,
            flowops,
        })
    }

    /// `{ flowop … ⏎ flowop … }`: the flowops of a thread or of a composite
    /// flowop, composite calls expanded.
    fn flowop_block(&mut self, line: usize, ctx: &str) -> Result<Vec<FlowopDef>, ParseError> {
        self.skip_newlines();
        self.expect(Tok::LBrace)?;
        let mut flowops = Vec::new();
        loop {
            self.skip_newlines();
            match self.peek() {
                Some(Tok::RBrace) => {
                    self.pos += 1;
                    break;
                }
                None => return Err(self.err(line, format!("{ctx}: missing '}}'"))),
                _ => {}
            }
            let (kw, fl) = self.word("flowop")?;
            if kw != "flowop" {
                return Err(self.err(fl, format!("expected flowop, found '{kw}'")));
            }
            flowops.extend(self.flowop(fl)?);
        }
        if flowops.is_empty() {
            return Err(self.err(line, format!("{ctx} has no flowop")));
        }
        Ok(flowops)
    }

    /// One `flowop TYPE attrs` line: a built-in flowop, or a composite
    /// flowop expanded into its body.
    fn flowop(&mut self, fl: usize) -> Result<Vec<FlowopDef>, ParseError> {
        let (kname, kl) = self.word("a flowop type")?;
        let composite = self.composites.get(&kname).cloned();
        let kind = match (&composite, FlowopKind::from_name(&kname)) {
            (Some(_), _) => FlowopKind::Composite,
            (None, Some(k)) => k,
            (None, None) => return Err(self.err(kl, format!("unknown flowop '{kname}'"))),
        };
        let mut allowed: Vec<String> = vec!["name".into(), "iters".into()];
        allowed.extend(kind.attrs().iter().map(|a| a.to_string()));
        if let Some(c) = &composite {
            allowed.extend(c.params.iter().map(|p| format!("${p}")));
        }
        let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
        let attrs = self.attrs(&allowed, &format!("flowop {kname}"))?;
        if !attrs.has("name") {
            return Err(self.err(fl, format!("flowop {kname} needs name=…")));
        }
        if !self.at_statement_end() && self.peek() != Some(&Tok::RBrace) {
            let d = self.peek().map(|t| t.describe()).unwrap_or_default();
            return Err(self.err(self.line(), format!("unexpected {d} after flowop {kname}")));
        }
        match composite {
            Some(c) => Ok(crate::composite::expand(&c, fl, attrs)),
            None => Ok(vec![FlowopDef {
                line: fl,
                kind,
                attrs,
            }]),
        }
    }

    /// `define flowop name=N, $p1, $p2 { flowop … }`: remembered, and
    /// expanded wherever `flowop N` is used.
    fn define_composite(&mut self, line: usize) -> Result<StmtKind, ParseError> {
        let mut name = None;
        let mut params = Vec::new();
        loop {
            let (w, wl) = self.word("name=… or a $parameter")?;
            if w == "name" {
                self.expect(Tok::Eq)?;
                name = Some(self.word("a flowop name")?.0);
            } else if let Some(p) = w.strip_prefix('$') {
                check_var_name(self.file, wl, p)?;
                params.push(p.to_string());
            } else {
                return Err(self.err(wl, format!("define flowop: unexpected '{w}'")));
            }
            if self.peek() == Some(&Tok::Comma) {
                self.pos += 1;
            } else {
                break;
            }
        }
        let Some(name) = name else {
            return Err(self.err(line, "define flowop needs name=…"));
        };
        if FlowopKind::from_name(&name).is_some() {
            return Err(self.err(
                line,
                format!("define flowop: '{name}' is a built-in flowop"),
            ));
        }
        let body = self.flowop_block(line, "define flowop")?;
        self.composites.insert(
            name.clone(),
            crate::composite::Composite { name, params, body },
        );
        Ok(StmtKind::DefineComposite)
    }

    fn attrs(&mut self, allowed: &[&str], ctx: &str) -> Result<Attrs, ParseError> {
        let mut out = Vec::new();
        loop {
            if self.at_statement_end()
                || matches!(self.peek(), Some(Tok::LBrace) | Some(Tok::RBrace))
            {
                break;
            }
            let (name, line) = self.word("an attribute name")?;
            if !allowed.contains(&name.as_str()) {
                return Err(self.err(line, format!("{ctx}: unknown attribute '{name}'")));
            }
            let value = if self.peek() == Some(&Tok::Eq) {
                self.pos += 1;
                if self.at_statement_end() || self.peek() == Some(&Tok::Comma) {
                    return Err(self.err(line, format!("{ctx}: attribute '{name}' has no value")));
                }
                Some(self.value()?)
            } else {
                None
            };
            out.push(Attr { name, value, line });
            match self.peek() {
                Some(Tok::Comma) => {
                    self.pos += 1;
                }
                None | Some(Tok::Newline) | Some(Tok::LBrace) | Some(Tok::RBrace) => break,
                Some(t) => {
                    let d = t.describe();
                    return Err(self.err(
                        self.line(),
                        format!("{ctx}: expected ',' or end of line, found {d}"),
                    ));
                }
            }
        }
        Ok(Attrs(out))
    }

    /// The operator at the cursor, if the next word is one of `ops`.
    fn operator(&self, ops: &[char]) -> Option<char> {
        match self.peek() {
            Some(Tok::Word(w)) if w.len() == 1 => w.chars().next().filter(|c| ops.contains(c)),
            _ => None,
        }
    }

    /// `term (('+' | '-') term)*`, Filebench's arithmetic in `set`.
    fn sum(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.product()?;
        while let Some(op) = self.operator(&['+', '-']) {
            self.next();
            let rhs = self.product()?;
            e = Expr::Binary {
                op,
                lhs: Box::new(e),
                rhs: Box::new(rhs),
            };
        }
        Ok(e)
    }

    /// `factor (('*' | '/' | '%') factor)*`.
    fn product(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.factor()?;
        while let Some(op) = self.operator(&['*', '/', '%']) {
            self.next();
            let rhs = self.factor()?;
            e = Expr::Binary {
                op,
                lhs: Box::new(e),
                rhs: Box::new(rhs),
            };
        }
        Ok(e)
    }

    /// A value, or a parenthesized sum.
    fn factor(&mut self) -> Result<Expr, ParseError> {
        if self.peek() == Some(&Tok::LParen) {
            self.next();
            let e = self.sum()?;
            self.expect(Tok::RParen)?;
            return Ok(e);
        }
        self.value()
    }

    fn value(&mut self) -> Result<Expr, ParseError> {
        let line = self.line();
        match self.next() {
            Some(Token {
                kind: Tok::Str(s), ..
            }) => Ok(Expr::Str(s)),
            Some(Token {
                kind: Tok::Word(w), ..
            }) => {
                if w == "cvar" && self.peek() == Some(&Tok::LParen) {
                    return self.cvar(line);
                }
                if w == "randvar" && self.peek() == Some(&Tok::LParen) {
                    self.next();
                    let e = self.randvar_attrs(line, Some(Tok::RParen))?;
                    return Ok(e.1);
                }
                if let Some(v) = w.strip_prefix('$') {
                    check_var_name(self.file, line, v)?;
                    return Ok(Expr::Var(v.to_string()));
                }
                Ok(Expr::Word(w))
            }
            Some(t) => Err(self.err(
                t.line,
                format!("expected a value, found {}", t.kind.describe()),
            )),
            None => Err(self.err(line, "expected a value, found end of file")),
        }
    }

    /// `cvar(type=cvar-gamma,parameters=mean:128k;gamma:1.5)`.
    fn cvar(&mut self, line: usize) -> Result<Expr, ParseError> {
        self.expect(Tok::LParen)?;
        let mut kind = None;
        let mut params = Vec::new();
        loop {
            let (key, kl) = self.word("type or parameters")?;
            self.expect(Tok::Eq)?;
            match key.as_str() {
                "type" => {
                    let (t, tl) = self.word("a cvar type")?;
                    if crate::dist::params_of(&t).is_none() {
                        let known: Vec<&str> = crate::dist::TYPES.iter().map(|(k, _)| *k).collect();
                        return Err(self.err(
                            tl,
                            format!("unknown cvar type '{t}' ({})", known.join(", ")),
                        ));
                    }
                    kind = Some(t);
                }
                "parameters" => loop {
                    let (p, pl) = self.word("name:value")?;
                    let Some((k, v)) = p.split_once(':') else {
                        return Err(self.err(pl, format!("cvar parameter '{p}' is not name:value")));
                    };
                    let v = match v.strip_prefix('$') {
                        Some(var) => Expr::Var(var.to_string()),
                        None => Expr::Word(v.to_string()),
                    };
                    params.push((k.to_string(), v));
                    if self.peek() == Some(&Tok::Semi) {
                        self.pos += 1;
                    } else {
                        break;
                    }
                },
                "min" | "max" | "round" => {
                    return Err(self.err(kl, format!("unsupported cvar attribute '{key}'")));
                }
                other => return Err(self.err(kl, format!("unknown cvar attribute '{other}'"))),
            }
            match self.next().map(|t| t.kind) {
                Some(Tok::Comma) => continue,
                Some(Tok::RParen) => break,
                Some(t) => {
                    return Err(self.err(
                        line,
                        format!("cvar: expected ',' or ')', found {}", t.describe()),
                    ))
                }
                None => return Err(self.err(line, "cvar: missing ')'")),
            }
        }
        let Some(kind) = kind else {
            return Err(self.err(line, "cvar needs type=…"));
        };
        let known = crate::dist::params_of(&kind).unwrap_or(&[]);
        if let Some((k, _)) = params.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(self.err(
                line,
                format!("unknown {kind} parameter '{k}' ({})", known.join(", ")),
            ));
        }
        if kind == "cvar-gamma" && !params.iter().any(|(k, _)| k == "mean") {
            return Err(self.err(line, "cvar-gamma needs parameters=mean:…"));
        }
        Ok(Expr::Cvar { kind, params })
    }

    /// The attributes of a random variable up to `end` (`)` of
    /// `randvar(…)`, or the end of a `define randvar` statement): its
    /// `name=$var` if given, and the expression.
    fn randvar_attrs(
        &mut self,
        line: usize,
        end: Option<Tok>,
    ) -> Result<(Option<String>, Expr), ParseError> {
        const KEYS: &[&str] = &["type", "min", "round", "mean", "gamma"];
        let (mut name, mut attrs, mut table) = (None, Vec::new(), Vec::new());
        loop {
            self.skip_newlines_if(end.is_some());
            if end.is_some() && self.peek() == end.as_ref() {
                self.next();
                break;
            }
            let (key, kl) = self.word("a randvar attribute")?;
            self.expect(Tok::Eq)?;
            self.skip_newlines();
            match key.as_str() {
                "name" => {
                    let (v, vl) = self.word("$name")?;
                    let Some(v) = v.strip_prefix('$') else {
                        return Err(
                            self.err(vl, format!("randvar name must be a $variable, not '{v}'"))
                        );
                    };
                    check_var_name(self.file, vl, v)?;
                    name = Some(v.to_string());
                }
                "randtable" => table = self.randtable(kl)?,
                "seed" | "randsrc" => {
                    self.warnings.push((
                        kl,
                        format!("randvar {key}="),
                        "xfilebench draws from its own generator, seeded by --seed",
                    ));
                    attrs.push((key.clone(), self.value()?));
                }
                k if KEYS.contains(&k) => attrs.push((key.clone(), self.value()?)),
                other => return Err(self.err(kl, format!("unknown randvar attribute '{other}'"))),
            }
            self.skip_newlines_if(end.is_some());
            match self.peek() {
                Some(Tok::Comma) => {
                    self.next();
                }
                _ if end.is_none() => break,
                Some(t) if Some(t) == end.as_ref() => {}
                _ => return Err(self.err(self.line(), "randvar: expected ',' or ')'")),
            }
        }
        if !attrs.iter().any(|(k, _)| k == "type") {
            if table.is_empty() {
                return Err(self.err(line, "randvar needs type=… (uniform, gamma, tabular)"));
            }
            attrs.push(("type".into(), Expr::Word("tabular".into())));
        }
        Ok((name, Expr::Randvar { attrs, table }))
    }

    fn skip_newlines_if(&mut self, yes: bool) {
        if yes {
            self.skip_newlines();
        }
    }

    /// `{{percent, min, max}, …}`, over as many lines as it likes.
    fn randtable(&mut self, line: usize) -> Result<Vec<[Expr; 3]>, ParseError> {
        self.expect(Tok::LBrace)?;
        let mut rows = Vec::new();
        loop {
            self.skip_newlines();
            match self.next().map(|t| t.kind) {
                Some(Tok::RBrace) => break,
                Some(Tok::Comma) if !rows.is_empty() => continue,
                Some(Tok::LBrace) => {}
                _ => return Err(self.err(line, "randtable: expected '{percent, min, max}'")),
            }
            let mut row = Vec::with_capacity(3);
            for k in 0..3 {
                self.skip_newlines();
                row.push(self.value()?);
                self.skip_newlines();
                let want = if k < 2 { Tok::Comma } else { Tok::RBrace };
                self.expect(want)?;
            }
            if let Ok(r) = <[Expr; 3]>::try_from(row) {
                rows.push(r);
            }
        }
        if rows.is_empty() {
            return Err(self.err(line, "randtable has no row"));
        }
        Ok(rows)
    }

    fn optional_value(&mut self) -> Result<Option<Expr>, ParseError> {
        if self.at_statement_end() {
            Ok(None)
        } else {
            Ok(Some(self.value()?))
        }
    }

    fn psrun(&mut self) -> Result<StmtKind, ParseError> {
        let mut interval = None;
        let mut runtime = None;
        while !self.at_statement_end() {
            let v = self.value()?;
            match &v {
                Expr::Word(w) if w.starts_with('-') => {
                    interval = Some(Expr::Word(w[1..].to_string()))
                }
                _ => runtime = Some(v),
            }
        }
        Ok(StmtKind::Psrun { interval, runtime })
    }

    fn text(&mut self, line: usize, what: &str) -> Result<Expr, ParseError> {
        match self.next() {
            Some(Token {
                kind: Tok::Str(s), ..
            }) => Ok(Expr::Str(s)),
            Some(Token {
                kind: Tok::Word(w), ..
            }) => Ok(Expr::Str(w)),
            _ => Err(self.err(line, format!("{what} needs a quoted string"))),
        }
    }
}

fn check_var_name(file: &str, line: usize, name: &str) -> Result<(), ParseError> {
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ParseError::new(
            file,
            line,
            format!("bad variable name '${name}'"),
        ))
    }
}
