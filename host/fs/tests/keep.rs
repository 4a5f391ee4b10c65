// SPDX-License-Identifier: Apache-2.0
//! Crash restart keeps files with no name left: a file system hands the
//! descriptors of held files that lose their name to a keeper (the holder),
//! "crashes" (is dropped: every descriptor of its own closes), and a new one
//! serves them on from the keeper's descriptors.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use common::*;
use xvfs_fs::abi::{self, opcode, Wire};
use xvfs_fs::journal::Journal;
use xvfs_fs::passthrough::{Keeper, Kept, KeptFiles};
use xvfs_fs::PassthroughFs;

const ROOT: u64 = abi::ROOT_ID;

/// The holder's part: keeps duplicates.
#[derive(Debug, Default)]
struct TestKeeper {
    files: Mutex<HashMap<Kept, OwnedFd>>,
}

impl Keeper for TestKeeper {
    fn keep(&self, files: &[(Kept, BorrowedFd<'_>)]) {
        let mut m = self.files.lock().unwrap();
        for (k, fd) in files {
            m.insert(*k, fd.try_clone_to_owned().unwrap());
        }
    }

    fn let_go(&self, what: &[Kept]) {
        let mut m = self.files.lock().unwrap();
        for k in what {
            m.remove(k);
        }
    }
}

impl TestKeeper {
    fn handed_back(&self) -> KeptFiles {
        let m = self.files.lock().unwrap();
        KeptFiles::new(
            m.iter()
                .map(|(k, fd)| (*k, fd.try_clone().unwrap()))
                .collect(),
        )
    }

    fn holds(&self, k: Kept) -> bool {
        self.files.lock().unwrap().contains_key(&k)
    }
}

/// A new journal in an unlinked file (the holder's memfd).
fn journal(dir: &TestDir) -> OwnedFd {
    let f = journal_file(dir);
    Journal::create(f.as_fd(), 2, 256, 256).unwrap();
    f
}

/// The crash: the process and every descriptor of its own are gone.
fn crash(h: Harness) -> TestDir {
    let Harness { dir, .. } = h;
    dir
}

/// A serving process keeping into `k`; after a crash (`recover`), rebuilt
/// from the journal in `jf` and what `k` hands back (nothing may be lost
/// but the nodes in `lost`).
fn serving(dir: TestDir, jf: &OwnedFd, k: &Arc<TestKeeper>, recover: Option<&[u64]>) -> Harness {
    serving_with(dir, jf, k, recover, false)
}

/// [`serving`], keeping every node and open file with `all`.
fn serving_with(
    dir: TestDir,
    jf: &OwnedFd,
    k: &Arc<TestKeeper>,
    recover: Option<&[u64]>,
    all: bool,
) -> Harness {
    let j: &'static Journal = Box::leak(Box::new(Journal::open(jf.as_fd()).unwrap()));
    let mut fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    if let Some(lost) = recover {
        let report = fs.recover(j, k.handed_back()).unwrap();
        let want: Vec<String> = lost.iter().map(|n| format!("node {n}: ")).collect();
        assert_eq!(report.failed.len(), lost.len(), "{:?}", report.failed);
        for (f, w) in report.failed.iter().zip(&want) {
            assert!(f.starts_with(w), "{f}");
        }
    } else {
        fs.attach_journal(j);
    }
    fs.attach_keeper(k.clone(), all);
    let h = Harness::from_fs(dir, fs);
    match j.session().filter(|_| recover.is_some()) {
        Some(s) => h.srv.restore_session(s).unwrap(),
        None => {
            h.init(7, 41, 0, 0).ok();
        }
    }
    h
}

fn unlink(h: &Harness, parent: u64, name: &str) {
    h.req(opcode::UNLINK, parent, &cname(name)).ok();
}

#[test]
fn unlinked_renamed_over_and_tmpfiles_survive_a_crash() {
    let dir = TestDir::new("keep");
    let jf = journal(&dir);
    let k = Arc::new(TestKeeper::default());
    let h = serving(dir, &jf, &k, None);
    // (a) unlinked while open.
    let (a, afh) = h.create_ok(ROOT, "a");
    h.write(a.nodeid, afh, 0, b"unlinked").ok();
    unlink(&h, ROOT, "a");
    assert!(k.holds(Kept::Node(a.nodeid)) && k.holds(Kept::Handle(afh)));
    // (c) renamed over while open.
    let (b, bfh) = h.create_ok(ROOT, "b");
    h.write(b.nodeid, bfh, 0, b"renamed over").ok();
    let (c, _) = h.create_ok(ROOT, "c");
    let ri = abi::RenameIn { newdir: ROOT };
    h.req(
        opcode::RENAME,
        ROOT,
        &cat(&[&ri.to_bytes(), &cname("c"), &cname("b")]),
    )
    .ok();
    assert!(k.holds(Kept::Handle(bfh)));
    assert!(
        !k.holds(Kept::Node(c.nodeid)),
        "the moved file keeps a name"
    );
    // (b) O_TMPFILE.
    let ci = abi::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o600,
        umask: 0,
        open_flags: 0,
    };
    let r = h.req(opcode::TMPFILE, ROOT, &cat(&[&ci.to_bytes(), &cname("/")]));
    let e = abi::EntryOut::from_bytes(r.ok()).unwrap();
    let tfh = abi::OpenOut::from_bytes(&r.ok()[abi::EntryOut::SIZE..])
        .unwrap()
        .fh;
    h.write(e.nodeid, tfh, 0, b"tmp").ok();
    // (d) a removed directory still held (a cwd: no open handle).
    let d = h.mkdir(ROOT, "d", 0o755).parse::<abi::EntryOut>().nodeid;
    h.req(opcode::RMDIR, ROOT, &cname("d")).ok();
    assert!(k.holds(Kept::Node(d)));
    // A file only looked up and unlinked is marked, not kept.
    std::fs::write(h.dir.join("l"), b"x").unwrap();
    let l = h.lookup_ok(ROOT, "l").nodeid;
    unlink(&h, ROOT, "l");
    assert!(!k.holds(Kept::Node(l)));

    // The crash. The unlinked file only looked up is gone with it: the
    // guest cannot reach it any more, and gets EIO if it tries.
    let h2 = serving(crash(h), &jf, &k, Some(&[l]));
    assert_eq!(h2.read(a.nodeid, afh, 0, 100).ok(), b"unlinked");
    h2.write(a.nodeid, afh, 8, b" and on").ok();
    assert_eq!(h2.read(a.nodeid, afh, 0, 100).ok(), b"unlinked and on");
    assert_eq!(h2.read(b.nodeid, bfh, 0, 100).ok(), b"renamed over");
    assert_eq!(h2.read(e.nodeid, tfh, 0, 100).ok(), b"tmp");
    assert_eq!(
        h2.getattr(d).parse::<abi::AttrOut>().attr.nlink,
        0,
        "the removed directory is served"
    );
    // The tmpfile linked in after the crash gets a name.
    let li = abi::LinkIn {
        oldnodeid: e.nodeid,
    };
    h2.req(opcode::LINK, ROOT, &cat(&[&li.to_bytes(), &cname("t")]))
        .ok();
    assert_eq!(std::fs::read(h2.dir.join("t")).unwrap(), b"tmp");

    // A second crash finds them again; releasing and forgetting lets go.
    // (The journal forgot `l` at the first restart.)
    let h3 = serving(crash(h2), &jf, &k, Some(&[]));
    assert_eq!(h3.read(a.nodeid, afh, 0, 100).ok(), b"unlinked and on");
    h3.release(a.nodeid, afh).ok();
    assert!(!k.holds(Kept::Handle(afh)));
    h3.forget(a.nodeid, 1);
    assert!(!k.holds(Kept::Node(a.nodeid)));
    h3.forget(d, 1);
    assert!(!k.holds(Kept::Node(d)));
}

#[test]
fn a_kept_descriptor_of_a_foreign_file_is_refused() {
    let dir = TestDir::new("keep-foreign");
    let jf = journal(&dir);
    let k = Arc::new(TestKeeper::default());
    let h = serving(dir, &jf, &k, None);
    let (a, _) = h.create_ok(ROOT, "a");
    h.req(opcode::UNLINK, ROOT, &cname("a")).ok();
    // A compromised process hands the keeper another file as node `a`
    // (outside the share, not deleted).
    let outside = TestDir::new("keep-outside");
    std::fs::write(outside.join("secret"), b"secret").unwrap();
    let f = std::fs::File::open(outside.join("secret")).unwrap();
    let path_fd = OwnedFd::from(f);
    k.keep(&[(Kept::Node(a.nodeid), path_fd.as_fd())]);
    let dir = crash(h);
    let j: &'static Journal = Box::leak(Box::new(Journal::open(jf.as_fd()).unwrap()));
    let mut fs = PassthroughFs::new(config_for(&dir.path)).unwrap();
    let report = fs.recover(j, k.handed_back()).unwrap();
    assert_eq!(report.kept_nodes, Vec::<u64>::new(), "not served");
    let want = format!("node {}: ", a.nodeid);
    assert!(
        report.failed.iter().any(|f| f.starts_with(&want)),
        "{:?}",
        report.failed
    );
}

#[test]
fn with_keep_all_files_another_process_deletes_survive_a_crash() {
    let dir = TestDir::new("keep-all");
    let jf = journal(&dir);
    let k = Arc::new(TestKeeper::default());
    let h = serving_with(dir, &jf, &k, None, true);
    std::fs::write(h.dir.join("looked"), b"looked up").unwrap();
    std::fs::write(h.dir.join("open"), b"open").unwrap();
    let looked = h.lookup_ok(ROOT, "looked").nodeid;
    let open = h.lookup_ok(ROOT, "open").nodeid;
    let fh = h.open(open, libc::O_RDWR).parse::<abi::OpenOut>().fh;
    assert!(k.holds(Kept::Node(looked)) && k.holds(Kept::Handle(fh)));
    // Another host process deletes both: the guest's requests never say so.
    std::fs::remove_file(h.dir.join("looked")).unwrap();
    std::fs::remove_file(h.dir.join("open")).unwrap();
    let h2 = serving_with(crash(h), &jf, &k, Some(&[]), true);
    assert_eq!(h2.getattr(looked).parse::<abi::AttrOut>().attr.nlink, 0);
    h2.write(open, fh, 4, b" and on").ok();
    assert_eq!(h2.read(open, fh, 0, 100).ok(), b"open and on");
    // Forgetting and releasing lets go.
    h2.release(open, fh).ok();
    h2.forget(looked, 1);
    assert!(!k.holds(Kept::Handle(fh)) && !k.holds(Kept::Node(looked)));
}

#[test]
fn without_keep_all_a_file_another_process_deletes_is_lost_not_mistaken() {
    let dir = TestDir::new("keep-nameless");
    let jf = journal(&dir);
    let k = Arc::new(TestKeeper::default());
    let h = serving(dir, &jf, &k, None);
    std::fs::write(h.dir.join("looked"), b"x").unwrap();
    let looked = h.lookup_ok(ROOT, "looked").nodeid;
    std::fs::remove_file(h.dir.join("looked")).unwrap();
    let h2 = serving(crash(h), &jf, &k, Some(&[looked]));
    assert_eq!(h2.getattr(looked).err(), libc::EIO);
}
