// SPDX-License-Identifier: Apache-2.0
//! The DAX window over real vhost-user (`--dax-window`): the protocol
//! features offered, GET_SHMEM_CONFIG, the back-end channel, and
//! FUSE_SETUPMAPPING / FUSE_REMOVEMAPPING turned into SHMEM_MAP (with the
//! file's descriptor) and SHMEM_UNMAP on it, each checked against the
//! window; this test plays QEMU on both sockets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod lifecycle;
mod qemu;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use common::*;
use qemu::*;
use vhost::vhost_user::VhostUserFrontend;
use vhost::vhost_user::VhostUserProtocolFeatures as P;
use vhost::VhostBackend;
use xvfs_fs::abi::{init_flags, opcode, setupmapping_flags, Wire};
use xvirtiofsd::vhost_user::backend::BackendChannel;
use xvirtiofsd::vhost_user::DeviceConfig;
use xvirtiofsd::FsServer as Server;

/// A daemon with a window of [`WINDOW`] bytes.
fn start(dir: &std::path::Path) -> Vmm {
    let channel = Arc::new(BackendChannel::default());
    let mut fs = xvfs_fs::PassthroughFs::new(xvfs_fs::testing::config_for(dir)).expect("fs");
    fs.attach_mapper(channel.clone(), WINDOW);
    let mut cfg = DeviceConfig::new(2);
    cfg.tag = Some("dax".into());
    cfg.dax = Some((WINDOW, channel));
    Vmm::start_serving_on(Arc::new(Server::new(fs)), cfg, |mut dev, theirs| {
        let mut conn = xvirtiofsd::vhost_user::Connection::new(theirs);
        let r = conn.serve(&mut dev, None, &mut |_| {}).map(|_| ());
        dev.stop_all();
        r
    })
}

