#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench-daemon: xvirtiofsd against upstream virtiofsd and native system
# calls, measured with bench/loadgen (no VM: loadgen is the VMM and the guest).
#
# For every case (workload x queues x client threads) and every back-end
# variant it runs loadgen, REPS times, repetitions outermost so that drift
# hits every variant alike, and writes
#   bench/results/daemon-<date>-<rev>/raw/<case>__<variant>__r<N>.json
# packs raw/ and loadgen.log (the runs' stderr) into raw.tar.xz there, then
# bench/daemon_report.py turns them into report.md (medians, ratios, targets
# with PASS/MISS) and plot.png; run on that directory it remakes them.
#
# Variants: xv-never / xv-adaptive (xvirtiofsd --poll never|adaptive; when
# the daemon has no --poll flag, a single "xv" variant runs as is and the
# report says so), virtiofsd (1 request queue only), native (host syscalls),
# and virtiofsd-aa: the same virtiofsd command once more, run first in the
# case (virtiofsd runs last but one), as an A/A control: its ratio to
# virtiofsd is what this host's noise alone makes of two equal back-ends.
#
# Then the scaling table: 4 KiB reads (queue depth 1 per client) with 1, 2
# and 4 client threads in total, against xvirtiofsd with 1, 2, 4 and 8
# request queues (clients spread round-robin over them; both polling
# variants) and against virtiofsd with 1 queue, as is and with a thread pool
# of 1, 2 and 4 threads (--thread-pool-size): raw/scaling-c<T>__<variant>.
#
# Environment:
#   BENCH_SECS (3)       measured seconds per run
#   BENCH_WARMUP (0.3)   warm-up seconds per run
#   BENCH_REPS (5)       repetitions (the report uses medians); the variants
#                        of a case run in one order in odd repetitions and
#                        in the reverse order in even ones
#   BENCH_POLL_US (50)   --poll-us for the adaptive variant (the daemon's own
#                        default is 0 on hosts with at most 2 CPUs)
#   BENCH_CASES          space-separated subset of case names (default: all)
#   BENCH_SCALING (1)    0: skip the scaling table
#   BENCH_DIR            shared directory (default build/bench-share)
#   BENCH_HALT_POLL_NS   guest halt-polling window for the run, in ns, on a
#                        host that is itself a VM with the cpuidle-haltpoll
#                        driver (/sys/module/haltpoll/parameters/
#                        guest_halt_poll_ns; the kernel's default is 200000,
#                        some clouds boot with 0); restored afterwards. Unset:
#                        the host as found. Either way the report's header
#                        says what the idle path was: at queue depths 1-8
#                        with polling off, the cost of waking a thread on an
#                        idle vCPU (a HLT exit when halt-polling is off) sets
#                        the rate of both daemons (docs/loadgen.md)
#   VIRTIOFSD            upstream virtiofsd (default /opt/xvirtiofs/virtiofsd/bin/virtiofsd)
#   XVIRTIOFSD           our daemon (default host/target/release/xvirtiofsd)
#   BENCH_BEFORE         an earlier build of xvirtiofsd: every case also runs
#                        it (variants before-never, before-adaptive, one
#                        queue, same options), and the report adds a table of
#                        this build against it beside the A/A band: a change
#                        judged before/after in one run
#
# Machine etiquette: holds /tmp/xvfs-vm.lock for the whole run and waits
# while any QEMU runs, so that VM tests and benchmarks never share the CPUs.
set -euo pipefail

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/../vmm-config/functions.sh"

SECS=${BENCH_SECS:-3}
WARMUP=${BENCH_WARMUP:-0.3}
REPS=${BENCH_REPS:-5}
POLL_US=${BENCH_POLL_US:-50}
SHARE=${BENCH_DIR:-$XVFS_ROOT/build/bench-share}
VIRTIOFSD=${VIRTIOFSD:-/opt/xvirtiofs/virtiofsd/bin/virtiofsd}
XVIRTIOFSD=${XVIRTIOFSD:-$XVFS_ROOT/host/target/release/xvirtiofsd}
LOADGEN=$XVFS_ROOT/host/target/release/loadgen
PYTHON=/usr/bin/python3
SOCK=/tmp/xvfs-bench-$$.sock
HALT_POLL=/sys/module/haltpoll/parameters/guest_halt_poll_ns
HALT_POLL_SAVED=
VM_LOCK=/tmp/xvfs-vm.lock

