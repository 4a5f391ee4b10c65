#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Buildroot post-build script of the xvirtiofs guest ($1 = TARGET_DIR).
#
# The image boots Debian's kernel (guest-image/build.sh --kernel-only puts
# it in build/guest/), so its two modules come from there too: button.ko and
# evdev.ko, which /init loads to power off on the ACPI power button, exactly
# as in the Debian image.
# Environment: XVFS_GUEST_DIR (default <repository>/build/guest).
set -eu

target=$1
root=$(cd "$(dirname "$0")/../../../.." && pwd)
guest=${XVFS_GUEST_DIR:-$root/build/guest}

kernel_dir=$(dirname "$(readlink -f "$guest/vmlinux")")
if ! ls "$kernel_dir"/modules/*.ko >/dev/null 2>&1; then
    echo "post-build: no kernel modules in $kernel_dir/modules; run guest-image/build.sh --kernel-only" >&2
    exit 1
fi
rm -rf "$target/lib/modules"
mkdir -p "$target/lib/modules" "$target/mnt/shared"
cp "$kernel_dir"/modules/*.ko "$target/lib/modules/"
