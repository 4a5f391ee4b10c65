#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test (and `make upgrade-demo`): live upgrade under I/O.
#
# The guest runs, all at once, on the share: a steady stream of small writes
# (fio, 200 per second, with a per-request completion log), fio runs with
# crc32c data verification one after the other, and a shell loop that creates,
# appends to, renames and deletes files; it also keeps a file open from the
# start. Meanwhile the host upgrades the daemon XVFS_UPGRADES times (default
# 20), alternating between two builds whose --version differ, then tries five
# upgrades that must fail (the new binary exits at start, receives a corrupt
# or newer-format state, answers garbage, dies midway) with the running daemon
# serving on. Checked: every upgrade's result and the version and connection
# it leaves; zero I/O errors in the guest; every verification passed; every
# file the loop kept is on the host with its content; the early-opened file
# still reads through its descriptor. Printed: the guest-visible pause per
# upgrade: the gap of the steady stream that spans the daemon's own pause,
# found through a clock marker (the serving process stopped for 400 ms
# before the upgrades).
# A second boot repeats a few upgrades with a daemon started with --fd, as
# libvirt starts it.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"

vmt_init upgrade
UPGRADES=${XVFS_UPGRADES:-20}
BIN_DIR=$VMT_DIR/bin

# Two builds with different --version (the second tagged "+b"). The second
# also carries the failure hooks (XVFS_UPGRADE_FAULT, feature fault-injection)
# the fault tests below use; the first, like every release build, has none.
# The plain build comes last so that host/target/release holds it.
build_pair() {
    local release=${CARGO_TARGET_DIR:-$XVFS_ROOT/host/target}/release
    mkdir -p "$BIN_DIR"
    (cd "$XVFS_ROOT/host" &&
        XVFS_BUILD_TAG=b cargo build -q --release -p xvirtiofsd --features fault-injection)
    cp "$release/xvirtiofsd" "$BIN_DIR/xvirtiofsd-b"
    (cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)
    cp "$release/xvirtiofsd" "$BIN_DIR/xvirtiofsd-a"
}
build_pair
VERSION_A=$("$BIN_DIR/xvirtiofsd-a" --version | head -n 1 | awk '{print $2}')
VERSION_B=$("$BIN_DIR/xvirtiofsd-b" --version | head -n 1 | awk '{print $2}')
assert_ok "the two builds report different versions ($VERSION_A, $VERSION_B)" test "$VERSION_A" != "$VERSION_B"

GUEST_SCRIPT=$WORKLOAD_GUEST_SCRIPT

export XVD=$BIN_DIR/xvirtiofsd-a
status_field() { vmt_status "$@"; }
successor_args() { vmt_successor_args "$(vmt_status "$1" pid)"; }

# The host side of the first boot; its assertions go to a file read afterwards
# (this runs in the background while the guest runs).
host_side() {
    local share=$1 ctl=$2 n bin want rc conn0 pid
    local -a sargs
    workload_wait_started "$share" || { echo "FAILCHECK guest never started"; touch "$share/done"; return; }
    conn0=$(status_field "$ctl" connection)
    # A clock marker for the pause attribution: the serving process stopped
    # for 400 ms, once the stream writes.
    workload_wait_streaming "$share" || echo "FAILCHECK the steady stream never wrote"
    pid=$(status_field "$ctl" serving_pid)
    sleep 1
    stop=$(date +%s%3N)
    kill -STOP "$pid"
    sleep 0.4
    kill -CONT "$pid"
    echo "MARK $stop $(date +%s%3N)" >"$VMT_DIR/mark.txt"
    sleep 1
    for n in $(seq 1 "$UPGRADES"); do
        if [ $((n % 2)) -eq 1 ]; then bin=$BIN_DIR/xvirtiofsd-b want=$VERSION_B; else bin=$BIN_DIR/xvirtiofsd-a want=$VERSION_A; fi
        rc=0
        mapfile -t sargs < <(successor_args "$ctl")
        "$BIN_DIR/xvirtiofsd-a" upgrade --control "$ctl" --binary "$bin" -- "${sargs[@]}" \
            >>"$VMT_DIR/upgrades.log" 2>&1 || rc=$?
        echo "CHECK upgrade-$n-rc 0 $rc"
        echo "CHECK upgrade-$n-version $want $(status_field "$ctl" version)"
        sleep 0.3
    done
    echo "CHECK upgrades-counted $UPGRADES $(status_field "$ctl" upgrades)"
    echo "CHECK same-connection $conn0 $(status_field "$ctl" connection)"
    for fault in exit-at-start corrupt-state newer-format garbage die-midway; do
        pid=$(status_field "$ctl" pid)
        rc=0
        mapfile -t sargs < <(successor_args "$ctl")
        XVFS_UPGRADE_FAULT=$fault "$BIN_DIR/xvirtiofsd-a" upgrade --control "$ctl" \
            --binary "$BIN_DIR/xvirtiofsd-b" --timeout 20 -- "${sargs[@]}" \
            >>"$VMT_DIR/failures.log" 2>&1 || rc=$?
        echo "CHECK fault-$fault-refused 1 $rc"
        echo "CHECK fault-$fault-same-daemon $pid $(status_field "$ctl" pid)"
        sleep 0.3
    done
    touch "$share/done"
}

