// SPDX-License-Identifier: Apache-2.0
//! Semantics on a host temporary directory, with exact expectations.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use xvfs_filebench::fileset::{Fileset, FilesetSpec};
use xvfs_filebench::rng::Rng;
use xvfs_filebench::value::{Value, Vars};
use xvfs_filebench::{parse, Engine, Options};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(dir: &Path, src: &str) -> (Engine, Result<(), xvfs_filebench::Error>) {
    let script = parse("t.f", src).unwrap();
    let mut vars = Vars::default();
    vars.pin("dir", &dir.display().to_string());
    let mut e = Engine::new(
        "t.f",
        vars,
        Options {
            shutdown_timeout: Duration::from_secs(5),
            ..Options::default()
        },
    );
    let r = e.execute(&script);
    (e, r)
}

fn count_files(dir: &Path) -> (usize, u64) {
    let mut n = 0;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                n += 1;
                bytes += m.len();
            }
        }
    }
    (n, bytes)
}

fn flowop_ops(e: &Engine, name: &str) -> u64 {
    e.runs
        .last()
        .unwrap()
        .flowops
        .iter()
        .find(|f| f.name == name)
        .map(|f| f.ops)
        .unwrap()
}

/// `finishoncount value=137` without a target counts every file-system
/// operation of the process (Filebench's `controlstats`), 3 per file here:
/// a thread is done at its check once the 4 threads did 137 or more, i.e.
/// after 46 files; threads between create and check finish their file: 46
/// to 49 files.
#[test]
fn createfiles_with_finishoncount_stops_at_the_process_count() {
    let d = tmpdir("create");
    let (e, r) = run(
        &d,
        "set mode quit alldone
define fileset name=bigfileset,path=$dir,size=4k,entries=1000,dirwidth=20
define process name=filecreate,instances=1
{
  thread name=filecreatethread,memsize=1m,instances=4
  {
    flowop createfile name=createfile1,filesetname=bigfileset,fd=1
    flowop writewholefile name=writefile1,fd=1,iosize=4k
    flowop closefile name=closefile1,fd=1
    flowop finishoncount name=finish,value=137
  }
}
run 30
",
    );
    r.unwrap();
    let (n, bytes) = count_files(&d.join("bigfileset"));
    assert!((46..=49).contains(&n), "{n} files");
    assert_eq!(bytes, n as u64 * 4096);
    assert_eq!(flowop_ops(&e, "createfile1"), n as u64);
    assert_eq!(flowop_ops(&e, "writefile1"), n as u64);
    assert_eq!(e.runs[0].end, "alldone");
    assert!(e.runs[0].elapsed_s < 10.0);
}

#[test]
fn fileset_sizes_and_widths_have_the_requested_means() {
    // Sizes: gamma draws (cvar, or fixed size with filesizegamma) within 5 %.
    // Widths: fixed (dirgamma=0) exactly, gamma-drawn (500 directories, so a
    // standard error of ~3.6 %) within 10 %.
    for (size, filesizegamma, dirgamma, width_tol) in [
        (
            Value::Random(xvfs_filebench::dist::Dist::Gamma {
                mean: 16384.0,
                shape: 1.5,
            }),
            0.0,
            0.0,
            0.01,
        ),
        (Value::Text("16k".into()), 1.5, 0.0, 0.01),
        (
            Value::Random(xvfs_filebench::dist::Dist::Gamma {
                mean: 16384.0,
                shape: 1.5,
            }),
            0.0,
            1.5,
            0.10,
        ),
    ] {
        let spec = FilesetSpec {
            name: "fs".into(),
            path: "/nonexistent".into(),
            is_file: false,
            size,
            entries: 10_000,
            dirwidth: 20.0,
            dirgamma,
            filesizegamma,
            prealloc: Some(80.0),
            reuse: false,
            paralloc: false,
            readonly: false,
            trusttree: false,
            leafdirs: 0,
            purge: false,
        };
        let fs = Fileset::layout(spec, &mut Rng::new(42)).unwrap();
        let st = fs.stats();
        assert_eq!(st.files, 10_000);
        let mean = st.bytes as f64 / st.files as f64;
        assert!((mean - 16384.0).abs() / 16384.0 < 0.05, "mean size {mean}");
        assert!(
            (st.mean_width - 20.0).abs() / 20.0 < width_tol,
            "mean width {}",
            st.mean_width
        );
        assert_eq!(fs.existing_files(), 8000);
    }
}

