"""Where a bulk enqueue's time goes, client or Redis, for source trees in the
same run: App.enqueue_many of 20,000 no-op jobs (the requests built inside
the timer, as the harness's bulk column does), into a Redis just flushed
("fresh", the harness's case) and again on top of them ("on top"), with
SLOWLOG logging every command, so Redis's own time per job (its scripts'
execution, no I/O) is read beside the rate. Each tree runs in a process of
its own, rounds alternating (A, B, A, B ...) on one redis-server; medians
of the rounds. SLOWLOG's bookkeeping slows Redis a little: compare the
trees, not these rates with the harness's.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/bulk_redis_time.py --tree /tmp/lq-old --tree . [--rounds 5]
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

N = 20_000

CLIENT = """
import asyncio, json, sys, time
sys.path.insert(0, {bench!r})
import redis
from common import slowlog_by_sha
from leasequeue import App, JobRequest

async def main():
    app = App({url!r}, prefix="bulk")
    await app.enqueue("noop")  # scripts loaded, the queue checked
    client = redis.Redis.from_url({url!r})
    client.flushall()
    client.config_set("slowlog-max-len", 100_000)
    out = {{}}
    for label in ("fresh", "on top"):
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        t = time.perf_counter()
        await app.enqueue_many([JobRequest("noop") for _ in range({n})])
        rate = {n} / (time.perf_counter() - t)
        client.config_set("slowlog-log-slower-than", 10_000)
        redis_us = sum(sum(times) for times in slowlog_by_sha(client).values()) / {n}
        out[label] = [rate, redis_us]
    print(json.dumps(out))
    client.close()
    await app.close()

asyncio.run(main())
"""


def run(tree: Path, url: str) -> dict[str, list[float]]:
    code = CLIENT.format(url=url, n=N, bench=os.path.dirname(os.path.abspath(__file__)))
    result: dict[str, list[float]] = last_json(run_in_tree(tree, code))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap, rounds=5)
    args = ap.parse_args()
    trees: list[Path] = args.tree
    with RedisServer() as server:
        rows = alternate(trees, args.rounds, lambda tree: run(tree, server.url))
    print(f"| tree | fresh: jobs/s | fresh: Redis µs/job | on top: jobs/s | "
          f"on top: Redis µs/job | (medians of {args.rounds} rounds, SLOWLOG on) |")
    print("|---|---:|---:|---:|---:|---|")
    for tree, runs in rows.items():
        med = [statistics.median(r[label][i] for r in runs) for label in ("fresh", "on top")
               for i in (0, 1)]
        print(f"| {tree} | {med[0]:,.0f} | {med[1]:.2f} | {med[2]:,.0f} | {med[3]:.2f} | |")


if __name__ == "__main__":
    main()
