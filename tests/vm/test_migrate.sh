#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: live migration of a VM with a virtio-fs share, between two QEMU
# processes on this machine (QEMU's -incoming), each with its own daemon on
# the same directory.
#
# 1. xvirtiofsd -> xvirtiofsd, XVFS_MIGRATIONS (default 6) migrations back and
#    forth, alternating --migration-mode find-paths (with
#    --migration-verify-handles) and file-handles, while the guest runs fio
#    with crc32c verification, a 200/s request stream, keeps one file open
#    for reading and one for appending, and has its working directory in the
#    share. Checked: every migration completes; 0 I/O errors; verification
#    passes; both descriptors still work (the appended lines are on the
#    host); the working directory works; `stat -c %i` of a file is unchanged.
#    Printed: the guest-visible pause per migration (the largest gaps of the
#    request stream) and QEMU's own downtime figure.
# 2. virtiofsd 1.14 -> xvirtiofsd -> virtiofsd 1.14 (the second written in
#    virtiofsd's own format, --migration-target virtiofsd): the same checks
#    after both migrations.
# 3. Faults: the destination serves a copy of the share that lacks a file the
#    guest holds open. With --migration-on-error=abort the migration fails
#    and the guest carries on on the source; with guest-error it completes and
#    the guest gets EIO for that file only.
# 4. A source that writes a stream version the destination does not read
#    (a build with the fault-injection feature, XVFS_MIGRATION_FAULT=
#    newer-format): the destination refuses it with one clear error, the
#    migration fails and the guest carries on on the source.
# 5. Across builds from git history (RELEASES, tests/vm/releases.sh): the
#    previous release -> HEAD -> the previous release, each completing with
#    the guest's files intact (when RELEASES has a release older than HEAD's
#    sources); then to the last build before release numbering (which reads
#    stream version 1 only): refused naming both versions, the guest
#    carrying on on the source.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"
# shellcheck source=vmm-config/qemu-profile.sh
. "$XVFS_ROOT/vmm-config/qemu-profile.sh"
# shellcheck source=tests/vm/releases.sh
. "$(dirname "$0")/releases.sh"
# shellcheck source=tests/vm/vm_pair.sh
. "$(dirname "$0")/vm_pair.sh"

vmt_init migrate
MIGRATIONS=${XVFS_MIGRATIONS:-6}
VIRTIOFSD=${XVFS_VIRTIOFSD:-/opt/xvirtiofs/virtiofsd/bin/virtiofsd}
QMP=$XVFS_ROOT/tests/vm/qmp.py
# XVFS_QEMU / XVFS_GUEST_KERNEL pick the QEMU and the image (qemu-profile.sh).
xvfs_select_runtime
GUEST_DIR=$XVFS_GUEST_DIR_SELECTED
# ---- 1. xvirtiofsd <-> xvirtiofsd ----
SHARE=$VMT_DIR/share
new_share "$SHARE"
COMMON=(--modcaps=+dac_read_search)
start_daemon a "$SHARE" "${COMMON[@]}" --migration-mode find-paths --migration-verify-handles
start_vm a
if guest_started "$SHARE" a "xvirtiofsd<->xvirtiofsd"; then
    pass "guest started its workload"
    from=a to=b src_mode=find-paths
    : >"$VMT_DIR/downtimes.txt"
    for n in $(seq 1 "$MIGRATIONS"); do
        # The mode is the source's: odd rounds leave a find-paths daemon,
        # even rounds a file-handles one.
        if [ $((n % 2)) -eq 1 ]; then mode=(--migration-mode file-handles); else mode=(--migration-mode find-paths --migration-verify-handles); fi
        start_daemon "$to" "$SHARE" "${COMMON[@]}" "${mode[@]}"
        migrate "$from" "$to"
        res=$RES
        assert_eq completed "${res%% *}" "migration $n ($from -> $to, source --migration-mode $src_mode): $res"
        src_mode=${mode[1]}
        echo "${res#* }" >>"$VMT_DIR/downtimes.txt"
        [[ $res == completed* ]] || break
        tmp=$from from=$to to=$tmp
        sleep 2
    done
    touch "$SHARE/done"
    wait "${QEMU_PID[$from]}" 2>/dev/null || true
    check_guest "$SHARE" "xvirtiofsd<->xvirtiofsd"
    if p=$(pauses "$SHARE" "$MIGRATIONS" "xvirtiofsd<->xvirtiofsd"); then
        pass "$p; QEMU downtime (ms): $(paste -sd' ' "$VMT_DIR/downtimes.txt")"
    else
        fail "$p"
    fi
    grep -h "migration:" "$VMT_DIR"/[ab].daemon.log | sort | uniq -c | sed 's/^/     /' | head -n 12
fi
cleanup