#[test]
fn setupmapping_becomes_shmem_map_on_the_backend_channel() {
    let dir = scratch_dir("dax");
    std::fs::write(dir.join("data"), vec![7u8; 3 * CHUNK as usize]).unwrap();
    std::fs::write(dir.join("small"), b"not a whole chunk").unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    let ino = std::fs::metadata(dir.join("data")).unwrap().ino();
    let mut vmm = start(&dir);

    // Offered: the window's features beside CONFIG; QEMU acks them.
    vmm.frontend.set_owner().expect("owner");
    let features = vmm.frontend.get_features().expect("features");
    vmm.frontend.set_features(features).expect("set features");
    let offered = vmm
        .frontend
        .get_protocol_features()
        .expect("protocol features");
    let want = P::SHMEM | P::BACKEND_REQ | P::BACKEND_SEND_FD | P::CONFIG | P::REPLY_ACK;
    assert!(offered.contains(want), "offered {offered:?}");
    assert!(
        !offered.contains(P::DEVICE_STATE),
        "no migration with a window: {offered:?}"
    );
    vmm.shutdown().expect("clean disconnect");

    let mut vmm = start(&dir);
    vmm.negotiate_with(u64::MAX, want | P::MQ | P::CONFIGURE_MEM_SLOTS);
    let shm = vmm.frontend.get_shmem_config().expect("GET_SHMEM_CONFIG");
    assert_eq!(shm.nregions, 1);
    assert_eq!(shm.memory_sizes[0], WINDOW, "region 0 is the window");
    assert!(shm.memory_sizes[1..].iter().all(|&s| s == 0));
    let qemu = backend_channel(&mut vmm);
    vmm.setup_queues(2);

    // INIT: the map alignment (a page) and per-inode DAX are answered when
    // the guest asks (a `dax=inode` mount offers both).
    let low = (init_flags::MAP_ALIGNMENT | init_flags::INIT_EXT) as u32;
    let high = (init_flags::HAS_INODE_DAX >> 32) as u32;
    let init = xvfs_fs::testing::init_in(41, low, high).to_bytes();
    let (err, out) = vmm.fuse(1, opcode::INIT, 0, &init);
    assert_eq!(err, 0);
    let flags = u32::from_ne_bytes(out[12..16].try_into().unwrap());
    assert_ne!(u64::from(flags) & init_flags::MAP_ALIGNMENT, 0);
    assert_eq!(u16::from_ne_bytes(out[30..32].try_into().unwrap()), 12);
    let flags2 = u32::from_ne_bytes(out[32..36].try_into().unwrap());
    assert_eq!(flags2 & high, high, "FUSE_HAS_INODE_DAX");
    // FUSE_ATTR_DAX (the attr's flags, at 40 + 84 of an entry) only on a
    // file whose size is a whole number of chunks.
    let lookup = |vmm: &mut Vmm, name: &[u8]| {
        let (err, entry) = vmm.fuse(1, opcode::LOOKUP, 1, name);
        assert_eq!(err, 0);
        let attr_flags = u32::from_ne_bytes(entry[124..128].try_into().unwrap());
        (u64_at(&entry, 0), attr_flags & xvfs_fs::abi::ATTR_DAX != 0)
    };
    let (node, dax) = lookup(&mut vmm, b"data\0");
    assert!(dax, "6 MiB: DAX");
    let (small, dax) = lookup(&mut vmm, b"small\0");
    assert!(!dax, "17 bytes: no DAX");
    let (empty, dax) = lookup(&mut vmm, b"empty\0");
    assert!(!dax, "empty: no DAX");
    let (err, attr) = vmm.fuse(1, opcode::GETATTR, node, &[0u8; 16]);
    assert_eq!(err, 0);
    let attr_flags = u32::from_ne_bytes(attr[16 + 84..16 + 88].try_into().unwrap());
    assert_ne!(
        attr_flags & xvfs_fs::abi::ATTR_DAX,
        0,
        "GETATTR says DAX too"
    );

    // The front-end's side of the channel, in a thread, as QEMU's main loop.
    let fe = std::thread::spawn(move || {
        let (req, flags, body, fds) = read_backend(&qemu);
        assert_eq!(req, 9, "SHMEM_MAP");
        assert_eq!(flags, 0x1 | 0x8, "version 1 and NEED_REPLY");
        assert_eq!(body.len(), 40);
        assert_eq!(body[0], 0, "shmid 0: the cache window");
        assert_eq!(u64_at(&body, 8), CHUNK, "fd_offset");
        assert_eq!(u64_at(&body, 16), 2 * CHUNK, "shm_offset");
        assert_eq!(u64_at(&body, 24), CHUNK, "len");
        assert_eq!(u64_at(&body, 32), 1, "writable");
        assert_eq!(fds.len(), 1, "the file's descriptor");
        let f = std::fs::File::from(fds.into_iter().next().unwrap());
        assert_eq!(f.metadata().unwrap().ino(), ino, "the file the guest named");
        // SAFETY: F_GETFL on a descriptor this thread owns.
        let fl = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(
            fl & libc::O_ACCMODE,
            libc::O_RDWR,
            "QEMU maps it read-write"
        );
        reply_backend(&qemu, 9, 0);

        let (req, _, body, fds) = read_backend(&qemu);
        assert_eq!((req, fds.len()), (10, 0), "SHMEM_UNMAP, no descriptor");
        assert_eq!((u64_at(&body, 16), u64_at(&body, 24)), (2 * CHUNK, CHUNK));
        reply_backend(&qemu, 10, 0);

        // A map the front-end refuses.
        let (req, ..) = read_backend(&qemu);
        assert_eq!(req, 9);
        reply_backend(&qemu, 9, 1);
        qemu
    });
    let rw = setupmapping_flags::READ | setupmapping_flags::WRITE;
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(CHUNK, 2 * CHUNK, rw));
    assert_eq!(err, 0, "mapped");
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(2 * CHUNK, CHUNK)]));
    assert_eq!(err, 0, "unmapped");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(0, 0, rw));
    assert_eq!(err, -libc::EIO, "the front-end refused: EIO");
    let qemu = fe.join().expect("front-end thread");

    // Refused before the front-end hears of it.
    for (what, body) in [
        ("past the window", setup(0, WINDOW, rw)),
        ("misaligned", setup(100, 0, rw)),
        ("an unknown flag", setup(0, 0, 1 << 5)),
    ] {
        let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &body);
        assert_eq!(err, -libc::EINVAL, "{what}");
    }
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, 1, &setup(0, 0, rw));
    assert_eq!(err, -libc::EINVAL, "a directory");
    // QEMU maps only whole ranges of a file, and grows an empty one.
    for (what, node, foffset) in [
        ("the chunk past the end", node, 3 * CHUNK),
        ("a file shorter than a chunk", small, 0),
        ("an empty file", empty, 0),
    ] {
        let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(foffset, 0, rw));
        assert_eq!(err, -libc::EIO, "{what}");
    }
    assert_eq!(std::fs::metadata(dir.join("empty")).unwrap().len(), 0);
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(CHUNK, CHUNK)]));
    assert_eq!(err, -libc::EINVAL, "nothing is mapped there");
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[]));
    assert_eq!(err, -libc::EINVAL, "no range");
    qemu.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        (&qemu).read(&mut byte).is_err(),
        "nothing reached the front-end"
    );
    vmm.shutdown().expect("clean disconnect");
}

