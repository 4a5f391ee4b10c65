#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Turns a bench-daemon result directory (raw/*.json from loadgen, meta.txt)
into report.md (median per case and variant, ratios against virtiofsd and
native system calls, the issue's targets with PASS/MISS) and plot.png. The
JSON files are read from RESULT_DIR/raw/ or, when there is none, from
RESULT_DIR/raw.tar.xz (as bench-daemon.sh leaves them).

Usage: daemon_report.py RESULT_DIR

The figures are measurements, not tests: MISS does not fail anything.
"""

import glob
import json
import os
import re
import statistics
import sys

from raw_archive import raw_dir

CASE_ORDER = [
    "read4k-qd1",
    "read4k-qd2",
    "read4k-qd4",
    "read4k-qd8",
    "read4k-qd16",
    "read4k-qd64",
    "read1m",
    "write1m",
    "getattr",
    "lookup",
    "create",
    "readdirplus",
    "read4k-2thr",
    "getattr-2thr",
    "read4k-qd1-pollwait",
]

# The figure a case is judged by in the ratio columns.
BYTES_CASES = {"read1m", "write1m"}
# Client threads of the scaling table (cases scaling-c<N>).
SCALING_CLIENTS = [1, 2, 4]


def load(raw):
    runs = {}
    for path in sorted(glob.glob(os.path.join(raw, "*.json"))):
        name = os.path.basename(path)[: -len(".json")]
        case, variant, rep = name.split("__")
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        run["_rep"] = int(rep.lstrip("r"))
        runs.setdefault((case, variant), []).append(run)
    return runs


def meta(result_dir):
    out = {"note": []}
    path = os.path.join(result_dir, "meta.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                if k == "note":
                    out["note"].append(v)
                else:
                    out[k] = v
    return out


def med(runs, key, sub=None):
    vals = []
    for r in runs:
        v = r.get(key)
        if sub is not None and isinstance(v, dict):
            v = v.get(sub)
        if isinstance(v, (int, float)):
            vals.append(float(v))
    return statistics.median(vals) if vals else None


def cpu_per_request(runs):
    """Median over runs of the daemon's CPU µs per request (None without data)."""
    vals = [v for v in map(run_cpu_req, runs) if v is not None]
    return statistics.median(vals) if vals else None


def run_cpu_req(r):
    """One run's daemon CPU µs per request (None without data)."""
    cpu = (r.get("cpu_s") or {}).get("daemon")
    req = r.get("requests")
    if isinstance(cpu, (int, float)) and isinstance(req, (int, float)) and req > 0:
        return cpu / req * 1e6
    return None


def summarise(runs):
    s = {}
    for (case, variant), rs in runs.items():
        s[(case, variant)] = {
            "runs": rs,
            "n": len(rs),
            "ops": med(rs, "ops_per_s"),
            "ops_min": min(r["ops_per_s"] for r in rs),
            "ops_max": max(r["ops_per_s"] for r in rs),
            "gbs": med(rs, "gb_per_s"),
            "p50": med(rs, "latency_us", "p50"),
            "p99": med(rs, "latency_us", "p99"),
            "p999": med(rs, "latency_us", "p99_9"),
            "cpu_d": med(rs, "cpu_s", "daemon"),
            "cpu_c": med(rs, "cpu_s", "client"),
            "cpu_o": med(rs, "cpu_s", "other"),
            "cpu_req": cpu_per_request(rs),
            "window": med(rs, "window_s"),
            "command": (rs[0].get("daemon") or {}).get("command"),
        }
    return s


def fmt(v, digits=1):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def variant_base(v):
    """The daemon variant without its -<Q>q<T>t / -<Q>q suffix."""
    return re.sub(r"-\d+q(\d+t)?$", "", v)


def variant_key(v):
    order = [
        "xv-never",
        "xv-adaptive",
        "xv",
        "before-never",
        "before-adaptive",
        "virtiofsd",
        "virtiofsd-aa",
        "native",
    ]
    base = variant_base(v)
    pool = re.match(r"virtiofsd-pool(\d+)$", base)
    if pool:
        return (order.index("virtiofsd"), int(pool.group(1)), v)
    queues = re.search(r"-(\d+)q", v)
    return (order.index(base) if base in order else 9, int(queues.group(1)) if queues else 0, v)


def ours(variant):
    return variant.startswith("xv")


def compared(variant):
    """Rows that get ratios against virtiofsd: ours and the A/A control."""
    return ours(variant) or variant_base(variant) == "virtiofsd-aa"


def rep_ratios(e, base, key):
    """Per-repetition ratios of entry e to entry base, pairing runs of the
    same repetition; key is "ops", "gbs" or "cpu_req"."""
    pick = {
        "ops": lambda r: r.get("ops_per_s"),
        "gbs": lambda r: r.get("gb_per_s"),
        "cpu_req": run_cpu_req,
    }[key]
    theirs = {r["_rep"]: pick(r) for r in base["runs"]}
    out = []
    for r in e["runs"]:
        a, b = pick(r), theirs.get(r["_rep"])
        if a is not None and b:
            out.append(a / b)
    return out


def span(vals):
    return f"{min(vals):.2f}–{max(vals):.2f}" if vals else "–"


def baseline_variant(s, case, prefix):
    """The name of a case's virtiofsd (1 queue, same client threads, no
    thread pool) or native variant."""
    return next((v for (c, v) in s if c == case and variant_base(v) == prefix), None)


def baseline(s, case, prefix):
    """The entry of baseline_variant()."""
    v = baseline_variant(s, case, prefix)
    return s[(case, v)] if v else None


def case_table(s, case):
    rows = sorted((v for (c, v) in s if c == case), key=variant_key)
    if not rows:
        return []
    judge_bytes = case in BYTES_CASES
    vfd = baseline(s, case, "virtiofsd")
    nat = baseline(s, case, "native")
    unit = "GB/s" if judge_bytes else "ops/s"
    out = [
        f"### {case}",
        "",
        f"| variant | ops/s | GB/s | p50 µs | p99 µs | p99.9 µs | daemon CPU s | daemon CPU µs/req | "
        f"other CPU s | ÷ virtiofsd ({unit}) | per rep | ÷ virtiofsd (p50) | "
        f"÷ virtiofsd (CPU/req) | ÷ native ({unit}) | ÷ native (p50) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in rows:
        e = s[(case, v)]
        key = "gbs" if judge_bytes else "ops"
        cmp = bool(vfd) and compared(v)
        r_v = ratio(e[key], vfd[key]) if cmp else None
        per = span(rep_ratios(e, vfd, key)) if cmp else "–"
        l_v = ratio(e["p50"], vfd["p50"]) if cmp else None
        c_v = ratio(e["cpu_req"], vfd["cpu_req"]) if cmp else None
        r_n = ratio(e[key], nat[key]) if nat and v != "native" else None
        l_n = ratio(e["p50"], nat["p50"]) if nat and v != "native" else None
        out.append(
            f"| {v} | {fmt(e['ops'], 0)} | {fmt(e['gbs'], 3)} | {fmt(e['p50'])} | "
            f"{fmt(e['p99'])} | {fmt(e['p999'])} | {fmt(e['cpu_d'], 2)} | {fmt(e['cpu_req'], 2)} | "
            f"{fmt(e['cpu_o'], 2)} | {fmt(r_v, 2)} | {per} | {fmt(l_v, 2)} | {fmt(c_v, 2)} | "
            f"{fmt(r_n, 3)} | {fmt(l_n, 1)} |"
        )
    out.append("")
    return out


def targets(s):
    lines = [
        "| target | variant | measured | goal | |",
        "|---|---|---:|---|---|",
    ]

    def row(name, variant, value, goal, ok):
        verdict = "–" if value is None else ("PASS" if ok(value) else "MISS")
        lines.append(f"| {name} | {variant} | {fmt(value, 2)} | {goal} | {verdict} |")

    xv1 = sorted({v for (c, v) in s if ours(v) and v.endswith("-1q1t")}, key=variant_key)
    for case, what in (("read4k-qd1", "event wait"), ("read4k-qd1-pollwait", "poll wait")):
        vfd = baseline(s, case, "virtiofsd")
        nat = baseline(s, "read4k-qd1", "native")
        for v in xv1:
            e = s.get((case, v))
            if not e:
                continue
            row(
                f"4K READ qd1 p50 ÷ virtiofsd ({what})",
                v,
                ratio(e["p50"], vfd["p50"]) if vfd else None,
                "≤ 0.5",
                lambda x: x <= 0.5,
            )
            row(
                f"4K READ qd1 p50 ÷ host pread ({what})",
                v,
                ratio(e["p50"], nat["p50"]) if nat else None,
                "≤ 4",
                lambda x: x <= 4,
            )
    for case in ("getattr", "lookup"):
        vfd = baseline(s, case, "virtiofsd")
        for v in xv1:
            e = s.get((case, v))
            if e:
                row(
                    f"{case.upper()} ops/s ÷ virtiofsd",
                    v,
                    ratio(e["ops"], vfd["ops"]) if vfd else None,
                    "≥ 2",
                    lambda x: x >= 2,
                )
    for case in ("read4k-2thr", "getattr-2thr"):
        for v in sorted({v for (c, v) in s if c == case and ours(v)}, key=variant_key):
            if not v.endswith("-2q1t"):
                continue
            base = v[: -len("-2q1t")]
            two = s[(case, v)]
            one = s.get((case, base + "-1q2t"))
            row(
                f"{case}: 2 queues ÷ 1 queue (2 client threads)",
                base,
                ratio(two["ops"], one["ops"]) if one else None,
                "≥ 1.7",
                lambda x: x >= 1.7,
            )
    vfd = baseline(s, "read1m", "virtiofsd")
    for v in xv1:
        e = s.get(("read1m", v))
        if e:
            row(
                "1 MiB READ GB/s ÷ virtiofsd",
                v,
                ratio(e["gbs"], vfd["gbs"]) if vfd else None,
                "≥ 1",
                lambda x: x >= 1,
            )
    return lines


def ratios_to(e, base, key):
    """Throughput (key: "ops" or "gbs") and CPU-per-request ratios of entry
    e to entry base; (None, None) when e did not run."""
    if not e:
        return None, None
    return ratio(e[key], base[key]), ratio(e["cpu_req"], base["cpu_req"])


def parity_table(s):
    """Each case's single-queue variants against virtiofsd (ops/s, GB/s for
    the 1 MiB cases; CPU per request), beside the A/A control, and a summary
    of the ratios that fall short of the goals."""
    # Throughput must reach virtiofsd's; CPU per request may reach this multiple of it.
    cpu_goals = {"xv-never": 1.0, "xv-adaptive": 1.5}
    out = [
        "## Against virtiofsd, case by case",
        "",
        "Medians over repetitions, same queue count and client threads as virtiofsd; "
        "goals: throughput ≥ 1.00 in both modes, CPU per request ≤ 1.00 with polling off "
        "and ≤ 1.50 with adaptive polling; a figure in bold misses its goal. "
        "`virtiofsd-aa` is virtiofsd measured a second time in every repetition (first in "
        "the case, where virtiofsd runs last but one): its ratios are two identical "
        "back-ends apart, i.e. what this host's noise alone produces.",
        "",
        "| case | polling off | CPU/req | adaptive | CPU/req | A/A | A/A CPU/req |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    misses = {v: [] for v in cpu_goals}
    counts = {v: [0, 0] for v in cpu_goals}
    aa = {"tput": [], "cpu": []}
    cases = [c for c in CASE_ORDER if any(k[0] == c for k in s)]
    for case in cases:
        base = baseline_variant(s, case, "virtiofsd")
        if base is None:
            continue
        vfd = s[(case, base)]
        suffix = base[len("virtiofsd") :]
        key = "gbs" if case in BYTES_CASES else "ops"
        cells = []
        for v, cpu_goal in cpu_goals.items():
            t, c = ratios_to(s.get((case, v + suffix)), vfd, key)
            for what, x in (("throughput", t), ("CPU/req", c)):
                if x is None:
                    cells.append("–")
                    continue
                counts[v][0] += 1
                if (x >= 1.0) if what == "throughput" else (x <= cpu_goal):
                    counts[v][1] += 1
                    cells.append(f"{x:.2f}")
                else:
                    misses[v].append(f"{case} {what} {x:.2f}")
                    cells.append(f"**{x:.2f}**")
        t, c = ratios_to(s.get((case, "virtiofsd-aa" + suffix)), vfd, key)
        # The spin-wait case flips between two modes by CPU placement alone:
        # its A/A pair says nothing of the event-wait cases' noise.
        if not case.endswith("-pollwait"):
            for name, x in (("tput", t), ("cpu", c)):
                if x is not None:
                    aa[name].append(x)
        cells += [fmt(t, 2), fmt(c, 2)]
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    out.append("")
    for v, label in (("xv-never", "Polling off"), ("xv-adaptive", "Adaptive polling")):
        n, ok = counts[v]
        if n == 0:
            continue
        miss = "; misses: " + ", ".join(misses[v]) if misses[v] else ""
        out.append(f"- {label}: {ok} of {n} ratios meet their goal{miss}.")
    if aa["tput"]:
        out.append(
            f"- A/A control (virtiofsd ÷ virtiofsd): throughput {span(aa['tput'])}, "
            f"CPU per request {span(aa['cpu'])} over the {len(aa['tput'])} cases whose "
            "clients wait for an interrupt"
            + (
                " (the -pollwait case's spinning client and the daemon flip between sharing "
                "a CPU and not, run by run: see its own row)."
                if any(c.endswith("-pollwait") for c in cases)
                else "."
            )
        )
    return out + [""]


def before_after_table(s, m):
    """With BENCH_BEFORE: each case's single-queue variants against the same
    variant of the earlier build, beside the A/A band of the same run."""
    if not any(variant_base(v).startswith("before-") for (_, v) in s):
        return []
    out = [
        "## Against the earlier build (BENCH_BEFORE)",
        "",
        f"This build ÷ `{m.get('before', '?')}`, same variant, same run, medians over "
        "repetitions (GB/s for the 1 MiB cases, ops/s otherwise; CPU per request). The "
        "A/A columns are virtiofsd ÷ virtiofsd in the same run: two identical back-ends "
        "this far apart are noise, so only a ratio below the A/A minimum says slower.",
        "",
        "| case | polling off | CPU/req | adaptive | CPU/req | A/A | A/A CPU/req |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    worse, aa_t = [], []
    rows = []
    for case in [c for c in CASE_ORDER if any(k[0] == c for k in s)]:
        base = baseline_variant(s, case, "virtiofsd")
        suffix = base[len("virtiofsd") :] if base else ""
        key = "gbs" if case in BYTES_CASES else "ops"
        cells = []
        for v in ("never", "adaptive"):
            after, before = s.get((case, f"xv-{v}{suffix}")), s.get((case, f"before-{v}{suffix}"))
            t, c = ratios_to(after, before, key) if before else (None, None)
            cells += [fmt(t, 2), fmt(c, 2)]
            rows.append((case, v, t))
        t, c = ratios_to(s.get((case, "virtiofsd-aa" + suffix)), s[(case, base)], key) if base else (None, None)
        if t is not None and not case.endswith("-pollwait"):
            aa_t.append(t)
        cells += [fmt(t, 2), fmt(c, 2)]
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    low = min(aa_t) if aa_t else 1.0
    for case, v, t in rows:
        if t is not None and t < low and not case.endswith("-pollwait"):
            worse.append(f"{case} ({v}) {t:.2f}")
    out.append("")
    out.append(
        f"- Below the A/A minimum ({low:.2f}): " + (", ".join(worse) if worse else "none") + "."
    )
    return out + [""]


def scaling_table(s, host):
    """4 KiB reads: ops/s and daemon CPU µs per request by variant (rows) and
    client threads (columns)."""
    cols = [n for n in SCALING_CLIENTS if any(c == f"scaling-c{n}" for (c, _) in s)]
    if not cols:
        return []
    variants = sorted({v for (c, v) in s if c.startswith("scaling-c")}, key=variant_key)
    out = [
        "## Scaling: request queues × client threads",
        "",
        f"4 KiB reads, one request in flight per client thread, on this machine ({host}): "
        "the clients and the daemon share these CPUs, so more threads than CPUs cannot add "
        "throughput. xvirtiofsd variants `-<Q>q` offer Q request queues with the clients spread "
        "round-robin over them (queues beyond the clients stay idle); virtiofsd has 1 queue, "
        "`virtiofsd-pool<P>` with `--thread-pool-size P`.",
        "",
        "| variant | " + " | ".join(f"{n} client(s) ops/s | µs CPU/req" for n in cols) + " |",
        "|---|" + "---:|---:|" * len(cols),
    ]
    for v in variants:
        cells = []
        for n in cols:
            e = s.get((f"scaling-c{n}", v))
            cells += [fmt(e["ops"], 0) if e else "–", fmt(e["cpu_req"], 2) if e else "–"]
        out.append(f"| {v} | " + " | ".join(cells) + " |")
    return out + [""]


def plot(s, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in CASE_ORDER if any(k[0] == c for k in s)]
    variants = sorted({v for (c, v) in s if c in cases}, key=variant_key)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(14, 9), sharex=True)
    width = 0.8 / max(len(variants), 1)
    for i, v in enumerate(variants):
        xs, tput, lo, hi, lat = [], [], [], [], []
        for j, c in enumerate(cases):
            e = s.get((c, v))
            vfd = baseline(s, c, "virtiofsd")
            if not e or not vfd or not vfd["ops"]:
                continue
            xs.append(j + (i - (len(variants) - 1) / 2) * width)
            r = e["ops"] / vfd["ops"]
            tput.append(r)
            lo.append(r - e["ops_min"] / vfd["ops"])
            hi.append(e["ops_max"] / vfd["ops"] - r)
            lat.append(e["p50"] or 0)
        if xs:
            ax1.bar(xs, tput, width, yerr=[lo, hi], capsize=2, label=v)
            ax2.bar(xs, lat, width, label=v)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_yscale("log")
    ax1.set_ylabel("ops/s ÷ virtiofsd (median, min–max)")
    ax1.legend(fontsize=8, ncol=4)
    ax1.set_title("vhost-user-fs back-ends under bench/loadgen (no VM)")
    ax2.set_yscale("log")
    ax2.set_ylabel("median latency µs")
    ax2.set_xticks(range(len(cases)))
    ax2.set_xticklabels(cases, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    with raw_dir(d) as raw:
        runs = load(raw)
    if not runs:
        sys.exit(f"no results under {d}/raw or in {d}/raw.tar.xz")
    s = summarise(runs)
    m = meta(d)
    # How idle CPUs wait (older reports did not record it).
    idle = [f"- idle CPUs: {m['idle']}"] if "idle" in m else []
    lines = [
        f"# bench-daemon {m.get('date', '')} ({m.get('rev', '')})",
        "",
        "Command: `make bench-daemon` (bench/bench-daemon.sh; loadgen plays VMM and guest driver, no VM).",
        "",
        f"- host: {m.get('host', '?')}",
        *idle,
        f"- runs: {m.get('reps', '?')} repetitions × {m.get('secs', '?')} s measured "
        f"(+{m.get('warmup', '?')} s warm-up); figures are medians over repetitions; "
        "within a case the variants run in one order in odd repetitions and in the reverse "
        "order in even ones, so that a drifting host favours none",
        f"- virtiofsd: {m.get('virtiofsd', '?')}",
        "- variants: `<daemon>-<Q>q<T>t` = Q request queues, T client threads per queue; "
        "client threads wait for replies on the call eventfd (as a guest takes an interrupt) "
        "unless the case name ends in -pollwait (spinning on the used index)",
        "- CPU columns: seconds of CPU in the measured window; 'other' is the host's busy time "
        "minus loadgen and the back-end (anything else that ran: compare rows with care when it is high); "
        "'daemon CPU µs/req' is the back-end's CPU time (all its threads) divided by the requests "
        "completed in the window",
        "- native: the same operations as host system calls (pread, fstat, fstatat, "
        "open/close/unlink, getdents64 + fstatat), one at a time per thread",
        "",
    ]
    if m["note"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in m["note"]] + [""]
    lines += ["## Targets (measurements, not tests)", ""] + targets(s) + [""]
    lines += parity_table(s)
    lines += before_after_table(s, m)
    lines += ["## Results", ""]
    others = {c for (c, _) in s if not c.startswith("scaling-c")} - set(CASE_ORDER)
    for c in CASE_ORDER + sorted(others):
        lines += case_table(s, c)
    lines += scaling_table(s, m.get("host", "?"))
    cmds = sorted({(variant_base(v), e["command"]) for (_, v), e in s.items() if e["command"]})
    lines += ["## Back-end command lines", ""]
    seen = set()
    for v, cmd in cmds:
        if v in seen:
            continue
        seen.add(v)
        lines.append(f"- {v}: `{cmd}`")
    lines.append("")
    lines.append("![plot](plot.png)")
    with open(os.path.join(d, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    plot(s, os.path.join(d, "plot.png"))


if __name__ == "__main__":
    main()
