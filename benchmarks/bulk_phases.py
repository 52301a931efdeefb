"""Where one bulk enqueue's wall time goes, call by call: App.enqueue_many of
20,000 no-op jobs into a Redis just flushed (the harness's bulk case), the
requests built inside the timer as the harness builds them, several calls in
one process. Per call: the requests' construction, ``Producer.prepare_many``,
the pipelined script calls (from the end of the preparing to the return), the
answers' share of those (``Producer.answer``; for a plain batch, whose
jobs are made as each call is sent, the making too, inside the calls), and the garbage collector's
passes by generation, counted and timed through ``gc.callbacks``.

  python benchmarks/bulk_phases.py [--calls 9] [--n 20000]

Prints one line per call (milliseconds; gcK: passes/ms of generation K).
The prepare and answer steps are timed by wrapping the App's producer, so
they must exist under those names (the tree as it is).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import RedisServer


async def measure(url: str, calls: int, n: int) -> list[dict[str, Any]]:
    import redis

    from leasequeue import App, JobRequest

    passes: list[tuple[str, int, float]] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        passes.append((phase, info["generation"], time.perf_counter()))

    app = App(url, prefix="phases")
    client = redis.Redis.from_url(url)
    producer: Any = app.producer
    marks: dict[str, float] = {}
    preparing: list[float] = []
    answering: list[float] = []
    answer = producer.answer

    def timed(step: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            out = step(*args, **kwargs)
            marks["prepared"] = time.perf_counter()
            preparing.append(marks["prepared"] - t)
            return out
        return call

    def timed_answer(*args: Any, **kwargs: Any) -> None:
        t = time.perf_counter()
        answer(*args, **kwargs)
        answering.append(time.perf_counter() - t)

    # the preparing before the first write: prepare_many, and since 2026-12-04
    # plain_batch's checks (a plain batch's jobs are made as each call is sent)
    producer.prepare_many = timed(producer.prepare_many)
    if hasattr(producer, "plain_batch"):
        producer.plain_batch = timed(producer.plain_batch)
    producer.answer = timed_answer
    rows = []
    gc.callbacks.append(on_gc)
    try:
        for _ in range(calls):
            client.flushall()
            await app.enqueue("noop")  # the queue checked, the scripts loaded
            client.flushall()
            passes.clear()
            preparing.clear()
            answering.clear()
            t0 = time.perf_counter()
            requests = [JobRequest("noop") for _ in range(n)]
            t1 = time.perf_counter()
            await app.enqueue_many(requests)
            t2 = time.perf_counter()
            spent = {0: 0.0, 1: 0.0, 2: 0.0}
            count = {0: 0, 1: 0, 2: 0}
            began = 0.0
            for phase, generation, at in passes:
                if phase == "start":
                    began = at
                else:
                    spent[generation] += at - began
                    count[generation] += 1
            rows.append({
                "total": (t2 - t0) * 1e3, "requests": (t1 - t0) * 1e3,
                "prepare": sum(preparing) * 1e3,
                "calls": (t2 - marks["prepared"]) * 1e3, "answers": sum(answering) * 1e3,
                **{f"gc{g}": f"{count[g]}/{spent[g] * 1e3:.1f}" for g in (0, 1, 2)},
            })
    finally:
        gc.callbacks.remove(on_gc)
        client.close()
        await app.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--n", type=int, default=20_000)
    args = ap.parse_args()
    with RedisServer() as server:
        rows = asyncio.run(measure(server.url, args.calls, args.n))
    for row in rows:
        print("  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()))


if __name__ == "__main__":
    main()
