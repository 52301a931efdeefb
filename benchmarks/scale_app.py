"""The App the scale benchmark's worker processes load (CLI `leasequeue
worker scale_app:app`). Env: LQ_URL, LQ_PREFIX, LQ_SHARDS (shards of "hot")."""

from __future__ import annotations

import os

from leasequeue import App, Context, RedisLimiter

app = App(os.environ["LQ_URL"], prefix=os.environ.get("LQ_PREFIX", "scale"),
          limiter=RedisLimiter(), queue_shards={"hot": int(os.environ.get("LQ_SHARDS", "3"))})


async def _noop(ctx: Context) -> None:
    return None


for _queue in ("q0", "q1", "q2", "hot"):
    app.job(name=f"noop_{_queue}", queue=_queue)(_noop)


# not the defaults, and the README names them beside the figures: a run that
# finds the 4 slots busy goes back after 10 ms (the default slot_backoff is 2 s)
@app.job(queue="limited", max_concurrent=4, on_conflict="enqueue", slot_backoff=0.01)
async def limited(ctx: Context) -> None:
    return None