/// A hostile guest and a host process together: QEMU adds each DAX
/// mapping to guest memory, backed by the mapped file. Were the daemon to
/// map that region, a host truncate of the file plus a guest buffer
/// pointing there would be SIGBUS in the daemon (here: in this test) as
/// soon as it wrote a reply there itself. It records the region without
/// mapping it and refuses such a buffer (EFAULT when the reply header can
/// be written elsewhere), and serving goes on.
#[test]
fn a_window_chunk_in_guest_memory_is_never_touched() {
    use vhost::VhostUserMemoryRegionInfo;
    use vm_memory::{Bytes, GuestAddress};
    use xvfs_fs::abi::{OpenIn, ReadIn, WriteIn};

    let dir = scratch_dir("dax-chunk");
    std::fs::write(dir.join("data"), vec![7u8; 2 * CHUNK as usize]).unwrap();
    std::fs::write(dir.join("other"), vec![1u8; 4096]).unwrap();
    let mut vmm = start(&dir);
    vmm.negotiate_with(u64::MAX, P::MQ | P::REPLY_ACK | P::CONFIGURE_MEM_SLOTS);
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let (err, _) = vmm.fuse(1, opcode::LOOKUP, 1, b"data\0");
    assert_eq!(err, 0);
    let (err, entry) = vmm.fuse(1, opcode::LOOKUP, 1, b"other\0");
    assert_eq!(err, 0);
    let other = u64_at(&entry, 0);
    let open = OpenIn {
        flags: libc::O_RDWR as u32,
        open_flags: 0,
    };
    let (err, opened) = vmm.fuse(1, opcode::OPEN, other, &open.to_bytes());
    assert_eq!(err, 0);
    let fh = u64_at(&opened, 0);

    // What QEMU sends once it has mapped `data` into the window.
    let data = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("data"))
        .unwrap();
    let chunk = VhostUserMemoryRegionInfo {
        guest_phys_addr: CHUNK_GPA,
        memory_size: CHUNK,
        userspace_addr: 0x7e00_0000_0000,
        mmap_offset: 0,
        mmap_handle: data.as_raw_fd(),
    };
    vmm.frontend.add_mem_region(&chunk).expect("ADD_MEM_REG");
    data.set_len(0).unwrap();

    // READ into the chunk, and WRITE from it.
    let read = ReadIn {
        fh,
        offset: 0,
        size: 4096,
        ..Default::default()
    };
    let write = WriteIn {
        fh,
        offset: 0,
        size: 4096,
        ..Default::default()
    };
    let mut write_req = fuse_request(opcode::WRITE, 21, other, &write.to_bytes());
    let len = write_req.len() as u32 + 4096;
    write_req[..4].copy_from_slice(&len.to_ne_bytes());
    for (unique, req, chunk_writable) in [
        (
            20,
            fuse_request(opcode::READ, 20, other, &read.to_bytes()),
            true,
        ),
        (21, write_req, false),
    ] {
        let inb = vmm.alloc(req.len() as u64);
        let outb = vmm.alloc(4096);
        vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
        let descs: Vec<(u64, u32, bool)> = if chunk_writable {
            vec![
                (inb, req.len() as u32, false),
                (outb, 16, true),
                (CHUNK_GPA, 4096, true),
            ]
        } else {
            vec![
                (inb, req.len() as u32, false),
                (CHUNK_GPA, 4096, false),
                (outb, 16, true),
            ]
        };
        vmm.post(1, &descs);
        vmm.kick(1);
        let (_, used) = vmm.wait_used(1).expect("answered");
        assert_eq!(used, 16, "an error header, nothing else");
        let mut out = [0u8; 16];
        vmm.mem.read_slice(&mut out, GuestAddress(outb)).unwrap();
        assert_eq!(
            i32::from_ne_bytes(out[4..8].try_into().unwrap()),
            -libc::EFAULT
        );
        assert_eq!(u64_at(&out, 8), unique, "the request's unique id");
    }
    assert_eq!(std::fs::read(dir.join("other")).unwrap(), vec![1u8; 4096]);
    // A reply the daemon writes itself, all of it in the chunk: mapped, that
    // store would be the SIGBUS. Nothing can be written; the chain completes.
    let req = fuse_request(opcode::GETATTR, 22, other, &[0u8; 16]);
    let inb = vmm.alloc(req.len() as u64);
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(
        1,
        &[(inb, req.len() as u32, false), (CHUNK_GPA, 4096, true)],
    );
    vmm.kick(1);
    assert_eq!(vmm.wait_used(1).expect("answered").1, 0, "nothing written");

    // The daemon serves on, and the chunk leaves as it came.
    let (err, _) = vmm.fuse(1, opcode::GETATTR, other, &[0u8; 16]);
    assert_eq!(err, 0);
    vmm.frontend.remove_mem_region(&chunk).expect("REM_MEM_REG");
    let (err, _) = vmm.fuse(1, opcode::GETATTR, other, &[0u8; 16]);
    assert_eq!(err, 0);
    vmm.shutdown().expect("clean disconnect");
}

