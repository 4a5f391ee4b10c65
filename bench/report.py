#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Report of a bench/bench.sh run: report.md in the form of the FUSE
performance paper's Table 6 (ops/s per workload, % difference against
host-native and against virtiofsd, the paper's classes), the paper's Stackfs
column beside ours, and PNG plots (one per workload class, one overall ratio
chart). Only JSON results whose run reported no error count; a workload
without one shows "n/a". For the virtio-fs daemons it also gives the
daemon's CPU seconds per 1,000 Filebench operations (from the CPU times
bench.sh sampled at the start and end of each measured run, raw/<config>/
rep<k>.daemon-cpu): a figure that does not depend on the guest's speed.
report.json holds every figure with the files it came from. The results are
read from RESULTS_DIR/raw/ or, when there is none, from RESULTS_DIR/raw.tar.xz
(as bench.sh leaves them).

usage: bench/report.py RESULTS_DIR
"""
import json
import os
import re
import statistics
import sys

from raw_archive import raw_dir

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["xvirtiofsd", "xvirtiofsd-mq", "virtiofsd", "guest-tmpfs", "host"]
LABEL = {"xvirtiofsd": "xvirtiofsd", "xvirtiofsd-mq": "xvirtiofsd 2q+poll", "virtiofsd": "virtiofsd",
         "guest-tmpfs": "guest tmpfs", "host": "host native"}
COLORS = {"xvirtiofsd": "#1f77b4", "xvirtiofsd-mq": "#9467bd", "virtiofsd": "#ff7f0e", "guest-tmpfs": "#2ca02c"}

# Table 6 of the paper: Stackfs throughput, % difference against Ext4
# (row: HDD SBase, HDD SOpt, SSD SBase, SSD SOpt).
PAPER = {
    1: (-2.4, 1.7, -0.5, -0.9), 2: (-0.2, -2.2, 0.8, 0.3), 3: (-0.9, -2.1, 0.4, 1.7), 4: (-0.9, -2.2, 0.2, -0.3),
    5: (-2.4, -3.0, 0.0, 2.1), 6: (-2.4, -4.1, 0.7, 2.2), 7: (-2.6, -4.4, 1.5, 2.0), 8: (-2.5, -4.0, -0.1, -0.4),
    9: (-36.9, -26.9, -0.1, -0.2), 10: (-41.5, -30.3, -0.1, -1.8), 11: (-41.3, -29.8, -0.1, -0.2), 12: (-41.0, -28.3, 0.0, -2.1),
    13: (-10.0, -10.0, -32.1, -39.8), 14: (-7.4, -7.5, -18.8, -25.2), 15: (-7.4, -5.5, -14.7, -12.4), 16: (-9.0, -3.1, -15.3, -1.5),
    17: (-60.4, -23.2, -82.5, -27.6), 18: (-56.2, -17.2, -55.7, -1.9), 19: (-34.4, -11.4, -29.1, -2.6), 20: (-37.0, -15.0, -12.2, -1.9),
    21: (-26.2, -0.1, -9.0, 0.1), 22: (-17.8, -0.2, -2.5, 0.1), 23: (-16.6, -0.2, -2.1, 0.1), 24: (-17.7, -0.3, -2.3, -0.1),
    25: (-2.5, 0.1, 0.0, 0.2), 26: (-2.7, 0.0, 0.1, 0.1), 27: (-2.6, 0.0, 0.0, 0.2), 28: (-2.4, -0.2, -0.1, 0.2),
    29: (-0.7, -1.3, 0.9, -27.0), 30: (-0.1, -1.3, -2.2, -13.0), 31: (-0.1, -1.3, -1.7, -0.7), 32: (0.0, -0.8, 0.0, -0.3),
    33: (-0.9, -1.8, -0.7, -26.6), 34: (0.1, -0.7, -2.2, -13.0), 35: (0.3, -1.1, -0.1, 0.0), 36: (0.1, -0.3, 0.9, -0.3),
    37: (-57.0, -81.0, -62.2, -83.3), 38: (-50.2, -54.9, -57.6, -62.6), 39: (0.0, -10.6, -25.0, -60.3), 40: (-50.5, -4.5, -74.1, -33.0),
    41: (-4.0, -10.2, -31.6, -60.7), 42: (-2.8, -6.9, -42.9, -52.6), 43: (-26.3, -1.4, -41.2, -1.5), 44: (-45.0, -4.6, -70.5, -32.5),
    45: (-51.8, 6.2, -72.9, -17.3),
}
CLASSES = [
    ("seq-rd", "Sequential read"), ("rnd-rd", "Random read"), ("seq-wr", "Sequential write"),
    ("rnd-wr", "Random write"), ("files", "Metadata (files-cr/rd/del)"), ("macro", "Macro (file/mail/web server)"),
]


def wl_class(name):
    for key, _ in CLASSES[:5]:
        if name.startswith(key):
            return key
    return "macro"


def row_of(name):
    try:
        with open(os.path.join(HERE, "workloads", name + ".f")) as f:
            m = re.search(r"row (\d+)", f.read())
            return int(m.group(1)) if m else None
    except OSError:
        return None


def marker(diff):
    """The paper's classes: ‡ improved, † < 5 %, * 5-25 %, # 25-50 %, !! > 50 %."""
    if diff is None:
        return ""
    if diff >= 0:
        return "‡"
    d = -diff
    if d < 5:
        return "†"
    if d < 25:
        return "*"
    if d < 50:
        return "#"
    return "!!"


