#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Report of a bench/filebench-compare.sh run: xfilebench against
Filebench 1.5-alpha3, per personality and per flowop.

Reads RESULT_DIR/raw/<personality>/<tool>.rep<k>.{out,rc} (tool: filebench
or xfilebench; .out is the tool's own output, whose "Per-Operation
Breakdown" lines and "IO Summary" line have the same form for both) and
writes report.md, report.json and plot.png beside raw/.

For each side the median of the repetitions' ops/s and its run-to-run
spread (min and max). The ratio is xfilebench's median over Filebench's. A
personality (or a flowop) agrees when the two sides' ranges [min, max]
overlap, i.e. the ratio band [xmin / fmax, xmax / fmin] holds 1: the
difference between the tools is no larger than the two tools' combined
run-to-run spread. A personality where a tool printed no IO Summary is
listed with that tool's own error lines. NOTES gives, per personality, the
reasons a difference is expected (each with Filebench's source line).

usage: bench/filebench_compare_report.py RESULT_DIR
"""
import json
import os
import re
import statistics
import sys

FLOWOP = re.compile(r"^(\S+)\s+(\d+)ops\s+([\d.]+)ops/s\s+([\d.]+)mb/s\s+([\d.]+)ms/op")
SUMMARY = re.compile(r"IO Summary:\s+(\d+) ops ([\d.]+) ops/s ([\d.]+)/([\d.]+) rd/wr\s+([\d.]+)mb/s")
ERROR = re.compile(r"error|fail|unexpected|stopped early|no valid results|out of resources|killed|segmentation",
                   re.IGNORECASE)
TOOLS = ["filebench", "xfilebench"]

# Expected differences, per personality: (what, Filebench's source line).
NOTES = {}


def parse(path):
    """{"ok", "ops_s", "flowops": {name: ops/s}, "errors": [...]} of one output."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return {"ok": False, "ops_s": None, "flowops": {}, "errors": [str(e)]}
    flowops, ops_s, errors, in_breakdown = {}, None, [], False
    for ln in lines:
        if "Per-Operation Breakdown" in ln:
            flowops, in_breakdown = {}, True
            continue
        m = SUMMARY.search(ln)
        if m:
            ops_s, in_breakdown = float(m.group(2)), False
            continue
        m = FLOWOP.match(ln)
        if in_breakdown and m:
            flowops[m.group(1)] = float(m.group(3))
            continue
        if ERROR.search(ln) and "warning" not in ln.lower() and "cvar directory" not in ln:
            errors.append(ln.strip()[:200])
    rc_path = path[:-4] + ".rc"
    try:
        with open(rc_path) as f:
            rc = int(f.read().strip() or "0")
    except (OSError, ValueError):
        rc = None
    if rc not in (0, None):
        errors.append(f"exit status {rc}" + (" (killed at the time limit)" if rc in (124, 137) else ""))
    return {"ok": ops_s is not None and rc == 0, "ops_s": ops_s, "flowops": flowops, "errors": errors[:8]}


def stats(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    med = statistics.median(v)
    return {"median": med, "min": min(v), "max": max(v), "n": len(v),
            "spread": (max(v) - min(v)) / med if med else 0.0}


def compare(f, x):
    """Ratio, band and verdict of two stats (or None)."""
    if not f or not x:
        return None
    if f["median"] == 0 or f["min"] == 0:
        same = x["max"] == 0
        return {"ratio": None if not same else 1.0, "band": None, "agree": same}
    ratio = x["median"] / f["median"]
    band = (x["min"] / f["max"], x["max"] / f["min"])
    return {"ratio": ratio, "band": band, "agree": band[0] <= 1.0 <= band[1]}


def collect(raw):
    out = {}
    for name in sorted(os.listdir(raw)):
        d = os.path.join(raw, name)
        if not os.path.isdir(d):
            continue
        runs = {t: [] for t in TOOLS}
        for fn in sorted(os.listdir(d)):
            m = re.match(r"(filebench|xfilebench)\.rep(\d+)\.out$", fn)
            if m:
                runs[m.group(1)].append(parse(os.path.join(d, fn)))
        p = {"runs": runs}
        for t in TOOLS:
            ok = [r for r in runs[t] if r["ok"]]
            p[t] = stats([r["ops_s"] for r in ok])
            p[t + "_failed"] = len(runs[t]) - len(ok)
            p[t + "_errors"] = sorted({e for r in runs[t] if not r["ok"] for e in r["errors"]})[:6]
        p["cmp"] = compare(p["filebench"], p["xfilebench"])
        names = []
        for t in TOOLS:
            for r in runs[t]:
                names += [n for n in r["flowops"] if n not in names]
        p["flowops"] = {}
        for n in names:
            fs = stats([r["flowops"].get(n) for r in runs["filebench"] if r["ok"]])
            xs = stats([r["flowops"].get(n) for r in runs["xfilebench"] if r["ok"]])
            p["flowops"][n] = {"filebench": fs, "xfilebench": xs, "cmp": compare(fs, xs)}
        out[name + ".f"] = p
    return out


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def side(s):
    if not s:
        return "no result"
    return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"


def verdict(p):
    c = p["cmp"]
    if not p["filebench"]:
        return "Filebench gives no result"
    if not p["xfilebench"]:
        return "xfilebench gives no result"
    if c["agree"]:
        return "agrees"
    return "differs, see note" if NOTES.get(p["name"]) else "DIFFERS"


def band(c):
    if not c or c["band"] is None:
        return "-"
    return f"{c['band'][0]:.2f}-{c['band'][1]:.2f}"


def ratio(c):
    if not c or c["ratio"] is None:
        return "-"
    return f"{c['ratio']:.2f}"


def write_md(res_dir, data, env):
    rows, flows = [], []
    counts = {}
    for name, p in data.items():
        p["name"] = name
        v = verdict(p)
        counts[v] = counts.get(v, 0) + 1
        rows.append(f"| {name} | {side(p['filebench'])} | {side(p['xfilebench'])} | {ratio(p['cmp'])} | "
                    f"{band(p['cmp'])} | {v} |")
    lines = ["# xfilebench against Filebench 1.5-alpha3", "",
             "Made by `make bench-filebench-compare` (bench/filebench-compare.sh, "
             "bench/filebench_compare_report.py).", "", "```", env.strip(), "```", "",
             "IO Summary ops/s: median of the repetitions (min-max); ratio = xfilebench / Filebench; "
             "band = [xfilebench min / Filebench max, xfilebench max / Filebench min]. A personality "
             "agrees when the band holds 1 (the two sides' run-to-run ranges overlap).", "",
             "Summary: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), "",
             "| personality | Filebench ops/s | xfilebench ops/s | ratio | band | verdict |",
             "|---|---|---|---|---|---|"] + rows + [""]
    noted = [(n, p) for n, p in data.items() if NOTES.get(n)]
    if noted:
        lines += ["## Expected differences", ""]
        for n, p in noted:
            lines += [f"- **{n}**: {NOTES[n]}"]
        lines += [""]
    failed = [(n, p) for n, p in data.items() if p["filebench_failed"] or p["xfilebench_failed"]]
    if failed:
        lines += ["## Runs without a result, with the tool's own error", ""]
        for n, p in failed:
            for t in TOOLS:
                if p[t + "_failed"]:
                    errs = "; ".join(p[t + "_errors"]) or "no IO Summary printed"
                    lines += [f"- {n}, {t} ({p[t + '_failed']} of {len(p['runs'][t])} runs): `{errs}`"]
        lines += [""]
    lines += ["## Per flowop", "",
              "ops/s per flowop, as each tool's Per-Operation Breakdown prints it (same columns as above).", ""]
    for name, p in data.items():
        if not p["flowops"]:
            continue
        lines += [f"### {name}", "", "| flowop | Filebench | xfilebench | ratio | band | agrees |",
                  "|---|---|---|---|---|---|"]
        for fo, q in p["flowops"].items():
            c = q["cmp"]
            ag = "-" if not c else ("yes" if c["agree"] else "no")
            lines += [f"| {fo} | {side(q['filebench'])} | {side(q['xfilebench'])} | {ratio(c)} | {band(c)} | {ag} |"]
        lines += [""]
    with open(os.path.join(res_dir, "report.md"), "w") as f:
        f.write("\n".join(lines))


def plot(res_dir, data):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("filebench_compare_report: no matplotlib (python3-matplotlib): no plot.png", file=sys.stderr)
        return
    names = [n for n, p in data.items() if p["cmp"] and p["cmp"]["ratio"]]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(names) + 1.5))
    for i, n in enumerate(names):
        c = data[n]["cmp"]
        lo, hi = c["band"]
        color = "#2ca02c" if c["agree"] else ("#ff7f0e" if NOTES.get(n) else "#d62728")
        ax.plot([lo, hi], [i, i], color=color, linewidth=3, alpha=0.5)
        ax.plot([c["ratio"]], [i], "o", color=color)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("xfilebench / Filebench ops/s (dot: ratio of medians; bar: min/max band)")
    ax.set_title("xfilebench against Filebench 1.5-alpha3 (green: agrees, orange: expected difference, red: differs)",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(res_dir, "plot.png"), dpi=110)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    res_dir = sys.argv[1]
    data = collect(os.path.join(res_dir, "raw"))
    try:
        with open(os.path.join(res_dir, "env.txt")) as f:
            env = f.read()
    except OSError:
        env = ""
    write_md(res_dir, data, env)
    slim = {n: {k: v for k, v in p.items() if k != "runs"} for n, p in data.items()}
    for n, p in data.items():
        slim[n]["runs"] = {t: [{"ops_s": r["ops_s"], "errors": r["errors"]} for r in p["runs"][t]] for t in TOOLS}
        slim[n]["note"] = NOTES.get(n)
    with open(os.path.join(res_dir, "report.json"), "w") as f:
        json.dump(slim, f, indent=1, sort_keys=True)
    plot(res_dir, data)
    print(os.path.join(res_dir, "report.md"))


if __name__ == "__main__":
    main()
