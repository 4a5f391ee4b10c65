#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes virtio-fs-ext/tests/golden/virtiofsd-<version>.bin: the device state
# upstream virtiofsd writes for a migration, taken from a real one. A guest
# on virtiofsd (find-paths) holds a directory as its cwd, a file open for
# reading and one for appending, and has looked up a nested file; the VM
# migrates to xvirtiofsd built with the fault-injection feature, which with
# XVFS_MIGRATION_DUMP writes the bytes it received (inside its sandbox: the
# share). Not part of make test (the sample is committed; golden.rs reads
# it): run again to refresh it for another virtiofsd.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"
# shellcheck source=vmm-config/qemu-profile.sh
. "$XVFS_ROOT/vmm-config/qemu-profile.sh"

vmt_init capture-virtiofsd
VIRTIOFSD=${XVFS_VIRTIOFSD:-/opt/xvirtiofs/virtiofsd/bin/virtiofsd}
QMP=$XVFS_ROOT/tests/vm/qmp.py
xvfs_select_runtime
GUEST_DIR=$XVFS_GUEST_DIR_SELECTED
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
GUEST_SCRIPT='S=/mnt/shared; cd $S/d; exec 3< $S/keep; exec 4>> $S/d/append.log
cat $S/d/e/nested >/dev/null; touch $S/started
while [ ! -e $S/done ]; do echo a >&4; sleep 0.2; done'
# shellcheck source=tests/vm/vm_pair.sh
. "$(dirname "$0")/vm_pair.sh"
RELEASE=${CARGO_TARGET_DIR:-$XVFS_ROOT/host/target}/release
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd --features fault-injection)
FAULTS=$VMT_DIR/xvirtiofsd-faults
cp "$RELEASE/xvirtiofsd" "$FAULTS"
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)

SHARE=$VMT_DIR/share
new_share "$SHARE"
mkdir -p "$SHARE/d/e"
echo nested >"$SHARE/d/e/nested"
DAEMON_BIN=$VIRTIOFSD start_daemon v "$SHARE" --migration-mode find-paths
start_vm v
guest_started "$SHARE" v "capture" || { vmt_summary; exit 1; }
sleep 1
XVFS_MIGRATION_DUMP=/received.bin DAEMON_BIN=$FAULTS start_daemon x "$SHARE"
migrate v x
assert_eq completed "${RES%% *}" "virtiofsd -> xvirtiofsd: $RES"
VERSION=$("$VIRTIOFSD" --version 2>&1 | awk '{print $NF; exit}')
OUT=$XVFS_ROOT/virtio-fs-ext/tests/golden/virtiofsd-$VERSION.bin
if [ -s "$SHARE/received.bin" ]; then
    cp "$SHARE/received.bin" "$OUT"
    pass "virtiofsd $VERSION's device state: $OUT ($(stat -c %s "$OUT") bytes)"
else
    fail "the destination wrote no device state"
fi
touch "$SHARE/done"
cleanup
vmt_summary