DAEMONS = ["xvirtiofsd", "xvirtiofsd-mq", "virtiofsd"]


def daemon_cpu(rep_dir):
    """{workload: daemon CPU seconds of its measured run} from REP.daemon-cpu."""
    spans, start = {}, {}
    try:
        with open(rep_dir + ".daemon-cpu") as f:
            lines = f.read().splitlines()
    except OSError:
        return spans
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[2] == "-":
            continue
        kind, name, secs = parts[0], parts[1], float(parts[2])
        if kind == "start":
            start[name] = secs
        elif kind == "end" and name in start:
            spans[name] = secs - start.pop(name)
    return spans


def good_summary(doc):
    """The last run's summary of an xfilebench JSON document, or None and
    why not (an error, or no run)."""
    runs = doc.get("runs") or []
    if doc.get("error") or not runs or any(r.get("error") for r in runs):
        return None, doc.get("error") or "no run / run error"
    return runs[-1]["summary"], None


def load(raw):
    """{workload: {config: [(ops_per_s, path), ...]}} from error-free JSONs, and
    {workload: {config: [(daemon CPU s per 1,000 ops, path), ...]}}, from the
    raw/ directory RAW; paths are relative to its parent ("raw/...")."""
    data, cpu, rejected = {}, {}, []
    base = os.path.dirname(raw)
    for cfg in sorted(os.listdir(raw)) if os.path.isdir(raw) else []:
        cdir = os.path.join(raw, cfg)
        for rep in sorted(os.listdir(cdir)):
            rdir = os.path.join(cdir, rep)
            if not os.path.isdir(rdir) or rep.endswith(".vm"):
                continue
            spans = daemon_cpu(rdir) if cfg in DAEMONS else {}
            for fn in sorted(os.listdir(rdir)):
                if not fn.endswith(".json"):
                    continue
                path = os.path.join(rdir, fn)
                try:
                    with open(path) as f:
                        doc = json.load(f)
                except (OSError, ValueError) as e:
                    rejected.append((os.path.relpath(path, base), f"unreadable: {e}"))
                    continue
                summary, why = good_summary(doc)
                if summary is None:
                    rejected.append((os.path.relpath(path, base), why))
                    continue
                rel = os.path.relpath(path, base)
                data.setdefault(fn[:-5], {}).setdefault(cfg, []).append((summary["ops_per_s"], rel))
                secs = spans.get(fn[:-5])
                if secs is not None and summary.get("ops"):
                    cpu.setdefault(fn[:-5], {}).setdefault(cfg, []).append(
                        (secs / summary["ops"] * 1000.0, rel))
    return data, cpu, rejected


def stats(samples):
    if not samples:
        return None
    v = [s[0] for s in samples]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v), "sources": [s[1] for s in samples]}


def pct(a, b):
    if a is None or b is None or b["median"] == 0:
        return None
    return (a["median"] / b["median"] - 1.0) * 100.0


def fmt_ops(s):
    if s is None:
        return "n/a"
    m = s["median"]
    txt = f"{m:,.0f}" if m >= 100 else f"{m:,.1f}"
    return txt


def fmt_cpu(s):
    return "n/a" if s is None else f"{s['median']:.4f}"


def ratio(a, b):
    if a is None or b is None or b["median"] == 0:
        return None
    return a["median"] / b["median"]


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return statistics.geometric_mean(values)


