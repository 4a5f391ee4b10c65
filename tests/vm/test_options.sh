#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: every option and -o key of docs/virtiofsd-compat.md, one at a
# time. An option that is served starts the daemon and a guest that mounts
# the share and reads a host file through it; a refused one makes the daemon
# exit with status 2 and the documented message, before anything is served.
# First, every option named in the document must have a case here (so that
# a row added there without a test fails here).
#
# Each daemon is started as run-vm would start it, `DAEMON --socket-path SOCK
# --shared-dir DIR ARGS`; a small wrapper turns that into the `--socket`
# alias or `-o source=DIR` where a case needs it, and --fd goes through
# tests/vm/fd-launcher.py as libvirt would pass it. The served cases share
# guests: each guest has one device per case (XVFS_EXTRA_FS of run-vm), each
# served by that case's daemon. About 2 minutes.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init options
SHARE=$VMT_DIR/share
mkdir -p "$SHARE"
echo "read through the share" >"$SHARE/hello"
# --config's file: long options as keys (tests/cli.rs checks their meaning).
printf '# options of test_options\ncache=auto\nxattr=true\n' >"$VMT_DIR/options.conf"
REAL=$DAEMON

# NAME|MODE|ARGS|EXPECT: NAME as the document names it; MODE plain, socket
# (the --socket alias), source (-o source=), fd (--fd from a launcher);
# EXPECT serve, or refuse:TEXT (exit 2, TEXT in the message).
# (--syslog is also checked below with a system logger of the test's own.)
if [ -S /dev/log ]; then SYSLOG=serve; else SYSLOG="refuse3:no system logger"; fi
CASES=(
    "--shared-dir|plain||serve"
    "--socket-path|plain||serve"
    "--socket|socket||serve"
    "--fd|fd||serve"
    "--socket-group|plain|--socket-group root|serve"
    "--tag|plain|--tag advertised|serve"
    "--dax-window|plain|--dax-window 64M|refuse:needs --tag"
    "--dax-window|plain|--tag t --dax-window 3M|refuse:a power of two"
    "--dax-window|plain|--tag t --dax-window 64M|serve"
    "--thread-pool-size|plain|--thread-pool-size 4|serve"
    "--xattr|plain|--xattr|serve"
    "--posix-acl|plain|--posix-acl=auto|serve"
    "--xattrmap|plain|--xattr --xattrmap=:ok:all:security.capability:::map::user.virtiofs.:|serve"
    "--sandbox|plain|--sandbox chroot|serve"
    "--readonly|plain|--readonly|serve"
    "--seccomp|plain|--seccomp log|serve"
    "--announce-submounts|plain|--announce-submounts|serve"
    "--no-announce-submounts|plain|--no-announce-submounts|serve"
    "--inode-file-handles|plain|--inode-file-handles=never|serve"
    "--inode-file-handles|plain|--inode-file-handles=prefer|serve"
    "--inode-file-handles|plain|--inode-file-handles=fallback|serve"
    "--inode-file-handles|plain|--inode-file-handles=mandatory|serve"
    "--cache|plain|--cache metadata|serve"
    "--allow-mmap|plain|--allow-mmap --cache never|serve"
    "--no-readdirplus|plain|--no-readdirplus|serve"
    "--writeback|plain|--writeback|serve"
    "--allow-direct-io|plain|--allow-direct-io|serve"
    "--modcaps|plain|--modcaps=-mknod|serve"
    "--log-level|plain|--log-level debug|serve"
    "--syslog|plain|--syslog|$SYSLOG"
    "--rlimit-nofile|plain|--rlimit-nofile 4096|serve"
    "-d|plain|-d|serve"
    "--no-killpriv-v2|plain|--no-killpriv-v2|serve"
    "--killpriv-v2|plain|--killpriv-v2|serve"
    "-f|plain|-f|serve"
    "--security-label|plain|--security-label=never|serve"
    "--security-label|plain|--security-label|serve"
    "--security-label|plain|--security-label=auto|serve"
    "--uid-map|plain|--uid-map=:0:100000:65536: --gid-map=:0:100000:65536:|serve"
    "--gid-map|plain|--gid-map=:0:100000:65536:|serve"
    "--translate-uid|plain|--translate-uid=host:100000:0:65536|serve"
    "--translate-gid|plain|--translate-gid=squash-host:100000:0:65536|serve"
    "--preserve-noatime|plain|--preserve-noatime|serve"
    "--max-open|plain|--max-open 4096|serve"
    "--config|plain|--config $VMT_DIR/options.conf|serve"
    "--migration-mode|plain|--migration-mode file-handles|serve"
    "--migration-on-error|plain|--migration-on-error guest-error|serve"
    "--migration-verify-handles|plain|--migration-verify-handles|serve"
    "--migration-confirm-paths|plain|--migration-confirm-paths|serve"
    "--migration-verify-handles|plain|--migration-mode file-handles --migration-verify-handles|refuse:only apply to --migration-mode=find-paths"
    "--migration-target|plain|--migration-target virtiofsd|serve"
    "--migration-target|plain|--migration-mode file-handles --migration-target virtiofsd|refuse:virtiofsd reads file handles only from its own mounts"
    "--no-device-nodes|plain|--no-device-nodes|serve"
    "--no-setid|plain|--no-setid|serve"
    "--landlock|plain|--landlock required|serve"
    "--landlock|plain|--landlock off|serve"
    "--crash-restart|plain|--crash-restart|serve"
    "--crash-restart-limit|plain|--crash-restart --crash-restart-limit 3/60|serve"
    "--crash-restart-keep|plain|--crash-restart --crash-restart-keep all|serve"
    "source|source||serve"
    "cache|plain|-o cache=none|serve"
    "loglevel|plain|-o loglevel=debug|serve"
    "sandbox|plain|-o sandbox=chroot|serve"
    "xattr|plain|-o xattr|serve"
    "no_xattr|plain|-o no_xattr|serve"
    "readdirplus|plain|-o readdirplus|serve"
    "no_readdirplus|plain|-o no_readdirplus|serve"
    "writeback|plain|-o writeback|serve"
    "no_writeback|plain|-o no_writeback|serve"
    "allow_direct_io|plain|-o allow_direct_io|serve"
    "no_allow_direct_io|plain|-o no_allow_direct_io|serve"
    "no_flock|plain|-o no_flock|serve"
    "no_posix_lock|plain|-o no_posix_lock|serve"
    "flock|plain|-o flock|serve"
    "posix_lock|plain|-o posix_lock|serve"
    "no_killpriv_v2|plain|-o no_killpriv_v2|serve"
    "no_posix_acl|plain|-o no_posix_acl|serve"
    "no_security_label|plain|-o no_security_label|serve"
    "killpriv_v2|plain|-o killpriv_v2|serve"
    "announce_submounts|plain|-o announce_submounts|serve"
    "posix_acl|plain|-o posix_acl|serve"
    "security_label|plain|-o security_label|serve"
    "modcaps|plain|-o modcaps=-mknod|serve"
    "xattrmap|plain|-o xattr,xattrmap=:ok:all:::|serve"
)

