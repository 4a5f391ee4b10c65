# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Library (source it): pick the accelerator and render the QEMU command line
# from vmm-config/qemu-x86_64.args.
#
#   declare -A XVFS_P=([MEM]=1G ...)   parameters, one per @NAME@ in the template
#   xvfs_pick_accel                    sets XVFS_P[ACCEL] and XVFS_P[CPU], reports on stderr
#   xvfs_render_args TEMPLATE          fills the array XVFS_QEMU_ARGS
#   xvfs_qemu_escape STR               doubles commas for a QEMU option value
#   xvfs_select_runtime                sets XVFS_QEMU_BIN and XVFS_GUEST_DIR from
#                                      XVFS_QEMU and XVFS_GUEST_KERNEL (issue 31)
#   xvfs_qemu_bin VER, xvfs_guest_dir VER   the same for one version

# shellcheck source=vmm-config/functions.sh
. "$(dirname "${BASH_SOURCE[0]}")/functions.sh"

XVFS_QEMU_TEMPLATE=$XVFS_ROOT/vmm-config/qemu-x86_64.args

# The QEMU of XVFS_QEMU=7.2|10.0|11.1 (vmm-config/runtimes.sh installs them).
# Unset or 10.0: qemu-system-x86_64 from PATH, the host's (as before).
xvfs_qemu_bin() {
    local v=$1
    case "$v" in
        10.0) echo qemu-system-x86_64 ;;
        7.2 | 11.1) echo "$XVFS_ROOT/build/runtimes/qemu-$v/qemu-system-x86_64" ;;
        *) die "XVFS_QEMU (make QEMU=) must be 7.2, 10.0 or 11.1, not '$v'" ;;
    esac
}

# The guest image directory of XVFS_GUEST_KERNEL=6.1|6.12|7 (guest-image/build.sh
# --kernel). Unset or 6.12: build/guest, the default image (as before).
xvfs_guest_dir() {
    local v=$1
    case "$v" in
        6.12) echo "$XVFS_ROOT/build/guest" ;;
        6.1 | 7) echo "$XVFS_ROOT/build/guest-$v" ;;
        *) die "XVFS_GUEST_KERNEL (make KERNEL=) must be 6.1, 6.12 or 7, not '$v'" ;;
    esac
}

xvfs_select_runtime() {
    XVFS_QEMU_BIN=$(xvfs_qemu_bin "${XVFS_QEMU:-10.0}")
    XVFS_GUEST_DIR_SELECTED=$(xvfs_guest_dir "${XVFS_GUEST_KERNEL:-6.12}")
    export XVFS_QEMU_BIN XVFS_GUEST_DIR_SELECTED
    if ! command -v "$XVFS_QEMU_BIN" >/dev/null 2>&1; then
        die "QEMU ${XVFS_QEMU:-10.0} not installed ($XVFS_QEMU_BIN); run 'make deps QEMU=${XVFS_QEMU:-10.0}'"
    fi
}

# Why KVM cannot be used here, or nothing when it can.
xvfs_kvm_unusable_reason() {
    if [ ! -e /dev/kvm ]; then
        echo "/dev/kvm missing"
    elif ! { : <>/dev/kvm; } 2>/dev/null; then
        echo "/dev/kvm not openable read-write"
    elif [ -d /sys/module/kvm_pvm ] || grep -qs '^kvm_pvm ' /proc/modules; then
        echo "kvm_pvm detected: /dev/kvm is paravirtual PVM, stock kernels do not boot on it"
    fi
}

# XVFS_ACCEL=kvm|tcg overrides; otherwise KVM when it works, else TCG.
xvfs_pick_accel() {
    local why
    case "${XVFS_ACCEL:-}" in
        kvm) XVFS_P[ACCEL]=kvm why="XVFS_ACCEL=kvm" ;;
        tcg) XVFS_P[ACCEL]=tcg why="XVFS_ACCEL=tcg" ;;
        "")
            why=$(xvfs_kvm_unusable_reason)
            if [ -n "$why" ]; then
                XVFS_P[ACCEL]=tcg
            else
                XVFS_P[ACCEL]=kvm why="/dev/kvm usable"
            fi
            ;;
        *) die "XVFS_ACCEL must be kvm or tcg, not '$XVFS_ACCEL'" ;;
    esac
    # QEMU 7.2's multi-threaded TCG can run a kernel text patch torn: about
    # one boot in a hundred (Linux 6.12 and 7.3, 2 vCPUs) panics ~3 s in
    # with "Fatal exception in interrupt" at sched_clock_cpu+0x9, the static
    # branch sched_clock_init_late enables while the other vCPU takes timer
    # interrupts through it. QEMU 10.0 and 11.1 boot those guests without
    # it; on 7.2 the vCPUs share one host thread.
    if [ "${XVFS_P[ACCEL]}" = tcg ] && [ "${XVFS_QEMU:-10.0}" = 7.2 ]; then
        XVFS_P[ACCEL]=tcg,thread=single
        why+="; QEMU 7.2: single-threaded TCG"
    fi
    if [ "${XVFS_P[ACCEL]}" = kvm ]; then
        XVFS_P[CPU]=host
    else
        XVFS_P[CPU]=max
    fi
    say "accelerator ${XVFS_P[ACCEL]} ($why)"
}

xvfs_qemu_escape() {
    printf '%s' "${1//,/,,}"
}

xvfs_render_args() {
    local template=${1:-$XVFS_QEMU_TEMPLATE} line names name rest
    [ -r "$template" ] || die "QEMU template $template not readable"
    XVFS_QEMU_ARGS=()
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in '' | '#'*) continue ;; esac
        # Collect the placeholders first, so substituted values are never rescanned.
        names=()
        rest=$line
        while [[ $rest =~ @([A-Z_]+)@ ]]; do
            names+=("${BASH_REMATCH[1]}")
            rest=${rest#*"${BASH_REMATCH[0]}"}
        done
        for name in "${names[@]}"; do
            [ -n "${XVFS_P[$name]+set}" ] || die "$template: no value for @$name@"
            line=${line//"@$name@"/"${XVFS_P[$name]}"}
        done
        if [[ $line == *' '* ]]; then
            XVFS_QEMU_ARGS+=("${line%% *}" "${line#* }")
        else
            XVFS_QEMU_ARGS+=("$line")
        fi
    done <"$template"
}
