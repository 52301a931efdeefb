"""An idle worker's wait carries its next claim (Claimer._wait_then_claim,
Lane.blpop_then): a job enqueued while the worker waits reaches it leased,
with no claim sent after the wake-up; a stop ends the wait at once; a
script flushed meanwhile is loaded again; a lost reply is claimed again
under the same claim id."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
import redis as redis_sync

from leasequeue import App, JobRequest, Worker
from leasequeue.store import direct
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio


def _register(app: App, ran: list[str]) -> None:
    async def j(ctx: Any) -> None:
        ran.append(ctx.job_id)

    app.job(j, name="j")


async def _waiting(worker: Worker) -> None:
    await eventually(lambda: worker.claimer._wait_scope is not None, what="the claimer waits")


async def test_a_job_enqueued_during_the_wait_arrives_leased_without_a_claim_after_it(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    app = real_app
    ran: list[str] = []
    _register(app, ran)
    by_claim: list[str] = []  # jobs a claim sent after a wake-up leased
    by_wait: list[str] = []  # jobs the claim behind a wait leased
    claim, wait_then_claim = app.scripts.claim, app.scripts.wait_then_claim

    async def plain(*args: Any, **kwargs: Any) -> Any:
        batch = await claim(*args, **kwargs)
        by_claim.extend(j.id for j in batch.jobs)
        return batch

    async def behind(*args: Any, **kwargs: Any) -> Any:
        batch = await wait_then_claim(*args, **kwargs)
        by_wait.extend(j.id for j in batch.jobs)
        return batch

    monkeypatch.setattr(app.scripts, "claim", plain)
    monkeypatch.setattr(app.scripts, "wait_then_claim", behind)
    async with worker_running(app, concurrency=2) as worker:
        assert worker.claimer._pipelined
        await _waiting(worker)
        job = await app.enqueue("j")
        await eventually(lambda: job.id in ran, what="the job ran")
        assert by_wait == [job.id] and by_claim == []
        assert (await app.get_job(job.id)).attempt == 1


def _count_claims(app: App, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Each claim call's job count, by kind: "plain" (a claim sent alone)
    and "behind" (the claim behind an idle wait)."""
    calls: dict[str, list[int]] = {"plain": [], "behind": []}
    claim, wait_then_claim = app.scripts.claim, app.scripts.wait_then_claim

    async def plain(*args: Any, **kwargs: Any) -> Any:
        batch = await claim(*args, **kwargs)
        calls["plain"].append(len(batch.jobs))
        return batch

    async def behind(*args: Any, **kwargs: Any) -> Any:
        batch = await wait_then_claim(*args, **kwargs)
        calls["behind"].append(len(batch.jobs))
        return batch

    monkeypatch.setattr(app.scripts, "claim", plain)
    monkeypatch.setattr(app.scripts, "wait_then_claim", behind)
    return calls


