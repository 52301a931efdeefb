"""Redis at its maxmemory with the noeviction policy the worker insists on:
producers get a typed error (nothing half-written), and the workers go on
draining what is queued, since that is what frees memory. A job longer than
its lease must still keep its lease: renewing one does not grow memory."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.errors import LeaseQueueError
from leasequeue.store.keys import limit_keys
from leasequeue.store.specs import CancelStatus, LimiterAcquireReply, LimiterRenewReply
from tests.harness.redis_proc import RedisProcess
from tests.helpers import (
    DEFAULT_BUDGET,
    START_ALL,
    eventually,
    fail_job,
    new_claim_id,
    worker_running,
)

pytestmark = pytest.mark.anyio

Q = "default"


@pytest.fixture
async def app() -> AsyncIterator[App]:
    server = RedisProcess(extra=["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"])
    server.start()
    a = App(server.url, prefix="oom")
    try:
        yield a
    finally:
        await a.close()
        server.cleanup()


async def fill_up(app: App) -> None:
    """Put Redis over its maxmemory: lower the limit under what it already uses."""
    await app.redis.config_set("maxmemory", "100kb")
    with pytest.raises(LeaseQueueError, match="maxmemory"):
        await app.enqueue("noop", queue=Q, job_id="refused")
    assert not await app.redis.hexists(app.keys(Q).jobs, "refused")  # nothing half-written


async def test_queued_jobs_drain_when_redis_is_full(app: App) -> None:
    ran: list[str] = []

    @app.job(retention=0)
    async def noop(ctx: Context) -> None:
        ran.append(ctx.job_id)

    await app.enqueue_many([JobRequest("noop", job_id=f"q{i}") for i in range(50)])
    await fill_up(app)
    async with worker_running(app, lease=2.0):
        await eventually(lambda: _drained(app), limit=15, what="the queue to drain")
    assert sorted(ran) == sorted(f"q{i}" for i in range(50))
    assert (await app.stats(Q)).counters["succeeded"] == 50


async def _drained(app: App) -> bool:
    return await app.redis.hlen(app.keys(Q).jobs) == 0


async def test_long_job_keeps_its_lease_when_redis_is_full(app: App) -> None:
    runs: list[int] = []

    @app.job(max_attempts=3)
    async def long(ctx: Context) -> None:
        runs.append(ctx.token)
        await anyio.sleep(2.5)  # longer than the 1 s lease: only renewals keep it

    await app.enqueue("long", job_id="l")
    await fill_up(app)
    async with worker_running(app, lease=1.0, reap_interval=0.2):
        # until it succeeds, or until a lapsed lease has handed it out again
        await eventually(lambda: _settled_or_rerun(app, "l"), limit=20,
                         what="the long job to succeed or run again")
    rec = await app.get_job("l")
    assert (rec.state, rec.token, runs) == ("succeeded", 1, [1]), (rec, runs)


async def _settled_or_rerun(app: App, job_id: str) -> bool:
    rec = await app.get_job(job_id)
    return rec.state in ("succeeded", "dead") or rec.token > 1




@pytest.mark.parametrize("step", [
    "claim", "ack-succeeded", "fail", "release", "reap",
    "renew", "ack-canceled", "ack-succeeded-audited",
])
async def test_settling_scripts_work_when_redis_is_full(app: App, step: str) -> None:
    """Every script a worker needs to finish what it holds frees memory or keeps
    it level, so none may be refused by the maxmemory guard."""
    from leasequeue.store.scripts import Scripts
    from leasequeue.store.settings import StoreSettings
    from tests.helpers import expire_lease

    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"o{i}", queue=Q) for i in range(2)])
    held = [] if step == "claim" else (await app.scripts.claim(qk, 1, 60_000, "w",
                                                               START_ALL, new_claim_id())).jobs
    if step == "reap":
        await expire_lease(app, Q, held[0].id)  # a plain ZADD: before Redis is full
    await fill_up(app)
    scripts = app.scripts
    if step == "ack-succeeded-audited":
        scripts = Scripts(app.redis, app.url, StoreSettings(audit_all=True))
    if step == "claim":
        assert len((await scripts.claim(qk, 1, 60_000, "w", START_ALL, new_claim_id())).jobs) == 1
    elif step == "renew":
        assert await scripts.renew(qk, [(held[0].id, held[0].token)], 60_000) == [1]
    elif step.startswith("ack"):
        outcome = "canceled" if step == "ack-canceled" else "succeeded"
        assert await scripts.ack(qk, outcome, 60_000, [(held[0].id, held[0].token, b"", "")]) == [1]
    elif step == "fail":
        assert (await fail_job(app, qk, held[0].id, held[0].token, "work", "", "e", 0)).code == 1
    elif step == "release":
        assert await scripts.release(qk, [(held[0].id, held[0].token)], 0, "t") == [1]
    else:
        assert (await scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)).requeued == 1


@pytest.mark.parametrize("step", ["expire", "cancel"])
async def test_expire_and_cancel_work_when_redis_is_full(app: App, step: str) -> None:
    """The reaper's expiry (deletes what retention let go) and an operator's
    cancel must run over maxmemory too: both free memory or keep it level."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"o{i}", queue=Q) for i in range(2)])
    held = (await app.scripts.claim(qk, 1, 60_000, "w", START_ALL, new_claim_id())).jobs
    if step == "expire":  # a finished record, then its retention moved into the past
        done = [(held[0].id, held[0].token, b"", "")]
        assert await app.scripts.ack(qk, "succeeded", 60_000, done) == [1]
        await app.redis.zadd(qk.done, {held[0].id: 1})  # a plain ZADD: before Redis is full
    await fill_up(app)
    if step == "expire":
        assert await app.scripts.expire(qk, 10) == 1
        assert not await app.redis.hexists(qk.jobs, held[0].id)
    else:  # a queued job is canceled at once; the leased one gets a cancel request
        assert (await app.scripts.cancel(qk, "o1"))[0] is CancelStatus.CANCELED
        assert (await app.scripts.cancel(qk, held[0].id))[0] in (
            CancelStatus.CANCELED, CancelStatus.CANCEL_REQUESTED)


@pytest.mark.parametrize("step", ["acquire", "renew", "release"])
async def test_the_limiter_works_when_redis_is_full(app: App, step: str) -> None:
    """Taking, renewing and giving back a limiter slot over maxmemory (taking a
    slot on a new limit key grows memory by a few bytes: allow-oom lets it)."""
    lk = limit_keys("oom:limiter", "job.j")
    if step != "acquire":
        taken = await app.scripts.limiter_acquire(lk, "h1", 1, 60_000, False)
        assert taken[0] is LimiterAcquireReply.TAKEN
    await fill_up(app)
    if step == "acquire":
        taken = await app.scripts.limiter_acquire(lk, "h1", 1, 60_000, False)
        assert taken[0] is LimiterAcquireReply.TAKEN
    elif step == "renew":
        assert await app.scripts.limiter_renew(lk, ["h1"], 60_000) == [LimiterRenewReply.RENEWED]
    else:
        assert await app.scripts.limiter_release(lk, ["h1"]) == 1
        assert not await app.redis.exists(lk.limit)
