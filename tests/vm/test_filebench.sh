#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: the Filebench suite end to end, small. bench/bench.sh runs two
# workloads (seq-rd-1th-1f-4k and files-cr-1th) once through the guest runner
# on the xvirtiofsd share and once on the host, then bench/report.py writes
# the report. Checked: the raw results are packed into raw.tar.xz (the report
# is made from it), every JSON result exists and reports no error, the
# report and its plots exist, no result was left out, and every ops/s figure
# in report.md is the median of exactly the error-free JSON results
# (recomputed here independently).
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

WORKLOADS=(seq-rd-1th-1f-4k files-cr-1th)
CONFIGS="xvirtiofsd host"

main() {
    local res list rc=0 w c
    vmt_init filebench
    res=$VMT_DIR/results
    list=$VMT_DIR/list.txt
    printf '%s\n' "${WORKLOADS[@]}" >"$list"
    "$XVFS_ROOT/bench/bench.sh" --list "$list" --reps 1 --runtime 2 --configs "$CONFIGS" \
        --out "$res" >"$VMT_DIR/bench.out" 2>&1 || rc=$?
    assert_eq 0 "$rc" "bench/bench.sh exits 0 (log $VMT_DIR/bench.out)"
    assert_ok "bench.sh leaves no raw/ directory" test ! -e "$res/raw"
    # The checks below read the JSON results: back out of the archive.
    assert_ok "raw.tar.xz unpacks" tar -C "$res" -xJf "$res/raw.tar.xz"
    for c in $CONFIGS; do
        for w in "${WORKLOADS[@]}"; do
            assert_ok "$c/$w.json exists" test -s "$res/raw/$c/rep1/$w.json"
            assert_ok "$c/$w.json reports no error" /usr/bin/python3 - "$res/raw/$c/rep1/$w.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["error"] is None and d["runs"] and all(r["error"] is None for r in d["runs"])
         and d["runs"][-1]["summary"]["ops"] > 0 else 1)
PY
        done
    done
    assert_ok "the guest printed progress lines" grep -q '\[2/2\] files-cr-1th (0 left)' "$VMT_DIR/bench.out"
    assert_ok "report.md exists" test -s "$res/report.md"
    assert_ok "env.txt names the accelerator" grep -q '^accelerator: ' "$res/env.txt"
    assert_ok "the overall ratio plot exists" test -s "$res/overall-ratio.png"
    assert_ok "a class plot exists" test -s "$res/class-seq-rd.png"
    assert_ok "every report figure comes from an error-free JSON result" /usr/bin/python3 - "$res" "${WORKLOADS[*]}" <<'PY'
import json, os, statistics, sys
res, names = sys.argv[1], sys.argv[2].split()
rep = json.load(open(os.path.join(res, "report.json")))
assert rep["rejected"] == [], rep["rejected"]
md = open(os.path.join(res, "report.md")).read().splitlines()
cols = {"host": 2, "xvirtiofsd": 3}
for n in names:
    line = next(l for l in md if l.startswith("| ") and f"| {n} |" in l)
    cells = [c.strip() for c in line.strip("|").split("|")]
    for cfg, col in cols.items():
        d = json.load(open(os.path.join(res, "raw", cfg, "rep1", n + ".json")))
        assert d["error"] is None
        want = statistics.median([d["runs"][-1]["summary"]["ops_per_s"]])
        txt = f"{want:,.0f}" if want >= 100 else f"{want:,.1f}"
        assert cells[col] == txt, (n, cfg, cells[col], txt)
        src = rep["workloads"][n]["configs"][cfg]["sources"]
        assert src == [f"raw/{cfg}/rep1/{n}.json"], src
    print(f"{n}: host {cells[2]}, xvirtiofsd {cells[3]} ops/s match their JSON results")
PY
    vmt_summary
}

main "$@"
