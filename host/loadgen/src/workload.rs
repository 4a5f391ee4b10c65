// SPDX-License-Identifier: Apache-2.0
//! The workloads as per-slot state machines over FUSE requests, and the
//! client thread loop that keeps `depth` operations in flight.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::client::{Client, ClientError, Data, Hiprio, Reply, Request};
use crate::fixture::{DATA_SIZE, DIR_ENTRIES};
use crate::fuse::{self, op};
use crate::stats::ThreadStats;

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// READ of `--bs` bytes at random aligned offsets of a 64 MiB page-cached file.
    Read,
    /// WRITE of `--bs` bytes, sequential and wrapping, over a 64 MiB file.
    Write,
    /// GETATTR of a file.
    Getattr,
    /// LOOKUP of a name in a directory.
    Lookup,
    /// CREATE + RELEASE + UNLINK of a new file (then FORGET on hiprio, not timed).
    Create,
    /// OPENDIR + READDIRPLUS until the end + RELEASEDIR of a 10 000-entry directory.
    Readdirplus,
}

impl Kind {
    /// Name used in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Getattr => "getattr",
            Kind::Lookup => "lookup",
            Kind::Create => "create",
            Kind::Readdirplus => "readdirplus",
        }
    }
}

/// Node ids the workloads need, looked up once by the set-up thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nodes {
    /// The fixture directory.
    pub root: u64,
    /// The READ file.
    pub data: u64,
    /// The WRITE file.
    pub wdata: u64,
    /// The 10 000-entry directory.
    pub files: u64,
    /// The CREATE directory.
    pub create: u64,
}

/// Parameters shared by every client thread.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Workload.
    pub kind: Kind,
    /// READ/WRITE size.
    pub bs: u32,
    /// READDIRPLUS buffer size.
    pub readdir_buf: u32,
    /// Ops before the window (not recorded), as time.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Or: measured ops per thread (then `duration` is ignored).
    pub count: Option<u64>,
}

/// Next step of an operation.
enum Step {
    Next(Request),
    Done,
}

#[derive(Clone, Copy, Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Created {
        nodeid: u64,
    },
    Released {
        nodeid: u64,
    },
    Listing {
        fh: u64,
        entries: u64,
    },
    Closing {
        entries: u64,
    },
}

/// One slot's operation in progress.
#[derive(Default)]
struct SlotOp {
    phase: Phase,
    started: Option<Instant>,
    name: String,
    bytes: u64,
    entries: u64,
    forget: Option<u64>,
}

/// The per-thread workload state.
struct Gen {
    p: Params,
    nodes: Nodes,
    /// Open handle on the READ or WRITE file.
    fh: u64,
    rng: u64,
    wpos: u64,
    tid: u32,
    seq: u64,
}

fn bad(op: &'static str, why: impl Into<String>) -> ClientError {
    ClientError::BadReply {
        op,
        why: why.into(),
    }
}

fn small(op: &'static str, bytes: Vec<u8>) -> Request {
    Request {
        op,
        bytes,
        data: Data::None,
        want_body: true,
    }
}

impl Gen {
    /// xorshift64*: cheap and good enough for offsets.
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn start(&mut self, s: &mut SlotOp) -> Request {
        *s = SlotOp {
            started: Some(Instant::now()),
            ..SlotOp::default()
        };
        let p = self.p;
        match p.kind {
            Kind::Read => {
                let blocks = DATA_SIZE / u64::from(p.bs);
                let off = self.rand() % blocks * u64::from(p.bs);
                s.bytes = u64::from(p.bs);
                Request {
                    op: "READ",
                    bytes: fuse::read(op::READ, 0, self.nodes.data, self.fh, off, p.bs),
                    data: Data::In(p.bs),
                    want_body: false,
                }
            }
            Kind::Write => {
                let off = self.wpos;
                self.wpos =
                    (self.wpos + u64::from(p.bs)) % (DATA_SIZE - DATA_SIZE % u64::from(p.bs));
                s.bytes = u64::from(p.bs);
                Request {
                    op: "WRITE",
                    bytes: fuse::write(0, self.nodes.wdata, self.fh, off, p.bs),
                    data: Data::Out(p.bs),
                    want_body: true,
                }
            }
            Kind::Getattr => small("GETATTR", fuse::getattr(0, self.nodes.data)),
            Kind::Lookup => small(
                "LOOKUP",
                fuse::named(op::LOOKUP, 0, self.nodes.root, crate::fixture::DATA),
            ),
            Kind::Create => {
                self.seq += 1;
                s.name = format!("c{}-{}", self.tid, self.seq);
                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                small("CREATE", fuse::create(0, self.nodes.create, &s.name, flags))
            }
            Kind::Readdirplus => small(
                "OPENDIR",
                fuse::open(op::OPENDIR, 0, self.nodes.files, libc::O_RDONLY),
            ),
        }
    }

