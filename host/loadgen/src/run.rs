// SPDX-License-Identifier: Apache-2.0
//! One measured run: fixture, back-end, set-up, client threads, JSON.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::cli::{Args, Cmd, Common, RunArgs};
use crate::client::{Client, ClientError, Data, Request, Wait};
use crate::fixture::{self, Fixture};
use crate::fuse::{self, op};
use crate::native;
use crate::stats::{self, ThreadStats};
use crate::vmm::{self, DaemonProc, Geometry, Negotiated, VmmError};
use crate::workload::{self, Kind, Nodes, Params};
use serde::Serialize;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad combination of options.
    #[error("{0}")]
    Usage(String),
    /// Creating or warming the fixture failed.
    #[error("fixture under {0}")]
    Fixture(PathBuf, #[source] io::Error),
    /// Setting up the device failed.
    #[error("set-up")]
    Vmm(#[from] VmmError),
    /// A request failed.
    #[error("client")]
    Client(#[from] ClientError),
    /// A native thread failed.
    #[error("native system call")]
    Native(#[source] io::Error),
    /// A thread could not start or panicked.
    #[error("client thread: {0}")]
    Thread(String),
    /// Writing the JSON failed.
    #[error("writing {0}")]
    Output(PathBuf, #[source] io::Error),
    /// The result does not serialise.
    #[error("encoding the result")]
    Encode(#[source] serde_json::Error),
}

impl RunError {
    /// Whether this is a command-line mistake (exit status 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, RunError::Usage(_))
    }
}

/// Entry point of every subcommand.
pub fn run(args: Args) -> Result<(), RunError> {
    match args.cmd {
        Cmd::Prepare { dir } => {
            Fixture::prepare(&dir).map_err(|e| RunError::Fixture(dir, e))?;
            Ok(())
        }
        Cmd::Native(c) => run_native(c),
        Cmd::Run(r) => run_vhost(r),
    }
}

fn params(c: &Common) -> Result<Params, RunError> {
    let secs = |v: f64, what: &str| {
        Duration::try_from_secs_f64(v)
            .map_err(|_| RunError::Usage(format!("--{what} {v}: not a duration")))
    };
    Ok(Params {
        kind: c.workload,
        bs: c.bs,
        readdir_buf: c.readdir_buf,
        warmup: secs(c.warmup, "warmup")?,
        duration: secs(c.duration, "duration")?,
        count: c.count,
    })
}

fn prepare(dir: &std::path::Path) -> Result<Fixture, RunError> {
    let f = Fixture::prepare(dir).map_err(|e| RunError::Fixture(dir.to_path_buf(), e))?;
    f.warm()
        .map_err(|e| RunError::Fixture(dir.to_path_buf(), e))?;
    Ok(f)
}

/// CPU seconds: this process (all threads), and another process if given.
/// CPU seconds spent by all CPUs of the host outside idle and iowait
/// (/proc/stat), so that a run can show how much else was running.
fn host_busy() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7)?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(busy / hz)
}

fn cpu_now(pid: Option<u32>) -> CpuSample {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a valid rusage buffer for the kernel to fill.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    let ours = if ok {
        // SAFETY: getrusage succeeded and filled the struct.
        let ru = unsafe { ru.assume_init() };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    } else {
        0.0
    };
    let theirs = pid.and_then(|p| {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // Fields after the parenthesised command name; utime, stime are 14, 15.
        let rest = s.get(s.rfind(')')? + 2..)?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some(ticks / hz)
    });
    (ours, theirs, host_busy())
}

/// Samples CPU time at the window's start and end while the clients run.
fn watch_window(p: &Params, pid: Option<u32>) -> (Instant, CpuSample) {
    std::thread::sleep(p.warmup);
    let start = Instant::now();
    (start, cpu_now(pid))
}

struct Outcome {
    stats: ThreadStats,
    window: Duration,
    cpu_client: f64,
    cpu_daemon: Option<f64>,
    cpu_host: Option<f64>,
}

impl Outcome {
    fn new(stats: ThreadStats, window: Duration, a: CpuSample, b: CpuSample) -> Outcome {
        Outcome {
            stats,
            window,
            cpu_client: b.0 - a.0,
            cpu_daemon: b.1.zip(a.1).map(|(b, a)| b - a),
            cpu_host: b.2.zip(a.2).map(|(b, a)| b - a),
        }
    }
}

/// How the clients were laid out (null fields: not applicable to `native`).
#[derive(Serialize)]
struct Layout {
    queues: Option<u32>,
    threads: u32,
    threads_per_queue: Option<u32>,
    depth: u32,
    wait: Option<&'static str>,
    daemon: Option<DaemonInfo>,
}

/// The back-end as negotiated.
#[derive(Serialize)]
struct DaemonInfo {
    socket: String,
    command: Option<String>,
    features: String,
    protocol_features: String,
    queue_num: u64,
    fuse_minor: u32,
    max_write: u32,
}

/// Latency percentiles in µs (null when no operation completed).
#[derive(Serialize)]
struct LatencyJson {
    min: Option<f64>,
    mean: Option<f64>,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    p99_9: Option<f64>,
    max: Option<f64>,
}

/// CPU seconds spent in the window.
#[derive(Serialize)]
struct CpuJson {
    client: f64,
    daemon: Option<f64>,
    host_busy: Option<f64>,
    other: Option<f64>,
}

/// One run's result file (format 1).
#[derive(Serialize)]
struct Summary<'a> {
    tool: &'static str,
    format: u32,
    target: &'a str,
    label: &'a str,
    workload: &'static str,
    block_size: u64,
    #[serde(flatten)]
    layout: Layout,
    window_s: f64,
    warmup_s: f64,
    ops: u64,
    ops_per_s: f64,
    bytes: u64,
    gb_per_s: f64,
    requests: u64,
    requests_per_s: f64,
    entries: u64,
    latency_us: LatencyJson,
    kicks: u64,
    sleeps: u64,
    cpu_s: CpuJson,
}

fn summary<'a>(kind: &'a str, c: &'a Common, mut o: Outcome, layout: Layout) -> Summary<'a> {
    let secs = o.window.as_secs_f64();
    let lat = stats::latency(&mut o.stats.lat_ns);
    let l = |f: fn(&stats::Latency) -> f64| lat.as_ref().map(f);
    let per_s = |v: u64| if secs > 0.0 { v as f64 / secs } else { 0.0 };
    Summary {
        tool: "xvfs-loadgen",
        format: 1,
        target: kind,
        label: &c.label,
        workload: c.workload.name(),
        block_size: u64::from(c.bs),
        layout,
        window_s: secs,
        warmup_s: c.warmup,
        ops: o.stats.ops,
        ops_per_s: per_s(o.stats.ops),
        bytes: o.stats.bytes,
        gb_per_s: per_s(o.stats.bytes) / 1e9,
        requests: o.stats.requests,
        requests_per_s: per_s(o.stats.requests),
        entries: o.stats.entries,
        latency_us: LatencyJson {
            min: l(|l| l.min_us),
            mean: l(|l| l.mean_us),
            p50: l(|l| l.p50_us),
            p90: l(|l| l.p90_us),
            p99: l(|l| l.p99_us),
            p99_9: l(|l| l.p999_us),
            max: l(|l| l.max_us),
        },
        kicks: o.stats.kicks,
        sleeps: o.stats.sleeps,
        cpu_s: CpuJson {
            client: o.cpu_client,
            daemon: o.cpu_daemon,
            host_busy: o.cpu_host,
            other: o
                .cpu_host
                .map(|h| (h - o.cpu_client - o.cpu_daemon.unwrap_or(0.0)).max(0.0)),
        },
    }
}

fn emit(c: &Common, j: &Summary<'_>) -> Result<(), RunError> {
    let mut text = serde_json::to_string_pretty(j).map_err(RunError::Encode)?;
    text.push('\n');
    match &c.output {
        Some(p) => std::fs::write(p, text).map_err(|e| RunError::Output(p.clone(), e)),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn join_all<T, E>(handles: Vec<std::thread::JoinHandle<Result<T, E>>>) -> Result<Vec<T>, RunError>
where
    RunError: From<E>,
{
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(RunError::from(e));
            }
            Err(_) => {
                first_err.get_or_insert(RunError::Thread("panicked".into()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

impl From<io::Error> for RunError {
    fn from(e: io::Error) -> RunError {
        RunError::Native(e)
    }
}

fn run_native(c: Common) -> Result<(), RunError> {
    let p = params(&c)?;
    let fx = prepare(&c.dir)?;
    let n = c.threads;
    let start = Arc::new(Barrier::new(n as usize + 1));
    let mut handles = Vec::new();
    for t in 0..n {
        let (start, root) = (start.clone(), fx.root.clone());
        let h = std::thread::Builder::new()
            .name(format!("native-{t}"))
            .spawn(move || native::native_thread(p, &root, start, t))
            .map_err(|e| RunError::Thread(e.to_string()))?;
        handles.push(h);
    }
    start.wait();
    let (t_start, cpu0) = watch_window(&p, None);
    let (stats, cpu1) = finish_window(handles, &p, t_start, None)?;
    let out = Outcome::new(stats, window_len(&p, t_start), cpu0, cpu1);
    let layout = Layout {
        queues: None,
        threads: n,
        threads_per_queue: None,
        depth: 1,
        wait: None,
        daemon: None,
    };
    emit(&c, &summary("native", &c, out, layout))
}

/// Waits for the window to end (duration mode) and samples CPU time there,
/// then joins the threads (their drain is not in the CPU figure) and merges.
/// (this process, the daemon, the whole host) in CPU seconds.
type CpuSample = (f64, Option<f64>, Option<f64>);
fn finish_window<E>(
    handles: Vec<std::thread::JoinHandle<Result<ThreadStats, E>>>,
    p: &Params,
    t_start: Instant,
    pid: Option<u32>,
) -> Result<(ThreadStats, CpuSample), RunError>
where
    RunError: From<E>,
{
    let mut cpu = None;
    if p.count.is_none() {
        let end = t_start + p.duration;
        let now = Instant::now();
        if end > now {
            std::thread::sleep(end - now);
        }
        cpu = Some(cpu_now(pid));
    }
    let all = join_all(handles)?;
    let cpu = cpu.unwrap_or_else(|| cpu_now(pid));
    let mut total = ThreadStats::default();
    for s in all {
        total.merge(s);
    }
    Ok((total, cpu))
}

fn window_len(p: &Params, t_start: Instant) -> Duration {
    match p.count {
        Some(_) => t_start.elapsed(),
        None => p.duration,
    }
}

fn small(op_name: &'static str, bytes: Vec<u8>) -> Request {
    Request {
        op: op_name,
        bytes,
        data: Data::None,
        want_body: true,
    }
}

fn lookup(c: &mut Client, parent: u64, name: &str) -> Result<u64, ClientError> {
    let r = c.call(0, small("LOOKUP", fuse::named(op::LOOKUP, 0, parent, name)))?;
    fuse::entry_nodeid(&r.body).ok_or(ClientError::BadReply {
        op: "LOOKUP",
        why: "short entry".into(),
    })
}

/// INIT and the fixture's node ids, on queue 1's slot 0 before the clients start.
fn handshake(c: &mut Client) -> Result<(u32, u32, Nodes), ClientError> {
    let r = c.call(0, small("INIT", fuse::init(0)))?;
    let (minor, max_write) = fuse::init_reply(&r.body).ok_or(ClientError::BadReply {
        op: "INIT",
        why: "short reply".into(),
    })?;
    let root = lookup(c, fuse::ROOT_ID, fixture::ROOT)?;
    let nodes = Nodes {
        root,
        data: lookup(c, root, fixture::DATA)?,
        wdata: lookup(c, root, fixture::WDATA)?,
        files: lookup(c, root, fixture::FILES)?,
        create: lookup(c, root, fixture::CREATE)?,
    };
    Ok((minor, max_write, nodes))
}

/// Client threads on each request queue: --threads each, or --clients
/// spread round-robin.
fn threads_per_queue(r: &RunArgs) -> Vec<u32> {
    match r.clients {
        Some(n) => (0..r.queues)
            .map(|q| n / r.queues + u32::from(q < n % r.queues))
            .collect(),
        None => vec![r.common.threads; r.queues as usize],
    }
}

fn max_threads_per_queue(r: &RunArgs) -> u32 {
    threads_per_queue(r).into_iter().max().unwrap_or(0)
}

fn run_vhost(r: RunArgs) -> Result<(), RunError> {
    let c = &r.common;
    let p = params(c)?;
    if !r.queue_size.is_power_of_two() || r.queue_size < 8 {
        return Err(RunError::Usage(format!(
            "--queue-size {}: a power of two, at least 8",
            r.queue_size
        )));
    }
    let per_queue = max_threads_per_queue(&r) * c.depth;
    let slots = u32::from(r.queue_size / crate::ring::DESCS_PER_SLOT);
    if per_queue > slots {
        return Err(RunError::Usage(format!(
            "client threads x --depth = {per_queue} requests in flight per queue; a queue of {} holds {slots}",
            r.queue_size
        )));
    }
    prepare(&c.dir)?;
    let mut daemon = match r.daemon.is_empty() {
        true => None,
        false => Some(DaemonProc::spawn(&r.daemon, &r.socket)?),
    };
    let result = drive(&r, p, daemon.as_mut());
    if let Some(d) = daemon {
        match d.finish() {
            Ok(st) if !st.success() => log::warn!("back-end exited with {st}"),
            Ok(_) => {}
            Err(e) => log::warn!("waiting for the back-end: {e}"),
        }
    }
    let j = result?;
    emit(c, &j)
}

fn drive<'a>(
    r: &'a RunArgs,
    p: Params,
    mut daemon: Option<&mut DaemonProc>,
) -> Result<Summary<'a>, RunError> {
    let c = &r.common;
    let stream = vmm::connect(&r.socket, daemon.as_deref_mut())?;
    let payload = match c.workload {
        Kind::Read | Kind::Write => u64::from(c.bs),
        Kind::Readdirplus => u64::from(c.readdir_buf),
        _ => 0,
    };
    let dev = vmm::setup(
        stream,
        Geometry {
            queues: r.queues as usize,
            queue_size: r.queue_size,
            slots: (max_threads_per_queue(r) * c.depth) as u16,
            payload,
        },
    )?;
    if r.wait == Wait::Poll {
        for q in &dev.queues {
            q.suppress_calls();
        }
    }
    let mut setup_client = Client::new(dev.queues[0].clone(), vec![0], r.wait, 0xff_fffe);
    let (minor, max_write, nodes) = handshake(&mut setup_client)?;
    drop(setup_client);
    if c.workload == Kind::Write && c.bs > max_write {
        return Err(RunError::Usage(format!(
            "--bs {} is above the back-end's max_write {max_write}",
            c.bs
        )));
    }
    if c.workload == Kind::Write {
        // WRITE data: the same pattern in every slot, written once.
        for q in &dev.queues {
            for s in 0..q.slots() {
                dev.mem.fill(q.bufs(s).payload, 0x5a, c.bs as usize);
            }
        }
    }

    let plan = threads_per_queue(r);
    let nthreads: u32 = plan.iter().sum();
    let start = Arc::new(Barrier::new(nthreads as usize + 1));
    let mut handles = Vec::new();
    let mut next_tid = 0u32;
    for (qi, (chan, &nq)) in dev.queues.iter().zip(&plan).enumerate() {
        for t in 0..nq {
            let slots: Vec<u16> = (t * c.depth..(t + 1) * c.depth).map(|s| s as u16).collect();
            let tid = next_tid;
            next_tid += 1;
            let client = Client::new(chan.clone(), slots, r.wait, tid);
            let (hp, st) = (dev.hiprio.clone(), start.clone());
            let h = std::thread::Builder::new()
                .name(format!("lg-q{}-t{t}", qi + 1))
                .spawn(move || workload::client_thread(client, p, nodes, hp, st, tid))
                .map_err(|e| RunError::Thread(e.to_string()))?;
            handles.push(h);
        }
    }
    let pid = daemon.as_ref().map(|d| d.pid());
    start.wait();
    let (t_start, cpu0) = watch_window(&p, pid);
    let (stats, cpu1) = finish_window(handles, &p, t_start, pid)?;
    let out = Outcome::new(stats, window_len(&p, t_start), cpu0, cpu1);
    let neg: Negotiated = dev.negotiated;
    let layout = Layout {
        queues: Some(r.queues),
        threads: nthreads,
        threads_per_queue: plan.iter().all(|&n| n == plan[0]).then(|| plan[0]),
        depth: c.depth,
        wait: Some(r.wait.name()),
        daemon: Some(DaemonInfo {
            socket: r.socket.to_string_lossy().to_string(),
            command: daemon.as_ref().map(|d| d.command.clone()),
            features: format!("{:#x}", neg.features),
            protocol_features: format!("{:#x}", neg.protocol),
            queue_num: neg.queue_num,
            fuse_minor: minor,
            max_write,
        }),
    };
    dev.disconnect();
    Ok(summary("vhost-user", c, out, layout))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["loadgen", "run", "--socket", "/s", "--dir", "/d"];
        argv.extend_from_slice(extra);
        match Args::try_parse_from(argv).expect("parse").cmd {
            Cmd::Run(r) => r,
            _ => panic!("not run"),
        }
    }

    #[test]
    fn clients_spread_round_robin_over_the_queues() {
        let r = run_args(&["--queues", "4", "--threads", "3"]);
        assert_eq!(threads_per_queue(&r), [3, 3, 3, 3]);
        let r = run_args(&["--queues", "4", "--clients", "2"]);
        assert_eq!(threads_per_queue(&r), [1, 1, 0, 0]);
        let r = run_args(&["--queues", "2", "--clients", "5"]);
        assert_eq!(threads_per_queue(&r), [3, 2]);
        assert_eq!(max_threads_per_queue(&r), 3);
    }
}
