// SPDX-License-Identifier: Apache-2.0
//! Golden samples: the bytes of every format version this build reads,
//! committed under `tests/golden/`. Each must still decode (to the value
//! below, for the version this build writes), and what this build writes
//! must equal its sample byte for byte. A change to an encoding (a field
//! added, removed, reordered or retyped) without a version step fails here:
//! step the version, keep the old sample (and its decoder) for as long as
//! the compatibility policy says (docs/live-upgrade.md, "Compatibility"),
//! and bless the new one with `XVFS_BLESS=1 cargo test --test golden`.
//! From state format 8 on, a step of one part's version is such a step:
//! the current sample's name then carries each stepped part
//! (`state-v8-settings.serving2.bin`), so the old sample stays and must
//! still decode.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use virtio_fs_ext::config::{
    CacheMode, CrashRestartKeep, FileHandles, LogLevel, MigrationMode, MigrationOnError,
    Negotiation, PollMode, SandboxMode, SeccompAction,
};
use virtio_fs_ext::frame;
use virtio_fs_ext::migration::{self, MigrationStream, Received, MIGRATION_VERSION};
use virtio_fs_ext::settings::Settings;
use virtio_fs_ext::state::v7::ConfigState;
use virtio_fs_ext::state::{
    DaemonState, DaxState, DeviceState, MappingState, RegionState, VringState,
};
use xvfs_fs::state::{
    FileHandle, FsState, HandleState, InodeState, Location, LockState, MigratedHandle,
    MigratedInode, MigrationFs,
};
use xvfs_fs::SessionState;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `written` with the committed sample `name` (writes it with
/// XVFS_BLESS=1).
fn check_sample(name: &str, written: &[u8]) {
    let path = golden(name);
    if std::env::var_os("XVFS_BLESS").is_some() {
        std::fs::write(&path, written).unwrap();
    }
    let sample = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (a new format version needs its sample: XVFS_BLESS=1)",
            path.display()
        )
    });
    assert!(
        sample == written,
        "{name}: this build writes other bytes than the committed sample of the same \
         version: the encoding changed without a version step (see this file's header)"
    );
}

fn session() -> SessionState {
    SessionState {
        minor: 41,
        flags: 0x0123_4567_89ab_cdef,
    }
}

/// Every field of format 7's settings set, to a value other than its
/// default where it has one.
fn config() -> ConfigState {
    ConfigState {
        shared_dir: "/srv/share".into(),
        cache: CacheMode::Always,
        xattr: true,
        readonly: true,
        writeback: true,
        allow_direct_io: true,
        readdirplus: false,
        sandbox: SandboxMode::Chroot,
        seccomp: SeccompAction::Log,
        queues: 4,
        poll_mode: PollMode::Adaptive,
        poll_us: 40,
        poll_cpu_max: 30,
        syslog: true,
        preserve_noatime: true,
        queue_cpus: vec![1, 0],
        metrics_file: Some("/run/m.json".into()),
        log_level: LogLevel::Debug,
        socket_path: Some("/run/vfs.sock".into()),
        migration_mode: MigrationMode::FileHandles,
        migration_on_error: MigrationOnError::GuestError,
        migration_verify_handles: true,
        migration_confirm_paths: true,
        xattrmap: Some(":map::user.virtiofs.:".into()),
        no_device_nodes: true,
        no_setid: true,
        killpriv_v2: true,
        allow_mmap: true,
        announce_submounts: true,
        translate_uid: vec!["map:0:100000:65536".into()],
        translate_gid: vec!["forbid-guest:70000:1".into()],
        posix_acl: Negotiation::Auto,
        security_label: Negotiation::Always,
        posix_lock: true,
        flock: true,
        inode_file_handles: FileHandles::Prefer,
        tag: Some("fs0".into()),
    }
}

/// Every setting set, to a value other than its default where it has one.
fn settings() -> Settings {
    let mut s = Settings::from(config());
    s.operations.crash_restart_keep = CrashRestartKeep::All;
    s
}

fn state() -> DaemonState {
    DaemonState {
        writer_version: "0.2.0".into(),
        writer_pid: 4242,
        started_unix_ms: 1_764_000_000_000,
        upgrades: 3,
        settings: settings(),
        vhost_socket_fd: 0,
        control_socket_fd: Some(1),
        control_path: Some("/run/ctl.sock".into()),
        log_fd: Some(2),
        pid_file_fds: vec![3],
        device: DeviceState {
            acked_features: 1 << 32 | 1 << 30,
            acked_protocol: 0x3f,
            owner: true,
            max_queues: 5,
            regions: vec![RegionState {
                gpa: 0,
                size: 1 << 30,
                user_addr: 0x7f00_0000_0000,
                mmap_offset: 0,
                fd: 4,
            }],
            vrings: vec![VringState {
                size: 128,
                desc_va: 0x1000,
                avail_va: 0x2000,
                used_va: 0x3000,
                addr_set: true,
                next_avail: 7,
                next_used: 6,
                enabled: true,
                started: true,
                kick_fd: Some(5),
                call_fd: Some(6),
                err_fd: None,
            }],
        },
        fs: FsState {
            root_dev: 2049,
            root_ino: 2,
            next_id: 9,
            inodes: vec![InodeState {
                id: 5,
                dev: 2049,
                ino: 77,
                refs: 2,
                generation: 0,
                file_type: libc::S_IFREG,
                fd_index: 0,
            }],
            handles: vec![HandleState {
                fh: 3,
                inode: 5,
                flags: libc::O_RDWR,
                fd_index: 1,
            }],
            locks: vec![LockState {
                inode: 5,
                owner: 99,
                flock: true,
                fd_index: 2,
            }],
        },
        session: Some(session()),
        fs_fd_base: 7,
        dax: None,
    }
}

