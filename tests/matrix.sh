#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The runtime matrix (issue 31, `make test-matrix`): each VM test of
# MATRIX_TESTS on each pair of a QEMU of MATRIX_QEMU and a guest kernel of
# MATRIX_KERNELS (vmm-config/runtimes.sh installs and builds them, cached).
# Prints a table pair x test of passed / FAILED / n/a (with the reason: a test
# that cannot apply to a pair never counts as passed), writes it to
# build/test-logs/matrix-<date>.md and ends with "N passed, M failed"
# (tests, not assertions; n/a in neither). Exits non-zero on any failure.
#
# Environment:
#   MATRIX_QEMU      QEMU versions (default "7.2 10.0 11.1")
#   MATRIX_KERNELS   guest kernels (default "6.1 6.12 7")
#   MATRIX_TESTS     tests/vm/ test names (default: test_ops test_upgrade
#                    test_migrate test_multiqueue test_crash test_options test_locks)
#   MATRIX_TEST_TIMEOUT  seconds one test may take (default 3600)
#   DAEMON and everything the tests read.
# Logs: build/test-logs/matrix/<qemu>-<kernel>-<test>.log, and the daemon,
# QEMU and console logs of that run in <qemu>-<kernel>-<test>.files/.
set -euo pipefail

# shellcheck source=vmm-config/qemu-profile.sh
. "$(dirname "$0")/../vmm-config/qemu-profile.sh"

LOG_DIR=$XVFS_ROOT/build/test-logs
MLOG=$LOG_DIR/matrix
DEFAULT_TESTS="test_ops test_upgrade test_migrate test_multiqueue test_crash test_options test_locks"

print_help() {
    cat <<'HELP'
usage: tests/matrix.sh [--plan]
Runs MATRIX_TESTS for each MATRIX_QEMU x MATRIX_KERNELS pair (see the head of
this file). --plan: install/build nothing, run nothing; print which cells
would run and which are n/a, and why.
HELP
}

# "major.minor" of a qemu --version line.
qemu_numeric() {
    sed -n 's/^QEMU emulator version \([0-9]*\.[0-9]*\).*/\1/p' | head -n 1
}

# Kernel version of an image directory ("7.3.4-1~bpo13+1" -> 7.3).
kernel_numeric() {
    local pkgfile
    pkgfile="$(dirname "$(readlink -f "$1/vmlinux")")/package"
    awk '{print $2}' "$pkgfile" 2>/dev/null | grep -oE '^[0-9]+\.[0-9]+' | head -n 1
}

# version_lt A B: A < B (dotted numbers).
version_lt() {
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$1" ]
}

# not_applicable TEST QEMU_NUM KERNEL_NUM: the reason TEST cannot apply to
# this pair, or nothing. QEMU_NUM / KERNEL_NUM may be the nominal versions
# (--plan) or the installed ones.
not_applicable() {
    local t=$1 q=$2 k=$3
    case "$t" in
        test_migrate)
            # vhost-user-fs is unmigratable before QEMU 8.2 (device-state
            # transfer, VHOST_USER_PROTOCOL_F_DEVICE_STATE).
            if version_lt "$q" 8.2; then
                echo "QEMU $q cannot migrate vhost-user-fs (device state transfer came in 8.2)"
            fi
            ;;
        test_multiqueue)
            # Linux spreads requests over several request queues since 6.10;
            # before, everything goes to the first one and the test's "both
            # queues served" cannot hold.
            if version_lt "$k" 6.10; then
                echo "Linux $k uses one request queue (multi-queue virtio-fs since 6.10)"
            fi
            ;;
    esac
}

