#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: the cap on host descriptors held for the guest (--max-open), then
# a live upgrade at the cap.
#
# The daemon runs with --max-open 3000 and a metrics file. In the guest, a fio
# job keeps 1400 files open (1400 inodes plus 1400 handles of the cap) and
# reads them for the whole test; a second fio job then tries to open 10,000
# more files and must fail with EMFILE ("Too many open files") once the cap
# is reached, while the first reads on (the guest then drops its caches,
# forgetting the inodes the flood looked up). The host then live-upgrades the
# daemon: every held inode and handle crosses to the successor. Checked: the
# flood hit EMFILE, the metrics file counted the refusals and the descriptors
# held, the upgrade succeeded, the holding job read through it without an I/O
# error, and afterwards the guest reads every held file as the host has it.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init limits
HOLD=1400
FLOOD=10000
SHARE=$VMT_DIR/share
CTL=$VMT_DIR/ctl.sock
METRICS=$VMT_DIR/metrics.json
mkdir -p "$SHARE/hold" "$SHARE/flood"
# fio's names for the files of job NAME: NAME.0.N; made here, 4 KiB each.
python3 - "$SHARE" "$HOLD" "$FLOOD" <<'PY'
import os, sys
share, hold, flood = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = os.urandom(4096)
for d, n in (("hold", hold), ("flood", flood)):
    for i in range(n):
        with open(f"{share}/{d}/{d}.0.{i}", "wb") as f:
            f.write(block)
PY

# shellcheck disable=SC2016 # expanded by the guest's shell, not here
GUEST_SCRIPT='
S=/mnt/shared
ulimit -n 65536
fio --name=hold --thread --directory=$S/hold --nrfiles='$HOLD' --openfiles='$HOLD' \
    --filesize=4k --rw=randread --bs=4k --time_based --runtime=900 --eta=never \
    --output=/tmp/hold.out &
H=$!
n=0
while [ "$(ls /proc/$H/fd | wc -l)" -lt '$HOLD' ] && [ $n -lt 600 ]; do sleep 0.5; n=$((n+1)); done
echo "hold-fds=$(ls /proc/$H/fd | wc -l)"
fio --name=flood --thread --directory=$S/flood --nrfiles='$FLOOD' --openfiles='$FLOOD' \
    --filesize=4k --rw=read --bs=4k --eta=never --output=/tmp/flood.out > /tmp/flood.log 2>&1
echo "flood-rc=$?"
echo "flood-emfile=$(cat /tmp/flood.out /tmp/flood.log | grep -c "Too many open files")"
# The inodes of the flood stay cached, the cap full: even a new flag file
# would get EMFILE. Dropping the caches makes the guest forget them.
sync; echo 2 > /proc/sys/vm/drop_caches
touch $S/flooded || echo "flag-error=$?"
while [ ! -e $S/upgraded ]; do sleep 0.5; done
sleep 3
kill -INT $H; wait $H
grep -o "err= *[0-9]*" /tmp/hold.out | sed "s/ //g; s/^/hold-/"
echo "hold-md5=$(cat $S/hold/* | md5sum | cut -c1-32)"
'

host_side() {
    local rc pid
    for _ in $(seq 1 1200); do
        [ -e "$SHARE/flooded" ] && break
        sleep 0.5
    done
    [ -e "$SHARE/flooded" ] || { echo "FAILCHECK the guest never flooded"; touch "$SHARE/upgraded"; return; }
    sleep 2 # the metrics file is rewritten every second
    python3 - "$METRICS" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["open_files"]
print("INFO held", m["held"], m["max"], m["refused_emfile"])
PY
    pid=$(vmt_status "$CTL" pid)
    mapfile -t args < <(vmt_successor_args "$pid")
    rc=0
    "$DAEMON" upgrade --control "$CTL" -- "${args[@]}" >"$VMT_DIR/upgrade.log" 2>&1 || rc=$?
    echo "CHECK upgrade-at-the-cap-succeeds 0 $rc"
    echo "CHECK upgraded-to-another-process 1 $([ "$(vmt_status "$CTL" pid)" != "$pid" ] && echo 1 || echo 0)"
    touch "$SHARE/upgraded"
}

host_side >"$VMT_DIR/host-side.txt" 2>&1 &
HOST_PID=$!
rc=0
DAEMON_ARGS="--max-open 3000 --metrics-file $METRICS --control $CTL" XVFS_TIMEOUT=900 \
    vmt_guest "$SHARE" "$GUEST_SCRIPT" "$VMT_DIR/guest.out" || rc=$?
touch "$SHARE/upgraded"
wait "$HOST_PID" || true
assert_eq 0 "$rc" "guest script exit status"
vmt_checks "$VMT_DIR/host-side.txt"
out=$VMT_DIR/guest.out
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$out" | head -n 1; }
assert_ok "the holding job has its $HOLD files open ($(field hold-fds) descriptors)" \
    test "$(field hold-fds)" -ge "$HOLD"
assert_ok "the flood of $FLOOD opens failed" test "$(field flood-rc)" != 0
assert_ok "the flood got EMFILE (Too many open files)" test "$(field flood-emfile)" -gt 0
read -r _ _ held max refused < <(grep '^INFO held' "$VMT_DIR/host-side.txt" || echo "INFO held 0 0 0")
assert_eq 3000 "$max" "metrics: the cap"
assert_ok "metrics: descriptors held for the guest as the upgrade starts ($held of $max)" test "$held" -ge $((2 * HOLD))
assert_ok "metrics: the refusals counted ($refused)" test "$refused" -gt 0
assert_eq "$(cat "$SHARE"/hold/* | md5sum | cut -c1-32)" "$(field hold-md5)" \
    "after the upgrade the guest reads all $HOLD files as the host has them"
assert_eq "err=0" "$(field hold-err | sed 's/^/err=/')" "the holding job: no I/O error across the upgrade"

vmt_summary
