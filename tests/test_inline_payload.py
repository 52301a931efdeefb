"""A payload of at most 1024 bytes lives inside its job's record, after '|'
and a NUL (lua/_lib.lua, split_record); a larger one, and every payload of a job
enqueued before payloads moved into the record, stays in the payloads hash.
Each test runs on the real server and on memory://, and checks where the
payload is stored and that every reader (claim, get_job, the audit trail)
gets it whole through every rewrite of the record."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from leasequeue import App, JobRequest, codec
from leasequeue.models import ClaimedJob, NewJob
from leasequeue.store.loader import lib_for, lua_dir
from leasequeue.store.record import parse_record, split_record
from tests.helpers import START_ALL, fail_job, make_due, new_claim_id, stored_payloads

pytestmark = pytest.mark.anyio

Q = "default"
INLINE_MAX = 1024  # lua/_lib.lua


def envelope_of(size: int) -> bytes:
    """An envelope [1, '', '', {'s': 'x' * k}] of exactly `size` bytes."""
    for k in range(size):
        env = msgpack.packb([1, "", "", {"s": "x" * k}])
        if len(env) == size:
            return env
    raise AssertionError(f"no envelope of {size} bytes")


async def claim(app: App, count: int) -> list[ClaimedJob]:
    reply = await app.scripts.claim(app.keys(Q), count, 30_000, "w1", START_ALL,
                                    new_claim_id())
    return list(reply.jobs)


async def test_a_payload_up_to_1024_bytes_is_in_its_record_a_larger_one_beside_it(
        app: App) -> None:
    """The bound is exact on both of enqueue.lua's paths (one job, a batch):
    1024 bytes go inside the record and nothing into the payloads hash, 1025
    bytes into the hash and nothing inside the record. Claim and get_job read
    both whole, before and after the ack."""
    qk = app.keys(Q)
    at, over = envelope_of(INLINE_MAX), envelope_of(INLINE_MAX + 1)

    def job(job_id: str, payload: bytes) -> NewJob:
        return NewJob(job_id, "mail.send", payload, 0, 0, 0, 0, "")

    assert await app.scripts.enqueue(qk, [job("at", at)]) == [(True, "queued")]
    assert await app.scripts.enqueue(qk, [job("over", over)]) == [(True, "queued")]
    assert await app.scripts.enqueue(qk, [job("at2", at), job("over2", over)]) == \
        [(True, "queued")] * 2
    ids = ["at", "over", "at2", "over2"]
    expected = {"at": at, "over": over, "at2": at, "over2": over}
    raws = await app.redis.hmget(qk.jobs, ids)
    assert [split_record(r)[1] for r in raws] == [at, None, at, None]
    assert await app.redis.hmget(qk.payloads, ids) == [None, over, None, over]

    jobs = await claim(app, 4)
    assert {j.id: j.payload for j in jobs} == expected
    for job_id in ids:
        rec = await app.get_job(job_id)
        assert rec.state == "leased" and rec.payload == msgpack.unpackb(expected[job_id])[3]
    assert await app.scripts.ack(qk, "succeeded", 60_000,
                                 [(j.id, j.token, b"", "") for j in jobs]) == [1] * 4
    assert await stored_payloads(app, qk, ids) == [expected[i] for i in ids]
    assert {(await app.get_job(i)).state for i in ids} == {"succeeded"}


@pytest.mark.parametrize("grp", ["", "t:9"])
async def test_a_payload_holding_bars_and_nuls_survives_every_rewrite(app: App, grp: str) -> None:
    """A payload's bytes may be the record's separators ('|', NUL): the claim
    and the ack (which rewrite the record from its text), a failure and its
    retry (which parse and re-encode it) and a claim of the retry all keep
    the payload whole and read the record's fields right; version 3 (a park
    group) too."""
    qk = app.keys(Q)
    kwargs = {"s": "a|b\x00c|", "t": "\x00|\x00"}
    env = codec.encode_envelope(kwargs, "", "")
    assert b"|" in env and b"\x00" in env
    assert await app.scripts.enqueue(qk, [NewJob("j", "mail.send", env, 0, 0, 0, 0, grp)]) == \
        [(True, "queued")]
    first = await claim(app, 1)
    assert [(j.id, j.payload, j.attempt) for j in first] == [("j", env, 1)]
    raw = await app.redis.hget(qk.jobs, "j")
    assert split_record(raw)[1] == env
    m = parse_record(raw)
    assert (m["state"], m["worker"], m["grp"], m["reason"]) == ("leased", "w1", grp, "")

    await fail_job(app, qk, "j", first[0].token, "work", "", "boom", 0)
    raw = await app.redis.hget(qk.jobs, "j")
    assert split_record(raw)[1] == env and parse_record(raw)["state"] == "queued"
    second = await claim(app, 1)
    assert [(j.id, j.payload, j.attempt) for j in second] == [("j", env, 2)]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("j", second[0].token, b"", "")]) \
        == [1]
    raw = await app.redis.hget(qk.jobs, "j")
    assert split_record(raw)[1] == env
    assert (parse_record(raw)["state"], parse_record(raw)["attempt"]) == ("succeeded", 2)
    rec = await app.get_job("j")
    assert rec.payload == kwargs and rec.correlation_id == "j"


async def test_a_job_enqueued_with_its_payload_in_the_hash_runs_as_before(app: App) -> None:
    """Records written before payloads moved into them keep theirs in the
    payloads hash: claim, get_job, a delayed retry (woken by the claim) and
    the ack read it there and leave it there."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("mail.send", {"n": i}, job_id=f"old{i}", queue=Q)
                            for i in range(3)])
    for i in range(3):  # as the code before wrote them
        fields, payload = split_record(await app.redis.hget(qk.jobs, f"old{i}"))
        assert payload is not None
        await app.redis.hset(qk.jobs, f"old{i}", fields)
        await app.redis.hset(qk.payloads, f"old{i}", payload)
    jobs = await claim(app, 3)
    assert sorted((j.id, msgpack.unpackb(j.payload)[3]["n"]) for j in jobs) == \
        [("old0", 0), ("old1", 1), ("old2", 2)]
    assert (await app.get_job("old1")).payload == {"n": 1}
    retried = next(j for j in jobs if j.id == "old2")
    await fail_job(app, qk, "old2", retried.token, "work", "", "boom", 60_000)
    await make_due(app, Q, "old2")
    again = await claim(app, 1)
    assert [(j.id, msgpack.unpackb(j.payload)[3]) for j in again] == [("old2", {"n": 2})]
    acks = [(j.id, j.token, b"", "") for j in jobs if j.id != "old2"]
    assert await app.scripts.ack(qk, "succeeded", 60_000, acks) == [1, 1]
    for i in range(3):
        raw = await app.redis.hget(qk.jobs, f"old{i}")
        assert split_record(raw)[1] is None
    assert len(await app.redis.hmget(qk.payloads, ["old0", "old1", "old2"])) == 3
    assert (await app.get_job("old0")).payload == {"n": 0}


