"""Enqueue from 100 concurrent tasks, for two source trees in the same run:
how the coalescer's script calls overlap the client's own work. Each round
runs, per tree and per event loop (asyncio's, then uvloop's when
installed), 100 tasks making 200,000 App.enqueue calls in all, in a
process of its own importing its tree's package; trees alternate (A B in
one round, B A in the next) on one redis-server. Per run: the rate, the
client's CPU per job and its share of the run (process_time over wall
time: the rest it waited, for Redis's replies or, unpinned, for a CPU),
the script calls and their mean size, and the share of the run with a
call in flight (the calls' own spans added up, each until its caller
resumed: over 100% when two overlap). Paired B / A ratios of the rate,
round by round, are steadier than the medians on a host whose speed
moves.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/coalesce_calls.py --tree /tmp/lq-old --tree . [--rounds 10] [--pin]

The variant of 2026-12-06 (two coalesced calls in flight per queue, not
kept; results/coalesce_two_calls.txt) is results/coalesce_two_calls.patch:

  git worktree add /tmp/lq-two <commit> && git -C /tmp/lq-two apply \
      "$PWD/benchmarks/results/coalesce_two_calls.patch"
  python benchmarks/coalesce_calls.py --tree . --tree /tmp/lq-two

--pin puts Redis on CPU 1 and every client on CPU 0 (the unpinned run is
the harness's own placement)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import last_json, run_in_tree, tree_args
from redis_server import RedisServer

TASKS, JOBS = 100, 200_000

CLIENT = """
import asyncio, json, os, time
from leasequeue import App, JobRequest

if {pin}:
    os.sched_setaffinity(0, {{0}})

async def main():
    app = App({url!r}, prefix="cc" + str(os.getpid()))
    await app.enqueue_many([JobRequest("noop") for _ in range(1000)])  # scripts loaded
    coalescer = app.coalescer
    send, spans = coalescer._send, []

    async def timed(qk, jobs, *ids):  # (ids: drawn at the send, since 2026-12-06 20:30)
        t = time.perf_counter()
        try:
            return await send(qk, jobs, *ids)
        finally:
            spans.append((len(jobs), time.perf_counter() - t))

    coalescer._send = timed
    left = {jobs}

    async def task():
        nonlocal left
        while left > 0:
            left -= 1
            await app.enqueue("noop")

    t, c = time.perf_counter(), time.process_time()
    await asyncio.gather(*(task() for _ in range({tasks})))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    calls = len(spans) or 1
    print(json.dumps({{"rate": {jobs} / wall, "cpu_us": cpu / {jobs} * 1e6,
                      "busy": cpu / wall, "calls": len(spans),
                      "batch": sum(n for n, _ in spans) / calls,
                      "in_flight": sum(s for _, s in spans) / wall}}))
    await app.close()

if {loop!r} == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def run(tree: Path, url: str, loop: str, pin: bool) -> dict[str, float]:
    code = CLIENT.format(url=url, jobs=JOBS, tasks=TASKS, loop=loop, pin=pin)
    result: dict[str, float] = last_json(run_in_tree(tree, code))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap, rounds=10)
    ap.add_argument("--pin", action="store_true", help="Redis on CPU 1, the clients on CPU 0")
    args = ap.parse_args()
    trees: list[Path] = args.tree
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("--pin needs CPUs 0 and 1")
    loops = ["asyncio", *(["uvloop"] if importlib.util.find_spec("uvloop") else [])]
    # by the tree's place in --tree: the same tree twice (an A/A check) stays two
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {
        (loop, k): [] for loop in loops for k in range(len(trees))}
    with RedisServer() as server:
        if args.pin:
            server.pin({1})
        for i in range(args.rounds):
            for loop in loops:
                order = range(len(trees)) if i % 2 == 0 else reversed(range(len(trees)))
                for k in order:
                    server.flush()
                    row = run(trees[k], server.url, loop, args.pin)
                    rows[(loop, k)].append(row)
                    print(f"round {i + 1} {loop} {trees[k]}: {row}", flush=True)
    print(f"\n| loop | tree | jobs/s | client CPU µs/job | client busy | calls | mean batch "
          f"| call in flight | (medians of {args.rounds} rounds) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (loop, k), runs in rows.items():
        tree = f"{'AB'[k] if len(trees) == 2 else k}: {trees[k]}"
        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(r[key] for r in runs))
        print(f"| {loop} | {tree} | {med('rate'):,.0f} | {med('cpu_us'):.2f} "
              f"| {med('busy'):.0%} | {med('calls'):,.0f} | {med('batch'):.1f} "
              f"| {med('in_flight'):.0%} | |")
    if len(trees) == 2:
        print("\n| loop | paired B / A of the rate, round by round | median | geometric mean "
              "| rounds B ahead |")
        print("|---|---|---:|---:|---:|")
        for loop in loops:
            ratios = [b["rate"] / a["rate"]
                      for a, b in zip(rows[(loop, 0)], rows[(loop, 1)], strict=True)]
            geo = math.exp(statistics.mean(math.log(r) for r in ratios))
            print(f"| {loop} | {' '.join(f'{r:.2f}' for r in ratios)} "
                  f"| {statistics.median(ratios):.2f} | {geo:.2f} "
                  f"| {sum(r > 1 for r in ratios)} of {len(ratios)} |")


if __name__ == "__main__":
    main()