/// QEMU stops the queues (GET_VRING_BASE, a reset) before it reads the
/// back-end channel again. A worker waiting there for a map's answer must
/// give up at once, not after its 5 s deadline; the answer that comes
/// afterwards is dropped, and since QEMU may have made that mapping after
/// all, the next map at that place first removes whatever is there.
#[test]
fn a_device_stop_does_not_wait_behind_a_map() {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    use vm_memory::{Bytes, GuestAddress};

    let dir = scratch_dir("dax-stop");
    std::fs::write(dir.join("data"), vec![7u8; 2 * CHUNK as usize]).unwrap();
    let mut vmm = start(&dir);
    let want = P::SHMEM | P::BACKEND_REQ | P::BACKEND_SEND_FD | P::CONFIG | P::REPLY_ACK;
    vmm.negotiate_with(u64::MAX, want | P::MQ | P::CONFIGURE_MEM_SLOTS);
    let qemu = backend_channel(&mut vmm);
    vmm.setup_queues(2);
    vmm.fuse_init(1);
    let (err, entry) = vmm.fuse(1, opcode::LOOKUP, 1, b"data\0");
    assert_eq!(err, 0);
    let node = u64_at(&entry, 0);

    let (got_map, map_seen) = mpsc::channel();
    let (answer_now, answer) = mpsc::channel::<()>();
    let fe = std::thread::spawn(move || {
        let (req, ..) = read_backend(&qemu);
        assert_eq!(req, 9, "SHMEM_MAP");
        got_map.send(()).unwrap();
        // QEMU is busy stopping the queues; it answers afterwards.
        answer.recv().unwrap();
        reply_backend(&qemu, 9, 0);
        let (req, _, body, _) = read_backend(&qemu);
        assert_eq!(req, 10, "the place is cleared first");
        assert_eq!((u64_at(&body, 16), u64_at(&body, 24)), (0, CHUNK));
        reply_backend(&qemu, 10, 0);
        let (req, ..) = read_backend(&qemu);
        assert_eq!(req, 9, "then mapped");
        reply_backend(&qemu, 9, 0);
    });

    let rw = setupmapping_flags::READ | setupmapping_flags::WRITE;
    let req = fuse_request(opcode::SETUPMAPPING, 30, node, &setup(0, 0, rw));
    let (inb, outb) = (vmm.alloc(req.len() as u64), vmm.alloc(4096));
    vmm.mem.write_slice(&req, GuestAddress(inb)).unwrap();
    vmm.post(1, &[(inb, req.len() as u32, false), (outb, 4096, true)]);
    vmm.kick(1);
    map_seen
        .recv_timeout(Duration::from_secs(10))
        .expect("the map reached QEMU");
    let t = Instant::now();
    vmm.reset_queue(1, |_, _| {});
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the stop waited {:?} behind the map",
        t.elapsed()
    );
    let (_, used) = vmm.wait_used(1).expect("the map was answered");
    assert_eq!(used, 16, "an error, no data");
    let mut out = [0u8; 16];
    vmm.mem.read_slice(&mut out, GuestAddress(outb)).unwrap();
    assert!(
        i32::from_ne_bytes(out[4..8].try_into().unwrap()) < 0,
        "the map failed"
    );

    answer_now.send(()).unwrap();
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(0, 0, rw));
    assert_eq!(err, 0, "mapped, the late answer dropped");
    fe.join().expect("front-end thread");
    vmm.shutdown().expect("clean disconnect");
}

