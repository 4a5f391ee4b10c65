#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test (and `make crash-demo`): crash restart under I/O.
#
# The daemon runs with --crash-restart while the guest runs the workload of
# workload.sh (a 200/s write stream, fio with crc32c verification, a
# create/append/rename/unlink loop, ls -R, a file kept open). The host kills
# the serving process with SIGKILL XVFS_KILLS times (default 20) at random
# moments 1-2.5 s apart. Checked: a new serving process after each kill, the
# same vhost-user connection, the restarts counted; zero I/O errors in the
# guest, every verification passed, every file the loop kept on the host,
# the early-opened file still reads. Printed: the guest-visible pause per
# restart (the largest gaps of the steady stream).
# Second boot: the kill lands inside each operation that changes the file
# system, once right before the host system call and once right after it
# (before the reply is recorded or published): the fault-injection build's
# XVFS_CRASH_OPS arms one such point per serving process. The guest repeats
# every operation and checks each result: never EEXIST for its own create,
# ENOENT for its own unlink, a doubled append, a lost file. Then two live
# upgrades with the holder in place (a new holder and serving process pair
# each time) and one more kill.
# Third boot: the crash loop. Serving processes that die at start
# (XVFS_CRASH_FAULT=die-on-restart) make the holder give up after
# --crash-restart-limit tries; it then answers EIO: the guest's next read
# fails at once instead of hanging. Last, without a guest, a serving
# process that dies before any front-end connects.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"

vmt_init crash
KILLS=${XVFS_KILLS:-20}

# The fault-injection build (its hooks), then the plain one last, so that
# host/target/release keeps the release build.
FAULTY=$VMT_DIR/xvirtiofsd-fault
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd --features fault-injection)
cp "${CARGO_TARGET_DIR:-$XVFS_ROOT/host/target}/release/xvirtiofsd" "$FAULTY"
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)

sfield() { vmt_status "$@"; }

host_side() {
    local share=$1 ctl=$2 n conn0
    workload_wait_started "$share" || { echo "FAILCHECK guest never started"; touch "$share/done"; return; }
    conn0=$(sfield "$ctl" connection)
    for n in $(seq 1 "$KILLS"); do
        sleep "$(python3 -c 'import random; print(round(random.uniform(1.0, 2.5), 2))')"
        vmt_kill_serving "$ctl" "$n"
    done
    sleep 1
    echo "CHECK restarts-counted $KILLS $(sfield "$ctl" crash_restart.restarts)"
    echo "CHECK same-connection $conn0 $(sfield "$ctl" connection)"
    echo "INFO replayed $(sfield "$ctl" crash_restart.replayed)"
    touch "$share/done"
}

SHARE=$VMT_DIR/share
CTL=$VMT_DIR/ctl.sock
workload_prepare "$SHARE"
host_side "$SHARE" "$CTL" >"$VMT_DIR/host-side.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON_ARGS="--crash-restart --crash-restart-limit $((KILLS + 5))/600 --control $CTL" \
    XVFS_TIMEOUT=900 vmt_guest "$SHARE" "$WORKLOAD_GUEST_SCRIPT" "$VMT_DIR/guest.out" || rc=$?
touch "$SHARE/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "guest script exit status"
vmt_checks "$VMT_DIR/host-side.txt"
replayed=$(awk '$1 == "INFO" {print $3}' "$VMT_DIR/host-side.txt")
log=$VMT_DIR/run/daemon.log
assert_eq "$KILLS" "$(grep -c 'crash restart: the serving process was killed by signal 9' "$log")" \
    "the holder saw and logged every kill"
assert_eq "$KILLS" "$(grep -c 'crash restart: now serving as pid' "$log")" \
    "a serving process took over after every kill"
workload_check "$VMT_DIR/guest.out" "$SHARE" "the crashes"
workload_pause "$SHARE" "$KILLS" restarts "$VMT_DIR/pause.txt"
say "requests in flight at a kill answered after it (replayed): $replayed"

