#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Puts xfilebench, the guest runner and the workloads into the guest image:
# rewrites our block of build/guest/extra-files.txt (between the
# "# >>> xvfs-filebench" and "# <<< xvfs-filebench" lines, leaving every
# other line alone), then runs guest-image/build.sh (cached by content).
#   /opt/xvfs/bin/xfilebench          host/target/release/xfilebench
#   /opt/xvfs/bin/xvfs-bench-run      bench/run-workloads.sh
#   /opt/xvfs/bin/xvfs-drop-caches    bench/guest-drop.sh
#   /opt/xvfs/workloads/*.f, scale/   bench/workloads/
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../vmm-config/functions.sh"

LIST=${XVFS_GUEST_DIR:-$XVFS_ROOT/build/guest}/extra-files.txt
RUNNER=$XVFS_ROOT/host/target/release/xfilebench

main() {
    local f tmp
    [ -x "$RUNNER" ] || die "$RUNNER not built; run 'make build'"
    mkdir -p "$(dirname "$LIST")"
    touch "$LIST"
    tmp=$(mktemp)
    sed '/^# >>> xvfs-filebench$/,/^# <<< xvfs-filebench$/d' "$LIST" >"$tmp"
    {
        echo "# >>> xvfs-filebench"
        echo "$RUNNER /opt/xvfs/bin/xfilebench"
        echo "$HERE/run-workloads.sh /opt/xvfs/bin/xvfs-bench-run"
        echo "$HERE/guest-drop.sh /opt/xvfs/bin/xvfs-drop-caches"
        for f in "$HERE"/workloads/*.f "$HERE"/workloads/*.list "$HERE"/workloads/scale/*.vars; do
            echo "$f /opt/xvfs/workloads/${f#"$HERE"/workloads/}"
        done
        echo "# <<< xvfs-filebench"
    } >>"$tmp"
    mv "$tmp" "$LIST"
    "$XVFS_ROOT/guest-image/build.sh"
}

main "$@"