# ---- 2. virtiofsd -> xvirtiofsd ----
if [ -x "$VIRTIOFSD" ]; then
    SHARE=$VMT_DIR/share-v
    new_share "$SHARE"
    DAEMON_BIN=$VIRTIOFSD start_daemon v "$SHARE" --migration-mode find-paths
    start_vm v
    if guest_started "$SHARE" v "virtiofsd->xvirtiofsd"; then
        # The destination writes virtiofsd's format when it is the source.
        start_daemon x "$SHARE" --migration-target virtiofsd
        migrate v x
        res=$RES
        assert_eq completed "${res%% *}" "virtiofsd -> xvirtiofsd migration: $res"
        assert_ok "xvirtiofsd read virtiofsd's stream" grep -q "state from virtiofsd" "$VMT_DIR/x.daemon.log"
        sleep 3
        DAEMON_BIN=$VIRTIOFSD start_daemon v2 "$SHARE" --migration-mode find-paths
        migrate x v2
        res=$RES
        assert_eq completed "${res%% *}" "xvirtiofsd -> virtiofsd migration (--migration-target virtiofsd): $res"
        assert_ok "xvirtiofsd wrote virtiofsd's format" \
            grep -q "written in virtiofsd's format" "$VMT_DIR/x.daemon.log"
        sleep 3
        touch "$SHARE/done"
        wait "${QEMU_PID[v2]}" 2>/dev/null || true
        check_guest "$SHARE" "virtiofsd->xvirtiofsd->virtiofsd"
        if p=$(pauses "$SHARE" 2 "virtiofsd->xvirtiofsd->virtiofsd"); then pass "$p"; else fail "$p"; fi
    fi
    cleanup
else
    fail "virtiofsd not installed at $VIRTIOFSD (make deps builds it)"
fi

# ---- 3. A file the destination cannot find ----
fault_round() { # fault_round ON-ERROR
    local on=$1 share=$VMT_DIR/share-$1 copy=$VMT_DIR/copy-$1
    new_share "$share"
    echo held >"$share/held"
    # The guest also holds "held" open (fd 5), then waits for the verdict.
    local script
    # shellcheck disable=SC2016 # expanded by the guest's shell, not here
    script='S=/mnt/shared; exec 5< $S/held; exec 3< $S/keep; touch $S/started
while [ ! -e $S/done ]; do sleep 0.2; done
echo "keep=$(cat <&3) held=$(cat <&5 2>/dev/null || echo EIO) new=$(echo n > $S/new && cat $S/new)" > $S/r.txt'
    GUEST_SCRIPT=$script start_daemon s "$share"
    GUEST_SCRIPT=$script start_vm s
    if ! guest_started "$share" s "$on"; then
        cleanup
        return
    fi
    # The destination's share: a copy without "held", as if it had been
    # deleted between the source's save and the destination's load.
    rm -rf "$copy"
    cp -a "$share" "$copy"
    rm "$copy/held"
    start_daemon d "$copy" --migration-on-error "$on"
    local res
    GUEST_SCRIPT=$script migrate s d
    res=$RES
    if [ "$on" = abort ]; then
        assert_eq failed "${res%% *}" "abort: the migration is refused ($res)"
        assert_ok "abort: the destination said why" grep -q "held\|not found\|cannot open" "$VMT_DIR/d.daemon.log"
        touch "$share/done"
        wait "${QEMU_PID[s]}" 2>/dev/null || true
        assert_eq "keep=before held=held new=n" "$(cat "$share/r.txt" 2>/dev/null)" \
            "abort: the guest carried on on the source, every file intact"
    else
        assert_eq completed "${res%% *}" "guest-error: the migration completes ($res)"
        touch "$copy/done"
        wait "${QEMU_PID[d]}" 2>/dev/null || true
        assert_eq "keep=before held=EIO new=n" "$(cat "$copy/r.txt" 2>/dev/null)" \
            "guest-error: EIO for the lost file only, the rest works"
    fi
    cleanup
}
fault_round abort
fault_round guest-error

# ---- 4. A stream of a version the destination does not read ----
# A build with the test hooks (as test_upgrade.sh makes it); the plain build
# is rebuilt last so that host/target/release holds it.
BIN_DIR=$VMT_DIR/bin
mkdir -p "$BIN_DIR"
RELEASE=${CARGO_TARGET_DIR:-$XVFS_ROOT/host/target}/release
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd --features fault-injection)
cp "$RELEASE/xvirtiofsd" "$BIN_DIR/xvirtiofsd-faults"
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)
# The migration versions this build reads, from its --version.
read -r MIG_READS_MIN MIG_READS_MAX < <("$RELEASE/xvirtiofsd" --version |
    awk '/^migration format/ { sub(":", "", $5); split($5, r, "-"); print r[1], r[2]; exit }')
SHARE=$VMT_DIR/share-newer
new_share "$SHARE"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
NEWER_SCRIPT='S=/mnt/shared; exec 3< $S/keep; touch $S/started
while [ ! -e $S/done ]; do sleep 0.2; done
echo "keep=$(cat <&3) new=$(echo n > $S/new && cat $S/new)" > $S/r.txt'
XVFS_MIGRATION_FAULT=newer-format DAEMON_BIN=$BIN_DIR/xvirtiofsd-faults \
    GUEST_SCRIPT=$NEWER_SCRIPT start_daemon n "$SHARE"