# ---- every option of the document has a case --------------------------------
mapfile -t DOC < <(python3 - "$XVFS_ROOT/docs/virtiofsd-compat.md" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    if not line.startswith("| `"):
        continue
    first = line.split(" | ")[0]
    for tok in re.findall(r"`([^`]+)`", first):
        name = re.split(r"[ \[=]", tok)[0]
        print(name)
PY
)
have=" $(printf '%s\n' "${CASES[@]}" | cut -d'|' -f1 | tr '\n' ' ') "
missing=()
for n in "${DOC[@]}"; do
    # Printed and exited above; the commands (not daemon options) are
    # tests/cli.rs's and test_upgrade's.
    case $n in -V | --version | -h | --help | --print-capabilities | status | upgrade | completions) continue ;; esac
    [[ $have == *" $n "* ]] || missing+=("$n")
done
assert_eq "" "${missing[*]}" "every option of docs/virtiofsd-compat.md (${#DOC[@]} names) has a case here"

# ---- options that print and exit ------------------------------------------
assert_ok "-V prints the version" bash -c "'$REAL' -V | grep -q '^xvirtiofsd '"
assert_ok "--version prints the version" bash -c "'$REAL' --version | grep -q '^xvirtiofsd '"
assert_ok "-h prints the usage" bash -c "'$REAL' -h | grep -q -- '--shared-dir'"
assert_ok "--help prints the options" bash -c "'$REAL' --help | grep -q -- '--posix-acl'"
assert_ok "--print-capabilities prints the vhost-user JSON (type fs)" \
    bash -c "'$REAL' --print-capabilities | python3 -c 'import json,sys; assert json.load(sys.stdin)[\"type\"] == \"fs\"'"

