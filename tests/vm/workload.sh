# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The guest I/O workload the no-downtime tests (upgrade, crash restart) run
# while the host disrupts the daemon, and its checks. Source after lib.sh.
#
# In the guest, on the share, all at once until the host creates $S/done:
# a steady stream of small writes (fio, 200 per second, with a per-request
# completion log: its largest gaps are the guest-visible pauses), fio runs
# with crc32c verification one after the other, a shell loop that creates,
# appends to, renames and deletes files and hard-links a file the guest held
# from the start into a directory it just made (a LINK between a node older
# than the disruption and a newer one), and `ls -R` of a tree that must list
# the same every time; a file opened before anything else is read through its
# descriptor at the end; a file unlinked right after it was opened, written
# a line at a time through its descriptor and read back at the end through
# a new open of /proc/PID/fd/N (a file with no name left, which crash
# restart keeps in the holder).

# The script is too long for the kernel command line: workload_prepare puts
# it in the share and the guest runs it from there.
# shellcheck disable=SC2034 # used by the tests that source this file
WORKLOAD_GUEST_SCRIPT='sh /mnt/shared/workload-guest.sh'

# The steady stream (TICK) and the verification runs (VER, results in
# /tmp/verify.res), until $S/done: also part of the migration test's script.
# shellcheck disable=SC2016 # expanded by the guest's shell, not here
WORKLOAD_STREAM='fio --name=tick --filename=$S/tick.dat --rw=write --bs=4k --size=256k --time_based --runtime=900 \
    --rate_iops=200 --ioengine=psync --write_lat_log=/tmp/tick --log_avg_msec=0 --eta=never \
    --output=/tmp/tick.out &
TICK=$!
( n=0; fail=0
  while [ ! -e $S/done ]; do
    n=$((n+1))
    fio --name=v$n --filename=$S/verify.dat --size=1m --bs=4k --rw=randwrite --verify=crc32c \
        --do_verify=1 --ioengine=psync --eta=never --output=/tmp/v.out || { fail=$((fail+1)); cat /tmp/v.out; }
  done
  echo "verify-runs=$n verify-failures=$fail" > /tmp/verify.res ) &
VER=$!
'

# shellcheck disable=SC2016 # expanded by the guest's shell, not here
WORKLOAD_GUEST_BODY='
S=/mnt/shared
mkdir -p $S/loop
exec 3< $S/keep
exec 4> $S/unlinked-open
rm $S/unlinked-open
( u=0; uerr=0
  while [ ! -e $S/done ]; do u=$((u+1)); echo "u$u" >&4 || uerr=$((uerr+1)); sleep 0.2; done
  echo "unlinked-writes=$u unlinked-errors=$uerr" > /tmp/unlinked.res ) 2>/tmp/unlinked.err &
UNL=$!
'"$WORKLOAD_STREAM"'( i=0; err=0
  while [ ! -e $S/done ]; do
    i=$((i+1))
    { echo "line $i" > $S/loop/f$i && echo "more $i" >> $S/loop/f$i && mv $S/loop/f$i $S/loop/g$i &&
      if [ $((i % 3)) -eq 0 ]; then rm $S/loop/g$i; fi &&
      mkdir $S/x$i && ln $S/keep $S/x$i/k && rm $S/x$i/k && rmdir $S/x$i; } || err=$((err+1))
  done
  echo "loop-iterations=$i loop-errors=$err" > /tmp/loop.res ) 2>/tmp/loop.err &
LOOP=$!
( w=0; err=0
  while [ ! -e $S/done ]; do
    w=$((w+1)); got=$(ls -R $S/tree 2>>/tmp/ls.err | grep -c "^f[0-9]")
    [ "$got" = 128 ] || { err=$((err+1)); echo "ls -R: $got files, not 128" >> /tmp/ls.err; }
    sleep 0.2
  done
  echo "ls-walks=$w ls-errors=$err" > /tmp/ls.res ) &