#[test]
fn prealloc_percentage_is_on_disk() {
    let d = tmpdir("prealloc");
    let (e, r) = run(
        &d,
        "define fileset name=fs,path=$dir,size=2k,entries=500,dirwidth=10,dirgamma=0,prealloc=60,paralloc
create files
",
    );
    r.unwrap();
    assert_eq!(count_files(&d.join("fs")), (300, 300 * 2048));
    let st = e.fileset("fs").unwrap().stats();
    assert!((st.mean_width - 10.0).abs() < 0.5, "{}", st.mean_width);
}

#[test]
fn eventlimit_holds_the_rate() {
    let d = tmpdir("event");
    let (e, r) = run(
        &d,
        "eventgen rate=200
define file name=f,path=$dir,size=4k,prealloc
define process name=p
{
  thread name=t,instances=2
  {
    flowop eventlimit name=limit
    flowop statfile name=stat1,filename=f
  }
}
run 2
",
    );
    r.unwrap();
    let rate = e.runs[0]
        .flowops
        .iter()
        .find(|f| f.name == "stat1")
        .unwrap()
        .ops_per_s;
    assert!((rate - 200.0).abs() / 200.0 < 0.10, "rate {rate}");
}

#[test]
fn semblock_and_sempost_hand_off_without_deadlock() {
    let d = tmpdir("sem");
    let t0 = Instant::now();
    let (e, r) = run(
        &d,
        "define file name=f,path=$dir,size=4k,prealloc
define process name=producer
{
  thread name=prod
  {
    flowop sempost name=post1,target=sem1,value=1,highwater=4,blocking
    flowop statfile name=pstat,filename=f
  }
}
define process name=consumer
{
  thread name=cons,instances=2
  {
    flowop semblock name=sem1,value=1
    flowop statfile name=cstat,filename=f
  }
}
run 1
",
    );
    r.unwrap();
    let posted = flowop_ops(&e, "post1");
    let taken = flowop_ops(&e, "sem1");
    assert!(taken > 100, "only {taken} hand-offs");
    // Each post reaches both consumers (each with Filebench's default
    // highwater of 1; a sempost's highwater does nothing).
    assert!(
        taken <= 2 * posted && 2 * posted <= taken + 2 * 2,
        "posted {posted}, taken {taken}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_run_blocked_forever_still_ends() {
    let d = tmpdir("block");
    let t0 = Instant::now();
    let (e, r) = run(
        &d,
        "define process name=p
{
  thread name=t,instances=3
  {
    flowop semblock name=never,value=1
    flowop block name=b
  }
}
run 1
",
    );
    r.unwrap();
    assert_eq!(e.runs[0].summary.ops, 0);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
fn write_and_read_bytes_match_the_files() {
    let d = tmpdir("rw");
    let (e, r) = run(
        &d,
        "set mode quit alldone
define file name=wfile,path=$dir,size=0,prealloc
define process name=p
{
  thread name=t
  {
    flowop write name=seqwrite,filename=wfile,iosize=4k
    flowop finishonbytes name=fin,target=seqwrite,value=1m
  }
}
run 30
",
    );
    r.unwrap();
    // finishonbytes stops once more than 1 MiB was written: 257 writes, and
    // the open of the file, which counts as one more operation of the
    // flowop (0 bytes), as Filebench's.
    assert_eq!(
        std::fs::metadata(d.join("wfile")).unwrap().len(),
        257 * 4096
    );
    assert_eq!(e.runs[0].summary.bytes, 257 * 4096);
    assert_eq!(flowop_ops(&e, "seqwrite"), 258);

    let (e, r) = run(
        &d,
        "set mode quit alldone
define file name=rfile,path=$dir,size=1m,prealloc
define process name=p
{
  thread name=t
  {
    flowop read name=seqread,filename=rfile,iosize=64k
    flowop finishonbytes name=fin,target=seqread,value=3m
  }
}
run 30
",
    );
    r.unwrap();
    // More than 3 MiB: 49 reads of 64 KiB and, at the end of the file after
    // each MiB, one read of 0 bytes (Filebench's read at EOF): 52 reads,
    // and the open, counted as a read of 0 bytes: 53.
    assert_eq!(e.runs[0].summary.bytes, (3 << 20) + (64 << 10));
    assert_eq!(flowop_ops(&e, "seqread"), 53);
    // The summary's read rate times the run time gives back the 53
    // operations (floating point: equal within a relative 1e-9).
    let reads = e.runs[0].summary.rd_per_s * e.runs[0].elapsed_s;
    assert!(
        (reads - 53.0).abs() < 53.0 * 1e-9,
        "reads from the summary: {reads}"
    );

    // Random writes stay inside the file; appends grow it by exactly what was written.
    let (e, r) = run(
        &d,
        "set mode quit alldone
define file name=afile,path=$dir,size=64k,prealloc
define process name=p
{
  thread name=t
  {
    flowop openfile name=open1,filename=afile,fd=1
    flowop write name=rndwrite,fd=1,iosize=4k,random
    flowop appendfile name=append1,fd=1,iosize=1k
    flowop closefile name=close1,fd=1
    flowop finishoncount name=fin,value=10,target=append1
  }
}
run 30
",
    );
    r.unwrap();
    assert_eq!(flowop_ops(&e, "append1"), 10);
    assert_eq!(
        std::fs::metadata(d.join("afile")).unwrap().len(),
        65536 + 10 * 1024
    );
    let wr: u64 = e.runs[0]
        .flowops
        .iter()
        .filter(|f| f.name != "open1" && f.name != "close1")
        .map(|f| f.bytes)
        .sum();
    assert_eq!(wr, 10 * 4096 + 10 * 1024);
}

#[test]
fn deleting_every_file_ends_out_of_resources() {
    let d = tmpdir("del");
    let (e, r) = run(
        &d,
        "define fileset name=fs,path=$dir,size=1k,entries=50,dirwidth=5,prealloc
define process name=p
{
  thread name=t,instances=4
  {
    flowop deletefile name=del1,filesetname=fs
  }
}
run 30
",
    );
    r.unwrap();
    assert_eq!(flowop_ops(&e, "del1"), 50);
    assert_eq!(count_files(&d.join("fs")).0, 0);
    assert!(
        e.runs[0].end.starts_with("out of resources"),
        "{}",
        e.runs[0].end
    );
}

#[test]
fn runtime_errors_name_file_and_line() {
    let d = tmpdir("err");
    let (_, r) = run(
        &d,
        "define process name=p
{
  thread name=t
  {
    flowop closefile name=c1,fd=3
  }
}
run 1
",
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "t.f:8: the run failed: t.f:5: flowop c1 (closefile): closefile: fd 3 is not open"
    );
    let (_, r) = run(&d, "define process name=p\n{\n thread name=t\n {\n  flowop read name=r1,filesetname=nope\n }\n}\nrun 1\n");
    assert_eq!(
        r.unwrap_err().to_string(),
        "t.f:5: flowop r1: no fileset or file named nope"
    );
    let (_, r) = run(
        &d,
        "define process name=p\n{\n thread name=t\n {\n  flowop eventlimit name=e1\n }\n}\nrun 1\n",
    );
    // Without an eventgen rate a limit flowop does nothing, as in Filebench.
    assert!(r.is_ok(), "{r:?}");
    let (_, r) = run(&d, "set $x=$undefined\n");
    assert_eq!(
        r.unwrap_err().to_string(),
        "t.f:1: variable $undefined is not set"
    );
}

#[test]
fn create_processes_sleep_and_snap() {
    let d = tmpdir("snap");
    let (e, r) = run(
        &d,
        "define file name=f,path=$dir,size=4k,prealloc
define process name=p
{
  thread name=t
  {
    flowop statfile name=s1,filename=f
    flowop delay name=d1,value=0.01
  }
}
create files
create processes
stats clear
sleep 0.5
stats snap
shutdown processes
",
    );
    r.unwrap();
    assert_eq!(e.runs.len(), 1);
    let ops = flowop_ops(&e, "s1");
    assert!((20..=60).contains(&ops), "{ops}");
    assert!(e.transcript.iter().any(|l| l.contains("IO Summary:")));
}

#[test]
fn an_error_is_one_line_printed_once() {
    let dir = tmpdir("errline");
    let f = dir.join("bad.f");
    std::fs::write(&f, "set $a=1\ndefine bogus x\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xfilebench"))
        .arg("-f")
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("{}:2: cannot define 'bogus'", f.display());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches(&want).count(), 1, "{err}");
}