# ---- --syslog, with a system logger -----------------------------------------
# In a mount namespace of its own, a tmpfs on /dev holds /dev/null and a
# /dev/log datagram socket a small listener reads; the daemon starts with
# --syslog and is stopped after a moment: its messages must be there, as
# facility daemon, tagged xvirtiofsd[PID].
SYSLOG_OUT=$VMT_DIR/syslog.txt
cat >"$VMT_DIR/syslog-listener.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
s.settimeout(6)
with open(sys.argv[1], "w") as out:
    try:
        while True:
            out.write(s.recv(4096).decode(errors="replace") + "\n")
            out.flush()
    except socket.timeout:
        pass
PY
rc=0
# shellcheck disable=SC2016 # expanded by the inner shell, from its arguments
timeout 30 unshare -m --propagation private bash -c '
    mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 || exit 9
    python3 "$1" "$2" & L=$!
    for _ in $(seq 50); do [ -S /dev/log ] && break; sleep 0.1; done
    timeout -s TERM 2 "$3" --syslog --socket-path "$4/syslog.sock" --shared-dir "$5" </dev/null >"$4/syslog-stderr.txt" 2>&1
    wait $L' _ "$VMT_DIR/syslog-listener.py" "$SYSLOG_OUT" "$REAL" "$VMT_DIR" "$SHARE" || rc=$?
assert_ok "--syslog: the daemon's messages reach the system logger" grep -q "serving $SHARE" "$SYSLOG_OUT"
assert_ok "--syslog: as facility daemon, priority info (<30>), tagged xvirtiofsd[PID]" \
    grep -qE '^<30>.*xvirtiofsd\[[0-9]+\]: .*serving' "$SYSLOG_OUT"
SYSLOG_PID=$(sed -n 's/.*xvirtiofsd\[\([0-9]*\)\]: .*serving.*/\1/p' "$SYSLOG_OUT" | head -n 1)
assert_ok "--syslog: the tag's pid is the host's (${SYSLOG_PID:-none}), not 1 of the PID namespace" \
    test "${SYSLOG_PID:-1}" -gt 1
assert_eq 0 "$(grep -c 'serving' "$VMT_DIR/syslog-stderr.txt")" "--syslog: and not to standard error"

# ---- one daemon per case ---------------------------------------------------
# The wrapper run-vm starts: the --socket alias and -o source= forms.
WRAP=$VMT_DIR/daemon-wrapper
cat >"$WRAP" <<'SH'
#!/bin/bash
args=()
while [ $# -gt 0 ]; do
    case "$1:$OPT_MODE" in
        --socket-path:socket) args+=(--socket "$2"); shift ;;
        --shared-dir:source) args+=(-o "source=$2"); shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
exec "$OPT_DAEMON" "${args[@]}"
SH
chmod 755 "$WRAP"

# start_case N MODE ARGS: the daemon of case N on its own socket, as run-vm
# would start it (the wrapper, or the --fd launcher); 0 once it listens.
start_case() {
    local n=$1 mode=$2 args=$3 daemon=$WRAP
    local -a extra=()
    read -ra extra <<<"$args"
    [ "$mode" != fd ] || daemon=$XVFS_ROOT/tests/vm/fd-launcher.py
    rm -f "$SOCKS/$n.sock"
    OPT_MODE=$mode OPT_DAEMON=$REAL XVFS_REAL_DAEMON=$REAL \
        "$daemon" --socket-path "$SOCKS/$n.sock" --shared-dir "$SHARE" "${extra[@]}" \
        </dev/null >"$VMT_DIR/case-$n.log" 2>&1 &
    CASE_PID[n]=$!
    wait_socket "$SOCKS/$n.sock" "${CASE_PID[$n]}"
}

