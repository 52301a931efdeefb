"""How fast App.enqueue from 100 concurrent tasks could go if Redis cost
nothing: the client's own ceiling, layer by layer, beside the real rate and
our own bulk path's, all in one process on one event loop.

Each row is 100 tasks making ``--n`` calls (common.concurrent_enqueue, the
harness's own loop), with the client's CPU a job (process_time) and the rate:

- park and wake alone: concurrent_floor.floor with no Redis (each call an
  ``async def`` that parks a future a coalescer task resolves per turn);
- the coalescer alone: EnqueueCoalescer.enqueue of one job made ahead, its
  script call replaced by one that answers after one turn of the loop
  (no arguments formatted, no I/O): its lanes, batches, ids and answers;
- with the script call's arguments: the same, the stub formatting the
  batch's arguments as the real call does (enqueue_args);
- App.enqueue, Redis stubbed: the whole call (Producer, coalescer,
  arguments, answer), the script call stubbed as above: **the client's
  ceiling**, what 100 tasks of this App reach with a Redis that costs
  nothing and answers at once;
- App.enqueue: the real thing, on the real redis-server;
- enqueue_many: our bulk path, 500 jobs a script call (20,000 jobs, best
  of three), the rate 3x bee-queue's 100 tasks came to on the Intel Xeon
  host (the README's "Where it is behind").

  python benchmarks/client_ceiling.py [--n 200000] [--reps 5]

Medians of the reps; asyncio's loop, then uvloop's when installed."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
from concurrent_floor import floor
from redis_server import RedisServer

from leasequeue import App, JobRequest
from leasequeue.models import NewJob
from leasequeue.producer import NO_DELAY, NO_PRIORITY
from leasequeue.store.keys import QueueKeys
from leasequeue.store.scripts import enqueue_args

Reply = list[tuple[bool, str]]


async def rate(call: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    """(jobs/s, client CPU µs a job) of ``n`` calls from 100 tasks."""
    cpu = time.process_time()
    result = await common.concurrent_enqueue(call, n, budget=120.0)
    done = max(int(result["n"]), 1)
    return float(result["value"]), (time.process_time() - cpu) / done * 1e6


async def layers(url: str, n: int, reps: int) -> dict[str, list[tuple[float, float]]]:
    app = App(url, prefix=f"ceiling{os.getpid()}")
    out: dict[str, list[tuple[float, float]]] = {}
    try:
        await app.enqueue_many([JobRequest("noop") for _ in range(1000)])  # scripts loaded
        await app.enqueue("noop")  # the queue checked
        coalescer = app.coalescer
        real = coalescer._send
        settings = app.scripts.settings

        async def formatted(qk: QueueKeys, jobs: Sequence[NewJob],
                            ids: Sequence[str] | None) -> Reply:
            enqueue_args(settings, jobs, ids)
            await asyncio.sleep(0)
            return [(True, "queued")] * len(jobs)

        _, qk, job = app.producer.one("noop", None, None, None, NO_DELAY, NO_PRIORITY, None,
                                      None, None, None, None, True)

        async def bulk() -> tuple[float, float]:
            best = (0.0, 0.0)
            for _ in range(3):
                requests = [JobRequest("noop") for _ in range(20_000)]
                t, cpu = time.perf_counter(), time.process_time()
                await app.enqueue_many(requests)
                wall = time.perf_counter() - t
                got = (20_000 / wall, (time.process_time() - cpu) / 20_000 * 1e6)
                best = max(best, got)
            return best

        for _ in range(reps):
            result = await floor(n, None)
            out.setdefault("park and wake alone", []).append(
                (float(result["value"]), float(result["client_us_per_call"])))
            coalescer._send = common.answer_queued
            out.setdefault("the coalescer alone", []).append(
                await rate(lambda: coalescer.enqueue(qk, job), n))
            coalescer._send = formatted
            out.setdefault("with the script call's arguments", []).append(
                await rate(lambda: coalescer.enqueue(qk, job), n))
            out.setdefault("App.enqueue, Redis stubbed (the ceiling)", []).append(
                await rate(lambda: app.enqueue("noop"), n))
            coalescer._send = real
            out.setdefault("App.enqueue", []).append(await rate(lambda: app.enqueue("noop"), n))
            out.setdefault("enqueue_many (bulk)", []).append(await bulk())
    finally:
        await app.close()
    return out


def table(loop: str, out: dict[str, list[tuple[float, float]]]) -> str:
    bulk = statistics.median(r for r, _ in out["enqueue_many (bulk)"])
    lines = [f"\n{loop}: medians of {len(out['App.enqueue'])} reps\n",
             "| 100 tasks, each call | jobs/s | client CPU µs a job | ÷ bulk rate |",
             "|---|---:|---:|---:|"]
    for name, values in out.items():
        jobs = statistics.median(r for r, _ in values)
        cpu = statistics.median(c for _, c in values)
        lines.append(f"| {name} | {jobs:,.0f} | {cpu:.2f} | {jobs / bulk:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with RedisServer() as server:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{common.cpu_model()}")
        print(table("asyncio", asyncio.run(layers(server.url, args.n, args.reps))))
        try:
            import uvloop
        except ImportError:
            return
        print(table("uvloop", uvloop.run(layers(server.url, args.n, args.reps))))


if __name__ == "__main__":
    main()
