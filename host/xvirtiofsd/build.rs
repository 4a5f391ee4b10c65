//! Sets XVFS_VERSION: the package version, plus `+TAG` when the build
//! environment has XVFS_BUILD_TAG (used to build two distinguishable daemons
//! for the live-upgrade tests).
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
}
