// SPDX-License-Identifier: Apache-2.0
//! Command-line parsing: every form virtiofsd and libvirt use, and what is refused.

use super::*;

fn parse(args: &[&str]) -> Result<Opt, String> {
    let mut o = Opt::try_parse_from(std::iter::once("xvirtiofsd").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    o.resolve().map_err(|e| e.to_string())?;
    Ok(o)
}

#[test]
fn libvirt_separate_options() {
    let o = parse(&[
        "--fd=31",
        "--shared-dir",
        "/srv",
        "--cache=never",
        "--xattr",
        "--thread-pool-size=16",
        "--sandbox=chroot",
    ])
    .unwrap();
    assert_eq!(o.fd, Some(31));
    assert_eq!(o.cache, CacheMode::Never);
    assert!(o.xattr);
    assert_eq!(o.sandbox, SandboxMode::Chroot);
}

#[test]
fn compat_o_options() {
    let o = parse(&[
        "--socket-path",
        "/tmp/s",
        "-o",
        "source=/srv,cache=none,xattr,no_flock,no_posix_lock,no_killpriv_v2",
    ])
    .unwrap();
    assert_eq!(o.shared_dir.as_deref(), Some(std::path::Path::new("/srv")));
    assert_eq!(o.cache, CacheMode::Never);
    assert!(o.xattr);
}

#[test]
fn rejects_unknown_compat_and_missing_parts() {
    assert!(parse(&["--socket-path", "/tmp/s", "-o", "source=/x,bogus"]).is_err());
    assert!(parse(&["--socket-path", "/tmp/s"])
        .unwrap_err()
        .contains("shared directory"));
    assert!(parse(&["--shared-dir", "/srv"])
        .unwrap_err()
        .contains("socket"));
    assert!(parse(&["--fd", "3", "--socket-path", "/x", "--shared-dir", "/srv"]).is_err());
    assert!(parse(&["--shared-dir", "/srv", "--fd", "3", "--queues", "17"]).is_err());
}

#[test]
fn id_maps_as_libvirt_passes_them() {
    let base = ["--fd=3", "--shared-dir", "/srv"];
    let with = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        parse(&args)
    };
    with(&["--uid-map=:0:100000:65536:", "--gid-map=:0:100000:65536:"]).unwrap();
    with(&["--uid-map=:0:1000:1:", "--uid-map=:1:100000:65536:"]).unwrap();
    assert!(with(&["--uid-map=0:100000:65536"])
        .unwrap_err()
        .contains(":INSIDE:OUTSIDE:COUNT:"));
    assert!(with(&["--tag", "a-tag-much-longer-than-thirty-six-bytes"])
        .unwrap_err()
        .contains("1 to 36 bytes"));
    assert!(with(&["--translate-uid=swap:0:1:2"])
        .unwrap_err()
        .contains("TYPE:FROM:TO:COUNT"));
    assert!(
        with(&["--translate-gid=map:0:10:10", "--translate-gid=guest:5:1:1"])
            .unwrap_err()
            .contains("same direction")
    );
    assert!(with(&["--gid-map=:0:1:5:", "--gid-map=:3:100:5:"])
        .unwrap_err()
        .contains("overlap"));
    assert!(with(&["--uid-map=:0:100000:65536:", "--sandbox", "none"])
        .unwrap_err()
        .contains("--sandbox namespace"));
    assert!(with(&["--uid-map=:0:100000:65536:", "--crash-restart"])
        .unwrap_err()
        .contains("--crash-restart"));
    for caps in ["-dac_read_search", "+sys_admin:-CAP_DAC_READ_SEARCH"] {
        let e = with(&["--inode-file-handles=prefer", &format!("--modcaps={caps}")]);
        assert!(e.unwrap_err().contains("CAP_DAC_READ_SEARCH"), "{caps}");
    }
    assert!(
        with(&["--modcaps=-dac_read_search"]).is_ok(),
        "without handles"
    );
    for o in ["posix_lock", "flock"] {
        let e = with(&["-o", o, "--crash-restart"]).unwrap_err();
        assert!(e.contains("a crash closes"), "{o}: {e}");
    }
}

