#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: the DAX window (issue 32; QEMU 11.1, xvirtiofsd --dax-window). The
# guest's device is vhost-user-test-device-pci as virtio-fs with a 64 MiB
# window (32 chunks of 2 MiB, the unit a Linux guest maps in).
#
# dax=inode (run-vm's default with XVFS_DAX): files whose size is a whole
# number of chunks carry FUSE_ATTR_DAX (statx says STATX_ATTR_DAX), others
# do not and read as usual. A 128 MiB file read with read() and through a
# shared mapping gives the host's bytes: 64 chunks through a window of 32,
# so the guest reclaims (REMOVEMAPPING) as it goes. MAP_SHARED stores with
# msync are on the host file at once, and the host's pwrite is seen through
# the guest's mapping (one page cache). A guest truncate under its own
# mapping gives that process SIGBUS past the new end, and nothing else.
# The daemon's --metrics-file counts the maps and unmaps. Half-way, with
# mappings in place, the daemon is live-upgraded: the window's table and
# the back-end channel go to the successor, which then serves the guest's
# new maps and its removal of the old ones.
#
# --crash-restart: the serving process is killed (SIGKILL) while the guest
# has files mapped; its successor keeps the back-end channel (the holder
# held it), and the guest's mappings go on working: the old ones read
# through, are removed when the guest reclaims them, and new ones are made.
# Before its first map the successor finds the channel's end with a probe
# (VHOST_USER_BACKEND_NONE), which QEMU answers and logs.
#
# A host process that deletes a file the guest has mapped changes nothing
# for the guest (the mapping holds the file). One that truncates it takes
# the VM down as soon as the guest touches the lost range: QEMU's mapping of
# the file then faults (SIGBUS), and no design on unmodified QEMU 11.1 and
# Linux can stop a host process from truncating, or make the guest drop
# its mapping first (docs/dax.md, "Limits"). The test shows both, and that
# the daemon and the host's file come out of it intact.
#
# dax=always: every file goes through the window. Files of whole chunks
# work as above; the last chunk of any other file cannot be mapped on QEMU
# 11.1 (it maps only ranges inside the file): the read fails with EIO, the
# guest and the daemon go on (docs/dax-design.md, R1).
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

export XVFS_QEMU=${XVFS_QEMU:-11.1}
vmt_init dax
if [ "$XVFS_QEMU" != 11.1 ]; then
    fail "DAX needs QEMU 11.1 (XVFS_QEMU=$XVFS_QEMU)"
    vmt_summary || exit 1
fi
"$XVFS_ROOT/vmm-config/runtimes.sh" qemu 11.1 >"$VMT_DIR/runtime.log" 2>&1 ||
    die "installing QEMU 11.1 failed (log: $VMT_DIR/runtime.log)"
export XVFS_DAX=64M
MIB=1048576

# make_share DIR: the files both cases read.
make_share() {
    mkdir -p "$1"
    gcc -static -O2 -o "$1/daxprobe" "$XVFS_ROOT/tests/vm/daxprobe.c"
    # Padded to one chunk, so that even dax=always can read (and run) it.
    truncate -s $((2 * MIB)) "$1/daxprobe"
    head -c $((128 * MIB)) /dev/urandom >"$1/big.bin"
    head -c $((4 * MIB)) /dev/urandom >"$1/m4.bin"
    head -c $((8 * MIB)) /dev/urandom >"$1/m8.bin"
    echo "not a whole chunk" >"$1/small.txt"
}

# host_side SHARE CHECKS CTL: once the guest has stored byte 90 in 64 KiB
# at 1 MiB of m4.bin, check the host file has them, live-upgrade the daemon
# (control socket CTL), then pwrite byte 77 in 64 KiB at 2 MiB for the
# guest to see through its mapping.
host_side() {
    local share=$1 i pid rc=0
    local -a sargs
    for ((i = 0; i < 3000; i++)); do
        [ -e "$share/guest-filled" ] && break
        sleep 0.1
    done
    python3 - "$share/m4.bin" >"$2" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
seen = os.pread(fd, 65536, 1 << 20)
print("CHECK host-reads-the-guest's-mapped-stores 1", int(seen == bytes([90]) * 65536))
os.close(fd)
PY
    pid=$(vmt_status "$3" pid)
    mapfile -t sargs < <(vmt_successor_args "$pid")
    "$DAEMON" upgrade --control "$3" --binary "$DAEMON" -- "${sargs[@]}" \
        >"$VMT_DIR/upgrade.log" 2>&1 || rc=$?
    echo "CHECK live-upgrade-with-mappings-rc 0 $rc" >>"$2"
    echo "CHECK a-new-process-serves 1 $([ "$(vmt_status "$3" pid)" != "$pid" ] && echo 1 || echo 0)" >>"$2"
    python3 - "$share/m4.bin" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, bytes([77]) * 65536, 2 << 20)