/// A daemon with a window, its front-end negotiated as QEMU 11.1 does
/// with the test device, queues running, a session started with per-inode
/// DAX asked for; and QEMU's end of the back-end channel.
fn dax_vmm(dir: &std::path::Path) -> (Vmm, std::os::unix::net::UnixStream) {
    let mut vmm = start(dir);
    let want = P::SHMEM | P::BACKEND_REQ | P::BACKEND_SEND_FD | P::CONFIG | P::REPLY_ACK;
    vmm.negotiate_with(u64::MAX, want | P::MQ | P::CONFIGURE_MEM_SLOTS);
    let qemu = backend_channel(&mut vmm);
    vmm.setup_queues(2);
    let low = (init_flags::MAP_ALIGNMENT | init_flags::INIT_EXT) as u32;
    let high = (init_flags::HAS_INODE_DAX >> 32) as u32;
    let init = xvfs_fs::testing::init_in(41, low, high).to_bytes();
    assert_eq!(vmm.fuse(1, opcode::INIT, 0, &init).0, 0);
    (vmm, qemu)
}

/// A guest that maps a file and FORGETs its node before QEMU announces
/// the mapping in guest memory (the window's file is then no node of the
/// guest's any more): the region is a window chunk all the same, never
/// mapped, so a host truncate under it cannot fault the daemon.
#[test]
fn a_forgotten_node_s_chunk_is_never_mapped() {
    let dir = scratch_dir("dax-forget");
    std::fs::write(dir.join("data"), vec![7u8; 2 * CHUNK as usize]).unwrap();
    let (mut vmm, qemu) = dax_vmm(&dir);
    let qemu = Qemu::serve(qemu);
    let (node, _) = lookup(&mut vmm, "data");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(0, 0, RW));
    assert_eq!(err, 0, "mapped");
    forget(&mut vmm, node, 1);
    let data = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("data"))
        .unwrap();
    let chunk = chunk_region(&data, 0);
    vmm.frontend.add_mem_region(&chunk).expect("ADD_MEM_REG");
    data.set_len(0).unwrap();
    assert_eq!(
        getattr_into(&mut vmm, CHUNK_GPA),
        Some(0),
        "nothing written into the chunk"
    );
    let (err, _) = vmm.fuse(1, opcode::GETATTR, 1, &[0u8; 16]);
    assert_eq!(err, 0, "serving on");
    vmm.frontend.remove_mem_region(&chunk).expect("REM_MEM_REG");
    assert_eq!(qemu.at(0), Some(data.metadata().unwrap().ino()));
    vmm.shutdown().expect("clean disconnect");
}

/// Every mapping of QEMU's is whole pages, and a successor refuses a state
/// with any other: a length that is not is refused before QEMU hears of it.
#[test]
fn a_length_of_part_of_a_page_is_refused() {
    let dir = scratch_dir("dax-len");
    std::fs::write(dir.join("data"), vec![7u8; 2 * CHUNK as usize]).unwrap();
    let (mut vmm, qemu) = dax_vmm(&dir);
    let qemu = Qemu::serve(qemu);
    let (node, _) = lookup(&mut vmm, "data");
    for len in [4096 + 1, CHUNK - 512, 100] {
        let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup_len(0, 0, len, RW));
        assert_eq!(err, -libc::EINVAL, "length {len:#x}");
    }
    assert!(qemu.quiet(100), "nothing reached QEMU");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup_len(0, 0, 8192, RW));
    assert_eq!(err, 0, "two pages are fine");
    assert_eq!(qemu.next(), (SHMEM_MAP, 0));
    vmm.shutdown().expect("clean disconnect");
}

