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

KEY_RATE = Rate(int(os.environ.get("LQ_KEY_RATE", "50")), per=1.0, burst=1,
                key="tenant:{tenant}")
DONE_KEY = f"{LIMITER_PREFIX}:test:done"


@app.job(queue="tenants", rate=KEY_RATE, max_attempts=1)
async def tenant_hit(ctx: Context, tenant: str, i: int) -> None:
    """Records `tenant us` of each start (fairness between keys)."""
    sec, usec = await app.redis.time()
    await app.redis.rpush(DONE_KEY, f"{tenant} {int(sec) * 1_000_000 + int(usec)}")


@app.job(queue="plain", max_attempts=1)
async def plain(ctx: Context, i: int) -> None:
    """No limit: the drain baseline."""


@app.job(queue="roomy", rate=Rate(1_000_000, per=1.0), max_attempts=1)
async def roomy(ctx: Context, i: int) -> None:
    """A rate it never reaches: the overhead of the rate check alone."""
