#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite, in order: cargo fmt --check, cargo clippy (-D
# warnings), cargo test (all in host/), a short cargo-fuzz run of each fuzz
# target, FUSE requests and virtqueues (XVFS_FUZZ_SECONDS each, default 30), shellcheck on every shell
# script, then every VM test (tests/vm/test_*.sh; NEWEST_ONLY ones in the subset below). Each step runs even when an earlier one
# failed. Counts: one per fmt/clippy/shellcheck step, the passed/failed tests
# of cargo test, and the assertions of each VM test. Ends with the line
# "N passed, M failed"; exits non-zero on any failure.
#
# An SPDX line in every source file (tests/spdx.sh) is one more step, and
# no import cycle between modules (tests/import_cycles.py) another.
#
# `tests/run-all.sh --check` (make check): only fmt, clippy, cargo test,
# README's daemon command lines (tests/readme_commands.py), the
# shell-script lint, SPDX and import cycles: no deps, guest image, fuzzing
# or VM.
#
# Then the newest runtimes (issue 31): test_ops, test_upgrade and
# test_migrate once more on QEMU 11.1 (trixie-backports) with the newest 7.x
# guest kernel, test_dax and test_libvirt_dax, which need QEMU 11.1 (issue 32),
# and test_ops on a DAX mount; installing them (vmm-config/runtimes.sh,
# cached) is one step.
#
# Environment: DAEMON (the daemon the VM tests use; default our xvirtiofsd),
# XVFS_SKIP_VM=1 (skip the VM tests), XVFS_SKIP_NEWEST=1 (skip only the
# QEMU 11.1 + kernel 7 subset).
set -euo pipefail

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/../vmm-config/functions.sh"
export PATH="$HOME/.cargo/bin:$PATH"

PASSED=0
FAILED=0
FAILURES=()
LOG_DIR=$XVFS_ROOT/build/test-logs

