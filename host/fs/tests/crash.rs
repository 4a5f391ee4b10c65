// SPDX-License-Identifier: Apache-2.0
//! Crash restart without a VM: a file system journals its tables, "crashes"
//! (is dropped), and a new one rebuilds them from the journal; replayed
//! requests whose outcome was unknown are resolved, never repeated.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::fd::AsFd;

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::journal::Journal;
use xvfs_fs::passthrough::KeptFiles;
use xvfs_fs::PassthroughFs;

const ROOT: u64 = abi::ROOT_ID;

/// A serving "process": a file system on `dir` journaling into `j`,
/// rebuilt from it when `recover`.
fn serving(dir: TestDir, j: &'static Journal, recover: bool) -> Harness {
    let mut fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    if recover {
        let report = fs.recover(j, KeptFiles::default()).unwrap();
        assert!(report.inodes > 0);
    } else {
        fs.attach_journal(j);
    }
    let h = Harness::from_fs(dir, fs);
    match j.session().filter(|_| recover) {
        Some(s) => h.srv.restore_session(s).unwrap(),
        None => {
            h.init(7, 41, 0, 0).ok();
        }
    }
    h
}

fn leak(j: Journal) -> &'static Journal {
    Box::leak(Box::new(j))
}

#[test]
fn a_new_process_finds_every_node_and_handle_again() {
    let dir = TestDir::new("crash");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 2, 4096, 4096).unwrap());
    let h = serving(dir, j, false);
    let d = h.mkdir(ROOT, "d", 0o755).parse::<abi::EntryOut>().nodeid;
    let (f, fh) = h.create_ok(d, "f");
    h.write(f.nodeid, fh, 0, b"journaled").ok();
    let (g, _) = h.create_ok(d, "g");
    h.lookup_ok(d, "f"); // two lookups of f now
                         // A rename: the journal's name follows the node (for file systems
                         // without file handles).
    let ri = abi::RenameIn { newdir: ROOT };
    h.req(
        opcode::RENAME,
        d,
        &cat(&[&ri.to_bytes(), &cname("f"), &cname("f2")]),
    )
    .ok();
    assert_eq!(j.tables().names[&f.nodeid], (ROOT, b"f2".to_vec()));
    h.req(
        opcode::RENAME,
        ROOT,
        &cat(&[
            &abi::RenameIn { newdir: d }.to_bytes(),
            &cname("f2"),
            &cname("f"),
        ]),
    )
    .ok();
    assert_eq!(j.tables().names[&f.nodeid], (d, b"f".to_vec()));
    std::fs::remove_file(h.dir.join("d/g")).unwrap();
    let (dir, _) = (h.dir, ());

    // The crash: the tables are gone; the journal (shared memory) is not.
    let j2 = leak(Journal::open(jf.as_fd()).unwrap());
    let h2 = serving(dir, j2, true);
    assert_eq!(
        h2.fs().lookup_count(f.nodeid),
        Some(2),
        "lookup counts kept"
    );
    h2.getattr(d).ok();
    let r = h2.read(f.nodeid, fh, 0, 100);
    assert_eq!(r.ok(), b"journaled", "the open handle reads on");
    // Deleted while held: it cannot be found again and answers EIO.
    assert_eq!(h2.getattr(g.nodeid).err(), libc::EIO);
    // New ids continue past the old ones.
    let (n, fh2) = h2.create_ok(d, "n");
    assert!(n.nodeid > g.nodeid && fh2 > fh);
    // And a second crash finds what the first restart added.
    let dir = h2.dir;
    let j3 = leak(Journal::open(jf.as_fd()).unwrap());
    let h3 = serving(dir, j3, true);
    h3.getattr(n.nodeid).ok();
    h3.write(n.nodeid, fh2, 0, b"x").ok();
}

