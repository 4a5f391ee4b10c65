#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: file-system operations through a real guest on the virtio-fs share.
#
# One boot runs tests/vm/ops-steps.sh in the guest on /mnt/shared/work; the
# same steps then run on the host (same busybox tools) in a scratch directory.
# Checked: every guest step succeeds, guest and host transcripts are equal,
# the two resulting trees are equal (names, types, sizes, modes, owners, link
# counts and targets, device numbers, content hashes), and a file of
# XVFS_BIG_MIB (default 256) MiB keeps its sha256 both ways (written in the
# guest and hashed on the host; written on the host and hashed in the guest).
#
# With XVFS_DAX (a DAX window, QEMU 11.1; run-vm mounts with dax=inode unless
# XVFS_MOUNT_OPTS says otherwise) the same steps run on a DAX mount, and the
# test also checks that the guest mounted with DAX and that the daemon mapped
# files into the window with no failed map (its --metrics-file): the host's
# big file, a whole number of 2 MiB chunks, is read through the window.
#
# Environment: DAEMON (default host/target/release/xvirtiofsd), DAEMON_ARGS,
# XVFS_BIG_MIB, XVFS_DAX, plus everything vmm-config/run-vm reads.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

BIG_MIB=${XVFS_BIG_MIB:-256}
STEPS_SCRIPT=$XVFS_ROOT/tests/vm/ops-steps.sh

# A listing of a tree that must not depend on where or how it was made:
# path, type, mode, owner, link count, size (not for directories), symlink
# target, device numbers, then sha256 of every regular file.
manifest() {
    (
        cd "$1"
        find . -mindepth 1 -printf '%P\t%y\t%m\t%U:%G\t%n\t%s\t%l\n' | LC_ALL=C sort |
            awk -F'\t' 'BEGIN {OFS = "\t"} $2 == "d" {$6 = "-"} {print}'
        find . -mindepth 1 \( -type c -o -type b \) -exec stat -c '%n dev %t:%T' {} + | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    )
}

# The guest side: the steps, then the big files. The guest's file is made in
# tmpfs and hashed there, so the hash is of the bytes the guest meant to write,
# then copied to the share with 1 MiB writes (tee's 4 KiB writes are 15x slower
# under TCG).
write_guest_script() {
    cat >"$1" <<GUEST
M=/mnt/shared/meta
t() { echo "guest: \$1 at \$(cut -d' ' -f1 /proc/uptime) s"; }
grep " /mnt/shared " /proc/mounts >\$M/mount.guest
sh \$M/ops-steps.sh /mnt/shared/work \$M >\$M/transcript.guest 2>&1
t "steps done"
dd if=/dev/urandom of=/tmp/big bs=1M count=$BIG_MIB 2>/dev/null || exit 1
sha256sum /tmp/big | cut -d' ' -f1 >\$M/guest-big.sha256
dd if=/tmp/big of=\$M/guest-big.bin bs=1M 2>/dev/null || exit 1
rm /tmp/big
t "wrote $BIG_MIB MiB"
sha256sum \$M/host-big.bin | cut -d' ' -f1 >\$M/host-big.sha256.guest
t "hashed $BIG_MIB MiB"
GUEST
}

# Host reference run with busybox applets first on PATH (fio stays the host's).
run_host_steps() {
    local bb=$VMT_DIR/busybox-bin applet
    mkdir -p "$bb"
    for applet in $(busybox --list); do
        ln -sf "$(command -v busybox)" "$bb/$applet"
    done
    PATH="$bb:$PATH" busybox sh "$STEPS_SCRIPT" "$1/work" "$1/meta" >"$1/meta/transcript.host" 2>&1
}

check_steps() {
    local transcript=$1 line name
    while IFS= read -r line; do
        name=${line#* }
        name=${name%% *}
        case "$line" in
            "OK "*) pass "guest step $name" ;;
            "FAIL "*) fail "guest step $name (${line##* })" ;;
        esac
    done <"$transcript"
}