os.close(fd)
PY
    touch "$share/host-filled"
}

# shellcheck disable=SC2016 # expanded in the guest
INODE_CMD='cd /mnt/shared
echo "mount $(grep " /mnt/shared " /proc/mounts)"
echo "attr-m4 $(./daxprobe attr m4.bin)"
echo "attr-small $(./daxprobe attr small.txt)"
echo "small $(cat small.txt)"
echo "read-big $(sha256sum <big.bin | cut -d" " -f1)"
echo "mmap-big $(./daxprobe cat big.bin | sha256sum | cut -d" " -f1)"
echo "fill $(./daxprobe fill m4.bin 1048576 65536 90)"
touch guest-filled
while [ ! -e host-filled ]; do sleep 0.1; done
echo "peek $(./daxprobe peek m4.bin 2097152 65536)"
echo "read-big-after $(sha256sum <big.bin | cut -d" " -f1)"
echo "shrink $(./daxprobe shrink m8.bin 2097152 4194304)"
echo "m8-size $(wc -c <m8.bin)"
echo "m8-head $(head -c 2097152 m8.bin | sha256sum | cut -d" " -f1)"'

say "dax=inode"
SHARE=$VMT_DIR/share-inode
make_share "$SHARE"
want_big=$(sha256sum <"$SHARE/big.bin" | cut -d' ' -f1)
want_m8=$(head -c $((2 * MIB)) "$SHARE/m8.bin" | sha256sum | cut -d' ' -f1)
METRICS=$VMT_DIR/inode-metrics.json
CTL=$VMT_DIR/inode.ctl
host_side "$SHARE" "$VMT_DIR/inode-host.checks" "$CTL" &
HOST_PID=$!
rc=0
DAEMON_ARGS="--metrics-file $METRICS --control $CTL" XVFS_TIMEOUT=900 \
    vmt_guest "$SHARE" "$INODE_CMD" "$VMT_DIR/inode.out" || rc=$?
kill "$HOST_PID" 2>/dev/null || true
wait "$HOST_PID" 2>/dev/null || true
out=$VMT_DIR/inode.out
assert_eq 0 "$rc" "dax=inode: guest command exit status"
assert_ok "dax=inode: the share is mounted with dax=inode" grep -q '^mount .*virtiofs.*dax=inode' "$out"
assert_ok "dax=inode: a file of whole chunks is DAX (statx)" grep -qx 'attr-m4 dax 1' "$out"
assert_ok "dax=inode: a 18-byte file is not" grep -qx 'attr-small dax 0' "$out"
assert_ok "dax=inode: the 18-byte file reads as usual" grep -qx 'small not a whole chunk' "$out"
assert_ok "dax=inode: 128 MiB read() through a 64 MiB window: the host's bytes" grep -qx "read-big $want_big" "$out"
assert_ok "dax=inode: the same through a shared mapping" grep -qx "mmap-big $want_big" "$out"
assert_ok "dax=inode: MAP_SHARED stores and msync" grep -qx 'fill filled' "$out"
vmt_checks "$VMT_DIR/inode-host.checks" "dax=inode: "
assert_ok "dax=inode: the guest's mapping sees the host's pwrite" grep -qx 'peek peek 77' "$out"
assert_ok "dax=inode: after the upgrade, 128 MiB again through the window (new maps, old ones removed)" \
    grep -qx "read-big-after $want_big" "$out"
assert_ok "dax=inode: touching past a truncate under the mapping: SIGBUS in that process" \
    grep -qx 'shrink sigbus' "$out"