#[test]
fn a_replay_of_an_unknown_outcome_is_resolved_not_repeated() {
    let dir = TestDir::new("replay");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 2, 256, 256).unwrap());
    let h = serving(dir, j, false);
    let d = h.mkdir(ROOT, "d", 0o755).parse::<abi::EntryOut>().nodeid;

    // Each operation ran once (the "first attempt"); its replay succeeds.
    h.mkdir(d, "sub", 0o755).ok();
    assert_eq!(
        h.mkdir(d, "sub", 0o755).err(),
        libc::EEXIST,
        "not replaying"
    );
    j.begin_replay(1);
    h.mkdir(d, "sub", 0o755).ok();
    j.idle(1);

    let excl = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    h.create(d, "c", 0o644, excl).ok();
    j.begin_replay(1);
    h.create(d, "c", 0o644, excl).ok();
    j.idle(1);

    let unlink = |h: &Harness| h.req(opcode::UNLINK, d, &cname("c"));
    unlink(&h).ok();
    j.begin_replay(1);
    unlink(&h).ok();
    j.idle(1);
    assert_eq!(unlink(&h).err(), libc::ENOENT, "not replaying");

    // An append: the size before is noted with the intent; its replay
    // after the first attempt wrote does not write again.
    let (a, _) = h.create_ok(d, "a");
    let fh = h
        .open(a.nodeid, libc::O_WRONLY | libc::O_APPEND)
        .parse::<abi::OpenOut>()
        .fh;
    j.begin_request(1, 7, 3, opcode::WRITE, 99);
    h.write(a.nodeid, fh, 0, b"once\n").ok();
    j.begin_replay(1);
    let w = h.write(a.nodeid, fh, 0, b"once\n").parse::<abi::WriteOut>();
    j.idle(1);
    assert_eq!(w.size, 5, "the guest is told its bytes were written");
    assert_eq!(std::fs::read(h.dir.join("d/a")).unwrap(), b"once\n");

    // A rename that happened is not an error on replay.
    let rename = |h: &Harness| {
        let ri = abi::RenameIn { newdir: d };
        h.req(
            opcode::RENAME,
            d,
            &cat(&[&ri.to_bytes(), &cname("a"), &cname("b")]),
        )
    };
    rename(&h).ok();
    assert_eq!(rename(&h).err(), libc::ENOENT, "not replaying");
    j.begin_replay(1);
    rename(&h).ok();
    j.idle(1);
    assert!(h.dir.join("d/b").exists());
}

#[test]
fn a_request_in_flight_is_recorded_with_its_reply() {
    let dir = TestDir::new("inflight");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 3, 64, 64).unwrap());
    j.begin_request(2, 65535, 17, opcode::MKDIR, 1 << 40);
    let intent = j.in_flight(2).unwrap();
    assert_eq!(intent.phase, xvfs_fs::journal::Phase::Intent);
    assert_eq!((intent.pos, intent.head), (65535, 17));
    j.end_request(2, Some(&[1, 2, 3]));
    let done = Journal::open(jf.as_fd()).unwrap().in_flight(2).unwrap();
    assert_eq!(done.phase, xvfs_fs::journal::Phase::Done);
    assert_eq!((done.unique, done.reply), (1 << 40, vec![1, 2, 3]));
    drop(dir);
}

#[test]
fn replays_of_links_exchanges_shifts_and_xattrs_are_resolved() {
    let dir = TestDir::new("replay2");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 2, 256, 256).unwrap());
    let mut cfg = config_for(&dir.path);
    cfg.xattr = true;
    let mut fs = PassthroughFs::new(cfg).unwrap();
    fs.attach_journal(j);
    let h = Harness::from_fs(dir, fs);
    h.init(7, 41, u32::MAX, u32::MAX).ok();
    std::fs::write(h.dir.join("a"), b"A").unwrap();
    std::fs::write(h.dir.join("b"), b"B").unwrap();
    let a = h.lookup_ok(ROOT, "a");

    let l = abi::LinkIn {
        oldnodeid: a.nodeid,
    };
    let link = |h: &Harness| h.req(opcode::LINK, ROOT, &cat(&[&l.to_bytes(), &cname("a2")]));
    link(&h).ok();
    assert_eq!(link(&h).err(), libc::EEXIST, "not replaying");
    j.begin_replay(1);
    assert_eq!(link(&h).parse::<abi::EntryOut>().nodeid, a.nodeid);
    j.idle(1);

    let sym = |h: &Harness| h.req(opcode::SYMLINK, ROOT, &cat(&[&cname("s"), &cname("a")]));
    sym(&h).ok();
    j.begin_replay(1);
    sym(&h).ok();
    j.idle(1);

    // An exchange notes which file the old name held: its replay after it
    // happened must not swap the names back.
    let x = abi::Rename2In {
        newdir: ROOT,
        flags: libc::RENAME_EXCHANGE,
        padding: 0,
    };
    let exchange = |h: &Harness| {
        h.req(
            opcode::RENAME2,
            ROOT,
            &cat(&[&x.to_bytes(), &cname("a"), &cname("b")]),
        )
    };
    j.begin_request(1, 1, 1, opcode::RENAME2, 5);
    exchange(&h).ok();
    j.begin_replay(1);
    exchange(&h).ok();
    j.idle(1);
    assert_eq!(
        std::fs::read(h.dir.join("a")).unwrap(),
        b"B",
        "exchanged once"
    );

    // Inserting a range twice is not inserting it once.
    let (f, fh) = h.create_ok(ROOT, "shift");
    std::fs::write(h.dir.join("shift"), vec![7u8; 8192]).unwrap();
    let ins = abi::FallocateIn {
        fh,
        offset: 4096,
        length: 4096,
        mode: libc::FALLOC_FL_INSERT_RANGE as u32,
        padding: 0,
    };
    j.begin_request(1, 2, 1, opcode::FALLOCATE, 6);
    h.req(opcode::FALLOCATE, f.nodeid, &ins.to_bytes()).ok();
    j.begin_replay(1);
    h.req(opcode::FALLOCATE, f.nodeid, &ins.to_bytes()).ok();
    j.idle(1);
    assert_eq!(std::fs::metadata(h.dir.join("shift")).unwrap().len(), 12288);

    let s = abi::SetxattrIn {
        size: 1,
        flags: libc::XATTR_CREATE as u32,
        setxattr_flags: 0,
        padding: 0,
    };
    let set = |h: &Harness| {
        h.req(
            opcode::SETXATTR,
            a.nodeid,
            &cat(&[&s.to_bytes(), &cname("user.r"), b"v"]),
        )
    };
    set(&h).ok();
    assert_eq!(set(&h).err(), libc::EEXIST, "not replaying");
    j.begin_replay(1);
    set(&h).ok();
    j.idle(1);
    let remove = |h: &Harness| h.req(opcode::REMOVEXATTR, a.nodeid, &cname("user.r"));
    remove(&h).ok();
    assert_eq!(remove(&h).err(), libc::ENODATA, "not replaying");
    j.begin_replay(1);
    remove(&h).ok();
    j.idle(1);
}

