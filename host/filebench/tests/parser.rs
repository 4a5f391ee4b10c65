// SPDX-License-Identifier: Apache-2.0
//! Parser tests: every construct of the language, and malformed files with
//! the line of the error.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use xvfs_filebench::ast::*;
use xvfs_filebench::parse;

fn ok(src: &str) -> Script {
    match parse("w.f", src) {
        Ok(s) => s,
        Err(e) => panic!("parse failed: {e}\n{src}"),
    }
}

fn err(src: &str) -> String {
    match parse("w.f", src) {
        Ok(s) => panic!("parsed but should not: {s:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn set_variables_and_modes() {
    let s = ok("set $a=128k\nset $b = \"x y\"\nset $c=true\nset $d=$a\nset mode quit timeout\nset mode quit alldone\nset mode quit firstdone\n");
    let k: Vec<_> = s.stmts.iter().map(|s| s.kind.clone()).collect();
    assert_eq!(
        k[0],
        StmtKind::SetVar {
            name: "a".into(),
            value: Expr::Word("128k".into())
        }
    );
    assert_eq!(
        k[1],
        StmtKind::SetVar {
            name: "b".into(),
            value: Expr::Str("x y".into())
        }
    );
    assert_eq!(
        k[2],
        StmtKind::SetVar {
            name: "c".into(),
            value: Expr::Word("true".into())
        }
    );
    assert_eq!(
        k[3],
        StmtKind::SetVar {
            name: "d".into(),
            value: Expr::Var("a".into())
        }
    );
    assert_eq!(k[4], StmtKind::SetMode(QuitMode::Timeout));
    assert_eq!(k[5], StmtKind::SetMode(QuitMode::AllDone));
    assert_eq!(k[6], StmtKind::SetMode(QuitMode::FirstDone));
    assert_eq!(
        s.stmts.iter().map(|s| s.line).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6, 7]
    );
}

#[test]
fn define_fileset_with_every_attribute() {
    let s = ok("define fileset name=fs,path=/tmp,size=cvar(type=cvar-gamma,parameters=mean:16k;gamma:1.5),entries=100,dirwidth=10,dirgamma=0,filesizegamma=1500,prealloc=80,reuse,paralloc,readonly,trusttree,leafdirs=5,cached=false\n");
    let StmtKind::DefineFileset { attrs, is_file } = &s.stmts[0].kind else {
        panic!()
    };
    assert!(!is_file);
    let names: Vec<_> = attrs.0.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, FILESET_ATTRS);
    assert_eq!(
        attrs.get("size").unwrap().value,
        Some(Expr::Cvar {
            kind: "cvar-gamma".into(),
            params: vec![
                ("mean".into(), Expr::Word("16k".into())),
                ("gamma".into(), Expr::Word("1.5".into()))
            ]
        })
    );
    assert_eq!(attrs.get("reuse").unwrap().value, None);
    let s = ok("define file name=f1,path=$dir,size=1m,prealloc,reuse\n");
    assert!(matches!(
        s.stmts[0].kind,
        StmtKind::DefineFileset { is_file: true, .. }
    ));
}

fn flowop_line(kind: FlowopKind) -> String {
    let attrs = kind
        .attrs()
        .iter()
        .map(|a| match *a {
            "random" | "dsync" | "directio" | "opennext" | "blocking" => a.to_string(),
            "filesetname" | "filename" | "target" => format!("{a}=x"),
            _ => format!("{a}=1"),
        })
        .collect::<Vec<_>>();
    let mut line = format!("    flowop {} name=op{}", kind.name(), kind.name());
    for a in attrs {
        line.push(',');
        line.push_str(&a);
    }
    line
}

#[test]
fn define_process_with_every_flowop() {
    let mut src = String::from("define process name=p,instances=2\n{\n  thread name=t,memsize=10m,instances=3,useism\n  {\n");
    for (_, k) in FlowopKind::ALL {
        src.push_str(&flowop_line(k));
        src.push('\n');
    }
    src.push_str("  }\n}\n");
    let s = ok(&src);
    let StmtKind::DefineProcess { attrs, threads } = &s.stmts[0].kind else {
        panic!()
    };
    assert_eq!(
        attrs.get("instances").unwrap().value,
        Some(Expr::Word("2".into()))
    );
    assert_eq!(threads.len(), 1);
    assert!(threads[0].attrs.has("useism"));
    let kinds: Vec<_> = threads[0].flowops.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        FlowopKind::ALL.iter().map(|(_, k)| *k).collect::<Vec<_>>()
    );
    assert_eq!(threads[0].flowops[0].line, 5);
    assert_eq!(
        threads[0].flowops.last().unwrap().line,
        4 + FlowopKind::ALL.len()
    );
}

