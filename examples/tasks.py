"""The jobs and schedules of the examples: one App, imported by the
producers (wsgi_producer.py, fastapi_app.py, cron.py) and run by the worker
(worker.py, or `leasequeue worker tasks:app` from this folder).

Redis: LEASEQUEUE_URL (default redis://localhost:6379/0); key prefix:
LEASEQUEUE_PREFIX (default "examples")."""

from __future__ import annotations

import os
from datetime import timedelta

import leasequeue as lq

app = lq.App(os.environ.get("LEASEQUEUE_URL", "redis://localhost:6379/0"),
             prefix=os.environ.get("LEASEQUEUE_PREFIX", "examples"))


@app.job(queue="emails", max_attempts=5, backoff=lq.exponential(1, 60, jitter=True))
async def send_welcome(ctx: lq.Context, user: str) -> dict[str, str]:
    """Idempotent by its job id (welcome:<user>): a second signup is not a second mail."""
    ctx.log.info("sending the welcome mail", user=user)
    return {"sent_to": user}


@app.job(queue="maintenance", max_concurrent=1, on_conflict="skip")
async def cleanup(ctx: lq.Context, older_than_days: int) -> int:
    """A periodic job: `skip` drops a fire that finds the last run still busy."""
    ctx.log.info("cleaning up", older_than_days=older_than_days)
    return 0


# cron in a time zone (02:30 does not exist on one night a year: it fires at 03:00)
app.schedule("nightly-cleanup", "cleanup", cron="30 3 * * *", tz="Europe/Berlin",
             payload={"older_than_days": 30}, misfire="once")
# an interval: every hour on the hour, on every worker alike
app.schedule("hourly-cleanup", "cleanup", every=timedelta(hours=1),
             payload={"older_than_days": 1})
