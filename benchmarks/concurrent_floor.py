"""The event loop's own floor under "enqueue from 100 concurrent tasks": the
harness's loop (common.concurrent_enqueue: 100 tasks, each awaiting one call
at a time) around calls that do nothing but what any coalescing client must
do per call, a future parked and resolved. A coalescer task takes every
parked future once per turn of the loop and resolves it: no Redis, no
encoding, no job, no I/O. That is park and wake alone, a bound: every
client whose callers each await a coroutine of their own per call (an
`async def` enqueue, as App.enqueue is) pays it per call on that loop,
whatever it sends and however it overlaps its calls with Redis.

With --redis, the coalescer also sends one empty script call per turn
(redis-py's asyncio EVALSHA of `return 1`: one shared round trip) and waits
for it before it resolves the batch. That is a mark, not a bound: App sends
through connections of its own (store/direct.py), which spend less a call
than redis-py's, and keeps one batch in Redis while the client prepares the
next (store/coalesce.py), where this one waits out each call.

  python benchmarks/concurrent_floor.py [--loop asyncio|uvloop] [--redis] [--n 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
from redis_server import RedisServer


async def floor(n: int, url: str | None, budget: float = 60.0) -> dict[str, Any]:
    """``n`` calls from 100 tasks (common.concurrent_enqueue), each parking a
    future that one coalescer task resolves a batch at a time, after one
    empty script call a batch when ``url`` is given: calls/s, and the
    client's CPU a call. Also run by lq_bench.py right after its own 100
    tasks (the report's "against the event loop's floor")."""
    loop = asyncio.get_running_loop()
    parked: list[asyncio.Future[None]] = []
    wake = asyncio.Event()
    stop = False
    redis: Any = None
    sha = ""
    if url is not None:
        import redis.asyncio as aredis

        redis = aredis.Redis.from_url(url)
        sha = await redis.script_load("return 1")

    async def coalescer() -> None:
        while not stop:
            await wake.wait()
            wake.clear()
            batch = parked[:]
            parked.clear()
            try:
                if redis is not None:
                    await redis.evalsha(sha, 0)
            except Exception as exc:  # the batch's callers get it, as App.enqueue's would
                for fut in batch:
                    fut.set_exception(exc)
                continue
            for fut in batch:
                fut.set_result(None)

    async def call() -> None:
        fut: asyncio.Future[None] = loop.create_future()
        parked.append(fut)
        wake.set()
        await fut

    worker = asyncio.ensure_future(coalescer())
    try:
        cpu = time.process_time()
        result = await common.concurrent_enqueue(call, n, budget=budget)
        result["client_us_per_call"] = round(
            (time.process_time() - cpu) / max(int(result["n"]), 1) * 1e6, 3)
    finally:
        stop = True
        wake.set()
        await worker
        for fut in parked:  # parked after the coalescer's last turn (a call that failed)
            fut.cancel()
        if redis is not None:
            await redis.aclose()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--redis", action="store_true", help="one empty script call per batch")
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    server = RedisServer() if args.redis else None
    if server is not None:
        server.start()
    try:
        url = server.url if server is not None else None
        if args.loop == "uvloop":
            import uvloop

            result = uvloop.run(floor(args.n, url))
        else:
            result = asyncio.run(floor(args.n, url))
    finally:
        if server is not None:
            server.stop()
    print(f"loop {args.loop}, redis {'one empty script call a batch' if args.redis else 'none'}: "
          f"{result}")


if __name__ == "__main__":
    main()