def cpu_section(order, cpu_table, report):
    """The daemon-CPU table and its summary line (empty without samples)."""
    shown = [c for c in DAEMONS if any(cpu_table[n].get(c) for n in order)]
    if not shown:
        return []
    out = ["## Daemon CPU per 1,000 operations", "",
           "CPU seconds of the daemon (all threads of its processes: run time in ns from /proc/PID/task/*/schedstat) during each",
           "measured run, per 1,000 Filebench operations of that run (median of the repetitions).",
           "It measures the daemon's own cost, whatever the guest's speed; lower is better.", "",
           "| # | Workload | " + " | ".join(LABEL[c] for c in shown) + " | xvirtiofsd ÷ virtiofsd |"
           + (" 2q+poll ÷ virtiofsd |" if "xvirtiofsd-mq" in shown else ""),
           "|" + "---|" * (3 + len(shown) + ("xvirtiofsd-mq" in shown))]
    ratios, ratios_mq = [], []
    for n in order:
        t = cpu_table[n]
        r = ratio(t.get("xvirtiofsd"), t.get("virtiofsd"))
        r_mq = ratio(t.get("xvirtiofsd-mq"), t.get("virtiofsd"))
        ratios.append(r)
        ratios_mq.append(r_mq)
        line = (f"| {row_of(n) or ''} | {n} | " + " | ".join(fmt_cpu(t.get(c)) for c in shown)
                + f" | {'n/a' if r is None else f'{r:.2f}'} |")
        if "xvirtiofsd-mq" in shown:
            line += f" {'n/a' if r_mq is None else f'{r_mq:.2f}'} |"
        out.append(line)
        report["workloads"].setdefault(n, {})["daemon_cpu_s_per_1k_ops"] = t
    g, g_mq = geomean(ratios), geomean(ratios_mq)
    report["daemon_cpu_geomean_vs_virtiofsd"] = {"xvirtiofsd": g, "xvirtiofsd-mq": g_mq}
    summary = "Daemon CPU per operation, geometric mean against virtiofsd: "
    summary += "n/a" if g is None else f"xvirtiofsd {g:.2f}×"
    if g_mq is not None:
        summary += f", xvirtiofsd 2q+poll {g_mq:.2f}×"
    summary += f" (over {sum(r is not None for r in ratios)} workloads; below 1 is cheaper)."
    return out + ["", summary, ""]


def fmt_pct(d):
    return "n/a" if d is None else f"{d:+.1f} {marker(d)}"