/// [`state`] of a daemon serving a DAX window (format 8's "dax" part).
fn state_with_dax() -> DaemonState {
    DaemonState {
        dax: Some(DaxState {
            window: 1 << 30,
            channel_fd: Some(4),
            mappings: vec![MappingState {
                window_offset: 6 << 20,
                node: 6,
                file_offset: 2 << 20,
                len: 2 << 20,
                writable: true,
            }],
            late_replies: Some(2),
            complete: false,
            abandoned: true,
            devices: vec![2049, 2050],
        }),
        ..state()
    }
}

/// What the sample of the "dax" part's version 1 decodes into: the fields
/// it lacks at their safest.
fn state_with_dax_v1() -> DaemonState {
    let mut st = state_with_dax();
    if let Some(d) = &mut st.dax {
        d.late_replies = None;
        d.complete = false;
        d.abandoned = false;
        d.devices = Vec::new();
    }
    st
}

fn migration_stream() -> MigrationStream {
    MigrationStream {
        writer_version: "0.2.0".into(),
        session: Some(session()),
        fs: MigrationFs {
            next_id: 12,
            next_fh: 4,
            inodes: vec![
                MigratedInode {
                    id: 5,
                    refs: 2,
                    generation: 0,
                    file_type: Some(libc::S_IFDIR),
                    location: Location::Path {
                        parent: 1,
                        name: b"d".to_vec(),
                    },
                    verify: Some(FileHandle {
                        handle_type: 1,
                        bytes: vec![1, 2, 3, 4, 5, 6, 7, 8],
                    }),
                },
                MigratedInode {
                    id: 6,
                    refs: 1,
                    generation: 0,
                    file_type: Some(libc::S_IFREG),
                    location: Location::FullPath {
                        path: b"d/f".to_vec(),
                    },
                    verify: None,
                },
                MigratedInode {
                    id: 7,
                    refs: 1,
                    generation: 0,
                    file_type: None,
                    location: Location::Handle(FileHandle {
                        handle_type: 0x81,
                        bytes: vec![9; 12],
                    }),
                    verify: None,
                },
                MigratedInode {
                    id: 8,
                    refs: 1,
                    generation: 0,
                    file_type: Some(libc::S_IFREG),
                    location: Location::Invalid {
                        why: "deleted while the guest holds it".into(),
                    },
                    verify: None,
                },
            ],
            handles: vec![MigratedHandle {
                fh: 3,
                inode: 6,
                flags: libc::O_RDONLY,
            }],
        },
    }
}

/// Each part whose version was stepped, as sample names carry them.
fn part_steps() -> String {
    virtio_fs_ext::state::v8::PARTS
        .iter()
        .filter(|p| p.version > 1)
        .map(|p| format!("-{}{}", p.name, p.version))
        .collect()
}

/// The name of the sample of what this build writes: the format, and each
/// part whose version was stepped.
fn current_state_sample() -> String {
    format!("state-v{}{}.bin", frame::FORMAT_VERSION, part_steps())
}

#[test]
fn state_samples_decode_and_the_current_one_is_what_this_build_writes() {
    let current = current_state_sample();
    check_sample(&current, &state().encode().unwrap());
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(golden("")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.starts_with("state-v") {
            continue;
        }
        let blob = std::fs::read(golden(&name)).unwrap();
        let st = DaemonState::decode(&blob).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == current {
            assert_eq!(st, state());
        }
        seen.push(name);
    }
    for v in frame::MIN_FORMAT_VERSION..=frame::FORMAT_VERSION {
        let prefix = format!("state-v{v}");
        assert!(
            seen.iter().any(|n| n.starts_with(&prefix)),
            "no sample of state format {v}"
        );
    }
}

/// A window's part has its own sample: written only by a daemon with a
/// DAX window, it must not change without a step of its version either.
/// The sample of its version 1 still decodes.
#[test]
fn the_dax_part_is_what_this_build_writes() {
    let name = format!(
        "state-v{}-with-dax-window{}.bin",
        frame::FORMAT_VERSION,
        part_steps()
    );
    check_sample(&name, &state_with_dax().encode().unwrap());
    let sample = std::fs::read(golden(&name)).unwrap();
    assert_eq!(DaemonState::decode(&sample).unwrap(), state_with_dax());
    let v1 = std::fs::read(golden("state-v8-with-dax-window.bin")).unwrap();
    assert_eq!(DaemonState::decode(&v1).unwrap(), state_with_dax_v1());
}

