"""The store changes of issue 10, script by script, on the real server and on
memory://: runs that start after their claim, idempotent claims, the token
counter key, retention on ack, the capped dead set, the error history and the
limiter's eviction markers.

State-complete: each test seeds the keys, runs a script and checks every key
the script touched. Times are relative to the server clock; nothing sleeps."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from leasequeue import App, JobRequest, codec
from leasequeue.models import NewJob
from leasequeue.store.keys import QueueKeys, limit_keys
from leasequeue.store.record import ERROR_RS, ERROR_US, parse_record
from leasequeue.store.specs import (
    AckReply,
    CancelStatus,
    FailReply,
    LimiterAcquireReply,
    LimiterRenewReply,
    ReleaseReply,
    RenewReply,
    StartReply,
)
from tests.helpers import (
    DEFAULT_BUDGET,
    eventually,
    expire_lease,
    ready_ids,
    server_ms,
    stored_payloads,
)

pytestmark = pytest.mark.anyio

Q = "default"
DAY_MS = 24 * 3600 * 1000


async def claim(app: App, count: int = 1, start_now: int = 0, claim_id: str = "c0",
                worker: str = "w1", lease_ms: int = 30_000) -> Any:
    return await app.scripts.claim(app.keys(Q), count, lease_ms, worker, start_now, claim_id)


async def record(app: App, job_id: str) -> dict[str, Any] | None:
    raw = await app.redis.hget(app.keys(Q).jobs, job_id)
    return parse_record(raw) if raw is not None else None


async def zset(app: App, key: str) -> list[str]:
    return [x.decode() for x in await app.redis.zrange(key, 0, -1)]


async def sets(app: App) -> dict[str, list[str]]:
    qk = app.keys(Q)
    return {"ready": await ready_ids(app, qk), "scheduled": await zset(app, qk.scheduled),
            "leases": await zset(app, qk.leases), "dead": await zset(app, qk.dead),
            "done": sorted(await zset(app, qk.done))}


async def counters(app: App) -> dict[str, int]:
    raw = await app.redis.hgetall(app.keys(Q).stats)
    return {k.decode(): int(v) for k, v in raw.items()}


async def events(app: App) -> list[tuple[str, str]]:
    entries = await app.redis.xrange(app.keys(Q).events)
    return [(f[b"job"].decode(), f[b"event"].decode()) for _, f in entries]


async def fail(app: App, job_id: str, token: int, kind: str = "work", error: str = "boom",
               budget: tuple[int, int] = DEFAULT_BUDGET, delay_ms: int = 0) -> Any:
    return await app.scripts.fail(app.keys(Q), job_id, token, kind, "permanent", error,
                                  delay_ms, *budget)


def settings(app: App, **changes: Any) -> None:
    app.scripts.settings = dataclasses.replace(app.scripts.settings, **changes)


# -- 1. started: expiry is an attempt only for a run that started --------------

async def test_unstarted_expiry_is_requeued_as_infra_not_an_attempt(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=1, max_infra_attempts=3)
    batch = await claim(app, start_now=0)
    j = batch.jobs[0]
    assert (j.started, j.attempt, j.token) == (False, 0, 1)
    rec = await record(app, "a")
    assert rec is not None and (rec["state"], rec["started"], rec["attempt"]) == ("leased", 0, 0)
    await expire_lease(app, Q, "a")
    out = await app.scripts.reap(qk, 10, 1_000, 10_000, {}, DEFAULT_BUDGET)
    assert (out.requeued, out.dead, out.canceled, out.stale, out.unstarted) == (1, 0, 0, 0, 1)
    rec = await record(app, "a")
    assert rec is not None
    assert (rec["state"], rec["attempt"], rec["infra_fail"], rec["work_fail"], rec["started"]) \
        == ("queued", 0, 1, 0, 0)
    # back in line at once (no backoff: it never ran), never dead
    assert await sets(app) == {"ready": ["a"], "scheduled": [], "leases": [], "dead": [],
                               "done": []}
    c = await counters(app)
    assert (c["reaped"], c["reaped_unstarted"], c.get("dead", 0)) == (1, 1, 0)
    assert ("a", "reaped-unstarted") in await events(app)
    job = await app.get_job("a", Q)
    assert [(e.attempt, e.kind) for e in job.errors] == [(0, "lease-expired")]
    assert await app.redis.llen(qk.wake) >= 1


async def test_started_expiry_of_a_poison_job_still_ends_dead(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=1, max_infra_attempts=3)
    j = (await claim(app, start_now=1)).jobs[0]
    assert (j.started, j.attempt) == (True, 1)
    await expire_lease(app, Q, "a")
    out = await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
    assert (out.requeued, out.dead, out.unstarted) == (0, 1, 0)
    rec = await app.get_job("a", Q)
    assert (rec.state, rec.reason, rec.attempt, rec.infra_failures) == (
        "dead", "lease-expired", 1, 0)
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": [], "dead": ["a"],
                               "done": []}
    assert (await counters(app))["dead"] == 1
    assert (await app.dead_letters(Q))[0]["reason"] == "lease-expired"


async def test_unstarted_expiries_end_dead_when_the_infra_budget_is_spent(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=5, max_infra_attempts=2)
    for n in (1, 2):
        await claim(app, start_now=0, claim_id=f"c{n}")
        await expire_lease(app, Q, "a")
        out = await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
        assert (out.unstarted, out.dead) == (1, n - 1)
    rec = await record(app, "a")
    assert rec is not None and (rec["state"], rec["reason"], rec["infra_fail"], rec["attempt"]) \
        == ("dead", "lease-expired", 2, 0)


async def test_reap_budgets_record_then_name_then_default(app: App) -> None:
    """A record without budgets (0 = unset) takes the reaping worker's."""
    qk = app.keys(Q)
    env = codec.encode_envelope({}, "corr", "")
    await app.scripts.enqueue(qk, [NewJob("named", "n", env, 0, 0, 0, 0),
                                   NewJob("other", "o", env, 0, 0, 0, 0),
                                   NewJob("own", "n", env, 0, 0, 2, 0)])
    assert (await app.get_job("named", Q)).max_attempts is None
    await claim(app, 3, start_now=3)
    for job_id in ("named", "other", "own"):
        await expire_lease(app, Q, job_id)
    out = await app.scripts.reap(qk, 10, 0, 0, {"n": (1, 5)}, (3, 10))
    # named: budget 1 from its name -> dead; other: default 3; own: its own 2
    assert (out.requeued, out.dead) == (2, 1)
    assert await sets(app) == {"ready": ["other", "own"], "scheduled": [], "leases": [],
                               "dead": ["named"], "done": []}
    with pytest.raises(ValueError):
        await app.scripts.reap(qk, 10, 0, 0, {}, (0, 10))


