// SPDX-License-Identifier: Apache-2.0
//! What a live-upgrade successor believes of the state it receives.
//!
//! The peer on the control socket is checked first (`sys::peer_trusted`), but
//! even a trusted peer may be a compromised predecessor: a sandboxed daemon
//! must not be able to start an unsandboxed successor serving `/`. So the
//! successor's settings come from its own command line, and every field of
//! [`ConfigState`] must equal the predecessor's, except the few listed in
//! [`SERVING`], which only shape how the same share is served (cache mode,
//! queues, polling, log level) and come from the state. A difference refuses
//! the handover (the predecessor keeps serving).
//!
//! The rule is the other way round from a list of security fields on
//! purpose: a field added to [`ConfigState`] later is compared until
//! someone decides, by adding it to [`SERVING`], that the predecessor may
//! choose it.
//!
//! The capabilities (`--modcaps`) are not part of the state: the successor
//! always takes them from its own command line, and `xvirtiofsd upgrade`
//! compares that command line with the first start's (see
//! [`check_options`] and [`crate::record`]).

use serde_json::{Map, Value};
use virtio_fs_ext::state::ConfigState;

use crate::cli::Opt;

/// The fields of [`ConfigState`] (by their serialized names) a successor
/// takes from its predecessor's state, whatever its own command line says:
/// they change how fast or how verbosely the same files are served, never
/// which files, as whom, with which rights, or where the daemon writes.
///
/// Every other field must be equal. Adding a name here is the only way to
/// let a field differ; when in doubt a field is security-relevant and stays
/// out (`writeback` changes open flags, `syslog` where the audit trail
/// goes, the `migration_*` checks what a destination trusts, `tag` the
/// device's identity).
pub const SERVING: &[&str] = &[
    "cache",
    "allow_direct_io",
    "readdirplus",
    "queues",
    "poll_mode",
    "poll_us",
    "poll_cpu_max",
    "queue_cpus",
    "log_level",
];