SHARE=$VMT_DIR/share
CTL=$VMT_DIR/ctl.sock
workload_prepare "$SHARE"
host_side "$SHARE" "$CTL" >"$VMT_DIR/host-side.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON=$BIN_DIR/xvirtiofsd-a DAEMON_ARGS="--control $CTL" XVFS_TIMEOUT=900 \
    vmt_guest "$SHARE" "$GUEST_SCRIPT" "$VMT_DIR/guest.out" || rc=$?
touch "$SHARE/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "guest script exit status"

# Host-side results.
vmt_checks "$VMT_DIR/host-side.txt"

# Guest-side results.
workload_check "$VMT_DIR/guest.out" "$SHARE" "the upgrades"
# (Not the largest gaps of the stream: the marker is one, and under TCG the
# guest alone makes dozens above 10 ms.)
if [ -s "$VMT_DIR/mark.txt" ]; then
    workload_attributed_pause "$SHARE" "$VMT_DIR/run/daemon.log" "$VMT_DIR/mark.txt" \
        "$UPGRADES" upgrade "$VMT_DIR/pause.txt"
    pass "pause per upgrade measured ($(cat "$VMT_DIR/pause.txt"))"
else
    fail "no clock marker for the pause per upgrade"
fi
# Each successor proved the inodes inside the share before the pause (the
# predecessor sent them on `preload`), so the pause only restores tables.
# (The log also has the lines of failure-test successors that got the state.)
preloaded=$(grep -c "inodes proven inside the share before the pause" "$VMT_DIR/run/daemon.log")
assert_eq 0 "$(grep -c "upgrade: no preload" "$VMT_DIR/run/daemon.log")" \
    "no successor went without the preload"
assert_ok "every successor preloaded the inodes before the pause ($preloaded)" \
    test "$preloaded" -ge "$UPGRADES"

# Second boot: a daemon started with --fd, as libvirt does, under a stand-in
# for systemd's notification socket (NOTIFY_SOCKET, as xvirtiofsd@.service
# sets it): every datagram is logged, one per line.
SHARE2=$VMT_DIR/share-fd
CTL2=$VMT_DIR/ctl-fd.sock
NOTIFY_LOG=$VMT_DIR/notify.log
export NOTIFY_SOCKET=$VMT_DIR/notify.sock
python3 - "$NOTIFY_SOCKET" "$NOTIFY_LOG" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as log:
    while True:
        log.write(s.recv(4096).decode().replace("\n", " ") + "\n")
        log.flush()
PY
NOTIFY_PID=$!
workload_prepare "$SHARE2"
(
    workload_wait_started "$SHARE2" || { touch "$SHARE2/done"; exit 0; }
    for n in 1 2 3; do
        rc=0
        mapfile -t sargs < <(successor_args "$CTL2")
        "$BIN_DIR/xvirtiofsd-a" upgrade --control "$CTL2" --binary "$BIN_DIR/xvirtiofsd-b" \
            -- "${sargs[@]}" >>"$VMT_DIR/upgrades-fd.log" 2>&1 || rc=$?
        echo "CHECK fd-upgrade-$n-rc 0 $rc"
        echo "PID $n $(status_field "$CTL2" pid)"
        sleep 0.3
    done
    touch "$SHARE2/done"
) >"$VMT_DIR/host-side-fd.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON="$XVFS_ROOT/tests/vm/fd-launcher.py" XVFS_REAL_DAEMON=$BIN_DIR/xvirtiofsd-a \
    DAEMON_ARGS="--control $CTL2" XVFS_TIMEOUT=600 \
    vmt_guest "$SHARE2" "$GUEST_SCRIPT" "$VMT_DIR/guest-fd.out" || rc=$?
touch "$SHARE2/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "--fd daemon: guest script exit status"
vmt_checks "$VMT_DIR/host-side-fd.txt"
kill "$NOTIFY_PID" 2>/dev/null || true
wait "$NOTIFY_PID" 2>/dev/null || true
unset NOTIFY_SOCKET
assert_ok "service manager: READY=1 first, before the front-end connected" \
    bash -c "head -n 1 '$NOTIFY_LOG' | grep -q '^READY=1 STATUS=serving '"
for n in 1 2 3; do
    pid=$(awk -v n="$n" '$1 == "PID" && $2 == n {print $3}' "$VMT_DIR/host-side-fd.txt")
    assert_ok "service manager: MAINPID=$pid (the daemon of upgrade $n) announced" \
        grep -q "^MAINPID=${pid:-none} READY=1 " "$NOTIFY_LOG"
done
out=$VMT_DIR/guest-fd.out
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$out" | head -n 1; }
assert_eq 0 "$(field loop-errors)" "--fd daemon: shell loop without errors"
assert_eq 0 "$(field verify-failures)" "--fd daemon: verification passed"
assert_eq before "$(field kept-fd-content)" "--fd daemon: early-opened file still reads"

vmt_summary
