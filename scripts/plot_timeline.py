#!/usr/bin/python3
"""One training step of an `mpcomm train --trace FILE` timeline as a PNG.

    plot_timeline.py TRACE OUT.png [--step K] [--title TEXT]

Rows: per rank, its compute (forward, backward, optimizer) and one row per kind of traffic (the tracks
named tp, pp, dp, world, ...); bars where each was busy. Step K (default: the last) is the window from the
earliest start of that step on any rank to its latest end. A pipeline bubble is the gap in a stage's
compute row; a tensor-parallel all-reduce that compute waits for shows as a tp bar with no compute beside
it; data-parallel buckets that overlap the backward show as dp bars under backward bars."""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COMPUTE = {"forward": "#4c72b0", "backward": "#dd8452", "optimizer": "#8c8c8c"}
TRAFFIC = {"tp": "#c44e52", "pp": "#55a868", "dp": "#8172b2", "world": "#937860", "ep": "#da8bc3"}


def load(path):
    events = json.load(open(path))["traceEvents"]
    threads, spans = {}, []
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans.append(e)
    return threads, spans


def track_of(name):
    """'tp [ranks 0,1] (2)' -> 'tp': a track's lanes and group suffix fold into one row."""
    return re.sub(r" \(\d+\)$", "", name).split(" [")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=-1)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    threads, spans = load(a.trace)
    steps = {}
    for e in spans:
        if e["name"] == "step" and e.get("cat") == "compute":
            steps.setdefault(e["pid"], []).append(e)
    if not steps:
        raise SystemExit(f"{a.trace}: no step spans (was it written by mpcomm train --trace?)")
    for v in steps.values():
        v.sort(key=lambda e: e["ts"])
    n = min(len(v) for v in steps.values())
    k = a.step if a.step >= 0 else n - 1
    if k >= n:
        raise SystemExit(f"{a.trace}: step {k} asked, {n} recorded")
    t0 = min(v[k]["ts"] for v in steps.values())
    t1 = max(v[k]["ts"] + v[k]["dur"] for v in steps.values())

    rows = []  # (label, [(start, width, color)])
    for pid in sorted(steps):
        mine = [e for e in spans if e["pid"] == pid and e["ts"] < t1 and e["ts"] + e["dur"] > t0]
        compute = [(e["ts"], e["dur"], COMPUTE[e["name"]]) for e in mine
                   if e.get("cat") == "compute" and e["name"] in COMPUTE]
        rows.append((f"rank {pid} compute", compute))
        by_track = {}
        for e in mine:
            if e.get("cat") != "comm":
                continue
            t = track_of(threads.get((pid, e["tid"]), "?"))
            by_track.setdefault(t, []).append((e["ts"], e["dur"], TRAFFIC.get(t, "#64b5cd")))
        for t in sorted(by_track, key=lambda t: list(TRAFFIC).index(t) if t in TRAFFIC else 99):
            rows.append((f"rank {pid} {t}", by_track[t]))

    fig, ax = plt.subplots(figsize=(12, 0.32 * len(rows) + 1.4))
    for i, (_, bars) in enumerate(rows):
        y = len(rows) - 1 - i
        ax.broken_barh([((s - t0) / 1e3, max(w / 1e3, 0.004)) for s, w, _ in bars], (y - 0.4, 0.8),
                       facecolors=[c for _, _, c in bars], linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=7)
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.set_xlabel("ms since the step began")
    ax.set_title(a.title or f"step {k} of {a.trace}", fontsize=10)
    used = {c for _, bars in rows for _, _, c in bars}
    legend = [Patch(color=c, label=n) for n, c in {**COMPUTE, **TRAFFIC}.items() if c in used]
    ax.legend(handles=legend, loc="upper right", fontsize=7, ncol=len(legend))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(a.out)


if __name__ == "__main__":
    main()
