// SPDX-License-Identifier: Apache-2.0
// Test code: unwrap/expect are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The command as a user meets it (issue 48): `--help` and the manual page
//! name the commands and have real sections, completions, `--config`,
//! `RUST_LOG`, start-up errors with `--log-level off`, an unreleased
//! build's version, errors that say what to do, and `status` finding a
//! running daemon and printing Prometheus text. Runs the built binary;
//! the daemon tests need root (as the rest of the suite).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../examples/xvirtiofsd-man.rs"]
mod man;

const BIN: &str = env!("CARGO_BIN_EXE_xvirtiofsd");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xvfs-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn help_lists_the_commands_and_says_what_thread_pool_size_does() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(help.contains("Commands:"), "{help}");
    for c in ["status", "upgrade", "completions"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(c)),
            "{c}\n{help}"
        );
    }
    assert!(help.contains("xvirtiofsd <COMMAND>"), "{help}");
    assert!(help.contains("Accepted for compatibility with virtiofsd and has no effect"));
    assert!(
        help.contains("after more than N crashes"),
        "--crash-restart-limit"
    );
    for section in [
        "EXAMPLES:",
        "CONFIGURATION FILE:",
        "ENVIRONMENT:",
        "EXIT STATUS:",
    ] {
        assert!(help.contains(section), "{section}");
    }
    let status = text(&run(&["status", "--help"]).stdout);
    assert!(status.contains("--format"), "{status}");
}

#[test]
fn man_pages_have_real_sections_and_one_page_per_command() {
    let pages = man::pages().unwrap();
    let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "xvirtiofsd.1",
            "xvirtiofsd-status.1",
            "xvirtiofsd-upgrade.1",
            "xvirtiofsd-completions.1"
        ]
    );
    let top = text(&pages[0].1);
    assert!(!top.contains(".SH EXTRA"), "no EXTRA section");
    for s in [
        ".SH COMMANDS",
        ".SH \"EXAMPLES\"",
        ".SH \"EXIT STATUS\"",
        ".SH \"CONFIGURATION FILE\"",
        ".SH \"ENVIRONMENT\"",
    ] {
        assert!(top.contains(s), "{s}");
    }
    let upgrade = text(&pages[2].1);
    assert!(upgrade.contains(".SH \"EXIT STATUS\""), "{upgrade}");
    assert!(!upgrade.contains(".SH EXTRA"));
}

