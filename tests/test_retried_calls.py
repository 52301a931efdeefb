"""A script call whose reply was lost after it ran (its connection dropped)
is sent again once by the lane, so each script must answer a second run
of the same call consistently, or the call must go once. Found by a
review (2026-12-07), where every script was taken to be safe so:

- a rate refund (lua/rate.lua, mode refund) goes once: sent again, it gave
  each start back twice, and the key let one more start in than its rate;
- a rate try (on_conflict="skip") goes once: sent again, it found the start
  it took spent, answered DENIED, and its job was skipped within its rate;
- a take is still sent again: it spends a start more, the safe side;
- a limiter renew of a holder a `replace` evicted answers EVICTED as long
  as the marker stays: taking the marker on the first answer made the
  second LOST, and the replaced run was failed and run again instead of
  canceled.

Since then (each test below names what it holds): an ack, a failure, a
re-run and a schedule's fire sent again are answered as their first run
was (a release is not: it leaves no mark of its own, README), and an
enqueue of a job whose id this process drew tells its caller created."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from leasequeue import App, JobRequest, SyncApp
from leasequeue.errors import RedisUnavailable
from leasequeue.runtime.scheduler import Scheduler, SchedulerParams
from leasequeue.schedule_spec import fire_job_id, make_spec
from leasequeue.store import direct, sync_lane
from leasequeue.store.keys import limit_keys, rate_keys, schedules_keys
from leasequeue.store.specs import (
    AckReply,
    FailReply,
    LimiterAcquireReply,
    LimiterRenewReply,
    RateReply,
    ScheduleFireReply,
)
from tests.helpers import DEFAULT_BUDGET, expire_lease, fail_job, new_claim_id, server_ms

pytestmark = pytest.mark.anyio

SECOND = 1_000_000  # one start a second, a burst of 3: three starts allowed now
INTERVAL, TOLERANCE = SECOND, 2 * SECOND


def _reply_lost_once(monkeypatch: pytest.MonkeyPatch, nth: int = 1) -> list[Any]:
    """The ``nth`` reply the lane reads from now comes in, and its
    connection drops with it (the script ran; its caller never learns so)."""
    real_read, real_spinning = direct._read, direct._read_spinning
    lost: list[Any] = []
    reads = [0]

    def losing(reply: Any) -> Any:
        reads[0] += 1
        if reads[0] == nth:
            lost.append(reply)
            raise direct.RedisConnectionError("Connection reset by peer")
        return reply

    async def read(conn: Any, wait: float = 0.0) -> Any:
        return losing(await real_read(conn, wait))

    async def read_spinning(conn: Any, *args: Any) -> Any:  # (a one-job call's reply)
        return losing(await real_spinning(conn, *args))

    monkeypatch.setattr(direct, "_read", read)
    monkeypatch.setattr(direct, "_read_spinning", read_spinning)
    return lost


async def test_a_refund_whose_reply_was_lost_gives_its_start_back_once(
        real_app: App, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = real_app.scripts
    rk = rate_keys(f"{prefix}:lim", "api")
    taken = await scripts.rate(rk, ["job-1", "job-2"], INTERVAL, TOLERANCE, "take")
    assert [code for code, _ in taken.answers] == [1, 1] and taken.tokens == 1
    lost = _reply_lost_once(monkeypatch)
    with pytest.raises(RedisUnavailable):  # not sent again: the caller is told
        await scripts.rate(rk, ["job-1"], INTERVAL, TOLERANCE, "refund")
    monkeypatch.undo()
    assert lost  # it ran, and its reply was lost
    after = await scripts.rate(rk, [], INTERVAL, TOLERANCE, "peek")
    assert after.tokens == 2  # one start back, not two


async def test_a_take_whose_reply_was_lost_is_sent_again_and_errs_on_the_safe_side(
        real_app: App, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = real_app.scripts
    rk = rate_keys(f"{prefix}:lim", "api")
    lost = _reply_lost_once(monkeypatch)
    answer = await scripts.rate(rk, ["job-1"], INTERVAL, TOLERANCE, "take")
    monkeypatch.undo()
    assert lost and [code for code, _ in answer.answers] == [1]  # answered, once
    after = await scripts.rate(rk, [], INTERVAL, TOLERANCE, "peek")
    assert after.tokens == 1  # two starts spent for one: fewer, never more, than the rate


async def test_a_try_whose_reply_was_lost_is_not_sent_again_to_deny_what_it_took(
        real_app: App, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = real_app.scripts
    rk = rate_keys(f"{prefix}:lim", "api")
    # a burst of 1: the try takes the one start; sent again it would be DENIED
    lost = _reply_lost_once(monkeypatch)
    with pytest.raises(RedisUnavailable):  # the worker: limiter unavailable, not skipped
        await scripts.rate(rk, ["job-1"], INTERVAL, 0, "try")
    monkeypatch.undo()
    assert lost and RateReply(int(lost[0][0])) is RateReply.TAKEN  # what it answered
    after = await scripts.rate(rk, [], INTERVAL, 0, "peek")
    assert after.tokens == 0  # the start stays spent: one, not two


async def test_a_renew_of_an_evicted_holder_sent_again_is_told_evicted_again(
        real_app: App, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = real_app.scripts
    lk = limit_keys(f"{prefix}:limiter", "job.x")
    assert (await scripts.limiter_acquire(lk, "old", 1, 30_000, False))[0] is \
        LimiterAcquireReply.TAKEN
    assert await scripts.limiter_acquire(lk, "new", 1, 30_000, True) == (
        LimiterAcquireReply.EVICTED, "old")
    lost = _reply_lost_once(monkeypatch)
    answer = await scripts.limiter_renew(lk, ["old"], 30_000)
    monkeypatch.undo()
    assert lost and [int(x) for x in lost[0]] == [LimiterRenewReply.EVICTED]
    assert answer == [LimiterRenewReply.EVICTED]  # the second run's: evicted, not lost


async def test_a_failed_give_back_of_expired_starts_ahead_spares_the_take_behind_it() -> None:
    """The starts a worker was granted ahead and did not spend in time go
    back before its next take (one refund call, sent once): when that
    refund fails (a stale connection after a restart), the starts stay
    spent and the take is sent all the same, instead of failing every run
    of the batch as if the limiter were down."""
    from leasequeue.rate import Rate
    from leasequeue.runtime.rates import Rates, RatesParams, RateUse, _Batch, _Pool
    from leasequeue.store.scripts import RateAnswer

    calls: list[str] = []

    class Counter:
        async def call(self, name: str, key: str | None, holders: list[str], interval_us: int,
                       tolerance_us: int, mode: str, push_us: int = 0,
                       ahead: int = 0) -> RateAnswer:
            calls.append(mode)
            if mode == "refund":
                raise RedisUnavailable("redis://127.0.0.1:1", ConnectionError("stale"))
            return RateAnswer([(RateReply.TAKEN, 0)] * len(holders), 10, 0, 0)

    class Limiter:
        rates = Counter()

    rates = Rates(RatesParams(Limiter(), {}, "p"))  # type: ignore[arg-type]
    use = RateUse("job.j", None, Rate(100, 1.0, burst=32))
    rates._pools[(use.name, use.key)] = _Pool(8, 0.0)  # granted ahead, expired unspent
    batch = _Batch()
    batch.holders.append("p/q/j1")
    await rates._lead(use, "take", batch)
    assert calls == ["refund", "take"]
    assert batch.answers == [(RateReply.TAKEN, 0)]


async def test_an_ack_whose_reply_was_lost_is_answered_finished_when_sent_again(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ack ran and its reply was lost; the lane sends it again, and the
    second run finds the job this token's run finished: FINISHED, not
    REFUSED (the worker logged `lease lost` and told hooks `lost` for a run
    whose result was stored), and nothing written twice."""
    app = real_app
    qk = app.keys("default")
    await app.enqueue("j", job_id="a")
    (job,) = (await app.scripts.claim(qk, 1, 30_000, "w1", 1, new_claim_id())).jobs
    lost = _reply_lost_once(monkeypatch)
    answer = await app.scripts.ack(qk, "succeeded", 60_000, [("a", job.token, b"\xa2ok", "")])
    monkeypatch.undo()
    assert lost and [int(x) for x in lost[0]] == [AckReply.FINISHED]  # the first run's
    assert answer == [AckReply.FINISHED]  # the second run's
    record = await app.get_job("a")
    assert record.state == "succeeded" and record.result == "ok"
    assert (await app.stats("default")).counters["succeeded"] == 1


