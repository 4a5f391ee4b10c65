#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: multi-queue virtio-fs. The guest boots with 2 vCPUs and
# num-request-queues=2 (Linux >= 6.10 spreads requests over the queues by
# submitting CPU) and runs a parallel fio job with data verification, once with
# the default wait policy and once with busy polling forced on. Checked from
# the daemon's --metrics-file: both request queues served requests; from fio:
# no error and verification passed; on the host: the files fio wrote.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init multiqueue

GUEST_CMD='fio --name=mq --directory=/mnt/shared --numjobs=2 --size=16m --bs=4k \
  --rw=randrw --verify=crc32c --do_verify=1 --ioengine=psync \
  --cpus_allowed=0-1 --cpus_allowed_policy=split --group_reporting --eta=never; \
  echo "fio-status=$?"'

# queue_requests METRICS QUEUE: requests served by that virtqueue.
queue_requests() {
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(next((q["requests"] for q in d["queues"] if q["queue"] == int(sys.argv[2])), 0))
PY
}

run_case() {
    local name=$1 args=$2 share out metrics rc=0
    share=$VMT_DIR/share-$name
    out=$VMT_DIR/$name.out
    metrics=$VMT_DIR/$name-metrics.json
    mkdir -p "$share"
    QUEUES=2 VCPUS=2 DAEMON_ARGS="--metrics-file $metrics $args" \
        vmt_guest "$share" "$GUEST_CMD" "$out" || rc=$?
    assert_eq 0 "$rc" "$name: guest command exit status"
    assert_ok "$name: fio reports err=0" grep -q 'err= 0' "$out"
    assert_ok "$name: fio exits 0 (verification passed)" grep -q '^fio-status=0' "$out"
    assert_ok "$name: no verification failure" bash -c "! grep -qi 'verify.*fail\|bad magic\|crc32c.*mismatch' '$out'"
    assert_ok "$name: metrics file written" test -s "$metrics"
    local q1 q2
    q1=$(queue_requests "$metrics" 1)
    q2=$(queue_requests "$metrics" 2)
    echo "     $name: requests queue 1 = $q1, queue 2 = $q2"
    assert_ok "$name: request queue 1 served requests" test "$q1" -gt 100
    assert_ok "$name: request queue 2 served requests" test "$q2" -gt 100
    local files
    files=$(find "$share" -maxdepth 1 -name 'mq.*' -size 16M | wc -l)
    assert_eq 2 "$files" "$name: both 16 MiB fio files are on the host"
}

run_case default ""
# A 2 ms window: on single-threaded TCG (QEMU 7.2's test guests) the guest
# takes far longer than the usual tens of microseconds to post its next request.
run_case polling "--poll always --poll-us 2000"
if [ -s "$VMT_DIR/polling-metrics.json" ]; then
    polled=$(python3 -c "import json,sys; print(sum(q['found_by_poll'] for q in json.load(open(sys.argv[1]))['queues']))" "$VMT_DIR/polling-metrics.json")
    echo "     polling: batches found by polling = $polled"
    assert_ok "polling: some requests were found by polling" test "$polled" -gt 0
fi

vmt_summary