#[test]
fn braces_on_the_same_line_and_two_threads() {
    let s = ok("define process name=p {\n thread name=a { flowop hog name=h,value=1 }\n thread name=b\n {\n flowop delay name=d,value=1\n }\n}\n");
    let StmtKind::DefineProcess { threads, .. } = &s.stmts[0].kind else {
        panic!()
    };
    assert_eq!(threads.len(), 2);
}

#[test]
fn commands() {
    let s = ok("eventgen rate=100\nrun\nrun 60\nrun $runtime\npsrun -5 30\ncreate files\ncreate processes\nsleep 3\nstats clear\nstats snap\necho \"hi $x\"\nusage \"set \\$dir=<dir>\"\nenable lathist\nsystem \"true\"\nshutdown processes\nquit\n");
    let k: Vec<_> = s.stmts.iter().map(|s| s.kind.clone()).collect();
    assert!(matches!(k[0], StmtKind::Eventgen { .. }));
    assert_eq!(k[1], StmtKind::Run(None));
    assert_eq!(k[2], StmtKind::Run(Some(Expr::Word("60".into()))));
    assert_eq!(k[3], StmtKind::Run(Some(Expr::Var("runtime".into()))));
    assert_eq!(
        k[4],
        StmtKind::Psrun {
            interval: Some(Expr::Word("5".into())),
            runtime: Some(Expr::Word("30".into()))
        }
    );
    assert_eq!(k[5], StmtKind::Create(CreateWhat::Files));
    assert_eq!(k[6], StmtKind::Create(CreateWhat::Processes));
    assert_eq!(k[7], StmtKind::Sleep(Expr::Word("3".into())));
    assert_eq!(k[8], StmtKind::StatsClear);
    assert_eq!(k[9], StmtKind::StatsSnap);
    assert_eq!(k[10], StmtKind::Echo(Expr::Str("hi $x".into())));
    assert_eq!(
        k[11],
        StmtKind::Usage(Expr::Str("set \u{1}dir=<dir>".into()))
    );
    assert_eq!(k[12], StmtKind::EnableLathist);
    assert_eq!(k[13], StmtKind::System(Expr::Str("true".into())));
    assert_eq!(k[14], StmtKind::Shutdown);
    assert_eq!(k[15], StmtKind::Quit);
}

#[test]
fn comments_and_continuations() {
    let s = ok("# header\n\nset $a=1 # trailing\ndefine fileset name=f,\\\n  path=/tmp,\\\n  size=1k,entries=2\nrun 1\n");
    assert_eq!(s.stmts.len(), 3);
    assert_eq!(s.stmts[1].line, 4);
    assert_eq!(s.stmts[2].line, 7);
}

