#!/usr/bin/python3
"""Plots for `mpcomm compare --report DIR`: reads DIR/results.jsonl (one JSON object per measured row)
and DIR/marks.json (named message sizes of the model), writes DIR/<op>_<hosts>hosts_{time,busbw}.png:
time and bus bandwidth against message size, one line per backend, out-of-place rows."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(folder):
    rows = [json.loads(l) for l in open(os.path.join(folder, "results.jsonl")) if l.strip()]
    marks = {}
    if os.path.exists(os.path.join(folder, "marks.json")):
        marks = json.load(open(os.path.join(folder, "marks.json")))
    groups = {}
    for r in rows:
        if not r["inplace"]:
            groups.setdefault((r["op"], r["ranks"], r["hosts"]), []).append(r)
    written = []
    for (op, ranks, hosts), rs in sorted(groups.items()):
        for metric, label, log_y in (("time_us", "time per call (µs)", True), ("busbw_gbs", "bus bandwidth (GB/s)", False)):
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for backend in sorted({r["backend"] for r in rs}):
                pts = sorted((r["bytes"], r[metric]) for r in rs if r["backend"] == backend)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
            for name, size in marks.items():
                ax.axvline(size, color="grey", linestyle="--", linewidth=1)
                ax.annotate(name, (size, 0.95), xycoords=("data", "axes fraction"), rotation=90,
                            ha="right", va="top", fontsize=8, color="grey")
            ax.set_xscale("log", base=2)
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(label)
            ax.set_title(f"{op}, {ranks} ranks on {hosts} host(s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            fig.tight_layout()
            name = f"{op}_{ranks}ranks_{hosts}hosts_{'time' if metric == 'time_us' else 'busbw'}.png"
            fig.savefig(os.path.join(folder, name), dpi=110)
            plt.close(fig)
            written.append(name)
    print("plots:", ", ".join(written))


if __name__ == "__main__":
    main(sys.argv[1])
