"""An App for rate limit tests and benchmarks run in worker processes. Env:
LQ_URL, LQ_PREFIX (the service's queue prefix), LQ_LIMITER_PREFIX (shared by
the services), LQ_RATE (starts a second), LQ_BURST. The job `hit` on queue
`rated` records each start (server clock, us) in one list under the
limiter prefix, so the starts of every service land in one place."""

from __future__ import annotations

import os

from leasequeue import App, Context, Rate, RedisLimiter

LIMITER_PREFIX = os.environ.get("LQ_LIMITER_PREFIX", "lqtest:shared")
app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"),
          limiter=RedisLimiter(prefix=LIMITER_PREFIX))
STARTS_KEY = f"{LIMITER_PREFIX}:test:starts"
RATE = Rate(int(os.environ.get("LQ_RATE", "100")), per=1.0,
            burst=int(os.environ.get("LQ_BURST", "10")), name="shared")


@app.job(queue="rated", rate=RATE, max_attempts=1)
async def hit(ctx: Context, i: int) -> None:
    sec, usec = await app.redis.time()
    await app.redis.rpush(STARTS_KEY, int(sec) * 1_000_000 + int(usec))
