#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench-dax: the DAX window against the page-cache modes, on QEMU 11.1
# (issue 32; docs/dax.md). Every configuration runs on the same QEMU, guest
# kernel and xvirtiofsd:
#   dax           --tag shared --dax-window BENCH_DAX_WINDOW (vhost-user-test-
#                 device-pci), the guest mounts with dax=inode; the data files
#                 are whole 2 MiB chunks, so every access goes through the window
#   cache-auto    --cache auto (vhost-user-fs-pci, no window)
#   cache-always  --cache always
#
# Part 1, fio in the guest on one BENCH_FILE_MIB file made on the host (and
# read once there, so that every configuration starts from a warm host page
# cache): {mmap, psync} x {randread, randwrite} x {4k, 64k}, BENCH_SECS
# seconds each, the guest's caches dropped before each job. One VM boot per
# configuration and repetition runs all jobs; repetitions are outermost and
# alternate the configurations' order. The daemon's CPU time over the boot
# is recorded (schedstat of all its threads).
#
# Part 2, memory: two guests (each with its own daemon, MEM 1G) read the
# same BENCH_SHARED_MIB file; once both have read it, the host's memory in
# use (MemTotal - MemFree, page cache included) is compared with before the
# guests started, with and without DAX. Without DAX each guest keeps its
# own copy in its page cache (guest RAM, which is host memory) beside the
# host's; with DAX both read the host's page cache through their windows.
#
# Part 3, Filebench: the personalities of BENCH_FILEBENCH (single-file ones:
# at the "here" scale their file is 64 MiB, a whole number of 2 MiB chunks, so
# with dax=inode it goes through the window once the guest looks it up again
# after the pre-run cache drop) run by xfilebench in the guest, one boot per
# configuration and repetition, BENCH_FB_RUNTIME seconds each. The daemon's
# --metrics-file shows how many maps each boot made. (QEMU 11.1.3 maps no
# range past a file's end, so the many-small-file personalities cannot use
# the window: docs/dax.md.)
#
# Output: bench/results/dax-<date>-<rev>/{report.md, plot.png, env.txt,
# raw.tar.xz}; raw/ holds fio's JSON per config/rep/job, the CPU readings and
# the memory readings; bench/dax_report.py DIR remakes the report.
#
# Environment: BENCH_REPS (2), BENCH_SECS (10), BENCH_FILE_MIB (256),
# BENCH_SHARED_MIB (512), BENCH_DAX_WINDOW (1G), BENCH_CONFIGS (all three),
# BENCH_FIO (1; 0 skips part 1), BENCH_MEMORY (1; 0 skips part 2),
# BENCH_FILEBENCH (the personalities; empty skips part 3), BENCH_FB_RUNTIME
# (BENCH_SECS), XVFS_GUEST_KERNEL (6.12), XVFS_ACCEL.
# Holds /tmp/xvfs-vm.lock for every VM run.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/qemu-profile.sh
. "$HERE/../vmm-config/qemu-profile.sh"

export XVFS_QEMU=11.1
REPS=${BENCH_REPS:-2}
SECS=${BENCH_SECS:-10}
FILE_MIB=${BENCH_FILE_MIB:-256}
SHARED_MIB=${BENCH_SHARED_MIB:-512}
WINDOW=${BENCH_DAX_WINDOW:-1G}
CONFIGS=${BENCH_CONFIGS:-dax cache-auto cache-always}
XVFSD=$XVFS_ROOT/host/target/release/xvirtiofsd
PYTHON=${PYTHON:-/usr/bin/python3}
WORK=$XVFS_ROOT/build/bench-dax
OUT=$HERE/results/dax-$(date +%Y%m%d-%H%M%S)-$(git -C "$XVFS_ROOT" describe --always --dirty 2>/dev/null || echo norev)
FB_LIST=${BENCH_FILEBENCH-rnd-rd-1th-1f-4k rnd-rd-1th-1f-128k seq-rd-1th-1f-1m rnd-wr-1th-1f-4k rnd-wr-1th-1f-128k}
FB_RUNTIME=${BENCH_FB_RUNTIME:-$SECS}
JOBS="mmap-randread-4k mmap-randread-64k mmap-randwrite-4k mmap-randwrite-64k psync-randread-4k psync-randread-64k psync-randwrite-4k psync-randwrite-64k"

# The environment of run-vm for configuration CFG.
vm_env() {
    case "$1" in
        dax) echo "XVFS_DAX=$WINDOW DAEMON_ARGS=--cache=auto" ;;
        cache-auto) echo "DAEMON_ARGS=--cache=auto" ;;
        cache-always) echo "DAEMON_ARGS=--cache=always" ;;
        *) die "unknown configuration $1" ;;
    esac
}

