#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: virtiofsd options whose meaning a guest sees (issue 13), each
# against the default in a second boot.
#
# Boot 1, --announce-submounts --allow-mmap --cache never: a tmpfs mounted
# on the host inside the share appears in the guest as a mount of its own
# (its own line in /proc/mounts, its own device number), and fio's mmap
# engine (MAP_SHARED) writes and verifies a file opened for direct I/O.
# Boot 2, --cache never and the defaults: the tmpfs is part of the share's
# one device, and the shared mmap fails (ENODEV), as with virtiofsd. Also
# --tag: the daemon offers VHOST_USER_PROTOCOL_F_CONFIG, QEMU (which takes
# the tag from its own tag=) does not take it, and the share works.
# Boot 3, --posix-acl: setfacl/getfacl in the guest on host files, default
# ACL inheritance, the caller's umask where no default ACL applies, chmod and
# the ACL mask agreeing.
# Boot 4, --killpriv-v2: a write by a non-owner (uid 1000, through a static
# helper) clears setuid with FUSE_HANDLE_KILLPRIV_V2 negotiated; and STATX:
# GNU stat in the guest shows the host's birth time.
# Boot 5, as root with --uid-map/--gid-map :0:100000:65536: (what libvirt's
# <idmap> passes; test_libvirt.sh does it through libvirt): the guest root's
# files belong to host uid 100000, a host root file is nobody's, and a live
# upgrade is refused with a reason while the daemon serves on.
# Boot 6, --translate-uid/--translate-gid map:0:100000:65536 and
# forbid-guest:70000:1 (the daemon translates; no user namespace): owners
# as with the namespace, and a chown to guest uid 70000 fails.
# Boot 7, unprivileged (a system user, xvfs-idmap, with /etc/subuid and
# /etc/subgid ranges, created here if missing), started as libvirt's session
# mode starts it (--fd, maps through newuidmap): its own uid is the guest's
# root, its subordinate range the guest's other IDs.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init compat
SHARE=$VMT_DIR/share
mkdir -p "$SHARE/sub" "$SHARE/plain"
mount -t tmpfs xvfs-compat "$SHARE/sub"
trap 'umount -l "$SHARE/sub" 2>/dev/null || true' EXIT
echo hello-from-tmpfs >"$SHARE/sub/hello"
# A shared mmap probe for the guest (static: the guest has no libc of its
# own): maps a file MAP_SHARED, writes through the mapping, msyncs; prints
# the errno of the first failing step (0: all worked).
cat >"$VMT_DIR/mmap-probe.c" <<'C'
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 4096) != 0) { printf("%d\n", errno); return 1; }
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { printf("%d\n", errno); return 1; }
    strcpy(p, "written-through-mmap");
    if (msync(p, 4096, MS_SYNC) != 0) { printf("%d\n", errno); return 1; }
    printf("0\n");
    return 0;
}
C
cc -static -O2 -o "$SHARE/mmap-probe" "$VMT_DIR/mmap-probe.c"

# shellcheck disable=SC2016 # expanded by the guest's shell, not here
GUEST_SCRIPT='
S=/mnt/shared
ls $S/sub > /dev/null
echo "sub-content=$(cat $S/sub/hello)"
echo "dev-root=$(stat -c %d $S) dev-plain=$(stat -c %d $S/plain) dev-sub=$(stat -c %d $S/sub)"
echo "sub-mounts=$(grep -c " $S/sub " /proc/mounts)"
rm -f $S/mm.dat
fio --name=mm --filename=$S/mm.dat --size=256k --bs=4k --rw=randwrite --ioengine=mmap \
    --verify=crc32c --do_verify=1 --eta=never --output=/tmp/mm.out > /tmp/mm.log 2>&1
echo "mmap-rc=$?"
echo "mmap-errno=$($S/mmap-probe $S/probe.dat)"
touch $S/acl-probe; echo "acl-refused=$(setfacl -m u:1000:r $S/acl-probe 2>&1 | grep -c "Operation not supported")"
'

field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2" | head -n 1; }

rc=0
DAEMON_ARGS="--announce-submounts --allow-mmap --cache never" \
    vmt_guest "$SHARE" "$GUEST_SCRIPT" "$VMT_DIR/on.out" || rc=$?
out=$VMT_DIR/on.out
assert_eq 0 "$rc" "--announce-submounts --allow-mmap: guest script exit status"
assert_eq hello-from-tmpfs "$(field sub-content "$out")" "the host mount's file reads in the guest"
assert_eq 1 "$(field sub-mounts "$out")" "--announce-submounts: the host mount is a mount of its own in the guest"
assert_ok "--announce-submounts: it has its own device number ($(field dev-sub "$out") vs $(field dev-root "$out"))" \
    test "$(field dev-sub "$out")" != "$(field dev-root "$out")"
