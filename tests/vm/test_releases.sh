#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: live upgrade between different builds (docs/live-upgrade.md,
# "Compatibility"). The builds come from git history through RELEASES
# (tests/vm/releases.sh; cached under build/releases/).
#
# Boot 1: the guest runs the shared workload (workload.sh) on the last build
# before release numbering ("pre-0.2.0", state format 6); `xvirtiofsd
# upgrade` to HEAD is refused, naming both format versions, and the old
# daemon serves on. Boot 2: the same on HEAD, with the pre-0.2.0 build as
# the would-be successor (a downgrade across the scheme): refused the same
# way; then, when RELEASES has a release before HEAD's sources, HEAD ->
# that release -> HEAD (a rollback and back), each with 0 errors. The guest
# workload (fio verify, an unlinked-but-open file, a file open from the
# start, the create/rename/link loop) must see no error in either boot.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/vm/workload.sh
. "$(dirname "$0")/workload.sh"
# shellcheck source=tests/vm/releases.sh
. "$(dirname "$0")/releases.sh"

vmt_init releases
HEAD_BIN=$XVFS_ROOT/host/target/release/xvirtiofsd
(cd "$XVFS_ROOT/host" && cargo build -q --release -p xvirtiofsd)
PRE_BIN=$(release_binary pre-0.2.0)
PREV=$(release_previous)
say "HEAD: $("$HEAD_BIN" --version | head -n 1); pre-0.2.0: $("$PRE_BIN" --version | head -n 1);" \
    "previous release: ${PREV:-none, HEAD has the sources of the first release}"

# try_upgrade CTL BIN NAME WANT: an upgrade to BIN, expected to succeed
# (WANT 0) or to be refused (WANT 1) with the running daemon serving on.
try_upgrade() {
    local ctl=$1 bin=$2 name=$3 want=$4 pid rc=0 got
    local -a sargs
    pid=$(vmt_status "$ctl" pid)
    mapfile -t sargs < <(vmt_successor_args "$pid")
    "$bin" upgrade --control "$ctl" --timeout 30 -- "${sargs[@]}" >>"$VMT_DIR/upgrades.log" 2>&1 || rc=$?
    got=$([ "$rc" -eq 0 ] && echo 0 || echo 1)
    echo "CHECK $name-$([ "$want" = 0 ] && echo succeeds || echo refused) $want $got"
    if [ "$want" = 1 ]; then
        echo "CHECK $name-old-daemon-serves-on $pid $(vmt_status "$ctl" pid)"
    fi
    sleep 0.5
}

host_side() {
    local share=$1 ctl=$2 first=$3
    workload_wait_started "$share" || { echo "FAILCHECK guest never started"; touch "$share/done"; return; }
    sleep 1
    if [ "$first" = pre ]; then
        try_upgrade "$ctl" "$HEAD_BIN" pre-0.2.0-to-head 1
    else
        try_upgrade "$ctl" "$PRE_BIN" head-to-pre-0.2.0 1
        if [ -n "$PREV" ]; then
            local prev_bin
            prev_bin=$(release_binary "$PREV")
            try_upgrade "$ctl" "$prev_bin" "head-to-$PREV" 0
            echo "CHECK running-$PREV $("$prev_bin" --version | head -n 1 | awk '{print $2}') $(vmt_status "$ctl" version)"
            try_upgrade "$ctl" "$HEAD_BIN" "$PREV-to-head" 0
        fi
    fi
    sleep 1
    touch "$share/done"
}

# boot FIRST BIN: one guest on daemon BIN ("pre" or "head" runs first).
boot() {
    local first=$1 bin=$2 share=$VMT_DIR/share-$1 ctl=$VMT_DIR/ctl-$1.sock rc=0
    workload_prepare "$share"
    host_side "$share" "$ctl" "$first" >"$VMT_DIR/host-side-$first.txt" 2>&1 &
    local hp=$!
    DAEMON=$bin DAEMON_ARGS="--control $ctl" XVFS_TIMEOUT=600 \
        vmt_guest "$share" "$WORKLOAD_GUEST_SCRIPT" "$VMT_DIR/guest-$first.out" || rc=$?
    touch "$share/done"
    wait "$hp" || true
    assert_eq 0 "$rc" "$first: guest script exit status"
    vmt_checks "$VMT_DIR/host-side-$first.txt" "$first: "
    workload_check "$VMT_DIR/guest-$first.out" "$share" "the upgrade attempts"
    cp "$VMT_DIR/run/daemon.log" "$VMT_DIR/daemon-$first.log"
}

boot pre "$PRE_BIN"
assert_ok "pre-0.2.0 -> HEAD: the refusal names both versions" \
    grep -q 'state format version 6 is not supported (this build reads 7 to 7)' "$VMT_DIR/daemon-pre.log"
boot head "$HEAD_BIN"
assert_ok "HEAD -> pre-0.2.0: the refusal names both versions" \
    grep -q 'state format version 7 is not supported (this build reads 6 to 6)' "$VMT_DIR/daemon-head.log"
grep -h 'format version .* is not supported' "$VMT_DIR"/daemon-*.log | head -n 2 | sed 's/^/     /' || true

vmt_summary