LS=$!
touch $S/started
while [ ! -e $S/done ]; do sleep 1; done
wait $LOOP; wait $VER; wait $LS; wait $UNL
kill -INT $TICK; wait $TICK
cat /tmp/loop.res /tmp/verify.res /tmp/ls.res
echo "loop-stderr-lines=$(wc -l < /tmp/loop.err)"
cat /tmp/loop.err /tmp/ls.err 2>/dev/null
grep -o "err= *[0-9]*" /tmp/tick.out | sed "s/ //g; s/^/tick-/"
echo "kept-fd-content=$(cat <&3)"
cat /tmp/unlinked.res /tmp/unlinked.err
echo "unlinked-lines=$(wc -l < /proc/$$/fd/4) unlinked-bad-lines=$(awk "\$0 != \"u\" NR { b++ } END { print b+0 }" /proc/$$/fd/4)"
cp /tmp/tick_lat.1.log $S/tick_lat.log
'

# workload_prepare SHARE: the guest's script, the file it keeps open and the
# tree it lists (8 directories of 16 files).
workload_prepare() {
    local d f
    mkdir -p "$1"
    echo before >"$1/keep"
    printf '%s\n' "$WORKLOAD_GUEST_BODY" >"$1/workload-guest.sh"
    for d in $(seq 1 8); do
        mkdir -p "$1/tree/d$d"
        for f in $(seq 1 16); do echo "$d/$f" >"$1/tree/d$d/f$f"; done
    done
}

# workload_wait_started SHARE: until the guest's workload runs (2 minutes).
workload_wait_started() {
    local i
    for i in $(seq 1 240); do
        [ -e "$1/started" ] && return 0
        sleep 0.5
    done
    return 1
}

# workload_wait_streaming SHARE: until the steady stream writes (its file
# changes on the host; fio may take a second or more to start under TCG,
# after the guest said it started), at most a minute. A clock marker set
# before it would fall outside the stream.
workload_wait_streaming() {
    local i a b
    for i in $(seq 1 300); do
        a=$(stat -c %Y.%y "$1/tick.dat" 2>/dev/null || true)
        sleep 0.2
        b=$(stat -c %Y.%y "$1/tick.dat" 2>/dev/null || true)
        [ -n "$a" ] && [ "$a" != "$b" ] && return 0
    done
    return 1
}