assert_eq "$(field dev-root "$out")" "$(field dev-plain "$out")" \
    "--announce-submounts: a plain directory stays on the share's device"
assert_eq 0 "$(field mmap-rc "$out")" "--allow-mmap: fio's mmap engine writes and verifies a direct-I/O file"
assert_eq 0 "$(field mmap-errno "$out")" "--allow-mmap: a shared mapping of a direct-I/O file works"
assert_eq written-through-mmap "$(tr -d '\0' <"$SHARE/probe.dat")" \
    "--allow-mmap: what the guest wrote through the mapping is in the host file"

rc=0
DAEMON_ARGS="--cache never --tag advertised" vmt_guest "$SHARE" "$GUEST_SCRIPT" "$VMT_DIR/off.out" || rc=$?
out=$VMT_DIR/off.out
assert_eq 0 "$rc" "defaults (and --tag, which QEMU's vhost-user-fs ignores): guest script exit status"
assert_eq hello-from-tmpfs "$(field sub-content "$out")" "defaults: the host mount's file reads in the guest"
assert_eq 0 "$(field sub-mounts "$out")" "defaults: no submount in the guest"
assert_eq "$(field dev-root "$out")" "$(field dev-sub "$out")" "defaults: the host mount is on the share's device"
assert_ok "defaults: fio's mmap engine fails on a direct-I/O file (rc $(field mmap-rc "$out"))" \
    test "$(field mmap-rc "$out")" != 0
assert_eq 19 "$(field mmap-errno "$out")" "defaults: a shared mapping of a direct-I/O file fails with ENODEV, as with virtiofsd"
assert_eq 1 "$(field acl-refused "$out")" "defaults: setfacl is not supported without --posix-acl"

# ---- --posix-acl ------------------------------------------------------------
ACL=$VMT_DIR/acl
mkdir -p "$ACL"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
ACL_SCRIPT='
S=/mnt/shared
mkdir $S/dir && touch $S/dir/f
setfacl -m u:1000:rwx $S/dir/f && echo set=yes
echo get=$(getfacl -n $S/dir/f 2>/dev/null | grep -c "^user:1000:rwx")
setfacl -d -m u:1001:rw $S/dir && touch $S/dir/inherited && mkdir $S/dir/sub
echo inherited=$(getfacl -n $S/dir/inherited 2>/dev/null | grep -c "^user:1001:rw-")
echo inherited-default=$(getfacl -n $S/dir/sub 2>/dev/null | grep -c "^default:user:1001:rw-")
umask 027; mkdir $S/plain && touch $S/plain/m
echo umask-mode=$(stat -c %a $S/plain/m)
chmod 640 $S/dir/f
echo mask-after-chmod=$(getfacl -n $S/dir/f 2>/dev/null | sed -n "s/^mask::\(.*\)/\1/p")
'
rc=0
DAEMON_ARGS="--posix-acl" vmt_guest "$ACL" "$ACL_SCRIPT" "$VMT_DIR/acl.out" || rc=$?
out=$VMT_DIR/acl.out
assert_eq 0 "$rc" "--posix-acl: guest script exit status"
assert_eq yes "$(field set "$out")" "--posix-acl: setfacl in the guest"
assert_eq 1 "$(field get "$out")" "--posix-acl: getfacl in the guest shows the entry"
assert_ok "--posix-acl: the host file has the ACL entry" \
    bash -c "getfacl -n '$ACL/dir/f' 2>/dev/null | grep -q '^user:1000:r'"
assert_eq 1 "$(field inherited "$out")" "--posix-acl: a new file inherits the directory's default ACL"
assert_eq 1 "$(field inherited-default "$out")" "--posix-acl: a new directory inherits it as its default ACL"
assert_ok "--posix-acl: the inherited entry is on the host too" \
    bash -c "getfacl -n '$ACL/dir/inherited' 2>/dev/null | grep -q '^user:1001:rw-'"
assert_eq 640 "$(field umask-mode "$out")" "--posix-acl: without a default ACL the caller's umask (027) applies"
assert_eq 640 "$(stat -c %a "$ACL/plain/m")" "--posix-acl: and the host file has that mode"
assert_eq r-- "$(field mask-after-chmod "$out")" "--posix-acl: chmod 640 narrows the ACL mask (mode and ACL agree)"