#[test]
fn without_fd_every_flowop_uses_the_default_descriptor() {
    let d = tmpdir("defaultfd");
    let (e, r) = run(
        &d,
        "define fileset name=a,path=$dir,size=4k,entries=8,prealloc,cached=false\n\
         define process name=p\n{\n thread name=t\n {\n\
          flowop openfile name=o,filesetname=a\n\
          flowop write name=w,iosize=4k\n\
          flowop fsync name=f\n\
          flowop closefile name=c\n\
          flowop finishoncount name=done,value=50,target=o\n }\n}\nrun 5\n",
    );
    r.unwrap();
    let (o, w, f, c) = (
        flowop_ops(&e, "o"),
        flowop_ops(&e, "w"),
        flowop_ops(&e, "f"),
        flowop_ops(&e, "c"),
    );
    assert!(o >= 50, "open {o}");
    for (what, n) in [("write", w), ("fsync", f), ("close", c)] {
        assert!(o.abs_diff(n) <= 1, "{what} {n} vs open {o}");
    }
}

#[test]
fn makedir_and_removedir_are_filebench_names() {
    let d = tmpdir("dirs");
    let (e, r) = run(
        &d,
        "define fileset name=a,path=$dir,size=0,entries=100,dirwidth=5,leafdirs=20\n\
         define process name=p\n{\n thread name=t\n {\n\
          flowop makedir name=m,filesetname=a\n\
          flowop removedir name=r,filesetname=a\n }\n}\nrun 1\n",
    );
    r.unwrap();
    assert!(flowop_ops(&e, "m") > 0);
    assert!(flowop_ops(&e, "r") > 0);
}

