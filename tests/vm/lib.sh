# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Small library for the VM tests (source it).
#
#   vmt_init NAME           scratch dir $VMT_DIR (= build/tests/NAME, emptied), counters to 0
#   vmt_guest SHARE CMD OUT run CMD in a guest on SHARE (DAEMON env, default our
#                           xvirtiofsd); stdout -> OUT, run-vm's messages -> OUT.log;
#                           returns the guest command's status
#   assert_eq WANT GOT MSG  assert_ok MSG CMD...  assert_files_eq A B MSG
#   pass MSG / fail MSG     count one assertion
#   vmt_checks FILE [PFX]   assert the CHECK/FAILCHECK lines a host-side helper wrote
#   vmt_status CTL FIELD    a field (a.b for nested) of `status` on control socket CTL
#   vmt_successor_args PID  PID's arguments for a successor, one per line
#   vmt_kill_serving CTL NAME  kill -9 the serving process behind CTL; prints
#                           the CHECK line of a new one taking over (10 s)
#   vmt_dax_metric FILE KEY the DAX counter KEY (maps, unmaps, failed...) of a
#                           daemon's --metrics-file, or "none"
#   vmt_summary             print "N passed, M failed"; status 1 when M > 0

# shellcheck source=vmm-config/functions.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../vmm-config/functions.sh"

VMT_PASSED=0
VMT_FAILED=0
: "${DAEMON:=$XVFS_ROOT/host/target/release/xvirtiofsd}"
export DAEMON

vmt_init() {
    VMT_NAME=$1
    VMT_DIR=$XVFS_ROOT/build/tests/$VMT_NAME
    rm -rf "$VMT_DIR"
    mkdir -p "$VMT_DIR"
    VMT_PASSED=0
    VMT_FAILED=0
    say "test $VMT_NAME: daemon $DAEMON, scratch $VMT_DIR"
}

pass() {
    VMT_PASSED=$((VMT_PASSED + 1))
    printf 'ok   %s\n' "$*"
}

fail() {
    VMT_FAILED=$((VMT_FAILED + 1))
    printf 'FAIL %s\n' "$*"
}

assert_eq() {
    local want=$1 got=$2 msg=$3
    if [ "$want" = "$got" ]; then
        pass "$msg"
    else
        fail "$msg: expected '$want', got '$got'"
    fi
}

assert_ok() {
    local msg=$1
    shift
    if "$@"; then
        pass "$msg"
    else
        fail "$msg (command failed: $*)"
    fi
}

# Equal files, else the first lines of the diff.
assert_files_eq() {
    local a=$1 b=$2 msg=$3
    if diff -u "$a" "$b" >"$VMT_DIR/last.diff" 2>&1; then
        pass "$msg"
    else
        fail "$msg; diff $a $b:"
        head -n 40 "$VMT_DIR/last.diff" | sed 's/^/     /'
    fi
}

vmt_guest() {
    local share=$1 cmd=$2 out=$3 rc=0
    SHARE=$share CMD=$cmd XVFS_RUNDIR=$VMT_DIR/run \
        "$XVFS_ROOT/vmm-config/run-vm" >"$out" 2>"$out.log" || rc=$?
    sed 's/^/     /' "$out.log" | grep -E 'boot-to-mount|error' || true
    return "$rc"
}

# vmt_checks FILE [PREFIX]: asserts the "CHECK name want got" and
# "FAILCHECK why" lines a test's host-side helper wrote to FILE.
vmt_checks() {
    local tag name want got
    while read -r tag name want got; do
        case $tag in
            CHECK) assert_eq "$want" "$got" "${2:-}$name" ;;
            FAILCHECK) fail "${2:-}$name $want $got" ;;
        esac
    done <"$1"
}

vmt_status() {
    "${XVD:-$DAEMON}" status --control "$1" 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[k]
print(v)' "$2"
}

# A running daemon's own options for its successor (which takes its security
# settings from its command line only): its command line without
# --handover-from and --fd.
vmt_successor_args() {
    local -a a
    local x skip=0
    mapfile -d '' a <"/proc/$1/cmdline"
    for x in "${a[@]:1}"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        case "$x" in
            --handover-from | --fd) skip=1 ;;
            --handover-from=* | --fd=*) ;;
            *) printf '%s\n' "$x" ;;
        esac
    done
}

# vmt_kill_serving CTL NAME: kills (SIGKILL) the process serving on control
# socket CTL (--crash-restart) and writes "CHECK kill-NAME-new-serving-process
# 1 OK", OK 1 once `status` names another pid (within 10 s), else 0.
vmt_kill_serving() {
    local ctl=$1 name=$2 pid new ok=0 _
    pid=$(vmt_status "$ctl" pid)
    kill -9 "$pid"
    for _ in $(seq 1 200); do
        new=$(vmt_status "$ctl" pid || true)
        if [ -n "$new" ] && [ "$new" != "$pid" ]; then ok=1; break; fi
        sleep 0.05
    done
    echo "CHECK kill-$name-new-serving-process 1 $ok"
}

vmt_dax_metric() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("dax", {}).get(sys.argv[2], "none"))' "$1" "$2" 2>/dev/null ||
        echo none
}

vmt_summary() {
    echo "$VMT_PASSED passed, $VMT_FAILED failed"
    [ "$VMT_FAILED" -eq 0 ]
}
