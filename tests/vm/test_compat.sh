#!/usr/bin/env bash
# VM test: virtiofsd options whose meaning a guest sees (issue 13), each
# against the default in a second boot.
#
# Boot 1, --announce-submounts --allow-mmap --cache never: a tmpfs mounted
# on the host inside the share appears in the guest as a mount of its own
# (its own line in /proc/mounts, its own device number), and fio's mmap
# engine (MAP_SHARED) writes and verifies a file opened for direct I/O.
# Boot 2, --cache never and the defaults: the tmpfs is part of the share's
# one device, and the shared mmap fails (ENODEV), as with virtiofsd.
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
DAEMON_ARGS="--cache never" vmt_guest "$SHARE" "$GUEST_SCRIPT" "$VMT_DIR/off.out" || rc=$?
out=$VMT_DIR/off.out
assert_eq 0 "$rc" "defaults: guest script exit status"
assert_eq hello-from-tmpfs "$(field sub-content "$out")" "defaults: the host mount's file reads in the guest"
assert_eq 0 "$(field sub-mounts "$out")" "defaults: no submount in the guest"
assert_eq "$(field dev-root "$out")" "$(field dev-sub "$out")" "defaults: the host mount is on the share's device"
assert_ok "defaults: fio's mmap engine fails on a direct-I/O file (rc $(field mmap-rc "$out"))" \
    test "$(field mmap-rc "$out")" != 0
assert_eq 19 "$(field mmap-errno "$out")" "defaults: a shared mapping of a direct-I/O file fails with ENODEV, as with virtiofsd"

vmt_summary
