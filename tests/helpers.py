"""Small helpers shared by tests: server time, forcing a lease or a due time
into the past relative to the server clock (no sleeping)."""

from __future__ import annotations

from typing import Any

from leasequeue import App
from leasequeue.scripts import Scripts


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