async def test_start_counts_the_attempt_once_and_refuses_a_stale_token(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b")])
    batch = await claim(app, 2, start_now=1)
    a, b = batch.jobs
    assert (a.id, a.started, a.attempt) == ("a", True, 1)
    assert (b.id, b.started, b.attempt) == ("b", False, 0)
    held = [("a", a.token), ("b", b.token), ("b", b.token + 1), ("zz", 1)]
    assert await app.scripts.start(qk, held) == [StartReply.STARTED, StartReply.STARTED,
                                                 StartReply.LOST, StartReply.LOST]
    assert await app.scripts.start(qk, [("b", b.token)]) == [StartReply.STARTED]
    for job_id in ("a", "b"):
        rec = await record(app, job_id)
        assert rec is not None and (rec["attempt"], rec["started"], rec["state"]) == (
            1, 1, "leased")
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": ["a", "b"], "dead": [],
                               "done": []}
    # a fenced (replace) cancel request: start still marks it, and says so
    await app.enqueue("j", queue=Q, job_id="c")
    c = (await claim(app, start_now=0, claim_id="c1")).jobs[0]
    assert (await app.scripts.cancel(qk, "c", c.token))[0] == CancelStatus.CANCEL_REQUESTED
    assert await app.scripts.start(qk, [("c", c.token)]) == [StartReply.CANCEL_REQUESTED]
    rec = await record(app, "c")
    assert rec is not None and (rec["started"], rec["attempt"], rec["cancel"]) == (1, 1, 1)


async def test_ack_of_an_unstarted_run_counts_its_attempt(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    j = (await claim(app, start_now=0)).jobs[0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", j.token, b"", "")]) == [
        AckReply.FINISHED]
    rec = await record(app, "a")
    assert rec is not None and (rec["state"], rec["attempt"], rec["started"]) == (
        "succeeded", 1, 0)
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": [], "dead": [],
                               "done": ["a"]}


