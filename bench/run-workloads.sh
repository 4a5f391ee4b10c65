#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs a list of Filebench workloads with xfilebench, one JSON result each.
# POSIX sh: the same script runs on the host and in the guest (busybox), where
# the image carries it as /opt/xvfs/bin/xvfs-bench-run.
#
# usage: run-workloads.sh --runner BIN --workloads DIR --list FILE --vars FILE
#                         --dir WORKDIR --out OUTDIR [--runtime S] [--drop CMD]
#                         [--seed N] [--end CMD2]
# Before each measured run (after its filesets exist) CMD drops the caches;
# after each run CMD2 (if given) marks its end. Both see the workload's name
# in XVFS_BENCH_WORKLOAD.
# After each workload everything in WORKDIR but the reusable keep-* data sets
# is removed. Prints "[i/n] NAME (k left)" before and "[i/n] NAME: rc=R, IO
# Summary…" after each workload; exits 1 if any workload failed.
set -eu

say() { echo "xvfs-bench: $*"; }
die() { say "error: $*" >&2; exit 2; }

RUNNER='' WL='' LIST='' VARS='' DIR='' OUT='' RUNTIME='' DROP='' END='' SEED=1
while [ $# -gt 0 ]; do
    case "$1" in
        --runner) RUNNER=$2; shift 2 ;;
        --workloads) WL=$2; shift 2 ;;
        --list) LIST=$2; shift 2 ;;
        --vars) VARS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --drop) DROP=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --end) END=$2; shift 2 ;;
        -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ -n "$RUNNER" ] || die "missing --runner"
[ -n "$WL" ] || die "missing --workloads"
[ -n "$LIST" ] || die "missing --list"
[ -n "$VARS" ] || die "missing --vars"
[ -n "$DIR" ] || die "missing --dir"
[ -n "$OUT" ] || die "missing --out"
[ -x "$RUNNER" ] || die "no runner $RUNNER"

mkdir -p "$DIR" "$OUT"
names=$(grep -vE '^[[:space:]]*(#|$)' "$LIST")
n=$(echo "$names" | wc -l)
i=0
failed=0
for name in $names; do
    i=$((i + 1))
    say "[$i/$n] $name ($((n - i)) left)"
    set -- -f "$WL/$name.f" --vars "$VARS" -D "dir=$DIR" --seed "$SEED" \
        --json "$OUT/$name.json"
    [ -n "$RUNTIME" ] && set -- "$@" -D "runtime=$RUNTIME"
    [ -n "$DROP" ] && set -- "$@" --pre-run "$DROP"
    rc=0
    XVFS_BENCH_WORKLOAD=$name
    export XVFS_BENCH_WORKLOAD
    "$RUNNER" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    [ -z "$END" ] || sh -c "$END" || say "[$i/$n] $name: end mark failed"
    say "[$i/$n] $name: rc=$rc $(grep 'IO Summary' "$OUT/$name.log" | tail -1)"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        tail -3 "$OUT/$name.log" | sed 's/^/    /'
    fi
    for e in "$DIR"/* "$DIR"/.[!.]*; do
        [ -e "$e" ] || continue
        case "${e##*/}" in
            keep-*) ;;
            *) rm -rf "$e" ;;
        esac
    done
done
say "done: $n workloads, $failed failed"
[ "$failed" -eq 0 ]