# case name | loadgen workload options | client threads in total
CASES=(
    "read4k-qd1|--workload read --bs 4k|1"
    "read4k-qd2|--workload read --bs 4k --depth 2|1"
    "read4k-qd4|--workload read --bs 4k --depth 4|1"
    "read4k-qd8|--workload read --bs 4k --depth 8|1"
    "read4k-qd16|--workload read --bs 4k --depth 16|1"
    "read4k-qd64|--workload read --bs 4k --depth 64|1"
    "read1m|--workload read --bs 1m|1"
    "write1m|--workload write --bs 1m|1"
    "getattr|--workload getattr|1"
    "lookup|--workload lookup|1"
    "create|--workload create|1"
    "readdirplus|--workload readdirplus|1"
    "read4k-2thr|--workload read --bs 4k|2"
    "getattr-2thr|--workload getattr|2"
    "read4k-qd1-pollwait|--workload read --bs 4k --wait poll|1"
)

NOTES=()
BEFORE=
XV_VARIANTS=()
PAUSES=0

print_help() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

note() {
    say "NOTE: $*"
    NOTES+=("$*")
}

# Which xvirtiofsd variants this build supports.
detect_variants() {
    local help
    help=$("$XVIRTIOFSD" --help)
    if grep -q -- '--poll ' <<<"$help" || grep -q -- '--poll <' <<<"$help"; then
        XV_VARIANTS=(xv-never xv-adaptive)
        if ! grep -q -- '--poll-us' <<<"$help"; then
            note "xvirtiofsd has --poll but no --poll-us: xv-adaptive runs with the daemon's default window"
        fi
    else
        XV_VARIANTS=(xv)
        note "xvirtiofsd has no --poll flag: variants xv-never and xv-adaptive are SKIPPED; one variant 'xv' runs with the daemon's defaults"
    fi
}

# daemon_cmd VARIANT QUEUES: the back-end command line for loadgen.
daemon_cmd() {
    local v=$1
    local -a common=(--socket-path "$SOCK" --shared-dir "$SHARE" --cache auto --sandbox none)
    case "$v" in
        xv) echo "$XVIRTIOFSD ${common[*]} --log-level warn" ;;
        xv-never) echo "$XVIRTIOFSD ${common[*]} --log-level warn --poll never" ;;
        xv-adaptive)
            if "$XVIRTIOFSD" --help | grep -q -- '--poll-us'; then
                echo "$XVIRTIOFSD ${common[*]} --log-level warn --poll adaptive --poll-us $POLL_US"
            else
                echo "$XVIRTIOFSD ${common[*]} --log-level warn --poll adaptive"
            fi
            ;;
        before-never) echo "$BEFORE ${common[*]} --log-level warn --poll never" ;;
        before-adaptive) echo "$BEFORE ${common[*]} --log-level warn --poll adaptive --poll-us $POLL_US" ;;
        virtiofsd | virtiofsd-aa) echo "$VIRTIOFSD ${common[*]} --log-level error" ;;
        virtiofsd-pool*) echo "$VIRTIOFSD ${common[*]} --log-level error --thread-pool-size ${v#virtiofsd-pool}" ;;
        *) die "unknown variant $v" ;;
    esac
}

# run_one CASE VARIANT QUEUES THREADS_PER_QUEUE REP WORKLOAD_OPTS...
run_one() {
    local case=$1 variant=$2 queues=$3 tpq=$4 rep=$5
    shift 5
    local tag=$variant
    [ "$variant" = native ] || tag=$variant-${queues}q${tpq}t
    local out=$RAW/${case}__${tag}__r${rep}.json
    local -a lg=(--dir "$SHARE" --threads "$tpq" --duration "$SECS" --warmup "$WARMUP"
        --label "$case/$tag" --output "$out" "$@")
    if [ "$variant" = native ]; then
        measure "$case" "$tag" "$rep" "$out" "$LOADGEN" native "${lg[@]}"
    else
        local -a daemon
        read -r -a daemon <<<"$(daemon_cmd "$variant")"
        measure "$case" "$tag" "$rep" "$out" \
            "$LOADGEN" run --socket "$SOCK" --queues "$queues" "${lg[@]}" -- "${daemon[@]}"
    fi
}