#[test]
fn a_state_migrated_in_is_journaled_and_survives_a_crash() {
    use xvfs_fs::passthrough::SaveOptions;
    let src = Harness::new();
    std::fs::create_dir(src.dir.join("d")).unwrap();
    std::fs::write(src.dir.join("d/f"), b"migrated").unwrap();
    let d = src.lookup_ok(ROOT, "d").nodeid;
    let f = src.lookup_ok(d, "f").nodeid;
    let fh = src.open(f, libc::O_RDONLY).parse::<abi::OpenOut>().fh;
    let st = src.fs().migration_state(SaveOptions {
        file_handles: false,
        verify_handles: false,
    });

    // The destination journals (it runs with --crash-restart).
    let jf = journal_file(&src.dir);
    let j = leak(Journal::create(jf.as_fd(), 2, 64, 64).unwrap());
    let mut dst = PassthroughFs::new(config_for(&src.dir.path)).unwrap();
    dst.attach_journal(j);
    dst.load_migration(&st, true).unwrap();
    let t = j.tables();
    assert_eq!((t.fs.inodes.len(), t.fs.handles.len()), (2, 1), "journaled");

    // And a crash right after the migration finds them again.
    let j2 = leak(Journal::open(jf.as_fd()).unwrap());
    let mut again = PassthroughFs::new(config_for(&src.dir.path)).unwrap();
    let report = again.recover(j2, KeptFiles::default()).unwrap();
    assert_eq!((report.inodes, report.handles), (2, 1));
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let _ = fh;
}

#[test]
fn a_journal_with_more_entries_than_max_open_is_refused() {
    let dir = TestDir::new("crash-cap");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 1, 64, 64).unwrap());
    let h = serving(dir, j, false);
    let d = h.mkdir(ROOT, "d", 0o755).parse::<abi::EntryOut>().nodeid;
    h.create_ok(d, "f");
    h.create_ok(d, "g");
    // Three nodes and two open files journaled; the crash.
    let (fs_state, dir) = (j.tables().fs, h.dir);
    assert_eq!((fs_state.inodes.len(), fs_state.handles.len()), (3, 2));
    let j2 = leak(Journal::open(jf.as_fd()).unwrap());
    let mut cfg = config_for(&dir.path);
    cfg.max_open = 4;
    let mut fs = PassthroughFs::new(cfg).unwrap();
    let err = fs
        .recover(j2, KeptFiles::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3 nodes and 2 open files are more than the 4 this process may hold"),
        "{err}"
    );
    assert_eq!(fs.lookup_count(d), None, "nothing was loaded");
    // At the cap, it is rebuilt.
    let mut cfg = config_for(&dir.path);
    cfg.max_open = 5;
    let mut fs = PassthroughFs::new(cfg).unwrap();
    assert_eq!(fs.recover(j2, KeptFiles::default()).unwrap().inodes, 3);
}

/// A restarted process reports its rebuild's progress (to its holder):
/// once per journal entry, node or open file, as the recovery comes to it.
#[test]
fn the_recovery_reports_each_node_and_open_file() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = TestDir::new("progress");
    let jf = journal_file(&dir);
    let j = leak(Journal::create(jf.as_fd(), 2, 256, 256).unwrap());
    let h = serving(dir, j, false);
    let d = h.mkdir(ROOT, "d", 0o755).parse::<abi::EntryOut>().nodeid;
    h.create_ok(d, "f");
    h.create_ok(d, "g");
    let t = j.tables();
    let entries = (t.fs.inodes.len() + t.fs.handles.len()) as u64;
    assert_eq!(entries, 5, "d, f, g and two open files");
    let dir = h.dir;

    let steps = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&steps);
    let mut fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let j2 = leak(Journal::open(jf.as_fd()).unwrap());
    let kept = KeptFiles::default().reporting(move || {
        seen.fetch_add(1, Ordering::Relaxed);
    });
    let report = fs.recover(j2, kept).unwrap();
    assert_eq!((report.inodes, report.handles), (3, 2));
    assert_eq!(steps.load(Ordering::Relaxed), entries);
}
