#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Filebench suite side by side: the same workloads, sizes and guest on
#   xvirtiofsd   our daemon (host/target/release/xvirtiofsd), guest on the share
#   xvirtiofsd-mq  the same with 2 request queues (one worker each) and
#                busy-event wait (--poll adaptive --poll-us 50)
#   virtiofsd    upstream virtiofsd (/opt/xvirtiofs/virtiofsd/bin/virtiofsd)
#   host         xfilebench on the host, directly on a directory of the same disk
#   guest-tmpfs  xfilebench in the guest on its own tmpfs (no virtio-fs in the path)
# with REPS repetitions (configurations interleaved per repetition), caches
# dropped before every measured run (guest and host), then bench/report.py.
#
# usage: bench/bench.sh [--list quick|all|FILE] [--reps N] [--runtime S]
#                       [--scale here|paper] [--configs "xvirtiofsd xvirtiofsd-mq virtiofsd host guest-tmpfs"]
#                       [--out DIR]
# Results: bench/results/<date>-<rev>/{report.md, *.png, report.json, env.txt,
# raw.tar.xz}. raw.tar.xz holds raw/: raw/<config>/rep<k>/<workload>.json,
# raw/<config>/rep<k>.daemon-cpu (the daemon's CPU seconds at the start and
# end of each measured run) and the VM logs (rep<k>.vm/, rep<k>.vm.log);
# bench/report.py DIR remakes the report from it. Every VM run holds
# /tmp/xvfs-vm.lock.
# Environment: QUEUES, VCPUS, MEM, XVFS_ACCEL, DAEMON_ARGS (xvirtiofsd only),
# VIRTIOFSD (upstream binary), PYTHON (with matplotlib; default /usr/bin/python3).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../vmm-config/functions.sh"

LIST=quick
REPS=
RUNTIME=
SCALE=here
CONFIGS="xvirtiofsd xvirtiofsd-mq virtiofsd host guest-tmpfs"
# The multi-queue configuration: queues and daemon options.
MQ_QUEUES=2
MQ_ARGS="--poll adaptive --poll-us 50"
OUT=
XVFSD=$XVFS_ROOT/host/target/release/xvirtiofsd
VIRTIOFSD=${VIRTIOFSD:-/opt/xvirtiofs/virtiofsd/bin/virtiofsd}
RUNNER=$XVFS_ROOT/host/target/release/xfilebench
WORK=$XVFS_ROOT/build/bench
# Debian's python3 has python3-matplotlib (a pyenv python3 first on PATH has not).
PYTHON=${PYTHON:-/usr/bin/python3}
DROP_HELPER_PID=

print_help() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --list) LIST=$2; shift 2 ;;
            --reps) REPS=$2; shift 2 ;;
            --runtime) RUNTIME=$2; shift 2 ;;
            --scale) SCALE=$2; shift 2 ;;
            --configs) CONFIGS=$2; shift 2 ;;
            --out) OUT=$2; shift 2 ;;
            -h | --help) print_help; exit 0 ;;
            *) print_help >&2; die "unknown argument: $1" ;;
        esac
    done
    case "$LIST" in
        quick) LIST=$HERE/workloads/quick.list; : "${REPS:=2}" "${RUNTIME:=3}" ;;
        all) LIST=$HERE/workloads/all.list; : "${REPS:=2}" "${RUNTIME:=4}" ;;
        *) : "${REPS:=2}" ;;
    esac
    [ -f "$LIST" ] || die "no workload list $LIST"
    [ -f "$HERE/workloads/scale/$SCALE.vars" ] || die "no scale $SCALE"
    if [ -z "$OUT" ]; then
        OUT=$HERE/results/$(date +%Y%m%d-%H%M)-$(git -C "$XVFS_ROOT" rev-parse --short HEAD 2>/dev/null || echo norev)
    fi
}

# Answers the guest's requests (bench/guest-drop.sh): "start NAME" drops the
# host's caches, "end NAME" drops nothing; both record the daemon's CPU time
# (pid in PIDFILE, once run-vm wrote it) as "start|end NAME SECONDS" in
# CPULOG; then the request is deleted.
start_drop_helper() {
    local q=$1/.xvfs-drop pidfile=$2 cpulog=$3
    mkdir -p "$q"
    : >"$cpulog"
    (
        local r kind name pid
        while :; do
            for r in "$q"/req-*; do
                [ -e "$r" ] || continue
                read -r kind name <"$r" || true
                if [ "$kind" != end ]; then
                    sync
                    echo 3 >/proc/sys/vm/drop_caches
                fi
                pid=$(cat "$pidfile" 2>/dev/null || true)
                [ -z "$pid" ] || echo "${kind:-start} ${name:-unknown} $(cpu_seconds "$pid")" >>"$cpulog"
                rm -f "$r"
            done
            sleep 0.1
        done
    ) &
    DROP_HELPER_PID=$!
}

stop_drop_helper() {
    if [ -n "$DROP_HELPER_PID" ]; then
        kill "$DROP_HELPER_PID" 2>/dev/null || true
        wait "$DROP_HELPER_PID" 2>/dev/null || true
        DROP_HELPER_PID=
    fi
}

run_host() {
    local out=$1
    "$HERE/run-workloads.sh" --runner "$RUNNER" --workloads "$HERE/workloads" --list "$LIST" \
        --vars "$HERE/workloads/scale/$SCALE.vars" --dir "$WORK/host-work" --out "$out" \
        ${RUNTIME:+--runtime "$RUNTIME"} --drop 'sync; echo 3 >/proc/sys/vm/drop_caches'
}