async def test_fail_counts_an_unstarted_run_and_infra_refunds_only_a_started_one(
        app: App) -> None:
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("w", "i", "u")])
    jobs = {j.id: j for j in (await claim(app, 3, start_now=0)).jobs}
    # work failure of a run never marked started: it ran, the attempt counts
    out = await fail(app, "w", jobs["w"].token, "work", budget=(2, 5))
    assert (out.code, out.state, out.attempt, out.work_failures) == (FailReply.RETRY, "queued",
                                                                     1, 1)
    # infra failure of a started run: refunded
    await app.scripts.start(app.keys(Q), [("i", jobs["i"].token)])
    out = await fail(app, "i", jobs["i"].token, "infra", budget=(2, 5))
    assert (out.code, out.attempt, out.infra_failures) == (FailReply.RETRY, 0, 1)
    # infra failure of an unstarted run: nothing to refund
    out = await fail(app, "u", jobs["u"].token, "infra", budget=(2, 5))
    assert (out.code, out.attempt, out.infra_failures) == (FailReply.RETRY, 0, 1)
    for job_id in ("w", "i", "u"):
        rec = await record(app, job_id)
        assert rec is not None and rec["started"] == 0 and rec["state"] == "queued"
    assert sorted((await sets(app))["ready"]) == ["i", "u", "w"]
    assert (await sets(app))["leases"] == []
    assert (await counters(app))["retried"] == 3


async def test_fail_uses_the_budgets_the_worker_passes(app: App) -> None:
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=10)
    j = (await claim(app, start_now=1)).jobs[0]
    out = await fail(app, "a", j.token, "work", budget=(1, 5))
    assert (out.code, out.state) == (FailReply.DEAD, "dead")
    rec = await record(app, "a")
    assert rec is not None and (rec["reason"], rec["max_attempts"]) == ("max-attempts", 10)
    with pytest.raises(ValueError):
        await fail(app, "a", j.token, "work", budget=(0, 5))


async def test_release_of_an_unstarted_run_refunds_nothing(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=5)
    j = (await claim(app, start_now=1)).jobs[0]
    await fail(app, "a", j.token, "work", budget=(5, 10))  # one attempt run and failed
    j = (await claim(app, start_now=0, claim_id="c1")).jobs[0]
    assert j.attempt == 1
    assert await app.scripts.release(qk, [("a", j.token)], 0, "t") == [ReleaseReply.RELEASED]
    rec = await record(app, "a")
    assert rec is not None and (rec["state"], rec["attempt"], rec["started"]) == (
        "queued", 1, 0)
    # a started run is refunded, as before
    j = (await claim(app, start_now=1, claim_id="c2")).jobs[0]
    assert j.attempt == 2
    assert await app.scripts.release(qk, [("a", j.token)], 0, "t") == [ReleaseReply.RELEASED]
    rec = await record(app, "a")
    assert rec is not None and rec["attempt"] == 1
    assert await sets(app) == {"ready": ["a"], "scheduled": [], "leases": [], "dead": [],
                               "done": []}


async def test_cancel_of_a_leased_unstarted_job_is_at_once(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    j = (await claim(app, start_now=0)).jobs[0]
    assert await app.scripts.cancel(qk, "a") == (CancelStatus.CANCELED, "canceled")
    rec = await record(app, "a")
    assert rec is not None and (rec["state"], rec["cancel"], rec["started"]) == (
        "canceled", 0, 0)
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": [], "dead": [],
                               "done": ["a"]}
    assert (await counters(app))["canceled"] == 1
    # the holder's later writes are refused
    assert await app.scripts.start(qk, [("a", j.token)]) == [StartReply.LOST]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", j.token, b"", "")]) == [
        AckReply.REFUSED]
    assert await app.scripts.renew(qk, [("a", j.token)], 60_000) == [RenewReply.LOST]
    assert (await fail(app, "a", j.token)).code == FailReply.REFUSED
    assert await app.scripts.release(qk, [("a", j.token)], 0, "t") == [ReleaseReply.REFUSED]
    # a started run still gets a cancel request
    await app.enqueue("j", queue=Q, job_id="b")
    await claim(app, start_now=1, claim_id="c1")
    assert await app.cancel("b", Q) == CancelStatus.CANCEL_REQUESTED


# -- 2. claim ids ------------------------------------------------------------------

