#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: locks between two guests sharing one directory (-o posix_lock,
# -o flock; issue 13). Two QEMU guests, each with its own xvirtiofsd on the
# same directory, run at once; files in the share (--cache never) pace them.
#
# Phase 1, POSIX record locks (fcntl): guest A takes a write lock and holds
# it; guest B's non-blocking try fails (EAGAIN), F_GETLK reports A's write
# lock, and a host process cannot lock either. B's F_SETLKW waits; while it
# waits, B reads a file through the same (single) request queue; B gets the
# lock only after A lets go.
# Phase 2, flock: A holds an exclusive flock; B's LOCK_NB try fails
# (EWOULDBLOCK), the host's `flock -n` fails, B's blocking flock waits, and
# killing A's holder process (kill -9 in guest A) frees the lock for B.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init locks
SHARE=$VMT_DIR/share
mkdir -p "$SHARE"
echo "read while waiting" >"$SHARE/hello"
gcc -static -O2 -o "$SHARE/lockprobe" "$XVFS_ROOT/tests/vm/lockprobe.c"
export DAEMON_ARGS="-o posix_lock,flock --cache never"

# shellcheck disable=SC2016 # expanded in the guest
GUEST_A='cd /mnt/shared
./lockprobe hold-fcntl f a-ready a-release
./lockprobe hold-flock f a-ready2 never &
p=$!
while [ ! -e kill-a ]; do sleep 0.1; done
kill -9 $p
wait $p || true
echo A-done'

# shellcheck disable=SC2016 # expanded in the guest
GUEST_B='cd /mnt/shared
while [ ! -e a-ready ]; do sleep 0.1; done
echo "try-posix $(./lockprobe try-fcntl f)"
echo "getlk $(./lockprobe getlk f)"
./lockprobe wait-fcntl f >b-got-posix &
w=$!
sleep 1
cat hello >b-read-while-waiting
touch b-waiting
wait $w
while [ ! -e a-ready2 ]; do sleep 0.1; done
echo "try-flock $(./lockprobe try-flock f)"
./lockprobe wait-flock f >b-got-flock &
w=$!
sleep 1
touch b-waiting2
wait $w
echo B-done'

guest() { # NAME CMD: a guest in the background, its own run directory
    SHARE=$SHARE CMD=$2 XVFS_RUNDIR=$VMT_DIR/run-$1 XVFS_TIMEOUT=480 \
        "$XVFS_ROOT/vmm-config/run-vm" >"$VMT_DIR/$1.out" 2>"$VMT_DIR/$1.log" &
}

# wait_for FILE SECONDS [-s]: true once FILE exists (-s: and is not empty).
wait_for() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ -e "$1" ] && { [ "${3:-}" != -s ] || [ -s "$1" ]; } && return 0
        sleep 0.1
    done
    return 1
}

# The host's own try at the lock: 0 when it got it.
host_fcntl() {
    python3 -c '
import fcntl, sys
with open(sys.argv[1], "r+") as f:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit(1)' "$SHARE/f"
}

guest a "$GUEST_A"
PID_A=$!
guest b "$GUEST_B"
PID_B=$!
cleanup() {
    kill "$PID_A" "$PID_B" 2>/dev/null || true
    wait "$PID_A" "$PID_B" 2>/dev/null || true
}
trap cleanup EXIT

# Phase 1: POSIX record locks.
if wait_for "$SHARE/b-waiting" 420; then
    pass "both guests booted; A holds a record lock, B waits for it"
    if host_fcntl; then
        fail "a host process got the record lock A holds"
    else
        pass "a host process cannot take the record lock A holds"
    fi
    assert_files_eq "$SHARE/hello" "$SHARE/b-read-while-waiting" \
        "B reads through its queue while its F_SETLKW waits"
    sleep 3
    assert_eq "" "$(cat "$SHARE/b-got-posix" 2>/dev/null)" \
        "B's F_SETLKW still waits 4 s later, A holding"
    touch "$SHARE/a-release"
    if wait_for "$SHARE/a-ready2" 60 && wait_for "$SHARE/b-waiting2" 60; then
        assert_eq got "$(cat "$SHARE/b-got-posix")" "B's F_SETLKW is granted once A lets go"
    else
        fail "B's F_SETLKW was not granted after A let go"
    fi
    # Phase 2: flock, the holder killed.
    if flock -n "$SHARE/f" true; then
        fail "the host got the flock A holds"
    else
        pass "the host's flock -n fails while A holds the flock"
    fi
    sleep 3
    assert_eq "" "$(cat "$SHARE/b-got-flock" 2>/dev/null)" \
        "B's blocking flock still waits 4 s later, A holding"
    touch "$SHARE/kill-a"
    if wait_for "$SHARE/b-got-flock" 60 -s; then
        assert_eq got "$(cat "$SHARE/b-got-flock")" \
            "killing A's holder frees the flock for B"
    else
        fail "B did not get the flock after A's holder was killed"
    fi
else
    fail "the guests did not reach the lock test (see $VMT_DIR/*.log)"
fi

rc_a=0
rc_b=0
wait "$PID_A" || rc_a=$?
wait "$PID_B" || rc_b=$?
trap - EXIT
assert_eq 0 "$rc_a" "guest A exited 0"
assert_eq 0 "$rc_b" "guest B exited 0"
assert_ok "guest A finished" grep -qx A-done "$VMT_DIR/a.out"
assert_ok "guest B finished" grep -qx B-done "$VMT_DIR/b.out"
assert_ok "B's non-blocking fcntl try failed with EAGAIN while A held" \
    grep -qx "try-posix 11" "$VMT_DIR/b.out"
assert_ok "B's F_GETLK reported A's write lock (F_WRLCK)" \
    grep -qx "getlk 1" "$VMT_DIR/b.out"
assert_ok "B's LOCK_NB flock failed with EWOULDBLOCK while A held" \
    grep -qx "try-flock 11" "$VMT_DIR/b.out"
vmt_summary
