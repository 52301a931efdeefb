"""A/B: leasequeue at two source trees, measured in the same run on the same
redis-server, alternating (A B in one rep, B A in the next) so that the
machine's drift hits both alike. Reports per figure the medians, their
ratio B / A and the median of each rep's own B / A (paired: steadier on a
host whose speed moves over the run), and for each drain the CPU
microseconds per job of the worker processes and of Redis (steadier than a
rate on a busy machine).

  git worktree add /tmp/lq-old <commit>
  python benchmarks/ab.py --a /tmp/lq-old --b . --reps 3
  python benchmarks/ab.py --a . --b . --a-loop asyncio --b-loop uvloop  # the workers' loop

Each tree runs its own benchmarks/lq_bench.py with its own package (PYTHONPATH
set to the tree), so a figure compares the code, not the harness."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import RedisServer

FIGURES = {  # metric -> (field, higher is better)
    "enqueue_one": ("value", True),
    "enqueue_one_sync": ("value", True),
    "enqueue_one_uvloop": ("value", True),
    "enqueue_concurrent_uvloop": ("value", True),
    "enqueue_concurrent": ("value", True),
    "enqueue_bulk": ("value", True),
    "drain_c1": ("value", True),
    "drain_c100": ("value", True),
    "drain_2proc": ("value", True),
    "e2s": ("p50_ms", False),
}


def run_tree(tree: Path, url: str, sections: str, loop: str | None = None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # --loop: the workers' event loop (a tree from before leasequeue/loops.py has no such flag)
    flag = ["--loop", loop] if loop else []
    out = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "lq_bench.py"), "bench", "--url", url,
         "--sections", sections, "--concurrency", "1,100", *flag],
        env=env, cwd=tree, capture_output=True, text=True, timeout=900, check=True)
    figures: dict[str, float] = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        metric = row.get("metric")
        if metric in FIGURES and FIGURES[metric][0] in row:
            figures[metric] = float(row[FIGURES[metric][0]])
        if metric == "e2s" and "p99_ms" in row:
            figures["e2s_p99"] = float(row["p99_ms"])
        if str(metric).startswith("drain") and row.get("measured_jobs"):
            # CPU per job moves far less than a rate when the machine is busy
            per_job = row["seconds"] / row["measured_jobs"] * 1e6 / 100
            for side in ("workers", "redis"):
                if f"{side}_cpu_pct" in row:
                    figures[f"{metric}_{side}_us"] = row[f"{side}_cpu_pct"] * per_job
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="source tree A (the baseline)")
    ap.add_argument("--b", required=True, help="source tree B")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sections", default="enqueue,drain,e2s")
    ap.add_argument("--a-loop", help="A's workers' event loop (lq_bench --loop), e.g. asyncio")
    ap.add_argument("--b-loop", help="B's workers' event loop, e.g. uvloop")
    args = ap.parse_args()
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    loops = {"A": args.a_loop, "B": args.b_loop}
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    with RedisServer() as server:
        for rep in range(args.reps):
            # A B, then B A, ...: neither tree always runs first in a rep
            for name in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                results[name].append(run_tree(trees[name], server.url, args.sections,
                                              loops[name]))
                print(f"rep {rep + 1} {name}: {results[name][-1]}", file=sys.stderr)
    label = {k: trees[k].name + (f", --loop {loops[k]}" if loops[k] else "") for k in trees}
    print(f"| figure | A ({label['A']}) | B ({label['B']}) | B / A | paired B / A |")
    print("|---|---:|---:|---:|---:|")
    extra = sorted({m for rows in results.values() for r in rows for m in r} - set(FIGURES))
    for metric in [*FIGURES, *extra]:
        a = [r[metric] for r in results["A"] if metric in r]
        b = [r[metric] for r in results["B"] if metric in r]
        if a and b:
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {metric} | {ma:,.3f} | {mb:,.3f} | {mb / ma:.2f} | "
                  f"{paired(results, metric):.2f} |")


def paired(results: dict[str, list[dict[str, float]]], metric: str) -> float:
    """The median over reps of B's figure ÷ A's in the same rep: each pair
    ran minutes apart, so a host that speeds up or slows down over the run
    moves both sides of a ratio alike, where it moves the two medians apart."""
    ratios = [b[metric] / a[metric] for a, b in zip(results["A"], results["B"], strict=False)
              if metric in a and metric in b and a[metric]]
    return statistics.median(ratios) if ratios else float("nan")


if __name__ == "__main__":
    main()
