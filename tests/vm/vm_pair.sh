# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# QEMU processes and daemons for the tests that move a running VM between
# them (migration, snapshot and restore). Source after lib.sh and
# qemu-profile.sh, with QMP and GUEST_DIR set; the caller sets
# GUEST_SCRIPT, the guest's command.
#
#   start_daemon NAME SHARE ARGS...  a daemon on $VMT_DIR/NAME.sock
#   start_vm NAME [INCOMING-URI]     QEMU on it, QMP on $VMT_DIR/NAME.qmp
#   guest_started SHARE NAME LABEL   waits for SHARE/started
#   wait_file FILE [SECONDS] [PID]
#   migrate FROM TO                  live migration to a new QEMU TO
#   snapshot NAME FILE               save QEMU NAME's VM to FILE, stop both
#   restore NAME FILE                a new QEMU NAME loads FILE
#   dest_runs NAME                   QEMU NAME runs its guest
#   new_share DIR                    an empty share with keep ("before")
#   cleanup                          kills everything started (trap EXIT)
#   GUEST_SCRIPT (default)           fio verify, a 200/s request stream, a
#                                    file held for reading (the guest's
#                                    first open: virtiofsd's handle 0) and
#                                    one for appending, the cwd in the
#                                    share; at SHARE/done writes
#                                    SHARE/results.txt
#   check_guest SHARE LABEL          asserts those results
#   pauses SHARE N LABEL             the N largest gaps of the stream

PIDS=()
declare -A QEMU_PID=()

# Kills every daemon and QEMU started so far (QEMU runs under timeout(1):
# its child first, so that no QEMU outlives its wrapper) and reaps them.
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        pkill -9 -P "$p" 2>/dev/null || true
        kill -9 "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap cleanup EXIT

# start_daemon NAME SHARE ARGS...: a daemon on $VMT_DIR/NAME.sock.
start_daemon() {
    local name=$1 share=$2 bin=${DAEMON_BIN:-$DAEMON}
    shift 2
    rm -f "$VMT_DIR/$name.sock"
    "$bin" --socket-path "$VMT_DIR/$name.sock" --shared-dir "$share" "$@" \
        </dev/null >>"$VMT_DIR/$name.daemon.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 100); do
        [ -S "$VMT_DIR/$name.sock" ] && return 0
        sleep 0.1
    done
    fail "daemon $name did not create its socket"
    return 1
}

# start_vm NAME [INCOMING-URI]: QEMU on the daemon NAME.sock, QMP on NAME.qmp.
start_vm() {
    local name=$1 incoming=${2:-}
    # shellcheck disable=SC2034 # read by xvfs_render_args (qemu-profile.sh)
    declare -gA XVFS_P=(
        [MACHINE]=pc [VCPUS]=2 [MEM]=512M [TAG]=shared [QUEUES]=1 [QUEUE_SIZE]=1024
        [SOCK]=$(xvfs_qemu_escape "$VMT_DIR/$name.sock")
        [KERNEL]=$(xvfs_qemu_escape "$GUEST_DIR/vmlinux")
        [INITRD]=$(xvfs_qemu_escape "$GUEST_DIR/initramfs.cpio")
        [APPEND]="console=ttyS0 quiet panic=1 xvfs.tag=shared xvfs.wait=30 xvfs.cmd=$(printf '%s' "$GUEST_SCRIPT" | base64 -w0)"
        [CONSOLE]="file,id=con,path=$(xvfs_qemu_escape "$VMT_DIR/$name.console"),append=on"
    )
    xvfs_pick_accel 2>/dev/null
    xvfs_render_args "$XVFS_QEMU_TEMPLATE"
    XVFS_QEMU_ARGS+=(-qmp "unix:$VMT_DIR/$name.qmp,server=on,wait=off")
    [ -z "$incoming" ] || XVFS_QEMU_ARGS+=(-incoming "$incoming")
    rm -f "$VMT_DIR/$name.qmp"
    timeout -k 5 900 "$XVFS_QEMU_BIN" "${XVFS_QEMU_ARGS[@]}" </dev/null \
        >>"$VMT_DIR/$name.qemu.log" 2>&1 &
    PIDS+=($!)
    QEMU_PID[$name]=$!
    for _ in $(seq 1 100); do
        [ -S "$VMT_DIR/$name.qmp" ] && return 0
        sleep 0.1
    done
    fail "QEMU $name did not open its monitor"
    return 1
}

