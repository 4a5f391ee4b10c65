//! What a live-upgrade successor believes of the state it receives.
//!
//! The peer on the control socket is checked first (`sys::peer_trusted`), but
//! even a trusted peer may be a compromised predecessor: a sandboxed daemon
//! must not be able to start an unsandboxed successor serving `/`. So every
//! security-relevant setting comes from the successor's own command line and
//! must equal the predecessor's; a difference refuses the handover (the
//! predecessor keeps serving). The other settings (cache, queues, polling,
//! log level) only shape how the same share is served and come from the
//! state.

use virtio_fs_ext::state::ConfigState;

/// The settings of the successor: `received`, with every security-relevant
/// field checked against `own` (from the command line). `own_control` is the
/// successor's `--control`, if given, checked against `received_control`.
/// The error lists every difference.
pub fn check_settings(
    own: &ConfigState,
    received: &ConfigState,
    own_control: Option<&str>,
    received_control: Option<&str>,
) -> Result<ConfigState, String> {
    let mut diffs = Vec::new();
    let mut cmp = |name: &str, mine: String, theirs: String| {
        if mine != theirs {
            diffs.push(format!("{name} is {theirs}, not {mine}"));
        }
    };
    cmp(
        "the shared directory",
        own.shared_dir.clone(),
        received.shared_dir.clone(),
    );
    cmp(
        "the sandbox",
        format!("{:?}", own.sandbox),
        format!("{:?}", received.sandbox),
    );
    cmp(
        "seccomp",
        format!("{:?}", own.seccomp),
        format!("{:?}", received.seccomp),
    );
    cmp(
        "readonly",
        own.readonly.to_string(),
        received.readonly.to_string(),
    );
    cmp("xattr", own.xattr.to_string(), received.xattr.to_string());
    cmp(
        "the xattr map",
        format!("{:?}", own.xattrmap),
        format!("{:?}", received.xattrmap),
    );
    cmp(
        "--no-device-nodes",
        own.no_device_nodes.to_string(),
        received.no_device_nodes.to_string(),
    );
    cmp(
        "--no-setid",
        own.no_setid.to_string(),
        received.no_setid.to_string(),
    );
    cmp(
        "--inode-file-handles",
        format!("{:?}", own.inode_file_handles),
        format!("{:?}", received.inode_file_handles),
    );
    cmp(
        "--killpriv-v2",
        own.killpriv_v2.to_string(),
        received.killpriv_v2.to_string(),
    );
    cmp(
        "--translate-uid",
        format!("{:?}", own.translate_uid),
        format!("{:?}", received.translate_uid),
    );
    cmp(
        "--translate-gid",
        format!("{:?}", own.translate_gid),
        format!("{:?}", received.translate_gid),
    );
    cmp(
        "the metrics file",
        format!("{:?}", own.metrics_file),
        format!("{:?}", received.metrics_file),
    );
    cmp(
        "the socket path",
        format!("{:?}", own.socket_path),
        format!("{:?}", received.socket_path),
    );
    if let Some(c) = own_control {
        cmp(
            "the control socket",
            format!("{c:?}"),
            format!("{:?}", received_control.unwrap_or("")),
        );
    }
    if !diffs.is_empty() {
        return Err(diffs.join("; "));
    }
    Ok(ConfigState {
        shared_dir: own.shared_dir.clone(),
        sandbox: own.sandbox,
        seccomp: own.seccomp,
        readonly: own.readonly,
        xattr: own.xattr,
        xattrmap: own.xattrmap.clone(),
        no_device_nodes: own.no_device_nodes,
        no_setid: own.no_setid,
        killpriv_v2: own.killpriv_v2,
        translate_uid: own.translate_uid.clone(),
        translate_gid: own.translate_gid.clone(),
        metrics_file: own.metrics_file.clone(),
        socket_path: own.socket_path.clone(),
        ..received.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_fs_ext::config::{CacheMode, LogLevel, PollMode, SandboxMode, SeccompAction};

    fn cfg() -> ConfigState {
        ConfigState {
            shared_dir: "/srv/share".into(),
            cache: CacheMode::Auto,
            xattr: false,
            readonly: false,
            writeback: false,
            allow_direct_io: false,
            readdirplus: true,
            sandbox: SandboxMode::Namespace,
            seccomp: SeccompAction::Kill,
            queues: 1,
            poll_mode: PollMode::Never,
            poll_us: 0,
            poll_cpu_max: 100,
            syslog: false,
            preserve_noatime: false,
            queue_cpus: Vec::new(),
            metrics_file: None,
            log_level: LogLevel::Info,
            socket_path: Some("/run/vfs.sock".into()),
            migration_mode: Default::default(),
            migration_on_error: Default::default(),
            migration_verify_handles: false,
            migration_confirm_paths: false,
            xattrmap: None,
            no_device_nodes: false,
            no_setid: false,
            killpriv_v2: false,
            allow_mmap: false,
            announce_submounts: false,
            translate_uid: Vec::new(),
            translate_gid: Vec::new(),
            posix_acl: virtio_fs_ext::config::Negotiation::Never,
            security_label: virtio_fs_ext::config::Negotiation::Never,
            posix_lock: false,
            flock: false,
            inode_file_handles: Default::default(),
            tag: None,
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
}