# run_scaling CLIENTS VARIANT QUEUES REP: 4 KiB reads, CLIENTS threads in
# total over QUEUES request queues.
run_scaling() {
    local clients=$1 variant=$2 queues=$3 rep=$4 case=scaling-c$1
    local tag=$variant-${queues}q
    local out=$RAW/${case}__${tag}__r${rep}.json
    local -a daemon
    read -r -a daemon <<<"$(daemon_cmd "$variant")"
    measure "$case" "$tag" "$rep" "$out" "$LOADGEN" run --socket "$SOCK" --queues "$queues" \
        --clients "$clients" --dir "$SHARE" --workload read --bs 4k --duration "$SECS" \
        --warmup "$WARMUP" --label "$case/$tag" --output "$out" -- "${daemon[@]}"
}

# measure CASE TAG REP OUT COMMAND...: runs COMMAND (which writes OUT) when
# no VM runs; a run that a QEMU overlapped is measured again.
measure() {
    local case=$1 tag=$2 rep=$3 out=$4 attempt
    shift 4
    for attempt in 1 2 3; do
        wait_for_no_vm
        printf 'xvfs: [%s] %-20s %-22s rep %s\n' "$(date +%T)" "$case" "$tag" "$rep" >&2
        if ! "$@" 2>>"$LOG"; then
            note "run failed: $case $tag rep $rep (see $LOG, in raw.tar.xz after the run)"
            rm -f "$out"
            return 0
        fi
        # A VM that started meanwhile spoils the run: measure it again.
        pgrep qemu >/dev/null || return 0
        say "a QEMU started during the run: discarding it (attempt $attempt)"
        rm -f "$out"
    done
    note "$case $tag rep $rep: dropped, a QEMU kept starting during it"
}

# The scaling runs of one repetition (variants in the repetition's order).
scaling_rep() {
    local rep=$1 clients v q
    for clients in 1 2 4; do
        while read -r v q; do
            run_scaling "$clients" "$v" "$q" "$rep"
        done < <(scaling_variants | in_rep_order "$rep")
    done
}

# The scaling table's (variant queues) pairs.
scaling_variants() {
    local v q
    for v in "${XV_VARIANTS[@]}"; do
        for q in 1 2 4 8; do
            echo "$v $q"
        done
    done
    for v in virtiofsd virtiofsd-pool1 virtiofsd-pool2 virtiofsd-pool4; do
        echo "$v 1"
    done
}

# The variants of one case: (variant queues threads-per-queue) triples.
case_variants() {
    local threads=$1 pollwait=$2 v
    echo "virtiofsd-aa 1 $threads"
    for v in "${XV_VARIANTS[@]}"; do
        echo "$v 1 $threads"
        [ "$threads" -lt 2 ] || echo "$v 2 1"
    done
    echo "virtiofsd 1 $threads"
    if [ -n "$BEFORE" ]; then
        echo "before-never 1 $threads"
        echo "before-adaptive 1 $threads"
    fi
    [ "$pollwait" = yes ] || echo "native 0 $threads"
}

# in_rep_order REP: its input as is in odd repetitions, reversed in even ones.
in_rep_order() {
    if [ $(($1 % 2)) -eq 1 ]; then cat; else tac; fi
}

# The number of cases BENCH_CASES keeps.
count_wanted() {
    local entry case n=0
    for entry in "${CASES[@]}"; do
        case=${entry%%|*}
        if wanted "$case"; then n=$((n + 1)); fi
    done
    echo "$n"
}

# progress DONE STEPS WHAT: one line per step of the ~30-minute run, with
# the time so far and an estimate of the rest (from the steps done; the
# first has none).
progress() {
    local done=$1 steps=$2 what=$3 spent=$((SECONDS - t0)) left=''
    [ "$done" -eq 0 ] || left=", about $(((spent * (steps - done) / done + 59) / 60)) min left"
    say "[$((done + 1))/$steps] $what (${spent} s so far$left)"
}