#[test]
fn cvar_uniform_sizes_stay_in_range_and_average_6k() {
    let d = tmpdir("cvaruni");
    let (e, r) = run(
        &d,
        "set $iosize=cvar(type=cvar-uniform,parameters=lower:4k;upper:8k)\n\
         define file name=f,path=$dir,size=1m,prealloc\n\
         define process name=p\n{\n thread name=t\n {\n\
          flowop openfile name=o,filesetname=f,fd=1\n\
          flowop read name=r,fd=1,iosize=$iosize\n\
          flowop closefile name=c,fd=1\n\
          flowop finishoncount name=done,value=2000,target=r\n }\n}\nrun 10\n",
    );
    r.unwrap();
    let run = e.runs.last().unwrap();
    let f = run.flowops.iter().find(|f| f.name == "r").unwrap();
    assert!(f.ops >= 2000, "{}", f.ops);
    let avg = f.bytes as f64 / f.ops as f64;
    assert!((5900.0..6400.0).contains(&avg), "average read {avg}");
}

#[test]
fn composite_flowops_take_parameters_nest_and_repeat() {
    let d = tmpdir("composite");
    let (e, r) = run(
        &d,
        "define fileset name=a,path=$dir,size=4k,entries=20,prealloc\n\
         define flowop name=rw, $fs\n{\n\
          flowop openfile name=o,filesetname=$fs,fd=1\n\
          flowop readwholefile name=r,fd=1\n\
          flowop closefile name=c,fd=1\n}\n\
         define flowop name=work, $set, $n\n{\n\
          flowop statfile name=s,filesetname=$set\n\
          flowop rw name=inner, iters=$n, $fs=$set\n}\n\
         define process name=p\n{\n thread name=t,instances=2\n {\n\
          flowop work name=outer, iters=2, $n=3, $set=a\n\
          flowop finishoncount name=done,value=100,target=s\n }\n}\nrun 5\n",
    );
    r.unwrap();
    let (s, inner, outer) = (
        flowop_ops(&e, "s"),
        flowop_ops(&e, "inner"),
        flowop_ops(&e, "outer"),
    );
    let (o, rd, c) = (
        flowop_ops(&e, "o"),
        flowop_ops(&e, "r"),
        flowop_ops(&e, "c"),
    );
    assert!(s >= 98, "statfile {s}");
    // Each pass of `work` is one statfile and 3 passes of `rw`; `outer`
    // counts the passes of its body, as Filebench counts each of a
    // flowop's iters (up to one pass per thread in flight).
    assert!(inner.abs_diff(3 * s) <= 6, "inner {inner}, statfile {s}");
    assert!(outer.abs_diff(s) <= 2, "outer {outer}, statfile {s}");
    for (what, n) in [("open", o), ("read", rd), ("close", c)] {
        assert!(n.abs_diff(inner) <= 2, "{what} {n} vs inner {inner}");
    }
}

