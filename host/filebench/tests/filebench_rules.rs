// SPDX-License-Identifier: Apache-2.0
//! The pacing and end-of-run rules of Filebench 1.5 (eventgen, the limit
//! flowops, the semaphores, `mode quit`), each pinned by a small run on a
//! temporary directory. The figures are throughput as the run reports it
//! (operations counted / time the run counts), never the test's own wall
//! clock; every expectation can be worked out by hand from the comment
//! above it, with the tolerance stated there.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use xvfs_filebench::value::Vars;
use xvfs_filebench::{parse, Engine, Options, RunResult};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfb-rules-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `src` with `$dir` in a new temporary directory; the last run.
fn run(name: &str, src: &str, exact: bool) -> RunResult {
    let d = tmpdir(name);
    let r = run_in(&d, src, exact);
    let _ = std::fs::remove_dir_all(&d);
    r
}

fn run_in(dir: &Path, src: &str, exact: bool) -> RunResult {
    let script = parse("t.f", src).unwrap();
    let mut vars = Vars::default();
    vars.pin("dir", &dir.display().to_string());
    let opts = Options {
        shutdown_timeout: Duration::from_secs(5),
        exact,
        ..Options::default()
    };
    let mut e = Engine::new("t.f", vars, opts);
    e.execute(&script).unwrap();
    e.runs.pop().unwrap()
}

fn ops(r: &RunResult, name: &str) -> u64 {
    r.flowops.iter().find(|f| f.name == name).unwrap().ops
}

fn bytes(r: &RunResult, name: &str) -> u64 {
    r.flowops.iter().find(|f| f.name == name).unwrap().bytes
}

/// `eventgen rate=10`, one thread reading 1 MiB at random offsets, then
/// `bwlimit`: one event is worth 1 MiB. The first bwlimit pass only
/// remembers the count (1 read free before it, 1 after); then every other
/// pass is 1 MiB short and takes 1 MiB / 1 MiB + 1 = 2 events, which cover
/// two reads. The generator posts 10 events a second in one batch, the
/// first at 0.5 s, so by 3 s 30 events came: 2 + 30 reads, plus at most one
/// read done before its bwlimit blocks: 32 or 33 reads in the 3 s run,
/// where Filebench's rule gives 10 MiB/s = 10 reads/s plus the two free
/// ones. The first read opens the file, one more operation of `rd` of 0
/// bytes: 33-34 operations, 11-11.3 ops/s. (Before, one event paid for one
/// byte: 0 or 1 reads after the first two.)
#[test]
fn bwlimit_takes_one_event_per_mib() {
    let r = run(
        "bw",
        "eventgen rate=10
define file name=f,path=$dir,size=4m,prealloc
define process name=p
{
  thread name=t
  {
    flowop read name=rd,filename=f,iosize=1m,random
    flowop bwlimit name=bw
  }
}
run 3
",
        false,
    );
    let n = ops(&r, "rd") - 1;
    assert!((32..=33).contains(&n), "{n} reads");
    assert_eq!(bytes(&r, "rd"), n << 20);
    assert!(
        (r.summary.ops_per_s - 11.15).abs() < 0.2,
        "{}",
        r.summary.ops_per_s
    );
}

/// videoserver's reader: 2 threads reading 256 KiB, `bwlimit
/// target=vidreader` (each thread counts its own reads), rate 10. Each
/// thread: 1 free read before the first pass, 1 after; then one event
/// (256 KiB short: 0 + 1 events) covers 1 MiB = 4 reads. 30 events by 3 s:
/// 4 + 4 × 30 = 124 reads, plus at most one in flight per thread:
/// 124-126 (41-42 reads/s; Filebench: 10 MiB/s = 40 reads/s + the free
/// ones).
#[test]
fn bwlimit_with_a_target_counts_that_flowop_of_the_thread() {
    let r = run(
        "bwt",
        "eventgen rate=10
define file name=f,path=$dir,size=4m,prealloc
define process name=p
{
  thread name=t,instances=2
  {
    flowop read name=vidreader,filename=f,iosize=256k,random
    flowop bwlimit name=serverlimit,target=vidreader
  }
}
run 3
",
        false,
    );
    let n = ops(&r, "vidreader");
    assert!((124..=126).contains(&n), "{n} reads");
}

