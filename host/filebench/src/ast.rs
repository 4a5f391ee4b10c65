// SPDX-License-Identifier: Apache-2.0
//! The parsed form of a workload file. Values stay unresolved (`$var`
//! references are looked up when a statement runs, so `-D` overrides and later
//! `set`s apply).

use std::fmt;

/// A value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A bare word: number (`128k`), boolean, name or path.
    Word(String),
    /// `$name`.
    Var(String),
    /// A quoted string (may contain `$name` references).
    Str(String),
    /// `cvar(type=cvar-gamma,parameters=mean:…;gamma:…)`.
    Cvar {
        kind: String,
        params: Vec<(String, Expr)>,
    },
    /// `randvar(type=…, min=…, round=…, mean=…, gamma=…, randtable={{…}})`.
    Randvar {
        attrs: Vec<(String, Expr)>,
        /// Rows of `randtable`: percent, segment minimum, segment maximum.
        table: Vec<[Expr; 3]>,
    },
    /// Arithmetic in `set`: `lhs op rhs` with `op` one of `+ - * / %`.
    Binary {
        op: char,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Word(w) => write!(f, "{w}"),
            Expr::Var(v) => write!(f, "${v}"),
            Expr::Str(s) => write!(f, "\"{s}\""),
            Expr::Cvar { kind, .. } => write!(f, "cvar(type={kind},…)"),
            Expr::Randvar { .. } => write!(f, "randvar(…)"),
            Expr::Binary { op, lhs, rhs } => write!(f, "({lhs} {op} {rhs})"),
        }
    }
}

/// `name` or `name=value` in an attribute list.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub name: String,
    pub value: Option<Expr>,
    pub line: usize,
}

/// An attribute list in source order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attrs(pub Vec<Attr>);

impl Attrs {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.iter().rev().find(|a| a.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// When a `run` ends (`set mode quit …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuitMode {
    /// At the end of the run time (default).
    #[default]
    Timeout,
    /// When every thread has finished (or at the run time).
    AllDone,
    /// When the first thread has finished (or at the run time).
    FirstDone,
}

/// The flowops the runner knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowopKind {
    CreateFile,
    OpenFile,
    CloseFile,
    DeleteFile,
    StatFile,
    ReadWholeFile,
    WriteWholeFile,
    AppendFile,
    AppendFileRand,
    Read,
    Write,
    Fsync,
    FsyncSet,
    Mkdir,
    Rmdir,
    ListDir,
    Delay,
    Hog,
    FinishOnCount,
    FinishOnBytes,
    EventLimit,
    IopsLimit,
    OpsLimit,
    BwLimit,
    SemBlock,
    SemPost,
    AioWrite,
    AioWait,
    Block,
    Wakeup,
    /// Start of an expanded composite flowop (`define flowop`): its `iters`
    /// repeat the body up to the matching [`FlowopKind::CompositeEnd`].
    Composite,
    /// End of an expanded composite flowop: counts one pass of the body.
    CompositeEnd,
}

impl FlowopKind {
    /// Every kind with its name in the language.
    pub const ALL: [(&'static str, FlowopKind); 30] = [
        ("createfile", FlowopKind::CreateFile),
        ("openfile", FlowopKind::OpenFile),
        ("closefile", FlowopKind::CloseFile),
        ("deletefile", FlowopKind::DeleteFile),
        ("statfile", FlowopKind::StatFile),
        ("readwholefile", FlowopKind::ReadWholeFile),
        ("writewholefile", FlowopKind::WriteWholeFile),
        ("appendfile", FlowopKind::AppendFile),
        ("appendfilerand", FlowopKind::AppendFileRand),
        ("read", FlowopKind::Read),
        ("write", FlowopKind::Write),
        ("fsync", FlowopKind::Fsync),
        ("fsyncset", FlowopKind::FsyncSet),
        ("makedir", FlowopKind::Mkdir),
        ("removedir", FlowopKind::Rmdir),
        ("listdir", FlowopKind::ListDir),
        ("delay", FlowopKind::Delay),
        ("hog", FlowopKind::Hog),
        ("finishoncount", FlowopKind::FinishOnCount),
        ("finishonbytes", FlowopKind::FinishOnBytes),
        ("eventlimit", FlowopKind::EventLimit),
        ("iopslimit", FlowopKind::IopsLimit),
        ("opslimit", FlowopKind::OpsLimit),
        ("bwlimit", FlowopKind::BwLimit),
        ("semblock", FlowopKind::SemBlock),
        ("sempost", FlowopKind::SemPost),
        ("aiowrite", FlowopKind::AioWrite),
        ("aiowait", FlowopKind::AioWait),
        ("block", FlowopKind::Block),
        ("wakeup", FlowopKind::Wakeup),
    ];

    /// Names this runner accepted before it used Filebench's.
    const ALIASES: &'static [(&'static str, FlowopKind)] =
        &[("mkdir", FlowopKind::Mkdir), ("rmdir", FlowopKind::Rmdir)];

    pub fn from_name(name: &str) -> Option<FlowopKind> {
        Self::ALL
            .iter()
            .chain(Self::ALIASES)
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
    }

    pub fn name(self) -> &'static str {
        if matches!(self, FlowopKind::Composite | FlowopKind::CompositeEnd) {
            return "composite";
        }
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Counted in the `IO Summary:` line (Filebench leaves out the
    /// synchronisation, limit and completion flowops).
    pub fn is_io_summary(self) -> bool {
        !matches!(
            self,
            FlowopKind::Delay
                | FlowopKind::Hog
                | FlowopKind::FinishOnCount
                | FlowopKind::FinishOnBytes
                | FlowopKind::EventLimit
                | FlowopKind::IopsLimit
                | FlowopKind::OpsLimit
                | FlowopKind::BwLimit
                | FlowopKind::SemBlock
                | FlowopKind::SemPost
                | FlowopKind::Block
                | FlowopKind::Wakeup
                | FlowopKind::Composite
                | FlowopKind::CompositeEnd
        )
    }

    /// Reads data (the "rd" of `rd/wr`).
    pub fn is_read(self) -> bool {
        matches!(self, FlowopKind::Read | FlowopKind::ReadWholeFile)
    }

    /// Writes data (the "wr" of `rd/wr`).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            FlowopKind::Write
                | FlowopKind::WriteWholeFile
                | FlowopKind::AppendFile
                | FlowopKind::AppendFileRand
                | FlowopKind::AioWrite
        )
    }

    /// The attributes this flowop accepts (besides `name`).
    pub fn attrs(self) -> &'static [&'static str] {
        use FlowopKind::*;
        const FILE_PICK: &[&str] = &[
            "filesetname",
            "filename",
            "fd",
            "indexed",
            "dsync",
            "directio",
        ];
        match self {
            CreateFile | OpenFile => FILE_PICK,
            CloseFile | Fsync => &["fd"],
            FsyncSet => &["filesetname", "filename"],
            DeleteFile | StatFile => &["filesetname", "filename", "fd", "indexed"],
            ReadWholeFile | WriteWholeFile => &[
                "filesetname",
                "filename",
                "fd",
                "srcfd",
                "iosize",
                "indexed",
                "dsync",
                "directio",
                "iters",
            ],
            AppendFile | AppendFileRand => &[
                "filesetname",
                "filename",
                "fd",
                "iosize",
                "indexed",
                "dsync",
                "directio",
                "iters",
            ],
            Read | Write | AioWrite => &[
                "filesetname",
                "filename",
                "fd",
                "iosize",
                "random",
                "workingset",
                "dsync",
                "directio",
                "opennext",
                "iters",
                "indexed",
            ],
            Mkdir | Rmdir | ListDir => &["filesetname", "filename", "indexed"],
            Delay | Hog => &["value"],
            FinishOnCount | FinishOnBytes => &["value", "target"],
            EventLimit => &[],
            IopsLimit | OpsLimit | BwLimit => &["value", "target"],
            SemBlock => &["value", "highwater"],
            SemPost => &["value", "target", "blocking", "highwater"],
            AioWait => &["value"],
            Block => &[],
            Wakeup => &["target"],
            Composite | CompositeEnd => &["iters"],
        }
    }
}