GUEST_SCRIPT=$NEWER_SCRIPT start_vm n
if guest_started "$SHARE" n "newer stream version"; then
    start_daemon o "$SHARE"
    GUEST_SCRIPT=$NEWER_SCRIPT migrate n o
    assert_eq failed "${RES%% *}" "newer stream version: the migration is refused ($RES)"
    assert_ok "newer stream version: the destination says which version it reads" \
        grep -q "migration stream version $((MIG_READS_MAX + 1)) is not supported (this build reads versions $MIG_READS_MIN to $MIG_READS_MAX)" "$VMT_DIR/o.daemon.log"
    touch "$SHARE/done"
    wait "${QEMU_PID[n]}" 2>/dev/null || true
    assert_eq "keep=before new=n" "$(cat "$SHARE/r.txt" 2>/dev/null)" \
        "newer stream version: the guest carried on on the source"
fi
cleanup

# ---- 5. Across builds from git history ----
mapfile -t SUPPORTED < <(release_supported)
PRE_BIN=$(release_binary pre-0.2.0)
HEAD_BIN=$XVFS_ROOT/host/target/release/xvirtiofsd
SHARE=$VMT_DIR/share-releases
new_share "$SHARE"
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
REL_SCRIPT='S=/mnt/shared; exec 3< $S/keep; exec 4>> $S/append.log; cd $S; touch $S/started
n=0; e=0; while [ ! -e $S/done ]; do n=$((n+1)); echo "a$n" >&4 || e=$((e+1)); sleep 0.2; done
echo "keep=$(cat <&3) cwd=$(echo c > cwdfile && cat cwdfile) appends=$n lines=$(wc -l < append.log) append-errors=$e" > $S/r.txt'
if [ "${#SUPPORTED[@]}" -gt 0 ]; then
    first=$(release_binary "${SUPPORTED[0]}")
    for r in "${SUPPORTED[@]}"; do release_binary "$r" >/dev/null; done
    say "migration across releases: ${SUPPORTED[*]} <-> HEAD"
else
    first=$HEAD_BIN
    say "migration across releases: no release older than HEAD's sources; from HEAD only"
fi
DAEMON_BIN=$first GUEST_SCRIPT=$REL_SCRIPT start_daemon r0 "$SHARE"
GUEST_SCRIPT=$REL_SCRIPT start_vm r0
if guest_started "$SHARE" r0 "across releases"; then
    # Up from the oldest supported release to HEAD, then down to each
    # release and up again.
    from=r0 running=${SUPPORTED[0]:-} i=0
    for r in "${SUPPORTED[@]}"; do
        i=$((i + 1))
        DAEMON_BIN=$HEAD_BIN start_daemon "rh$i" "$SHARE"
        GUEST_SCRIPT=$REL_SCRIPT migrate "$from" "rh$i"
        assert_eq completed "${RES%% *}" "release $running -> HEAD: the migration completes ($RES)"
        DAEMON_BIN=$(release_binary "$r") start_daemon "rr$i" "$SHARE"
        GUEST_SCRIPT=$REL_SCRIPT migrate "rh$i" "rr$i"
        assert_eq completed "${RES%% *}" "HEAD -> release $r: the migration completes ($RES)"
        from=rr$i running=$r
    done
    if [ "${#SUPPORTED[@]}" -gt 1 ]; then
        DAEMON_BIN=$HEAD_BIN start_daemon rh-last "$SHARE"
        GUEST_SCRIPT=$REL_SCRIPT migrate "$from" rh-last
        assert_eq completed "${RES%% *}" "release $running -> HEAD: the migration completes ($RES)"
        from=rh-last
    fi
    # The last build before release numbering as the destination of a
    # release's stream: refused, the guest carries on.
    DAEMON_BIN=$PRE_BIN start_daemon rp "$SHARE"
    GUEST_SCRIPT=$REL_SCRIPT migrate "$from" rp
    assert_eq failed "${RES%% *}" "to the pre-0.2.0 build: the migration is refused ($RES)"
    assert_ok "to the pre-0.2.0 build: it says which version it reads" \
        grep -q "migration stream version 2 is not supported (this build reads version 1)" "$VMT_DIR/rp.daemon.log"
    touch "$SHARE/done"
    wait "${QEMU_PID[$from]}" 2>/dev/null || true
    r=$(cat "$SHARE/r.txt" 2>/dev/null)
    assert_eq "keep=before cwd=c" "$(echo "$r" | cut -d" " -f1,2)" \
        "across releases: the file opened at the start and the cwd still work ($r)"
    assert_eq "$(field appends "$SHARE/r.txt")" "$(field lines "$SHARE/r.txt")" \
        "across releases: every append through the kept descriptor is on the host"
    assert_eq 0 "$(field append-errors "$SHARE/r.txt")" "across releases: no append failed"
fi
cleanup

vmt_summary
