"""A queued job's footprint in Redis, for source trees in the same run: no-op
jobs queued with enqueue_many on a flushed redis-server, then Redis's own
count of the keys a queued job lives in (MEMORY USAGE ... SAMPLES 0 of jobs,
payloads and ready, per job; since f530716 a small payload is inside its
record and the payloads hash holds none) and INFO's used_memory per job, at 10,000
and at 100,000 jobs. Each tree runs in a process of its own importing its own
package. tests/test_store_v2.py holds the first figure at a bound.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/footprint.py --tree /tmp/lq-old --tree .
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_in_tree, tree_args
from redis_server import RedisServer

CLIENT = """
import asyncio
import redis
from leasequeue import App, JobRequest

async def main():
    raw = redis.Redis.from_url({url!r})
    for jobs in (10_000, 100_000):
        raw.flushall()
        app = App({url!r}, prefix="footprint")

        async def noop() -> None: ...

        app.job(noop)
        await app.enqueue("noop")  # scripts loaded, the queue's config written
        before = raw.info("memory")["used_memory"]
        for start in range(0, jobs, 5_000):
            await app.enqueue_many([JobRequest("noop") for _ in range(min(5_000, jobs - start))])
        after = raw.info("memory")["used_memory"]
        keys = app.keys("default")
        # (no payloads hash when every payload is inside its record)
        # (a tree before the line has no keys.line)
        where = (keys.jobs, keys.payloads, keys.ready, getattr(keys, "line", keys.ready))
        counted = sum(raw.memory_usage(k, samples=0) or 0 for k in dict.fromkeys(where))
        print(f"{{jobs:>7,}} jobs: MEMORY USAGE {{counted / (jobs + 1):6.1f}} bytes a job, "
              f"used_memory {{(after - before) / jobs:6.1f}} bytes a job")
        await app.close()
    raw.close()

asyncio.run(main())
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap)
    args = ap.parse_args()
    with RedisServer() as server:
        print(f"Redis {server.version()}")
        for tree in args.tree:
            print(f"## {tree}")
            print(run_in_tree(tree, CLIENT.format(url=server.url)).rstrip())


if __name__ == "__main__":
    main()
