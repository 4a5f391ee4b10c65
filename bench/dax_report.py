# SPDX-License-Identifier: Apache-2.0
"""report.md and plot.png of a bench/bench-dax.sh run (RESULT_DIR).

usage: python3 bench/dax_report.py RESULT_DIR

Per fio job and configuration: the median over repetitions of the
bandwidth (MiB/s) and IOPS, and DAX's ratio to each page-cache mode
(above 1: DAX is faster); the daemon's CPU time per operation over each
boot; the memory the host had in use once two guests had read the same
file, with and without DAX; per Filebench personality, the median ops/s
of each configuration, DAX's ratios and the maps the daemon made.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from raw_archive import raw_dir  # noqa: E402
from report import good_summary  # noqa: E402

CONFIGS = ["dax", "cache-auto", "cache-always"]


def fio_result(path):
    """(MiB/s, IOPS, operations) of one fio JSON output, or None."""
    try:
        with open(path) as f:
            text = f.read()
        data = json.loads(text[text.index("{"):])
        job = data["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    side = job["read"] if job["read"]["io_bytes"] > 0 else job["write"]
    return side["bw"] / 1024.0, side["iops"], side["total_ios"]


def collect(raw):
    """{job: {config: [(MiB/s, IOPS)]}}, {config: [CPU µs per operation]}."""
    runs, cpu = {}, {}
    for cfg in CONFIGS:
        base = os.path.join(raw, cfg)
        if not os.path.isdir(base):
            continue
        for rep in sorted(os.listdir(base)):
            d = os.path.join(base, rep)
            ops = 0
            for name in sorted(os.listdir(d)):
                if not name.endswith(".json"):
                    continue
                r = fio_result(os.path.join(d, name))
                if r is None:
                    continue
                runs.setdefault(name[:-5], {}).setdefault(cfg, []).append(r[:2])
                ops += r[2]
            try:
                with open(os.path.join(d, "daemon-cpu")) as f:
                    start, end = (float(x) for x in f.read().split())
                if ops:
                    cpu.setdefault(cfg, []).append((end - start) / ops * 1e6)
            except (OSError, ValueError):
                pass
    return runs, cpu


def filebench(raw):
    """{personality: {config: [ops/s]}}, {config: [maps per boot]}."""
    ops, maps = {}, {}
    base = os.path.join(raw, "filebench")
    for cfg in CONFIGS:
        cdir = os.path.join(base, cfg)
        for rep in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
            d = os.path.join(cdir, rep)
            for name in sorted(os.listdir(d)):
                if not name.endswith(".json") or name == "metrics.json":
                    continue
                try:
                    with open(os.path.join(d, name)) as f:
                        doc = json.load(f)
                    summary, _ = good_summary(doc)
                    if summary is None:
                        continue
                    ops.setdefault(name[:-5], {}).setdefault(cfg, []).append(summary["ops_per_s"])
                except (OSError, ValueError, KeyError):
                    continue
            try:
                with open(os.path.join(d, "metrics.json")) as f:
                    maps.setdefault(cfg, []).append(json.load(f).get("dax", {}).get("maps", 0))
            except (OSError, ValueError):
                pass
    return ops, maps


def memory(raw):
    """{mode: MiB more in use once both guests had read the file}."""
    out = {}
    for mode in ("no-dax", "dax"):
        try:
            with open(os.path.join(raw, f"memory-{mode}", "used-kib")) as f:
                before, after = (int(x) for x in f.read().split())
            out[mode] = (after - before) / 1024.0
        except (OSError, ValueError):
            pass
    return out


def med(values, i):
    return statistics.median(v[i] for v in values) if values else None


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def filebench_lines(fb_ops, fb_maps):
    if not fb_ops:
        return []
    lines = [
        "",
        "Filebench personalities (xfilebench in the guest, scale \"here\": one 64 MiB file),",
        "median ops/s; ratios above 1: DAX is faster:",
        "",
        "| personality | dax | cache=auto | cache=always | dax ÷ auto | dax ÷ always |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(fb_ops):
        v = {c: (statistics.median(fb_ops[name][c]) if fb_ops[name].get(c) else None) for c in CONFIGS}
        lines.append(
            f"| {name} | {fmt(v['dax'], 0)} | {fmt(v['cache-auto'], 0)} | {fmt(v['cache-always'], 0)} "
            f"| {fmt(ratio(v['dax'], v['cache-auto']), 2)} | {fmt(ratio(v['dax'], v['cache-always']), 2)} |"
        )
    if fb_maps.get("dax"):
        lines += ["", f"DAX maps the daemon made per boot: {', '.join(str(m) for m in fb_maps['dax'])}."]
    return lines


def report(result_dir, runs, cpu, mem, fb=({}, {})):
    env = ""
    try:
        with open(os.path.join(result_dir, "env.txt")) as f:
            env = f.read()
    except OSError:
        pass
    lines = ["# DAX against the page cache (bench/bench-dax.sh)", "", "```", env.strip(), "```", ""]
    lines += [
        "Medians over the repetitions. Ratios above 1: DAX is faster. Under TCG the guest's",
        "own CPU time dominates; compare the configurations by ratio, within this run.",
        "",
        "| job | dax MiB/s | cache=auto MiB/s | cache=always MiB/s | dax ÷ auto | dax ÷ always |",
        "|---|---|---|---|---|---|",
    ]
    for job in sorted(runs):
        bw = {c: med(runs[job].get(c, []), 0) for c in CONFIGS}
        lines.append(
            f"| {job} | {fmt(bw['dax'])} | {fmt(bw['cache-auto'])} | {fmt(bw['cache-always'])} "
            f"| {fmt(ratio(bw['dax'], bw['cache-auto']), 2)} | {fmt(ratio(bw['dax'], bw['cache-always']), 2)} |"
        )
    lines += ["", "Daemon CPU time per fio operation over each boot (µs, median):", ""]
    lines += ["| configuration | µs per operation |", "|---|---|"]
    for c in CONFIGS:
        if c in cpu:
            lines.append(f"| {c} | {fmt(statistics.median(cpu[c]), 2)} |")
    if mem:
        lines += [
            "",
            "Two guests read the same file: host memory in use (MemTotal − MemFree, page",
            "cache included) once both had read it, against before they started (both guests'",
            "boot included, the same in both rows):",
            "",
            "| mode | MiB more in use |",
            "|---|---|",
        ]
        for mode, mib in mem.items():
            lines.append(f"| {mode} | {mib:.0f} |")
    lines += filebench_lines(*fb)
    return "\n".join(lines) + "\n"


def plot(result_dir, runs):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    jobs = sorted(runs)
    if not jobs:
        return False
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.38
    for k, (other, label) in enumerate((("cache-auto", "dax ÷ cache=auto"), ("cache-always", "dax ÷ cache=always"))):
        vals = []
        for j in jobs:
            r = ratio(med(runs[j].get("dax", []), 0), med(runs[j].get(other, []), 0))
            vals.append(r if r is not None else 0)
        ax.bar([i + (k - 0.5) * width for i in range(len(jobs))], vals, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(jobs)))
    ax.set_xticklabels(jobs, rotation=30, ha="right")
    ax.set_ylabel("bandwidth ratio (median)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("DAX window against the page cache, same QEMU 11.1 guest")
    fig.tight_layout()
    fig.savefig(os.path.join(result_dir, "plot.png"), dpi=110)
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    result_dir = sys.argv[1]
    with raw_dir(result_dir) as raw:
        runs, cpu = collect(raw)
        mem = memory(raw)
        fb = filebench(raw)
    text = report(result_dir, runs, cpu, mem, fb)
    if plot(result_dir, runs):
        text += "\n![ratios](plot.png)\n"
    with open(os.path.join(result_dir, "report.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