/// `eventlimit` takes one event per pass. Rate 20: batches of 10 every
/// 0.5 s from 0.25 s, so 6 batches = 60 events by 3 s, shared by 2
/// threads: 60 statfiles (59-60: one thread may have its event and not yet
/// its statfile when the run stops), 20 ops/s.
#[test]
fn eventlimit_takes_one_event_per_pass() {
    let r = run(
        "ev",
        "eventgen rate=20
define file name=f,path=$dir,size=4k,prealloc
define process name=p
{
  thread name=t,instances=2
  {
    flowop eventlimit name=limit
    flowop statfile name=stat1,filename=f
  }
}
run 3
",
        false,
    );
    let n = ops(&r, "stat1");
    assert!((59..=60).contains(&n), "{n} statfiles");
    assert!(
        (r.summary.ops_per_s - 20.0).abs() <= 0.4,
        "{}",
        r.summary.ops_per_s
    );
}

/// `opslimit` without a target counts every file-system operation of the
/// process; one event each. One thread, rate 20, `statfile` + `opslimit`:
/// the first pass is free (1 statfile before it, 1 after), then each
/// statfile takes one event: 2 + 60 events by 3 s = 62 (61-63, one in
/// flight), about 20.7 ops/s.
#[test]
fn opslimit_takes_one_event_per_operation() {
    let r = run(
        "ops",
        "eventgen rate=20
define file name=f,path=$dir,size=4k,prealloc
define process name=p
{
  thread name=t
  {
    flowop statfile name=stat1,filename=f
    flowop opslimit name=limit
  }
}
run 3
",
        false,
    );
    let n = ops(&r, "stat1");
    assert!((61..=63).contains(&n), "{n} statfiles");
}

/// `iopslimit` counts reads and writes, `opslimit` every file-system
/// operation; without a target, those of the whole process (Filebench's
/// per-process `controlstats`). Thread a reads 4 KiB and passes the limit;
/// thread b of the same process only runs `statfile`, unlimited (thousands
/// a second). Rate 20: 60 events by 3 s.
/// - `iopslimit`: b's statfiles are no I/O; a pays one event per read:
///   2 free + 60 = 62 (61-63).
/// - `opslimit`: a is charged b's statfiles too, thousands of events at
///   its second pass, more than the pool ever holds (5 s of events = 100):
///   a does its 2 free reads and then waits to the end (2-3; the open of
///   the file counts as one more operation of `rd`: 3-4).
/// - `iopslimit target=rd` in 2 threads: each pays for its own reads,
///   2 × 2 free + 60 = 64 (63-66).
#[test]
fn iopslimit_and_opslimit_count_their_own_unit_over_the_process() {
    let src = |limit: &str, b: &str| {
        let (kind, extra) = limit.split_once(',').unwrap_or((limit, ""));
        format!(
            "eventgen rate=20
define file name=f,path=$dir,size=1m,prealloc
define process name=p
{{
  thread name=a,instances={}
  {{
    flowop read name=rd,filename=f,iosize=4k,random
    flowop {kind} name=limit{extra}
  }}
{b}
}}
run 3
",
            if b.is_empty() { 2 } else { 1 },
            extra = if extra.is_empty() {
                String::new()
            } else {
                format!(",{extra}")
            },
        )
    };
    let b = "  thread name=b\n  {\n    flowop statfile name=st,filename=f\n  }";
    let n = ops(&run("iops", &src("iopslimit", b), false), "rd");
    assert!((61..=63).contains(&n), "iopslimit: {n} reads");
    let r = run("opsl", &src("opslimit", b), false);
    let n = ops(&r, "rd");
    assert!((3..=4).contains(&n), "opslimit: {n} reads");
    assert!(ops(&r, "st") > 1000);
    let n = ops(&run("iopst", &src("iopslimit,target=rd", ""), false), "rd");
    assert!((63..=66).contains(&n), "own target: {n} reads");
}