assert_ok "dax=inode: the truncated file has its new size" grep -qx 'm8-size 2097152' "$out"
assert_ok "dax=inode: and its first chunk is intact" grep -qx "m8-head $want_m8" "$out"
assert_eq 2097152 "$(stat -c %s "$SHARE/m8.bin")" "dax=inode: the host sees the truncate"
maps=$(vmt_dax_metric "$METRICS" maps)
unmaps=$(vmt_dax_metric "$METRICS" unmaps)
echo "     dax=inode: maps $maps, unmaps $unmaps, failed $(vmt_dax_metric "$METRICS" failed)"
assert_ok "dax=inode: the successor made more maps than the window holds (32)" test "$maps" -gt 32
assert_ok "dax=inode: the guest reclaimed window ranges, the predecessor's too" test "$unmaps" -gt 0
assert_eq 0 "$(vmt_dax_metric "$METRICS" failed)" "dax=inode: QEMU refused no map or unmap"

# shellcheck disable=SC2016 # expanded in the guest
CRASH_CMD='cd /mnt/shared
echo "mmap-m4 $(./daxprobe cat m4.bin | sha256sum | cut -d" " -f1)"
touch guest-mapped
while [ ! -e host-killed ]; do sleep 0.1; done
echo "mmap-m4-after $(./daxprobe cat m4.bin | sha256sum | cut -d" " -f1)"
echo "read-big $(sha256sum <big.bin | cut -d" " -f1)"'

# kill_when_mapped SHARE CTL CHECKS: kills the serving process once the
# guest has m4.bin mapped.
kill_when_mapped() {
    local i
    for ((i = 0; i < 3000; i++)); do
        [ -e "$1/guest-mapped" ] && break
        sleep 0.1
    done
    vmt_kill_serving "$2" with-mappings >"$3"
    touch "$1/host-killed"
}

say "--crash-restart"
SHARE=$VMT_DIR/share-crash
make_share "$SHARE"
want_big=$(sha256sum <"$SHARE/big.bin" | cut -d' ' -f1)
want_m4=$(sha256sum <"$SHARE/m4.bin" | cut -d' ' -f1)
METRICS=$VMT_DIR/crash-metrics.json
CTL=$VMT_DIR/crash.ctl
kill_when_mapped "$SHARE" "$CTL" "$VMT_DIR/crash-host.checks" &
HOST_PID=$!
rc=0
DAEMON_ARGS="--crash-restart --metrics-file $METRICS --control $CTL" XVFS_TIMEOUT=900 \
    vmt_guest "$SHARE" "$CRASH_CMD" "$VMT_DIR/crash.out" || rc=$?
kill "$HOST_PID" 2>/dev/null || true
wait "$HOST_PID" 2>/dev/null || true
out=$VMT_DIR/crash.out
assert_eq 0 "$rc" "crash restart: guest command exit status"
vmt_checks "$VMT_DIR/crash-host.checks" "crash restart: "
assert_ok "crash restart: a file mapped before the kill" grep -qx "mmap-m4 $want_m4" "$out"
assert_ok "crash restart: the same mappings read after it" grep -qx "mmap-m4-after $want_m4" "$out"
assert_ok "crash restart: 128 MiB through the window after it (old ranges removed, new mapped)" \
    grep -qx "read-big $want_big" "$out"
assert_ok "crash restart: the successor mapped" test "$(vmt_dax_metric "$METRICS" maps)" -gt 0
assert_ok "crash restart: and removed the guest's ranges" test "$(vmt_dax_metric "$METRICS" unmaps)" -gt 0
assert_eq 0 "$(vmt_dax_metric "$METRICS" failed)" "crash restart: QEMU refused no map or unmap"
# The restarted process does not know which replies the dead one was owed:
# it finds the back-end channel's end with a probe QEMU does not know, which
# QEMU answers (and logs), keeping the channel (the maps above worked).
assert_ok "crash restart: QEMU answered the restarted daemon's probe on the back-end channel" \
    grep -q "Received unexpected msg type: 0" "$VMT_DIR/run/qemu.log"

