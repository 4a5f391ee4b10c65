#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: a DAX share under libvirt (issue 32), in the form docs/dax.md gives.
#
# libvirt 11 (bookworm-backports, vmm-config/libvirt-up) has no element for
# a virtio-fs device with a DAX window, so the domain carries it as QEMU
# arguments (<qemu:commandline>: QEMU 11's vhost-user-test-device-pci as
# virtio-fs) and names QEMU 11.1 as its <emulator>
# (build/runtimes/qemu-11.1/qemu-system-x86_64-libvirt: libvirt runs it as
# libvirt-qemu without capabilities). The daemon is started here, with
# --socket-group libvirt-qemu, --tag, --dax-window and --queues 1 (the
# request queues --dax-queues gives QEMU). Checked, each step an assertion:
# the domain runs QEMU 11.1 with the device and libvirt marks it tainted
# (custom-argv); the guest mounts the share with dax=always, reads a
# host file through the window (sha256 as on the host) and writes into it
# (seen on the host); the daemon mapped and QEMU refused nothing (the
# daemon's --metrics-file); the guest powers off and the daemon exits.
#
# Kernel: XVFS_GUEST_KERNEL (default 7, as in make test's QEMU 11.1 subset).
# Holds /tmp/xvfs-vm.lock while the domain exists. About 40 s under TCG.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/libvirt-agent.sh
. "$(dirname "$0")/libvirt-agent.sh"
# shellcheck source=tests/vm/libvirt-domain.sh
. "$(dirname "$0")/libvirt-domain.sh"
# shellcheck source=vmm-config/qemu-profile.sh
. "$XVFS_ROOT/vmm-config/qemu-profile.sh"

DOM=xvfs-dax-$$
TAG=xvfsdax
WINDOW=256M
EMULATOR=$XVFS_ROOT/build/runtimes/qemu-11.1/qemu-system-x86_64-libvirt
GUEST_DIR=$(xvfs_guest_dir "${XVFS_GUEST_KERNEL:-7}")
DAEMON_PID=

vmt_init libvirt-dax
SHARE=$VMT_DIR/share
SOCK_DIR=$(mktemp -d /tmp/xvfs-lvd.XXXXXX)
SOCK=$SOCK_DIR/dax.sock
CONSOLE=$VMT_DIR/console.log
METRICS=$VMT_DIR/metrics.json
mkdir -p "$SHARE"
# QEMU (user libvirt-qemu) reaches the socket; the logs are read back here.
chmod 755 "$VMT_DIR" "$SOCK_DIR"

