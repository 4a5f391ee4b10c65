// SPDX-License-Identifier: Apache-2.0
//! Sets XVFS_VERSION: the package version, plus `+TAG` when the build
//! environment has XVFS_BUILD_TAG (used to build two distinguishable daemons
//! for the live-upgrade tests); and XVFS_COMMIT: the git commit the build
//! is of (`unknown` outside a git checkout).
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=XVFS_BUILD_TAG");
    let mut v = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    if let Ok(tag) = std::env::var("XVFS_BUILD_TAG") {
        if !tag.is_empty() {
            v.push('+');
            v.push_str(&tag);
        }
    }
    println!("cargo:rustc-env=XVFS_VERSION={v}");
    // A new commit changes HEAD or the branch it names.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=XVFS_COMMIT={commit}");
}