/// The settings of the successor: `own` (from its command line) with the
/// [`SERVING`] fields of `received`, provided every other field of
/// `received` equals `own`'s. `own_control` is the successor's
/// `--control`, if given, checked against `received_control`. The error
/// names every difference.
pub fn check_settings(
    own: &ConfigState,
    received: &ConfigState,
    own_control: Option<&str>,
    received_control: Option<&str>,
) -> Result<ConfigState, String> {
    let (merged, diffs) =
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
        Ok(merged)
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

/// `own` with the [`SERVING`] fields of `received`, and every field on
/// which the two then still differ. The decision is the derived equality
/// of the whole structure; the names come from its serialized fields.
fn differences(
    own: &ConfigState,
    received: &ConfigState,
) -> Result<(ConfigState, Vec<Difference>), serde_json::Error> {
    let mut mine = fields(own)?;
    let theirs = fields(received)?;
    for &key in SERVING {
        if let Some(v) = theirs.get(key) {
            mine.insert(key.to_string(), v.clone());
        }
    }
    let merged: ConfigState = serde_json::from_value(Value::Object(mine.clone()))?;
    if merged == *received {
        return Ok((merged, Vec::new()));
    }
    let mut diffs: Vec<Difference> = mine
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
    Ok((merged, diffs))
}

/// The fields of `c` by name.
fn fields(c: &ConfigState) -> Result<Map<String, Value>, serde_json::Error> {
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
/// with (`first`, from [`crate::record`]). The same rule as
/// [`check_settings`], plus the capabilities, which the state does not
/// carry. The error names every difference.
pub fn check_options(first: &Opt, successor: &Opt) -> Result<(), String> {
    let state = |o: &Opt| {
        let dir = o.shared_dir.clone().unwrap_or_default();
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        crate::settings::config_state(o, &dir)
    };
    let (_, diffs) = differences(&state(successor), &state(first))
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
    let caps = |o: &Opt| crate::confine::caps_mask(o).map_err(|e| crate::error_chain(&e));
    let (mine, theirs) = (caps(successor)?, caps(first)?);
    if mine != theirs {
        diffs.push(format!(
            "the capabilities (--modcaps) were {:?} at the first start, not {:?}",
            crate::caps::names(theirs),
            crate::caps::names(mine)
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
        CacheMode, FileHandles, LogLevel, MigrationMode, MigrationOnError, Negotiation, PollMode,
        SandboxMode, SeccompAction,
    };

    fn cfg() -> ConfigState {
        ConfigState {
            shared_dir: "/srv/share".into(),
            queues: 1,
            poll_mode: PollMode::Never,
            socket_path: Some("/run/vfs.sock".into()),
            ..Default::default()
        }
    }

    /// [`cfg`] with every field changed.
    fn other() -> ConfigState {
        ConfigState {
            shared_dir: "/".into(),
            cache: CacheMode::Always,
            xattr: true,
            readonly: true,
            writeback: true,
            allow_direct_io: true,
            readdirplus: false,
            sandbox: SandboxMode::None,
            seccomp: SeccompAction::None,
            queues: 8,
            poll_mode: PollMode::Adaptive,
            poll_us: 9,
            poll_cpu_max: 5,
            syslog: true,
            preserve_noatime: true,
            queue_cpus: vec![1],
            metrics_file: Some("/etc/x".into()),
            log_level: LogLevel::Debug,
            socket_path: None,
            migration_mode: MigrationMode::FileHandles,
            migration_on_error: MigrationOnError::GuestError,
            migration_verify_handles: true,
            migration_confirm_paths: true,
            xattrmap: Some(":ok:all:::".into()),
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
            tag: Some("t".into()),
        }
    }

    #[test]
    fn equal_settings_pass_and_others_come_from_the_state() {
        let mut received = cfg();
        received.cache = CacheMode::Never;
        received.queues = 4;
        let got = check_settings(&cfg(), &received, None, Some("/x")).unwrap();
        assert_eq!(got, received);
    }

    #[test]
    fn every_security_setting_must_match() {
        type Spoil = fn(&mut ConfigState);
        let cases: Vec<(&str, Spoil)> = vec![
            ("shared directory", |c| c.shared_dir = "/".into()),
            ("sandbox", |c| c.sandbox = SandboxMode::None),
            ("seccomp", |c| c.seccomp = SeccompAction::None),
            ("readonly", |c| c.readonly = true),
            ("xattr", |c| c.xattr = true),
            ("metrics file", |c| c.metrics_file = Some("/etc/x".into())),
            ("socket path", |c| c.socket_path = None),
            ("--no-setid", |c| c.no_setid = true),
            ("--killpriv-v2", |c| c.killpriv_v2 = true),
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
        type Spoil = fn(&mut ConfigState);
        let cases: Vec<(&str, Spoil)> = vec![
            (r#"--security-label is "Always", not "Never""#, |c| {
                c.security_label = Negotiation::Always
            }),
            (r#"--posix-acl is "Auto""#, |c| {
                c.posix_acl = Negotiation::Auto
            }),
            ("-o posix_lock is true, not false", |c| c.posix_lock = true),
            ("-o flock is true", |c| c.flock = true),
            ("--allow-mmap is true", |c| c.allow_mmap = true),
            ("--announce-submounts is true", |c| {
                c.announce_submounts = true
            }),
            ("--preserve-noatime is true", |c| c.preserve_noatime = true),
            ("--writeback is true", |c| c.writeback = true),
            ("--syslog is true, not false", |c| c.syslog = true),
            ("--no-device-nodes", |c| c.no_device_nodes = true),
            ("xattr map", |c| c.xattrmap = Some(":ok:all:::".into())),
            ("--translate-uid", |c| c.translate_uid = vec!["x".into()]),
            ("--translate-gid", |c| c.translate_gid = vec!["x".into()]),
            ("--inode-file-handles", |c| {
                c.inode_file_handles = FileHandles::Mandatory
            }),
            ("--migration-mode", |c| {
                c.migration_mode = MigrationMode::FileHandles
            }),
            ("--migration-on-error", |c| {
                c.migration_on_error = MigrationOnError::GuestError
            }),
            ("--migration-verify-handles", |c| {
                c.migration_verify_handles = true
            }),
            ("--migration-confirm-paths", |c| {
                c.migration_confirm_paths = true
            }),
            (r#"--tag is "t", not null"#, |c| c.tag = Some("t".into())),
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
        received.sandbox = SandboxMode::None;
        received.seccomp = SeccompAction::None;
        received.security_label = Negotiation::Always;
        received.queues = 4;
        let e = check_settings(&cfg(), &received, None, None).unwrap_err();
        assert_eq!(e.split("; ").count(), 3, "{e}");
        for name in ["--sandbox", "--seccomp", "--security-label"] {
            assert!(e.contains(name), "{name}: {e}");
        }
    }

    /// A field may differ only if it is in [`SERVING`]: with every field
    /// changed, exactly the others are refused, and exactly the serving
    /// ones are taken from the state.
    #[test]
    fn only_the_serving_fields_may_differ() {
        let (mine, theirs) = (fields(&cfg()).unwrap(), fields(&other()).unwrap());
        assert!(
            mine.iter().all(|(k, v)| theirs[k] != *v),
            "other() changes all"
        );
        for key in SERVING {
            assert!(mine.contains_key(*key), "{key} is not a field");
        }
        let (merged, diffs) = differences(&cfg(), &other()).unwrap();
        assert_eq!(diffs.len(), mine.len() - SERVING.len(), "{diffs:?}");
        let merged = fields(&merged).unwrap();
        for (k, v) in &merged {
            assert_eq!(*v == theirs[k], SERVING.contains(&k.as_str()), "{k}");
        }
        let e = check_settings(&cfg(), &other(), None, None).unwrap_err();
        assert_eq!(e.split("; ").count(), mine.len() - SERVING.len(), "{e}");
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
