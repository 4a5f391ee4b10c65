#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The steps are shell text run in the root, and the report's cells hold
# backquotes: single quotes on purpose.
# shellcheck disable=SC2016
# make test-fresh: README's set-up and test commands, as written, on a clean
# Debian 12 root. Not part of `make test` (about an hour: it builds every
# toolchain, crate and guest image from nothing).
#
# 1. mmdebstrap makes a minimal bookworm root (variant minbase, plus git and
#    make, which README's first step needs to get and run the tree; no Rust,
#    no QEMU) from the host's Debian mirror.
# 2. A clean clone of this checkout's HEAD (committed files only) goes to
#    /root/xvirtiofs in it.
# 3. In a mount namespace of its own (so that no mount is ever seen by the
#    host, and all go when it ends, whatever happened), with /proc, /sys and
#    /dev bound in and a tmpfs on /run, each README command runs in the root with a clean
#    environment (HOME=/root, Debian's PATH), and is timed and reported
#    pass/fail: make deps, make check, make vm CMD=..., make fuzz, make
#    daemon, make install, the daemon commands README gives after an
#    install (--version, completions, running a daemon, status, its
#    Prometheus text), make deb and apt-get install of the package.
#    `make test` itself is not run: its migration and libvirt tests need a
#    second VM and it takes hours more; `make check` and the fuzz step cover
#    what it adds to `make deps`'s needs.
# 4. At the end, also after a failure or an interrupt: every process whose
#    root is the new root is killed (QEMU, daemons), then the root is removed
#    (XVFS_FRESH_KEEP=1 keeps it).
#
# The host's network set-up goes in too, and only it: apt's Acquire::Check-*
# options (this host's clock) and the CA certificates in
# /usr/local/share/ca-certificates (its egress proxy); a machine on an open
# network needs neither.
#
# Report: build/test-logs/fresh-<date>/report.md (a table: command, result,
# time) and one log per step beside it; the last line is "N passed, M failed".
# Needs root, and installs mmdebstrap on the host if it is missing.
#
# Environment: XVFS_FRESH_DIR (where the root is made, default /var/tmp),
# XVFS_FRESH_KEEP=1, XVFS_FRESH_FUZZ_SECONDS (10).
set -euo pipefail

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/../../vmm-config/functions.sh"

SUITE=bookworm
CLEAN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
REPO=/root/xvirtiofs