# The guest's part 1: every job on /mnt/shared/data.bin, JSON to out/.
guest_fio_script() {
    local job engine rw bs
    echo "mkdir -p /mnt/shared/out"
    for job in $JOBS; do
        IFS=- read -r engine rw bs <<<"$job"
        echo "sync; echo 3 >/proc/sys/vm/drop_caches"
        echo "fio --name=$job --filename=/mnt/shared/data.bin --size=${FILE_MIB}m --rw=$rw --bs=$bs --ioengine=$engine --runtime=$SECS --time_based --numjobs=1 --output-format=json --output=/mnt/shared/out/$job.json >/dev/null 2>/mnt/shared/out/$job.err || echo \"fio $job failed\""
    done
    echo "grep -q ' /mnt/shared virtiofs .*dax' /proc/mounts && echo mount-dax || echo mount-plain"
}

# run_fio CFG REP: one boot of CFG running every job.
run_fio() {
    local cfg=$1 rep=$2 share=$WORK/share-$1 raw=$OUT/raw/$1/rep$2 rc=0 pid start end
    mkdir -p "$raw"
    rm -rf "$share/out"
    cat "$share/data.bin" >/dev/null
    guest_fio_script >"$share/fio.sh"
    (
        # The daemon's CPU time at its start and end (run-vm writes its pid).
        for _ in $(seq 1 600); do [ -s "$raw/vm/daemon.pid" ] && break; sleep 0.1; done
        pid=$(cat "$raw/vm/daemon.pid" 2>/dev/null || true)
        [ -n "$pid" ] || exit 0
        start=$(cpu_seconds "$pid")
        end=$start
        while [ -d "/proc/$pid" ]; do
            end=$(cpu_seconds "$pid")
            [ "$end" = - ] && break
            echo "$start $end" >"$raw/daemon-cpu"
            sleep 0.5
        done
    ) &
    local watcher=$!
    # shellcheck disable=SC2046 # the configuration's variables, word by word
    env $(vm_env "$cfg") SHARE="$share" XVFS_RUNDIR="$raw/vm" XVFS_TIMEOUT=$((600 + 16 * SECS)) \
        flock /tmp/xvfs-vm.lock "$XVFS_ROOT/vmm-config/run-vm" --cmd 'sh /mnt/shared/fio.sh' \
        >"$raw/guest.out" 2>"$raw/vm.log" || rc=$?
    wait "$watcher" || true
    cp -r "$share/out/." "$raw/" 2>/dev/null || true
    [ "$rc" -eq 0 ] || say "$cfg rep $rep: run-vm exited $rc (log $raw/vm.log)"
    return 0
}

# run_filebench CFG REP: one boot of CFG running the Filebench personalities.
run_filebench() {
    local cfg=$1 rep=$2 share=$WORK/share-$1 raw=$OUT/raw/filebench/$1/rep$2 rc=0 cache=auto n
    [ "$cfg" != cache-always ] || cache=always
    mkdir -p "$raw"
    rm -rf "$share/fb-out" "$share/fb-work"
    # shellcheck disable=SC2086 # one personality per word
    printf '%s\n' $FB_LIST >"$share/fb-list.txt"
    n=$(wc -l <"$share/fb-list.txt")
    # shellcheck disable=SC2046 # the configuration's variables, word by word
    env $(vm_env "$cfg") DAEMON_ARGS="--cache=$cache --metrics-file $raw/metrics.json" \
        SHARE="$share" XVFS_RUNDIR="$raw/vm" XVFS_TIMEOUT=$((300 + n * (FB_RUNTIME + 120))) \
        flock /tmp/xvfs-vm.lock "$XVFS_ROOT/vmm-config/run-vm" --cmd \
        "/opt/xvfs/bin/xvfs-bench-run --runner /opt/xvfs/bin/xfilebench --workloads /opt/xvfs/workloads --list /mnt/shared/fb-list.txt --vars /opt/xvfs/workloads/scale/here.vars --dir /mnt/shared/fb-work --out /mnt/shared/fb-out --runtime $FB_RUNTIME --drop /opt/xvfs/bin/xvfs-drop-caches" \
        >"$raw/guest.out" 2>"$raw/vm.log" || rc=$?
    cp -r "$share/fb-out/." "$raw/" 2>/dev/null || true
    rm -rf "$share/fb-work"
    [ "$rc" -eq 0 ] || say "filebench: $cfg rep $rep: run-vm exited $rc (log $raw/vm.log)"
    return 0
}

# used_kib: MemTotal - MemFree (page cache included), in KiB.
used_kib() {
    awk '/^MemTotal:/ {t = $2} /^MemFree:/ {f = $2} END {print t - f}' /proc/meminfo
}