/// `flowop KIND name=…,…`.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowopDef {
    pub line: usize,
    pub kind: FlowopKind,
    pub attrs: Attrs,
}

/// `thread name=…,memsize=…,instances=… { flowop … }`.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadDef {
    pub line: usize,
    pub attrs: Attrs,
    pub flowops: Vec<FlowopDef>,
}

/// `create …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateWhat {
    Files,
    Processes,
}

/// One statement.
#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    /// `set $name=value`.
    SetVar { name: String, value: Expr },
    /// `set mode quit timeout|alldone|firstdone`.
    SetMode(QuitMode),
    /// `define fileset …` (`is_file` false) or `define file …`.
    DefineFileset { attrs: Attrs, is_file: bool },
    /// `define process … { thread … { flowop … } }`.
    DefineProcess {
        attrs: Attrs,
        threads: Vec<ThreadDef>,
    },
    /// `eventgen rate=…`.
    Eventgen { attrs: Attrs },
    /// `run [seconds]`.
    Run(Option<Expr>),
    /// `psrun [-interval] [seconds]`: a run with a progress line per interval.
    Psrun {
        interval: Option<Expr>,
        runtime: Option<Expr>,
    },
    /// `create files|processes`.
    Create(CreateWhat),
    /// `shutdown processes`.
    Shutdown,
    /// `sleep seconds`.
    Sleep(Expr),
    /// `stats clear`.
    StatsClear,
    /// `stats snap`.
    StatsSnap,
    /// `echo "text"`.
    Echo(Expr),
    /// `usage "text"`.
    Usage(Expr),
    /// `enable lathist`.
    EnableLathist,
    /// `system "command"`.
    System(Expr),
    /// `vars`: print every variable.
    Vars,
    /// `define flowop …`: expanded by the parser where it is used.
    DefineComposite,
    /// `list`: print the filesets and processes defined.
    List,
    /// A statement parsed but not honoured (`debug N`, `enable multi`):
    /// one warning with what differs, and the run goes on.
    Unhonoured { what: String, why: &'static str },
    /// `quit`.
    Quit,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub line: usize,
    pub kind: StmtKind,
}

/// A whole workload file.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub file: String,
    pub stmts: Vec<Stmt>,
    /// Constructs parsed but not honoured: (line, construct, what differs),
    /// printed once each when the script runs.
    pub warnings: Vec<(usize, String, &'static str)>,
}

/// Attributes of `define fileset` / `define file`.
pub const FILESET_ATTRS: &[&str] = &[
    "name",
    "path",
    "size",
    "entries",
    "dirwidth",
    "dirgamma",
    "filesizegamma",
    "prealloc",
    "reuse",
    "paralloc",
    "readonly",
    "trusttree",
    "leafdirs",
    "cached",
];

/// Attributes of `define process`.
pub const PROCESS_ATTRS: &[&str] = &["name", "instances"];

/// Attributes of `thread`.
pub const THREAD_ATTRS: &[&str] = &["name", "memsize", "instances", "useism"];

/// Attributes of `eventgen`.
pub const EVENTGEN_ATTRS: &[&str] = &["rate"];
