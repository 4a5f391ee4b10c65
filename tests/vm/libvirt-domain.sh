# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The transient libvirt domain of a libvirt VM test (source it after lib.sh,
# then set DOM to the domain's name).
#
#   virsh_ ARGS...    virsh -q ARGS, bounded to 60 s
#   dom_exists        whether domain $DOM exists
#   destroy_dom       virsh destroy $DOM if it exists (for a cleanup)
#   take_vm_lock      hold /tmp/xvfs-vm.lock (no two VMs at once) on LOCK_FD;
#                     after 30 min without it: one failure, the summary, exit 1
#   release_vm_lock   close LOCK_FD

export LIBVIRT_DEFAULT_URI=qemu:///system
VM_LOCK=/tmp/xvfs-vm.lock
LOCK_FD=

virsh_() {
    timeout 60 virsh -q "$@"
}

dom_exists() {
    timeout 30 virsh -q domid "$DOM" >/dev/null 2>&1
}

destroy_dom() {
    if dom_exists; then
        say "cleanup: destroying $DOM"
        timeout 60 virsh -q destroy "$DOM" >/dev/null 2>&1 || true
    fi
}

take_vm_lock() {
    say "waiting for $VM_LOCK (no two VMs at once)"
    exec {LOCK_FD}>"$VM_LOCK"
    if ! flock -w 1800 "$LOCK_FD"; then
        fail "could not get $VM_LOCK within 30 min"
        vmt_summary
        exit 1
    fi
}

release_vm_lock() {
    [ -z "$LOCK_FD" ] || exec {LOCK_FD}>&-
}
