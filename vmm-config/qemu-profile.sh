# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Library (source it): pick the accelerator and render the QEMU command line
# from vmm-config/qemu-x86_64.args.
#
#   declare -A XVFS_P=([MEM]=1G ...)   parameters, one per @NAME@ in the template
#   xvfs_pick_accel                    sets XVFS_P[ACCEL] and XVFS_P[CPU], reports on stderr
#   xvfs_render_args TEMPLATE          fills the array XVFS_QEMU_ARGS
#   xvfs_qemu_escape STR               doubles commas for a QEMU option value

# shellcheck source=vmm-config/functions.sh
. "$(dirname "${BASH_SOURCE[0]}")/functions.sh"

XVFS_QEMU_TEMPLATE=$XVFS_ROOT/vmm-config/qemu-x86_64.args

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
