# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Paths shared by the Buildroot image scripts (source it after
# vmm-config/functions.sh). Everything they make lives under build/buildroot/.
#
#   BR_VERSION    the Buildroot release (../shared/vendor/buildroot-$BR_VERSION.tar.gz)
#   BR_EXTERNAL   this external tree (guest-image/buildroot)
#   BR_WORK       build/buildroot (fixed: configs/xvirtiofs_defconfig names it)
#   BR_SRC        the unpacked Buildroot tree
#   BR_DL         the download directory Buildroot reads (BR2_DL_DIR)
#   BR_OVERRIDE   unpacked sources used as <PKG>_OVERRIDE_SRCDIR
#   BR_TOOLCHAIN  the external toolchain (gcc-12 + bookworm sysroot)
#   BR_OUT        Buildroot's output directory (O=)

# shellcheck disable=SC2034 # used by the scripts that source this file
{
BR_VERSION=2025.02.16
BR_EXTERNAL=$XVFS_ROOT/guest-image/buildroot
BR_WORK=$XVFS_ROOT/build/buildroot
BR_SRC=$BR_WORK/buildroot-$BR_VERSION
BR_DL=$BR_WORK/dl
BR_OVERRIDE=$BR_WORK/src
BR_TOOLCHAIN=$BR_WORK/toolchain
BR_OUT=$BR_WORK/output
BR_VENDOR_TARBALL=${XVFS_VENDOR_DIR:-$XVFS_ROOT/../shared/vendor}/buildroot-$BR_VERSION.tar.gz
BR_VENDOR_SHA256=d846ed155809967373b1c7793ef324c70f7fb2604f86f7a6372c0dfa8c1c5ac5
}

# Unpack the vendored Buildroot tree into BR_SRC (once).
br_unpack() {
    if [ -f "$BR_SRC/Makefile" ] && [ -f "$BR_SRC/.xvfs-unpacked" ]; then
        return 0
    fi
    [ -f "$BR_VENDOR_TARBALL" ] || die "$BR_VENDOR_TARBALL not found (see ../shared/vendor/README.md)"
    echo "$BR_VENDOR_SHA256  $BR_VENDOR_TARBALL" | sha256sum -c --quiet - ||
        die "$BR_VENDOR_TARBALL: wrong sha256"
    say "buildroot: unpacking $(basename "$BR_VENDOR_TARBALL")"
    mkdir -p "$BR_WORK"
    rm -rf "$BR_SRC"
    tar -xzf "$BR_VENDOR_TARBALL" -C "$BR_WORK"
    [ -f "$BR_SRC/Makefile" ] || die "$BR_VENDOR_TARBALL has no buildroot-$BR_VERSION/Makefile"
    touch "$BR_SRC/.xvfs-unpacked"
}