stop_case() {
    stop_pid "${CASE_PID[$1]:-}"
    CASE_PID[$1]=
}

# run_batch N...: one guest with a device per case (tag cN, its daemon on its
# own socket), mounting each and reading the host's file through it; the
# control share (the guest's first device) holds the script and the answers.
run_batch() {
    local n tags='' devs='' rc=0
    local -a up=()
    for n in "$@"; do
        IFS='|' read -r _ mode args _ <<<"${CASES[$((n - 1))]}"
        if start_case "$n" "$mode" "$args"; then
            up+=("$n")
            tags+=" c$n"
            devs+=" c$n=$SOCKS/$n.sock"
        fi
    done
    cat >"$CTL/batch.sh" <<GUEST
for t in$tags; do
    mkdir -p /mnt/\$t
    i=0
    until mount -t virtiofs \$t /mnt/\$t 2>/tmp/err; do
        i=\$((i + 1))
        [ \$i -lt 50 ] || break
        sleep 0.1
    done
    echo "\$t \$(cat /mnt/\$t/hello 2>&1)"
    [ ! -s /tmp/err ] || echo "\$t mount: \$(cat /tmp/err)"
    umount /mnt/\$t 2>/dev/null
done
GUEST
    if [ "${#up[@]}" -gt 0 ]; then
        XVFS_EXTRA_FS=$devs DAEMON=$REAL DAEMON_ARGS='' XVFS_TIMEOUT=300 \
            vmt_guest "$CTL" "sh /mnt/shared/batch.sh" "$VMT_DIR/batch-$1.out" >/dev/null || rc=$?
    fi
    for n in "$@"; do
        stop_case "$n"
        IFS='|' read -r name mode args _ <<<"${CASES[$((n - 1))]}"
        if grep -qx "c$n read through the share" "$VMT_DIR/batch-$1.out" 2>/dev/null; then
            pass "$name ($args${mode:+, $mode}): serves a guest"
        else
            fail "$name ($args${mode:+, $mode}): the guest did not read the share (guest status $rc; $(grep "^c$n " "$VMT_DIR/batch-$1.out" 2>/dev/null | tr '\n' ' ' || echo 'no answer'); daemon log:)"
            tail -n 3 "$VMT_DIR/case-$n.log" 2>/dev/null | sed 's/^/     /'
        fi
    done
}

# Refused cases start no guest; served ones go BATCH to a guest (one boot for
# many cases: about 90 s in all instead of 9 minutes under TCG).
BATCH=20
SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/xvfs-opt.XXXXXX")
CTL=$VMT_DIR/control
mkdir -p "$CTL"
declare -a CASE_PID=()
trap 'for p in "${CASE_PID[@]}"; do [ -z "$p" ] || kill -KILL "$p" 2>/dev/null; done; rm -rf "$SOCKS"' EXIT
serve=()
n=0
for c in "${CASES[@]}"; do
    IFS='|' read -r name mode args expect <<<"$c"
    n=$((n + 1))
    read -ra extra <<<"$args"
    case $expect in
        refuse*)
            rc=0
            out=$(timeout 20 "$REAL" --socket-path "$VMT_DIR/refused.sock" --shared-dir "$SHARE" \
                "${extra[@]}" 2>&1 </dev/null) || rc=$?
            want=2
            [[ $expect != refuse3:* ]] || want=3
            text=${expect#*:}
            assert_eq "$want" "$rc" "$name ($args): refused, exit status $want"
            assert_ok "$name ($args): says \"$text\"" grep -qF -- "$text" <<<"$out"
            ;;
        serve) serve+=("$n") ;;
    esac
done
for ((b = 0; b < ${#serve[@]}; b += BATCH)); do
    run_batch "${serve[@]:b:BATCH}"
done

vmt_summary