run_guest() {
    local cfg=$1 out=$2 daemon=$XVFSD args=${DAEMON_ARGS:-} queues=${QUEUES:-1} share dir n timeout rc=0
    share=$WORK/share-$cfg
    [ "$cfg" = guest-tmpfs ] && share=$WORK/share-xvirtiofsd
    if [ "$cfg" = virtiofsd ]; then
        daemon=$VIRTIOFSD
        args=
    fi
    if [ "$cfg" = xvirtiofsd-mq ]; then
        args="$MQ_ARGS${args:+ $args}"
        queues=$MQ_QUEUES
    fi
    dir=/mnt/shared/work
    [ "$cfg" = guest-tmpfs ] && dir=/tmp/work
    mkdir -p "$share" "$(dirname "$out")"
    rm -rf "$share/out"
    cp "$LIST" "$share/list.txt"
    n=$(grep -cvE '^[[:space:]]*(#|$)' "$LIST")
    timeout=$((n * (${RUNTIME:-60} + 90) + 120))
    rm -rf "$out.vm"
    start_drop_helper "$share" "$out.vm/daemon.pid" "$out.daemon-cpu"
    SHARE=$share DAEMON=$daemon DAEMON_ARGS=$args QUEUES=$queues XVFS_TIMEOUT=$timeout \
        XVFS_RUNDIR=$out.vm flock /tmp/xvfs-vm.lock "$XVFS_ROOT/vmm-config/run-vm" --cmd \
        "/opt/xvfs/bin/xvfs-bench-run --runner /opt/xvfs/bin/xfilebench --workloads /opt/xvfs/workloads --list /mnt/shared/list.txt --vars /opt/xvfs/workloads/scale/$SCALE.vars --dir $dir --out /mnt/shared/out ${RUNTIME:+--runtime $RUNTIME} --drop /opt/xvfs/bin/xvfs-drop-caches --end '/opt/xvfs/bin/xvfs-drop-caches --end'" \
        2> >(tee "$out.vm.log" >&2) || rc=$?
    stop_drop_helper
    mkdir -p "$out"
    cp -r "$share/out/." "$out/" 2>/dev/null || true
    return "$rc"
}

write_env() {
    local f=$OUT/env.txt accel
    accel=${XVFS_ACCEL:-}
    if [ -z "$accel" ]; then
        accel=$(cat "$OUT"/raw/*/rep*.vm.log 2>/dev/null | grep -o 'accelerator [a-z]*' | head -1 | awk '{print $2}' || true)
    fi
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "revision: $(git -C "$XVFS_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
        echo "accelerator: ${accel:-unknown}"
        echo "host kernel: $(uname -r)"
        echo "host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"
        echo "qemu: $(qemu-system-x86_64 --version 2>/dev/null | head -1)"
        echo "guest kernel: $(cat "$XVFS_ROOT"/build/guest/kernel-*/package 2>/dev/null | head -1)"
        echo "guest: ${VCPUS:-2} vCPUs, ${MEM:-1G}, ${QUEUES:-1} request queue(s)"
        echo "xvirtiofsd: $("$XVFSD" --version 2>/dev/null | head -1) ${DAEMON_ARGS:-}"
        echo "xvirtiofsd-mq: $MQ_QUEUES request queues, $MQ_ARGS${DAEMON_ARGS:+ $DAEMON_ARGS}"
        echo "virtiofsd: $("$VIRTIOFSD" --version 2>/dev/null | head -1)"
        echo "xfilebench: $("$RUNNER" --version)"
        echo "scale: $SCALE ($(grep -vE '^[[:space:]]*(#|$)' "$HERE/workloads/scale/$SCALE.vars" | tr '\n' ' '))"
        echo "runtime: ${RUNTIME:-per scale} s, repetitions: $REPS"
        echo "workloads: $(grep -cvE '^[[:space:]]*(#|$)' "$LIST") ($(basename "$LIST"))"
        echo "configurations: $CONFIGS"
    } >"$f"
}

# raw/ becomes one archive, raw.tar.xz (hundreds of small files otherwise end
# up in git); bench/report.py reads it as it reads raw/.
pack_raw() {
    tar --sort=name --owner=0 --group=0 --numeric-owner -C "$OUT" -cJf "$OUT/raw.tar.xz" raw
    rm -rf "$OUT/raw"
}

main() {
    local rep cfg out failed=0 t0
    parse_args "$@"
    need tar xz
    [ "$(id -u)" -eq 0 ] || die "bench.sh drops the host's caches: run it as root"
    [ -x "$RUNNER" ] || die "$RUNNER not built; run 'make build'"
    "$HERE/image.sh" >/dev/null
    mkdir -p "$OUT/raw" "$WORK"
    trap stop_drop_helper EXIT
    say "results in $OUT"
    t0=$(date +%s)
    for rep in $(seq 1 "$REPS"); do
        for cfg in $CONFIGS; do
            out=$OUT/raw/$cfg/rep$rep
            say "rep $rep/$REPS, $cfg ($(( $(date +%s) - t0 )) s so far)"
            case "$cfg" in
                host) run_host "$out" || failed=$((failed + 1)) ;;
                xvirtiofsd | xvirtiofsd-mq | virtiofsd | guest-tmpfs) run_guest "$cfg" "$out" || failed=$((failed + 1)) ;;
                *) die "unknown configuration $cfg" ;;
            esac
        done
    done
    write_env
    say "benchmark took $(( $(date +%s) - t0 )) s; $failed configuration run(s) reported failures"
    pack_raw
    "$PYTHON" "$HERE/report.py" "$OUT"
    say "report: $OUT/report.md"
}

main "$@"
