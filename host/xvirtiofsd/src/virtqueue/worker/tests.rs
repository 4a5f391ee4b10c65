// SPDX-License-Identifier: Apache-2.0
//! SETLKW requests kept waiting on a real split ring (laid out by
//! virtio-queue's mock driver), against a passthrough file system whose
//! file a host descriptor holds locked: a guest that makes a waiting chain
//! available again faults its ring, and a full wait list answers ENOLCK.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use virtio_queue::desc::split::Descriptor as SplitDescriptor;
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic};
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::io::{SliceReader, VecWriter};
use xvfs_fs::{Config, PassthroughFs};

use super::*;

/// Ring size: room for SIZE / 2 chains of two descriptors.
const SIZE: u16 = 16;
/// Request `n` lies at `DATA + 0x1000 * n`, its reply buffer 0x800 further.
const DATA: u64 = 0x1_0000;
const REPLY_ROOM: u32 = 0x100;
const VRING_DESC_F_NEXT: u16 = 1;
const VRING_DESC_F_WRITE: u16 = 2;

/// A share with one file `f`, opened by the guest (node, fh) and write-locked
/// in full by a host descriptor of its own.
struct Fixture {
    dir: PathBuf,
    server: Arc<Server>,
    mem: GuestMemoryMmap,
    node: u64,
    fh: u64,
    host: std::cell::Cell<Option<OwnedFd>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn request(op: u32, unique: u64, node: u64, body: &[u8]) -> Vec<u8> {
    let h = abi::InHeader {
        len: (abi::InHeader::SIZE + body.len()) as u32,
        opcode: op,
        unique,
        nodeid: node,
        // SAFETY: no preconditions.
        uid: unsafe { libc::geteuid() },
        // SAFETY: no preconditions.
        gid: unsafe { libc::getegid() },
        pid: 42,
        total_extlen: 0,
        padding: 0,
    };
    [&h.to_bytes()[..], body].concat()
}

/// Serves `req` outside any ring; returns the reply.
fn call(server: &Server, req: &[u8]) -> Vec<u8> {
    let mut w = VecWriter::new(4096);
    server.handle(&mut SliceReader::new(req), &mut w);
    w.into_inner()
}

/// A write lock over the whole file through a host descriptor of its own.
fn host_lock(path: &std::path::Path) -> OwnedFd {
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
        .into();
    // SAFETY: plain data; all zeroes is valid.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as i16;
    l.l_whence = libc::SEEK_SET as i16;
    // SAFETY: valid descriptor and struct.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &mut l) };
    assert_eq!(r, 0, "host lock: {}", std::io::Error::last_os_error());
    fd
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("xvfs-queue-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fs = PassthroughFs::new(Config {
            root_dir: dir.clone(),
            posix_lock: true,
            ..Config::default()
        })
        .unwrap();
        let server = Arc::new(Server::new(fs));
        let init = abi::InitIn {
            major: 7,
            minor: 41,
            max_readahead: 131072,
            flags: u32::MAX,
            flags2: u32::MAX,
            unused: [0; 11],
        };
        let out = call(&server, &request(opcode::INIT, 1, 0, &init.to_bytes()));
        assert_eq!(abi::OutHeader::from_bytes(&out).unwrap().error, 0, "INIT");
        let create = abi::CreateIn {
            flags: (libc::O_RDWR | libc::O_CREAT) as u32,
            mode: 0o644,
            umask: 0o022,
            open_flags: 0,
        };
        let body = [&create.to_bytes()[..], b"f\0"].concat();
        let out = call(&server, &request(opcode::CREATE, 2, abi::ROOT_ID, &body));
        assert_eq!(abi::OutHeader::from_bytes(&out).unwrap().error, 0, "CREATE");
        let entry = abi::EntryOut::from_bytes(&out[abi::OutHeader::SIZE..]).unwrap();
        let open = abi::OpenOut::from_bytes(&out[abi::OutHeader::SIZE + abi::EntryOut::SIZE..]);
        let host = std::cell::Cell::new(Some(host_lock(&dir.join("f"))));
        Fixture {
            dir,
            server,
            mem: GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap(),
            node: entry.nodeid,
            fh: open.unwrap().fh,
            host,
        }
    }

    /// A worker's state over the ring `q` (from its first entry).
    fn worker(&self, q: &MockSplitQueue<'_, GuestMemoryMmap>) -> WorkerCtx {
        let cfg = RingConfig {
            index: 1,
            size: SIZE,
            desc: q.desc_table_addr().0,
            avail: q.avail_addr().0,
            used: q.used_addr().0,
            next_avail: 0,
            event_idx: false,
            from_used: false,
        };
        let mem = GuestMemoryAtomic::new(self.mem.clone());
        detached(&cfg, mem, Arc::clone(&self.server)).unwrap()
    }

    /// Writes SETLKW number `n` (a write lock over the whole file) as
    /// the chain of descriptors 2n and 2n + 1 and makes it available;
    /// returns its head.
    fn post_setlkw(&self, q: &MockSplitQueue<'_, GuestMemoryMmap>, n: u16) -> u16 {
        let lk = abi::LkIn {
            fh: self.fh,
            owner: 0xa,
            lk: abi::FileLock {
                start: 0,
                end: i64::MAX as u64,
                typ: libc::F_WRLCK as u32,
                pid: 0,
            },
            lk_flags: 0,
            padding: 0,
        };
        let req = request(
            opcode::SETLKW,
            100 + u64::from(n),
            self.node,
            &lk.to_bytes(),
        );
        let at = DATA + 0x1000 * u64::from(n);
        self.mem.write_slice(&req, GuestAddress(at)).unwrap();
        let head = 2 * n;
        let desc = |addr, len, flags, next| {
            RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
        };
        let table = q.desc_table();
        let first = desc(at, req.len() as u32, VRING_DESC_F_NEXT, head + 1);
        table.store(head, first).unwrap();
        let reply = desc(at + 0x800, REPLY_ROOM, VRING_DESC_F_WRITE, 0);
        table.store(head + 1, reply).unwrap();
        make_available(q, head);
        head
    }

    /// The used ring: (head, reply's errno) of each entry.
    fn replies(&self, q: &MockSplitQueue<'_, GuestMemoryMmap>) -> Vec<(u16, i32)> {
        let n = q.used().idx().load();
        (0..n)
            .map(|i| {
                let e = q
                    .used()
                    .ring()
                    .ref_at(usize::from(i % SIZE))
                    .unwrap()
                    .load();
                let head = e.id() as u16;
                let at = DATA + 0x1000 * u64::from(head / 2) + 0x800;
                let h: [u8; abi::OutHeader::SIZE] = self.mem.read_obj(GuestAddress(at)).unwrap();
                (head, -abi::OutHeader::from_bytes(&h).unwrap().error)
            })
            .collect()
    }
}