# setup_qemu V: install it (cached); sets QVER[V] to its --version line, or
# SETUP_ERR[q-V] to why it cannot be used.
setup_qemu() {
    local v=$1 bin log=$MLOG/setup-qemu-$1.log
    bin=$(xvfs_qemu_bin "$v")
    if [ "$v" != 10.0 ]; then
        "$XVFS_ROOT/vmm-config/runtimes.sh" qemu "$v" >"$log" 2>&1 ||
            { SETUP_ERR[q-$v]="installing QEMU $v failed (log: $log)"; return 0; }
    fi
    if ! QVER[$v]=$("$bin" --version 2>>"$log" | head -n 1) || [ -z "${QVER[$v]}" ]; then
        SETUP_ERR[q-$v]="$bin --version failed (log: $log)"
    fi
}

# setup_kernel V: build the image (cached); sets KVER[V] to its package.
setup_kernel() {
    local v=$1 dir log=$MLOG/setup-kernel-$1.log
    dir=$(xvfs_guest_dir "$v")
    XVFS_GUEST_KERNEL=$v "$XVFS_ROOT/guest-image/build.sh" >"$log" 2>&1 ||
        { SETUP_ERR[k-$v]="building the $v guest failed (log: $log)"; return 0; }
    KVER[$v]=$(cat "$(dirname "$(readlink -f "$dir/vmlinux")")/package")
}

# keep_cell_logs DIR: the daemon, QEMU and console logs the test left in
# build/tests/ (the next test there overwrites them), copied to DIR.
keep_cell_logs() {
    local dest=$1 f
    rm -rf "$dest"
    [ -d "$XVFS_ROOT/build/tests" ] || return 0
    while IFS= read -r f; do
        mkdir -p "$dest/$(dirname "$f")"
        cp "$XVFS_ROOT/build/tests/$f" "$dest/$f"
    done < <(cd "$XVFS_ROOT/build/tests" && find . \( -name 'share*' -o -name host -o -name work \) -prune -o \
        -type f -newer "$MLOG/.cell-start" -size -20M \
        \( -name '*.log' -o -name '*console*' -o -name '*.out' -o -name qemu.cmdline \) -print | sed 's|^\./||')
}

# run_cell Q K T: one test on one pair; sets CELL[Q K T] and the counters.
run_cell() {
    local q=$1 k=$2 t=$3 qn kn why log rc=0 p f key="$1 $2 $3" t0 secs
    if [ -n "${SETUP_ERR[q-$q]:-}" ] || [ -n "${SETUP_ERR[k-$k]:-}" ]; then
        CELL[$key]="FAILED: setup: ${SETUP_ERR[q-$q]:-${SETUP_ERR[k-$k]}}"
        FAILED=$((FAILED + 1))
        return 0
    fi
    qn=$(qemu_numeric <<<"${QVER[$q]}")
    kn=$(kernel_numeric "$(xvfs_guest_dir "$k")")
    why=$(not_applicable "$t" "${qn:-$q}" "${kn:-$k}")
    if [ -n "$why" ]; then
        CELL[$key]="n/a: $why"
        NA=$((NA + 1))
        return 0
    fi
    log=$MLOG/$q-$k-$t.log
    say "matrix: QEMU $q x Linux $k: $t (log: $log)"
    touch "$MLOG/.cell-start"
    t0=$(date +%s)
    XVFS_QEMU=$q XVFS_GUEST_KERNEL=$k timeout -k 30 "${MATRIX_TEST_TIMEOUT:-3600}" \
        "$XVFS_ROOT/tests/vm/$t.sh" >"$log" 2>&1 </dev/null || rc=$?
    secs=$(($(date +%s) - t0))
    keep_cell_logs "$MLOG/$q-$k-$t.files"
    read -r p f < <(test_counts "$log" "$rc")
    if [ "$f" -eq 0 ]; then
        CELL[$key]="passed ($p checks, $secs s)"
        PASSED=$((PASSED + 1))
    else
        CELL[$key]="FAILED ($f of $((p + f)) checks; rc $rc; $secs s)"
        [ "$rc" -ne 124 ] || CELL[$key]="FAILED (timeout after ${MATRIX_TEST_TIMEOUT:-3600} s; $p checks passed)"
        FAILED=$((FAILED + 1))
    fi
    say "matrix: QEMU $q x Linux $k: $t: ${CELL[$key]}"
}

