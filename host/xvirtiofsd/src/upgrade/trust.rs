// SPDX-License-Identifier: Apache-2.0
//! What a live-upgrade successor believes of the state it receives.
//!
//! The peer on the control socket is checked first (`sys::peer_trusted`), but
//! even a trusted peer may be a compromised predecessor: a sandboxed daemon
//! must not be able to start an unsandboxed successor serving `/`. So the
//! successor's settings come from its own command line: the security and
//! operations parts of [`Settings`] must equal the predecessor's, each
//! compared as a whole (derived equality); only the serving part (cache
//! mode, queues, polling, log level: how fast or how verbosely the same
//! files are served) comes from the state. A difference refuses the
//! handover (the predecessor keeps serving), naming every field.
//!
//! A field added later to a part is compared with the rest of its part;
//! putting it in [`virtio_fs_ext::settings::Serving`] is the only way to
//! let a predecessor choose it.
//!
//! The capabilities (`--modcaps`) are not part of the state: the successor
//! always takes them from its own command line, and `xvirtiofsd upgrade`
//! compares that command line with the first start's (see
//! [`check_options`] and [`crate::upgrade::record`]).

use serde::Serialize;
use serde_json::{Map, Value};
use virtio_fs_ext::settings::Settings;

use crate::cli::Opt;

/// The settings of the successor: `own` (from its command line) with the
/// serving part of `received`, provided the other parts of `received`
/// equal `own`'s. `own_control` is the successor's `--control`, if given,
/// checked against `received_control`. The error names every difference.
pub fn check_settings(
    own: &Settings,
    received: &Settings,
    own_control: Option<&str>,
    received_control: Option<&str>,
) -> Result<Settings, String> {
    let diffs =
        differences(own, received).map_err(|e| format!("the settings cannot be compared: {e}"))?;
    let mut diffs: Vec<String> = diffs
        .iter()
        .map(|d| format!("{} is {}, not {}", d.name, d.theirs, d.mine))
        .collect();
    if let Some(mine) = own_control {
        if received_control != Some(mine) {
            let theirs = received_control.unwrap_or("");
            diffs.push(format!("the control socket is {theirs:?}, not {mine:?}"));
        }
    }
    if diffs.is_empty() {
        Ok(Settings {
            security: own.security.clone(),
            serving: received.serving.clone(),
            operations: own.operations.clone(),
        })
    } else {
        Err(diffs.join("; "))
    }
}

/// One field on which two settings differ.
#[derive(Debug)]
struct Difference {
    /// What an operator calls it (see [`option_name`]).
    name: String,
    /// Its value on the other side (the predecessor, the first start).
    theirs: Value,
    /// Its value on this side (the successor).
    mine: Value,
}

/// Every field of the security and operations parts on which `own` and
/// `received` differ. The decision is the derived equality of each part;
/// the names come from its serialized fields.
fn differences(own: &Settings, received: &Settings) -> Result<Vec<Difference>, serde_json::Error> {
    let mut diffs = Vec::new();
    if own.security != received.security {
        diffs.extend(named(&own.security, &received.security)?);
    }
    if own.operations != received.operations {
        diffs.extend(named(&own.operations, &received.operations)?);
    }
    Ok(diffs)
}

/// The fields of one part on which `mine` and `theirs` differ.
fn named<T: Serialize>(mine: &T, theirs: &T) -> Result<Vec<Difference>, serde_json::Error> {
    let theirs = fields(theirs)?;
    let mut diffs: Vec<Difference> = fields(mine)?
        .into_iter()
        .filter_map(|(k, v)| {
            let t = theirs.get(k.as_str()).cloned().unwrap_or(Value::Null);
            (t != v).then(|| Difference {
                name: option_name(&k),
                theirs: t,
                mine: v,
            })
        })
        .collect();
    if diffs.is_empty() {
        // Unreachable while equality is derived field by field.
        diffs.push(Difference {
            name: "the settings".into(),
            theirs: Value::Null,
            mine: Value::Null,
        });
    }
    Ok(diffs)
}

/// The fields of `c` by name.
fn fields<T: Serialize>(c: &T) -> Result<Map<String, Value>, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(c)?)
}