/// Puts `head` on the avail ring, as a driver does.
fn make_available(q: &MockSplitQueue<'_, GuestMemoryMmap>, head: u16) {
    let idx = q.avail().idx().load();
    let slot = q.avail().ring().ref_at(usize::from(idx % SIZE)).unwrap();
    slot.store(head);
    q.avail().idx().store(idx.wrapping_add(1));
}

fn serve(ctx: &mut WorkerCtx) -> Result<u64, RingFault> {
    let guard = ctx.mem.memory();
    ctx.serve_batch(&guard)
}

fn retry(ctx: &mut WorkerCtx) -> Result<(), RingFault> {
    ctx.next_retry = Instant::now();
    let guard = ctx.mem.memory();
    ctx.retry_waiting(&guard)
}

#[test]
fn a_waiting_head_made_available_again_is_a_ring_fault() {
    let f = Fixture::new("dup");
    let q = MockSplitQueue::create(&f.mem, GuestAddress(0), SIZE);
    let mut ctx = f.worker(&q);
    let head = f.post_setlkw(&q, 0);
    assert_eq!(serve(&mut ctx).unwrap(), 1);
    assert!(ctx.waiting.holds(head));
    assert!(f.replies(&q).is_empty(), "a waiting SETLKW has no reply");
    // Another chain waits beside it.
    let other = f.post_setlkw(&q, 1);
    assert_eq!(serve(&mut ctx).unwrap(), 1);
    assert_eq!(ctx.waiting.list.len(), 2);

    // The guest publishes the first head again, and again.
    make_available(&q, head);
    make_available(&q, head);
    let err = serve(&mut ctx).unwrap_err();
    assert!(
        matches!(err, RingFault::HeadWaiting { head: h } if h == head),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "descriptor chain head 0 made available again while it waits for a lock (SETLKW)"
    );
    assert_eq!(ctx.waiting.list.len(), 2, "the wait list did not grow");
    assert!(f.replies(&q).is_empty(), "nothing was answered");

    // A worker that ends on the fault lets the server forget its waiters.
    ctx.drop_waiting();
    assert!(ctx.waiting.is_empty());
    assert!(!ctx.waiting.holds(head) && !ctx.waiting.holds(other));
}

#[test]
fn a_full_wait_list_answers_enolck_at_once() {
    let f = Fixture::new("full");
    let q = MockSplitQueue::create(&f.mem, GuestAddress(0), SIZE);
    let mut ctx = f.worker(&q);
    assert!(!ctx.waiting.is_full());
    // A ring cannot have more heads waiting than its size (a head made
    // available again is a fault): lower the bound to reach it.
    const MAX: u16 = 3;
    ctx.waiting.set_max(usize::from(MAX));
    for n in 0..=MAX {
        f.post_setlkw(&q, n);
    }
    assert_eq!(serve(&mut ctx).unwrap(), u64::from(MAX) + 1);
    assert_eq!(ctx.waiting.list.len(), usize::from(MAX));
    let last = 2 * MAX;
    assert_eq!(
        f.replies(&q),
        vec![(last, libc::ENOLCK)],
        "answered at once"
    );
    assert!(!ctx.waiting.holds(last));

    // Still held: nothing else is answered.
    retry(&mut ctx).unwrap();
    assert_eq!(f.replies(&q).len(), 1);
    // Once the host lets go, the waiting ones get the lock.
    drop(f.host.take());
    retry(&mut ctx).unwrap();
    let mut got = f.replies(&q);
    got.sort();
    assert_eq!(got, vec![(0, 0), (2, 0), (4, 0), (last, libc::ENOLCK)]);
    assert!(ctx.waiting.is_empty());
}
