"""Limits: the limiter scripts on their own, in-process workers applying
skip / enqueue / replace, and worker processes sharing a Redis limiter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis as redis_sync

from leasequeue import App, Context, LocalLimiter, RedisLimiter, RedisUnavailable, Worker
from leasequeue.runtime.limits import job_limit_name
from leasequeue.store.connection import connect
from leasequeue.store.keys import limit_keys, queue_keys
from leasequeue.store.record import parse_record
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.helpers import server_ms, worker_running

pytestmark = pytest.mark.anyio


# -- the limiter on its own ----------------------------------------------------


async def test_redis_limiter_take_renew_release_replace(app: App) -> None:
    lim = RedisLimiter(lease=10)
    lim.bind(app.redis, app.url, app.prefix)
    assert (await lim.acquire("job.x", 2, "a", False)).taken
    assert (await lim.acquire("job.x", 2, "a", False)).taken  # already held: idempotent
    assert (await lim.acquire("job.x", 2, "b", False)).taken
    assert not (await lim.acquire("job.x", 2, "c", False)).taken
    assert await lim.renew("job.x", ["a", "b", "c"]) == [True, True, False]
    grant = await lim.acquire("job.x", 2, "c", True)
    assert grant.taken and grant.evicted in ("a", "b")
    await lim.release("job.x", ["c", "c"])
    assert (await lim.acquire("job.x", 2, "d", False)).taken


async def test_a_lapsed_holder_frees_its_slot_on_the_server_clock(app: App) -> None:
    lim = RedisLimiter(lease=10)
    lim.bind(app.redis, app.url, app.prefix)
    assert (await lim.acquire("job.x", 1, "dead-holder", False)).taken
    assert not (await lim.acquire("job.x", 1, "next", False)).taken
    key = limit_keys(f"{app.prefix}:limiter", "job.x").limit
    await app.redis.zadd(key, {"dead-holder": await server_ms(app) - 1}, xx=True)
    assert (await lim.acquire("job.x", 1, "next", False)).taken
    assert await app.redis.zrange(key, 0, -1) == [b"next"]


async def test_two_services_with_the_same_limiter_prefix_share_a_limit(
        redis_server: RedisProcess, prefix: str) -> None:
    a = App(redis_server.url, prefix=f"{prefix}a",
            limiter=RedisLimiter(prefix=f"{prefix}:shared"))
    b = App(redis_server.url, prefix=f"{prefix}b",
            limiter=RedisLimiter(prefix=f"{prefix}:shared"))
    try:
        assert (await a.limiter.acquire("job.sync", 1, "from-a", False)).taken
        assert not (await b.limiter.acquire("job.sync", 1, "from-b", False)).taken
        await a.limiter.release("job.sync", ["from-a"])
        assert (await b.limiter.acquire("job.sync", 1, "from-b", False)).taken
    finally:
        await a.close()
        await b.close()


async def test_local_limiter_counts_in_process() -> None:
    lim = LocalLimiter()
    assert (await lim.acquire("job.x", 1, "a", False)).taken
    assert not (await lim.acquire("job.x", 1, "b", False)).taken
    assert (await lim.acquire("job.x", 1, "b", True)).evicted == "a"


async def test_redis_limiter_refuses_to_boot_without_redis(real_app: App) -> None:
    from tests.harness.redis_proc import free_port

    @real_app.job(max_concurrent=1)
    async def only_one(ctx: Context) -> None:
        return None

    worker = Worker(real_app, limiter=RedisLimiter(f"redis://127.0.0.1:{free_port()}/0"))
    with pytest.raises(RedisUnavailable, match="unreachable"):
        await worker.run()


# -- in-process workers: skip, enqueue, replace ---------------------------------


def running(app: App, **options: Any) -> AbstractAsyncContextManager[Worker]:
    options.setdefault("shutdown_timeout", 1.0)
    return worker_running(app, **options)


async def until_state(app: App, job_id: str, state: str, limit: float = 10) -> Any:
    with anyio.fail_after(limit):
        while True:
            rec = await app.get_job(job_id)
            if rec.state == state:
                return rec
            await anyio.sleep(0.02)


@pytest.mark.parametrize("limiter", ["local", "redis"])
async def test_skip_finishes_the_second_run_as_skipped(real_app: App, limiter: str) -> None:
    app = real_app
    app.limiter = LocalLimiter() if limiter == "local" else RedisLimiter()
    app.limiter.bind(app.redis, app.url, app.prefix)
    release = anyio.Event()

    @app.job(max_concurrent=1, on_conflict="skip")
    async def report(ctx: Context) -> str:
        await release.wait()
        return "done"

    await app.enqueue("report", job_id="first")
    async with running(app):
        await until_state(app, "first", "leased")
        await app.enqueue("report", job_id="second")
        rec = await until_state(app, "second", "skipped")
        release.set()
        await until_state(app, "first", "succeeded")
    assert rec.attempt == 1


async def test_enqueue_returns_the_run_with_its_attempt_refunded(real_app: App) -> None:
    app = real_app
    release = anyio.Event()
    seen: list[tuple[str, int]] = []

    @app.job(max_concurrent=1, on_conflict="enqueue", slot_backoff=0.2)
    async def sync_account(ctx: Context) -> None:
        seen.append((ctx.job_id, ctx.attempt))
        await release.wait()

    await app.enqueue("sync_account", job_id="first")
    async with running(app):
        await until_state(app, "first", "leased")
        await app.enqueue("sync_account", job_id="second")
        rec = await until_state(app, "second", "scheduled")  # waiting out slot_backoff
        assert rec.attempt == 0 and rec.token >= 1  # claimed once, attempt refunded
        release.set()
        await until_state(app, "second", "succeeded")
    assert seen == [("first", 1), ("second", 1)]


async def test_replace_cancels_the_older_run(real_app: App) -> None:
    app = real_app
    started: list[str] = []

    @app.job(max_concurrent=1, on_conflict="replace")
    async def rebuild(ctx: Context) -> None:
        started.append(ctx.job_id)
        await anyio.sleep(30)

    await app.enqueue("rebuild", job_id="old")
    async with running(app, lease=1.0):
        await until_state(app, "old", "leased")
        assert started == ["old"]
        await app.enqueue("rebuild", job_id="new")
        await until_state(app, "old", "canceled")
        rec = await until_state(app, "new", "leased")
        assert started == ["old", "new"] and rec.attempt == 1


# -- worker processes ------------------------------------------------------------


@pytest.fixture
def procs(redis_server: RedisProcess, prefix: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(redis_server.url, prefix, tmp_path) as p:
        yield p


def runs(r: redis_sync.Redis, prefix: str, name: str) -> list[tuple[int, int, str]]:
    """(start, end, job) intervals in server microseconds, from the runs log."""
    starts: dict[tuple[str, str], int] = {}
    out = []
    for raw in r.lrange(f"{prefix}:test:runs", 0, -1):
        edge, job_name, job, token, _worker, at = raw.decode().split()
        if job_name != name:
            continue
        if edge == "start":
            starts[(job, token)] = int(at)
        else:
            out.append((starts.pop((job, token)), int(at), job))
    return sorted(out)


def most_at_once(intervals: list[tuple[int, int, str]]) -> int:
    edges = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals],
                   key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def enqueue_sync(url: str, prefix: str, name: str, n: int, seconds: float) -> None:
    from leasequeue import JobRequest

    async def go() -> None:
        app = App(url, prefix=prefix)
        queue = "heavy" if name == "heavy" else "default"
        await app.enqueue_many([JobRequest(name, {"seconds": seconds}, queue=queue)
                                for _ in range(n)])
        await app.close()

    anyio.run(go)


@pytest.mark.parametrize("limiter", ["redis", "local"])
def test_max_concurrent_one_across_two_processes(
        procs: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str, limiter: str) -> None:
    enqueue_sync(procs.url, prefix, "single", 12, 0.15)
    env = {"LQ_LIMITER": limiter, "LQ_LIMITER_PREFIX": f"{prefix}:lim"}
    for n in (1, 2):
        procs.start(f"w{n}", "--concurrency", "4", "--lease", "5",
                    app="tests.harness.apps.limits_app:app", env=env)
    wait_for(lambda: len(runs(sync_redis, prefix, "single")) == 12, timeout=60,
             what="12 runs of the singleton")
    peak = most_at_once(runs(sync_redis, prefix, "single"))
    if limiter == "redis":
        assert peak == 1  # one at a time across both processes
    else:
        assert peak == 2  # the documented per-process meaning of the in-process limiter


def test_queue_limit_two_across_three_processes(
        procs: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str) -> None:
    enqueue_sync(procs.url, prefix, "heavy", 15, 0.15)
    env = {"LQ_LIMITER": "redis", "LQ_LIMITER_PREFIX": f"{prefix}:lim"}
    for n in (1, 2, 3):
        procs.start(f"w{n}", "--concurrency", "4", "--lease", "5",
                    app="tests.harness.apps.limits_app:app", env=env)
    wait_for(lambda: len(runs(sync_redis, prefix, "heavy")) == 15, timeout=60,
             what="15 runs of the heavy queue")
    assert most_at_once(runs(sync_redis, prefix, "heavy")) == 2


def test_a_killed_holder_frees_its_slot_after_the_limiter_lease(
        procs: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str) -> None:
    """The slot of a killed holder is free once its limiter lease lapses (2 s,
    though the dead holder's job lease has 30 s), and not before: a second
    worker already contending for it starts its run only after the lapse."""
    enqueue_sync(procs.url, prefix, "single", 1, 60)  # the holder: runs a minute
    env = {"LQ_LIMITER": "redis", "LQ_LIMITER_PREFIX": f"{prefix}:lim",
           "LQ_LIMITER_LEASE": "2"}
    # concurrency 1: the holder cannot claim the short job while it runs
    procs.start("holder", "--concurrency", "1", "--lease", "30",
                app="tests.harness.apps.limits_app:app", env=env)
    wait_for(lambda: runs_started(sync_redis, prefix) == 1, timeout=20, what="holder start")
    procs.start("next", "--concurrency", "2", "--lease", "30",
                app="tests.harness.apps.limits_app:app", env=env)
    enqueue_sync(procs.url, prefix, "single", 1, 0.05)
    # the next worker is up and has claimed the short job (it waits for the slot)
    wait_for(lambda: "next" in workers_of(sync_redis, prefix), timeout=20,
             what="the next worker to claim the short job")
    procs.kill("holder")
    slot = limit_keys(f"{prefix}:lim", job_limit_name("single")).limit
    held = sync_redis.zrange(slot, 0, -1, withscores=True)
    assert [h for h, _ in held if b'"holder"]' in h], held  # the dead holder's slot is there
    lapses_ms = max(score for h, score in held if b'"holder"]' in h)
    wait_for(lambda: len(runs(sync_redis, prefix, "single")) == 1, timeout=20,
             what="the next run after the slot lapsed")
    ((start_us, _, _),) = runs(sync_redis, prefix, "single")
    assert start_us >= lapses_ms * 1000, "the next run started while the dead holder's slot held"


def workers_of(r: redis_sync.Redis, prefix: str) -> set[str]:
    """The workers named on the default queue's job records (holder of the last lease)."""
    raws = r.hvals(queue_keys(prefix, "default").jobs)
    return {str(parse_record(raw)["worker"]) for raw in raws}


def runs_started(r: redis_sync.Redis, prefix: str) -> int:
    return sum(1 for x in r.lrange(f"{prefix}:test:runs", 0, -1) if x.startswith(b"start"))


async def test_limiter_redis_outage_means_no_slot_and_work_resumes(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    app = real_app
    limiter_redis = RedisProcess()
    limiter_redis.start()
    # the test owns the limiter's client, so it can close it (RedisLimiter has no close)
    client = connect(limiter_redis.url)
    try:
        limiter = RedisLimiter(limiter_redis.url, lease=5, redis=client)

        @app.job(max_concurrent=1, on_conflict="skip")
        async def report(ctx: Context) -> str:
            return "ran"

        @app.job(max_concurrent=1, on_conflict="enqueue", slot_backoff=0.1, max_attempts=1)
        async def sync(ctx: Context) -> str:
            return "ran"

        caplog.set_level(logging.INFO, logger="leasequeue")
        async with running(app, limiter=limiter) as worker:
            await worker.ready.wait()
            limiter_redis.stop()  # the limiter's Redis goes away mid-run
            await app.enqueue("report", job_id="r")
            await app.enqueue("sync", job_id="s")
            await until_state(app, "r", "skipped")
            rec = await until_state(app, "s", "scheduled")  # delayed, nothing lost
            assert rec.attempt == 0
            limiter_redis.start()  # back on the same port
            rec = await until_state(app, "s", "succeeded", limit=20)
        assert rec.attempt == 1 and rec.result == "ran"  # the refunds kept max_attempts=1 ok
        messages = [r.getMessage() for r in caplog.records]
        assert "limiter unavailable: counted as no slot free" in messages
        assert "skipped: no slot free" in messages
    finally:
        await client.aclose()
        limiter_redis.cleanup()


async def test_replace_never_cancels_another_job_holding_a_queue_slot(real_app: App) -> None:
    app = real_app
    app.queue_limits = {"default": 1}
    release = anyio.Event()

    @app.job(on_conflict="enqueue", slot_backoff=0.2)
    async def report(ctx: Context) -> None:
        await release.wait()

    @app.job(max_concurrent=1, on_conflict="replace", slot_backoff=0.2)
    async def rebuild(ctx: Context) -> None:
        return None

    await app.enqueue("report", job_id="other")
    async with running(app):
        await until_state(app, "other", "leased")
        await app.enqueue("rebuild", job_id="r")
        # the queue slot is full: replace applies to rebuild's own limit only
        await until_state(app, "r", "scheduled")
        assert (await app.get_job("other")).state == "leased"
        assert not (await app.get_job("other")).cancel_requested
        release.set()
        await until_state(app, "other", "succeeded")
        await until_state(app, "r", "succeeded", limit=15)