#[test]
fn malformed_files_name_the_line() {
    let cases: &[(&str, &str)] = &[
        (
            "set $a=1\nfrobnicate\n",
            "w.f:2: unknown statement 'frobnicate'",
        ),
        (
            "\n\ndefine process name=p\n{\n thread name=t\n {\n  flowop zap name=z\n }\n}\n",
            "w.f:7: unknown flowop 'zap'",
        ),
        (
            "define fileset name=a,path=/t,colour=red\n",
            "w.f:1: define fileset: unknown attribute 'colour'",
        ),
        (
            "define process name=p\n{\n thread name=t\n {\n  flowop read name=r,iosize=4k\n",
            "w.f:3: thread: missing '}'",
        ),
        ("echo \"oops\n\n", "w.f:1: unterminated string"),
        (
            "set mode quit never\n",
            "w.f:1: unknown quit mode 'never' (timeout, alldone, firstdone)",
        ),
        ("set a=1\n", "w.f:1: set needs a $variable, found 'a'"),
        ("set $a=\n", "w.f:1: set $a has no value"),
        (
            "define fileset name=a,path=/t,size=cvar(type=cvar-zipf,parameters=mean:1)\n",
            "w.f:1: unknown cvar type 'cvar-zipf' (cvar-gamma, cvar-uniform, cvar-normal, cvar-exponential, cvar-erlang, cvar-lognormal, cvar-triangular, cvar-weibull)",
        ),
        (
            "define process name=p\n{\n thread name=t\n {\n  flowop read iosize=4k\n }\n}\n",
            "w.f:5: flowop read needs name=…",
        ),
        (
            "define process name=p\n{\n thread name=t\n {\n  flowop read name=r,iosize=\n }\n}\n",
            "w.f:5: flowop read: attribute 'iosize' has no value",
        ),
        (
            "define process name=p\n{\n}\n",
            "w.f:1: define process has no thread",
        ),
        (
            "define process name=p\n{\n thread name=t\n {\n  flowop read name=r,value=3\n }\n}\n",
            "w.f:5: flowop read: unknown attribute 'value'",
        ),
        (
            "define randvar name=$r\n",
            "w.f:1: randvar needs type=… (uniform, gamma, tabular)",
        ),
        (
            "define fileset path=/t\n",
            "w.f:1: define fileset needs name=…",
        ),
        (
            "stats dump\n",
            "w.f:1: unsupported stats command 'dump' (clear, snap)",
        ),
        ("run 1 2\n", "w.f:1: unexpected '2' after the statement"),
        ("eventgen\n", "w.f:1: eventgen needs rate=…"),
        ("}\n", "w.f:1: expected a statement, found '}'"),
    ];
    for (src, want) in cases {
        assert_eq!(&err(src), want, "source:\n{src}");
    }
}

#[test]
fn a_trailing_comma_continues_a_statement_as_in_filebench() {
    let s = ok("define fileset name=manyfiles,\n  path=/tmp,size=4k,\n\n  entries=2\nrun 1\n");
    assert_eq!(s.stmts.len(), 2);
    assert_eq!(s.stmts[1].line, 5);
}

#[test]
fn arithmetic_in_set_follows_precedence_and_parentheses() {
    use xvfs_filebench::value::Vars;
    let s = ok("set $n=10\nset $t=$n * 3 + 2\nset $u=( $n + 2 ) * 4k\nset $v=$n / 4 - 1\n");
    let mut vars = Vars::default();
    let mut got = Vec::new();
    for st in &s.stmts {
        if let StmtKind::SetVar { name, value } = &st.kind {
            let v = vars.eval(value).unwrap();
            vars.set(name, v);
            got.push(vars.text(&Expr::Var(name.clone())).unwrap());
        }
    }
    assert_eq!(got, vec!["10", "32", "49152", "1.5"]);
    let zero = ok("set $z=1 / 0\n");
    let StmtKind::SetVar { value, .. } = &zero.stmts[0].kind else {
        panic!("not a set")
    };
    assert!(vars.eval(value).unwrap_err().contains("division by zero"));
}

#[test]
fn composite_flowop_definitions_are_checked() {
    assert_eq!(
        err("define flowop name=read, $x\n{\n flowop statfile name=s,filesetname=$x\n}\n"),
        "w.f:1: define flowop: 'read' is a built-in flowop"
    );
    assert_eq!(
        err("define flowop name=c, $x\n{\n flowop statfile name=s,filesetname=$x\n}\ndefine process name=p\n{\n thread name=t\n {\n  flowop c name=c1, $y=1\n }\n}\n"),
        "w.f:9: flowop c: unknown attribute '$y'"
    );
}

#[test]
fn randvar_values_and_definitions_span_lines() {
    let s = ok("set $w = randvar(type=tabular, min=1k, round=1k, randtable =\n{{ 50, 1k, 7k},\n {50, 9k, 15k}\n})\ndefine randvar name=$i, type=tabular, min=1k, randtable =\n{{ 80, 1k, 4k},\n { 20, 4k, 16k}}\nset $g = randvar(type=gamma, min=0, gamma=100)\n");
    let names: Vec<_> = s
        .stmts
        .iter()
        .filter_map(|st| match &st.kind {
            StmtKind::SetVar {
                name,
                value: Expr::Randvar { table, .. },
            } => Some((name.clone(), table.len())),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec![("w".into(), 2), ("i".into(), 2), ("g".into(), 0)]
    );
    assert_eq!(
        err("set $x = randvar(type=tabular, colour=red)\n"),
        "w.f:1: unknown randvar attribute 'colour'"
    );
}
