"""results.json -> results.png. Runs in the 'plot' venv (matplotlib is no
dependency of leasequeue): python plot.py results.json results.png"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here
import matplotlib.pyplot as plt


def main(src: str, dst: str) -> None:
    with open(src) as f:
        results: dict[str, Any] = json.load(f)
    s = results["summary"]
    lq, ceil = s["leasequeue"], s["ceiling"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(20, 5.5))

    # 1. drain throughput against concurrency (jobs run at once)
    xs = [1, 10, 100]
    ys = [lq[f"drain_c{c}"]["value"] for c in xs]
    ax1.plot(xs, ys, "o-", color="C0", lw=2, label="leasequeue, 1 process")
    if lq["drain_2proc"]["value"]:
        ax1.plot([200], [lq["drain_2proc"]["value"]], "s", color="C0", ms=9,
                 label="leasequeue, 2 processes × 100")
    for i, (name, p) in enumerate(s["peers"].items()):
        v, c = p["drain"]["value"], p.get("concurrency")
        if v and c:
            # peers sharing a concurrency (several at 100) are spread a little
            ax1.plot([c * (1 + 0.07 * i)], [v], "^", color=f"C{i + 1}", ms=9,
                     label=f"{name} ({c})")
    for label, style in (("evalsha_c50", ":"), ("evalsha_c50_p16", "--")):
        if ceil[label]["value"]:
            ax1.axhline(ceil[label]["value"], ls=style, color="grey",
                        label=f"ceiling {label} ({ceil[label]['value']:,.0f}/s)")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("jobs running at once (concurrency, all processes)")
    ax1.set_ylabel("drain throughput, jobs/s")
    ax1.set_title(f"Drain of {results['settings']['n']:,} no-op jobs")
    ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax1.grid(True, which="both", alpha=0.3)

    # 2. claim latency percentiles against the ready-set size
    for batch, color in ((1, "C0"), (50, "C3")):
        rows = [c for c in lq["claim"] if c["batch"] == batch]
        sizes = [c["size"] for c in rows]
        for p, style in (("p50_ms", "o-"), ("p99_ms", "s--"), ("p99.9_ms", "^:")):
            ax2.plot(sizes, [c[p] for c in rows], style, color=color,
                     label=f"batch {batch} {p[:-3]}")
    ax2.set_xscale("log")
    ax2.set_xlabel("jobs in the ready set")
    ax2.set_ylabel("one claim call, ms (client side)")
    ax2.set_title("leasequeue claim latency")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=7)
    ax2.grid(True, alpha=0.3)

    # 3. enqueue-to-start latency per queue
    names = ["leasequeue", *s["peers"]]
    e2s = [lq["e2s"]] + [p["e2s"] for p in s["peers"].values()]
    p50 = [e.get("p50_ms") or 0 for e in e2s]
    p99 = [e.get("p99_ms") or 0 for e in e2s]
    xs2 = range(len(names))
    ax3.bar([x - 0.2 for x in xs2], p50, 0.4, label="p50")
    ax3.bar([x + 0.2 for x in xs2], p99, 0.4, label="p99")
    ax3.set_xticks(list(xs2), names, rotation=35, ha="right")
    ax3.set_yscale("log")
    ax3.set_ylabel("enqueue → handler start, ms")
    ax3.set_title("Enqueue-to-start on an idle worker")
    ax3.legend()
    ax3.grid(True, axis="y", which="both", alpha=0.3)

    fig.suptitle(f"leasequeue benchmarks — {results['date']}, {results['mode']} mode, "
                 f"{results['machine']['nproc']} CPUs", fontsize=11)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
