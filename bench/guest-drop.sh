#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Drops the guest's caches, then asks the host to drop its own through the
# share (bench/bench.sh answers: it deletes the request once done). Waits at
# most 30 s for the host. In the image as /opt/xvfs/bin/xvfs-drop-caches.
#
# The request names the workload (XVFS_BENCH_WORKLOAD, set by
# run-workloads.sh) and marks the start of its measured run: the host samples
# the daemon's CPU time there. `xvfs-drop-caches --end` drops nothing and
# marks the end of the run.
kind=start
if [ "${1:-}" = --end ]; then
    kind=end
else
    sync
    echo 3 >/proc/sys/vm/drop_caches
fi
q=/mnt/shared/.xvfs-drop
[ -d "$q" ] || exit 0
id=$$-$(cut -d' ' -f1 /proc/uptime)
# Written under another name first: the host must never read it half-written.
echo "$kind ${XVFS_BENCH_WORKLOAD:-unknown}" >"$q/.tmp-$id"
req=$q/req-$id
mv "$q/.tmp-$id" "$req"
i=0
while [ -e "$req" ] && [ "$i" -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ ! -e "$req" ] || echo "xvfs-drop-caches: the host did not answer in 30 s" >&2
[ "$kind" = end ] || echo 3 >/proc/sys/vm/drop_caches