async def _finished(app: App, job_id: str) -> None:
    qk = app.keys("default")
    await app.enqueue("j", job_id=job_id)
    (job,) = (await app.scripts.claim(qk, 1, 30_000, "w1", 1, new_claim_id())).jobs
    assert await app.scripts.ack(qk, "succeeded", 60_000, [(job_id, job.token, b"", "")]) == [
        AckReply.FINISHED]


async def test_a_rerun_whose_reply_was_lost_is_made_once(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """App.rerun's enqueue ran and its reply was lost: sent again, it
    answered "existed" for the re-run it made, and rerun made the next one
    too (the job re-run twice). Sent once, the id it made answers."""
    app = real_app
    await _finished(app, "a")
    await app.enqueue("j", job_id="warm")  # (the queue checked: the next call is the re-run's)
    lost = _reply_lost_once(monkeypatch)
    assert await app.rerun("a") == "a:rerun:1"
    monkeypatch.undo()
    assert lost  # its call ran, and its reply was lost
    jobs = await app.redis.hkeys(app.keys("default").jobs)
    assert sorted(k.decode() for k in jobs if k.startswith(b"a:")) == ["a:rerun:1"]


async def test_a_second_rerun_whose_reply_was_lost_is_the_next_one(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe after a lost reply names the re-run this call made, never
    an earlier one: with a:rerun:1 there, the next is a:rerun:2, made once."""
    app = real_app
    await _finished(app, "a")
    assert await app.rerun("a") == "a:rerun:1"
    lost = _reply_lost_once(monkeypatch)
    assert await app.rerun("a") == "a:rerun:2"
    monkeypatch.undo()
    assert lost
    jobs = await app.redis.hkeys(app.keys("default").jobs)
    assert sorted(k.decode() for k in jobs if k.startswith(b"a:")) == ["a:rerun:1", "a:rerun:2"]


async def test_a_failure_whose_reply_was_lost_is_answered_as_the_first_run_did(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fail ran (the job retried) and its reply was lost; the lane sends
    it again, and the second run finds the job where the first left it,
    under this token, with this error last: RETRY again, not REFUSED (the
    worker took the run for lost), and nothing written twice."""
    app = real_app
    qk = app.keys("default")
    await app.enqueue("j", job_id="a", max_attempts=3)
    (job,) = (await app.scripts.claim(qk, 1, 30_000, "w1", 1, new_claim_id())).jobs
    lost = _reply_lost_once(monkeypatch)
    answer = await fail_job(app, qk, "a", job.token, "work", "", "boom", 60_000)
    monkeypatch.undo()
    assert lost and int(lost[0][0]) == FailReply.RETRY  # the first run's
    assert answer.code is FailReply.RETRY and answer.state == "scheduled"  # the second's
    record = await app.get_job("a")
    assert record.state == "scheduled" and record.work_failures == 1
    assert [(e.kind, e.text) for e in record.errors] == [("work", "boom")]  # pushed once
    assert (await app.stats("default")).counters["retried"] == 1
    # the same failure once more, of a run whose lease was reaped (a late
    # call, not a second run): refused, as before
    await app.enqueue("j", job_id="b", max_attempts=3)
    (late,) = (await app.scripts.claim(qk, 1, 30_000, "w1", 1, new_claim_id())).jobs
    await expire_lease(app, "default", "b")
    assert (await app.scripts.reap(qk, 100, 0, 0, {}, DEFAULT_BUDGET)).requeued == 1
    refused = await fail_job(app, qk, "b", late.token, "work", "", "boom", 60_000)
    assert refused.code is FailReply.REFUSED


async def test_a_schedule_fire_whose_reply_was_lost_is_enqueued_at_once(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's scheduler takes a due fire and the reply is lost; the lane
    sends the call again, and the second run finds the fire pending under
    this scheduler's taker id: answered FIRED as the first run was, so the
    worker enqueues the fire's job and confirms it in the same look.
    (Answered BUSY, it enqueued nothing, and the fire waited out its 10 s
    lease.) Meanwhile another scheduler, of a process given the same
    worker id, is told BUSY for the same call, and its look takes nothing."""
    app = real_app
    sk = schedules_keys(app.prefix)
    now = await server_ms(app)
    spec = make_spec("a", "j", every=timedelta(seconds=60), queue="default")
    await app.redis.hset(sk.specs, "a", spec.to_json())
    await app.redis.hset(sk.state, "a", f"{now - 10}|0|0|0")
    await app.enqueue("j", job_id="warm")  # (the queue checked: no other call on the way)
    takers = [Scheduler(SchedulerParams(app.scripts, sk, app.schedules.enqueue, "w1"))
              for _ in range(2)]
    assert takers[0].taker != takers[1].taker and takers[0].taker.startswith("w1.")
    real_fire, lost, other = app.scripts.schedule_fire, [], []

    async def fire_once_lost(*args: Any) -> Any:  # only this call's reply is lost
        losing = _reply_lost_once(monkeypatch)
        answer = await real_fire(*args)
        lost.extend(losing)
        monkeypatch.undo()
        # the other scheduler: the same call, and a look, while the fire is pending
        other.append(await real_fire(*args[:-1], takers[1].taker))
        await takers[1].tick()
        return answer

    monkeypatch.setattr(app.scripts, "schedule_fire", fire_once_lost)
    await takers[0].tick()
    assert lost and int(lost[0][0]) == ScheduleFireReply.FIRED  # the first run's
    assert other[0][0] is ScheduleFireReply.BUSY
    assert takers[0].fired == 1 and takers[1].fired == 0
    assert (await app.get_job(fire_job_id("a", now - 10))).state == "queued"
    state = (await app.redis.hget(sk.state, "a") or b"").decode().split("|")
    assert state[2:] == ["0", "0"]  # confirmed: nothing pending, no taker kept


async def _jobs(app: App) -> set[str]:
    return {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}


async def test_an_enqueue_whose_reply_was_lost_tells_its_caller_created(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The enqueue ran and its reply was lost; the lane sends it again, and
    the second run finds the id and answers 'existed'. A job whose id this
    process drew (the call gave none) was created by the first run: its
    caller is told created=True (it was told False: a duplicate, for a job
    it had just made). The common call, the longer one (a payload and a
    priority), and a bulk call of each kind; one job each, written once.
    A given id that answers 'existed' is still created=False: it may be
    another caller's."""
    app = real_app
    await app.enqueue("j", job_id="warm")  # (the queue checked: the next call is the job's)
    for call in (lambda: app.enqueue("j"), lambda: app.enqueue("j", {"n": 1}, priority=5)):
        before = await _jobs(app)
        lost = _reply_lost_once(monkeypatch)
        job = await call()
        monkeypatch.undo()
        assert lost  # the first run's reply
        assert (job.created, job.state) == (True, "queued")
        assert await _jobs(app) - before == {job.id}  # written once
    lost = _reply_lost_once(monkeypatch)
    given = await app.enqueue("j", job_id="given")
    monkeypatch.undo()
    assert lost and (given.created, given.state) == (False, "queued")  # as documented
    mixed = [JobRequest("j", {"n": i}) for i in range(3)] + [JobRequest("j", job_id="warm")]
    for requests in ([JobRequest("j") for _ in range(3)], mixed):  # a plain batch, a mixed one
        before = await _jobs(app)
        lost = _reply_lost_once(monkeypatch)
        jobs = await app.enqueue_many(requests)
        monkeypatch.undo()
        assert lost
        assert [j.created for j in jobs] == [r.job_id is None for r in requests]
        assert await _jobs(app) - before == {j.id for j in jobs if j.created}


def test_a_sync_enqueue_whose_reply_was_lost_tells_its_caller_created(
        redis_server: Any, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SyncApp's lane sends a call whose reply was lost again, as App's
    does: a drawn id's job is created=True, a given id's False."""
    real = sync_lane._send_and_read
    lost: list[Any] = []

    def losing(conn: Any, packed: bytes, spin: Any = None) -> Any:
        reply = real(conn, packed, spin)
        if not lost:
            lost.append(reply)
            raise sync_lane.RedisConnectionError("Connection reset by peer")
        return reply

    with SyncApp(redis_server.url, prefix=prefix) as sync:
        sync.enqueue("j", job_id="warm")
        monkeypatch.setattr(sync_lane, "_send_and_read", losing)
        job = sync.enqueue("j", {"n": 1})
        assert lost and (job.created, job.state) == (True, "queued")
        lost.clear()
        assert not sync.enqueue("j", job_id="warm").created and lost
        lost.clear()
        jobs = sync.enqueue_many([JobRequest("j"), JobRequest("j", job_id="warm")])
        assert lost and [j.created for j in jobs] == [True, False]
        assert sync.stats().counters["enqueued"] == 3  # warm, job, the batch's first: once each


async def test_a_sharded_bulk_enqueue_whose_second_call_lost_its_reply_answers_each_request(
        redis_server: Any, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk enqueue over two shards, two pipelined calls of 500 jobs and
    more per shard, whose second call's reply is lost: that call is sent
    again, and its jobs answer 'existed'. Each caller's answer is its own
    request's: created for an id drawn here, not for a given id that
    existed before. The shards interleave the batch, so each call's jobs
    are scattered over the request list (a call's place in its own list is
    not the request's)."""
    async with App(redis_server.url, prefix=prefix, queue_shards={"hot": 2}) as app:
        given = [f"g{i}" for i in range(500)]
        await app.enqueue_many([JobRequest("j", job_id=g, queue="hot") for g in given])
        requests = [JobRequest("j", job_id=given[i // 3], queue="hot") if i % 3 == 0
                    else JobRequest("j", queue="hot") for i in range(1500)]
        # the second reply read: the first shard's second call's (it ran)
        lost = _reply_lost_once(monkeypatch, nth=2)
        jobs = await app.enqueue_many(requests)
        monkeypatch.undo()
        assert lost
        # (the requests whose answer is wrong, by index: a short list to show,
        # where pytest's diff of two lists of 1,500 flags took over the
        # mutation runner's 120 s a test on a slow CI host, 2026-12-07)
        wrong = [i for i, (j, r) in enumerate(zip(jobs, requests, strict=True))
                 if j.created != (r.job_id is None)]
        assert not wrong, f"{len(wrong)} answers wrong, the first at {wrong[:5]}"
        assert len({j.id for j in jobs}) == 1000 + 500
        assert sum([await app.redis.hlen(app.keys(q).jobs)
                    for q in app.shards.physical("hot")]) == 1000 + 500
