// SPDX-License-Identifier: Apache-2.0
//! QEMU's side of the DAX back-end channel, and the FUSE bodies and memory
//! regions the tests send: one request read as QEMU reads it, its reply,
//! and [`Qemu`], a front-end that keeps a table of the window's mappings as
//! QEMU 11.1 does (an overlapping map or an unmap of nothing refused).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::VhostUserFrontend;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use xvfs_fs::abi::{SetupMappingIn, Wire};

use super::common::Vmm;

pub const WINDOW: u64 = 8 << 20;
pub const CHUNK: u64 = 2 << 20;
pub const SHMEM_MAP: u32 = 9;
pub const SHMEM_UNMAP: u32 = 10;
/// Where the tests' front-end puts the window's chunks in guest memory.
pub const CHUNK_GPA: u64 = 0x1_0000_0000;

/// Gives the daemon its back-end channel (SET_BACKEND_REQ_FD) and returns
/// QEMU's end; from then on every front-end request awaits its ack.
pub fn backend_channel(vmm: &mut Vmm) -> UnixStream {
    let (qemu, daemon) = UnixStream::pair().expect("socketpair");
    vmm.frontend
        .set_backend_request_fd(&daemon)
        .expect("SET_BACKEND_REQ_FD");
    vmm.frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    qemu
}

/// One request on the back-end channel as QEMU reads it: (request, flags,
/// payload, descriptors); None once the daemon's end is closed.
pub fn try_read_backend(s: &UnixStream) -> Option<(u32, u32, Vec<u8>, Vec<OwnedFd>)> {
    let mut hdr = [0u8; 12];
    let mut fds = [0i32; 4];
    let mut iov = [libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: hdr.len(),
    }];
    // SAFETY: the iovec points at `hdr`, which outlives the call; received
    // descriptors are owned below, each exactly once.
    let (n, nfds) = unsafe { s.recv_with_fds(&mut iov, &mut fds) }.ok()?;
    let fds = fds[..nfds]
        .iter()
        // SAFETY: the kernel installed these descriptors for this process.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if n == 0 {
        return None;
    }
    assert_eq!(n, 12, "a whole header");
    let word = |i: usize| u32::from_ne_bytes(hdr[i..i + 4].try_into().unwrap());
    let mut body = vec![0u8; word(8) as usize];
    (&*s).read_exact(&mut body).ok()?;
    Some((word(0), word(4), body, fds))
}

/// As [`try_read_backend`], the daemon's end open.
pub fn read_backend(s: &UnixStream) -> (u32, u32, Vec<u8>, Vec<OwnedFd>) {
    try_read_backend(s).expect("a back-end request")
}