/// An unmap QEMU refuses leaves the range's mapping known: the guest's
/// next removal of it is passed on, and a map there first removes it, so
/// the range is not lost to the guest (QEMU refuses an overlapping map).
#[test]
fn a_refused_unmap_keeps_its_range_known() {
    let dir = scratch_dir("dax-unmap");
    std::fs::write(dir.join("a"), vec![1u8; 2 * CHUNK as usize]).unwrap();
    std::fs::write(dir.join("b"), vec![2u8; 2 * CHUNK as usize]).unwrap();
    let (mut vmm, qemu) = dax_vmm(&dir);
    let qemu = Qemu::serve(qemu);
    let (a, _) = lookup(&mut vmm, "a");
    let (b, _) = lookup(&mut vmm, "b");
    let ino_b = std::fs::metadata(dir.join("b")).unwrap().ino();

    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, a, &setup(0, 0, RW));
    assert_eq!(err, 0);
    qemu.refuse_unmaps
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(0, CHUNK)]));
    assert_eq!(err, -libc::EIO, "QEMU refused");
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(0, CHUNK)]));
    assert_eq!(err, 0, "asked again, passed on again");
    assert_eq!(qemu.at(0), None);

    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, a, &setup(0, CHUNK, RW));
    assert_eq!(err, 0);
    qemu.refuse_unmaps
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let (err, _) = vmm.fuse(1, opcode::REMOVEMAPPING, 0, &remove(&[(CHUNK, CHUNK)]));
    assert_eq!(err, -libc::EIO, "QEMU refused");
    // Linux frees the range anyway and maps another file there.
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, b, &setup(0, CHUNK, RW));
    assert_eq!(err, 0, "the range is not stuck");
    assert_eq!(qemu.at(CHUNK), Some(ino_b));
    vmm.shutdown().expect("clean disconnect");
}

/// A value of `security.capability` (revision 2, effective, CAP_NET_RAW).
fn capability() -> Vec<u8> {
    let mut v = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v
}

fn has_capability(path: &std::path::Path) -> bool {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and name; a zero-length buffer asks
    // only for the size.
    let r = unsafe {
        libc::getxattr(
            p.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    r > 0
}

/// Stores through the window are writes the host kernel never sees: a
/// writable mapping clears set-user-ID, set-group-ID with group execute
/// and the file's capabilities when it is made, as the kernel does on a
/// write by an unprivileged writer; a read mapping of a file that has any
/// of them is refused (QEMU 11.1 maps it writable too), and per-inode DAX
/// leaves set-ID files out.
#[test]
fn a_writable_mapping_clears_set_id_bits_and_capabilities() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("dax-privs");
    for (name, mode) in [("suid", 0o6755), ("caps", 0o755), ("sgid-noexec", 0o2644)] {
        let p = dir.join(name);
        std::fs::write(&p, vec![7u8; 2 * CHUNK as usize]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let caps = std::ffi::CString::new(dir.join("caps").as_os_str().as_encoded_bytes()).unwrap();
    let v = capability();
    // SAFETY: a NUL-terminated path and name, a buffer of `v.len()` bytes.
    let r = unsafe {
        libc::setxattr(
            caps.as_ptr(),
            c"security.capability".as_ptr(),
            v.as_ptr().cast(),
            v.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "set a capability: {}",
        std::io::Error::last_os_error()
    );
    let mode = |name: &str| std::fs::metadata(dir.join(name)).unwrap().mode() & 0o7777;

    let (mut vmm, qemu) = dax_vmm(&dir);
    let qemu = Qemu::serve(qemu);
    let (suid, dax) = lookup(&mut vmm, "suid");
    assert!(!dax, "no per-inode DAX for a set-ID file");
    let (with_caps, _) = lookup(&mut vmm, "caps");
    let (sgid, _) = lookup(&mut vmm, "sgid-noexec");

    for node in [suid, with_caps] {
        let read = setupmapping_flags::READ;
        let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, node, &setup(0, 0, read));
        assert_eq!(err, -libc::EPERM, "no read mapping of a privileged file");
    }
    assert!(qemu.quiet(100), "nothing reached QEMU");
    assert_eq!(mode("suid"), 0o6755, "a refused mapping changes nothing");
    assert!(has_capability(&dir.join("caps")));

    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, suid, &setup(0, 0, RW));
    assert_eq!(err, 0);
    assert_eq!(mode("suid"), 0o755, "set-user-ID and set-group-ID cleared");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, with_caps, &setup(0, CHUNK, RW));
    assert_eq!(err, 0);
    assert!(!has_capability(&dir.join("caps")), "capabilities cleared");
    let (err, _) = vmm.fuse(1, opcode::SETUPMAPPING, sgid, &setup(0, 2 * CHUNK, RW));
    assert_eq!(err, 0);
    assert_eq!(
        mode("sgid-noexec"),
        0o2644,
        "set-group-ID without group execute stays"
    );
    vmm.shutdown().expect("clean disconnect");
}