# shellcheck disable=SC2016 # expanded in the guest
ALWAYS_CMD='cd /mnt/shared
echo "mount $(grep " /mnt/shared " /proc/mounts)"
echo "attr-small $(./daxprobe attr small.txt)"
cat small.txt >/dev/null 2>/tmp/small.err; echo "small-rc $?"
echo "read-big $(sha256sum <big.bin | cut -d" " -f1)"
echo "fill $(./daxprobe fill m4.bin 0 4096 33)"
echo "peek $(./daxprobe peek m4.bin 0 4096)"'

say "dax=always"
SHARE=$VMT_DIR/share-always
make_share "$SHARE"
want_big=$(sha256sum <"$SHARE/big.bin" | cut -d' ' -f1)
METRICS=$VMT_DIR/always-metrics.json
rc=0
XVFS_MOUNT_OPTS=dax=always DAEMON_ARGS="--metrics-file $METRICS" XVFS_TIMEOUT=900 \
    vmt_guest "$SHARE" "$ALWAYS_CMD" "$VMT_DIR/always.out" || rc=$?
out=$VMT_DIR/always.out
assert_eq 0 "$rc" "dax=always: guest command exit status"
assert_ok "dax=always: the share is mounted with dax=always" grep -q '^mount .*virtiofs.*dax=always' "$out"
assert_ok "dax=always: 128 MiB read() through the window: the host's bytes" grep -qx "read-big $want_big" "$out"
assert_ok "dax=always: a file shorter than a chunk fails to read (QEMU 11.1 limit), no hang" \
    grep -qx 'small-rc 1' "$out"
assert_ok "dax=always: MAP_SHARED stores and msync" grep -qx 'fill filled' "$out"
assert_ok "dax=always: read back through a new mapping" grep -qx 'peek peek 33' "$out"
assert_eq "$(printf '!%.0s' $(seq 4096))" "$(head -c 4096 "$SHARE/m4.bin")" "dax=always: the stores are on the host"
assert_eq 0 "$(vmt_dax_metric "$METRICS" failed)" "dax=always: QEMU refused no map (the short file never reached it)"
assert_ok "dax=always: the daemon refused the short file's map itself" test "$(vmt_dax_metric "$METRICS" refused)" -gt 0
# shellcheck disable=SC2016 # expanded in the guest
HOST_CMD='cd /mnt/shared
echo "m8 $(./daxprobe cat m8.bin | sha256sum | cut -d" " -f1)"
echo "m4 $(./daxprobe cat m4.bin | sha256sum | cut -d" " -f1)"
touch guest-mapped
while [ ! -e host-deleted ]; do sleep 0.1; done
echo "m8-deleted $(./daxprobe cat m8.bin 2>&1 | sha256sum | cut -d" " -f1)"
./daxprobe hold m4.bin guest-read-deleted host-truncated
echo "survived"'

say "host delete and truncate under the guest's mappings"
SHARE=$VMT_DIR/share-host
make_share "$SHARE"
want_m8=$(sha256sum <"$SHARE/m8.bin" | cut -d' ' -f1)
(
    for ((i = 0; i < 3000; i++)); do [ -e "$SHARE/guest-mapped" ] && break; sleep 0.1; done
    rm "$SHARE/m8.bin"
    touch "$SHARE/host-deleted"
    for ((i = 0; i < 3000; i++)); do [ -e "$SHARE/guest-read-deleted" ] && break; sleep 0.1; done
    truncate -s 0 "$SHARE/m4.bin"
    touch "$SHARE/host-truncated"
) &
HOST_PID=$!
rc=0
XVFS_TIMEOUT=600 vmt_guest "$SHARE" "$HOST_CMD" "$VMT_DIR/host.out" || rc=$?
kill "$HOST_PID" 2>/dev/null || true
wait "$HOST_PID" 2>/dev/null || true
out=$VMT_DIR/host.out
assert_ok "host delete: the guest still reads the deleted file through its mappings" \
    grep -qx "m8-deleted $want_m8" "$out"
assert_ok "host truncate: the VM did not survive it (the documented limit)" bash -c "! grep -qx survived '$out'"
assert_ok "host truncate: run-vm reports the VM's end as a failure" test "$rc" -ne 0
assert_eq 0 "$(stat -c %s "$SHARE/m4.bin")" "host truncate: the host's file is as the host left it"
assert_ok "host truncate: the daemon logged no panic" bash -c "! grep -qi panick '$VMT_DIR/run/daemon.log'"
vmt_summary
