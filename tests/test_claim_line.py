"""claim_line.lua, the claim of the common case (scripts.Scripts.claim sends
a claim there first): where it leases, it must write and answer exactly
what claim.lua writes and answers for the same queue; where claim.lua has
more to do (a retried claim id, a paused queue, a scheduled job due, the
ready set, a record that is not a plain version 4 one), it must write
nothing at all and hand the claim to claim.lua, which then takes it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis as redis_sync

from leasequeue import App
from leasequeue.models import NewJob
from leasequeue.store import scripts as scripts_mod
from leasequeue.store.keys import QueueKeys
from leasequeue.store.record import split_record
from leasequeue.store.scripts import CLAIM_LINE_MAX, INLINE_MAX, Scripts, claim_batch
from leasequeue.store.specs import ClaimLineReply
from tests.harness.redis_proc import RedisProcess

pytestmark = pytest.mark.anyio

LEASE_MS = 30_000
CLAIM_MS = 15  # a leased record's claim_ms, among its '|' fields
QUEUE_KEYS = ("jobs", "payloads", "line", "ready", "scheduled", "leases", "stats", "token")


def _args(count: int, start_now: int, claim_id: str) -> list[Any]:
    return [count, LEASE_MS, "w1", 50, 0, "0", 100, start_now, claim_id]


async def _claim(s: Scripts, name: str, qk: QueueKeys, count: int, start_now: int,
                 claim_id: str) -> Any:
    args = _args(count, start_now, claim_id)
    if name == "claim_line":
        args = scripts_mod._line_args(args)
    return await s.run(name, qk, args, worker_keys=(qk.claim("w1"),))


def _jobs() -> list[NewJob]:
    sizes = [1, 40, 300, INLINE_MAX, INLINE_MAX + 1, 5_000, 7]
    return [NewJob(f"id-{i}-é", ["j", "send_mail", "ünï"][i % 3], bytes([65 + i]) * size,
                   0, 0, [0, 1, 25][i % 3], [0, 3, 300][i % 3])
            for i, size in enumerate(sizes)]


async def _fill(app: App, qk: QueueKeys) -> None:
    """The same jobs, enqueued as producers send them: three in one batch
    (enqueue.lua), the rest one per call (enqueue_one.lua, and enqueue.lua
    for the payloads over INLINE_MAX)."""
    jobs = _jobs()
    await app.scripts.enqueue(qk, jobs[:3])
    for job in jobs[3:]:
        await app.scripts.enqueue(qk, [job])


async def _copy(app: App, src: QueueKeys, dst: QueueKeys) -> None:
    """dst's keys made equal to src's (jobs, payloads, line, stats, token),
    so both queues hold the same records, enq_ms and seqs included."""
    r = app.redis
    for name in QUEUE_KEYS:
        await r.delete(getattr(dst, name))
    jobs = await r.hgetall(src.jobs)
    await r.hset(dst.jobs, mapping=jobs)
    payloads = await r.hgetall(src.payloads)
    if payloads:
        await r.hset(dst.payloads, mapping=payloads)
    line = await r.lrange(src.line, 0, -1)
    if line:
        await r.rpush(dst.line, *line)
    await r.hset(dst.stats, mapping=await r.hgetall(src.stats))
    token = await r.get(src.token)
    if token is not None:
        await r.set(dst.token, token)


def _record(job_id: bytes, raw: bytes, now: int, mine: set[bytes]) -> tuple[list[Any], Any]:
    """A record's fields and payload; a leased one's claim_ms relative to
    the call's instant (``now``) when this call leased it, else left out."""
    fields, payload = split_record(raw)
    parts: list[Any] = fields.split(b"|")
    if parts[1] == b"leased":
        parts[CLAIM_MS] = int(parts[CLAIM_MS]) - now if job_id in mine else "earlier"
    return parts, payload


async def _state(app: App, qk: QueueKeys, reply: Any) -> dict[str, Any]:
    """The queue's keys, the call's own instant (its TIME, the reply's now)
    taken out: the claim_ms of the records it leased, their lease scores
    and the claim key's lease end, each given relative to it; those of
    jobs leased by an earlier call, left out."""
    r = app.redis
    now = int(reply[0])
    mine = {reply[i] for i in range(3, len(reply), 11)}
    leases = await r.zrange(qk.leases, 0, -1, withscores=True)
    claim = await r.get(qk.claim("w1"))
    claim_parts: list[Any] = claim.split(b"\n") if claim else []
    if claim_parts:
        claim_parts[1] = int(claim_parts[1]) - now
    return {
        "jobs": {k: _record(k, v, now, mine) for k, v in (await r.hgetall(qk.jobs)).items()},
        "payloads": await r.hgetall(qk.payloads),
        "line": await r.lrange(qk.line, 0, -1),
        "ready": await r.zrange(qk.ready, 0, -1, withscores=True),
        "leases": [(m, s - now if m in mine else "earlier") for m, s in leases],
        "stats": await r.hgetall(qk.stats),
        "token": await r.get(qk.token),
        "claim": claim_parts,
        "claim_ttl_near_lease": claim is None or LEASE_MS - 5_000 < await r.pttl(
            qk.claim("w1")) <= LEASE_MS,
    }