# The Markdown report: one row per pair, one column per test.
report() {
    local q k t row
    echo "# Runtime matrix $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$XVFS_ROOT" describe --always --dirty 2>/dev/null)"
    echo
    echo "Daemon: ${DAEMON:-$XVFS_ROOT/host/target/release/xvirtiofsd}. Logs: build/test-logs/matrix/."
    echo
    for q in "${QEMUS[@]}"; do
        echo "- QEMU $q: ${QVER[$q]:-${SETUP_ERR[q-$q]:-not set up}}"
    done
    for k in "${KERNELS[@]}"; do
        echo "- kernel $k: ${KVER[$k]:-${SETUP_ERR[k-$k]:-not set up}}"
    done
    echo
    row="| QEMU | kernel |"
    for t in "${TESTS[@]}"; do row+=" $t |"; done
    echo "$row"
    row="|---|---|"
    for t in "${TESTS[@]}"; do row+="---|"; done
    echo "$row"
    for q in "${QEMUS[@]}"; do
        for k in "${KERNELS[@]}"; do
            row="| $q | $k |"
            for t in "${TESTS[@]}"; do row+=" ${CELL[$q $k $t]:-not run} |"; done
            echo "$row"
        done
    done
    echo
    echo "$NA n/a (not counted)"
    echo
    echo "Took $(duration $(($(date +%s) - MATRIX_START))) (setting up runtimes and images included)."
    echo
    echo "$PASSED passed, $FAILED failed"
}

# duration SECONDS: "1 h 23 min 45 s".
duration() {
    local s=$1
    if [ "$s" -ge 3600 ]; then
        echo "$((s / 3600)) h $((s % 3600 / 60)) min $((s % 60)) s"
    else
        echo "$((s / 60)) min $((s % 60)) s"
    fi
}

plan() {
    local q k t why
    for q in "${QEMUS[@]}"; do
        for k in "${KERNELS[@]}"; do
            for t in "${TESTS[@]}"; do
                why=$(not_applicable "$t" "$q" "$k")
                printf 'QEMU %-5s Linux %-5s %-16s %s\n' "$q" "$k" "$t" "${why:+n/a: $why}"
            done
        done
    done
}

main() {
    local plan_only='' q k t out
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        --plan) plan_only=1 ;;
        "") ;;
        *) print_help >&2; die "unexpected argument: $1" ;;
    esac
    read -ra QEMUS <<<"${MATRIX_QEMU:-7.2 10.0 11.1}"
    read -ra KERNELS <<<"${MATRIX_KERNELS:-6.1 6.12 7}"
    read -ra TESTS <<<"${MATRIX_TESTS:-$DEFAULT_TESTS}"
    for q in "${QEMUS[@]}"; do xvfs_qemu_bin "$q" >/dev/null; done
    for k in "${KERNELS[@]}"; do xvfs_guest_dir "$k" >/dev/null; done
    for t in "${TESTS[@]}"; do
        [ -x "$XVFS_ROOT/tests/vm/$t.sh" ] || die "no test tests/vm/$t.sh"
    done
    if [ -n "$plan_only" ]; then
        plan
        return 0
    fi
    declare -gA QVER=() KVER=() SETUP_ERR=() CELL=()
    PASSED=0 FAILED=0 NA=0
    MATRIX_START=$(date +%s)
    mkdir -p "$MLOG"
    for q in "${QEMUS[@]}"; do setup_qemu "$q"; done
    for k in "${KERNELS[@]}"; do setup_kernel "$k"; done
    for q in "${QEMUS[@]}"; do
        for k in "${KERNELS[@]}"; do
            for t in "${TESTS[@]}"; do
                run_cell "$q" "$k" "$t"
            done
        done
    done
    out=$LOG_DIR/matrix-$(date +%Y%m%d-%H%M%S).md
    report >"$out"
    echo
    cat "$out"
    say "matrix report: $out"
    [ "$FAILED" -eq 0 ]
}

main "$@"
