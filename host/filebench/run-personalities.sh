#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-personalities.sh DIR [SECONDS]: runs every Filebench personality (*.f)
# in DIR (e.g. the workloads/ folder of a Filebench 1.5 checkout) through
# xfilebench, unchanged but for what -D overrides, and prints one line per
# file: status and the IO Summary ops/s.
#
# Each file runs in a scratch directory ($dir and $path point there) for
# SECONDS (default 5): a personality without a `run` statement (Filebench's
# shipped ones end without one; its users type `run N`) gets `run SECONDS`
# appended to a temporary copy. Extra overrides come from XFB_DEFS, e.g.
#   XFB_DEFS="-D nfiles=1000 -D filesize=1m -D nthreads=4" ./run-personalities.sh ~/filebench/workloads
# Environment: XFILEBENCH (default: host/target/release/xfilebench),
# SCRATCH (default: a new directory under /tmp).
# Exit status: 0 when every file ran and printed an IO Summary line.
set -euo pipefail

dir=${1:?usage: run-personalities.sh DIR [SECONDS]}
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
xfb=${XFILEBENCH:-$here/../target/release/xfilebench}
[ -x "$xfb" ] || { echo "run-personalities: $xfb missing: run 'make build'" >&2; exit 2; }
scratch=${SCRATCH:-$(mktemp -d /tmp/xfb-personalities.XXXXXX)}
read -r -a defs <<<"${XFB_DEFS:-}"
failed=0
printf '%-36s %-8s %14s  %s\n' personality status "ops/s" note
for f in "$dir"/*.f; do
    name=$(basename "$f")
    work=$scratch/${name%.f}
    mkdir -p "$work/data"
    cp "$f" "$work/w.f"
    grep -qE '^[[:space:]]*(run|psrun)([[:space:]]|$)' "$work/w.f" || printf '\nrun %s\n' "$secs" >>"$work/w.f"
    rc=0
    timeout $((secs * 4 + 120)) "$xfb" -q -f "$work/w.f" -D dir="$work/data" -D path="$work/data" \
        -D runtime="$secs" "${defs[@]}" >"$work/out" 2>&1 || rc=$?
    ops=$(awk '/IO Summary:/ {for (i = 1; i < NF; i++) if ($(i+1) == "ops/s") v = $i} END {print v}' "$work/out")
    note=$(grep -m1 -iE 'error|out of resources' "$work/out" | cut -c1-70 || true)
    if [ "$rc" -eq 0 ] && [ -n "$ops" ]; then
        printf '%-36s %-8s %14s  %s\n' "$name" ok "$ops" "$note"
    else
        printf '%-36s %-8s %14s  %s\n' "$name" "FAIL($rc)" "${ops:--}" "$note"
        failed=$((failed + 1))
    fi
    rm -rf "$work/data"
done
echo "failed: $failed (outputs in $scratch)"
[ "$failed" -eq 0 ]
