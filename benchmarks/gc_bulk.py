"""The garbage collector's share of a bulk enqueue, for source trees in the
same run: six 20,000-job App.enqueue_many calls in one process per tree, each
call's wall time and the automatic collections it triggered, per generation
(how many, and their time, from gc.callbacks). A full collection (generation
2) walks every object in the process; leasequeue/gcpause.py is why there are
fewer of them.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/gc_bulk.py --tree /tmp/lq-old --tree .
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_in_tree, tree_args
from redis_server import RedisServer

CLIENT = """
import asyncio, collections, gc, time
import redis
from leasequeue import App, JobRequest

counts, spent, began = collections.Counter(), collections.Counter(), {{}}

def watch(phase, info):
    generation = info["generation"]
    if phase == "start":
        began[generation] = time.perf_counter()
    else:
        counts[generation] += 1
        spent[generation] += time.perf_counter() - began[generation]

async def main():
    app = App({url!r}, prefix="gc")
    raw = redis.Redis.from_url({url!r})

    async def noop() -> None: ...

    app.job(noop)
    await app.enqueue_many([JobRequest("noop") for _ in range(1000)])  # scripts loaded
    print(f"objects tracked by the collector: {{len(gc.get_objects()):,}}")
    for call in range(1, 7):
        raw.flushall()
        requests = [JobRequest("noop") for _ in range({jobs})]
        counts.clear(); spent.clear()
        gc.callbacks.append(watch)
        started = time.perf_counter()
        await app.enqueue_many(requests)
        wall = time.perf_counter() - started
        gc.callbacks.remove(watch)
        del requests
        passes = ", ".join(f"gen {{g}}: {{counts[g]}} in {{spent[g] * 1e3:.1f}} ms"
                           for g in sorted(counts))
        print(f"call {{call}}: {{wall * 1e3:6.1f}} ms; {{passes}}")
    raw.close()
    await app.close()

asyncio.run(main())
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap)
    ap.add_argument("--jobs", type=int, default=20_000)
    args = ap.parse_args()
    with RedisServer() as server:
        for tree in args.tree:
            print(f"## {tree}, {args.jobs:,}-job enqueue_many calls")
            print(run_in_tree(tree, CLIENT.format(url=server.url, jobs=args.jobs)).rstrip())


if __name__ == "__main__":
    main()