#[test]
fn constructs_not_honoured_warn_once_with_file_and_line() {
    let dir = tmpdir("warnings");
    let f = dir.join("w.f");
    std::fs::write(
        &f,
        format!(
            "set $dir={}\nset $r = randvar(type=uniform, min=1, mean=2, seed=7)\n\
             define fileset name=a,path=$dir,size=4k,entries=4,prealloc\n\
             define process name=p\n{{\n thread name=t,memsize=10m,useism\n {{\n\
              flowop statfile name=s,filesetname=a\n }}\n}}\nrun 1\nrun 1\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xfilebench"))
        .arg("-q")
        .arg("-f")
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let file = f.display();
    for want in [
        format!("{file}:2: randvar seed="),
        format!("{file}:6: memsize"),
        format!("{file}:6: useism"),
    ] {
        assert_eq!(err.matches(&want).count(), 1, "{want} in:\n{err}");
    }
}

/// As in Filebench's shipped makedirs.f and fivestreamread.f: a fileset of
/// leaf directories only needs no `entries`, and a message naming a
/// variable that is not set is printed (the variable as nothing), not an
/// error.
#[test]
fn leafdir_filesets_need_no_entries_and_messages_tolerate_unset_variables() {
    let dir = tmpdir("leafdirs");
    let (e, r) = run(
        &dir,
        "set $ndirs=20\n\
         define fileset name=dirs,path=$dir,size=0,leafdirs=$ndirs,dirwidth=5\n\
         usage \"       set $directio=<bool> defaults to $directio\"\n\
         echo \"dirs loaded $nosuchvar\"\n\
         define process name=p\n{\n thread name=t\n {\n\
          flowop makedir name=mk,filesetname=dirs\n }\n}\n\
         run 1\n",
    );
    r.unwrap();
    let made = flowop_ops(&e, "mk");
    assert_eq!(
        made, 20,
        "every leaf directory made once, then out of resources"
    );
}
