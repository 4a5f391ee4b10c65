#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: crash restart keeps the files the guest holds that have no name
# left (docs/crash-restart.md, "Files with no name left").
#
# The guest (tests/vm/nameless.c) holds on the share (a) a file unlinked
# while open, (b) an O_TMPFILE file, (c) a file renamed over by another and
# (d) a removed directory as its cwd, and in rounds appends to and reads
# back (a)-(c) (also through new opens of /proc/self/fd/N) and stats and
# lists (d). Meanwhile the host, on a daemon with --crash-restart: kills the
# serving process XVFS_NAMELESS_KILLS times (default 4), live-upgrades the
# holder pair, kills again right after the upgrade, upgrades once more and
# kills twice more. At the end (b) is linked in with linkat. Checked: no
# error in any round, the content of each file, (b) linked in with all its
# rounds, the holder kept the files (the log says so after each restart),
# nothing "not found again". Second boot, with --crash-restart-keep all: a
# file the guest holds open that another host process deletes (no request
# tells the daemon) reads on through two kills.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init nameless
KILLS=${XVFS_NAMELESS_KILLS:-4}

SHARE=$VMT_DIR/share
CTL=$VMT_DIR/ctl.sock
mkdir -p "$SHARE"
gcc -static -O2 -Wall -Werror -o "$SHARE/nameless" "$XVFS_ROOT/tests/vm/nameless.c"

# kill_one NAME: after 1-2 s, kills the serving process on $CTL.
kill_one() {
    sleep "$(python3 -c 'import random; print(round(random.uniform(1.0, 2.0), 2))')"
    vmt_kill_serving "$CTL" "$1"
}

host_side() {
    local i holder rc
    for i in $(seq 1 240); do
        [ -e "$SHARE/n/ready" ] && break
        sleep 0.5
    done
    [ -e "$SHARE/n/ready" ] || { echo "FAILCHECK guest never got ready"; touch "$SHARE/n/done"; return; }
    upgrade_one() {
        sleep 1
        holder=$(vmt_status "$CTL" crash_restart.holder_pid)
        mapfile -t args < <(vmt_successor_args "$holder")
        rc=0
        "$DAEMON" upgrade --control "$CTL" -- "${args[@]}" >>"$VMT_DIR/upgrades.log" 2>&1 || rc=$?
        echo "CHECK upgrade-$1-rc 0 $rc"
        echo "CHECK upgrade-$1-new-holder 1 $([ "$(vmt_status "$CTL" crash_restart.holder_pid)" != "$holder" ] && echo 1 || echo 0)"
    }
    for n in $(seq 1 "$KILLS"); do kill_one "$n"; done
    upgrade_one 1
    kill_one after-upgrade-1
    upgrade_one 2
    kill_one after-upgrade-2a
    kill_one after-upgrade-2b
    sleep 2
    touch "$SHARE/n/done"
}

host_side >"$VMT_DIR/host-side.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON_ARGS="--crash-restart --crash-restart-limit 20/600 --control $CTL" \
    XVFS_TIMEOUT=600 vmt_guest "$SHARE" 'cd /mnt/shared && ./nameless /mnt/shared/n' \
    "$VMT_DIR/guest.out" || rc=$?
touch "$SHARE/n/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "guest program exit status"
vmt_checks "$VMT_DIR/host-side.txt"
out=$VMT_DIR/guest.out
rounds=$(sed -n 's/.*rounds=\([0-9]*\).*/\1/p' "$out")
assert_eq 0 "$(sed -n 's/.*rounds=[0-9]* errors=\([0-9]*\).*/\1/p' "$out")" \
    "no error in $rounds rounds of writes, reads, reopens, stats and listings"
grep '^error' "$out" | head -n 5 | sed 's/^/     /' || true
want=$(for i in $(seq 1 "$rounds"); do echo "b$i"; done)
assert_eq "$want" "$(cat "$SHARE/n/b-linked" 2>/dev/null)" \
    "(b) O_TMPFILE linked in after the crashes holds every round"
assert_eq "new" "$(cat "$SHARE/n/c" 2>/dev/null)" "(c) the file that renamed over keeps its content"
left=$(find "$SHARE/n" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' ')
assert_eq "b-linked c done ready " "$left" \
    "nothing else left in the share (the unlinked and removed ones stay nameless)"
log=$VMT_DIR/run/daemon.log
restarts=$((KILLS + 3))
assert_eq "$restarts" "$(grep -c 'crash restart: now serving as pid' "$log")" \
    "a serving process took over after every kill ($restarts)"
kept=$(grep -c 'open files from descriptors the holder kept' "$log" || true)
assert_eq "$restarts" "$kept" "every restart reported what the holder kept"
assert_ok "the holder handed back the nameless nodes and open files" \
    grep -qE '\(([4-9]|[1-9][0-9]+) nodes and ([3-9]|[1-9][0-9]+) open files from descriptors the holder kept' "$log"
assert_eq 0 "$(grep -c 'not found again' "$log" || true)" "no node or handle lost at any restart"
grep -E 'not found again|the holder kept' "$log" | tail -n 3 | sed 's/^/     /' || true

# Second boot, --crash-restart-keep all: a file the guest holds open that
# another host process deletes (the guest never sees it go) survives kills.
SHARE2=$VMT_DIR/share-all
CTL2=$VMT_DIR/ctl-all.sock
mkdir -p "$SHARE2"
echo "host file" >"$SHARE2/h"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
ALL_SCRIPT='S=/mnt/shared; exec 5< $S/h; touch $S/ready; i=0; e=0
while [ ! -e $S/done ]; do i=$((i+1)); [ "$(cat /proc/$$/fd/5)" = "host file" ] || e=$((e+1)); sleep 0.1; done
echo "rounds=$i errors=$e"'
(
    for _ in $(seq 1 240); do [ -e "$SHARE2/ready" ] && break; sleep 0.5; done
    rm -f "$SHARE2/h"
    CTL=$CTL2
    for n in 1 2; do kill_one "keep-all-$n"; done
    sleep 1
    touch "$SHARE2/done"
) >"$VMT_DIR/host-side-all.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON_ARGS="--crash-restart --crash-restart-keep all --control $CTL2" \
    XVFS_TIMEOUT=300 vmt_guest "$SHARE2" "$ALL_SCRIPT" "$VMT_DIR/guest-all.out" || rc=$?
touch "$SHARE2/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "keep all: guest script exit status"
vmt_checks "$VMT_DIR/host-side-all.txt" "keep all: "
assert_eq 0 "$(sed -n 's/.*rounds=[0-9]* errors=\([0-9]*\).*/\1/p' "$VMT_DIR/guest-all.out")" \
    "keep all: a file another host process deleted reads on through two kills ($(sed -n 's/.*rounds=\([0-9]*\).*/\1/p' "$VMT_DIR/guest-all.out") rounds)"
assert_eq 0 "$(grep -c 'not found again' "$VMT_DIR/run/daemon.log" || true)" "keep all: nothing lost at the restarts"

vmt_summary
