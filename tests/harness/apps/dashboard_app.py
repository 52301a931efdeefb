"""An App for the dashboard's browser test: ``flaky`` dies (PermanentError)
while the key ``<prefix>:test:fail`` exists, and succeeds once it is gone."""

from __future__ import annotations

import os

from leasequeue import App, Context, PermanentError

app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"))
FAIL_KEY = f"{app.prefix}:test:fail"


@app.job(max_attempts=3, run_logs="all")
async def flaky(ctx: Context, order: str) -> dict[str, str]:
    ctx.log.info("charging", order=order)
    if await app.redis.exists(FAIL_KEY):
        ctx.log.warning("payment provider down")
        raise PermanentError(f"payment provider down for order {order}")
    return {"order": order, "charged": "yes"}
