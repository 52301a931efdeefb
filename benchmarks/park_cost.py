"""What parking costs Redis (lua/claim.lua): 10,000 queued jobs of one rate
group behind a parked key, claimed 50 at a time until none is ready; prints
the claim calls it took and Redis's own time in them (INFO commandstats).

Run: python benchmarks/park_cost.py [--jobs 10000]"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(__file__))]
from redis_server import RedisServer  # noqa: E402

from leasequeue import App  # noqa: E402
from leasequeue.codec import encode_envelope  # noqa: E402
from leasequeue.models import NewJob  # noqa: E402
from leasequeue.store.scripts import Park  # noqa: E402

GROUP = "rate.t:A"


async def measure(url: str, jobs: int) -> dict[str, float]:
    async with App(url, prefix="park-cost") as app:
        qk = app.keys("default")
        batch = [NewJob(f"a{i}", "call", encode_envelope({}, f"a{i}", ""), 0, 0, 0, 0, GROUP)
                 for i in range(jobs + 1)]
        for start in range(0, len(batch), 2000):
            await app.scripts.enqueue(qk, batch[start:start + 2000])
        (first,) = (await app.scripts.claim(qk, 1, 30_000, "w", 1, "c0")).jobs
        await app.scripts.release(qk, [(first.id, first.token)], 900, "rate limited",
                                  Park(GROUP, 1_000_000, 20_000))  # one start per 20 ms
        await app.redis.config_resetstat()
        calls = 0
        while await app.redis.zcard(qk.ready) or await app.redis.llen(qk.line):
            calls += 1
            await app.scripts.claim(qk, 50, 30_000, "w", 50, f"c{calls}")
        stats = (await app.redis.info("commandstats"))["cmdstat_evalsha"]
        return {"jobs_parked": await app.redis.zcard(qk.scheduled) - 1, "claim_calls": calls,
                "redis_ms": round(stats["usec"] / 1000, 1),
                "redis_us_per_call": round(stats["usec_per_call"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    args = ap.parse_args()
    with RedisServer() as server:
        print(json.dumps({"metric": "park_cost", **anyio.run(measure, server.url, args.jobs)}))


if __name__ == "__main__":
    main()