cleanup() {
    local rc=$?
    destroy_dom
    stop_pid "$DAEMON_PID"
    rm -rf "$SOCK_DIR"
    release_vm_lock
    return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. libvirt, QEMU 11.1 for libvirt, the guest image --------------------
assert_ok "libvirt-up: libvirtd and virtlogd answer" \
    timeout 600 "$XVFS_ROOT/vmm-config/libvirt-up"
assert_ok "QEMU 11.1 runtime with its libvirt emulator wrapper" \
    timeout 600 "$XVFS_ROOT/vmm-config/runtimes.sh" qemu 11.1
assert_ok "libvirt-qemu can run $EMULATOR (no chroot, no privilege)" \
    su -s /bin/sh libvirt-qemu -c "'$EMULATOR' --version | grep -q 'version 11\.1'"
if [ ! -r "$GUEST_DIR/vmlinux" ]; then
    fail "guest image $GUEST_DIR missing: vmm-config/runtimes.sh kernel ${XVFS_GUEST_KERNEL:-7}"
    vmt_summary
    exit 1
fi

take_vm_lock

# ---- 2. the daemon ---------------------------------------------------------
# big.bin: two whole 2 MiB chunks, which QEMU 11.1.3 maps (docs/dax.md).
head -c 4194304 /dev/urandom >"$SHARE/big.bin"
BIG_SHA=$(sha256sum <"$SHARE/big.bin" | cut -d' ' -f1)
"$DAEMON" --socket-path "$SOCK" --socket-group libvirt-qemu --shared-dir "$SHARE" \
    --tag "$TAG" --dax-window "$WINDOW" --queues 1 --metrics-file "$METRICS" \
    </dev/null >"$VMT_DIR/daemon.log" 2>&1 {LOCK_FD}>&- &
DAEMON_PID=$!
assert_ok "daemon (--tag $TAG --dax-window $WINDOW) created its socket" \
    timeout 10 bash -c "until [ -S '$SOCK' ]; do sleep 0.1; done"

# ---- 3. the domain ---------------------------------------------------------
# shellcheck disable=SC2016 # expanded in the guest
CMD='cd /mnt/shared || exit 1
echo "mount $(grep " /mnt/shared " /proc/mounts)"
echo "read $(sha256sum big.bin | cut -d" " -f1)"
dd if=/dev/urandom of=/tmp/patch bs=65536 count=1 2>/dev/null
dd if=/tmp/patch of=big.bin bs=65536 seek=40 conv=notrunc 2>/dev/null || exit 1
sync
echo "patch $(sha256sum /tmp/patch | cut -d" " -f1)"'
"$XVFS_ROOT/vmm-config/xvfs-libvirt-xml" domain "$DOM" --console "$CONSOLE" \
    --kernel "$GUEST_DIR/vmlinux" --initrd "$GUEST_DIR/initramfs.cpio" \
    --emulator "$EMULATOR" --dax-socket "$SOCK" --tag "$TAG" --no-automount \
    --append "xvfs.mountopts=dax=always" --cmd "$CMD" >"$VMT_DIR/domain.xml"
assert_ok "domain XML has the device in <qemu:commandline>" \
    grep -q "vhost-user-test-device-pci,chardev=xvfsdax0,virtio-id=26" "$VMT_DIR/domain.xml"
assert_ok "virsh create (transient domain, <emulator> QEMU 11.1)" virsh_ create "$VMT_DIR/domain.xml"
QEMU_PID=$(cat "/run/libvirt/qemu/$DOM.pid" 2>/dev/null || true)
assert_ok "QEMU (pid ${QEMU_PID:-none}) has the DAX device on its command line" \
    grep -q "vhost-user-test-device-pci" "/proc/${QEMU_PID:-0}/cmdline"
assert_ok "the domain's QEMU is 11.1 (human monitor: info version)" \
    bash -c "virsh -q qemu-monitor-command '$DOM' --hmp 'info version' | grep -q '^11\.1\.'"
assert_ok "libvirt marks the domain tainted (custom-argv)" \
    grep -q "tainted: custom-argv" "/var/log/libvirt/qemu/$DOM.log"

# ---- 4. the guest's run ----------------------------------------------------
assert_ok "the guest ran its command" wait_for_line "$CONSOLE" '^XVFS-EXIT=' 180
OUT=$(tr -d '\r' <"$CONSOLE" | sed -n '/^XVFS-CMD-BEGIN/,/^XVFS-EXIT=/p')
printf '%s\n' "$OUT" | sed 's/^/     guest: /'
assert_eq "XVFS-EXIT=0" "$(grep '^XVFS-EXIT=' <<<"$OUT")" "guest command exit status"
assert_ok "the guest mounted $TAG with dax=always" grep -q "^mount $TAG /mnt/shared virtiofs .*dax=always" <<<"$OUT"
assert_eq "read $BIG_SHA" "$(grep '^read ' <<<"$OUT")" "the guest read the host's 4 MiB file (sha256)"
PATCH=$(sed -n 's/^patch //p' <<<"$OUT")
assert_eq "$PATCH" "$(dd if="$SHARE/big.bin" bs=65536 skip=40 count=1 2>/dev/null | sha256sum | cut -d' ' -f1)" \
    "the host sees the 64 KiB the guest wrote into it"
assert_ok "the guest powered off: the domain is gone" \
    timeout 60 bash -c "while timeout 30 virsh -q domid '$DOM' >/dev/null 2>&1; do sleep 0.5; done"
assert_ok "the daemon exited once QEMU disconnected" timeout 30 tail --pid="$DAEMON_PID" -f /dev/null
DAEMON_RC=0
wait "$DAEMON_PID" || DAEMON_RC=$?
assert_eq 0 "$DAEMON_RC" "daemon exit status"
DAEMON_PID=
MAPS=$(vmt_dax_metric "$METRICS" maps)
echo "     window: maps $MAPS, unmaps $(vmt_dax_metric "$METRICS" unmaps), failed $(vmt_dax_metric "$METRICS" failed)"
assert_ok "the file went through the window ($MAPS maps)" test "${MAPS:-0}" -gt 0 2>/dev/null
assert_eq 0 "$(vmt_dax_metric "$METRICS" failed)" "QEMU refused no map or unmap"

if [ "$VMT_FAILED" -gt 0 ]; then
    echo "     console (last lines):"
    tr -d '\r' <"$CONSOLE" | tail -n 15 | sed 's/^/     | /'
    echo "     daemon log (last lines):"
    tail -n 10 "$VMT_DIR/daemon.log" | sed 's/^/     | /'
fi
vmt_summary