/// QEMU's reply to back-end request `req`: `value` (0 = done).
pub fn reply_backend(s: &UnixStream, req: u32, value: u64) {
    let mut m = Vec::new();
    m.extend_from_slice(&req.to_ne_bytes());
    m.extend_from_slice(&0x5u32.to_ne_bytes());
    m.extend_from_slice(&8u32.to_ne_bytes());
    m.extend_from_slice(&value.to_ne_bytes());
    (&*s).write_all(&m).expect("reply");
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

/// A SETUPMAPPING body for a chunk.
pub fn setup(foffset: u64, moffset: u64, flags: u64) -> Vec<u8> {
    setup_len(foffset, moffset, CHUNK, flags)
}

/// A SETUPMAPPING body of `len` bytes.
pub fn setup_len(foffset: u64, moffset: u64, len: u64, flags: u64) -> Vec<u8> {
    SetupMappingIn {
        fh: u64::MAX,
        foffset,
        len,
        flags,
        moffset,
    }
    .to_bytes()
}

/// A REMOVEMAPPING body.
pub fn remove(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut b = (ranges.len() as u32).to_ne_bytes().to_vec();
    for &(at, len) in ranges {
        b.extend_from_slice(&at.to_ne_bytes());
        b.extend_from_slice(&len.to_ne_bytes());
    }
    b
}

/// Read and write.
pub const RW: u64 =
    xvfs_fs::abi::setupmapping_flags::READ | xvfs_fs::abi::setupmapping_flags::WRITE;

/// LOOKUP of `name` in the root: its node id and whether it is a DAX file.
pub fn lookup(vmm: &mut Vmm, name: &str) -> (u64, bool) {
    let (err, entry) = vmm.fuse(
        1,
        xvfs_fs::abi::opcode::LOOKUP,
        1,
        format!("{name}\0").as_bytes(),
    );
    assert_eq!(err, 0, "LOOKUP {name}");
    let attr_flags = u32::from_ne_bytes(entry[124..128].try_into().unwrap());
    (u64_at(&entry, 0), attr_flags & xvfs_fs::abi::ATTR_DAX != 0)
}

/// FORGET of `node` (`n` lookups), on the hiprio queue as Linux sends it.
pub fn forget(vmm: &mut Vmm, node: u64, n: u64) {
    use vm_memory::{Bytes, GuestAddress};
    let req = super::common::fuse_request(xvfs_fs::abi::opcode::FORGET, 0, node, &n.to_ne_bytes());
    let inb = vmm.alloc(4096);
    vmm.mem.write_slice(&req, GuestAddress(inb)).expect("write");
    vmm.post(0, &[(inb, req.len() as u32, false)]);
    vmm.kick(0);
    assert_eq!(vmm.wait_used(0).expect("FORGET completed").1, 0, "no reply");
}

/// The memory region QEMU announces (ADD_MEM_REG) once it mapped `len`
/// bytes of `file` at `moffset` of the window.
pub fn chunk_region(file: &std::fs::File, moffset: u64) -> vhost::VhostUserMemoryRegionInfo {
    vhost::VhostUserMemoryRegionInfo {
        guest_phys_addr: CHUNK_GPA + moffset,
        memory_size: CHUNK,
        userspace_addr: 0x7e00_0000_0000 + moffset,
        mmap_offset: 0,
        mmap_handle: file.as_raw_fd(),
    }
}

/// GETATTR of node 1 whose reply buffer lies wholly in the chunk at
/// `gpa`: the daemon must write nothing there (were it mapped, a shrunk
/// file under it would be SIGBUS in the daemon). Returns the bytes
/// written, None if unanswered.
pub fn getattr_into(vmm: &mut Vmm, gpa: u64) -> Option<u32> {
    use vm_memory::{Bytes, GuestAddress};
    let req = super::common::fuse_request(xvfs_fs::abi::opcode::GETATTR, 22, 1, &[0u8; 16]);
    let inb = vmm.alloc(req.len() as u64);
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(1, &[(inb, req.len() as u32, false), (gpa, 4096, true)]);
    vmm.kick(1);
    vmm.wait_used(1).map(|(_, len)| len)
}

/// QEMU's main loop on the back-end channel, in a thread: a table of the
/// window's mappings (offset → inode number, length), kept as QEMU 11.1
/// keeps it; a probe (a request it does not know) answered with 1.
pub struct Qemu {
    pub table: Arc<Mutex<BTreeMap<u64, (u64, u64)>>>,
    /// Requests are read but not answered while set (QEMU waits for this
    /// daemon on the other socket).
    pub held: Arc<AtomicBool>,
    /// Unmaps to refuse (the mapping stays).
    pub refuse_unmaps: Arc<AtomicU32>,
    /// Each request read: (request, window offset).
    pub seen: mpsc::Receiver<(u32, u64)>,
}

impl Qemu {
    pub fn serve(s: UnixStream) -> Qemu {
        let table = Arc::new(Mutex::new(BTreeMap::new()));
        let held = Arc::new(AtomicBool::new(false));
        let refuse_unmaps = Arc::new(AtomicU32::new(0));
        let (tx, seen) = mpsc::channel();
        let (t, h, r) = (table.clone(), held.clone(), refuse_unmaps.clone());
        std::thread::spawn(move || {
            while let Some((req, flags, body, fds)) = try_read_backend(&s) {
                let at = if body.len() == 40 {
                    u64_at(&body, 16)
                } else {
                    0
                };
                let _ = tx.send((req, at));
                while h.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let v = answer(&t, &r, req, &body, fds);
                if flags & 0x8 != 0 {
                    reply_backend(&s, req, v);
                }
            }
        });
        Qemu {
            table,
            held,
            refuse_unmaps,
            seen,
        }
    }

    /// The next request read (within 10 s).
    pub fn next(&self) -> (u32, u64) {
        self.seen
            .recv_timeout(Duration::from_secs(10))
            .expect("a back-end request")
    }

    /// Whether no request came for `ms` milliseconds.
    pub fn quiet(&self, ms: u64) -> bool {
        self.seen.recv_timeout(Duration::from_millis(ms)).is_err()
    }

    /// The inode number mapped at `at`, if any.
    pub fn at(&self, at: u64) -> Option<u64> {
        self.table.lock().unwrap().get(&at).map(|m| m.0)
    }
}

/// QEMU's answer to one request: 0 done, 1 refused.
fn answer(
    t: &Mutex<BTreeMap<u64, (u64, u64)>>,
    refuse_unmaps: &AtomicU32,
    req: u32,
    body: &[u8],
    fds: Vec<OwnedFd>,
) -> u64 {
    if body.len() != 40 {
        return 1;
    }
    let mut t = t.lock().unwrap();
    let (at, len) = (u64_at(body, 16), u64_at(body, 24));
    match req {
        SHMEM_MAP => {
            let overlap = t.iter().any(|(&a, &(_, l))| a < at + len && a + l > at);
            match fds.into_iter().next() {
                Some(fd) if !overlap => {
                    let ino = std::fs::File::from(fd).metadata().unwrap().ino();
                    t.insert(at, (ino, len));
                    0
                }
                _ => 1,
            }
        }
        SHMEM_UNMAP => {
            let refuse = refuse_unmaps
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse || t.get(&at).is_none_or(|m| m.1 != len) {
                return 1;
            }
            t.remove(&at);
            0
        }
        _ => 1,
    }
}