print_help() {
    sed -n '6,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

mirror() {
    local m=''
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        m=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | awk '{print $1; exit}')
    fi
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

# The processes whose root directory is ROOT (a chroot of ours).
procs_in() {
    local root=$1 p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
    done
    return 0
}

# ---- inside the mount namespace -------------------------------------------

PASSED=0
FAILED=0

# step NAME TIMEOUT COMMAND: COMMAND in the root (bash -c, in the tree), with
# a clean environment; its output to LOG_DIR/NAME.log, a row in the report.
step() {
    local name=$1 limit=$2 cmd=$3 t0 rc=0 secs result
    say "[$name] $cmd"
    t0=$SECONDS
    timeout --kill-after=30 "$limit" chroot "$ROOT" /usr/bin/env -i HOME=/root USER=root \
        LOGNAME=root PATH="$CLEAN_PATH" TERM=dumb LANG=C.UTF-8 \
        /bin/bash -c "cd $REPO && $cmd" </dev/null >"$LOG_DIR/$name.log" 2>&1 || rc=$?
    secs=$((SECONDS - t0))
    if [ "$rc" -eq 0 ]; then
        result=pass
        PASSED=$((PASSED + 1))
    else
        result="FAIL (exit $rc; $name.log)"
        FAILED=$((FAILED + 1))
        tail -n 15 "$LOG_DIR/$name.log" | sed 's/^/    /' >&2
    fi
    say "[$name] $result in $((secs / 60)) min $((secs % 60)) s"
    # One line per row; a `|` in a cell would end it.
    local shown
    shown=$(printf '%s' "$cmd" | tr '\n' ' ' | tr -s ' ' | sed 's/|/\\|/g')
    printf '| `%s` | %s | %d min %02d s |\n' "$shown" "$result" $((secs / 60)) $((secs % 60)) >>"$REPORT"
}

inside() {
    ROOT=$1 LOG_DIR=$2
    REPORT=$LOG_DIR/report.md
    # Nothing mounted here propagates to the host.
    mount --make-rprivate /
    mount --bind "$ROOT" "$ROOT" # a mount point: the sandbox's pivot_root needs one
    mount -t proc proc "$ROOT/proc"
    mount --rbind /sys "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    # /run is a tmpfs on Debian; /tmp is the root file system's own
    # directory, as on a Debian 12 install.
    mount -t tmpfs -o mode=0755 tmpfs "$ROOT/run"

    local fuzz=${XVFS_FRESH_FUZZ_SECONDS:-10}
    step make-deps 3600 'make deps'
    step make-check 3600 'make check'
    step make-vm 3600 "make vm CMD='echo hi > /mnt/shared/x && cat /mnt/shared/x' | tee /tmp/vm.out && grep -qx hi /tmp/vm.out && grep -qx hi shared/x"
    step make-fuzz 2400 "make fuzz FUZZ_SECONDS=$fuzz"
    step make-daemon 1800 'make daemon && test -x host/target/release/xvirtiofsd'
    step make-install 1800 'make install && command -v xvirtiofsd && test -f /usr/local/share/man/man1/xvirtiofsd-status.1 && test -f /usr/local/lib/systemd/system/xvirtiofsd@.service'
    step version 60 'xvirtiofsd --version && xvirtiofsd --version | head -n 1 | grep -q "~dev+$(git rev-parse --short=12 HEAD)"'
    step completions 60 'xvirtiofsd completions bash | grep -q -- --shared-dir'
    # README's "Run it yourself" daemon, then status: the list (the daemon
    # waits for QEMU), a front-end connects (python3 plays QEMU's socket),
    # then one daemon's JSON and its Prometheus text.
    step run-daemon-status 300 'mkdir -p /srv/share && { xvirtiofsd --socket-path /run/vfs.sock --shared-dir /srv/share & } && pid=$! &&
        for _ in $(seq 100); do [ -S /run/xvirtiofsd/$pid.sock ] && break; sleep 0.1; done &&
        xvirtiofsd status | tee /tmp/list && grep -q "^$pid " /tmp/list &&
        { python3 -c "import socket, time; s = socket.socket(socket.AF_UNIX); s.connect(\"/run/vfs.sock\"); time.sleep(30)" & } &&
        fe=$! && sleep 1 && xvirtiofsd status --pid $pid | tee /tmp/status | grep -q "\"pid\":$pid" &&
        xvirtiofsd status --pid $pid --format prometheus | tee /tmp/prom | grep -q "^xvirtiofsd_queue_requests_total"
        rc=$?; kill $fe $pid; wait; exit $rc'
    step make-deb 1800 'make deb'
    step apt-install-deb 600 'apt-get install ./build/deb/xvirtiofsd_*.deb && /usr/bin/xvirtiofsd --version && test -L /usr/bin/xvirtiofsd'

    local p
    for p in $(procs_in "$ROOT"); do
        say "left behind in the root: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) (pid $p): killing it"
        kill -9 "$p" 2>/dev/null || true
    done
    {
        echo
        echo "$PASSED passed, $FAILED failed"
    } >>"$REPORT"
    [ "$FAILED" -eq 0 ]
}

# ---- on the host -------------------------------------------------------------

WORK=''
cleanup() {
    local rc=$? p root
    [ -n "$WORK" ] || return "$rc"
    root=$WORK/root
    for p in $(procs_in "$root"); do
        kill -9 "$p" 2>/dev/null || true
    done
    sleep 1
    if grep -q " ${root}[/ ]" /proc/self/mountinfo; then
        say "something is still mounted under $root on the host: NOT removing $WORK"
    elif [ "${XVFS_FRESH_KEEP:-0}" = 1 ]; then
        say "kept: $root"
    else
        rm -rf --one-file-system "$WORK"
    fi
    return "$rc"
}

main() {
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        --inside) shift; inside "$@"; return ;;
        "") ;;
        *) die "unexpected argument: $1 (see --help)" ;;
    esac
    [ "$(id -u)" -eq 0 ] || die "make test-fresh needs root (mmdebstrap, chroot, mounts)"
    if ! command -v mmdebstrap >/dev/null; then
        say "installing mmdebstrap on the host (apt-get install mmdebstrap)"
        apt-get install -y -q --no-install-recommends mmdebstrap >/dev/null ||
            die "apt-get install mmdebstrap failed"
    fi
    local stamp commit log_dir t0 m
    stamp=$(date -u +%Y%m%d-%H%M%S)
    commit=$(git -C "$XVFS_ROOT" rev-parse HEAD)
    log_dir=$XVFS_ROOT/build/test-logs/fresh-$stamp
    mkdir -p "$log_dir" "${XVFS_FRESH_DIR:-/var/tmp}"
    WORK=$(mktemp -d "${XVFS_FRESH_DIR:-/var/tmp}/xvfs-fresh.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    local root=$WORK/root report=$log_dir/report.md
    m=$(mirror)
    {
        echo "# make test-fresh, $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "Commit $(git -C "$XVFS_ROOT" rev-parse --short=12 HEAD)$(git -C "$XVFS_ROOT" diff --quiet HEAD || echo ' (the working tree had uncommitted changes, which were not tested)'),"
        echo "a clean Debian 12 root from $m (mmdebstrap --variant=minbase, + git, make),"
        echo "host $(uname -r), $(nproc) CPUs."
        echo
        echo '| command | result | time |'
        echo '|---|---|---|'
    } >"$report"

    say "making a clean $SUITE root in $root from $m"
    t0=$SECONDS
    local -a aptopts=()
    while read -r o; do
        aptopts+=(--aptopt="$o")
    done < <(apt-config dump | grep -E '^Acquire::Check-(Valid-Until|Date) ' || true)
    if mmdebstrap --variant=minbase --include=ca-certificates,git,make "${aptopts[@]}" \
        "$SUITE" "$root" "$m" >"$log_dir/mmdebstrap.log" 2>&1; then
        printf '| `mmdebstrap --variant=minbase --include=ca-certificates,git,make %s`, git clone | pass | %d min %02d s |\n' \
            "$SUITE" $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)) >>"$report"
    else
        tail -n 20 "$log_dir/mmdebstrap.log" >&2
        printf '| `mmdebstrap` | FAIL (mmdebstrap.log) | |\n\n0 passed, 1 failed\n' >>"$report"
        die "mmdebstrap failed (log: $log_dir/mmdebstrap.log)"
    fi
    # This host's network set-up (see the top).
    apt-config dump | grep -E '^Acquire::Check-(Valid-Until|Date) ' |
        sed 's/$/;/' >"$root/etc/apt/apt.conf.d/99xvfs-fresh-host" || true
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
        chroot "$root" update-ca-certificates >/dev/null
    fi
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    git clone -q --no-local "$XVFS_ROOT" "$root$REPO"
    git -C "$root$REPO" checkout -q --detach "$commit"

    local rc=0
    unshare --mount --propagation private -- "$0" --inside "$root" "$log_dir" || rc=$?
    cat "$report"
    say "report: $report"
    return "$rc"
}

main "$@"