    fn reply(
        &mut self,
        s: &mut SlotOp,
        op_name: &'static str,
        r: Reply,
    ) -> Result<Step, ClientError> {
        let p = self.p;
        match (p.kind, s.phase) {
            (Kind::Read, _) => {
                let got = r.hdr.len as usize - fuse::OUT_HEADER;
                if got != p.bs as usize {
                    return Err(bad(op_name, format!("{got} bytes of {}", p.bs)));
                }
                Ok(Step::Done)
            }
            (Kind::Write, _) => {
                let n = r
                    .body
                    .get(0..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                if n != Some(p.bs) {
                    return Err(bad(op_name, format!("wrote {n:?} of {}", p.bs)));
                }
                Ok(Step::Done)
            }
            (Kind::Getattr | Kind::Lookup, _) => {
                let min = if p.kind == Kind::Lookup {
                    fuse::ENTRY_OUT
                } else {
                    104
                };
                if r.body.len() < min {
                    return Err(bad(op_name, format!("{}-byte reply", r.body.len())));
                }
                Ok(Step::Done)
            }
            (Kind::Create, Phase::Idle) => {
                let nodeid = fuse::entry_nodeid(&r.body).ok_or_else(|| bad(op_name, "short"))?;
                let fh = r
                    .body
                    .get(fuse::ENTRY_OUT..)
                    .and_then(fuse::open_fh)
                    .ok_or_else(|| bad(op_name, "no open_out"))?;
                s.phase = Phase::Created { nodeid };
                Ok(Step::Next(small(
                    "RELEASE",
                    fuse::release(op::RELEASE, 0, nodeid, fh, libc::O_WRONLY),
                )))
            }
            (Kind::Create, Phase::Created { nodeid }) => {
                s.phase = Phase::Released { nodeid };
                Ok(Step::Next(small(
                    "UNLINK",
                    fuse::named(op::UNLINK, 0, self.nodes.create, &s.name),
                )))
            }
            (Kind::Create, Phase::Released { nodeid }) => {
                s.forget = Some(nodeid);
                Ok(Step::Done)
            }
            (Kind::Readdirplus, Phase::Idle) => {
                let fh = fuse::open_fh(&r.body).ok_or_else(|| bad(op_name, "short"))?;
                s.phase = Phase::Listing { fh, entries: 0 };
                Ok(Step::Next(self.readdir(fh, 0)))
            }
            (Kind::Readdirplus, Phase::Listing { fh, entries }) => {
                let (n, last, _) =
                    fuse::direntplus(&r.body).ok_or_else(|| bad(op_name, "malformed entries"))?;
                if n == 0 {
                    s.phase = Phase::Closing { entries };
                    return Ok(Step::Next(small(
                        "RELEASEDIR",
                        fuse::release(op::RELEASEDIR, 0, self.nodes.files, fh, libc::O_RDONLY),
                    )));
                }
                s.phase = Phase::Listing {
                    fh,
                    entries: entries + n as u64,
                };
                Ok(Step::Next(self.readdir(fh, last)))
            }
            (Kind::Readdirplus, Phase::Closing { entries }) => {
                // "." and ".." come on top of the files (when the back-end lists them).
                if entries < DIR_ENTRIES as u64 || entries > DIR_ENTRIES as u64 + 2 {
                    return Err(bad(op_name, format!("listed {entries} entries")));
                }
                s.entries = entries;
                Ok(Step::Done)
            }
            (k, ph) => Err(bad(op_name, format!("unexpected reply in {k:?}/{ph:?}"))),
        }
    }

    fn readdir(&self, fh: u64, off: u64) -> Request {
        let size = self.p.readdir_buf;
        Request {
            op: "READDIRPLUS",
            bytes: fuse::read(op::READDIRPLUS, 0, self.nodes.files, fh, off, size),
            data: Data::In(size),
            want_body: true,
        }
    }
}

/// Opens the READ or WRITE file on this client's first slot.
fn open_file(c: &mut Client, p: &Params, nodes: &Nodes) -> Result<u64, ClientError> {
    let (node, flags) = match p.kind {
        Kind::Read => (nodes.data, libc::O_RDONLY),
        Kind::Write => (nodes.wdata, libc::O_RDWR),
        _ => return Ok(0),
    };
    let r = c.call(0, small("OPEN", fuse::open(op::OPEN, 0, node, flags)))?;
    fuse::open_fh(&r.body).ok_or_else(|| bad("OPEN", "short"))
}

fn close_file(c: &mut Client, p: &Params, nodes: &Nodes, fh: u64) -> Result<(), ClientError> {
    let (node, flags) = match p.kind {
        Kind::Read => (nodes.data, libc::O_RDONLY),
        Kind::Write => (nodes.wdata, libc::O_RDWR),
        _ => return Ok(()),
    };
    c.call(
        0,
        small("RELEASE", fuse::release(op::RELEASE, 0, node, fh, flags)),
    )?;
    Ok(())
}

/// The body of one client thread: set-up, start barrier, the loop, tear-down.
/// Returns what it measured.
pub fn client_thread(
    mut c: Client,
    p: Params,
    nodes: Nodes,
    hiprio: Arc<Hiprio>,
    start: Arc<Barrier>,
    tid: u32,
) -> Result<ThreadStats, ClientError> {
    let fh = open_file(&mut c, &p, &nodes)?;
    let mut g = Gen {
        p,
        nodes,
        fh,
        rng: 0x9e37_79b9_7f4a_7c15 ^ (u64::from(tid) + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
        wpos: u64::from(tid) * (8 << 20) % DATA_SIZE,
        tid,
        seq: 0,
    };
    g.wpos -= g.wpos % u64::from(p.bs.max(1));
    let depth = c.depth();
    let mut ops: Vec<SlotOp> = (0..depth).map(|_| SlotOp::default()).collect();
    start.wait();
    let t0 = Instant::now();
    let warm_end = t0 + p.warmup;
    let end = warm_end + p.duration;
    // Counters before the window are dropped: start from clean stats.
    let mut st = ThreadStats::default();
    let mut measured = 0u64;
    let want_more = |now: Instant, measured: u64, in_flight: usize| match p.count {
        Some(n) => now < warm_end || measured + (in_flight as u64) < n,
        None => now < end,
    };
    for (i, o) in ops.iter_mut().enumerate() {
        let r = g.start(o);
        c.submit(i, r)?;
    }
    // Kicks, sleeps and requests count from the first op completed in the window.
    let mut window_started = false;
    let (mut kicks_at, mut sleeps_at, mut reqs_at) =
        (c.stats.kicks, c.stats.sleeps, c.stats.requests);
    while c.in_flight() > 0 {
        let (i, reply) = c.wait_any()?;
        let o = &mut ops[i];
        let op_name = reply_op(&p, o);
        match g.reply(o, op_name, reply)? {
            Step::Next(r) => c.submit(i, r)?,
            Step::Done => {
                let now = Instant::now();
                if !window_started && now >= warm_end {
                    window_started = true;
                    kicks_at = c.stats.kicks;
                    sleeps_at = c.stats.sleeps;
                    reqs_at = c.stats.requests;
                }
                let started = o.started.unwrap_or(now);
                let in_window = started >= warm_end && (p.count.is_some() || now <= end);
                if in_window {
                    st.record(now.duration_since(started).as_nanos() as u64);
                    st.bytes += o.bytes;
                    st.entries += o.entries;
                    measured += 1;
                }
                if let Some(n) = o.forget.take() {
                    hiprio.forget(n, 1)?;
                }
                if want_more(now, measured, c.in_flight()) {
                    let r = g.start(o);
                    c.submit(i, r)?;
                }
            }
        }
    }
    st.kicks = c.stats.kicks - kicks_at;
    st.sleeps = c.stats.sleeps - sleeps_at;
    st.requests = c.stats.requests - reqs_at;
    close_file(&mut c, &p, &nodes, fh)?;
    Ok(st)
}

fn reply_op(p: &Params, o: &SlotOp) -> &'static str {
    match (p.kind, o.phase) {
        (Kind::Read, _) => "READ",
        (Kind::Write, _) => "WRITE",
        (Kind::Getattr, _) => "GETATTR",
        (Kind::Lookup, _) => "LOOKUP",
        (Kind::Create, Phase::Idle) => "CREATE",
        (Kind::Create, Phase::Created { .. }) => "RELEASE",
        (Kind::Create, _) => "UNLINK",
        (Kind::Readdirplus, Phase::Idle) => "OPENDIR",
        (Kind::Readdirplus, Phase::Listing { .. }) => "READDIRPLUS",
        (Kind::Readdirplus, _) => "RELEASEDIR",
    }
}
