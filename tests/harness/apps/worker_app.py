"""An App for worker processes started by tests: URL and prefix come from the
environment; every execution is recorded in Redis so tests can count runs."""

from __future__ import annotations

import os

import anyio

from leasequeue import App, Context, fixed

app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"))
EXEC_KEY = f"{app.prefix}:test:executions"


@app.job(max_attempts=5, backoff=fixed(0))
async def slow(ctx: Context, seconds: float) -> str:
    # record the start of every execution: job id, fencing token, worker
    await app.redis.rpush(EXEC_KEY, f"start {ctx.job_id} {ctx.token} {ctx.worker_id}")
    await anyio.sleep(seconds)
    await app.redis.rpush(EXEC_KEY, f"end {ctx.job_id} {ctx.token} {ctx.worker_id}")
    return ctx.worker_id


@app.job(stop_grace=0.5)
def stubborn(ctx: Context, seconds: float) -> None:
    """A sync handler that ignores ctx.is_stopping(): it cannot be interrupted."""
    import time

    import redis

    redis.Redis.from_url(app.url).rpush(EXEC_KEY, f"start {ctx.job_id} {ctx.token} "
                                                  f"{ctx.worker_id}")
    time.sleep(seconds)