# ---- --killpriv-v2, and STATX ---------------------------------------------
# A static helper for the guest: runs a command as another uid and gid.
cat >"$VMT_DIR/as-uid.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int id = atoi(argv[1]);
    if (setgid(id) != 0 || setuid(id) != 0) { perror("as-uid"); return 2; }
    execv(argv[2], argv + 2);
    perror("as-uid: exec");
    return 2;
}
C
KPV=$VMT_DIR/killpriv
mkdir -p "$KPV"
cc -static -O2 -o "$KPV/as-uid" "$VMT_DIR/as-uid.c"
echo 'made on the host' >"$KPV/host-made"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
KPV_SCRIPT='
S=/mnt/shared
echo data >$S/suid && chmod 4777 $S/suid && echo before=$(stat -c %a $S/suid)
$S/as-uid 1000 /bin/sh -c "echo more >>$S/suid" && echo wrote=yes
echo after=$(stat -c %a $S/suid)
echo btime=$(gnu-stat -c %W $S/host-made)
echo btime-new=$(gnu-stat -c %W $S/suid)
'
rc=0
DAEMON_ARGS="--killpriv-v2" vmt_guest "$KPV" "$KPV_SCRIPT" "$VMT_DIR/killpriv.out" || rc=$?
out=$VMT_DIR/killpriv.out
assert_eq 0 "$rc" "--killpriv-v2: guest script exit status"
flags=$(sed -n 's/.*FUSE session started: protocol [0-9.]*, flags \(0x[0-9a-f]*\).*/\1/p' "$VMT_DIR/run/daemon.log" | head -n 1)
assert_ok "--killpriv-v2: FUSE_HANDLE_KILLPRIV_V2 negotiated with the guest (flags ${flags:-none})" \
    test "$(( ${flags:-0} >> 28 & 1 ))" = 1
assert_eq 4777 "$(field before "$out")" "--killpriv-v2: a setuid file made in the guest"
assert_eq yes "$(field wrote "$out")" "--killpriv-v2: uid 1000 writes to it"
assert_eq 777 "$(field after "$out")" "--killpriv-v2: the write by a non-owner cleared setuid"
assert_eq 777 "$(stat -c %a "$KPV/suid")" "--killpriv-v2: and on the host file"
assert_eq "$(stat -c %W "$KPV/host-made")" "$(field btime "$out")" \
    "STATX: the guest's birth time of a host file is the host's"
assert_ok "STATX: a file made in the guest has a birth time ($(field btime-new "$out"))" \
    test "$(field btime-new "$out")" -gt 0