# run_memory MODE: two guests read the same file; the host's memory in use
# before and once both have read it.
run_memory() {
    local mode=$1 share=$WORK/share-memory raw=$OUT/raw/memory-$1 before after i pids=() env
    mkdir -p "$raw"
    rm -f "$share"/ready-* "$share/stop"
    env=$(vm_env "$([ "$mode" = dax ] && echo dax || echo cache-auto)")
    sync
    echo 3 >/proc/sys/vm/drop_caches
    sleep 1
    before=$(used_kib)
    for i in a b; do
        # shellcheck disable=SC2046,SC2086 # the configuration's variables, word by word
        env $env SHARE="$share" XVFS_RUNDIR="$raw/vm-$i" MEM=1G XVFS_TIMEOUT=600 \
            "$XVFS_ROOT/vmm-config/run-vm" --cmd "cat /mnt/shared/shared.bin >/dev/null; echo \"guest-cached-kib \$(awk '/^Cached:/ {print \$2}' /proc/meminfo)\"; touch /mnt/shared/ready-$i; while [ ! -e /mnt/shared/stop ]; do sleep 0.2; done" \
            >"$raw/guest-$i.out" 2>"$raw/vm-$i.log" &
        pids+=($!)
    done
    for _ in $(seq 1 3000); do
        [ -e "$share/ready-a" ] && [ -e "$share/ready-b" ] && break
        sleep 0.2
    done
    sleep 2
    after=$(used_kib)
    echo "$before $after" >"$raw/used-kib"
    grep -E '^(Shmem|Cached):' /proc/meminfo >"$raw/meminfo-after"
    touch "$share/stop"
    wait "${pids[@]}" || true
}

write_env() {
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "revision: $(git -C "$XVFS_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
        echo "qemu: $("$(xvfs_qemu_bin 11.1)" --version 2>/dev/null | head -1)"
        echo "guest kernel: $(cat "$(dirname "$(readlink -f "$(xvfs_guest_dir "${XVFS_GUEST_KERNEL:-6.12}")/vmlinux")")/package" 2>/dev/null)"
        echo "accelerator: ${XVFS_ACCEL:-as run-vm chooses (tcg on kvm_pvm)}"
        echo "host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"
        echo "xvirtiofsd: $("$XVFSD" --version | head -1)"
        echo "window: $WINDOW; data file: $FILE_MIB MiB; shared file: $SHARED_MIB MiB"
        echo "fio: $SECS s per job, $REPS repetitions; configurations: $CONFIGS"
        echo "filebench: ${FB_LIST:-none} ($FB_RUNTIME s each, scale here)"
    } >"$OUT/env.txt"
}

# each_run PART RUN: RUN CFG REP for every repetition and configuration;
# repetitions are outermost and alternate the configurations' order.
each_run() {
    local rep cfg order
    for rep in $(seq 1 "$REPS"); do
        order=$CONFIGS
        [ $((rep % 2)) -eq 1 ] || order=$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' ')
        for cfg in $order; do
            say "$1: rep $rep/$REPS, $cfg"
            "$2" "$cfg" "$rep"
        done
    done
}

main() {
    local cfg
    [ "$(id -u)" -eq 0 ] || die "bench-dax drops the host's caches: run it as root"
    [ -x "$XVFSD" ] || die "$XVFSD not built; run 'make build'"
    "$XVFS_ROOT/vmm-config/runtimes.sh" qemu 11.1 >/dev/null
    mkdir -p "$OUT/raw" "$WORK"
    say "results in $OUT"
    for cfg in $CONFIGS; do
        mkdir -p "$WORK/share-$cfg"
        [ "$(stat -c %s "$WORK/share-$cfg/data.bin" 2>/dev/null || echo 0)" -eq $((FILE_MIB << 20)) ] ||
            head -c $((FILE_MIB << 20)) /dev/urandom >"$WORK/share-$cfg/data.bin"
    done
    [ "${BENCH_FIO:-1}" != 1 ] || each_run fio run_fio
    [ -z "$FB_LIST" ] || each_run filebench run_filebench
    if [ "${BENCH_MEMORY:-1}" = 1 ]; then
        mkdir -p "$WORK/share-memory"
        [ "$(stat -c %s "$WORK/share-memory/shared.bin" 2>/dev/null || echo 0)" -eq $((SHARED_MIB << 20)) ] ||
            head -c $((SHARED_MIB << 20)) /dev/urandom >"$WORK/share-memory/shared.bin"
        for cfg in no-dax dax; do
            say "memory: two guests, $cfg"
            (
                flock 9
                run_memory "$cfg"
            ) 9>/tmp/xvfs-vm.lock
        done
    fi
    write_env
    tar --sort=name --owner=0 --group=0 --numeric-owner -C "$OUT" -cJf "$OUT/raw.tar.xz" raw
    "$PYTHON" "$HERE/dax_report.py" "$OUT"
    rm -rf "$OUT/raw"
    say "report: $OUT/report.md"
}

main "$@"