#[test]
fn completions_for_each_shell_offer_options_and_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = text(&out.stdout);
        for word in [
            "shared-dir",
            "socket-path",
            "status",
            "upgrade",
            "prometheus",
        ] {
            assert!(script.contains(word), "{shell}: {word}");
        }
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_config_file_is_read_and_its_errors_name_the_line() {
    let d = scratch("config");
    let file = d.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let conf = d.join("share.conf");
    std::fs::write(
        &conf,
        format!(
            "# served by hand\nSHARED_DIR={}\nsocket-path={}\nOPTIONS=\"--sandbox=none --no-control\"\n",
            file.display(),
            d.join("vu.sock").display()
        ),
    )
    .unwrap();
    let out = run_env(
        &["--config", conf.to_str().unwrap(), "--log-level=off"],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "--shared-dir {} is not a directory",
            file.display()
        )),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(&conf, "shared-dir=/srv\nsocket-pat=/x\n").unwrap();
    let out = run(&["--config", conf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains(":2: unknown key `socket-pat`"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A daemon that fails at its socket, after its first log lines.
fn failing_start(d: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let sock = d.join("no-such-dir/vu.sock");
    let mut all = vec![
        "--shared-dir",
        d.to_str().unwrap(),
        "--socket-path",
        sock.to_str().unwrap(),
        "--no-control",
        "--sandbox=none",
    ];
    all.extend_from_slice(args);
    let out = run_env(&all, env);
    (out.status.code(), text(&out.stderr))
}

#[test]
fn rust_log_chooses_what_is_logged_as_in_virtiofsd() {
    let d = scratch("rustlog");
    let (_, err) = failing_start(&d, &["--log-level=error"], &[]);
    assert!(!err.contains(" INFO "), "--log-level error: {err}");
    let (_, err) = failing_start(&d, &["--log-level=error"], &[("RUST_LOG", "info")]);
    assert!(err.contains(" INFO "), "RUST_LOG=info wins: {err}");
    let (_, err) = failing_start(&d, &["--log-level=info"], &[("RUST_LOG", "error")]);
    assert!(!err.contains(" INFO "), "RUST_LOG=error wins: {err}");
    // A module directive: only that module's messages below error.
    let (_, err) = failing_start(
        &d,
        &[],
        &[("RUST_LOG", "error,xvirtiofsd::nothing_here=trace")],
    );
    assert!(!err.contains(" INFO "), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn start_up_errors_are_printed_with_log_level_off_and_name_the_directory() {
    let d = scratch("off");
    let (code, err) = failing_start(&d, &["--log-level=off"], &[]);
    assert_eq!(code, Some(3));
    let dir = d.join("no-such-dir");
    assert!(
        err.contains(&format!("its directory {} does not exist", dir.display())),
        "{err}"
    );
    assert!(err.contains("mkdir -p"), "{err}");
    let (code, err) = failing_start(&d, &["--log-level=off"], &[("RUST_LOG", "off")]);
    assert_eq!(code, Some(3));
    assert!(err.contains("does not exist"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unreleased_build_says_so_in_its_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    let releases = std::fs::read_to_string(root.join("RELEASES")).unwrap();
    let line = text(&run(&["--version"]).stdout);
    let version = line.split_whitespace().nth(1).unwrap().to_string();
    match head {
        Some(h) if !releases.contains(&h) && std::env::var("XVFS_RELEASE").is_err() => {
            let short = &h[..12];
            assert!(version.contains(&format!("~dev+{short}")), "{line}");
        }
        _ => assert!(!version.contains("~dev"), "{line}"),
    }
}

#[test]
fn status_of_a_stopped_daemon_says_so() {
    // No process has this pid (above pid_max).
    let out = run(&["status", "--pid", "4194305"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no daemon with pid 4194305 is running"),
        "{err}"
    );
    assert!(err.contains("`xvirtiofsd status` lists"), "{err}");
}

#[test]
fn a_failed_upgrade_says_where_the_new_daemons_messages_went() {
    let d = scratch("upgrade");
    let control = d.join("none.sock");
    let out = run(&[
        "upgrade",
        "--control",
        control.to_str().unwrap(),
        "--timeout=10",
        "--",
        "--shared-dir",
        d.to_str().unwrap(),
        "--sandbox=none",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("the new daemon's messages"), "{err}");
    assert!(err.contains("this command's standard error"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Waits for `path` to exist.
fn wait_for(path: &Path) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn status_lists_a_running_daemon_and_prints_prometheus_text() {
    if unsafe_is_not_root() {
        eprintln!("status listing: needs root (/run/xvirtiofsd); not run");
        return;
    }
    let d = scratch("status");
    let mut daemon = Command::new(BIN)
        .args(["--shared-dir", d.to_str().unwrap(), "--socket-path"])
        .arg(d.join("vu.sock"))
        .args(["--sandbox=none", "--log-level=off"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = daemon.id();
    let control = PathBuf::from(format!("/run/xvirtiofsd/{pid}.sock"));
    let up = wait_for(&control);
    // Waiting for its front-end: listed, from its socket's name and record.
    let waiting = run(&["status"]);
    // A front-end connects (this test plays QEMU): now it answers.
    let front_end = std::os::unix::net::UnixStream::connect(d.join("vu.sock"));
    let mut list = run(&["status"]);
    for _ in 0..50 {
        if text(&list.stdout).contains(&format!("\n{pid} ")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        list = run(&["status"]);
    }
    let prom = run(&[
        "status",
        "--pid",
        &pid.to_string(),
        "--format",
        "prometheus",
    ]);
    drop(front_end);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_file(&control);
    let _ = std::fs::remove_file(format!("{}.args", control.display()));
    let _ = std::fs::remove_dir_all(&d);
    assert!(up, "no control socket {}", control.display());
    let waiting = text(&waiting.stdout);
    let line = waiting
        .lines()
        .find(|l| l.starts_with(&format!("{pid} ")))
        .unwrap_or_else(|| panic!("pid {pid} not listed while waiting:\n{waiting}"));
    assert!(line.contains("waiting"), "{line}");
    assert!(
        line.ends_with(d.to_str().unwrap()),
        "the shared directory: {line}"
    );
    let list = text(&list.stdout);
    assert!(list.starts_with("PID "), "{list}");
    let mine = list
        .lines()
        .find(|l| l.starts_with(&format!("{pid} ")))
        .unwrap_or_else(|| panic!("pid {pid} not listed:\n{list}"));
    assert!(mine.contains(&control.display().to_string()), "{mine}");
    assert!(prom.status.success(), "{}", text(&prom.stderr));
    let prom = text(&prom.stdout);
    assert!(
        prom.contains("# TYPE xvirtiofsd_queue_requests_total counter"),
        "{prom}"
    );
    assert!(
        prom.contains(&format!(
            "xvirtiofsd_uptime_seconds{{control=\"{}\"}}",
            control.display()
        )),
        "{prom}"
    );
}

fn unsafe_is_not_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() != 0 }
}
