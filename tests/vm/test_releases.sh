#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: live upgrade and crash restart between different builds
# (docs/live-upgrade.md, "Compatibility"). The builds come from git history
# through RELEASES (tests/vm/releases.sh; cached under build/releases/).
#
# Boot 1: the guest runs the shared workload (workload.sh) on the last build
# before release numbering ("pre-0.2.0", state format 6); `xvirtiofsd
# upgrade` to HEAD is refused, naming both format versions, and the old
# daemon serves on. Boot 2: the same on HEAD, with the pre-0.2.0 build as
# the would-be successor (a downgrade across the scheme): refused the same
# way; then, for each release HEAD must support (release_supported: the
# two before HEAD's sources), HEAD -> that release -> HEAD (a rollback and
# back, each in the newest state format both read), each with 0 errors.
# Boot 3 (one per release): a crash-restart holder pair of that release is
# upgraded to HEAD's pair, whose serving process is then killed (kill -9)
# and restarted by HEAD's holder; then down to the release's pair, killed
# again. The guest workload (fio verify, an
# unlinked-but-open file, a file open from the start, the
# create/rename/link loop) must see no error in any boot. Printed: the
# guest-visible pause of each upgrade and restart, per direction.
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
mapfile -t SUPPORTED < <(release_supported)
# The binaries are built here, not in the background host side.
for r in "${SUPPORTED[@]}"; do release_binary "$r" >/dev/null; done
say "HEAD: $("$HEAD_BIN" --version | head -n 1); pre-0.2.0: $("$PRE_BIN" --version | head -n 1);" \
    "releases upgraded to and from: ${SUPPORTED[*]:-none, HEAD has the sources of the first release}"

# HEAD's state formats, from its --version: "W A B" (writes W, reads A-B).
HEAD_STATE=$("$HEAD_BIN" --version | awk '/^state format/ { sub(",", "", $3); sub(":", "", $5); split($5, r, "-"); print $3, r[1], r[2]; exit }')
read -r HEAD_WRITES HEAD_READS_MIN HEAD_READS_MAX <<<"$HEAD_STATE"

# try_upgrade CTL BIN NAME WANT [HOLDER]: an upgrade to BIN, expected to
# succeed (WANT 0) or to be refused (WANT 1) with the running daemon serving
# on; with HOLDER set, the holder pair is upgraded (the holder's arguments).
# Appends "NAME start-ms end-ms" (host clock) to $VMT_DIR/events-<boot>.
try_upgrade() {
    local ctl=$1 bin=$2 name=$3 want=$4 holder=${5:-} pid rc=0 got t0
    local -a sargs
    pid=$(vmt_status "$ctl" pid)
    mapfile -t sargs < <(vmt_successor_args "$([ -n "$holder" ] && vmt_status "$ctl" crash_restart.holder_pid || echo "$pid")")
    t0=$(date +%s%3N)
    "$bin" upgrade --control "$ctl" --timeout 30 -- "${sargs[@]}" >>"$VMT_DIR/upgrades.log" 2>&1 || rc=$?
    echo "$name $t0 $(date +%s%3N)" >>"$EVENTS"
    got=$([ "$rc" -eq 0 ] && echo 0 || echo 1)
    echo "CHECK $name-$([ "$want" = 0 ] && echo succeeds || echo refused) $want $got"
    if [ "$want" = 1 ]; then
        echo "CHECK $name-old-daemon-serves-on $pid $(vmt_status "$ctl" pid)"
    else
        echo "CHECK $name-runs $("$bin" --version | head -n 1 | awk '{print $2}') $(vmt_status "$ctl" version)"
    fi
    sleep 0.5
}

# try_kill CTL NAME RESTARTS: kill -9 of the serving process; its holder
# must start a new one (the RESTARTS-th of this holder).
try_kill() {
    local ctl=$1 name=$2 want=$3 t0
    t0=$(date +%s%3N)
    vmt_kill_serving "$ctl" "$name"
    sleep 1
    echo "$name $t0 $(date +%s%3N)" >>"$EVENTS"
    echo "CHECK $name-restarted-by-holder $want $(vmt_status "$ctl" crash_restart.restarts)"
}

# clock_marker CTL SHARE: once the stream runs, the serving process stopped
# for 400 ms, host clock, to find the guest clock's offset (workload.sh,
# workload_attributed_pause).
clock_marker() {
    local pid stop
    workload_wait_streaming "$2" || { echo "FAILCHECK the steady stream never wrote"; return; }
    pid=$(vmt_status "$1" serving_pid)
    stop=$(date +%s%3N)
    kill -STOP "$pid"
    sleep 0.4
    kill -CONT "$pid"
    echo "MARK $stop $(date +%s%3N)" >"$MARK"
    sleep 1
}

# event_pauses SHARE: for each event "NAME start end" of $EVENTS, the
# longest gap of the guest's steady request stream (200/s) within
# [start, end] (host clock, mapped through $MARK): the guest-visible pause.
event_pauses() {
    python3 - "$1/tick_lat.log" "$MARK" "$EVENTS" <<'PY'
import sys
tick, mark, events = sys.argv[1:4]
times = sorted(int(l.split(",")[0]) for l in open(tick) if l.strip())
_, stop, cont = open(mark).read().split()[:3]
gaps = list(zip(times, times[1:]))
a, b = max(gaps, key=lambda g: g[1] - g[0])
offset = int(cont) - b
used = [(a, b)]
for line in open(events):
    name, s, e = line.split()
    lo, hi = int(s) - offset, int(e) - offset
    inside = [(x, y) for x, y in gaps if y >= lo and x <= hi]
    used += inside
    print(f"PAUSE {name} {max((y - x for x, y in inside), default='n/a')} ms")
# The band of the stream's own jitter: its longest gap outside every event
# and the marker (under TCG a pause below it cannot be told from it).
rest = [y - x for x, y in gaps if (x, y) not in used]
print(f"PAUSE no-event-longest-gap {max(rest, default='n/a')} ms")
PY
}

