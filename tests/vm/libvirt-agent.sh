# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Host side of the guest command channel used by the libvirt test (source it).
# The channel needs no console or network: commands travel as files on a
# virtio-fs share, results come back on the share and on the serial console.
#
#   agent_bootstrap            the guest command (xvfs.cmd) that waits for an
#                              agent on any mounted share and starts it
#   agent_install SHARE        put the agent (tests/vm/guest-agent.sh) on SHARE
#   agent_wait_ready CONSOLE SECONDS
#                              wait for "XVFS-AGENT-READY" on the console log
#   agent_run SHARE CONSOLE SECONDS SCRIPT
#                              run SCRIPT in the guest; its output goes to
#                              $AGENT_OUT (a file), returns its exit status;
#                              124 when no status came within SECONDS

AGENT_N=0
# shellcheck disable=SC2034 # read by the sourcing test
AGENT_OUT=

agent_bootstrap() {
    # shellcheck disable=SC2016 # expanded in the guest
    printf '%s' 'while :; do for d in /mnt/*/.xvfs-agent; do if [ -f "$d/agent.sh" ]; then cp "$d/agent.sh" /tmp/agent.sh; exec sh /tmp/agent.sh "$d"; fi; done; sleep 0.5; done'
}

agent_install() {
    local share=$1
    mkdir -p "$share/.xvfs-agent/cmd" "$share/.xvfs-agent/out"
    cp "$XVFS_ROOT/tests/vm/guest-agent.sh" "$share/.xvfs-agent/agent.sh"
    AGENT_N=0
}

# wait_for_line FILE REGEX SECONDS: the first matching line, or status 1.
wait_for_line() {
    local file=$1 re=$2 secs=$3 deadline line
    deadline=$((SECONDS + secs))
    while :; do
        # One process, no pipe: an early-exiting reader would SIGPIPE the writer (pipefail).
        if line=$(awk -v re="$re" '{ sub(/\r$/, "") } $0 ~ re { print; found = 1; exit } END { exit !found }' "$file" 2>/dev/null); then
            printf '%s\n' "$line"
            return 0
        fi
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

agent_wait_ready() {
    wait_for_line "$1" '^XVFS-AGENT-READY' "$2" >/dev/null
}

agent_run() {
    local share=$1 console=$2 secs=$3 script=$4 n line
    AGENT_N=$((AGENT_N + 1))
    n=$AGENT_N
    # shellcheck disable=SC2034 # read by the sourcing test
    AGENT_OUT=$share/.xvfs-agent/out/$n.out
    printf '%s\n' "$script" >"$share/.xvfs-agent/cmd/.$n.sh"
    mv "$share/.xvfs-agent/cmd/.$n.sh" "$share/.xvfs-agent/cmd/$n.sh"
    line=$(wait_for_line "$console" "^XVFS-AGENT-RC $n [0-9]+\$" "$secs") || {
        say "guest command $n gave no status within $secs s: $script"
        return 124
    }
    # The output file is copied before the status is printed (if the share is still there).
    return "${line##* }"
}