#[test]
fn options_that_cannot_be_honoured_are_refused() {
    let base = ["--fd=3", "--shared-dir", "/srv"];
    for extra in [
        &[
            "--migration-mode=file-handles",
            "--migration-verify-handles",
        ],
        &["--migration-mode=file-handles", "--migration-confirm-paths"],
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let err = parse(&args).unwrap_err();
        assert!(err.contains("is not supported"), "{extra:?}: {err}");
    }
    for extra in [
        &["--inode-file-handles=never"][..],
        &["--inode-file-handles=prefer"],
        &["--inode-file-handles=fallback"],
        &["--inode-file-handles=mandatory"],
        &["--inode-file-handles=prefer", "--modcaps=-mknod"],
        &["--no-announce-submounts"],
        &["--announce-submounts"],
        &["-o", "announce_submounts"],
        &["--allow-mmap"],
        &[
            "--translate-uid=map:0:100000:65536",
            "--translate-uid=forbid-guest:70000:5",
        ],
        &[
            "--translate-gid=squash-guest:0:100:65536",
            "--translate-gid=host/7/8/9",
        ],
        &["--no-killpriv-v2"],
        &["--killpriv-v2"],
        &["-o", "killpriv_v2"],
        &["--security-label=never"],
        &["--security-label"],
        &["-o", "security_label"],
        &["--posix-acl=never"],
        &["--tag", "shared"],
        &["--posix-acl"],
        &["--posix-acl=auto"],
        &["-o", "posix_acl"],
        &["-o", "flock"],
        &["-o", "posix_lock,flock"],
        &["-o", "no_posix_lock,no_flock"],
        &["--preserve-noatime"],
        &["--syslog"],
        &["--thread-pool-size=4"],
        &["--migration-mode=find-paths", "--migration-verify-handles"],
        &[
            "--migration-mode=file-handles",
            "--migration-on-error=guest-error",
        ],
        &["--migration-on-error=abort", "--migration-confirm-paths"],
        &["--xattr", "--xattrmap=:map::user.virtiofs.:"],
        &["-o", "xattr,xattrmap=/ok/all///"],
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        parse(&args).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
    }
}

#[test]
fn xattrmap_is_parsed_at_start_up() {
    let base = ["--fd=3", "--shared-dir", "/srv", "--xattr"];
    let run = |m: &str| {
        let args: Vec<String> = base
            .iter()
            .map(|s| s.to_string())
            .chain([format!("--xattrmap={m}")])
            .collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        parse(&refs)
    };
    assert!(run(":prefix:all::user.virtiofs.::bad:all:::").is_ok());
    assert!(run(":ok:all::").unwrap_err().contains("fewer fields"));
    assert!(run(":good:all:::").unwrap_err().contains("unknown type"));
}

#[test]
fn print_capabilities_needs_nothing_else() {
    let o = parse(&["--print-capabilities"]).unwrap();
    assert!(o.print_capabilities);
    let caps: serde_json::Value = serde_json::from_str(&capabilities_json(false)).unwrap();
    assert_eq!(caps["type"], "fs");
    let features = caps["features"].as_array().unwrap();
    // libvirt allows `virsh migrate` only with "migrate-precopy".
    assert!(features.iter().any(|f| f == "migrate-precopy"), "{caps}");
    // With a DAX window there is no migration to offer.
    let caps: serde_json::Value = serde_json::from_str(&capabilities_json(true)).unwrap();
    let features = caps["features"].as_array().unwrap();
    assert!(!features.iter().any(|f| f == "migrate-precopy"), "{caps}");
}