# check_dax MOUNT-LINE METRICS: the share was a DAX mount and files went
# through the window (maps made, none failed).
check_dax() {
    local maps failed
    assert_ok "the guest mounted the share with DAX ($(cat "$1" 2>&1))" grep -q 'dax=' "$1"
    maps=$(vmt_dax_metric "$2" maps)
    failed=$(vmt_dax_metric "$2" failed)
    assert_ok "files were mapped through the DAX window ($maps maps)" test "${maps:-0}" -gt 0 2>/dev/null
    assert_eq 0 "$failed" "no DAX map failed"
}

main() {
    need busybox fio sha256sum
    vmt_init ops
    local share=$VMT_DIR/share host=$VMT_DIR/host rc=0 want got
    mkdir -p "$share/work" "$share/meta" "$host/work" "$host/meta"
    cp "$STEPS_SCRIPT" "$share/meta/ops-steps.sh"
    write_guest_script "$share/meta/guest.sh"
    say "writing the host's $BIG_MIB MiB file"
    head -c "${BIG_MIB}M" /dev/urandom >"$share/meta/host-big.bin"

    local metrics=$VMT_DIR/metrics.json
    [ -z "${XVFS_DAX:-}" ] || DAEMON_ARGS="${DAEMON_ARGS:+$DAEMON_ARGS }--metrics-file $metrics"
    DAEMON_ARGS=${DAEMON_ARGS:-} XVFS_TIMEOUT=${XVFS_TIMEOUT:-300} vmt_guest "$share" 'sh /mnt/shared/meta/guest.sh' "$VMT_DIR/guest.out" || rc=$?
    sed 's/^/     /' "$VMT_DIR/guest.out"
    assert_eq 0 "$rc" "guest script exit status"

    run_host_steps "$host"
    assert_eq 0 "$(grep -c '^FAIL' "$host/meta/transcript.host" || true)" "host reference run: no failed step"
    if [ -f "$share/meta/transcript.guest" ]; then
        check_steps "$share/meta/transcript.guest"
        assert_eq "$(grep -cE '^(OK|FAIL) ' "$host/meta/transcript.host")" \
            "$(grep -cE '^(OK|FAIL) ' "$share/meta/transcript.guest")" "guest ran every step"
        assert_files_eq "$host/meta/transcript.host" "$share/meta/transcript.guest" "guest transcript equals host transcript"
    else
        fail "guest wrote no transcript"
    fi

    manifest "$host/work" >"$VMT_DIR/manifest.host"
    manifest "$share/work" >"$VMT_DIR/manifest.guest"
    assert_ok "manifest is not empty" test "$(wc -l <"$VMT_DIR/manifest.host")" -gt 100
    assert_files_eq "$VMT_DIR/manifest.host" "$VMT_DIR/manifest.guest" "guest tree equals host tree"
    assert_eq 1577934245 "$(stat -c %Y "$share/work/t2" 2>&1)" "mtime set in the guest (touch -d) seen on the host"

    want=$((BIG_MIB * 1048576))
    got=$(stat -c %s "$share/meta/guest-big.bin" 2>&1 || true)
    assert_eq "$want" "$got" "guest-written big file size on the host"
    got=$(sha256sum "$share/meta/guest-big.bin" 2>&1 | cut -d' ' -f1)
    assert_eq "$(cat "$share/meta/guest-big.sha256" 2>&1)" "$got" "guest-written $BIG_MIB MiB: sha256 on the host equals the guest's"
    want=$(sha256sum "$share/meta/host-big.bin" | cut -d' ' -f1)
    assert_eq "$want" "$(cat "$share/meta/host-big.sha256.guest" 2>&1)" "host-written $BIG_MIB MiB: sha256 in the guest equals the host's"
    rm -f "$share/meta/guest-big.bin" "$share/meta/host-big.bin"
    [ -z "${XVFS_DAX:-}" ] || check_dax "$share/meta/mount.guest" "$metrics"

    vmt_summary
}

main "$@"
