"""Small helpers shared by tests: server time, forcing a lease or a due time
into the past relative to the server clock (no sleeping)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from leasequeue import App, Worker
from leasequeue.store.scripts import Scripts


async def server_ms(app: App) -> int:
    sec, usec = await app.redis.time()
    return int(sec) * 1000 + int(usec) // 1000


async def expire_lease(app: App, queue: str, job_id: str) -> None:
    """Make a lease look expired by the server clock."""
    qk = app.keys(queue)
    await app.redis.zadd(qk.leases, {job_id: await server_ms(app) - 1}, xx=True)


async def make_due(app: App, queue: str, job_id: str) -> None:
    qk = app.keys(queue)
    await app.redis.zadd(qk.scheduled, {job_id: await server_ms(app) - 1}, xx=True)


def ops(app: App) -> Scripts:
    return app.scripts


async def all_keys_state(app: App, queue: str) -> dict[str, Any]:
    qk = app.keys(queue)
    r = app.redis
    return {
        "ready": [x.decode() for x in await r.zrange(qk.ready, 0, -1)],
        "scheduled": [x.decode() for x in await r.zrange(qk.scheduled, 0, -1)],
        "leases": [x.decode() for x in await r.zrange(qk.leases, 0, -1)],
        "dead": [x.decode() for x in await r.zrange(qk.dead, 0, -1)],
        "done": sorted(x.decode() for x in await r.zrange(qk.done, 0, -1)),
    }


@asynccontextmanager
async def worker_running(app: App, **options: Any) -> AsyncIterator[Worker]:
    """An in-process Worker for the duration of the block, stopped gracefully after
    (within a short shutdown timeout, so a failing test does not wait long)."""
    options.setdefault("concurrency", 4)
    options.setdefault("lease", 2.0)
    options.setdefault("shutdown_timeout", 5.0)
    worker = Worker(app, **options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            yield worker
        finally:
            worker.stop()


async def eventually(check: Callable[[], Any], limit: float = 10.0,
                     what: str = "condition") -> Any:
    """Await a (possibly async) condition until it is truthy, failing after ``limit`` s."""
    try:
        with anyio.fail_after(limit):
            while True:
                value = check()
                if hasattr(value, "__await__"):
                    value = await value
                if value:
                    return value
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {limit}s waiting for {what}") from None