# workload_check OUT SHARE WHAT: the guest's results (OUT) and the files the
# loop left on the host. WHAT names the disruption ("the upgrades").
workload_check() {
    local out=$1 share=$2 what=$3 iters bad i
    wfield() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$out" | head -n 1; }
    assert_eq 0 "$(wfield loop-errors)" "shell loop: no failed operation"
    assert_eq 0 "$(wfield loop-stderr-lines)" "shell loop: no error message"
    assert_eq 0 "$(wfield verify-failures)" "fio: every crc32c verification passed"
    assert_ok "fio: verification ran during $what ($(wfield verify-runs) runs)" \
        test "$(wfield verify-runs)" -gt 0
    assert_eq 0 "$(wfield ls-errors)" "ls -R of a tree: the same listing every time ($(wfield ls-walks) walks)"
    assert_eq "err=0" "$(wfield tick-err | sed 's/^/err=/')" "steady stream: no I/O error"
    assert_eq before "$(wfield kept-fd-content)" \
        "a file opened before $what reads through the same descriptor"
    assert_eq 0 "$(wfield unlinked-errors)" \
        "a file unlinked while open: no failed write ($(wfield unlinked-writes) lines)"
    assert_eq "$(wfield unlinked-writes)" "$(wfield unlinked-lines)" \
        "a file unlinked while open: every line written reads back through a new open"
    assert_eq 0 "$(wfield unlinked-bad-lines)" "a file unlinked while open: every line in order"
    iters=$(wfield loop-iterations)
    bad=0
    for i in $(seq 1 "$iters"); do
        if [ $((i % 3)) -eq 0 ]; then
            [ ! -e "$share/loop/g$i" ] || bad=$((bad + 1))
        else
            [ "$(cat "$share/loop/g$i" 2>/dev/null)" = "line $i
more $i" ] || bad=$((bad + 1))
        fi
    done
    assert_eq 0 "$bad" "all $iters loop iterations left the expected files on the host"
    assert_eq 0 "$(find "$share/loop" -name 'f*' | wc -l)" "no half-done loop file on the host"
    assert_eq 0 "$(find "$share" -maxdepth 1 -name 'x*' | wc -l)" "no loop directory left on the host"
}

# workload_pause SHARE N WHAT FILE: the guest-visible pause per disruption
# (the N largest gaps between completions of the steady stream), printed
# and written to FILE.
workload_pause() {
    if [ ! -s "$1/tick_lat.log" ]; then
        fail "no completion log from the steady stream"
        return
    fi
    python3 - "$1/tick_lat.log" "$2" "$3" "$4" <<'PY'
import statistics, sys
times = sorted(int(l.split(",")[0]) for l in open(sys.argv[1]) if l.strip())
gaps = sorted((b - a for a, b in zip(times, times[1:])), reverse=True)
n, what = int(sys.argv[2]), sys.argv[3]
top = gaps[:n]
line = (f"guest-visible pause over {n} {what} (largest gaps of a 200/s request stream): "
        f"median {statistics.median(top)} ms, max {max(top)} ms; "
        f"normal gap {statistics.median(gaps)} ms over {len(times)} requests")
print(line)
open(sys.argv[4], "w").write(line + "\n")
PY
    pass "pause measured ($(cat "$4"))"
}

# workload_attributed_pause SHARE DAEMON_LOG MARK N WHAT FILE: the guest-visible
# pause of each of the N handovers in DAEMON_LOG, found through MARK ("MARK
# stop-ms cont-ms": the host stopped the serving process for a moment, host
# clock; the longest gap of the stream ends when it resumed, which gives the
# guest clock's offset), measured two ways around the daemon's own pause
# ("handing over" to "handover complete", host clock):
# - the gap of the steady stream that spans it (at least one period of the
#   stream, 5 ms, even for a pause of zero; two when a completion falls
#   inside the clock offset's uncertainty);
# - the latency of the slowest stream request in flight during it (issued
#   before it ended, completed after it began, 2 ms of slack each side for
#   the clocks): how long the guest waited for an answer; set against the
#   stream's median latency.
# Printed and written to FILE.
workload_attributed_pause() {
    python3 - "$1/tick_lat.log" "$2" "$3" "$4" "$5" "$6" <<'PY'
import datetime, statistics, sys
tick, log, mark, n, what, out = sys.argv[1:7]
reqs = sorted((int(l.split(",")[0]), int(l.split(",")[1]) / 1e6) for l in open(tick) if l.strip())
times = [t for t, _ in reqs]
_, stop, cont = open(mark).read().split()[:3]
gaps = list(zip(times, times[1:]))
a, b = max(gaps, key=lambda g: g[1] - g[0])
offset = int(cont) - b  # host ms = guest ms + offset
def ms(line):
    t = datetime.datetime.strptime(line[1:24], "%Y-%m-%dT%H:%M:%S.%f")
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
spans, own, start = [], [], None
for line in open(log, errors="replace"):
    if "upgrade: handing over to" in line:
        start = ms(line)
    elif "upgrade: handover complete in" in line and start is not None:
        spans.append((start, ms(line)))
        own.append(int(line.split("handover complete in ")[1].split()[0]) / 1000)
        start = None
    elif "upgrade failed" in line:
        start = None
pauses, waits = [], []
for s, e in spans[: int(n)]:
    before = [t for t in times if t <= s - offset]
    after = [t for t in times if t >= e - offset]
    if before and after:
        pauses.append(after[0] - before[-1])
    lo, hi = s - offset - 2, e - offset + 2
    waits.append(round(max([lat for t, lat in reqs if t >= lo and t - lat <= hi], default=0), 1))
med = lambda v: round(statistics.median(v), 3) if v else "n/a"
line = (f"guest-visible pause per {what} (the stream's gap spanning each daemon-side pause, "
        f"{len(pauses)} of {n}; marker gap {b - a} ms for a {int(cont) - int(stop)} ms stop): "
        f"median {med(pauses)} ms, max {max(pauses, default='n/a')} ms; each: {pauses}; "
        f"slowest request in flight: median {med(waits)} ms, max {max(waits, default='n/a')} ms "
        f"(stream's median latency {round(statistics.median(l for _, l in reqs), 1)} ms); "
        f"each: {waits}; daemon side (queues stopped to running): median {med(own)} ms, "
        f"max {max(own, default='n/a')} ms")
print(line)
open(out, "w").write(line + "\n")
PY
}
