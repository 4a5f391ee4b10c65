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
    let e = parse(&["--fd=3", "--shared-dir", "/srv", "--xattrmap=:ok:all:::"]).unwrap_err();
    assert!(e.contains("needs --xattr"), "{e}");
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
