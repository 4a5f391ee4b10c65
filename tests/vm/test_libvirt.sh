#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: xvirtiofsd under libvirt 11 (bookworm-backports).
#
# Brings up libvirt (vmm-config/libvirt-up), boots a transient domain with no
# filesystem (virsh create), hot-plugs two shares served by xvirtiofsd -- one
# libvirt-managed (<binary path>), one external (<source socket>, daemon
# started here with --socket-group libvirt-qemu) -- and checks, each step an
# assertion: the guest's automount helper mounts both on /mnt/TAG, the guest
# reads host files and writes files back (checked on the host), the managed
# daemon is live-upgraded (vmm-config/xvfs-libvirt-upgrade) while the guest
# writes to it, the domain is saved to a file and restored (virsh save /
# virsh restore) with a file held open in the share, both shares detach
# (virsh detach-device) and their daemons
# exit, and `virsh shutdown` powers the guest off (ACPI power button).
#
# Guest commands travel as files on the managed share (tests/vm/libvirt-agent.sh);
# their exit status comes back on the serial console log. Every wait is bounded.
# Holds /tmp/xvfs-vm.lock while the domain exists. About 60 s under TCG.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/libvirt-agent.sh
. "$(dirname "$0")/libvirt-agent.sh"
# shellcheck source=tests/vm/libvirt-domain.sh
. "$(dirname "$0")/libvirt-domain.sh"

DOM=xvfs-test-$$
TAG_M=xvfsm
TAG_S=xvfss
TAG_I=xvfsi
EXT_PID=
MANAGED_PIDS=()

vmt_init libvirt
SHARE_M=$VMT_DIR/share-managed
SHARE_S=$VMT_DIR/share-socket
SOCK_DIR=$(mktemp -d /tmp/xvfs-lv.XXXXXX)
EXT_SOCK=$SOCK_DIR/ext.sock
CONSOLE=$VMT_DIR/console.log
XML=$VMT_DIR/xml
mkdir -p "$SHARE_M" "$SHARE_S" "$XML"
# The guest, QEMU (user libvirt-qemu) and the logs need these readable.
chmod 755 "$VMT_DIR" "$SOCK_DIR"