async def test_jobs_that_trickle_in_cost_no_claim_beyond_the_one_behind_the_wait(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """One job at a time reaching an idle worker: the claim behind the wait
    leases it and empties the line, so the worker waits again at once, with
    no claim sent alone after the wake-up (it would find nothing: a Redis
    call per job)."""
    app = real_app
    ran: list[str] = []
    _register(app, ran)
    calls = _count_claims(app, monkeypatch)
    async with worker_running(app, concurrency=4) as worker:
        await _waiting(worker)
        calls["plain"].clear()  # the claim a worker sends as it starts
        for _ in range(5):
            await _waiting(worker)
            job = await app.enqueue("j")
            await eventually(lambda j=job.id: j in ran, what="the job ran")
        await _waiting(worker)
        assert calls["plain"] == []
        assert sum(calls["behind"]) == 5


async def test_a_wait_whose_claim_comes_back_full_claims_again_at_once(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim behind the wait took as many jobs as the worker had free
    slots: more may be queued, so the next claims are sent as slots free,
    not after another wait (a queue's tokens are capped: fewer than its
    jobs)."""
    app = real_app
    ran: list[str] = []
    _register(app, ran)
    calls = _count_claims(app, monkeypatch)
    async with worker_running(app, concurrency=2) as worker:
        await _waiting(worker)
        # one script call: the wait's claim finds all six in the line
        jobs = await app.enqueue_many([JobRequest("j") for _ in range(6)])
        await eventually(lambda: len(ran) == 6, what="the six jobs ran")
        assert sorted(ran) == sorted(j.id for j in jobs)
        assert calls["behind"][0] == 2 and sum(calls["behind"]) == 2
        assert sum(calls["plain"]) == 4


async def test_a_job_the_wait_hands_over_starts_before_the_wait_returns(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim behind the wait hands its jobs over and lets their executors
    start them before the wait returns to the claim loop (the claimer does
    both inside the wait's shielded scope): the scope's exit and the way back
    are not on an idle worker's path to its handler."""
    app = real_app
    returned: list[int] = []  # each wait that handed jobs over, once it returned
    seen: list[int] = []  # at each handler's start: how many had returned
    handed: list[str] = []

    async def j(ctx: Any) -> None:
        seen.append(len(returned))
        handed.append(ctx.job_id)

    app.job(j, name="j")
    worker = Worker(app, concurrency=2, lease=30.0, shutdown_timeout=5.0)
    wait_then_claim = worker.claimer._wait_then_claim

    async def timed(*args: Any, **kwargs: Any) -> Any:
        got = await wait_then_claim(*args, **kwargs)
        if got[0]:
            returned.append(got[0])
        return got

    monkeypatch.setattr(worker.claimer, "_wait_then_claim", timed)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        for _ in range(3):
            await _waiting(worker)
            job = await app.enqueue("j")
            await eventually(lambda j=job.id: j in handed and returned, what="the job ran")
        worker.stop()
    assert seen == [0, 1, 2] and returned == [1, 1, 1]


async def test_a_stop_ends_the_idle_wait_at_once(real_app: App) -> None:
    """The wait is shielded (a claim is never cut on the wire); interrupt()
    puts a token on the worker's own wake list, so the worker stops well
    before the wait's own timeout (1 s)."""
    app = real_app
    _register(app, [])
    worker = Worker(app, concurrency=2, lease=30.0, shutdown_timeout=5.0)  # 1 s waits
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await _waiting(worker)
        await anyio.sleep(0.05)  # the BLPOP is in Redis
        started = time.monotonic()
        worker.stop()
    assert time.monotonic() - started < 0.5
    assert (await app.stats("default")).leased == 0


async def test_a_token_for_another_worker_is_not_taken_by_a_stop(real_app: App) -> None:
    """A stop wakes only its own worker: the queue's wake list keeps its
    tokens for the others."""
    app = real_app
    _register(app, [])
    qk = app.keys("default")
    async with worker_running(app, concurrency=1) as worker:
        await _waiting(worker)
    assert await app.redis.llen(qk.wake) == 0
    own = qk.wake_own(worker.worker_id)
    assert await app.redis.pttl(own) in (-2, *range(0, 10_001))  # gone, or expiring


async def test_a_script_flushed_during_the_wait_is_loaded_again(
        real_app: App, sync_redis: redis_sync.Redis) -> None:
    app = real_app
    ran: list[str] = []
    _register(app, ran)
    async with worker_running(app, concurrency=2) as worker:
        await _waiting(worker)
        await anyio.sleep(0.05)
        sync_redis.script_flush()  # the claim behind the BLPOP answers NOSCRIPT
        job = await app.enqueue("j")
        await eventually(lambda: job.id in ran, what="the job ran")
        assert (await app.get_job(job.id)).attempt == 1


async def test_a_lost_wait_reply_claims_again_under_the_same_claim_id(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection is lost after the wait's claim ran (its reply never
    read): the next claim goes with the same claim id, and Redis answers
    with the jobs that claim leased, so the job runs once, with one
    attempt."""
    app = real_app
    ran: list[str] = []
    _register(app, ran)
    read = direct._read
    lost = 0

    async def losing(conn: Any, wait: float = 0.0) -> Any:
        nonlocal lost
        reply = await read(conn, wait)
        if wait == 0.0 and not lost and isinstance(reply, list) and len(reply) > 3:
            lost += 1  # a claim reply with a job: dropped on the floor
            raise direct.RedisConnectionError("lost")
        return reply

    async with worker_running(app, concurrency=2) as worker:
        await _waiting(worker)
        monkeypatch.setattr(direct, "_read", losing)
        job = await app.enqueue("j")
        await eventually(lambda: job.id in ran, what="the job ran")
        assert lost == 1
        assert ran.count(job.id) == 1
        assert (await app.get_job(job.id)).attempt == 1


async def test_a_job_arriving_at_the_end_of_a_long_wait_keeps_its_lease(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait's claim dates its lease from the send (the lease begins at
    the wake, later), so the wait lasts at most a quarter lease: with a 1 s
    lease a job that comes 0.9 s into the idle time arrives with three
    quarters of its lease left by the worker's clock, starts (a run starts
    with a third left, no less), runs for longer than a lease, renewed, and
    succeeds from its first claim."""
    app = real_app
    done: list[str] = []

    async def slow(ctx: Any) -> None:
        await anyio.sleep(1.5)
        done.append(ctx.job_id)

    app.job(slow, name="slow")
    released: list[Any] = []
    release = app.scripts.release

    async def counted(*args: Any, **kwargs: Any) -> Any:
        released.append(args)
        return await release(*args, **kwargs)

    monkeypatch.setattr(app.scripts, "release", counted)
    async with worker_running(app, concurrency=1, lease=1.0) as worker:
        for _ in range(3):
            await _waiting(worker)
            # where a 1 s wait (IDLE_POLL) would near its end: its claim's
            # lease would be dated 0.9 s before the job came
            await anyio.sleep(0.9)
            job = await app.enqueue("slow")
            await eventually(lambda j=job.id: j in done, what="the slow job finished")
            rec = await app.get_job(job.id)
            assert (rec.state, rec.attempt) == ("succeeded", 1)
            # not refused first for too little lease left (it would have gone
            # back to the queue through release)
            assert released == []


async def test_an_error_reply_to_the_wait_keeps_the_connection_in_step(real_app: App) -> None:
    """The BLPOP answered with an error (here WRONGTYPE: the worker's own wake
    list holds a string): the claim's reply behind it is read too, so the
    next call on the connection gets its own reply; the claim did run, and
    claiming again with its claim id returns its jobs."""
    from leasequeue.errors import LeaseQueueError
    app = real_app
    qk = app.keys("default")
    await app.enqueue("j", job_id="x", queue="default")
    await app.redis.delete(qk.wake)  # no token: the BLPOP reads the other list
    await app.redis.set(qk.wake_own("w1"), "not a list")
    with pytest.raises(LeaseQueueError):
        await app.scripts.wait_then_claim(qk, [qk.wake, qk.wake_own("w1")], 0.1, 5, 30_000,
                                          "w1", 0, "c1")
    other = await app.scripts.claim(qk, 5, 30_000, "w2", 0, "c2")
    assert other.jobs == []  # not w1's reply, read late
    again = await app.scripts.claim(qk, 5, 30_000, "w1", 0, "c1")
    assert [j.id for j in again.jobs] == ["x"]


async def test_a_stop_that_cannot_send_its_token_cancels_the_wait(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """interrupt() cannot reach Redis (its pipeline fails): it cancels the
    wait where it is (the lane drops that connection) instead of leaving the
    stop to wait for the wait's own end."""
    app = real_app
    _register(app, [])
    worker = Worker(app, concurrency=2, lease=30.0, shutdown_timeout=5.0)  # 1 s waits

    def unreachable() -> Any:
        raise ConnectionError("Redis unreachable")

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await _waiting(worker)
        await anyio.sleep(0.05)
        monkeypatch.setattr(app.redis, "pipeline", unreachable)
        started = time.monotonic()
        worker.stop()
    assert time.monotonic() - started < 0.5