async def test_a_dead_reason_holding_a_bar_or_a_nul_is_cleaned_not_stored(app: App) -> None:
    """A dead reason is a record field: a PermanentError subclass could name
    one with '|' or NUL, which would break the record. scripts.fail cleans
    it; the record stays readable and keeps its payload."""
    qk = app.keys(Q)
    job = await app.enqueue("mail.send", {"a": 1}, queue=Q, job_id="d")
    leased = await claim(app, 1)
    await fail_job(app, qk, job.id, leased[0].token, "dead", "bad|reason\x00here", "boom", 0)
    rec = await app.get_job("d")
    assert (rec.state, rec.reason, rec.payload) == ("dead", "bad/reasonhere", {"a": 1})


@pytest.mark.parametrize("grp", ["", "t:9"])
async def test_the_code_before_reads_a_record_with_its_payload_inside_as_malformed(
        real_app: App, sync_redis: Any, grp: str) -> None:
    """A worker of the code before meets such a record in a rolling upgrade:
    its patterns (the RECORD_PATTERN, RECORD_PATTERN_V3 and LEASE_PATTERN of
    lua/_lib.lua, unchanged since) and Python's field count must all refuse
    it, so it is buried untouched, never run without its payload. A queued
    job's record as enqueued is version 4, which they refuse whole; every
    rewrite of it is version 2 or 3 with the payload inside, where the
    mark's '|' is what makes them refuse: with a bare NUL the payload would
    match as the last field."""
    app = real_app
    qk = app.keys(Q)
    env = codec.encode_envelope({"a": 1}, "", "")
    assert b"|" not in env  # the case a bare NUL would let through
    await app.scripts.enqueue(qk, [NewJob("j", "mail.send", env, 0, 0, 0, 0, grp)])
    stored = await app.redis.hget(qk.jobs, "j")
    assert stored.startswith(b"4|")
    # what any rewrite of the job writes (a claim, a park, a cancel): version 2 or 3
    rewrite = "return encode_meta(parse_meta(ARGV[1]))"
    lib = (lua_dir() / "_lib.lua").read_text()
    raw = sync_redis.eval(lib_for(rewrite, lib) + "\n" + rewrite, 0, stored)
    assert raw.startswith(b"3|" if grp else b"2|")
    fields, payload = split_record(raw)
    assert payload == env
    snippet = """
local v2 = string.match(ARGV[1], RECORD_PATTERN)
local v3 = string.match(ARGV[1], RECORD_PATTERN_V3)
local lease, _, _, _, _, _, _, _, _, _, _, _, _, tail = string.match(ARGV[1], LEASE_PATTERN)
local old_fast_path = lease == '2' and not string.find(tail, '|', 1, true) or
                      lease == '3' and string.match(tail, '^[^|]*|[^|]+$') ~= nil
return {v2 and 1 or 0, v3 and 1 or 0, old_fast_path and 1 or 0}
"""
    script = lib_for(snippet, lib) + "\n" + snippet
    assert sync_redis.eval(script, 0, stored) == [0, 0, 0]
    assert sync_redis.eval(script, 0, split_record(stored)[0]) == [0, 0, 0]
    assert sync_redis.eval(script, 0, raw) == [0, 0, 0]
    assert sync_redis.eval(script, 0, fields) == ([1, 0, 1] if not grp else [0, 1, 1])
    # Python before: the fields counted by splitting the whole value on '|'
    assert len(fields.decode().split("|")) < len(raw.decode(errors="replace").split("|"))
