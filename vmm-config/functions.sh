# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Shared helpers for the xvirtiofs shell scripts. Source it; do not run it.
#
#   say MSG...   print "xvfs: MSG" on stderr
#   die MSG...   print "xvfs: error: MSG" on stderr and exit 1
#   need CMD...  die unless every CMD is on PATH
#   installed_version PKG      the installed version of a Debian package, or nothing
#   apt_update TRIES [PREFIX...]
#                apt-get update (run as PREFIX apt-get ..., e.g. sudo), tried
#                TRIES times; status 1 when every try failed
#   cpu_seconds PID   CPU seconds of PID's threads and its descendants' (benchmarks)
#   wait_socket SOCK PID [TENTHS]
#                until SOCK is a socket (status 0), PID has exited (1) or
#                TENTHS tenths of a second (default 100) have passed (2)
#   stop_pid PID  SIGTERM, SIGKILL after 3 s, then reap it (a child of
#                this shell); nothing when PID is empty or gone

say() {
    printf 'xvfs: %s\n' "$*" >&2
}

die() {
    printf 'xvfs: error: %s\n' "$*" >&2
    exit 1
}

need() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found; run 'make deps' first"
    done
}

installed_version() {
    # dpkg-query fails for a package it has never heard of: that is "not installed".
    { dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null || true; } |
        awk '$1 == "installed" {print $2}'
}

apt_update() {
    local tries=$1 try
    shift
    # A fresh machine may still be refreshing its own lists (apt lock) or
    # meet a mirror mid-sync: retry before giving up.
    for try in $(seq 1 "$tries"); do
        if "$@" apt-get -o DPkg::Lock::Timeout=120 update -qq; then
            return 0
        fi
        say "apt-get update failed (try $try of $tries)"
        [ "$try" -eq "$tries" ] || sleep $((try * 5))
    done
    return 1
}

# The repository root (this file lives in <root>/vmm-config/).
XVFS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export XVFS_ROOT

# test_counts LOG RC: "PASSED FAILED" of a VM test from the "N passed, M
# failed" last line of its LOG and its exit status RC: no such line counts as
# one failure, and so does a non-zero status with no failure counted.
test_counts() {
    local p='' f=''
    read -r p f < <(tail -n 1 "$1" | awk '/^[0-9]+ passed, [0-9]+ failed$/ {print $1, $3}') || true
    if [ -z "$p" ]; then
        p=0 f=1
    elif [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    echo "$p $f"
}

# cpu_seconds PID: CPU seconds used by the process PID and its descendants (all their
# threads; virtiofsd serves from a child in its sandbox), or "-" when PID is
# gone. Each thread's run time in nanoseconds (/proc/P/task/T/schedstat):
# utime + stime in /proc/P/stat count 10 ms ticks, and a 1 MiB Filebench
# run costs a daemon 20-30 ms. Both daemons keep their threads for the
# whole run, so no thread's time is lost between the two readings.
cpu_seconds() {
    local pid=$1 todo p ns=0 found=0 task run
    todo=("$pid")
    while [ "${#todo[@]}" -gt 0 ]; do
        p=${todo[0]}
        todo=("${todo[@]:1}")
        [ -d "/proc/$p/task" ] || continue
        found=1
        for task in /proc/"$p"/task/*/schedstat; do
            read -r run _ <"$task" 2>/dev/null || continue
            ns=$((ns + run))
        done
        # shellcheck disable=SC2207
        todo+=($(cat /proc/"$p"/task/*/children 2>/dev/null))
    done
    if [ "$found" -eq 0 ]; then
        echo -
    else
        awk -v ns="$ns" 'BEGIN {printf "%.6f\n", ns / 1e9}'
    fi
}

wait_socket() {
    local sock=$1 pid=$2 tenths=${3:-100} i
    for ((i = 0; i < tenths; i++)); do
        [ -S "$sock" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 2
}

stop_pid() {
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "pid $pid ignored SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