/// Format 7 (release 0.2.0): its sample decodes into this build's state,
/// and what this build writes for a 0.2.0 successor is that sample, byte
/// for byte (the settings it cannot carry left at 0.2.0's behaviour).
#[test]
fn the_format_of_release_0_2_0_is_read_and_written_as_it_was() {
    let mut want = state();
    want.settings.operations.crash_restart_keep = CrashRestartKeep::Nameless;
    let sample = std::fs::read(golden("state-v7.bin")).unwrap();
    assert_eq!(DaemonState::decode(&sample).unwrap(), want);
    check_sample("state-v7.bin", &want.encode_as(7).unwrap());
    assert!(state().encode_as(7).is_err(), "--crash-restart-keep all");
}

/// Every migration version this build reads has a sample that decodes,
/// and what it writes in each is that sample, byte for byte (version 3 is
/// read before it is written: docs/live-upgrade.md, "Compatibility").
#[test]
fn migration_samples_decode_and_are_what_this_build_writes() {
    for v in migration::MIGRATION_READS {
        let name = format!("migration-v{v}.bin");
        check_sample(&name, &migration_stream().encode_as(v).unwrap());
        let sample = std::fs::read(golden(&name)).unwrap();
        assert_eq!(
            migration::decode(&sample).unwrap(),
            Received::Ours(migration_stream()),
            "{name}"
        );
    }
    assert_eq!(
        migration_stream().encode().unwrap(),
        migration_stream().encode_as(MIGRATION_VERSION).unwrap()
    );
}

#[test]
fn a_newer_state_is_refused_naming_both_versions() {
    let mut blob = state().encode().unwrap();
    let newer = frame::FORMAT_VERSION + 1;
    blob[8..12].copy_from_slice(&newer.to_le_bytes());
    let e = DaemonState::decode(&blob).unwrap_err();
    let text = format!(
        "{e}: {}",
        std::error::Error::source(&e)
            .map(|s| s.to_string())
            .unwrap_or_default()
    );
    assert!(text.contains(&newer.to_string()), "{text}");
    assert!(text.contains(&frame::FORMAT_VERSION.to_string()), "{text}");
}

/// The crash-restart journal is shared memory between a holder and its
/// serving processes (one build; a live upgrade starts a new journal): its
/// layout is pinned all the same, from a small journal with one node and
/// one handle, so that a change to it is a deliberate one.
#[test]
fn the_journal_layout_is_what_this_build_writes() {
    use std::os::fd::{AsFd, OwnedFd};
    use xvfs_fs::journal::{Journal, NodeOrigin, JOURNAL_VERSION};
    let f: OwnedFd = tempfile().into();
    let j = Journal::create(f.as_fd(), 1, 4, 4).unwrap();
    let slot = j.add_node(
        0,
        5,
        (2049, 77),
        libc::S_IFREG,
        &NodeOrigin {
            handle: Some((1, &[1, 2, 3, 4, 5, 6, 7, 8])),
            parent: Some((1, b"f")),
        },
    );
    j.set_refs(slot, 2);
    j.add_handle(0, 3, 5, libc::O_RDWR);
    j.set_session(Some(session()));
    j.set_holder_pid(0);
    drop(j);
    let bytes = std::fs::read(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&f)
    ))
    .unwrap();
    check_sample(&format!("journal-v{JOURNAL_VERSION}.bin"), &bytes);
}

fn tempfile() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("xvfs-golden-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

/// What upstream virtiofsd itself wrote for a migration
/// (`tests/vm/capture_virtiofsd_sample.sh` keeps it as
/// `virtiofsd-<version>.bin`): it reads as the guest's nodes, found by
/// path, and its open files; and what this build writes for a virtiofsd
/// destination from that reads back as the same nodes and files.
#[test]
fn virtiofsds_own_samples_read_and_round_trip() {
    use xvfs_fs::state::Location;
    let mut seen = 0;
    for entry in std::fs::read_dir(golden("")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.starts_with("virtiofsd-") {
            continue;
        }
        let blob = std::fs::read(golden(&name)).unwrap();
        let Received::Virtiofsd { fs, version, .. } = migration::decode(&blob).unwrap() else {
            panic!("{name}: not read as virtiofsd's");
        };
        assert!((1..=2).contains(&version), "{name}");
        let named = |want: &[u8]| {
            fs.inodes
                .iter()
                .any(|i| matches!(&i.location, Location::Path { name, .. } if name == want))
        };
        assert!(
            named(b"keep") && named(b"d") && named(b"nested"),
            "{name}: {fs:?}"
        );
        assert!(fs.handles.len() >= 2, "{name}: the guest's open files");
        let stream = MigrationStream {
            writer_version: "golden".into(),
            session: None,
            fs: fs.clone(),
        };
        let ours = migration::virtiofsd::encode(&stream).unwrap();
        let Received::Virtiofsd { fs: back, .. } = migration::decode(&ours).unwrap() else {
            panic!("{name}: ours not read back");
        };
        assert_eq!(back, fs, "{name}");
        seen += 1;
    }
    assert!(seen > 0, "no virtiofsd sample");
}