wanted() {
    [ -z "${BENCH_CASES:-}" ] && return 0
    local c
    for c in $BENCH_CASES; do
        [ "$c" = "$1" ] && return 0
    done
    return 1
}

wait_for_quiet_host() {
    exec {LOCK_FD}>"$VM_LOCK"
    if ! flock -n "$LOCK_FD"; then
        say "waiting for $VM_LOCK (a VM test holds it)"
        flock -w 1800 "$LOCK_FD" || die "$VM_LOCK still held after 30 min"
    fi
    wait_for_no_vm
}

# Never measure beside a VM (other sessions boot them without the lock):
# before every run, wait until no QEMU is left.
wait_for_no_vm() {
    local waited=0
    while pgrep qemu >/dev/null; do
        if [ "$waited" -eq 0 ]; then
            say "a QEMU is running: pausing until it ends"
            PAUSES=$((PAUSES + 1))
        fi
        waited=$((waited + 2))
        [ "$waited" -lt 3600 ] || die "QEMU still running after 60 min; not benchmarking beside a VM"
        sleep 2
    done
}

# BENCH_HALT_POLL_NS is refused before anything is created or changed.
check_idle_knob() {
    local ns=${BENCH_HALT_POLL_NS:-}
    [ -n "$ns" ] || return 0
    [[ "$ns" =~ ^[0-9]+$ ]] || die "BENCH_HALT_POLL_NS=$ns: not a number of nanoseconds"
    [ -w "$HALT_POLL" ] || die "BENCH_HALT_POLL_NS is set but $HALT_POLL is not writable (no cpuidle-haltpoll guest driver, or not root)"
}

# BENCH_HALT_POLL_NS: set the guest halt-polling window (saved for restore_idle).
set_idle() {
    local ns=${BENCH_HALT_POLL_NS:-}
    [ -n "$ns" ] || return 0
    HALT_POLL_SAVED=$(cat "$HALT_POLL")
    echo "$ns" >"$HALT_POLL" || die "cannot write $ns to $HALT_POLL"
    say "guest halt-polling window $ns ns for the run (was $HALT_POLL_SAVED)"
}

restore_idle() {
    [ -z "$HALT_POLL_SAVED" ] || echo "$HALT_POLL_SAVED" >"$HALT_POLL" || true
}

# One line on how an idle CPU of this host waits for its next wake-up.
idle_state() {
    local dir=/sys/devices/system/cpu/cpuidle driver governor poll
    driver=$(cat "$dir/current_driver" 2>/dev/null || echo none)
    governor=$(cat "$dir/current_governor" 2>/dev/null || echo none)
    printf 'cpuidle driver %s, governor %s' "$driver" "$governor"
    if [ -r "$HALT_POLL" ]; then
        poll=$(cat "$HALT_POLL")
        printf ', guest halt-polling %s ns' "$poll"
        if [ -n "$HALT_POLL_SAVED" ]; then
            printf ' (set for this run by BENCH_HALT_POLL_NS; %s ns before and after)' "$HALT_POLL_SAVED"
        else
            printf ' (as found)'
        fi
    fi
}

