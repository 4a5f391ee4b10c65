// SPDX-License-Identifier: Apache-2.0
//! Sets XVFS_VERSION and XVFS_COMMIT (the git commit the build is of,
//! `unknown` outside a git checkout).
//!
//! XVFS_VERSION is the package version for a release build: HEAD is the
//! commit RELEASES lists for that version, or XVFS_RELEASE=1 (the release
//! procedure's own build). Any other build is unreleased and says so,
//! `<next minor>~dev+<commit>` (e.g. `0.4.0~dev+3ca87b52c470`), which sorts
//! after the release it follows and before the next one, for Debian too.
//! With XVFS_BUILD_TAG (two distinguishable daemons for the live-upgrade
//! tests) the tag is added: `0.3.0+TAG`, `0.4.0~dev+<commit>.TAG`.
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The commit RELEASES names for `version`.
fn release_commit(releases: &Path, version: &str) -> Option<String> {
    let text = std::fs::read_to_string(releases).ok()?;
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(version)).then(|| w.next().map(str::to_string))?
    })
}

/// `major.(minor+1).0`.
fn next_minor(version: &str) -> String {
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or("0");
    let minor: u64 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    format!("{major}.{}.0", minor + 1)
}

fn main() {
    println!("cargo:rerun-if-env-changed=XVFS_BUILD_TAG");
    println!("cargo:rerun-if-env-changed=XVFS_RELEASE");
    let releases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../RELEASES");
    println!("cargo:rerun-if-changed={}", releases.display());
    // A new commit changes HEAD or the branch it names.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    let full = git(&["rev-parse", "HEAD"]);
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let pkg = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let released = std::env::var("XVFS_RELEASE").is_ok_and(|v| v == "1")
        || (full.is_some() && release_commit(&releases, &pkg) == full);
    let tag = std::env::var("XVFS_BUILD_TAG").unwrap_or_default();
    let v = match (released, tag.is_empty()) {
        (true, true) => pkg,
        (true, false) => format!("{pkg}+{tag}"),
        (false, true) => format!("{}~dev+{commit}", next_minor(&pkg)),
        (false, false) => format!("{}~dev+{commit}.{tag}", next_minor(&pkg)),
    };
    println!("cargo:rustc-env=XVFS_VERSION={v}");
    println!("cargo:rustc-env=XVFS_COMMIT={commit}");
}
