"""Invariant 9, bounded memory: after 100,000 no-op jobs have run and their
one-second retention has passed, the queue holds nothing of them. The
reaper's expiry deletes every finished record (jobs, payloads, results and the
done index end empty), the audit stream stays at its cap, and Redis'
used_memory returns to within 500 kB of where it started.

``LQ_MEMORY_JOBS`` overrides the job count. Run with ``-s`` for the figures."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.store.settings import StoreSettings
from tests.harness.redis_proc import RedisProcess
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio

JOBS = int(os.environ.get("LQ_MEMORY_JOBS", "100000"))
CHUNK = 5_000  # jobs per enqueue_many call (the App splits it into script calls of 500)
EVENTS_CAP = 1_000
# XADD MAXLEN ~ trims whole stream nodes (stream-node-max-entries, 100 by default)
EVENTS_SLACK = 100
ALLOWED_GROWTH = 500_000  # "a few hundred kB" (measured +126 kB and +222 kB)


@pytest.fixture
async def app() -> AsyncIterator[App]:
    server = RedisProcess()
    server.start()
    # audit every transition, so the capped stream is really written to
    a = App(server.url, prefix="mem",
            settings=StoreSettings(audit_all=True, events_maxlen=EVENTS_CAP))
    try:
        yield a
    finally:
        await a.close()
        server.cleanup()


async def used_memory(app: App) -> int:
    info: dict[str, Any] = await app.redis.info("memory")
    return int(info["used_memory"])


async def leftovers(app: App) -> dict[str, int]:
    qk = app.keys("default")
    r = app.redis
    return {
        "jobs": await r.hlen(qk.jobs), "payloads": await r.hlen(qk.payloads),
        "results": await r.hlen(qk.results), "errors": await r.hlen(qk.errors),
        "done": await r.zcard(qk.done), "ready": await r.zcard(qk.ready) + await r.llen(qk.line),
        "leases": await r.zcard(qk.leases),
    }


async def all_gone(app: App) -> bool:
    return not any((await leftovers(app)).values())


async def succeeded(app: App, n: int) -> bool:
    return (await app.stats()).counters.get("succeeded", 0) >= n


async def test_memory_returns_to_baseline_after_100k_jobs(app: App) -> None:
    @app.job(retention=1)
    async def noop(ctx: Context) -> None:
        return None

    async with worker_running(app, concurrency=100, lease=5.0, reap_interval=0.2):
        # warm up: scripts loaded, stats hash and events stream created, one
        # job through and expired, so the baseline holds the fixed costs only
        await app.enqueue("noop", job_id="warm-up")
        await eventually(lambda: succeeded(app, 1), what="the warm-up job")
        await eventually(lambda: all_gone(app), limit=10, what="the warm-up job to expire")
        before = await used_memory(app)
        t0 = time.monotonic()

        async def produce() -> None:
            for start in range(0, JOBS, CHUNK):
                await app.enqueue_many(
                    [JobRequest("noop", job_id=f"m{i}")
                     for i in range(start, min(JOBS, start + CHUNK))])

        peak = before
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            while not await succeeded(app, JOBS + 1):
                peak = max(peak, await used_memory(app))
                assert time.monotonic() - t0 < 240, await app.stats()
                await anyio.sleep(0.2)
        ran_s = time.monotonic() - t0
        await eventually(lambda: all_gone(app), limit=30,
                         what="the finished records to expire after their retention")
        drained_s = time.monotonic() - t0 - ran_s
    # the worker has stopped: its connections and buffers are idle
    after = await used_memory(app)
    events = await app.redis.xlen(app.keys("default").events)
    print(f"\nmemory: {JOBS} jobs in {ran_s:.1f}s ({JOBS / ran_s:.0f}/s), expired "
          f"{drained_s:.1f}s later; used_memory before {before / 1e6:.2f} MB, peak "
          f"{peak / 1e6:.2f} MB, after {after / 1e6:.2f} MB ({(after - before) / 1e3:+.0f} kB); "
          f"events stream {events} entries (cap {EVENTS_CAP})")
    assert await leftovers(app) == dict.fromkeys(
        ("jobs", "payloads", "results", "errors", "done", "ready", "leases"), 0)
    assert events <= EVENTS_CAP + EVENTS_SLACK
    assert after - before <= ALLOWED_GROWTH


async def test_retention_keeps_pace_with_the_drain_under_load(app: App) -> None:
    """Finding 6: expiry by the reaper alone (about 2,000 records/s per worker
    and queue) fell behind a drain of 10k+ jobs/s, so finished records piled
    up during the load. The ack now trims expired records as work finishes:
    sampled *during* a sustained load, with the reaper's expiry out of the way
    (one tick a minute), the overdue backlog stays within a few ack batches."""
    jobs = min(JOBS, 30_000)

    @app.job(retention=0.5)
    async def noop(ctx: Context) -> None:
        return None

    qk = app.keys("default")
    overdue_max = 0
    async with worker_running(app, concurrency=100, lease=5.0, reap_interval=60):
        await app.enqueue("noop", job_id="warm-up")
        await eventually(lambda: succeeded(app, 1), what="the warm-up job")

        async def produce() -> None:
            step = 500  # a steady stream of small batches, not one burst
            for start in range(0, jobs, step):
                await app.enqueue_many(
                    [JobRequest("noop", job_id=f"s{i}")
                     for i in range(start, min(jobs, start + step))])
                await anyio.sleep(0.02)

        t0 = time.monotonic()
        samples = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            while not await succeeded(app, jobs + 1):
                sec, usec = await app.redis.time()
                now_ms = int(sec) * 1000 + int(usec) // 1000
                overdue_max = max(overdue_max, await app.redis.zcount(qk.done, "-inf", now_ms))
                samples += 1
                assert time.monotonic() - t0 < 120, await app.stats()
                await anyio.sleep(0.1)
    print(f"\nretention under load: {jobs} jobs, {samples} samples, "
          f"most overdue records at once {overdue_max}")
    assert samples >= 10
    # without trimming in the ack this grows with the load (about 25,000 here)
    assert overdue_max <= 3_000
