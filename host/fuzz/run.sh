#!/usr/bin/env bash
# Runs the fuzz_request target of xvfs-fs for a while.
set -eu -o pipefail

print_help() {
    cat <<HELP
Usage: $0 [SECONDS]

Runs the cargo-fuzz target fuzz_request (FUSE request parsing and dispatch of
xvfs-fs) for SECONDS seconds (default 60) with the nightly toolchain. The corpus
is kept in corpus/fuzz_request; crashes land in artifacts/fuzz_request.
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

    cd "$(dirname "$0")"
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
    rustup toolchain list | grep -q '^nightly' || die "the nightly toolchain is not installed"

    # The target builds its shared directory under TMPDIR; keep it disposable.
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064 # expand now: $tmp is local
    trap "rm -rf '$tmp'" EXIT
    mkdir -p corpus/fuzz_request

    TMPDIR="$tmp" cargo +nightly fuzz run fuzz_request corpus/fuzz_request -- \
        -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=8192
}

main "$@"
