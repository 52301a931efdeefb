"""An App for limiter tests run in worker processes. Env: LQ_URL, LQ_PREFIX,
LQ_LIMITER (redis | local), LQ_LIMITER_PREFIX, LQ_LIMITER_LEASE (s),
LQ_ON_CONFLICT. Every run records its start and end on the server clock."""

from __future__ import annotations

import os

import anyio

from leasequeue import App, Context, RedisLimiter
from leasequeue.limiter import Limiter, LocalLimiter

limiter: Limiter = (
    RedisLimiter(prefix=os.environ.get("LQ_LIMITER_PREFIX"),
                 lease=float(os.environ.get("LQ_LIMITER_LEASE", "30")))
    if os.environ.get("LQ_LIMITER", "redis") == "redis" else LocalLimiter()
)
app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"), limiter=limiter,
          queue_limits={"heavy": 2})
RUNS_KEY = f"{app.prefix}:test:runs"
ON_CONFLICT = os.environ.get("LQ_ON_CONFLICT", "enqueue")


async def record(ctx: Context, edge: str) -> None:
    sec, usec = await app.redis.time()
    await app.redis.rpush(RUNS_KEY, f"{edge} {ctx.name} {ctx.job_id} {ctx.token} "
                                    f"{ctx.worker_id} {int(sec) * 1_000_000 + int(usec)}")


@app.job(max_concurrent=1, on_conflict=ON_CONFLICT, slot_backoff=0.05, max_attempts=50)
async def single(ctx: Context, seconds: float) -> None:
    await record(ctx, "start")
    await anyio.sleep(seconds)
    await record(ctx, "end")


@app.job(queue="heavy", slot_backoff=0.05, max_attempts=50)
async def heavy(ctx: Context, seconds: float) -> None:
    await record(ctx, "start")
    await anyio.sleep(seconds)
    await record(ctx, "end")
