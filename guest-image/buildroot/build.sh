#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the Buildroot variant of the xvirtiofs guest (make image IMAGE=buildroot):
# the same /init contract as the Debian image (guest-image/rootfs), built by
# Buildroot from Debian source packages without the internet.
#
#   kernel     Debian's, as in the Debian image: guest-image/build.sh --kernel-only
#              (build/guest/vmlinux and its button.ko/evdev.ko)
#   toolchain  Debian's gcc-12 + a bookworm sysroot (toolchain.sh)
#   sources    Debian source packages in build/buildroot/dl (fill-dl.sh)
#   initramfs  Buildroot 2025.02.16 (../shared/vendor) with this external tree,
#              configs/xvirtiofs_defconfig: busybox, fio, acl, xfilebench, the
#              workloads and the test agents; uncompressed cpio
#
# Outputs (what vmm-config/run-vm boots with IMAGE=buildroot):
#   build/guest-buildroot/vmlinux          -> ../guest/vmlinux
#   build/guest-buildroot/initramfs.cpio   -> initramfs-<key>.cpio
# Cached by a hash of every input: a second run with nothing changed only
# computes that hash. Buildroot's log: build/buildroot/build.log.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../../vmm-config/functions.sh"
# shellcheck source=guest-image/buildroot/common.sh
. "$HERE/common.sh"

OUT=$XVFS_ROOT/build/guest-buildroot
DEFCONFIG=xvirtiofs_defconfig
# The packages of this tree: they copy files of the repository and have no
# version, so Buildroot cannot tell that they changed; rebuilt on every build.
OWN_PACKAGES=(xvirtiofs-xfilebench xvirtiofs-workloads xvirtiofs-test-agents)
LOG=$BR_WORK/build.log
START=$(date +%s)

print_help() {
    cat <<'HELP'
usage: guest-image/buildroot/build.sh [--force]
Builds build/guest-buildroot/{vmlinux,initramfs.cpio} with Buildroot (cached).
  --force   run Buildroot again even if the inputs did not change
Needs host/target/release/xfilebench (make build) and ../shared/vendor/.
HELP
}

elapsed() {
    local s=$(($(date +%s) - START))
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}

files_hash() {
    (cd "$XVFS_ROOT" && find "$@" \( -type f -o -type l \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
}

# A hash of everything that goes into the image.
image_key() {
    {
        echo "buildroot $BR_VERSION"
        cat "$BR_TOOLCHAIN/.key" 2>/dev/null || echo "no toolchain"
        files_hash guest-image/buildroot guest-image/rootfs bench/workloads \
            bench/run-workloads.sh bench/guest-drop.sh tests/vm/guest-agent.sh tests/vm/ops-steps.sh
        sha256sum "$XVFS_ROOT/host/target/release/xfilebench"
        (cd "$(dirname "$(readlink -f "$XVFS_ROOT/build/guest/vmlinux")")" && sha256sum vmlinux modules/*.ko)
    } | sha256sum | cut -c1-16
}

# Run Buildroot's make, its full output in $LOG; its ">>> package version step"
# lines are the progress lines, with the time since the start. (TERM=dumb:
# no bold escapes around them.) With pipefail the status is make's.
br_make() {
    local rc=0
    echo "== make $* ($(date -u +%FT%TZ))" >>"$LOG"
    env TERM=dumb BR2_DL_DIR="$BR_DL" make -C "$BR_SRC" O="$BR_OUT" BR2_EXTERNAL="$BR_EXTERNAL" "$@" </dev/null 2>&1 |
        tee -a "$LOG" |
        while IFS= read -r line; do
            case "$line" in
                ">>> "*) say "buildroot [$(elapsed)] ${line#>>> }" ;;
            esac
        done || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n 30 "$LOG" >&2
        die "buildroot: make $* failed (exit $rc); full log: $LOG"
    fi
}

# A hash of what Buildroot's own change tracking misses: the toolchain, the
# configuration, the package overrides, the busybox fragment, the hash files
# and the sources fill-dl.sh supplied (dl/<pkg>/<file>, src/<dir>/.xvfs-from).
config_key() {
    {
        cat "$BR_TOOLCHAIN/.key"
        files_hash guest-image/buildroot/configs guest-image/buildroot/patches \
            guest-image/buildroot/board/xvirtiofs/overrides.local \
            guest-image/buildroot/board/xvirtiofs/busybox.fragment
        (cd "$BR_WORK" && find dl src -mindepth 2 -maxdepth 2 -type f ! -path 'dl/debian/*' -print0 |
            LC_ALL=C sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

# Configure BR_OUT; when the configuration changed, from scratch (a cold
# build is a few minutes: cheaper than finding what to rebuild).
configure() {
    local stamp=$BR_OUT/.xvfs-config want
    want=$(config_key)
    if [ -f "$BR_OUT/.config" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    if [ -d "$BR_OUT" ]; then
        say "buildroot: configuration or toolchain changed, removing $BR_OUT"
        rm -rf "$BR_OUT"
    fi
    say "buildroot: $DEFCONFIG"
    mkdir -p "$BR_OUT"
    br_make "$DEFCONFIG" >/dev/null
    echo "$want" >"$stamp"
}

main() {
    local force='' key cpio pkg
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        --force) force=1 ;;
        "") ;;
        *) print_help >&2; die "unexpected argument: $1" ;;
    esac
    need make gcc sha256sum cpio
    [ -x "$XVFS_ROOT/host/target/release/xfilebench" ] ||
        die "host/target/release/xfilebench not built; run 'make build'"
    mkdir -p "$OUT" "$BR_WORK"

    say "[1/5] kernel (Debian's, as in the Debian image)"
    "$XVFS_ROOT/guest-image/build.sh" --kernel-only
    say "[2/5] Buildroot $BR_VERSION source tree"
    br_unpack
    say "[3/5] external toolchain"
    "$HERE/toolchain.sh"

    key=$(image_key)
    cpio=$OUT/initramfs-$key.cpio
    if [ -z "$force" ] && [ -s "$cpio" ]; then
        say "[4/5] sources: not needed (image cached)"
        say "[5/5] initramfs: cached $cpio"
    else
        say "[4/5] sources from Debian"
        "$HERE/fill-dl.sh"
        say "[5/5] initramfs (Buildroot; log $LOG)"
        # tar's and coreutils' configure refuse to run as root without this.
        [ "$(id -u)" -ne 0 ] || export FORCE_UNSAFE_CONFIGURE=1
        configure
        if [ -d "$BR_OUT/build" ]; then
            for pkg in "${OWN_PACKAGES[@]}"; do
                rm -rf "$BR_OUT/build/$pkg"
            done
        fi
        br_make all
        [ -s "$BR_OUT/images/rootfs.cpio" ] || die "Buildroot made no images/rootfs.cpio"
        cp "$BR_OUT/images/rootfs.cpio" "$cpio.part"
        mv "$cpio.part" "$cpio"
        find "$OUT" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "$(basename "$cpio")" -delete
    fi
    ln -sfn "$(basename "$cpio")" "$OUT/initramfs.cpio"
    ln -sfn "$(readlink -f "$XVFS_ROOT/build/guest/vmlinux")" "$OUT/vmlinux"
    say "guest image (buildroot) ready: $OUT/vmlinux $OUT/initramfs.cpio ($(du -k "$cpio" | cut -f1) KiB initramfs)"
    say "total build time: $(elapsed)"
}

main "$@"