async def test_a_retried_claim_returns_the_same_jobs_and_leases_nothing_new(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    first = await claim(app, 2, start_now=1, claim_id="claim-1")
    assert [(j.id, j.token, j.started) for j in first.jobs] == [
        ("a", 1, True), ("b", 2, False)]
    leases_before = await app.redis.zrange(qk.leases, 0, -1, withscores=True)
    records_before = await app.redis.hgetall(qk.jobs)
    again = await claim(app, 2, start_now=1, claim_id="claim-1")
    assert [(j.id, j.token, j.attempt, j.started, j.payload) for j in again.jobs] == [
        (j.id, j.token, j.attempt, j.started, j.payload) for j in first.jobs]
    # nothing changed but the leases' expiry (renewed): no new lease, no new
    # token, no attempt counted twice
    leases_after = await app.redis.zrange(qk.leases, 0, -1, withscores=True)
    assert [m for m, _ in leases_after] == [m for m, _ in leases_before]
    assert all(a >= b for (_, a), (_, b) in zip(leases_after, leases_before, strict=True))
    assert await app.redis.hgetall(qk.jobs) == records_before
    assert await app.redis.get(qk.token) == b"2"
    assert await sets(app) == {"ready": ["c"], "scheduled": [], "leases": ["a", "b"],
                               "dead": [], "done": []}
    # the claim key is the worker's, bounded by the lease
    ttl = await app.redis.pttl(qk.claim("w1"))
    assert 0 < ttl <= 30_000
    # a job the first claim got that is gone since is not returned by a retry
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", 1, b"", "")]) == [1]
    assert [j.id for j in (await claim(app, 2, claim_id="claim-1")).jobs] == ["b"]
    # a new claim id claims anew
    fresh = await claim(app, 2, claim_id="claim-2")
    assert [(j.id, j.token) for j in fresh.jobs] == [("c", 3)]
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": ["b", "c"], "dead": [],
                               "done": ["a"]}
    with pytest.raises(ValueError):
        await claim(app, 1, claim_id="bad\nid")



