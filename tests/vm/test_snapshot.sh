#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: snapshot to a file and restore later (issue 34), with plain QEMU:
# `migrate file:PATH` saves the running VM (the share's device state inside
# the file, written by the daemon), the source QEMU and its daemon are gone,
# and a new QEMU started with `-incoming file:PATH` and a new daemon carries
# on. The guest runs fio with crc32c verification, a 200/s request stream,
# keeps one file open for reading, one for appending and one more open
# ("victim"), and has its working directory in the share.
#
# 1. Snapshot, then restore on the same directory: the guest's open files,
#    cwd and held inodes come back; a file made on the host while the VM was
#    saved is seen.
# 2. Snapshot again, then restore into a copy of the directory (another
#    host), made without "victim", with --migration-on-error guest-error:
#    the restore completes, the guest gets EIO for "victim" only, and every
#    other open file works on the copy.
# 3. The same restore with --migration-on-error abort: refused (QEMU does
#    not load the file), with the reason in the daemon's log.
# Checked at the end: 0 I/O errors and every appended line on the copy.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"
# shellcheck source=vmm-config/qemu-profile.sh
. "$XVFS_ROOT/vmm-config/qemu-profile.sh"

vmt_init snapshot
QMP=$XVFS_ROOT/tests/vm/qmp.py
xvfs_select_runtime
GUEST_DIR=$XVFS_GUEST_DIR_SELECTED
# shellcheck source=tests/vm/vm_pair.sh
. "$(dirname "$0")/vm_pair.sh"
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)

# shellcheck disable=SC2016 # expanded by the guest's shell, not here
GUEST_SCRIPT='
S=/mnt/shared
mkdir -p $S/work
cd $S/work
echo cwd-ok > here
exec 3< $S/keep
exec 4>> $S/append.log
exec 5< $S/victim
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
  echo "victim-rc=$(cat <&5 >/dev/null 2>&1; echo $?)"
  echo "last-append-rc=$(echo final >&4; echo $?)"
  echo "cwd-content=$(cat here)"
  echo "while-saved=$(cat $S/made-while-saved 2>&1)"
} > /tmp/res
cp /tmp/res $S/results.txt
cat /tmp/res
'

# log_within FILE TEXT SECONDS: TEXT shows up in FILE in time.
log_within() {
    for _ in $(seq 1 "$(($3 * 5))"); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

SHARE=$VMT_DIR/share
new_share "$SHARE"
echo "still here" >"$SHARE/victim"
start_daemon s1 "$SHARE"
start_vm s1
if guest_started "$SHARE" s1 "snapshot"; then
    sleep 2
    # ---- 1. same directory ----
    snapshot s1 "$VMT_DIR/vm1.state"
    assert_eq completed "${RES%% *}" "snapshot to a file completes ($RES)"
    assert_ok "the saved VM is a file ($(stat -c %s "$VMT_DIR/vm1.state" 2>/dev/null) bytes)" \
        test -s "$VMT_DIR/vm1.state"
    echo "made while saved" >"$SHARE/made-while-saved"
    start_daemon r1 "$SHARE"
    if restore r1 "$VMT_DIR/vm1.state"; then
        pass "restored on the same directory by a new QEMU and a new daemon"
    else
        fail "restore on the same directory ($(tail -n 1 "$VMT_DIR/r1.qemu.log"))"
    fi
    assert_ok "the new daemon took the saved device state" \
        log_within "$VMT_DIR/r1.daemon.log" "migration: state from xvirtiofsd" 10
    sleep 3

    # ---- 2./3. a copy of the directory, without "victim" ----
    snapshot r1 "$VMT_DIR/vm2.state"
    assert_eq completed "${RES%% *}" "second snapshot completes ($RES)"
    COPY=$VMT_DIR/share-copy
    rm -rf "$COPY"
    cp -a "$SHARE" "$COPY"
    rm "$COPY/victim"
    start_daemon r2 "$COPY" --migration-on-error abort
    if restore r2 "$VMT_DIR/vm2.state"; then
        fail "restore with a held file missing and --migration-on-error abort was not refused"
    else
        pass "restore with a held file missing is refused with --migration-on-error abort"
    fi
    assert_ok "the daemon says which file did not validate" \
        log_within "$VMT_DIR/r2.daemon.log" 'cannot open "victim"' 10
    kill "${QEMU_PID[r2]}" 2>/dev/null || true
    pkill -9 -f -- "--socket-path $VMT_DIR/r2.sock" 2>/dev/null || true
    start_daemon r3 "$COPY" --migration-on-error guest-error
    if restore r3 "$VMT_DIR/vm2.state"; then
        pass "restored into a copy of the directory (find-paths)"
    else
        fail "restore into a copy ($(tail -n 1 "$VMT_DIR/r3.qemu.log"))"
    fi
    sleep 3
    touch "$COPY/done"
    wait_file "$COPY/results.txt" 240 "${QEMU_PID[r3]}" || true
    R=$COPY/results.txt
    if [ -s "$R" ]; then
        assert_eq 0 "$(field append-errors "$R")" "appends through the kept descriptor never failed"
        assert_eq 0 "$(field last-append-rc "$R")" "the append descriptor works at the end"
        assert_eq "$(($(field appends "$R") + 1))" "$(grep -c . "$COPY/append.log")" \
            "every appended line is in the copy"
        assert_eq 0 "$(field verify-failures "$R")" "every fio crc32c verification passed"
        assert_eq 0 "$(field tick-err "$R")" "request stream without I/O error"
        assert_eq before "$(field kept-fd-content "$R")" "the file opened at the start still reads"
        assert_eq cwd-ok "$(field cwd-content "$R")" "the working directory works"
        assert_eq made "$(field while-saved "$R")" "a file made while the VM was saved is seen"
        assert_ok "the file missing from the copy fails for the guest (rc $(field victim-rc "$R"))" \
            test "$(field victim-rc "$R")" != 0
    else
        fail "the guest wrote no results"
    fi
fi
cleanup
vmt_summary