# Second boot: a kill inside each operation, before and after its system call.
# Opcodes: CREATE 35, WRITE 16, MKDIR 9, SYMLINK 6, LINK 13, MKNOD 8,
# SETATTR 4, FALLOCATE 43, RENAME 12, UNLINK 10, RMDIR 11.
OPS="35 16 9 6 13 8 4 43 12 10 11"
CRASH_OPS=""
for op in $OPS; do CRASH_OPS+="$op:before,$op:after,"; done
CRASH_OPS=${CRASH_OPS%,}
NOPS=$(($(echo "$OPS" | wc -w) * 2))
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
OPS_SCRIPT='
S=/mnt/shared/ops
mkdir -p $S
i=0; bad=0
e() { echo "op-error $i $1"; bad=$((bad+1)); }
touch /mnt/shared/started
while [ ! -e /mnt/shared/done ]; do
  i=$((i+1)); d=$S/d$i
  mkdir $d || e mkdir
  echo a > $d/f || e create
  echo b >> $d/f || e append
  [ "$(cat $d/f)" = "a
b" ] || e content
  ln -s f $d/s || e symlink
  ln $d/f $d/h || e link
  mkfifo $d/p || e mknod
  chmod 640 $d/f || e chmod
  truncate -s 2 $d/f || e truncate
  [ "$(stat -c %a:%s $d/f)" = "640:2" ] || e attributes
  fallocate -l 8192 $d/g || e fallocate
  [ "$(stat -c %s $d/g)" = 8192 ] || e fallocated-size
  mv $d/h $d/h2 || e rename
  [ -e $d/h2 ] && [ ! -e $d/h ] || e renamed
  rm $d/h2 $d/s $d/p $d/g || e unlink
  rm $d/f || e unlink2
  rmdir $d || e rmdir
  [ ! -e $d ] || e gone
done
echo "ops-iterations=$i ops-errors=$bad"
'
SHARE2=$VMT_DIR/share-ops
CTL2=$VMT_DIR/ctl-ops.sock
mkdir -p "$SHARE2"
(
    workload_wait_started "$SHARE2" || { echo "FAILCHECK guest never started"; touch "$SHARE2/done"; exit 0; }
    for i in $(seq 1 600); do
        [ "$(XVD=$FAULTY sfield "$CTL2" crash_restart.restarts 2>/dev/null)" = "$NOPS" ] && break
        sleep 0.5
    done
    sleep 1
    echo "CHECK every-armed-point-struck $NOPS $(sfield "$CTL2" crash_restart.restarts)"
    echo "INFO replayed $(sfield "$CTL2" crash_restart.replayed)"
    # Live upgrade with the holder in place: a new holder and serving
    # process pair takes over (the holder's own arguments; this shell has no
    # XVFS_CRASH_OPS, so the new pair has no armed point), then survives a
    # kill.
    for n in 1 2; do
        holder=$(sfield "$CTL2" crash_restart.holder_pid)
        mapfile -t args < <(vmt_successor_args "$holder")
        rc=0
        "$FAULTY" upgrade --control "$CTL2" -- "${args[@]}" >>"$VMT_DIR/upgrades.log" 2>&1 || rc=$?
        echo "CHECK upgrade-$n-with-holder-rc 0 $rc"
        echo "CHECK upgrade-$n-new-holder 1 $([ "$(sfield "$CTL2" crash_restart.holder_pid)" != "$holder" ] && echo 1 || echo 0)"
        sleep 2
        echo "CHECK upgrade-$n-old-holder-gone 1 $(kill -0 "$holder" 2>/dev/null && echo 0 || echo 1)"
    done
    echo "CHECK upgrades-counted 2 $(sfield "$CTL2" upgrades)"
    pid=$(sfield "$CTL2" pid)
    kill -9 "$pid"
    sleep 2
    echo "CHECK kill-after-upgrades-restarted 1 $(sfield "$CTL2" crash_restart.restarts)"
    touch "$SHARE2/done"
) >"$VMT_DIR/host-side-ops.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON=$FAULTY XVFS_CRASH_OPS=$CRASH_OPS \
    DAEMON_ARGS="--crash-restart --crash-restart-limit $((NOPS + 5))/600 --control $CTL2" \
    XVFS_TIMEOUT=900 vmt_guest "$SHARE2" "$OPS_SCRIPT" "$VMT_DIR/guest-ops.out" || rc=$?
touch "$SHARE2/done"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "operations: guest script exit status"
vmt_checks "$VMT_DIR/host-side-ops.txt" "operations: "
replayed_ops=$(awk '$1 == "INFO" {print $3}' "$VMT_DIR/host-side-ops.txt")
ops_out=$VMT_DIR/guest-ops.out
assert_eq 0 "$(sed -n 's/.*ops-errors=\([0-9]*\).*/\1/p' "$ops_out")" \
    "operations: every result as expected over $(sed -n 's/.*ops-iterations=\([0-9]*\).*/\1/p' "$ops_out") rounds"
grep '^op-error' "$ops_out" | head -n 5 | sed 's/^/     /' || true
assert_eq "$NOPS" "$(grep -c 'crash restart: the serving process was killed by signal' "$VMT_DIR/run/daemon.log")" \
    "operations: one abort per armed point ($NOPS)"
assert_eq 0 "$(find "$SHARE2/ops" -mindepth 1 -maxdepth 1 -name 'd*' | wc -l | tr -d ' ')" \
    "operations: nothing left behind on the host"
say "operations: requests answered after the aborts (replayed): $replayed_ops"

# Third boot: the crash loop with a guest: it gets EIO, not a hang.
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
LOOP_SCRIPT='
S=/mnt/shared
touch $S/started
for i in $(seq 1 1200); do
  if ! cat $S/keep > /dev/null 2> /tmp/err; then echo "read-failed-after=$i"; cat /tmp/err; break; fi
  sleep 0.1
done
echo loop-guest-finished
'
SHARE3=$VMT_DIR/share-loop
CTL3=$VMT_DIR/ctl-loop.sock
workload_prepare "$SHARE3"
(
    workload_wait_started "$SHARE3" || exit 0
    sleep 1
    kill -9 "$(XVD=$FAULTY sfield "$CTL3" pid)"
) >/dev/null 2>&1 &
HOST_PID=$!
rc=0
DAEMON=$FAULTY XVFS_CRASH_FAULT=die-on-restart \
    DAEMON_ARGS="--crash-restart --crash-restart-limit 3/60 --cache never --control $CTL3" \
    XVFS_TIMEOUT=300 vmt_guest "$SHARE3" "$LOOP_SCRIPT" "$VMT_DIR/guest-loop.out" || rc=$?
wait "$HOST_PID" || true
log3=$VMT_DIR/run/daemon.log
assert_ok "crash loop: the guest finished (no hang)" grep -q loop-guest-finished "$VMT_DIR/guest-loop.out"
assert_ok "crash loop: the guest's read failed with EIO" grep -q 'Input/output error' "$VMT_DIR/guest-loop.out"
assert_ok "crash loop: the holder gave up after the limit" grep -q 'giving up (--crash-restart-limit 3/60)' "$log3"
assert_ok "crash loop: the holder said the guest gets EIO" grep -q 'every request now gets EIO' "$log3"

# Last, without a guest: the serving process dies before any front-end.
mkdir -p "$VMT_DIR/loop-share"
rc=0
XVFS_CRASH_FAULT=die-at-start timeout 60 "$FAULTY" --crash-restart --crash-restart-limit 3/60 \
    --socket-path "$VMT_DIR/loop.sock" --shared-dir "$VMT_DIR/loop-share" --sandbox none \
    >"$VMT_DIR/loop.log" 2>&1 || rc=$?
assert_eq 1 "$rc" "crash loop: the holder gives up with status 1 (not a hang)"
assert_eq 4 "$(grep -c 'crash restart: the serving process was killed by signal 6' "$VMT_DIR/loop.log")" \
    "crash loop: 4 deaths seen (the limit is 3 in 60 s)"
assert_ok "crash loop: the holder says why it gives up" \
    grep -q 'giving up (--crash-restart-limit 3/60)' "$VMT_DIR/loop.log"
assert_ok "crash loop: the restarts back off" grep -q 'restarting in [0-9]* ms' "$VMT_DIR/loop.log"

vmt_summary