/// What an operator calls the setting stored as `key`.
fn option_name(key: &str) -> String {
    match key {
        "shared_dir" => "the shared directory (--shared-dir)".into(),
        "sandbox" => "the sandbox (--sandbox)".into(),
        "metrics_file" => "the metrics file (--metrics-file)".into(),
        "socket_path" => "the socket path (--socket-path)".into(),
        "xattrmap" => "the xattr map (--xattrmap)".into(),
        "posix_lock" => "-o posix_lock".into(),
        "flock" => "-o flock".into(),
        "readdirplus" => "--no-readdirplus (inverted)".into(),
        "poll_mode" => "--poll".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// `xvirtiofsd upgrade`'s check, before any successor is started: the
/// successor's command line against the one the daemon was first started
/// with (`first`, from [`crate::upgrade::record`]). The same rule as
/// [`check_settings`], plus the capabilities, which the state does not
/// carry. The error names every difference.
pub fn check_options(first: &Opt, successor: &Opt) -> Result<(), String> {
    let state = |o: &Opt| {
        let dir = o.shared_dir.clone().unwrap_or_default();
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        crate::settings::from_options(o, &dir)
    };
    let diffs = differences(&state(successor), &state(first))
        .map_err(|e| format!("the settings cannot be compared: {e}"))?;
    let mut diffs: Vec<String> = diffs
        .iter()
        .map(|d| {
            format!(
                "{} was {} at the first start, not {}",
                d.name, d.theirs, d.mine
            )
        })
        .collect();
    let caps = |o: &Opt| crate::setup::caps_mask(o).map_err(|e| crate::error_chain(&e));
    let (mine, theirs) = (caps(successor)?, caps(first)?);
    if mine != theirs {
        diffs.push(format!(
            "the capabilities (--modcaps) were {:?} at the first start, not {:?}",
            crate::confine::caps::names(theirs),
            crate::confine::caps::names(mine)
        ));
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use virtio_fs_ext::config::{
        CacheMode, CrashRestartKeep, FileHandles, LogLevel, MigrationMode, MigrationOnError,
        Negotiation, PollMode, SandboxMode, SeccompAction,
    };
    use virtio_fs_ext::settings::{Operations, Security, Serving};

    fn cfg() -> Settings {
        Settings {
            security: Security {
                shared_dir: "/srv/share".into(),
                ..Default::default()
            },
            serving: Serving {
                queues: 1,
                poll_mode: PollMode::Never,
                ..Default::default()
            },
            operations: Operations {
                socket_path: Some("/run/vfs.sock".into()),
                ..Default::default()
            },
        }
    }

    /// [`cfg`] with every field changed.
    fn other() -> Settings {
        Settings {
            security: Security {
                shared_dir: "/".into(),
                sandbox: SandboxMode::None,
                seccomp: SeccompAction::None,
                readonly: true,
                xattr: true,
                xattrmap: Some(":ok:all:::".into()),
                writeback: true,
                preserve_noatime: true,
                no_device_nodes: true,
                no_setid: true,
                killpriv_v2: true,
                allow_mmap: true,
                announce_submounts: true,
                translate_uid: vec!["squash-host:0:1000:1".into()],
                translate_gid: vec!["squash-host:0:1000:1".into()],
                posix_acl: Negotiation::Always,
                security_label: Negotiation::Always,
                posix_lock: true,
                flock: true,
                inode_file_handles: FileHandles::Mandatory,
                migration_mode: MigrationMode::FileHandles,
                migration_on_error: MigrationOnError::GuestError,
                migration_verify_handles: true,
                migration_confirm_paths: true,
                tag: Some("t".into()),
            },
            serving: Serving {
                cache: CacheMode::Always,
                allow_direct_io: true,
                readdirplus: false,
                queues: 8,
                poll_mode: PollMode::Adaptive,
                poll_us: 9,
                poll_cpu_max: 5,
                queue_cpus: vec![1],
                log_level: LogLevel::Debug,
            },
            operations: Operations {
                socket_path: None,
                metrics_file: Some("/etc/x".into()),
                syslog: true,
                crash_restart_keep: CrashRestartKeep::All,
            },
        }
    }

    #[test]
    fn equal_settings_pass_and_others_come_from_the_state() {
        let mut received = cfg();
        received.serving.cache = CacheMode::Never;
        received.serving.queues = 4;
        let got = check_settings(&cfg(), &received, None, Some("/x")).unwrap();
        assert_eq!(got, received);
    }

    #[test]
    fn every_security_setting_must_match() {
        type Spoil = fn(&mut Settings);
        let cases: Vec<(&str, Spoil)> = vec![
            ("shared directory", |c| c.security.shared_dir = "/".into()),
            ("sandbox", |c| c.security.sandbox = SandboxMode::None),
            ("seccomp", |c| c.security.seccomp = SeccompAction::None),
            ("readonly", |c| c.security.readonly = true),
            ("xattr", |c| c.security.xattr = true),
            ("metrics file", |c| {
                c.operations.metrics_file = Some("/etc/x".into())
            }),
            ("socket path", |c| c.operations.socket_path = None),
            ("--no-setid", |c| c.security.no_setid = true),
            ("--killpriv-v2", |c| c.security.killpriv_v2 = true),
        ];
        for (what, spoil) in cases {
            let mut received = cfg();
            spoil(&mut received);
            let e = check_settings(&cfg(), &received, None, None).unwrap_err();
            assert!(e.contains(what), "{what}: {e}");
        }
        let e = check_settings(&cfg(), &cfg(), Some("/a.sock"), Some("/b.sock")).unwrap_err();
        assert!(e.contains("control socket"), "{e}");
        assert!(check_settings(&cfg(), &cfg(), Some("/a.sock"), Some("/a.sock")).is_ok());
    }

    /// The fields the old hand-written list missed: a predecessor that
    /// widens one alone is refused, named, with both values.
    #[test]
    fn formerly_unchecked_fields_are_refused_when_widened() {
        type Spoil = fn(&mut Settings);
        let cases: Vec<(&str, Spoil)> = vec![
            (r#"--security-label is "Always", not "Never""#, |c| {
                c.security.security_label = Negotiation::Always
            }),
            (r#"--posix-acl is "Auto""#, |c| {
                c.security.posix_acl = Negotiation::Auto
            }),
            ("-o posix_lock is true, not false", |c| {
                c.security.posix_lock = true
            }),
            ("-o flock is true", |c| c.security.flock = true),
            ("--allow-mmap is true", |c| c.security.allow_mmap = true),
            ("--announce-submounts is true", |c| {
                c.security.announce_submounts = true
            }),
            ("--preserve-noatime is true", |c| {
                c.security.preserve_noatime = true
            }),
            ("--writeback is true", |c| c.security.writeback = true),
            ("--syslog is true, not false", |c| {
                c.operations.syslog = true
            }),
            (r#"--crash-restart-keep is "All", not "Nameless""#, |c| {
                c.operations.crash_restart_keep = CrashRestartKeep::All
            }),
            ("--no-device-nodes", |c| c.security.no_device_nodes = true),
            ("xattr map", |c| {
                c.security.xattrmap = Some(":ok:all:::".into())
            }),
            ("--translate-uid", |c| {
                c.security.translate_uid = vec!["x".into()]
            }),
            ("--translate-gid", |c| {
                c.security.translate_gid = vec!["x".into()]
            }),
            ("--inode-file-handles", |c| {
                c.security.inode_file_handles = FileHandles::Mandatory
            }),
            ("--migration-mode", |c| {
                c.security.migration_mode = MigrationMode::FileHandles
            }),
            ("--migration-on-error", |c| {
                c.security.migration_on_error = MigrationOnError::GuestError
            }),
            ("--migration-verify-handles", |c| {
                c.security.migration_verify_handles = true
            }),
            ("--migration-confirm-paths", |c| {
                c.security.migration_confirm_paths = true
            }),
            (r#"--tag is "t", not null"#, |c| {
                c.security.tag = Some("t".into())
            }),
        ];
        for (what, spoil) in cases {
            let mut received = cfg();
            spoil(&mut received);
            let e = check_settings(&cfg(), &received, None, None).unwrap_err();
            assert!(e.contains(what), "{what}: {e}");
            assert!(!e.contains("; "), "only the one field: {e}");
        }
    }

    #[test]
    fn every_difference_is_named() {
        let mut received = cfg();
        received.security.sandbox = SandboxMode::None;
        received.security.seccomp = SeccompAction::None;
        received.security.security_label = Negotiation::Always;
        received.serving.queues = 4;
        let e = check_settings(&cfg(), &received, None, None).unwrap_err();
        assert_eq!(e.split("; ").count(), 3, "{e}");
        for name in ["--sandbox", "--seccomp", "--security-label"] {
            assert!(e.contains(name), "{name}: {e}");
        }
    }

    /// Only the serving part may differ: with every field changed, exactly
    /// the fields of the other parts are refused, and a state that differs
    /// only in its serving part is served with that part.
    #[test]
    fn only_the_serving_part_may_differ() {
        let (mine, theirs) = (cfg(), other());
        let count = |a: Map<String, Value>, b: Map<String, Value>| {
            assert!(a.iter().all(|(k, v)| b[k] != *v), "other() changes all");
            a.len()
        };
        let sec = count(
            fields(&mine.security).unwrap(),
            fields(&theirs.security).unwrap(),
        );
        let ops = count(
            fields(&mine.operations).unwrap(),
            fields(&theirs.operations).unwrap(),
        );
        count(
            fields(&mine.serving).unwrap(),
            fields(&theirs.serving).unwrap(),
        );
        let e = check_settings(&mine, &theirs, None, None).unwrap_err();
        assert_eq!(e.split("; ").count(), sec + ops, "{e}");
        let mut serving_only = cfg();
        serving_only.serving = other().serving;
        assert_eq!(
            check_settings(&mine, &serving_only, None, None),
            Ok(serving_only)
        );
        let e = check_settings(
            &mine,
            &Settings {
                serving: cfg().serving,
                ..other()
            },
            None,
            None,
        );
        assert_eq!(e.unwrap_err().split("; ").count(), sec + ops);
    }

    fn opt(args: &[&str]) -> Opt {
        let mut o = Opt::try_parse_from(args).unwrap();
        o.resolve().unwrap();
        o
    }

    const FIRST: &[&str] = &[
        "xvirtiofsd",
        "--shared-dir=/tmp",
        "--socket-path=/run/vfs.sock",
        "--cache=auto",
    ];

    /// The successor's command line as `upgrade` starts it: [`FIRST`]'s
    /// options, those named in `extra` replaced.
    fn successor(extra: &[&str]) -> Opt {
        let name = |a: &str| a.split('=').next().unwrap_or("").to_string();
        let mut a = vec!["xvirtiofsd", "--handover-from", "/run/c.sock"];
        a.extend(
            FIRST[1..]
                .iter()
                .filter(|f| !extra.iter().any(|e| name(e) == name(f))),
        );
        a.extend_from_slice(extra);
        opt(&a)
    }

    #[test]
    fn upgrade_options_are_checked_with_the_capabilities() {
        let first = opt(FIRST);
        assert_eq!(check_options(&first, &successor(&[])), Ok(()));
        assert_eq!(check_options(&first, &successor(&["--queues=4"])), Ok(()));
        let e = check_options(&first, &successor(&["--modcaps=+sys_admin"])).unwrap_err();
        assert!(e.contains("--modcaps") && e.contains("sys_admin"), "{e}");
        let e = check_options(&first, &successor(&["--sandbox=none", "--seccomp=none"]));
        let e = e.unwrap_err();
        assert!(e.contains("--sandbox") && e.contains("--seccomp"), "{e}");
        let e = check_options(&first, &successor(&["--shared-dir=/"])).unwrap_err();
        assert!(
            e.contains(r#"was "/tmp" at the first start, not "/""#),
            "{e}"
        );
        let e = check_options(&first, &successor(&["-o", "security_label"])).unwrap_err();
        assert!(e.contains("--security-label"), "{e}");
    }
}
