"""An App with schedules for worker processes started by tests. Env:
``LQ_URL`` / ``LQ_PREFIX``; ``LQ_CLOCK_SKEW``: seconds added to this
process's wall clock (time.time and time.time_ns), patched at import before
anything reads the clock. Two schedules fire every second, one per misfire
policy; every run appends ``"<job id> <worker>"`` to ``<prefix>:test:ticks``."""

from __future__ import annotations

import os
import time
from datetime import timedelta

SKEW_S = float(os.environ.get("LQ_CLOCK_SKEW", "0") or 0)
if SKEW_S:
    _real_time, _real_time_ns = time.time, time.time_ns
    time.time = lambda: _real_time() + SKEW_S
    time.time_ns = lambda: _real_time_ns() + int(SKEW_S * 1e9)

from leasequeue import App, Context  # noqa: E402  (after the clock is skewed)

app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"))
TICKS_KEY = f"{app.prefix}:test:ticks"


@app.job(queue="ticks", max_attempts=1)
async def tick(ctx: Context, which: str) -> None:
    await app.redis.rpush(TICKS_KEY, f"{ctx.job_id} {ctx.worker_id}")


app.schedule("every-once", "tick", every=timedelta(seconds=1), payload={"which": "once"},
             misfire="once")
app.schedule("every-skip", "tick", every=timedelta(seconds=1), payload={"which": "skip"},
             misfire="skip")