count() {
    local ok=$1 name=$2
    if [ "$ok" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        echo "== ok: $name"
    else
        FAILED=$((FAILED + 1))
        FAILURES+=("$name")
        echo "== FAIL: $name"
    fi
}

# Run a step, teeing its output to build/test-logs/NAME.log; returns its status.
run_logged() {
    local name=$1 rc=0
    shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$LOG_DIR/$name.log" || rc=$?
    return "$rc"
}

step_simple() {
    local name=$1 rc=0
    shift
    run_logged "$name" "$@" || rc=$?
    count "$rc" "$name"
}

# cargo test: add up its "test result:" lines; a build failure counts as one failure.
step_cargo_test() {
    local rc=0 p f
    # Then the tests that need the test hooks of a fault-injection build
    # (the attacker inside the sandbox: tests/escape.rs; the crash-restart
    # holder's faults: tests/holder.rs).
    run_logged cargo-test bash -c 'cd host && cargo test --workspace &&
        cargo test -p xvirtiofsd --features fault-injection --test escape --test holder' || rc=$?
    read -r p f < <(awk '/^test result:/ {for (i = 1; i < NF; i++) {if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i}}
        END {print p + 0, f + 0}' "$LOG_DIR/cargo-test.log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    [ "$f" -eq 0 ] || FAILURES+=("cargo test ($f)")
    echo "== cargo test: $p passed, $f failed"
}

# Every shell script of the project: *.sh, plus files whose first line names a shell.
shell_scripts() {
    (
        cd "$XVFS_ROOT"
        git ls-files --cached --others --exclude-standard 2>/dev/null ||
            find . -type f -not -path './.git/*' | sed 's|^\./||'
    ) | while IFS= read -r f; do
        case "$f" in
            host/target/* | build/* | shared/*) continue ;;
            *.sh) echo "$f" ;;
            *) head -n 1 "$XVFS_ROOT/$f" 2>/dev/null | grep -qE '^#!.*(/|env )(ba|da)?sh\b' && echo "$f" ;;
        esac
    done | sort -u
}

step_shellcheck() {
    local -a files
    mapfile -t files < <(shell_scripts)
    step_simple shellcheck shellcheck -x "${files[@]}"
}

# A VM test: add up its "N passed, M failed" line; no such line counts as one failure.
# step_vm_test TEST [LOG-PREFIX]
step_vm_test() {
    local t=$1 name rc=0 p='' f=''
    name=${2:-vm}-$(basename "$t" .sh)
    run_logged "$name" "$t" || rc=$?
    read -r p f < <(test_counts "$LOG_DIR/$name.log" "$rc")
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    [ "$f" -eq 0 ] || FAILURES+=("$name ($f)")
}

# The QEMU 11.1 + newest-kernel subset; the runtimes are installed first
# (one counted step), and the tests run only when that worked.
NEWEST_TESTS=(test_ops test_upgrade test_migrate test_dax test_libvirt_dax)
# Tests that need the newest runtime (DAX: QEMU 11's shared memory): they
# run in that subset only, not on the default runtime.
NEWEST_ONLY=(test_dax test_libvirt_dax)
step_newest_runtimes() {
    local rc=0 t
    if [ "${XVFS_SKIP_NEWEST:-0}" = 1 ]; then
        say "XVFS_SKIP_NEWEST=1: the QEMU 11.1 + kernel 7 tests did NOT run (not counted as passed)"
        return 0
    fi
    run_logged newest-setup bash -c 'vmm-config/runtimes.sh qemu 11.1 && vmm-config/runtimes.sh kernel 7' || rc=$?
    count "$rc" "newest-setup (QEMU 11.1, kernel 7)"
    [ "$rc" -eq 0 ] || return 0
    for t in "${NEWEST_TESTS[@]}"; do
        XVFS_QEMU=11.1 XVFS_GUEST_KERNEL=7 step_vm_test "tests/vm/$t.sh" vm-q11.1-k7
    done
    # The ops test once more on a DAX mount (dax=inode: QEMU 11.1.3 cannot
    # map the part of a file past its end, so dax=always serves only files of
    # whole 2 MiB chunks; test_dax covers that mode).
    XVFS_QEMU=11.1 XVFS_GUEST_KERNEL=7 XVFS_DAX=256M step_vm_test tests/vm/test_ops.sh vm-q11.1-k7-dax
}

main() {
    cd "$XVFS_ROOT"
    mkdir -p "$LOG_DIR"
    need cargo shellcheck
    step_simple cargo-fmt bash -c 'cd host && cargo fmt --all --check -- --color never'
    step_simple cargo-clippy bash -c 'cd host && cargo clippy --workspace --all-targets -- -D warnings &&
        cargo clippy -p xvirtiofsd --all-targets --features fault-injection -- -D warnings'
    step_cargo_test
    # Every README line that calls the daemon names a binary its install
    # step gives, and options it has (install steps run into scratch dirs).
    step_simple readme-commands python3 tests/readme_commands.py
    # Each target (FUSE requests, virtqueues) for XVFS_FUZZ_SECONDS; `make
    # fuzz` runs them longer.
    if [ "${1:-}" != --check ]; then
        step_simple cargo-fuzz host/fuzz/run.sh "${XVFS_FUZZ_SECONDS:-30}"
    fi
    step_shellcheck
    step_simple spdx tests/spdx.sh
    step_simple import-cycles python3 tests/import_cycles.py
    if [ "${1:-}" = --check ]; then
        say "make check: the fuzz targets and VM tests did not run (make test runs them)"
    elif [ "${XVFS_SKIP_VM:-0}" = 1 ]; then
        say "XVFS_SKIP_VM=1: the VM tests did NOT run (not counted as passed)"
    else
        local t
        for t in tests/vm/test_*.sh; do
            case " ${NEWEST_ONLY[*]} " in
                *" $(basename "$t" .sh) "*) continue ;;
            esac
            step_vm_test "$t"
        done
        step_newest_runtimes
    fi
    echo
    [ "${#FAILURES[@]}" -eq 0 ] || echo "failed: ${FAILURES[*]} (logs: $LOG_DIR)"
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

main "$@"