@pytest.mark.parametrize("counter", ["kept", "lost, an old one in stats", "new"])
@pytest.mark.parametrize(("counts", "start_now"),
                         [((1, 1, 1), 1), ((3, 10), 0), ((2, 2, 5), 1), ((10,), 10),
                          ((7,), 3)])
async def test_a_line_claim_writes_and_answers_what_claim_lua_does(
        app: App, counts: tuple[int, ...], start_now: int, counter: str) -> None:
    """The same queue state twice (records as the producers write them,
    payloads inside and outside the records, every budget and name); claim
    rounds of these counts on one through claim.lua and on the other
    through claim_line.lua: the replies and every key equal, field by field,
    but each call's own instant. Runs on real Redis and on the embedded
    store (fakeredis)."""
    s = app.scripts
    general, line = app.keys("general"), app.keys("line")
    await _fill(app, general)
    if counter != "kept":
        await app.redis.delete(general.token)
    if counter.startswith("lost"):
        await app.redis.hset(general.stats, "token", 41)
    else:
        await app.redis.set(general.token, 7) if counter == "kept" else None
    await _copy(app, general, line)
    assert await app.redis.llen(line.line) == 7
    for i, count in enumerate(counts):
        want = await _claim(s, "claim", general, count, start_now, f"c{i}")
        got = await _claim(s, "claim_line", line, count, start_now, f"c{i}")
        assert not isinstance(got, int), "claim_line.lua sent a plain line to claim.lua"
        assert got[1:] == want[1:]
        assert int(got[0]) >= int(want[0])
        assert await _state(app, line, got) == await _state(app, general, want)
        assert (claim_batch(line, got).jobs == [
            dataclasses.replace(job, queue=line.queue, claimed_ms=int(got[0]))
            for job in claim_batch(general, want).jobs])


async def test_an_empty_line_answers_as_claim_lua_with_the_next_due(real_app: App) -> None:
    """Nothing queued: the same empty reply, with the first scheduled job's
    wait as the next due (-1 when nothing is scheduled), and nothing written."""
    app, s = real_app, real_app.scripts
    general, line = app.keys("general"), app.keys("line")
    for qk in (general, line):
        got = await _claim(s, "claim_line" if qk is line else "claim", qk, 5, 1, "c1")
        assert got[1:] == [b"-1", 0]
        await app.scripts.enqueue(qk, [NewJob("later", "j", b"x", 60_000, 0, 1, 1)])
    want = await _claim(s, "claim", general, 5, 1, "c2")
    got = await _claim(s, "claim_line", line, 5, 1, "c2")
    assert got[2] == want[2] == 0
    assert abs(int(got[1]) - int(want[1])) < 1_000 and 55_000 < int(got[1]) <= 60_000
    assert await app.redis.get(line.claim("w1")) is None