alive() {
    [ -n "$1" ] && [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# wait_gone PID SECONDS
wait_gone() {
    local pid=$1 deadline=$((SECONDS + $2))
    while alive "$pid"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# Stop a daemon we (or libvirt for us) started, by PID: TERM, then KILL.
# Not functions.sh's stop_pid: libvirt's daemons are not children of this
# shell, and one that exited is a zombie until libvirtd reaps it.
stop_any_pid() {
    local pid=$1
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? p
    destroy_dom
    stop_any_pid "$EXT_PID"
    for p in "${MANAGED_PIDS[@]}"; do
        stop_any_pid "$p"
    done
    rm -rf "$SOCK_DIR"
    release_vm_lock
    return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The pid libvirt recorded for the daemon of TAG (empty when none).
managed_pid() {
    local tag=$1 out
    out=$("$XVFS_ROOT/vmm-config/xvfs-libvirt-upgrade" "$DOM" "$tag" --print 2>/dev/null) || return 0
    sed -n 's/^pid=//p' <<<"$out"
}

# Information only: does PID keep FILE open (libvirt's pid-file lock)?
holds_file() {
    local fd
    for fd in /proc/"$1"/fd/*; do
        [ "$(readlink "$fd" 2>/dev/null)" != "$2" ] || { echo yes; return 0; }
    done
    echo no
}

guest() {
    agent_run "$SHARE_M" "$CONSOLE" "${2:-60}" "$1"
}

show_out() {
    [ ! -s "${AGENT_OUT:-}" ] || sed 's/^/     guest: /' "$AGENT_OUT" | head -n 20
}

# ---- 1. libvirt host -------------------------------------------------------
# Not under the VM lock: libvirtd, when started here, must not inherit it.
assert_ok "libvirt-up: libvirtd and virtlogd answer" \
    timeout 600 "$XVFS_ROOT/vmm-config/libvirt-up"
LV_VERSION=$(virsh_ version 2>/dev/null | awk -F': *' '/Using library/ {print $2} /Running hypervisor/ {print $2}' | paste -sd' ')
echo "     versions: $LV_VERSION"

take_vm_lock

# ---- 2. boot a transient domain without filesystems ------------------------
"$XVFS_ROOT/vmm-config/xvfs-libvirt-xml" domain "$DOM" --console "$CONSOLE" \
    --cmd "$(agent_bootstrap)" >"$XML/domain.xml"
assert_ok "domain XML rendered (memfd, direct kernel boot, type $(sed -n "s/^<domain type='\(.*\)'>/\1/p" "$XML/domain.xml"))" \
    grep -q "<source type='memfd'/>" "$XML/domain.xml"
assert_ok "virsh create (transient domain)" virsh_ create "$XML/domain.xml"
assert_eq running "$(virsh_ domstate "$DOM" 2>/dev/null | head -n 1)" "domain is running"
# Attach only once the guest has enumerated PCI, or the device looks cold-plugged.
assert_ok "guest booted to /init (console shows XVFS-CMD-BEGIN)" \
    wait_for_line "$CONSOLE" '^XVFS-CMD-BEGIN' 120
assert_eq 0 "$(virsh_ dumpxml "$DOM" | grep -c '<filesystem')" "domain has no filesystem before hot-plug"

# ---- 3. hot-plug the libvirt-managed share --------------------------------
printf 'hello from the host %s\n' "$(date +%s%N)" >"$SHARE_M/host.txt"
head -c 3145728 /dev/urandom >"$SHARE_S/big.bin"
printf 'socket share file\n' >"$SHARE_S/host-s.txt"
agent_install "$SHARE_M"
"$XVFS_ROOT/vmm-config/xvfs-libvirt-xml" fs-managed "$TAG_M" "$SHARE_M" \
    --binary "$DAEMON" >"$XML/fs-managed.xml"
assert_ok "virsh attach-device (managed, <binary path>) --live" \
    virsh_ attach-device "$DOM" "$XML/fs-managed.xml" --live
PID_M=$(managed_pid "$TAG_M")
[ -z "$PID_M" ] || MANAGED_PIDS+=("$PID_M")
assert_ok "libvirt started xvirtiofsd for $TAG_M (pid ${PID_M:-none})" alive "$PID_M"
if [ -n "$PID_M" ]; then
    CMDLINE_M=$(tr '\0' ' ' <"/proc/$PID_M/cmdline")
    echo "     libvirt spawned: $CMDLINE_M"
    assert_ok "managed daemon got --fd= and --shared-dir from libvirt" \
        grep -qE -- "--fd=[0-9]+ --shared-dir $SHARE_M" <<<"$CMDLINE_M"
fi
assert_ok "guest automount helper mounted /mnt/$TAG_M" \
    wait_for_line "$CONSOLE" "^XVFS-AUTOMOUNTED $TAG_M " 60
assert_ok "guest agent started from the managed share" agent_wait_ready "$CONSOLE" 30

# ---- 4. file I/O on the managed share -------------------------------------
rc=0
guest "cat /mnt/$TAG_M/host.txt && grep virtiofs /proc/mounts && echo 'written by the guest' >/mnt/$TAG_M/from-guest.txt && sync" || rc=$?
assert_eq 0 "$rc" "guest reads and writes /mnt/$TAG_M"
assert_ok "guest read the host file on $TAG_M" grep -qxF "$(cat "$SHARE_M/host.txt")" "$AGENT_OUT"
assert_eq "written by the guest" "$(cat "$SHARE_M/from-guest.txt" 2>/dev/null)" "host sees the guest's file on $TAG_M"

# ---- 5. hot-plug the external (socket) share ------------------------------
"$DAEMON" --socket-path "$EXT_SOCK" --socket-group libvirt-qemu --shared-dir "$SHARE_S" \
    </dev/null >"$VMT_DIR/ext-daemon.log" 2>&1 {LOCK_FD}>&- &
EXT_PID=$!
assert_ok "external daemon created its socket" \
    timeout 10 bash -c "until [ -S '$EXT_SOCK' ]; do sleep 0.1; done"
assert_eq "root:libvirt-qemu srwxrwx---" "$(stat -c '%U:%G %A' "$EXT_SOCK" 2>/dev/null)" \
    "external socket is group libvirt-qemu, mode 0770"
"$XVFS_ROOT/vmm-config/xvfs-libvirt-xml" fs-socket "$TAG_S" "$EXT_SOCK" >"$XML/fs-socket.xml"
assert_ok "virsh attach-device (external, <source socket>) --live" \
    virsh_ attach-device "$DOM" "$XML/fs-socket.xml" --live
assert_ok "guest automount helper mounted /mnt/$TAG_S" \
    wait_for_line "$CONSOLE" "^XVFS-AUTOMOUNTED $TAG_S " 60
assert_eq 2 "$(virsh_ dumpxml "$DOM" | grep -c '<filesystem')" "libvirt lists two filesystems"

# ---- 6. file I/O on the socket share, and across both ---------------------
rc=0
guest "cat /mnt/$TAG_S/host-s.txt && sha256sum /mnt/$TAG_S/big.bin && echo 'guest to socket share' >/mnt/$TAG_S/from-guest.txt && cp /mnt/$TAG_S/big.bin /mnt/$TAG_M/big-copy.bin && sync" || rc=$?
assert_eq 0 "$rc" "guest reads /mnt/$TAG_S, writes it, copies $TAG_S -> $TAG_M"
assert_ok "guest read the host file on $TAG_S" grep -qx 'socket share file' "$AGENT_OUT"
assert_ok "guest's sha256 of a 3 MiB host file matches the host's" \
    grep -q "^$(sha256sum "$SHARE_S/big.bin" | cut -d' ' -f1) " "$AGENT_OUT"
assert_eq "guest to socket share" "$(cat "$SHARE_S/from-guest.txt" 2>/dev/null)" "host sees the guest's file on $TAG_S"
assert_ok "copy through the guest ($TAG_S -> $TAG_M) is identical on the host" \
    cmp -s "$SHARE_S/big.bin" "$SHARE_M/big-copy.bin"

# ---- 7. live upgrade of the managed daemon under guest I/O -----------------
# The writer: appends 1, 2, 3... to seq.txt and writes a 64 KiB block plus its
# checksum each round; any error is counted in /tmp/io.err (guest).
# shellcheck disable=SC2016 # expanded in the guest
WRITER='mkdir -p /mnt/'$TAG_M'/io && (i=0; e=0; while [ ! -e /tmp/io.stop ]; do i=$((i+1)); echo $i >>/mnt/'$TAG_M'/io/seq.txt || e=$((e+1)); dd if=/dev/urandom of=/tmp/blk bs=64k count=1 2>/dev/null; cp /tmp/blk /mnt/'$TAG_M'/io/blk.$i || e=$((e+1)); (cd /tmp && sha256sum blk | sed "s/blk$/blk.$i/") >>/mnt/'$TAG_M'/io/sums || e=$((e+1)); cat /mnt/'$TAG_S'/host-s.txt >/dev/null || e=$((e+1)); sleep 0.1; done; echo $e >/tmp/io.err; echo $i >/tmp/io.rounds) >/dev/null 2>&1 &'
rc=0
guest "$WRITER" || rc=$?
assert_eq 0 "$rc" "guest writer started on /mnt/$TAG_M"
assert_ok "guest writer is running (10 rounds on the host)" \
    timeout 60 bash -c "until [ \"\$(wc -l <'$SHARE_M/io/seq.txt' 2>/dev/null || echo 0)\" -ge 10 ]; do sleep 0.2; done"

LOOKUP=$("$XVFS_ROOT/vmm-config/xvfs-libvirt-upgrade" "$DOM" "$TAG_M" --print 2>&1) || true
printf '     lookup: %s\n' "${LOOKUP//$'\n'/ }"
assert_eq "$PID_M" "$(sed -n 's/^pid=//p' <<<"$LOOKUP")" "xvfs-libvirt-upgrade finds the managed daemon by domain and tag"
CONTROL=$(sed -n 's/^control=//p' <<<"$LOOKUP")
PIDFILE=$(sed -n 's/^pidfile=//p' <<<"$LOOKUP")
echo "     daemon $PID_M holds libvirt's pid file open: $(holds_file "$PID_M" "$PIDFILE")"
# upgrade_once N: one live upgrade of the managed daemon while the writer runs.
upgrade_once() {
    local n=$1 rc=0 before new old_cg
    before=$(wc -l <"$SHARE_M/io/seq.txt")
    old_cg=$(cat "/proc/$PID_M/cgroup" 2>/dev/null)
    timeout 180 "$XVFS_ROOT/vmm-config/xvfs-libvirt-upgrade" "$DOM" "$TAG_M" --binary "$DAEMON" \
        {LOCK_FD}>&- >"$VMT_DIR/upgrade-$n.log" 2>&1 || rc=$?
    sed 's/^/     upgrade: /' "$VMT_DIR/upgrade-$n.log"
    assert_eq 0 "$rc" "upgrade $n: xvfs-libvirt-upgrade $DOM $TAG_M --binary \$DAEMON"
    new=$(managed_pid "$TAG_M")
    [ -z "$new" ] || MANAGED_PIDS+=("$new")
    assert_ok "upgrade $n: libvirt's pid file names the serving daemon (pid ${new:-none}, was $PID_M)" alive "$new"
    assert_ok "upgrade $n: old daemon (pid $PID_M) is gone or is the new one" \
        bash -c "[ '$new' = '$PID_M' ] || ! [ -d /proc/$PID_M ] || [ \"\$(awk '{print \$3}' /proc/$PID_M/stat)\" = Z ]"
    assert_eq "$old_cg" "$(cat "/proc/$new/cgroup" 2>/dev/null)" "upgrade $n: new daemon is in the old one's cgroups (libvirt's, per domain)"
    assert_ok "upgrade $n: guest I/O goes on (10 more rounds)" \
        timeout 60 bash -c "until [ \"\$(wc -l <'$SHARE_M/io/seq.txt')\" -ge $((before + 10)) ]; do sleep 0.2; done"
    PID_M=${new:-$PID_M}
}

if "$DAEMON" upgrade --help >/dev/null 2>&1; then
    assert_ok "control socket $CONTROL exists" test -S "$CONTROL"
    # Twice: the second one finds the daemon through the pid file the first updated.
    upgrade_once 1
    upgrade_once 2
    echo "     daemon $PID_M holds libvirt's pid file open: $(holds_file "$PID_M" "$PIDFILE")"
else
    fail "live upgrade: '$DAEMON upgrade' does not exist yet (xvirtiofsd upgrade --help fails)"
    sleep 2
fi
rc=0
guest "touch /tmp/io.stop; i=0; while [ ! -e /tmp/io.rounds ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done; echo rounds=\$(cat /tmp/io.rounds) errors=\$(cat /tmp/io.err)" || rc=$?
assert_eq 0 "$rc" "guest writer stopped"
IO_SUMMARY=$(grep -o 'rounds=.*' "$AGENT_OUT" 2>/dev/null || true)
echo "     writer: $IO_SUMMARY"
assert_eq 0 "$(sed -n 's/.*errors=//p' <<<"$IO_SUMMARY")" "guest writer saw no I/O error"
ROUNDS=$(sed -n 's/rounds=\([0-9]*\).*/\1/p' <<<"$IO_SUMMARY")
assert_eq "$(seq 1 "${ROUNDS:-0}" | sha256sum)" "$(sha256sum <"$SHARE_M/io/seq.txt")" \
    "seq.txt on the host is exactly 1..${ROUNDS:-?} (no lost or doubled append)"
assert_ok "every block the guest wrote has its checksum on the host" \
    bash -c "cd '$SHARE_M/io' && [ \"\$(wc -l <sums)\" -eq '${ROUNDS:-0}' ] && sha256sum -c --quiet sums"

# ---- 8. detach the external share ------------------------------------------
# Stop the automount helper first, so it does not mount a share again between
# our umount and the detach.
# shellcheck disable=SC2016 # expanded in the guest
STOP_AUTOMOUNT='for p in /proc/[0-9]*; do grep -q xvfs-automount $p/cmdline 2>/dev/null && kill ${p#/proc/}; done; true'
rc=0
guest "$STOP_AUTOMOUNT; umount /mnt/$TAG_S" || rc=$?
assert_eq 0 "$rc" "guest unmounts /mnt/$TAG_S"
assert_ok "virsh detach-device (external)" virsh_ detach-device "$DOM" "$XML/fs-socket.xml" --live
rc=0
guest "i=0; while grep -qx $TAG_S /sys/fs/virtiofs/*/tag; do [ \$i -lt 150 ] || exit 1; sleep 0.2; i=\$((i+1)); done" || rc=$?
assert_eq 0 "$rc" "device $TAG_S is gone from the guest"
assert_ok "external daemon exited after the detach" wait_gone "$EXT_PID" 30
EXT_RC=0
wait "$EXT_PID" 2>/dev/null || EXT_RC=$?
assert_eq 0 "$EXT_RC" "external daemon exit status"
EXT_PID=
assert_eq 1 "$(virsh_ dumpxml "$DOM" | grep -c '<filesystem')" "libvirt lists one filesystem"

# ---- 8a. snapshot to a file and restore: virsh save / virsh restore --------
# A guest process holds a file open for appending and its cwd in the share
# across the save; libvirt stops QEMU and the managed daemon, and on restore
# starts new ones, the daemon taking the share's state from the file.
# shellcheck disable=SC2016 # expanded in the guest
HOLDER='mkdir -p /mnt/'$TAG_M'/held && (cd /mnt/'$TAG_M'/held; exec 7>>held.log; e=0; while [ ! -e /tmp/held.stop ]; do echo tick >&7 || e=$((e+1)); [ -e ../held ] || e=$((e+1)); sleep 0.2; done; echo end >&7 || e=$((e+1)); echo $e >/tmp/held.err) >/dev/null 2>&1 &'
rc=0
guest "$HOLDER" || rc=$?
assert_eq 0 "$rc" "guest holds held/held.log open with its cwd in /mnt/$TAG_M"
assert_ok "the held file grows on the host" \
    timeout 60 bash -c "until [ \"\$(wc -l <'$SHARE_M/held/held.log' 2>/dev/null || echo 0)\" -ge 5 ]; do sleep 0.2; done"
SAVE=$VMT_DIR/domain.save
rm -f "$SAVE"
OLD_M=$PID_M
assert_ok "virsh save $DOM (to a file)" timeout 300 virsh -q save "$DOM" "$SAVE"
assert_ok "the domain is gone after the save" bash -c "! timeout 30 virsh -q domid '$DOM' >/dev/null 2>&1"
assert_ok "its managed daemon (pid $OLD_M) exited" wait_gone "$OLD_M" 30
SAVED_LINES=$(wc -l <"$SHARE_M/held/held.log")
assert_ok "virsh restore (a new QEMU and a new managed daemon)" timeout 300 virsh -q restore "$SAVE"
assert_eq running "$(virsh_ domstate "$DOM" 2>/dev/null | head -n 1)" "restored domain is running"
PID_M=$(managed_pid "$TAG_M")
[ -z "$PID_M" ] || MANAGED_PIDS+=("$PID_M")
assert_ok "libvirt started a new xvirtiofsd for $TAG_M (pid ${PID_M:-none}, was $OLD_M)" \
    bash -c "[ -n '$PID_M' ] && [ '$PID_M' != '$OLD_M' ] && [ -d /proc/$PID_M ]"
assert_ok "the held file grows again after the restore (was $SAVED_LINES lines)" \
    timeout 60 bash -c "until [ \"\$(wc -l <'$SHARE_M/held/held.log')\" -ge $((SAVED_LINES + 5)) ]; do sleep 0.2; done"
rc=0
guest "touch /tmp/held.stop; i=0; while [ ! -e /tmp/held.err ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done; echo held-errors=\$(cat /tmp/held.err)" || rc=$?
assert_eq 0 "$rc" "guest stopped the held-file writer"
assert_eq "held-errors=0" "$(grep -o 'held-errors=.*' "$AGENT_OUT" 2>/dev/null)" \
    "appends through the held descriptor and the cwd never failed across save and restore"
assert_eq end "$(tail -n 1 "$SHARE_M/held/held.log")" "the held descriptor's last append is on the host"

# ---- 8b. an ID-mapped share (<idmap>): libvirt passes --uid-map/--gid-map --
# The daemon runs in a user namespace where 0..65535 are host 100000..165535:
# what the guest creates as root belongs to host uid 100000, a host file of
# root's is nobody's in the guest. (The automount helper is stopped: the
# guest mounts this one itself.)
SHARE_I=$VMT_DIR/share-idmap
mkdir -p "$SHARE_I"
chown 100000:100000 "$SHARE_I"
echo 'root of the host' >"$SHARE_I/host-root.txt"
"$XVFS_ROOT/vmm-config/xvfs-libvirt-xml" fs-managed "$TAG_I" "$SHARE_I" \
    --binary "$DAEMON" --idmap 0:100000:65536 >"$XML/fs-idmap.xml"
assert_ok "virsh attach-device (managed, <idmap> 0 -> 100000, 65536 IDs) --live" \
    virsh_ attach-device "$DOM" "$XML/fs-idmap.xml" --live
PID_I=$(managed_pid "$TAG_I")
[ -z "$PID_I" ] || MANAGED_PIDS+=("$PID_I")
assert_ok "libvirt started xvirtiofsd for $TAG_I (pid ${PID_I:-none})" alive "$PID_I"
if [ -n "$PID_I" ]; then
    CMDLINE_I=$(tr '\0' ' ' <"/proc/$PID_I/cmdline")
    assert_ok "libvirt passed --uid-map=:0:100000:65536: and --gid-map=:0:100000:65536:" \
        grep -qE -- "--uid-map=:0:100000:65536: .*--gid-map=:0:100000:65536:" <<<"$CMDLINE_I"
fi
rc=0
guest "i=0; until grep -qx $TAG_I /sys/fs/virtiofs/*/tag; do [ \$i -lt 150 ] || exit 1; sleep 0.2; i=\$((i+1)); done
mkdir -p /mnt/$TAG_I && mount -t virtiofs $TAG_I /mnt/$TAG_I || exit 1
echo made >/mnt/$TAG_I/by-root && mkdir /mnt/$TAG_I/d && chown 1000:1000 /mnt/$TAG_I/d || exit 1
echo host-root-owner=\$(stat -c %u:%g /mnt/$TAG_I/host-root.txt)
echo host-root-write=\$(echo x 2>/dev/null >>/mnt/$TAG_I/host-root.txt && echo yes || echo no)
sync; umount /mnt/$TAG_I" || rc=$?
assert_eq 0 "$rc" "guest mounts /mnt/$TAG_I, creates a file as root and chowns a directory to 1000"
assert_eq 100000:100000 "$(stat -c %u:%g "$SHARE_I/by-root" 2>/dev/null)" \
    "<idmap>: the guest root's file is owned by host uid/gid 100000"
assert_eq 101000:101000 "$(stat -c %u:%g "$SHARE_I/d" 2>/dev/null)" \
    "<idmap>: guest uid/gid 1000 is host 101000"
assert_ok "<idmap>: a host root file is nobody's (65534) in the guest" \
    grep -qx "host-root-owner=65534:65534" "$AGENT_OUT"
assert_ok "<idmap>: and the guest's root cannot write it" grep -qx "host-root-write=no" "$AGENT_OUT"
assert_ok "virsh detach-device (ID-mapped)" virsh_ detach-device "$DOM" "$XML/fs-idmap.xml" --live
assert_ok "ID-mapped daemon (pid ${PID_I:-none}) exited after the detach" wait_gone "$PID_I" 30

# ---- 9. detach the managed share, then virsh shutdown ----------------------
# The agent runs from /tmp, so it can unmount its own share; it reports on the
# console when the device is gone. The guest must not power off by itself
# then: libvirt is still finishing the detach (chardev-remove on the monitor)
# after the guest has ejected the device, and a QEMU that exits in between
# makes virsh fail with "Unable to read from monitor". So the guest waits, and
# the test shuts the domain down once the detach is done: `virsh shutdown`
# presses the ACPI power button, which the guest's /init turns into a clean
# power-off.
# shellcheck disable=SC2016 # expanded in the guest
FINAL="umount /mnt/$TAG_M || exit 1
(i=0; while grep -qx $TAG_M /sys/fs/virtiofs/*/tag 2>/dev/null && [ \$i -lt 300 ]; do sleep 0.2; i=\$((i+1)); done
 grep -qx $TAG_M /sys/fs/virtiofs/*/tag 2>/dev/null || echo XVFS-DETACH-SEEN $TAG_M >/dev/console) >/dev/null 2>&1 &"
rc=0
guest "$FINAL" || rc=$?
assert_eq 0 "$rc" "guest unmounts /mnt/$TAG_M (the agent's own share)"
assert_ok "virsh detach-device (managed)" virsh_ detach-device "$DOM" "$XML/fs-managed.xml" --live
assert_ok "device $TAG_M is gone from the guest" wait_for_line "$CONSOLE" "^XVFS-DETACH-SEEN $TAG_M" 60
assert_ok "managed daemon (pid $PID_M) exited after the detach" wait_gone "$PID_M" 30
assert_eq 0 "$(virsh_ dumpxml "$DOM" 2>/dev/null | grep -c '<filesystem')" "libvirt lists no filesystem"
assert_eq running "$(virsh_ domstate "$DOM" 2>/dev/null | head -n 1)" "domain still running after both detaches"
assert_ok "virsh shutdown (ACPI power button)" virsh_ shutdown "$DOM"
assert_ok "guest saw the power button" wait_for_line "$CONSOLE" '^XVFS-POWER-BUTTON' 60
assert_ok "domain shut down (guest powered off)" \
    timeout 90 bash -c "while timeout 30 virsh -q domid '$DOM' >/dev/null 2>&1; do sleep 0.5; done"
LEFT=()
for p in "${MANAGED_PIDS[@]}"; do
    ! alive "$p" || LEFT+=("$p")
done
assert_eq "" "${LEFT[*]}" "no xvirtiofsd left running"

if [ "$VMT_FAILED" -gt 0 ]; then
    echo "     console (last lines):"
    tr -d '\r' <"$CONSOLE" | tail -n 15 | sed 's/^/     | /'
fi
vmt_summary