/// oltp's log writer: `semblock value=100,highwater=50` and blocking
/// posts of 1. The blocked thread adds its value to the room first, so
/// the posters get 100 + 50 ahead and the block completes (before, posts
/// stopped at the highwater of 50 < 100 and both sides waited for ever).
/// Posts stay within [100 × blocks, 100 × (blocks + 1) + 50].
#[test]
fn semblock_adds_its_value_to_the_highwater_room() {
    let r = run(
        "sem",
        "define file name=f,path=$dir,size=4k,prealloc
define process name=lgwr
{
  thread name=lg
  {
    flowop semblock name=lg-block,value=100,highwater=50
    flowop statfile name=lgstat,filename=f
  }
}
define process name=shadow
{
  thread name=sh,instances=2
  {
    flowop statfile name=shstat,filename=f
    flowop sempost name=post,value=1,target=lg-block,blocking
  }
}
run 1
",
        false,
    );
    let blocks = ops(&r, "lg-block");
    let posts = ops(&r, "post");
    assert!(blocks >= 10, "only {blocks} blocks");
    assert!(
        100 * blocks <= posts && posts <= 100 * (blocks + 1) + 50,
        "posts {posts}, blocks {blocks}"
    );
}

/// A sempost posts to every thread's semblock of that name: 2 consumer
/// threads each take every post (each has highwater 1: a blocking poster
/// is at most 1 + 1 ahead of each).
#[test]
fn sempost_reaches_every_thread_of_its_target() {
    let r = run(
        "sem2",
        "define file name=f,path=$dir,size=4k,prealloc
define process name=producer
{
  thread name=prod
  {
    flowop sempost name=post1,target=sem1,value=1,blocking
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
        false,
    );
    let posted = ops(&r, "post1");
    let taken = ops(&r, "sem1");
    assert!(taken > 100, "only {taken} hand-offs");
    assert!(
        2 * posted <= taken + 2 * 2 && taken <= 2 * posted,
        "posted {posted}, taken {taken}"
    );
}

/// `mode quit firstdone`: 2 threads delete the 50 files of a fileset and
/// the run ends when the first finds none left, within milliseconds.
/// Filebench looks once a second and divides by 1 s: 50 ops/s exactly.
/// With `--exact` the run is divided by the time it took (far above 50).
#[test]
fn a_run_that_ends_itself_counts_filebench_whole_seconds() {
    let src = "set mode quit firstdone
define fileset name=fs,path=$dir,size=1k,entries=50,dirwidth=10,prealloc
define process name=p
{
  thread name=t,instances=2
  {
    flowop deletefile name=del1,filesetname=fs
  }
}
run 5
";
    let r = run("first", src, false);
    assert_eq!(r.summary.ops, 50);
    assert_eq!(r.elapsed_s, 1.0);
    assert_eq!(r.summary.ops_per_s, 50.0);
    assert!(r.end.starts_with("firstdone"), "{}", r.end);
    let r = run("firstx", src, true);
    assert_eq!(r.summary.ops, 50);
    assert!(r.elapsed_s < 0.9, "{}", r.elapsed_s);
    assert!(r.summary.ops_per_s > 55.0);
}

/// `mode quit alldone`, `run` without a time (no limit in this mode):
/// thread a deletes its 50 files at once and is done; thread b deletes
/// one of its 2 files, sleeps 1 s, deletes the other, sleeps 1 s and finds
/// none at about 2.0 s. The run goes on until b is done too (a thread out
/// of files ends only itself in this mode): 52 operations, counted over
/// ⌈2.0x⌉ = 3 s, 17.33 ops/s; `--exact`: over the 2.0x s taken.
#[test]
fn alldone_waits_for_every_thread() {
    let src = "set mode quit alldone
define fileset name=a,path=$dir,size=1k,entries=50,dirwidth=10,prealloc
define fileset name=b,path=$dir,size=1k,entries=2,dirwidth=10,prealloc
define process name=p
{
  thread name=ta
  {
    flowop deletefile name=dela,filesetname=a
  }
  thread name=tb
  {
    flowop deletefile name=delb,filesetname=b
    flowop delay name=nap,value=1
  }
}
run
";
    let r = run("all", src, false);
    assert_eq!(r.end, "alldone");
    assert_eq!(r.summary.ops, 52);
    assert_eq!(r.elapsed_s, 3.0);
    assert!((r.summary.ops_per_s - 52.0 / 3.0).abs() < 1e-9);
    let r = run("allx", src, true);
    assert!((2.0..2.5).contains(&r.elapsed_s), "{}", r.elapsed_s);
}

/// A sequential read at the end of the file reads 0 bytes and still
/// counts, as Filebench's `read()` does; the next read starts over. A
/// 64 KiB file read 16 KiB at a time: 4 reads of 16 KiB and 1 of 0, so
/// 12.8 KiB per operation (±1 %: the run may stop mid-cycle).
#[test]
fn a_sequential_read_at_the_end_of_the_file_counts_zero_bytes() {
    let r = run(
        "eof",
        "define file name=f,path=$dir,size=64k,prealloc
define process name=p
{
  thread name=t
  {
    flowop read name=rd,filename=f,iosize=16k
  }
}
run 1
",
        false,
    );
    let per_op = bytes(&r, "rd") as f64 / ops(&r, "rd") as f64;
    assert!((per_op / (12.8 * 1024.0) - 1.0).abs() < 0.01, "{per_op}");
}

/// `finishoncount` compares after the fact, as Filebench's: filemicro_seqwrite's
/// shape, `appendfile iters=8` then `finishoncount value=1` (no target: the
/// process's operations), does all 8 appends of the pass before the check
/// ends the thread (the quota it replaced allowed 1). The first append
/// opens the file, which counts as one more operation of `app` (0 bytes),
/// as Filebench's `flowoplib_openfile_common` counts it: 9 operations.
/// `firstdone`: the run ends there, counted as 1 s: 9 ops/s.
#[test]
fn finishoncount_checks_after_the_pass() {
    let d = tmpdir("fin");
    let r = run_in(
        &d,
        "set mode quit firstdone
define file name=f,path=$dir,size=0,prealloc
define process name=p
{
  thread name=t
  {
    flowop appendfile name=app,filename=f,iosize=4k,iters=8
    flowop finishoncount name=finish,value=1
  }
}
run 5
",
        false,
    );
    assert_eq!(ops(&r, "app"), 9);
    assert_eq!(bytes(&r, "app"), 8 * 4096);
    assert_eq!(std::fs::metadata(d.join("f")).unwrap().len(), 8 * 4096);
    assert_eq!(r.summary.ops_per_s, 9.0);
    let _ = std::fs::remove_dir_all(&d);
}

/// `opennext` is Filebench's descriptor rotor (`flowoplib_fdnum`): each
/// operation takes the thread's next slot, 127 down to 0 and round again,
/// and a slot opened once stays open. Each open counts as one more
/// operation of the flowop, of 0 bytes (`flowoplib_openfile_common`). One
/// thread, `read opennext iters=300`, then done (`finishoncount` on the
/// read, `alldone`): 300 reads and 128 opens, 428 operations. (Before, every
/// read closed its file and opened the next, uncounted: 300.)
#[test]
fn opennext_goes_round_128_descriptors_and_counts_each_open() {
    let r = run(
        "rotor",
        "set mode quit alldone
define fileset name=data,path=$dir,size=64k,entries=10,dirwidth=1024,prealloc=100
define process name=p
{
  thread name=t
  {
    flowop read name=rd,filesetname=data,iosize=4k,random,opennext,iters=300
    flowop finishoncount name=fin,target=rd,value=1
  }
}
run 10
",
        false,
    );
    assert_eq!(r.end, "alldone");
    assert_eq!(ops(&r, "rd"), 428);
    assert_eq!(bytes(&r, "rd"), 300 * 4096);
}

/// A file is busy only while a thread opens it (`fileset_pick`,
/// `fileset_unbusy`): any number of threads may have the same file open.
/// 20 threads read `opennext` from a fileset of 2 files, 200 reads each,
/// then are done: 20 × (200 reads + 128 opens) = 6,560 operations. (Before,
/// a thread held its file from open to close, so at most 2 of the 20 read
/// at a time, and the run did 20 × 200 uncounted-open reads.)
#[test]
fn threads_share_the_files_they_open() {
    let r = run(
        "share",
        "set mode quit alldone
define fileset name=data,path=$dir,size=64k,entries=2,dirwidth=1024,prealloc=100
define process name=p,instances=20
{
  thread name=t
  {
    flowop read name=rd,filesetname=data,iosize=4k,random,opennext,iters=200
    flowop finishoncount name=fin,target=rd,value=1
  }
}
run 10
",
        false,
    );
    assert_eq!(r.end, "alldone");
    assert_eq!(ops(&r, "rd"), 20 * (200 + 128));
}

/// oltp's pipeline in small (oltp.f: shadows read `opennext` from the data
/// files and post to every database writer's `semblock`; the writers write
/// `opennext` to the same files and block until 100 posts came). With
/// files held from open to close, the shadows blocked in their posts held
/// both files, the writer waited for a file before its semblock, and the
/// run stopped dead: `dbwr-block` completed 0 times, the reads stopped at
/// about the highwater (200). Now the writer blocks every 100 posts, the
/// reads go on: in 2 s at least 20 blocks (2,000 posts), and the posts stay
/// within the room the semblock gives (100 per block + the highwater 200).
#[test]
fn oltp_writers_and_shadows_share_the_data_files() {
    let r = run(
        "oltp",
        "define fileset name=data,path=$dir,size=256k,entries=2,dirwidth=1024,prealloc=100,reuse
define process name=dbwr
{
  thread name=dbwr
  {
    flowop write name=dbwrite,filesetname=data,iosize=4k,random,iters=10,opennext
    flowop semblock name=dbwr-block,value=100,highwater=200
  }
}
define process name=shadow,instances=20
{
  thread name=shadow
  {
    flowop read name=shadowread,filesetname=data,iosize=4k,random,opennext
    flowop sempost name=post,value=1,target=dbwr-block,blocking
  }
}
run 2
",
        false,
    );
    let blocks = ops(&r, "dbwr-block");
    let posts = ops(&r, "post");
    assert!(blocks >= 20, "dbwr-block completed {blocks} times");
    assert!(
        100 * blocks <= posts && posts <= 100 * (blocks + 1) + 200,
        "posts {posts}, blocks {blocks}"
    );
}

/// `deletefile` picks a file; if some descriptor has it open, Filebench's
/// `flowoplib_deletefile` deletes nothing and returns before it times or
/// counts anything. One thread: open the only file (fd 1), delete (the
/// open file: skipped), close; done after 3 opens (`finishoncount`,
/// `alldone`). 3 opens, 3 closes, 0 deletes, and the file is still there.
/// (Before, the delete waited for the file its own thread held: the run
/// stopped at its time with 1 open.)
#[test]
fn deletefile_leaves_an_open_file_and_counts_nothing() {
    let d = tmpdir("delopen");
    let r = run_in(
        &d,
        "set mode quit alldone
define fileset name=s,path=$dir,size=4k,entries=1,dirwidth=10,prealloc=100
define process name=p
{
  thread name=t
  {
    flowop openfile name=open1,filesetname=s,fd=1
    flowop deletefile name=del1,filesetname=s
    flowop closefile name=close1,fd=1
    flowop finishoncount name=fin,target=open1,value=3
  }
}
run 3
",
        false,
    );
    assert_eq!(r.end, "alldone");
    assert_eq!(ops(&r, "open1"), 3);
    assert_eq!(ops(&r, "close1"), 3);
    assert_eq!(ops(&r, "del1"), 0);
    assert!(d.join("s/00000001").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Without an `eventgen` rate, Filebench's limit flowops return before
/// they time anything (`flowoplib_eventlimit`: "Immediately bail if not
/// set/enabled"), so they count no operations (oltp's `random-rate`).
#[test]
fn limit_flowops_without_eventgen_count_nothing() {
    let r = run(
        "nolimit",
        "define file name=f,path=$dir,size=64k,prealloc
define process name=p
{
  thread name=t
  {
    flowop read name=rd,filename=f,iosize=4k,random
    flowop eventlimit name=el
    flowop iopslimit name=il
    flowop bwlimit name=bl
  }
}
run 1
",
        false,
    );
    assert!(ops(&r, "rd") > 100);
    for name in ["el", "il", "bl"] {
        assert_eq!(ops(&r, name), 0, "{name}");
    }
}