# ---- ID-mapped user namespace, as root -------------------------------------
IDM=$VMT_DIR/idmap
mkdir -p "$IDM"
chown 100000:100000 "$IDM"
echo 'root of the host' >"$IDM/host-root.txt"
CTL=$VMT_DIR/idmap-ctl.sock
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
ID_SCRIPT='
S=/mnt/shared
echo made >$S/by-root && mkdir $S/d && chown 1000:1000 $S/d && echo created=yes
echo host-root-owner=$(stat -c %u:%g $S/host-root.txt)
echo host-root-write=$(echo x 2>/dev/null >>$S/host-root.txt && echo yes || echo no)
touch $S/ready
i=0; while [ ! -e $S/upgrade-tried ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
echo after-upgrade=$(cat $S/by-root)
'
idmap_host_side() {
    local rc=0 pid
    for _ in $(seq 1 600); do [ -e "$IDM/ready" ] && break; sleep 0.1; done
    pid=$(vmt_status "$CTL" pid)
    mapfile -t args < <(vmt_successor_args "$pid")
    "$DAEMON" upgrade --control "$CTL" -- "${args[@]}" >"$VMT_DIR/idmap-upgrade.log" 2>&1 || rc=$?
    echo "CHECK upgrade-refused 1 $rc"
    echo "CHECK upgrade-refusal-says-why 1 $(grep -c "live upgrade is not supported" "$VMT_DIR/idmap-upgrade.log")"
    echo "CHECK same-daemon-after $pid $(vmt_status "$CTL" pid)"
    touch "$IDM/upgrade-tried"
}
idmap_host_side >"$VMT_DIR/idmap-host.txt" 2>&1 &
HOST=$!
rc=0
DAEMON_ARGS="--uid-map=:0:100000:65536: --gid-map=:0:100000:65536: --control $CTL" \
    vmt_guest "$IDM" "$ID_SCRIPT" "$VMT_DIR/idmap.out" || rc=$?
touch "$IDM/upgrade-tried"
wait "$HOST" || true
out=$VMT_DIR/idmap.out
assert_eq 0 "$rc" "--uid-map as root: guest script exit status"
assert_eq yes "$(field created "$out")" "--uid-map as root: the guest creates a file and chowns a directory"
assert_eq 100000:100000 "$(stat -c %u:%g "$IDM/by-root")" "--uid-map as root: the guest root's file is host uid/gid 100000"
assert_eq 101000:101000 "$(stat -c %u:%g "$IDM/d")" "--uid-map as root: guest 1000 is host 101000"
assert_eq 65534:65534 "$(field host-root-owner "$out")" "--uid-map as root: a host root file is nobody's in the guest"
assert_eq no "$(field host-root-write "$out")" "--uid-map as root: the guest's root cannot write it"
vmt_checks "$VMT_DIR/idmap-host.txt" "--uid-map as root: "
assert_eq made "$(field after-upgrade "$out")" "--uid-map as root: the daemon serves on after the refused upgrade"

# ---- --translate-uid/--translate-gid: the daemon translates, no namespace ---
TRN=$VMT_DIR/translate
mkdir -p "$TRN"
chown 100000:100000 "$TRN"
echo 'owned by host 100005' >"$TRN/host-file"
chown 100005:100005 "$TRN/host-file"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
TRN_SCRIPT='
S=/mnt/shared
echo made >$S/by-root && mkdir $S/d && chown 1000:1000 $S/d && echo created=yes
echo host-file-owner=$(stat -c %u:%g $S/host-file)
echo forbidden=$(chown 70000 $S/d 2>/dev/null && echo yes || echo no)
'
rc=0
DAEMON_ARGS="--translate-uid=map:0:100000:65536 --translate-gid=map:0:100000:65536 --translate-uid=forbid-guest:70000:1" \
    vmt_guest "$TRN" "$TRN_SCRIPT" "$VMT_DIR/translate.out" || rc=$?
out=$VMT_DIR/translate.out
assert_eq 0 "$rc" "--translate-uid: guest script exit status"
assert_eq yes "$(field created "$out")" "--translate-uid: the guest creates a file and chowns a directory"
assert_eq 100000:100000 "$(stat -c %u:%g "$TRN/by-root")" "--translate-uid map: the guest root's file is host 100000"
assert_eq 101000:101000 "$(stat -c %u:%g "$TRN/d")" "--translate-uid map: guest 1000 is host 101000"
assert_eq 5:5 "$(field host-file-owner "$out")" "--translate-uid map: host 100005 is guest 5"
assert_eq no "$(field forbidden "$out")" "--translate-uid forbid-guest: chown to guest uid 70000 is refused"
assert_eq 101000 "$(stat -c %u "$TRN/d")" "--translate-uid forbid-guest: the owner did not change"

# ---- unprivileged, with subordinate IDs (libvirt's session mode) ------------
if ! id xvfs-idmap >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin xvfs-idmap
fi
for f in /etc/subuid /etc/subgid; do
    grep -q '^xvfs-idmap:' "$f" 2>/dev/null || echo 'xvfs-idmap:300000:65536' >>"$f"
done
SUB=$(sed -n 's/^xvfs-idmap:\([0-9]*\):.*/\1/p' /etc/subuid | head -n 1)
SUBG=$(sed -n 's/^xvfs-idmap:\([0-9]*\):.*/\1/p' /etc/subgid | head -n 1)
U=$(id -u xvfs-idmap)
G=$(id -g xvfs-idmap)
UNP=$VMT_DIR/unpriv
mkdir -p "$UNP"
chown "$U:$G" "$UNP"
printf '#!/bin/sh\nexec setpriv --reuid=%s --regid=%s --clear-groups -- "%s" "$@"\n' \
    "$U" "$G" "$DAEMON" >"$VMT_DIR/as-xvfs-idmap"
chmod 755 "$VMT_DIR/as-xvfs-idmap"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
UNP_SCRIPT='
S=/mnt/shared
echo made >$S/by-root && mkdir $S/d && chown 1000:1000 $S/d && echo created=yes
'
rc=0
DAEMON=$XVFS_ROOT/tests/vm/fd-launcher.py XVFS_REAL_DAEMON=$VMT_DIR/as-xvfs-idmap \
    DAEMON_ARGS="--no-control --uid-map=:0:$U:1: --uid-map=:1:$SUB:65536: --gid-map=:0:$G:1: --gid-map=:1:$SUBG:65536:" \
    vmt_guest "$UNP" "$UNP_SCRIPT" "$VMT_DIR/unpriv.out" || rc=$?
out=$VMT_DIR/unpriv.out
assert_eq 0 "$rc" "unprivileged with subordinate IDs: guest script exit status"
assert_eq yes "$(field created "$out")" "unprivileged: the guest creates a file and chowns a directory"
assert_eq "$U:$G" "$(stat -c %u:%g "$UNP/by-root")" "unprivileged: the guest root's file is the daemon user's ($U:$G)"
assert_eq "$((SUB + 999)):$((SUBG + 999))" "$(stat -c %u:%g "$UNP/d")" \
    "unprivileged: guest 1000 is the 1000th subordinate ID"
assert_ok "unprivileged: the daemon ran as uid $U, in a user namespace of its own" \
    grep -q "user namespace: uid :0:$U:1: :1:$SUB:65536:" "$VMT_DIR/run/daemon.log"

vmt_summary
