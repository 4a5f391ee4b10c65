#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of tests/vm/libvirt-agent.sh (busybox sh, runs inside the guest).
#
# The domain boots with xvfs.cmd=$(agent_bootstrap): a loop that waits for the
# automount helper to mount a share holding .xvfs-agent/agent.sh, copies this
# script to /tmp and runs it with that directory. From then on:
#   host writes DIR/cmd/N.sh (N = 1, 2, ...; atomically, by rename)
#   agent runs it with sh in / (stdin /dev/null, output to /tmp/N.out),
#         copies the output to DIR/out/N.out (if DIR is still there) and prints
#         "XVFS-AGENT-RC N STATUS" on the console (the serial log the host reads)
# Commands never run with their output on the share, so a command may unmount
# the share the agent came from. Creating /tmp/agent.quit (from a command or
# from anything it left running) ends the agent; /init then unmounts
# everything and powers the guest off.
dir=$1
n=1
echo "XVFS-AGENT-READY $dir" >/dev/console
while [ ! -e /tmp/agent.quit ]; do
    if [ -f "$dir/cmd/$n.sh" ] && cp "$dir/cmd/$n.sh" "/tmp/cmd-$n.sh" 2>/dev/null; then
        (cd / && sh "/tmp/cmd-$n.sh") </dev/null >"/tmp/$n.out" 2>&1
        rc=$?
        if [ -d "$dir/out" ]; then
            cp "/tmp/$n.out" "$dir/out/.$n.out" 2>/dev/null && mv "$dir/out/.$n.out" "$dir/out/$n.out" 2>/dev/null
        fi
        echo "XVFS-AGENT-RC $n $rc" >/dev/console
        n=$((n + 1))
    else
        sleep 0.2
    fi
done
