#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the fuzz targets of xvirtiofs for a while and reports what they ran.
set -eu -o pipefail

ALL_TARGETS=(fuzz_request fuzz_vring)

print_help() {
    cat <<HELP
Usage: $0 [SECONDS] [TARGET...]

Runs each cargo-fuzz TARGET for SECONDS seconds (default 60) with the nightly
toolchain, one after the other, and prints one line per target:
"TARGET: N inputs in S s, no crash". Targets (default: all):
  fuzz_request  one FUSE request to the server: a read-only share, an in-memory
                file system, and (as root) a writable share on a 64 MiB tmpfs
  fuzz_vring    a guest's virtqueue (descriptor table, avail ring, indirect
                tables, buffers) served once by the daemon's queue code
Corpora are kept in corpus/TARGET; crashes land in artifacts/TARGET.
Installs cargo-fuzz from crates.io when it is missing.
HELP
}

die() {
    echo "run.sh: $*" >&2
    exit 1
}

main() {
    local seconds="${1:-60}"
    case "$seconds" in
    -h | --help)
        print_help
        return 0
        ;;
    esac
    [[ "$seconds" =~ ^[0-9]+$ ]] || die "SECONDS must be a number, got '$seconds'"
    shift || true
    local -a targets=("$@")
    [ "${#targets[@]}" -gt 0 ] || targets=("${ALL_TARGETS[@]}")

    cd "$(dirname "$0")"
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
    rustup toolchain list | grep -q '^nightly' || die "the nightly toolchain is not installed"

    # The targets build their shares under TMPDIR; keep it disposable. The
    # writable share is a small tmpfs, so that no input can fill the disk.
    local tmp
    tmp="$(mktemp -d)"
    mkdir -p "$tmp/rw"
    if mount -t tmpfs -o size=64m,nr_inodes=20000 xvfs-fuzz "$tmp/rw" 2>/dev/null; then
        export XVFS_FUZZ_RW_DIR="$tmp/rw"
    else
        echo "run.sh: cannot mount a tmpfs (not root?): fuzz_request runs without its writable share" >&2
    fi
    # shellcheck disable=SC2064 # expand now: $tmp is local
    trap "umount '$tmp/rw' 2>/dev/null; rm -rf '$tmp'" EXIT

    local t log runs
    for t in "${targets[@]}"; do
        mkdir -p "corpus/$t"
        log="$tmp/$t.log"
        TMPDIR="$tmp" cargo +nightly fuzz run "$t" "corpus/$t" -- \
            -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=8192 2>&1 | tee "$log" |
            grep -E '^(Done|INFO: Seed|==[0-9]+==|SUMMARY|thread)' || true
        runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 inputs in \2 s/p' "$log")
        [ -n "$runs" ] || die "$t did not finish cleanly (log: $log)"
        echo "$t: $runs, no crash"
    done
}

main "$@"