host_side() {
    local share=$1 ctl=$2 first=$3
    workload_wait_started "$share" || { echo "FAILCHECK guest never started"; touch "$share/done"; return; }
    sleep 1
    case $first in
        pre) try_upgrade "$ctl" "$HEAD_BIN" pre-0.2.0-to-head 1 ;;
        head)
            clock_marker "$ctl" "$share"
            try_upgrade "$ctl" "$PRE_BIN" head-to-pre-0.2.0 1
            for r in "${SUPPORTED[@]}"; do
                try_upgrade "$ctl" "$(release_binary "$r")" "upgrade-down-head-to-$r" 0
                try_upgrade "$ctl" "$HEAD_BIN" "upgrade-up-$r-to-head" 0
            done
            ;;
        holder-*)
            # A pair of release R (boot "holder-R"): up to HEAD's pair,
            # kill -9, down to R's pair, kill -9. (Not up again from R after
            # R's own crash restart: releases 0.2.0 and 0.3.0 may then hand
            # over a node through a name removed since, which the successor
            # refuses, serving on; see CHANGELOG.md, Unreleased.)
            local r=${first#holder-}
            clock_marker "$ctl" "$share"
            try_upgrade "$ctl" "$HEAD_BIN" "holder-upgrade-up-$r-to-head" 0 holder
            try_kill "$ctl" "crash-after-up-from-$r-on-head" 1
            try_upgrade "$ctl" "$(release_binary "$r")" "holder-upgrade-down-head-to-$r" 0 holder
            try_kill "$ctl" "crash-after-down-on-$r" 1
            ;;
    esac
    sleep 1
    touch "$share/done"
}

# boot FIRST BIN [ARGS]: one guest on daemon BIN ("pre", "head" or
# "holder" runs first), with extra daemon ARGS.
boot() {
    local first=$1 bin=$2 extra=${3:-} share=$VMT_DIR/share-$1 ctl=$VMT_DIR/ctl-$1.sock rc=0
    EVENTS=$VMT_DIR/events-$first MARK=$VMT_DIR/mark-$first
    : >"$EVENTS"
    workload_prepare "$share"
    host_side "$share" "$ctl" "$first" >"$VMT_DIR/host-side-$first.txt" 2>&1 &
    local hp=$!
    DAEMON=$bin DAEMON_ARGS="--control $ctl $extra" XVFS_TIMEOUT=600 \
        vmt_guest "$share" "$WORKLOAD_GUEST_SCRIPT" "$VMT_DIR/guest-$first.out" || rc=$?
    touch "$share/done"
    wait "$hp" || true
    assert_eq 0 "$rc" "$first: guest script exit status"
    vmt_checks "$VMT_DIR/host-side-$first.txt" "$first: "
    workload_check "$VMT_DIR/guest-$first.out" "$share" "the upgrade attempts"
    cp "$VMT_DIR/run/daemon.log" "$VMT_DIR/daemon-$first.log"
    if [ -s "$MARK" ] && [ -s "$share/tick_lat.log" ]; then
        event_pauses "$share" | grep -v -- "-refused\|pre-0.2.0" | tee -a "$VMT_DIR/pauses.txt" | sed 's/^/     /'
    fi
}

boot pre "$PRE_BIN"
assert_ok "pre-0.2.0 -> HEAD: the refusal names both versions" \
    grep -q "state format version 6 is not supported (this build reads $HEAD_READS_MIN to $HEAD_READS_MAX)" "$VMT_DIR/daemon-pre.log"
boot head "$HEAD_BIN"
assert_ok "HEAD -> pre-0.2.0: the refusal names both versions" \
    grep -q "state format version $HEAD_WRITES is not supported (this build reads 6 to 6)" "$VMT_DIR/daemon-head.log"
grep -h 'format version .* is not supported' "$VMT_DIR"/daemon-*.log | head -n 2 | sed 's/^/     /' || true
if [ "${#SUPPORTED[@]}" -gt 0 ]; then
    # The state format of each handover, from the old daemon's log.
    formats=$(grep -o 'handing over to xvirtiofsd [^ ]* .*(state format [0-9]*)' "$VMT_DIR/daemon-head.log" | sed 's/.*(state format \([0-9]*\))/\1/' | tr '\n' ' ')
    say "state formats written by HEAD (pre-0.2.0, then down to ${SUPPORTED[*]}): ${formats:-none logged}"
    for r in "${SUPPORTED[@]}"; do
        boot "holder-$r" "$(release_binary "$r")" "--crash-restart --crash-restart-limit 5/600"
    done
    [ -s "$VMT_DIR/pauses.txt" ] && say "guest-visible pause per direction (ms): $(awk '{printf "%s %s; ", $2, $3}' "$VMT_DIR/pauses.txt")"
else
    say "no release before HEAD's sources: the cross-release upgrades and holder pairs were not run"
fi

vmt_summary