/// `argv` after `--config` expansion, parsed and resolved.
fn parse_with_config(text: &str, args: &[&str]) -> Result<Opt, String> {
    let d = std::env::temp_dir().join(format!("xvfs-config-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join(format!("{:x}.conf", text.len() * 31 + args.len()));
    std::fs::write(&file, text).unwrap();
    let mut argv = vec!["xvirtiofsd".to_string(), "--config".to_string()];
    argv.push(file.display().to_string());
    argv.extend(args.iter().map(|s| s.to_string()));
    let argv = config::expand(argv).map_err(|e| e.to_string())?;
    let mut o = Opt::try_parse_from(argv).map_err(|e| e.to_string())?;
    o.resolve().map_err(|e| e.to_string())?;
    Ok(o)
}

#[test]
fn config_file_keys_are_the_long_options_and_the_command_line_wins() {
    let text = "# a share\n\nshared-dir = /srv/share\nsocket-path=\"/run/a.sock\"\n\
                cache = never\nxattr = true\nreadonly = false\nqueues = 2\n\
                translate-uid = map:0:1000:1\nannounce_submounts\nsecurity-label=auto\n";
    let o = parse_with_config(text, &[]).unwrap();
    assert_eq!(
        o.shared_dir.as_deref(),
        Some(std::path::Path::new("/srv/share"))
    );
    assert_eq!(
        o.socket_path.as_deref(),
        Some(std::path::Path::new("/run/a.sock"))
    );
    assert_eq!(o.cache, CacheMode::Never);
    assert!(o.xattr && !o.readonly);
    assert_eq!(o.queues, 2);
    assert_eq!(o.translate_uid, ["map:0:1000:1"]);
    assert!(o.announce_submounts);
    assert_eq!(o.security_label, Some(Negotiation::Auto));
    let o = parse_with_config(text, &["--cache", "always", "--queues=4"]).unwrap();
    assert_eq!(o.cache, CacheMode::Always, "the command line wins");
    assert_eq!(o.queues, 4);
}

#[test]
fn config_file_reads_the_units_environment_file() {
    let unit_conf = include_str!("../../../../packaging/deb/share.conf");
    let o = parse_with_config(unit_conf, &[]).unwrap();
    assert_eq!(
        o.shared_dir.as_deref(),
        Some(std::path::Path::new("/srv/share"))
    );
    assert_eq!(
        o.socket_path.as_deref(),
        Some(std::path::Path::new("/run/xvirtiofsd/share.sock"))
    );
    assert_eq!(o.socket_group.as_deref(), Some("kvm"));
    assert_eq!(o.cache, CacheMode::Auto);
}

#[test]
fn config_file_errors_name_the_line() {
    let e = parse_with_config("shared-dir=/srv\nbogus=1\n", &["--fd=3"]).unwrap_err();
    assert!(e.contains(":2: unknown key `bogus`"), "{e}");
    let e = parse_with_config("xattr=maybe\n", &[]).unwrap_err();
    assert!(e.contains(":1: `xattr` is a flag"), "{e}");
    let e = parse_with_config("cache\n", &[]).unwrap_err();
    assert!(e.contains("`cache` needs a value"), "{e}");
    // Internal options are no keys.
    let e = parse_with_config("handover-from=/x\n", &[]).unwrap_err();
    assert!(e.contains("unknown key `handover-from`"), "{e}");
    let e = config::expand(vec!["x".into(), "--config=/nonexistent/xvfs.conf".into()])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--config /nonexistent/xvfs.conf: "), "{e}");
    // An upgrade's new-daemon options are the new daemon's to read.
    let argv: Vec<String> = ["x", "upgrade", "--pid=1", "--", "--config=/nonexistent"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(config::expand(argv.clone()).unwrap(), argv);
}

#[test]
fn xattrmap_implies_xattr_as_in_virtiofsd() {
    let o = parse(&[
        "--fd=3",
        "--shared-dir=/srv",
        "--xattrmap=:map::user.virtiofs.:",
    ])
    .unwrap();
    assert!(o.xattr);
    let o = parse(&["--fd=3", "-o", "source=/srv,xattrmap=:map::user.virtiofs.:"]).unwrap();
    assert!(o.xattr);
    // A bad map is still refused.
    assert!(parse(&["--fd=3", "--shared-dir=/srv", "--xattrmap=:bogus:"]).is_err());
}

#[test]
fn commands_parse_as_subcommands() {
    let o = Opt::try_parse_from(["xvirtiofsd", "status"]).unwrap();
    assert!(matches!(
        o.command,
        Some(Command::Status(StatusOpt {
            pid: None,
            control: None,
            ..
        }))
    ));
    let o =
        Opt::try_parse_from(["xvirtiofsd", "status", "--pid=7", "--format=prometheus"]).unwrap();
    assert!(matches!(
        o.command,
        Some(Command::Status(StatusOpt {
            pid: Some(7),
            format: Some(StatusFormat::Prometheus),
            ..
        }))
    ));
    let o =
        Opt::try_parse_from(["xvirtiofsd", "upgrade", "--pid=7", "--", "--shared-dir=/s"]).unwrap();
    match o.command {
        Some(Command::Upgrade(u)) => assert_eq!(u.daemon_args, ["--shared-dir=/s"]),
        other => panic!("{other:?}"),
    }
    assert!(
        Opt::try_parse_from(["xvirtiofsd", "upgrade"]).is_err(),
        "needs --pid or --control"
    );
    assert!(Opt::try_parse_from(["xvirtiofsd", "--shared-dir=/s", "status"]).is_err());
    let o = Opt::try_parse_from(["xvirtiofsd", "completions", "zsh"]).unwrap();
    assert!(matches!(
        o.command,
        Some(Command::Completions(CompletionsOpt { shell: Shell::Zsh }))
    ));
}