main() {
    case "${1:-}" in
        -h | --help)
            print_help
            return 0
            ;;
    esac
    need git flock pgrep sha256sum tar xz
    [ -x "$LOADGEN" ] || die "$LOADGEN missing: run 'make build'"
    [ -x "$XVIRTIOFSD" ] || die "$XVIRTIOFSD missing: run 'make build'"
    [ -x "$VIRTIOFSD" ] || die "$VIRTIOFSD missing: run 'make deps'"
    "$PYTHON" -c 'import matplotlib' 2>/dev/null || die "python3-matplotlib missing: run 'make deps'"
    if [ -n "${BENCH_BEFORE:-}" ]; then
        [ -x "$BENCH_BEFORE" ] || die "BENCH_BEFORE=$BENCH_BEFORE: not an executable"
        "$BENCH_BEFORE" --help | grep -q -- '--poll-us' ||
            die "BENCH_BEFORE=$BENCH_BEFORE: no --poll-us (older than the variants it would run)"
    fi
    check_idle_knob

    local rev date
    rev=$(git -C "$XVFS_ROOT" describe --always --dirty --abbrev=10)
    date=$(date +%Y%m%d-%H%M%S)
    OUT=$XVFS_ROOT/bench/results/daemon-$date-$rev
    RAW=$OUT/raw
    LOG=$OUT/loadgen.log
    mkdir -p "$RAW" "$SHARE"
    : >"$LOG"
    # Private copies: a rebuild during the run must not change what is measured.
    BIN_DIR=$(mktemp -d /tmp/xvfs-bench-bin.XXXXXX)
    trap 'rm -f "$SOCK"; rm -rf "$BIN_DIR"; restore_idle' EXIT
    local src_xv=$XVIRTIOFSD
    cp "$XVIRTIOFSD" "$BIN_DIR/xvirtiofsd"
    cp "$LOADGEN" "$BIN_DIR/loadgen"
    if [ -n "${BENCH_BEFORE:-}" ]; then
        cp "$BENCH_BEFORE" "$BIN_DIR/xvirtiofsd-before"
        BEFORE=$BIN_DIR/xvirtiofsd-before
    fi
    XVIRTIOFSD=$BIN_DIR/xvirtiofsd
    LOADGEN=$BIN_DIR/loadgen

    wait_for_quiet_host
    set_idle
    detect_variants
    say "results: $OUT"
    say "$REPS repetitions x ${SECS}s (+${WARMUP}s warm-up) per run"
    "$LOADGEN" prepare --dir "$SHARE"

    local t0=$SECONDS rep entry case opts threads pollwait v q tpq done=0 steps
    local -a wopts
    steps=$((REPS * ($(count_wanted) + 1)))
    for rep in $(seq 1 "$REPS"); do
        for entry in "${CASES[@]}"; do
            IFS='|' read -r case opts threads <<<"$entry"
            wanted "$case" || continue
            progress "$done" "$steps" "repetition $rep/$REPS: $case"
            done=$((done + 1))
            read -r -a wopts <<<"$opts"
            pollwait=no
            [[ "$opts" == *"--wait poll"* ]] && pollwait=yes
            # Odd repetitions run the variants in one order, even ones in
            # the reverse: a host that drifts during a case favours none.
            while read -r v q tpq; do
                run_one "$case" "$v" "$q" "$tpq" "$rep" "${wopts[@]}"
            done < <(case_variants "$threads" "$pollwait" | in_rep_order "$rep")
        done
        progress "$done" "$steps" "repetition $rep/$REPS: scaling table"
        done=$((done + 1))
        [ "${BENCH_SCALING:-1}" = 0 ] || scaling_rep "$rep"
    done
    say "measured in $((SECONDS - t0)) s"
    [ "$PAUSES" -eq 0 ] || note "paused $PAUSES time(s) while a QEMU ran (no run overlapped a VM; pgrep checked before each run)"

    {
        echo "rev=$rev"
        echo "date=$date"
        echo "secs=$SECS"
        echo "warmup=$WARMUP"
        echo "reps=$REPS"
        echo "poll_us=$POLL_US"
        echo "host=$(nproc) CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
        echo "idle=$(idle_state)"
        echo "xvirtiofsd=$src_xv (sha256 $(sha256sum "$XVIRTIOFSD" | cut -c1-16), copied for the run)"
        echo "virtiofsd=$VIRTIOFSD ($("$VIRTIOFSD" --version 2>/dev/null | head -n 1))"
        [ -z "$BEFORE" ] ||
            echo "before=$BENCH_BEFORE ($("$BEFORE" -V 2>/dev/null | head -n 1), sha256 $(sha256sum "$BEFORE" | cut -c1-16))"
        local n
        for n in "${NOTES[@]}"; do
            echo "note=$n"
        done
    } >"$OUT/meta.txt"
    # One archive instead of hundreds of files in git; the report reads it.
    tar --sort=name --owner=0 --group=0 --numeric-owner -C "$OUT" -cJf "$OUT/raw.tar.xz" raw loadgen.log
    rm -rf "$RAW" "$LOG"
    "$PYTHON" "$XVFS_ROOT/bench/daemon_report.py" "$OUT"
    say "report: $OUT/report.md"
    cat "$OUT/report.md"
}

main "$@"
