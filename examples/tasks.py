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


# a rate per tenant, shared by every worker and service with this prefix: at
# most 5 calls a second to the partner's API per account, no burst above that;
# a job over its rate waits, scheduled to its turn, with no attempt spent
@app.job(queue="partner", rate=lq.Rate(5, per=1.0, burst=1, key="account:{account}"))
async def sync_account(ctx: lq.Context, account: str, page: int) -> int:
    return page


# a saga: charge first (the step that is hard to undo), then reserve stock,
# then book the carrier; a refused step compensates the done ones in reverse.
# Effects go to a Redis hash keyed by job and step, so a step run twice does
# one thing (do and undo must be idempotent)
async def _effect(ctx: lq.Context, what: str, value: str) -> str:
    await app.redis.hset(f"{app.prefix}:examples:shop:{ctx.job_id}", what, value)
    return value


@app.job(queue="orders", max_attempts=3)
async def place_order(ctx: lq.Context, order: str, carrier_up: bool) -> dict[str, str]:
    async def book(done: dict[str, str]) -> str:
        if not carrier_up:
            raise RuntimeError("the carrier refuses (503)")
        return await _effect(ctx, "carrier", "booked")

    return await lq.run_saga(ctx, [
        lq.Step("charge", lambda done: _effect(ctx, "charge", "charged"),
                lambda charge: _effect(ctx, "charge", "refunded")),
        lq.Step("reserve", lambda done: _effect(ctx, "stock", "reserved"),
                lambda reservation: _effect(ctx, "stock", "released")),
        lq.Step("ship", book, lambda booking: _effect(ctx, "carrier", "cancelled")),
    ])
