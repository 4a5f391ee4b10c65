// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The corpus: personalities written for the tests (tests/corpus/*.f) that
//! together use every statement, attribute and flowop of the language.
//! [`CONSTRUCTS`] maps each construct to the file that uses it (checked);
//! each file runs for about a second on a scratch directory, ends without
//! error and has an `IO Summary`, and per-flowop counts follow the flowop
//! graph.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use xvfs_filebench::engine::{Engine, Options};
use xvfs_filebench::parse;
use xvfs_filebench::value::Vars;

/// (construct as written in a workload, corpus file that uses it).
const CONSTRUCTS: &[(&str, &str)] = &[
    ("set $nfiles=20", "basics"),
    ("set $label=\"", "basics"),
    ("* 2 + (4 - 2)", "basics"),
    ("set mode quit alldone", "pacing"),
    ("eventgen rate=", "pacing"),
    ("define fileset", "basics"),
    ("define file name=", "basics"),
    ("define process", "basics"),
    ("define flowop name=", "random"),
    ("define randvar", "random"),
    ("randvar(type=tabular", "random"),
    ("randvar(type=uniform", "random"),
    ("type=gamma", "random"),
    ("randtable", "random"),
    ("cvar-gamma", "random"),
    ("cvar-uniform", "random"),
    ("cvar-normal", "random"),
    ("cvar-exponential", "random"),
    ("cvar-erlang", "random"),
    ("cvar-lognormal", "random"),
    ("cvar-triangular", "random"),
    ("cvar-weibull", "random"),
    ("entries=", "basics"),
    ("dirwidth=", "basics"),
    ("dirgamma=", "basics"),
    ("filesizegamma=", "basics"),
    ("prealloc=", "basics"),
    ("reuse", "basics"),
    ("paralloc", "basics"),
    ("readonly", "basics"),
    ("cached=", "basics"),
    ("leafdirs=", "dirs"),
    ("instances=", "basics"),
    ("memsize=", "basics"),
    ("useism", "basics"),
    ("flowop createfile", "basics"),
    ("flowop openfile", "basics"),
    ("flowop closefile", "basics"),
    ("flowop deletefile", "basics"),
    ("flowop statfile", "basics"),
    ("flowop readwholefile", "basics"),
    ("flowop writewholefile", "basics"),
    ("flowop appendfile ", "basics"),
    ("flowop appendfilerand", "basics"),
    ("flowop read ", "basics"),
    ("flowop write ", "basics"),
    ("flowop fsync ", "basics"),
    ("flowop fsyncset", "basics"),
    ("flowop makedir", "dirs"),
    ("flowop listdir", "dirs"),
    ("flowop removedir", "dirs"),
    ("flowop delay", "pacing"),
    ("flowop hog", "pacing"),
    ("flowop finishoncount", "pacing"),
    ("flowop finishonbytes", "pacing"),
    ("flowop eventlimit", "pacing"),
    ("flowop iopslimit", "pacing"),
    ("flowop opslimit", "pacing"),
    ("flowop bwlimit", "pacing"),
    ("flowop semblock", "sync"),
    ("flowop sempost", "sync"),
    ("flowop block", "sync"),
    ("flowop wakeup", "sync"),
    ("flowop aiowrite", "aio"),
    ("flowop aiowait", "aio"),
    ("flowop rw name=rw1, iters=2, $fs=a", "random"),
    ("srcfd=", "basics"),
    ("iosize=", "basics"),
    ("filename=", "basics"),
    ("filesetname=", "basics"),
    ("dsync", "aio"),
    ("directio", "aio"),
    ("random", "aio"),
    ("workingset=", "aio"),
    ("opennext", "aio"),
    ("iters=", "aio"),
    ("indexed=", "aio"),
    ("target=", "sync"),
    ("blocking", "sync"),
    ("highwater=", "sync"),
    ("value=", "sync"),
    ("echo ", "basics"),
    ("usage ", "basics"),
    ("vars", "basics"),
    ("list", "basics"),
    ("run 1", "basics"),
    ("debug 1", "commands"),
    ("enable lathist", "commands"),
    ("enable multi", "commands"),
    ("create files", "commands"),
    ("create processes", "commands"),
    ("stats clear", "commands"),
    ("stats snap", "commands"),
    ("sleep 1", "commands"),
    ("shutdown processes", "commands"),
    ("system ", "commands"),
    ("psrun", "commands"),
    ("quit", "commands"),
];

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/corpus/{name}.f"))
}

fn run(name: &str) -> Engine {
    // Tests run in parallel and two of them run the same file.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("xfb-corpus-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = corpus(name);
    let src = std::fs::read_to_string(&file).unwrap();
    let script = parse(&file.display().to_string(), &src).unwrap();
    let mut vars = Vars::default();
    vars.pin("dir", &dir.display().to_string());
    let mut e = Engine::new(
        &file.display().to_string(),
        vars,
        Options {
            quiet: true,
            shutdown_timeout: Duration::from_secs(10),
            ..Options::default()
        },
    );
    let r = e.execute(&script);
    let _ = std::fs::remove_dir_all(&dir);
    r.unwrap_or_else(|err| panic!("{name}.f: {err}"));
    e
}

fn ops(e: &Engine, flowop: &str) -> u64 {
    let r = e.runs.last().unwrap();
    r.flowops
        .iter()
        .find(|f| f.name == flowop)
        .map(|f| f.ops)
        .unwrap_or_else(|| panic!("no flowop {flowop}"))
}

#[test]
fn every_construct_is_in_the_corpus() {
    for (construct, file) in CONSTRUCTS {
        let text = std::fs::read_to_string(corpus(file)).unwrap();
        assert!(
            text.contains(construct),
            "{file}.f does not use `{construct}`"
        );
    }
}

#[test]
fn every_corpus_file_runs_with_an_io_summary() {
    for name in [
        "basics", "dirs", "pacing", "sync", "aio", "random", "commands",
    ] {
        let e = run(name);
        let r = e.runs.last().unwrap_or_else(|| panic!("{name}.f: no run"));
        assert!(r.summary.ops > 0, "{name}.f: IO Summary of 0 ops");
        assert!(r.error.is_none(), "{name}.f: {:?}", r.error);
    }
}

#[test]
fn counts_follow_the_flowop_graph() {
    // basics: one loop per thread is create … delete; 2 threads.
    let e = run("basics");
    let first = ops(&e, "create1");
    for f in [
        "wwf", "app", "close1", "open2", "rwf", "close2", "stat1", "rd", "wr", "del1",
    ] {
        assert!(
            ops(&e, f).abs_diff(first) <= 2,
            "{f} {} vs create1 {first}",
            ops(&e, f)
        );
    }
    // random: the composite rw runs its body twice per pass of the thread.
    let e = run("random");
    let (o, s) = (ops(&e, "o"), ops(&e, "s"));
    assert!(o.abs_diff(2 * s) <= 2, "open {o}, statfile {s}");
    // pacing: finishoncount stops the statfile thread at its count.
    let e = run("pacing");
    assert_eq!(ops(&e, "st"), 50);
}
