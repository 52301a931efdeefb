"""Client CPU per enqueued job, for two source trees in the same run: a bulk
enqueue_many of 20,000 no-op jobs (best of three a round), 3,000 single
App.enqueue calls and 20,000 App.enqueue calls from 100 tasks, each tree in
a process of its own importing its own package, rounds interleaved (A, B, A,
B ...) on one redis-server, medians of the rounds. The client's CPU time
(process_time) is the figure a loaded machine disturbs least; the rates are
printed beside it.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/enqueue_cpu.py --tree /tmp/lq-old --tree . [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import alternate, last_json, run_in_tree, tree_args
from redis_server import RedisServer

BULK, ONE, TASKS = 20_000, 3_000, 20_000

CLIENT = """
import asyncio, json, os, time
from leasequeue import App, JobRequest

async def main():
    app = App({url!r}, prefix="cpu" + str(os.getpid()))
    await app.enqueue_many([JobRequest("noop") for _ in range(1000)])  # scripts loaded
    bulk = []
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        await app.enqueue_many([JobRequest("noop") for _ in range({bulk})])
        bulk.append(({bulk} / (time.perf_counter() - t), (time.process_time() - c) / {bulk} * 1e6))
    t, c = time.perf_counter(), time.process_time()
    for _ in range({one}):
        await app.enqueue("noop")
    one = ({one} / (time.perf_counter() - t), (time.process_time() - c) / {one} * 1e6)
    left = {tasks_jobs}

    async def task():
        nonlocal left
        while left > 0:
            left -= 1
            await app.enqueue("noop")

    t, c = time.perf_counter(), time.process_time()
    await asyncio.gather(*(task() for _ in range(100)))
    tasks = ({tasks_jobs} / (time.perf_counter() - t),
             (time.process_time() - c) / {tasks_jobs} * 1e6)
    print(json.dumps({{"bulk": max(bulk), "one": one, "tasks": tasks}}))
    await app.close()

asyncio.run(main())
"""


def run(tree: Path, url: str) -> dict[str, list[float]]:
    out = run_in_tree(tree, CLIENT.format(url=url, bulk=BULK, one=ONE, tasks_jobs=TASKS))
    result: dict[str, list[float]] = last_json(out)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap, rounds=5)
    args = ap.parse_args()
    trees: list[Path] = args.tree
    with RedisServer() as server:

        def measure(tree: Path) -> dict[str, list[float]]:
            server.flush()
            return run(tree, server.url)

        rows = alternate(trees, args.rounds, measure)
    print(f"| tree | bulk jobs/s | bulk client CPU µs/job | one per call jobs/s | "
          f"one per call client CPU µs | 100 tasks jobs/s | 100 tasks client CPU µs/job "
          f"| (medians of {args.rounds} rounds) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for tree, runs in rows.items():
        med = [statistics.median(r[kind][i] for r in runs) for kind in ("bulk", "one", "tasks")
               for i in (0, 1)]
        print(f"| {tree} | {med[0]:,.0f} | {med[1]:.2f} | {med[2]:,.0f} | {med[3]:.1f} "
              f"| {med[4]:,.0f} | {med[5]:.2f} | |")


if __name__ == "__main__":
    main()