def plots(results, table, order):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib missing, no plots", file=sys.stderr)
        return []
    made = []
    present = {c for n in order for c, s in table[n].items() if s is not None}
    shown = [c for c in ["xvirtiofsd", "xvirtiofsd-mq", "virtiofsd", "guest-tmpfs"] if c in present]
    for key, title in CLASSES:
        names = [n for n in order if wl_class(n) == key and table[n].get("host")]
        if not names:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) + 2), 4.5))
        width = 0.8 / max(1, len(shown))
        for i, cfg in enumerate(shown):
            xs, ys, lo, hi = [], [], [], []
            for j, n in enumerate(names):
                s, h = table[n].get(cfg), table[n]["host"]
                if s is None:
                    continue
                xs.append(j + (i - (len(shown) - 1) / 2) * width)
                ys.append(s["median"] / h["median"])
                lo.append(max(0.0, (s["median"] - s["min"]) / h["median"]))
                hi.append(max(0.0, (s["max"] - s["median"]) / h["median"]))
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=LABEL[cfg], color=COLORS[cfg])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("ops/s / host native (median, min-max; log)")
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fn = f"class-{key}.png"
        fig.savefig(os.path.join(results, fn), dpi=110)
        plt.close(fig)
        made.append((title, fn))
    names = [n for n in order if table[n].get("host")]
    if names:
        fig, ax = plt.subplots(figsize=(8, max(4, 0.28 * len(names) + 1.5)))
        ys = range(len(names))
        daemons = [c for c in ["xvirtiofsd", "xvirtiofsd-mq", "virtiofsd"] if c in present]
        h = 0.8 / max(1, len(daemons))
        for i, cfg in enumerate(daemons):
            vals = [(table[n][cfg]["median"] / table[n]["host"]["median"]) if table[n].get(cfg) else 0 for n in names]
            ax.barh([y + (i - (len(daemons) - 1) / 2) * h for y in ys], vals, h, label=LABEL[cfg], color=COLORS[cfg])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("ops/s relative to host native (log scale)")
        ax.set_title("All workloads: virtio-fs daemons against host native")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(results, "overall-ratio.png"), dpi=110)
        plt.close(fig)
        made.append(("Overall ratio", "overall-ratio.png"))
    return made


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    with raw_dir(results) as raw:
        data, cpu, rejected = load(raw)
    order = sorted(data, key=lambda n: (row_of(n) or 999, n))
    table = {n: {c: stats(data[n].get(c, [])) for c in CONFIGS} for n in order}
    cpu_table = {n: {c: stats(cpu.get(n, {}).get(c, [])) for c in DAEMONS} for n in order}
    env = ""
    if os.path.exists(os.path.join(results, "env.txt")):
        with open(os.path.join(results, "env.txt")) as f:
            env = f.read()
    out = ["# Filebench suite through virtio-fs", ""]
    out += ["Throughput in ops/s (median of the repetitions; min-max in report.json), Filebench's",
            "`IO Summary` ops/s of each run. Differences are against host native (the same runner on",
            "the host, on the shared directory's disk) and against upstream virtiofsd; negative is",
            "worse. Classes as in the paper: ‡ improved, † < 5 %, * 5-25 %, # 25-50 %, !! > 50 %.",
            "The paper columns are Stackfs against Ext4 (Table 6, SSD, SBase / SOpt): FUSE on real",
            "hardware, for reference only (our guest runs under the accelerator below, at the",
            "\"here\" scale).", ""]
    out += ["## Environment", "", "```", env.strip() or "(no env.txt)", "```", ""]
    # The multi-queue configuration gets its columns after the paper's, so the
    # first ones keep their places whichever configurations ran.
    mq = any(table[n].get("xvirtiofsd-mq") for n in order)
    hdr = ("| # | Workload | host native | xvirtiofsd | virtiofsd | guest tmpfs | xvirtiofsd vs native |"
           " virtiofsd vs native | xvirtiofsd vs virtiofsd | paper SSD SBase | paper SSD SOpt |")
    ncols = 11
    if mq:
        hdr += " xvirtiofsd 2q+poll | 2q+poll vs native | 2q+poll vs virtiofsd |"
        ncols += 3
    out += ["## Throughput", "", hdr, "|" + "---|" * ncols]
    report = {"workloads": {}, "rejected": [{"path": p, "why": w} for p, w in rejected]}
    counts = {}
    for n in order:
        t = table[n]
        row = row_of(n)
        d_x = pct(t["xvirtiofsd"], t["host"])
        d_v = pct(t["virtiofsd"], t["host"])
        d_xv = pct(t["xvirtiofsd"], t["virtiofsd"])
        paper = PAPER.get(row)
        counts[marker(d_x)] = counts.get(marker(d_x), 0) + 1
        d_mq = pct(t["xvirtiofsd-mq"], t["host"])
        d_mqv = pct(t["xvirtiofsd-mq"], t["virtiofsd"])
        line = (
            f"| {row or ''} | {n} | {fmt_ops(t['host'])} | {fmt_ops(t['xvirtiofsd'])} | {fmt_ops(t['virtiofsd'])} |"
            f" {fmt_ops(t['guest-tmpfs'])} | {fmt_pct(d_x)} | {fmt_pct(d_v)} | {fmt_pct(d_xv)} |"
            f" {fmt_pct(paper[2]) if paper else 'n/a'} | {fmt_pct(paper[3]) if paper else 'n/a'} |")
        if mq:
            line += f" {fmt_ops(t['xvirtiofsd-mq'])} | {fmt_pct(d_mq)} | {fmt_pct(d_mqv)} |"
        out.append(line)
        report["workloads"][n] = {
            "row": row, "configs": t,
            "xvirtiofsd_vs_native_pct": d_x, "virtiofsd_vs_native_pct": d_v, "xvirtiofsd_vs_virtiofsd_pct": d_xv,
            "xvirtiofsd_mq_vs_native_pct": d_mq, "xvirtiofsd_mq_vs_virtiofsd_pct": d_mqv,
            "paper_stackfs_pct": dict(zip(["hdd_sbase", "hdd_sopt", "ssd_sbase", "ssd_sopt"], paper)) if paper else None,
        }
    out += ["", "xvirtiofsd against host native, by class: " +
            ", ".join(f"{k or 'n/a'} {v}" for k, v in sorted(counts.items())), ""]
    out += cpu_section(order, cpu_table, report)
    if rejected:
        out += ["## Results left out (error or unreadable)", ""]
        out += [f"- `{p}`: {w}" for p, w in rejected]
        out.append("")
    made = plots(results, table, order)
    if made:
        out += ["## Plots", ""]
        out += [f"![{t}]({fn})" for t, fn in made]
        out.append("")
    with open(os.path.join(results, "report.md"), "w") as f:
        f.write("\n".join(out))
    with open(os.path.join(results, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("\n".join(out[out.index("## Throughput"):]))


if __name__ == "__main__":
    main()
