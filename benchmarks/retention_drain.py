"""A drain past the first retention: what a job costs when each ack also
deletes the records whose retention ran out, per source tree, rounds
interleaved (A, B, A, B ...).

A queue that has run longer than its jobs' retention (a day by default)
expires, on every ack, about as many finished records as the ack
finishes: the steady state of any long-lived queue, which a benchmark of
minutes never reaches with the default retention. Here the job's
retention is --retention seconds (1 ms by default), so the records an
ack finishes are due by the next ack. --n no-op jobs are queued, then
one worker process of the tree (concurrency 100, as the drain column's)
drains them; over the middle of the drain (from the 10th to the 90th
percent of the jobs done), jobs/s, Redis's CPU µs per job (INFO cpu) and
the commands Redis ran per job (INFO commandstats, a script's own calls
counted).

  python benchmarks/retention_drain.py --tree A --tree B [--rounds 3] [--n 20000]
      [--retention 0.001]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import alternate, stop, tree_args
from redis_server import RedisServer
from trickle_cpu import WORKER, redis_cpu_and_calls

from leasequeue import App, JobRequest

PREFIX, QUEUE = "retention", "default"


async def fill(url: str, n: int) -> None:
    app = App(url, prefix=PREFIX)
    app.job(name="tick", queue=QUEUE)(_noop)
    for first in range(0, n, 1000):
        await app.enqueue_many([JobRequest("tick", queue=QUEUE)
                                for _ in range(min(1000, n - first))])
    await app.close()


async def _noop() -> None:
    return None


def one_round(tree: Path, server: RedisServer, n: int, retention: float) -> dict[str, float]:
    import asyncio

    server.flush()
    asyncio.run(fill(server.url, n))
    client = redis.Redis.from_url(server.url)
    stats = f"{{{PREFIX}:{QUEUE}}}:stats"
    # trickle_cpu's worker: one process, a no-op job of this retention
    code = WORKER.format(url=server.url, prefix=PREFIX, queue=QUEUE, concurrency=100,
                         retention=retention)
    worker = subprocess.Popen([sys.executable, "-c", code], cwd=tree,
                              env={**os.environ, "PYTHONPATH": str(tree)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        marks: list[tuple[float, int, float, int]] = []  # (time, done, redis cpu, calls)
        deadline = time.monotonic() + 120
        for goal in (n // 10, n * 9 // 10):
            while True:
                done = int(client.hget(stats, "succeeded") or 0)
                if done >= goal:
                    cpu, calls = redis_cpu_and_calls(client)
                    marks.append((time.monotonic(), done, cpu, calls))
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{done} of {n} jobs done")
                time.sleep(0.002)
        (t0, d0, c0, k0), (t1, d1, c1, k1) = marks
        jobs = d1 - d0
        return {"rate": jobs / (t1 - t0), "redis_us": (c1 - c0) / jobs * 1e6,
                "commands": (k1 - k0) / jobs}
    finally:
        client.close()
        stop(worker, 30)  # SIGTERM: the worker's graceful stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tree_args(ap, rounds=3)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--retention", type=float, default=0.001, help="the job's retention, s")
    args = ap.parse_args()
    with RedisServer() as server:
        rows = alternate(args.tree, args.rounds,
                         lambda tree: one_round(tree, server, args.n, args.retention))
    print(f"{args.n} no-op jobs drained at concurrency 100, retention {args.retention:g} s, "
          f"the middle 80% of each drain; medians of {args.rounds} interleaved rounds; load "
          f"average {os.getloadavg()[0]:.2f}")
    print("| tree | jobs/s | rounds | Redis CPU µs/job | rounds | Redis commands/job |")
    print("|---|---:|---|---:|---|---:|")
    for tree, values in rows.items():
        def col(key: str, v: list[dict[str, float]] = values) -> list[float]:
            return [x[key] for x in v]

        print(f"| {tree} | {statistics.median(col('rate')):,.0f} | "
              f"{', '.join(f'{x:,.0f}' for x in col('rate'))} | "
              f"{statistics.median(col('redis_us')):.1f} | "
              f"{', '.join(f'{x:.1f}' for x in col('redis_us'))} | "
              f"{statistics.median(col('commands')):.2f} |")


if __name__ == "__main__":
    main()
