#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install everything the VM workflow needs on Debian 12 (bookworm). Idempotent:
# every step first checks whether its result is already there, so a second
# run takes well under a second.
#
# Steps: bookworm-backports apt source, host packages (QEMU from backports),
# Rust (rustup if cargo is missing; the toolchain host/rust-toolchain.toml
# pins, with rustfmt and clippy), the fuzzing
# tools `make test` and `make fuzz` use (a nightly toolchain, minimal
# profile, and cargo-fuzz), and the upstream virtiofsd 1.14.0 (the
# benchmark baseline) under /opt/xvirtiofs/virtiofsd.
set -eEuo pipefail
trap 'echo "install-deps: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/functions.sh"

BACKPORTS_LIST=/etc/apt/sources.list.d/backports.list
VIRTIOFSD_VERSION=1.14.0
VIRTIOFSD_ROOT=/opt/xvirtiofs/virtiofsd
# Packages from bookworm-backports (bookworm's QEMU 7.2 is too old).
BPO_PKGS=(qemu-system-x86 qemu-utils)
# Packages from bookworm itself.
PKGS=(busybox-static fio cpio zstd xz-utils libseccomp-dev libcap-ng-dev pkg-config
    shellcheck python3-matplotlib gcc g++ libc6-dev ca-certificates curl dpkg-dev binutils uidmap acl
    git make)
# cargo-fuzz's version (its libFuzzer is built with g++).
CARGO_FUZZ_VERSION=0.13.2

print_help() {
    cat <<'HELP'
usage: vmm-config/install-deps.sh
Installs the host prerequisites of xvirtiofs (run as root, Debian 12).
HELP
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "must run as root (or with sudo available) to install packages"
    fi
}

# The Debian mirror apt already uses, so backports comes from the same place.
debian_mirror() {
    local m=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        m=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | awk '{print $1; exit}')
    fi
    if [ -z "$m" ] && [ -r /etc/apt/sources.list ]; then
        m=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
    fi
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        say "apt-get update"
        apt_update 5 as_root ||
            die "apt-get update keeps failing; check /etc/apt/sources.list.d and the network"
        APT_UPDATED=1
    fi
}

add_backports() {
    if grep -qsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        || grep -qsE '^Suites:.*bookworm-backports' /etc/apt/sources.list.d/*.sources; then
        return 0
    fi
    local m
    m=$(debian_mirror)
    say "adding apt source: deb $m bookworm-backports main -> $BACKPORTS_LIST"
    echo "deb $m bookworm-backports main" | as_root tee "$BACKPORTS_LIST" >/dev/null
    APT_UPDATED=0
    apt_update_once
}

install_packages() {
    local missing=() bpo_missing=() p v
    for p in "${PKGS[@]}"; do
        [ -n "$(installed_version "$p")" ] || missing+=("$p")
    done
    for p in "${BPO_PKGS[@]}"; do
        v=$(installed_version "$p")
        # backports carries QEMU 10; anything older is bookworm's 7.2.
        if [ -z "$v" ] || dpkg --compare-versions "$v" lt 1:9; then
            bpo_missing+=("$p")
        fi
    done
    export DEBIAN_FRONTEND=noninteractive
    if [ "${#bpo_missing[@]}" -gt 0 ]; then
        apt_update_once
        say "installing from bookworm-backports: ${bpo_missing[*]}"
        as_root apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends -t bookworm-backports "${bpo_missing[@]}"
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_update_once
        say "installing: ${missing[*]}"
        as_root apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
    fi
}

# The toolchain host/rust-toolchain.toml pins (every build of host/ uses it).
rust_toolchain() {
    sed -n 's/^channel *= *"\(.*\)"/\1/p' "$XVFS_ROOT/host/rust-toolchain.toml"
}

install_rust() {
    export PATH="$HOME/.cargo/bin:$PATH"
    local toolchain
    toolchain=$(rust_toolchain)
    [ -n "$toolchain" ] || die "no channel in host/rust-toolchain.toml"
    if ! command -v cargo >/dev/null 2>&1; then
        local url=https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init
        say "cargo not found; installing Rust with rustup from static.rust-lang.org"
        if ! curl -sSfI --max-time 30 "$url" >/dev/null; then
            die "cannot reach $url (rustup's download host); install Rust by hand (https://rustup.rs) and re-run 'make deps'"
        fi
        # rustup-init acts on the name it is run by: anything but
        # "rustup-init" (mktemp's tmp.XXXX) makes it a proxy and fail.
        local tmp
        tmp=$(mktemp -d)
        curl -sSf --proto '=https' --tlsv1.2 --max-time 300 -o "$tmp/rustup-init" "$url" \
            || die "downloading rustup-init from $url failed"
        chmod +x "$tmp/rustup-init"
        "$tmp/rustup-init" -y --no-modify-path --profile minimal -c rustfmt -c clippy \
            --default-toolchain "$toolchain" \
            || die "rustup-init failed"
        rm -rf "$tmp"
    fi
    # host/ builds with the pinned toolchain, with rustfmt and clippy.
    if ! rustup toolchain list 2>/dev/null | grep -q "^$toolchain-"; then
        command -v rustup >/dev/null 2>&1 \
            || die "Rust $toolchain (host/rust-toolchain.toml) is missing and there is no rustup to add it"
        say "installing Rust $toolchain (host/rust-toolchain.toml) with rustfmt and clippy"
        rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy \
            || die "rustup toolchain install $toolchain failed"
    fi
    if ! cargo "+$toolchain" fmt --version >/dev/null 2>&1 ||
        ! cargo "+$toolchain" clippy --version >/dev/null 2>&1; then
        say "adding rustfmt and clippy to Rust $toolchain"
        rustup component add --toolchain "$toolchain" rustfmt clippy
    fi
}

# The fuzz targets (host/fuzz/run.sh) build with cargo-fuzz, whose
# sanitizer and coverage flags need a nightly compiler.
install_fuzz_tools() {
    if ! rustup toolchain list | grep -q '^nightly'; then
        say "installing the nightly toolchain (minimal profile) for the fuzz targets"
        rustup toolchain install nightly --profile minimal \
            || die "rustup toolchain install nightly failed"
    fi
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        say "installing cargo-fuzz $CARGO_FUZZ_VERSION (about 2 minutes)"
        cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked \
            || die "cargo install cargo-fuzz $CARGO_FUZZ_VERSION failed"
    fi
}

install_virtiofsd() {
    local bin="$VIRTIOFSD_ROOT/bin/virtiofsd"
    if [ -x "$bin" ]; then
        return 0
    fi
    say "building upstream virtiofsd $VIRTIOFSD_VERSION into $VIRTIOFSD_ROOT (about 2 minutes)"
    cargo install virtiofsd --version "$VIRTIOFSD_VERSION" --locked --root "$VIRTIOFSD_ROOT" \
        || die "cargo install virtiofsd $VIRTIOFSD_VERSION failed"
}

main() {
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        "") ;;
        *) print_help >&2; die "unexpected argument: $1" ;;
    esac
    [ -r /etc/debian_version ] || die "this script supports Debian 12 (bookworm) only"
    add_backports
    install_packages
    install_rust
    install_fuzz_tools
    install_virtiofsd
    say "deps ok: $(qemu-system-x86_64 --version | head -1), $(cargo --version), virtiofsd $VIRTIOFSD_VERSION"
}

main "$@"
