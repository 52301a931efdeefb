"""The demo's jobs and schedule (leasequeue demo). `app` at module level is
what `leasequeue worker leasequeue.demo_app:app` runs in the demo's worker
processes: its prefix comes from LEASEQUEUE_DEMO_PREFIX, its URL from the
CLI's --url. It never starts workers itself (demo_workers.py does)."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable
from datetime import timedelta

import anyio

from .app import App
from .context import Context
from .store.settings import StoreSettings

PREFIX_ENV = "LEASEQUEUE_DEMO_PREFIX"
QUEUE, CRON_QUEUE = "demo", "demo-cron"
POISON_ATTEMPTS = 3
CRASH_DELAY = 0.2  # the poison job's run is marked started before it kills its process


def build_app(url: str, prefix: str, crash: Callable[[str], None] | None = None) -> App:
    """The demo's App. ``crash``: how the poison job kills its worker when the
    workers share this process (memory://); None = SIGKILL its own process."""
    # audit_all: the report reads who ran and who recovered each job from the trail
    app = App(url, prefix=prefix, settings=StoreSettings(audit_all=True))

    # a crash charges an attempt to every run its worker had started: a healthy
    # job can share a worker with the poison job on each of its crashes and be
    # on the crashed worker too (4 charges), so it gets 5 attempts
    @app.job(queue=QUEUE, max_attempts=5)
    async def resize(ctx: Context, image: int) -> int:
        await anyio.sleep(random.uniform(0.005, 0.03))
        return image * 2

    @app.job(queue=QUEUE, max_attempts=POISON_ATTEMPTS)
    async def poison(ctx: Context) -> None:
        # stands for a job that segfaults or OOMs its worker every time
        await anyio.sleep(CRASH_DELAY)
        if crash is None:
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            crash(ctx.worker_id)
        await anyio.sleep_forever()

    # every worker runs the scheduler loop, none is the leader: each fire is
    # taken by one of them and enqueued as schedule:heartbeat:<fire ms>
    @app.job(queue=CRON_QUEUE)
    async def heartbeat(ctx: Context) -> str:
        return ctx.worker_id

    app.schedule("heartbeat", "heartbeat", every=timedelta(seconds=1))
    return app


app = build_app("memory://", os.environ.get(PREFIX_ENV, "demo"))
