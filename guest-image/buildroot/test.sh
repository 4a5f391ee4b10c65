#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make test-buildroot: the VM tests tests/vm/test_ops.sh and test_filebench.sh,
# unchanged (same assertions), against the Buildroot guest
# (build/guest-buildroot/, made by build.sh) instead of the Debian one: they
# boot through vmm-config/run-vm, which takes the image from XVFS_KERNEL and
# XVFS_INITRD. Logs in build/test-logs/buildroot-<test>.log. Ends with
# "N passed, M failed" over both; exits 1 on any failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../../vmm-config/functions.sh"

TESTS=(test_ops test_filebench)

main() {
    local image=$XVFS_ROOT/build/guest-buildroot t log rc p f passed=0 failed=0
    if [ ! -r "$image/vmlinux" ] || [ ! -r "$image/initramfs.cpio" ]; then
        die "no Buildroot image in $image; run 'make image IMAGE=buildroot'"
    fi
    export XVFS_KERNEL=$image/vmlinux XVFS_INITRD=$image/initramfs.cpio
    mkdir -p "$XVFS_ROOT/build/test-logs"
    for t in "${TESTS[@]}"; do
        log=$XVFS_ROOT/build/test-logs/buildroot-$t.log
        say "buildroot image: $t (log $log)"
        rc=0
        "$XVFS_ROOT/tests/vm/$t.sh" 2>&1 | tee "$log" || rc=$?
        read -r p f < <(test_counts "$log" "$rc")
        passed=$((passed + p))
        failed=$((failed + f))
    done
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

main "$@"