# guest_started SHARE NAME LABEL: waits for the guest of QEMU NAME to touch
# SHARE/started; when it does not (QEMU exited, or 240 s passed) fails LABEL
# with how QEMU ended and the last lines of its log and of the daemon's.
guest_started() {
    local share=$1 name=$2 label=$3 pid=${QEMU_PID[$2]} how st
    wait_file "$share/started" 240 "$pid" && return 0
    if kill -0 "$pid" 2>/dev/null; then
        how="QEMU still runs after 240 s"
    else
        wait "$pid" 2>/dev/null && st=0 || st=$?
        how="QEMU exited with status $st$( ((st > 128)) && echo " (signal $((st - 128)))")"
    fi
    fail "$label: guest never started ($how)"
    echo "     last lines of $name.qemu.log:"; tail -n 5 "$VMT_DIR/$name.qemu.log" | sed 's/^/       /'
    echo "     last lines of $name.console:"; tail -n 5 "$VMT_DIR/$name.console" | sed 's/^/       /'
    echo "     last lines of $name.daemon.log:"; tail -n 5 "$VMT_DIR/$name.daemon.log" | sed 's/^/       /'
    return 1
}

# wait_file FILE [SECONDS] [PID]: true once FILE exists; false after
# SECONDS (240), or as soon as process PID is gone.
wait_file() {
    for _ in $(seq 1 "$((${2:-240} * 2))"); do
        [ -e "$1" ] && return 0
        [ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || break
        sleep 0.5
    done
    [ -e "$1" ]
}

# migrate FROM TO: migrates the running VM FROM to a new QEMU TO (whose
# daemon runs already); on success quits FROM. Sets RES to "completed MS"
# or "failed WHY".
migrate() {
    local from=$1 to=$2 res pid
    rm -f "$VMT_DIR/mig.sock"
    start_vm "$to" "unix:$VMT_DIR/mig.sock"
    wait_file "$VMT_DIR/mig.sock" 30 || true
    res=$(python3 "$QMP" "$VMT_DIR/$from.qmp" migrate "unix:$VMT_DIR/mig.sock" 300 2>&1) || true
    # The source only knows it sent everything: as libvirt does, the
    # migration has succeeded once the destination runs; if the destination
    # fails to load (and exits), the source is resumed.
    if [[ $res == completed* ]] && ! dest_runs "$to"; then
        res="failed (the destination did not start ($(tail -n 1 "$VMT_DIR/$to.qemu.log")))"
        python3 "$QMP" "$VMT_DIR/$from.qmp" cont >/dev/null 2>&1 || true
    fi
    # shellcheck disable=SC2034 # the caller reads it
    RES=$res
    if [[ $res == completed* ]]; then
        python3 "$QMP" "$VMT_DIR/$from.qmp" quit >/dev/null 2>&1 || true
        pid=${QEMU_PID[$from]}
    else
        pid=${QEMU_PID[$to]}
        kill "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# snapshot NAME FILE: saves the VM of QEMU NAME to FILE (migrate file:),
# then quits that QEMU and stops its daemon. Sets RES as migrate does.
snapshot() {
    local name=$1 file=$2 pid
    rm -f "$file"
    # shellcheck disable=SC2034 # the caller reads it
    RES=$(python3 "$QMP" "$VMT_DIR/$name.qmp" migrate "file:$file" 300 2>&1) || true
    python3 "$QMP" "$VMT_DIR/$name.qmp" quit >/dev/null 2>&1 || true
    pid=${QEMU_PID[$name]}
    wait "$pid" 2>/dev/null || true
    pkill -9 -f -- "--socket-path $VMT_DIR/$name.sock" 2>/dev/null || true
}

# restore NAME FILE: a new QEMU NAME loading FILE (-incoming file:; its
# daemon runs already); true once its guest runs.
restore() {
    start_vm "$1" "file:$2"
    dest_runs "$1"
}

# dest_runs NAME: true once QEMU NAME runs the migrated guest; false when it
# exits first (it failed to load the state).
dest_runs() {
    local pid=${QEMU_PID[$1]} st
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || return 1
        st=$(python3 "$QMP" "$VMT_DIR/$1.qmp" query-status 2>/dev/null) || true
        # Not the key alone: '"running": false' has it too.
        [[ $st == *'"status": "running"'* ]] && return 0
        sleep 0.1
    done
    return 1
}

new_share() {
    rm -rf "$1"
    mkdir -p "$1"
    echo before >"$1/keep"
}


# shellcheck disable=SC2016 # expanded by the guest's shell, not here
VM_PAIR_GUEST_SCRIPT='
S=/mnt/shared
R=$S/results.txt
exec 3< $S/keep
mkdir -p $S/work
cd $S/work
echo cwd-ok > here
exec 4>> $S/append.log
INO0=$(stat -c %i $S/keep)
'"$WORKLOAD_STREAM"'( i=0; err=0
  while [ ! -e $S/done ]; do
    i=$((i+1)); echo "append $i" >&4 || err=$((err+1)); sleep 0.1
  done
  echo "appends=$i append-errors=$err" > /tmp/append.res ) &
APP=$!
touch $S/started
while [ ! -e $S/done ]; do sleep 0.5; done
wait $APP; wait $VER
kill -INT $TICK; wait $TICK
{ cat /tmp/append.res /tmp/verify.res
  grep -o "err= *[0-9]*" /tmp/tick.out | sed "s/ //g; s/^/tick-/"
  echo "kept-fd-content=$(cat <&3)"
  echo "last-append-rc=$(echo final >&4; echo $?)"
  echo "cwd-content=$(cat here)"
  echo "cwd-pwd=$(pwd)"
  echo "inode-same=$([ "$INO0" = "$(stat -c %i $S/keep)" ] && echo yes || echo no)"
} > /tmp/res
cp /tmp/res $R
cp /tmp/tick_lat.1.log $S/tick_lat.log
cat /tmp/res
'
GUEST_SCRIPT=${GUEST_SCRIPT:-$VM_PAIR_GUEST_SCRIPT}

# The guest's result file, as KEY=VALUE fields.
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2" | head -n 1; }

check_guest() { # check_guest SHARE LABEL
    local r=$1/results.txt label=$2
    [ -s "$r" ] || { fail "$label: the guest wrote no results"; return; }
    assert_eq 0 "$(field append-errors "$r")" "$label: appends through the kept descriptor never failed"
    assert_eq 0 "$(field last-append-rc "$r")" "$label: the append descriptor still works at the end"
    assert_eq "$(($(field appends "$r") + 1))" "$(grep -c . "$1/append.log")" \
        "$label: every appended line is on the host"
    assert_eq 0 "$(field verify-failures "$r")" "$label: every fio crc32c verification passed"
    assert_ok "$label: verification ran ($(field verify-runs "$r") runs)" test "$(field verify-runs "$r")" -gt 0
    assert_eq 0 "$(field tick-err "$r")" "$label: request stream without I/O error"
    assert_eq before "$(field kept-fd-content "$r")" "$label: the file opened before the first migration still reads"
    assert_eq cwd-ok "$(field cwd-content "$r")" "$label: the working directory in the share still works"
    assert_eq yes "$(field inode-same "$r")" "$label: inode number seen by the guest unchanged"
}

pauses() { # pauses SHARE N LABEL
    [ -s "$1/tick_lat.log" ] || { echo "$3: no completion log from the request stream"; return 1; }
    python3 - "$1/tick_lat.log" "$2" "$3" <<'PY'
import statistics, sys
times = sorted(int(l.split(",")[0]) for l in open(sys.argv[1]) if l.strip())
gaps = sorted((b - a for a, b in zip(times, times[1:])), reverse=True)
n = int(sys.argv[2])
top = gaps[:n]
print(f"{sys.argv[3]}: guest-visible pause over {n} migration(s) (largest gaps of a 200/s "
      f"request stream): median {statistics.median(top)} ms, max {max(top)} ms; "
      f"normal gap {statistics.median(gaps)} ms")
PY
}