def _dump(r: redis_sync.Redis, qk: QueueKeys) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key of the queue, as DUMP serializes it, and whether it expires."""
    keys = sorted(r.scan_iter(match=f"{{{qk.prefix}:{qk.queue}}}*"))
    return {k: (r.dump(k), r.pttl(k) >= 0) for k in keys}


V2_QUEUED = b"2|queued|0|0|0|0|3|5|0|0|0|7|1700000000000|1700000000000|0|0|0|j||"


@pytest.mark.parametrize("case", ["retried claim id", "paused", "scheduled job due",
                                  "ready set", "version 2 record", "park group",
                                  "stale entry", "malformed record"])
async def test_where_claim_lua_has_more_to_do_the_line_claim_writes_nothing(
        real_app: App, redis_server: RedisProcess, case: str) -> None:
    """Each case claim.lua must take: claim_line.lua answers GENERAL and the
    queue is byte for byte as it was (it reads the front of the line and
    pops nothing); Scripts.claim then sends the claim to claim.lua, which
    answers it as ever (the retry: the job the first call leased; paused:
    none; else the first job in claim order)."""
    app, s = real_app, real_app.scripts
    qk = app.keys("q")
    r = redis_sync.Redis(port=redis_server.port)
    try:
        await s.enqueue(qk, [NewJob("a", "j", b"x", 0, 0, 1, 1)])
        if case == "retried claim id":
            await _claim(s, "claim_line", qk, 1, 1, "c1")
            await s.enqueue(qk, [NewJob("b", "j", b"x", 0, 0, 1, 1)])
        elif case == "paused":
            r.set(qk.paused, "1")
        elif case == "scheduled job due":
            await s.enqueue(qk, [NewJob("due", "j", b"x", 1, 0, 1, 1)])
            r.zadd(qk.scheduled, {"due": 1})
        elif case == "ready set":
            await s.enqueue(qk, [NewJob("high", "j", b"x", 0, 5, 1, 1)])
        elif case == "version 2 record":
            r.hset(qk.jobs, "v2", V2_QUEUED)
            r.rpush(qk.line, "v2")
        elif case == "park group":
            await s.enqueue(qk, [NewJob("grouped", "j", b"x", 0, 0, 1, 1, grp="rate.t:A")])
        elif case == "stale entry":
            r.rpush(qk.line, "gone")
        else:
            r.hset(qk.jobs, "bad", b"4|x")
            r.rpush(qk.line, "bad")
        await s.enqueue(qk, [NewJob("z", "j", b"x", 0, 0, 1, 1)])
        before, ttl = _dump(r, qk), r.pttl(qk.claim("w1"))
        reply = await _claim(s, "claim_line", qk, 10, 1,
                             "c1" if case == "retried claim id" else "c2")
        assert reply == ClaimLineReply.GENERAL
        assert _dump(r, qk) == before
        assert ttl - 2_000 < r.pttl(qk.claim("w1")) <= ttl  # not set again
        batch = await s.claim(qk, 10, LEASE_MS, "w1", 1,
                              "c1" if case == "retried claim id" else "c3")
        assert s._general_until.get(qk) is not None  # claim.lua took it, and takes the next
        assert [j.id for j in batch.jobs][:1] == {"paused": [], "ready set": ["high"]}.get(
            case, ["a"])
    finally:
        r.close()


async def test_which_claims_go_to_the_line_first(real_app: App,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """claim_line.lua first, unless an audit trail is asked for (claim.lua
    writes the `claimed` events), the claim asks for more than
    CLAIM_LINE_MAX jobs, or the queue's line claim went to claim.lua less
    than LINE_PAUSE ago."""
    app, s = real_app, real_app.scripts
    qk = app.keys("q")
    sent: list[str] = []
    run = s.run

    async def spy(name: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(name)
        return await run(name, *args, **kwargs)

    monkeypatch.setattr(s, "run", spy)
    clock = [1000.0]
    monkeypatch.setattr(scripts_mod, "_clock", lambda: clock[0])
    await s.claim(qk, 1, LEASE_MS, "w1", 1, "c1")
    await s.claim(qk, CLAIM_LINE_MAX, LEASE_MS, "w1", 1, "c2")
    await s.claim(qk, CLAIM_LINE_MAX + 1, LEASE_MS, "w1", 1, "c3")
    assert sent == ["claim_line", "claim_line", "claim"]
    sent.clear()
    await app.redis.set(qk.paused, "1")  # claim_line.lua hands it over
    await s.claim(qk, 1, LEASE_MS, "w1", 1, "c4")
    await app.redis.delete(qk.paused)
    clock[0] += scripts_mod.LINE_PAUSE - 0.01
    await s.claim(qk, 1, LEASE_MS, "w1", 1, "c5")
    clock[0] += 0.02
    await s.claim(qk, 1, LEASE_MS, "w1", 1, "c6")
    assert sent == ["claim_line", "claim", "claim", "claim_line"]
    sent.clear()
    monkeypatch.setattr(s, "settings", dataclasses.replace(s.settings, audit_all=True))
    await s.claim(qk, 1, LEASE_MS, "w1", 1, "c7")
    assert sent == ["claim"]


async def test_a_wait_whose_line_claim_hands_over_is_claimed_by_claim_lua(
        real_app: App) -> None:
    """The claim behind an idle wait (Scripts.wait_then_claim) goes to
    claim_line.lua too; when that answers GENERAL (here: a job of priority
    5, in the ready set), the claim goes to claim.lua after the wait, under
    the same claim id, and leases the job."""
    app, s = real_app, real_app.scripts
    qk = app.keys("q")
    await s.enqueue(qk, [NewJob("high", "j", b"x", 0, 5, 1, 1)])
    assert await app.redis.llen(qk.wake) == 1  # the enqueue's token ends the wait at once
    batch = await s.wait_then_claim(qk, [qk.wake], 1.0, 10, LEASE_MS, "w1", 0, "c1")
    assert [j.id for j in batch.jobs] == ["high"]
    assert (await app.redis.get(qk.claim("w1"))).startswith(b"c1\n")
    assert s._general_until.get(qk) is not None
