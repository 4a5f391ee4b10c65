#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak (make migrate-soak N=100; not part of make test): one running VM moved
# N times, in a cycle of four steps, each with a new QEMU and a new daemon on
# the same directory:
#   1. xvirtiofsd -> xvirtiofsd            (live migration, our format)
#   2. xvirtiofsd -> virtiofsd 1.14        (--migration-target virtiofsd)
#   3. virtiofsd  -> xvirtiofsd            (virtiofsd's format)
#   4. xvirtiofsd -> file -> xvirtiofsd    (snapshot: migrate file:, then a
#                                           restore with -incoming file:)
# while the guest runs fio with crc32c verification, a 200/s request stream,
# keeps one file open for reading and one for appending, and has its cwd in
# the share (tests/vm/vm_pair.sh's guest). Stops at the first step that
# fails. Printed: each step's QEMU downtime (ms; for a snapshot, the time
# from the save's start to the restored guest running), the median and max
# per direction, the guest's results (0 errors, every file intact) and how
# long the soak took. Report: build/test-logs/migrate-soak-<date>.md.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=vmm-config/qemu-profile.sh
. "$XVFS_ROOT/vmm-config/qemu-profile.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"
# shellcheck source=tests/vm/vm_pair.sh
. "$(dirname "$0")/vm_pair.sh"

vmt_init migrate-soak
N=${N:-${XVFS_SOAK:-100}}
VIRTIOFSD=${XVFS_VIRTIOFSD:-/opt/xvirtiofs/virtiofsd/bin/virtiofsd}
QMP=$XVFS_ROOT/tests/vm/qmp.py
xvfs_select_runtime
GUEST_DIR=$XVFS_GUEST_DIR_SELECTED
[ -x "$VIRTIOFSD" ] || { fail "virtiofsd not installed at $VIRTIOFSD (make deps builds it)"; vmt_summary; exit 1; }
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)
REPORT_DIR=$XVFS_ROOT/build/test-logs
mkdir -p "$REPORT_DIR"
REPORT=$REPORT_DIR/migrate-soak-$(date +%Y%m%d-%H%M%S).md
T0=$(date +%s)

# The step that moves the VM away from the host made at step S (1-based,
# the cycle above), and the daemon a host of that step runs.
kind_after() { case $((($1 - 1) % 4 + 1)) in 1) echo x ;; 2) echo v ;; 3 | 4) echo x ;; esac; }

# start_host NAME KIND NEXT: a daemon of KIND (x or v) for host NAME; an x
# whose VM moves next to virtiofsd (step NEXT = 2) writes virtiofsd's format.
start_host() {
    local name=$1 kind=$2 next=$3
    if [ "$kind" = v ]; then
        DAEMON_BIN=$VIRTIOFSD start_daemon "$name" "$SHARE" --migration-mode find-paths
    elif [ $(((next - 1) % 4 + 1)) = 2 ]; then
        start_daemon "$name" "$SHARE" --migration-target virtiofsd
    else
        start_daemon "$name" "$SHARE"
    fi
}

SHARE=$VMT_DIR/share
new_share "$SHARE"
: >"$VMT_DIR/steps.txt"
start_host h0 x 1
start_vm h0
if ! guest_started "$SHARE" h0 "soak"; then
    vmt_summary
    exit 1
fi
cur=h0 kind=x failed=0
for s in $(seq 1 "$N"); do
    step=$(((s - 1) % 4 + 1))
    next_kind=$(kind_after "$s")
    to=h$s
    start_host "$to" "$next_kind" $((s + 1))
    case $step in
        4)
            t0=$(date +%s%3N)
            snapshot "$cur" "$VMT_DIR/vm.state"
            if [[ $RES == completed* ]]; then
                if restore "$to" "$VMT_DIR/vm.state"; then
                    RES="completed $(($(date +%s%3N) - t0))"
                else
                    RES="failed (restore: $(tail -n 1 "$VMT_DIR/$to.qemu.log"))"
                fi
            fi
            dir="snapshot+restore"
            ;;
        *)
            migrate "$cur" "$to"
            dir="$kind->$next_kind"
            ;;
    esac
    echo "$s $dir $RES" >>"$VMT_DIR/steps.txt"
    if [[ $RES != completed* ]]; then
        fail "step $s ($dir): $RES"
        failed=1
        break
    fi
    rm -f "$VMT_DIR/$cur.sock" "$VMT_DIR/$cur.qmp" "$VMT_DIR/$cur.console"
    cur=$to kind=$next_kind
    # Let the guest's workload run a little between moves.
    sleep 1
done
pass "$(grep -c completed "$VMT_DIR/steps.txt") of $N steps completed"
touch "$SHARE/done"
wait_file "$SHARE/results.txt" 240 "${QEMU_PID[$cur]}" || true
python3 "$QMP" "$VMT_DIR/$cur.qmp" quit >/dev/null 2>&1 || true
if [ -s "$SHARE/results.txt" ]; then
    check_guest "$SHARE" "after $N moves"
else
    fail "the guest wrote no results"
fi
ELAPSED=$(($(date +%s) - T0))
SUMMARY=$(python3 - "$VMT_DIR/steps.txt" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, d, res, *rest = line.split()
    if res == "completed":
        by[d].append(int(rest[0]))
for d, v in sorted(by.items()):
    print(f"| {d} | {len(v)} | {statistics.median(v)} | {max(v)} |")
PY
)
{
    echo "# Migration soak, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "$N steps on $("$XVFS_QEMU_BIN" --version | head -n 1), $(basename "$GUEST_DIR"), accelerator ${XVFS_ACCEL:-tcg};"
    echo "xvirtiofsd $("$DAEMON" --version | head -n 1 | cut -d' ' -f2-), $("$VIRTIOFSD" --version 2>&1 | head -n 1)."
    echo "Took $ELAPSED s. Downtime: QEMU's figure for a live migration; for a snapshot, save start to restored guest running."
    echo
    echo "| direction | steps | downtime median (ms) | max (ms) |"
    echo "|---|---|---|---|"
    echo "$SUMMARY"
    echo
    echo "Guest: $(tr '\n' ' ' <"$SHARE/results.txt" 2>/dev/null)"
    echo
    echo "Each step: step direction result ms"
    echo
    sed 's/^/    /' "$VMT_DIR/steps.txt"
} >"$REPORT"
sed -n '1,12p' "$REPORT" | sed 's/^/     /'
say "report: $REPORT; took $ELAPSED s"
cleanup
[ "$failed" = 0 ] || true
vmt_summary