async def test_a_retried_claim_returns_only_the_jobs_of_its_own_token_range(app: App) -> None:
    """The claim key names the first call by its lease expiry and token range:
    another claim's jobs leased until the same instant (another call in the
    same millisecond) are not returned by the retry."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    first = await claim(app, 1, start_now=1, claim_id="claim-1")
    second = await claim(app, 2, start_now=1, claim_id="claim-2")
    assert [j.id for j in first.jobs] == ["a"] and [j.id for j in second.jobs] == ["b", "c"]
    # make every lease end at the same instant, then retry claim-2 named by
    # that instant and the token range of b alone
    until = 4_000_000_000_000
    await app.redis.zadd(qk.leases, {"a": until, "b": until, "c": until})
    b_token = second.jobs[0].token
    await app.redis.set(qk.claim("w1"), f"claim-2\n{until}\n{b_token}\n{b_token}")
    again = await claim(app, 2, claim_id="claim-2")
    assert [(j.id, j.token) for j in again.jobs] == [("b", b_token)]
    # and the range [a, c] returns them in the first calls' order (the retry
    # renewed b's lease: back to the shared instant first)
    await app.redis.zadd(qk.leases, {"a": until, "b": until, "c": until})
    await app.redis.set(qk.claim("w1"), f"claim-2\n{until}\n1\n{b_token + 1}")
    assert [j.id for j in (await claim(app, 3, claim_id="claim-2")).jobs] == ["a", "b", "c"]


async def test_a_retried_claim_renews_the_leases_it_returns(app: App) -> None:
    """The worker counts a run's lease from the send of the call whose reply
    it got: a retry must not hand back a lease that runs out sooner than
    that (model/lease.pml, BUG_RETRY_OLD_LEASE: two runs at once)."""
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    first = await claim(app, 1, start_now=1, claim_id="claim-1", lease_ms=300)
    # the first call's lease has nearly run out when the retry lands
    await eventually(lambda: _after(app, first.now_ms + 250))
    sent = await server_ms(app)
    again = await claim(app, 1, start_now=1, claim_id="claim-1", lease_ms=30_000)
    assert [(j.id, j.token) for j in again.jobs] == [("a", 1)]
    score = await app.redis.zscore(qk.leases, "a")
    assert score is not None and score >= sent + 30_000
    # and a retry of the retry still finds it (the claim key follows the lease)
    third = await claim(app, 1, start_now=1, claim_id="claim-1", lease_ms=30_000)
    assert [(j.id, j.token) for j in third.jobs] == [("a", 1)]


async def _after(app: App, ms: int) -> bool:
    return await server_ms(app) >= ms


# -- 3. the token counter ------------------------------------------------------

async def test_tokens_never_repeat_for_a_job_when_the_counters_are_lost(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="x", max_attempts=10)
    stale = (await claim(app, start_now=1)).jobs[0]
    assert (stale.token, await app.redis.get(qk.token)) == (1, b"1")
    await expire_lease(app, Q, "x")
    await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
    await app.redis.delete(qk.stats, qk.token)
    current = (await claim(app, start_now=1, claim_id="c1")).jobs[0]
    assert current.token == 2  # above the record's last token, not the counter's 1
    assert await app.redis.get(qk.token) == b"2"  # the counter caught up
    held = [("x", stale.token)]
    assert await app.scripts.renew(qk, held, 60_000) == [RenewReply.LOST]
    assert await app.scripts.start(qk, held) == [StartReply.LOST]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("x", stale.token, b"", "")]) == [
        AckReply.REFUSED]
    assert (await fail(app, "x", stale.token)).code == FailReply.REFUSED
    assert await app.scripts.release(qk, held, 0, "t") == [ReleaseReply.REFUSED]
    rec = await record(app, "x")
    assert rec is not None and (rec["state"], rec["token"]) == ("leased", 2)
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("x", current.token, b"", "")]) == [
        AckReply.FINISHED]


async def test_the_token_counter_continues_from_the_old_stats_field(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    await app.redis.hset(qk.stats, "token", 100)  # data written before the token key
    assert (await claim(app, start_now=1)).jobs[0].token == 101
    assert await app.redis.get(qk.token) == b"101"
    assert await app.redis.hget(qk.stats, "token") == b"100"  # left alone
    assert "token" not in (await app.stats(Q)).counters


# -- 4. retention on ack, a capped dead set -------------------------------------

async def test_ack_deletes_expired_finished_records_up_to_expire_batch(app: App) -> None:
    qk = app.keys(Q)
    settings(app, expire_on_ack=10)
    await app.enqueue_many([JobRequest("j", job_id=f"x{i}", queue=Q) for i in range(25)])
    jobs = (await claim(app, 25, start_now=25)).jobs
    await app.scripts.ack(qk, "succeeded", 60_000, [(j.id, j.token, b"\x01", "") for j in jobs])
    now = await server_ms(app)
    await app.redis.zadd(qk.done, {j.id: now - 10 for j in jobs}, xx=True)  # retention ran out
    await app.enqueue("j", queue=Q, job_id="live")
    live = (await claim(app, start_now=1, claim_id="c1")).jobs[0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("live", live.token, b"", "")]) == [1]
    assert await app.redis.zcard(qk.done) == 25 + 1 - 10
    assert await app.redis.hlen(qk.jobs) == 16
    assert await app.redis.hlen(qk.results) == 15
    ids = sorted(j.id for j in jobs)  # equal scores: the oldest ten in member order
    gone, kept = ids[:10], ids[10:]
    assert None not in await stored_payloads(app, qk, [*kept, "live"])
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": [], "dead": [],
                               "done": sorted([*kept, "live"])}
    for job_id in gone:
        for key in (qk.jobs, qk.payloads, qk.results):
            assert await app.redis.hexists(key, job_id) == 0
    for job_id in kept:
        assert await app.redis.hexists(qk.results, job_id) == 1


async def test_expiry_deletes_a_batch_in_a_fixed_number_of_calls(real_app: App) -> None:
    """Fifty records past their retention go in one expire call of ten Redis
    commands (ZCOUNT, ZRANGEBYSCORE, ZREM, HMGET and six HDEL), not eight a
    record: with a call per record, a worker's acks spent eight calls on
    each job that had finished a retention before."""
    app = real_app
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"x{i}", queue=Q) for i in range(50)])
    jobs = (await claim(app, 50, start_now=50)).jobs
    await app.scripts.ack(qk, "succeeded", 60_000, [(j.id, j.token, b"\x01", "") for j in jobs])
    now = await server_ms(app)
    await app.redis.zadd(qk.done, {j.id: now - 10 for j in jobs}, xx=True)  # retention ran out
    await app.redis.config_resetstat()
    assert await app.scripts.expire(qk, 100) == 50
    stats = await app.redis.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    assert (calls.get("zrem"), calls.get("hmget"), calls.get("hdel")) == (1, 1, 6)
    for key in (qk.jobs, qk.payloads, qk.results, qk.done):
        assert await app.redis.exists(key) == 0


async def test_an_ack_not_kept_forgets_its_batch_in_a_fixed_number_of_calls(
        real_app: App) -> None:
    """Fifty jobs acked with retention 0 lose every trace (record, payload,
    error history, result, logs, run state) in six HDEL for the batch, not
    six a job: a queue that keeps no records paid for each job it finished."""
    app = real_app
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", {"i": i}, job_id=f"z{i}", queue=Q)
                            for i in range(50)])
    jobs = (await claim(app, 50, start_now=50)).jobs
    for key in (qk.errors, qk.results, qk.logs):  # traces a run may leave
        await app.redis.hset(key, mapping={j.id: b"x" for j in jobs})
    await app.redis.hset(qk.runstate, mapping={f"{p}:{j.id}": b"x" for j in jobs
                                               for p in ("c", "s", "p")})
    await app.redis.config_resetstat()
    replies = await app.scripts.ack(qk, "succeeded", 0, [(j.id, j.token, b"\x01", "")
                                                          for j in jobs])
    assert replies == [1] * 50
    stats = await app.redis.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    assert (calls.get("hmget"), calls.get("hdel")) == (1, 6), calls
    for key in (qk.jobs, qk.payloads, qk.errors, qk.results, qk.logs, qk.runstate,
                qk.leases, qk.done):
        assert await app.redis.exists(key) == 0, key
    assert (await counters(app))["succeeded"] == 50


async def test_the_dead_set_is_capped_by_count(app: App) -> None:
    qk = app.keys(Q)
    settings(app, dead_max=3)
    await app.enqueue_many([JobRequest("j", job_id=f"d{i}", queue=Q) for i in range(6)])
    for i in range(6):
        j = (await claim(app, start_now=1, claim_id=f"c{i}")).jobs[0]
        assert (await fail(app, j.id, j.token, "dead")).code == FailReply.DEAD
        assert await app.redis.zcard(qk.dead) <= 3
    assert await zset(app, qk.dead) == ["d3", "d4", "d5"]
    c = await counters(app)
    assert (c["dead"], c["dead_trimmed"]) == (3, 3)
    for i in range(3):
        for key in (qk.jobs, qk.payloads, qk.errors):
            assert await app.redis.hexists(key, f"d{i}") == 0
    assert (await app.stats(Q)).dead == 3


async def test_the_dead_set_drops_jobs_older_than_the_retention(app: App) -> None:
    qk = app.keys(Q)
    settings(app, dead_retention_ms=DAY_MS)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q, max_attempts=1)
                            for i in ("old", "young", "new")])
    for n in range(2):
        j = (await claim(app, start_now=1, claim_id=f"c{n}")).jobs[0]
        await fail(app, j.id, j.token, "work", budget=(1, 10))
    now = await server_ms(app)
    await app.redis.zadd(qk.dead, {"old": now - 2 * DAY_MS, "young": now - DAY_MS // 2}, xx=True)
    # dying trims what is over the retention, as the reaper's burials do too
    j = (await claim(app, start_now=1, claim_id="c9")).jobs[0]
    await expire_lease(app, Q, j.id)
    out = await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
    assert out.dead == 1
    assert sorted(await zset(app, qk.dead)) == ["new", "young"]
    assert await app.redis.hexists(qk.jobs, "old") == 0
    c = await counters(app)
    assert (c["dead"], c["dead_trimmed"]) == (2, 1)


# -- 5. the error history -------------------------------------------------------

async def test_the_error_history_keeps_the_last_five(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=20)
    await app.redis.hset(qk.errors, "a", "an old plain error")  # written before the history
    before = await server_ms(app)
    for n in range(6):
        j = (await claim(app, start_now=1, claim_id=f"c{n}")).jobs[0]
        await fail(app, "a", j.token, "work" if n % 2 else "infra",
                   error=f"e{n} \x1e\x1f" + "x" * 5000, budget=(20, 20))
    rec = await app.get_job("a", Q)
    assert [e.text[:2] for e in rec.errors] == ["e1", "e2", "e3", "e4", "e5"]
    assert [e.kind for e in rec.errors] == ["work", "infra", "work", "infra", "work"]
    assert all(e.at_ms >= before for e in rec.errors)
    assert all(len(e.text) <= 4000 and "\x1e" not in e.text for e in rec.errors)
    assert rec.error == rec.errors[-1].text
    raw = await app.redis.hget(qk.errors, "a")
    assert raw.decode().count(ERROR_RS) == 4 and raw.decode().count(ERROR_US) == 15


async def test_an_old_plain_error_decodes_as_one_entry(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=5)
    await app.redis.hset(qk.errors, "a", "plain")
    rec = await app.get_job("a", Q)
    assert rec.error == "plain"
    assert [(e.attempt, e.kind, e.at_ms, e.text) for e in rec.errors] == [(0, "", 0, "plain")]
    j = (await claim(app, start_now=1)).jobs[0]
    await fail(app, "a", j.token, "work", error="new", budget=(5, 10))
    rec = await app.get_job("a", Q)
    assert [(e.attempt, e.kind, e.text) for e in rec.errors] == [(0, "", "plain"),
                                                                 (1, "work", "new")]


async def test_ack_note_joins_the_history(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b")])
    jobs = (await claim(app, 2, start_now=2)).jobs
    note = "result not stored: cannot be encoded with msgpack"
    assert await app.scripts.ack(qk, "succeeded", 60_000,
                                 [(jobs[0].id, jobs[0].token, b"", note),
                                  (jobs[1].id, jobs[1].token, b"\x01", "")]) == [1, 1]
    rec = await app.get_job("a", Q)
    assert [(e.attempt, e.kind, e.text) for e in rec.errors] == [(1, "note", note)]
    assert await app.redis.hexists(qk.errors, "b") == 0


# -- 7. the limiter tells an evicted holder ----------------------------------------

async def test_limiter_replace_tells_the_evicted_holder_until_its_release(app: App) -> None:
    lk = limit_keys(f"{app.prefix}:limiter", "job.x")
    s = app.scripts
    assert await s.limiter_acquire(lk, "old", 1, 30_000, False) == (LimiterAcquireReply.TAKEN, "")
    assert await s.limiter_acquire(lk, "new", 1, 30_000, False) == (
        LimiterAcquireReply.NO_SLOT, "")
    assert await s.limiter_acquire(lk, "new", 1, 30_000, True) == (
        LimiterAcquireReply.EVICTED, "old")
    assert await zset(app, lk.limit) == ["new"]
    assert await zset(app, lk.evicted) == ["old"]
    now = await server_ms(app)
    score = await app.redis.zscore(lk.evicted, "old")
    assert score is not None and now < score <= now + 31_000
    assert await s.limiter_renew(lk, ["new", "old"], 30_000) == [
        LimiterRenewReply.RENEWED, LimiterRenewReply.EVICTED]
    # told again (a renew sent again after its reply was lost): the marker stays
    assert await zset(app, lk.evicted) == ["old"]
    assert await s.limiter_renew(lk, ["old"], 30_000) == [LimiterRenewReply.EVICTED]
    assert await s.limiter_release(lk, ["old"]) == 0  # its run ends: the marker goes
    assert await zset(app, lk.evicted) == []
    assert await s.limiter_renew(lk, ["old"], 30_000) == [LimiterRenewReply.LOST]
    # release drops the marker too; lapsed markers are pruned by acquire
    await s.limiter_acquire(lk, "newer", 1, 30_000, True)
    assert await zset(app, lk.evicted) == ["new"]
    assert await s.limiter_release(lk, ["new", "newer"]) == 1
    assert await zset(app, lk.limit) == [] and await zset(app, lk.evicted) == []
    await app.redis.zadd(lk.evicted, {"ghost": now - 1})
    await s.limiter_acquire(lk, "a", 1, 30_000, False)
    assert await zset(app, lk.evicted) == []


async def test_local_limiter_mirrors_the_eviction_answer() -> None:
    from leasequeue.limiter import LocalLimiter

    lim = LocalLimiter()
    assert (await lim.acquire("x", 1, "old", False)).taken
    grant = await lim.acquire("x", 1, "new", True)
    assert (grant.taken, grant.evicted) == (True, "old")
    assert await lim.renew("x", ["new", "old"]) == [LimiterRenewReply.RENEWED,
                                                    LimiterRenewReply.EVICTED]
    assert await lim.renew("x", ["old"]) == [LimiterRenewReply.EVICTED]  # until released
    await lim.release("x", ["old"])
    assert await lim.renew("x", ["old"]) == [LimiterRenewReply.LOST]
    # a marker whose release never came lapses, as a Redis one does
    assert (await lim.acquire("x", 1, "newer", True)).evicted == "new"
    lim._evicted["x"]["new"] = 0.0  # (its time passed)
    assert await lim.renew("x", ["new"]) == [LimiterRenewReply.LOST]
    assert "x" not in lim._evicted  # none left: forgotten


# -- 1. version 1 records ------------------------------------------------------

def v1(state: str, token: int, attempt: int, max_attempts: int = 3) -> bytes:
    # 1|state|token|attempt|work_fail|infra_fail|max_attempts|max_infra|cancel|prio|seq|
    # enq_ms|ready_ms|due_ms|claim_ms|end_ms|name|worker|reason
    return (f"1|{state}|{token}|{attempt}|0|0|{max_attempts}|10|0|0|1|1000|1000|0|"
            f"{2000 if state == 'leased' else 0}|0|j|{'w0' if state == 'leased' else ''}|"
            ).encode()


async def test_version_1_records_still_work(app: App) -> None:
    qk = app.keys(Q)
    await app.redis.hset(qk.jobs, mapping={"q": v1("queued", 0, 0), "l": v1("leased", 4, 1, 1)})
    env = codec.encode_envelope({}, "corr", "")
    await app.redis.hset(qk.payloads, mapping={"q": env, "l": env})
    await app.redis.zadd(qk.ready, {"q": 1})
    now = await server_ms(app)
    await app.redis.zadd(qk.leases, {"l": now - 1})
    # Python reads both versions; a leased v1 record counted its attempt at claim
    assert parse_record(v1("leased", 4, 1))["started"] == 1
    assert parse_record(v1("queued", 0, 0))["started"] == 0
    rec = await app.get_job("l", Q)
    assert (rec.state, rec.token, rec.attempt, rec.worker) == ("leased", 4, 1, "w0")
    # Lua: the queued one is claimed (and written back as v2)
    j = (await claim(app, start_now=1)).jobs[0]
    assert (j.id, j.attempt) == ("q", 1)
    raw = await app.redis.hget(qk.jobs, "q")
    assert raw.startswith(b"2|leased|")
    # the leased one expires as a started run: an attempt, so with budget 1 it dies
    out = await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
    assert (out.dead, out.unstarted) == (1, 0)
    rec = await app.get_job("l", Q)
    assert (rec.state, rec.reason, rec.attempt) == ("dead", "lease-expired", 1)
    assert await sets(app) == {"ready": [], "scheduled": [], "leases": ["q"], "dead": ["l"],
                               "done": []}


async def test_keys_of_the_new_layout(app: App) -> None:
    qk: QueueKeys = app.keys(Q)
    assert qk.token == qk.tag + ":token"
    assert qk.claim("w1") == qk.tag + ":claim:w1"
    lk = limit_keys("lq:limiter", "smtp")
    assert (lk.limit, lk.evicted) == ("{lq:limiter:smtp}", "{lq:limiter:smtp}:evicted")


FOOTPRINT_JOBS = 10_000
FOOTPRINT_BOUND = 165  # bytes a queued no-op job costs in Redis's MEMORY USAGE


async def test_a_queued_no_op_job_costs_at_most_165_bytes_in_redis(
        real_app: App, sync_redis: Any) -> None:
    """Its record (with its payload inside) and its place in line, as Redis
    counts them (MEMORY USAGE SAMPLES 0 of the two keys, 10,000 jobs): 154.0
    bytes a job on Redis 7.0 with jemalloc, its record of version 4 (a job as
    enqueued: 40 bytes, a 48-byte allocation) and its place in the line (a
    LIST); 202.0 with a version-2 record (96 bytes of allocation), 300.7 with
    the place in the ready set (a ZSET) as well, 368.5 with the payload in a
    hash of its own as well. A producer's id is 28 hex characters, the longest whose
    string stays in a 32-byte allocation, and the payload stores '' for a
    correlation id that is the job's own: 32-character ids cost 416 bytes a
    job here, the id repeated in the payload 408 (both measured with the
    payload in its own hash)."""
    app = real_app
    replies = await app.enqueue_many([JobRequest("noop", queue="default")
                                      for _ in range(FOOTPRINT_JOBS)])
    assert all(len(r.id) == 28 and int(r.id, 16) >= 0 for r in replies)
    assert len({r.id for r in replies}) == FOOTPRINT_JOBS  # one read of urandom, cut up
    qk = app.keys("default")
    assert sync_redis.exists(qk.payloads) == 0  # every payload inside its record
    assert sync_redis.hget(qk.jobs, replies[-1].id).startswith(b"4|")  # as enqueued
    used = sum(sync_redis.memory_usage(key, samples=0) for key in (qk.jobs, qk.line))
    assert sync_redis.llen(qk.line) == FOOTPRINT_JOBS and sync_redis.exists(qk.ready) == 0
    assert used / FOOTPRINT_JOBS <= FOOTPRINT_BOUND, used / FOOTPRINT_JOBS
