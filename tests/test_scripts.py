"""Each Lua script on its own, on the real server and on memory:// (fakeredis).

Time is controlled by seeding scores relative to the server's TIME."""

from __future__ import annotations

import os
from typing import Any

import pytest

import leasequeue as lq
from leasequeue import App, JobRequest
from leasequeue import producer as producer_module
from leasequeue.errors import (
    ConfigError,
    JobNotFound,
    LimitKeyError,
    MalformedJob,
    PayloadTooLarge,
)
from leasequeue.models import NewJob
from leasequeue.producer import chunks
from leasequeue.store.record import RECORD_FIELDS, parse_record, split_record
from leasequeue.store.scripts import enqueue_args, runs_args
from tests.helpers import (
    DEFAULT_BUDGET,
    START_ALL,
    all_keys_state,
    expire_lease,
    fail_job,
    make_due,
    new_claim_id,
    ready_ids,
    server_ms,
    stored_payloads,
)

pytestmark = pytest.mark.anyio

Q = "default"


async def claim(app: App, count: int = 1, lease_ms: int = 30_000, worker: str = "w1"):
    return await app.scripts.claim(app.keys(Q), count, lease_ms, worker, START_ALL, new_claim_id())


async def test_enqueue_then_get_job(app: App) -> None:
    job = await app.enqueue("add", {"a": 1}, queue=Q, correlation_id="corr-1", request_id="r1")
    assert job.created and job.state == "queued"
    rec = await app.get_job(job.id)
    assert rec.state == "queued" and rec.name == "add" and rec.payload == {"a": 1}
    assert rec.correlation_id == "corr-1" and rec.request_id == "r1"
    assert rec.attempt == 0 and rec.token == 0
    assert await all_keys_state(app, Q) == {
        "ready": [job.id], "scheduled": [], "leases": [], "dead": [], "done": []}


async def test_enqueue_dedup_returns_existing(app: App) -> None:
    first = await app.enqueue("add", {"a": 1}, queue=Q, job_id="same")
    second = await app.enqueue("add", {"a": 2}, queue=Q, job_id="same")
    assert first.created and not second.created and second.state == "queued"
    assert (await app.get_job("same")).payload == {"a": 1}
    assert (await app.stats(Q)).ready == 1


@pytest.mark.parametrize("delay_ms, priority, budgets, grp", [
    (0, 0, (0, 0), ""), (0, 0, (3, 5), "t:9"), (60_000, 0, (0, 0), ""), (0, -7, (3, 5), ""),
    (0, 4, (0, 0), "t:9")])
async def test_one_job_and_a_batch_write_the_same_job(
        app: App, delay_ms: int, priority: int, budgets: tuple[int, int], grp: str) -> None:
    """A call of one job takes a path of its own (enqueue_one.lua for a job
    queued now at priority 0, else enqueue.lua's one-job block: HSETNX, no
    batch tables, its state alone as the reply): it must write what the batch
    path writes for the same job, field by field, and count, order and wake
    alike."""
    qk = app.keys(Q)

    def job(job_id: str) -> NewJob:
        return NewJob(job_id, "mail.send", b"\x94\x01\xa0\xa0\x80", delay_ms, priority,
                      *budgets, grp)

    async def stats() -> tuple[int, int, int]:
        seq, enqueued = await app.redis.hmget(qk.stats, ["seq", "enqueued"])
        return int(seq or 0), int(enqueued or 0), await app.redis.llen(qk.wake)

    before = await stats()
    state = "scheduled" if delay_ms else "queued"
    assert await app.scripts.enqueue(qk, [job("one")]) == [(True, state)]
    after_one = await stats()
    assert await app.scripts.enqueue(qk, [job("b1"), job("b2")]) == [(True, state)] * 2
    after_batch = await stats()
    assert [a - b for a, b in zip(after_one, before, strict=True)] == [1, 1, 1]
    assert [a - b for a, b in zip(after_batch, after_one, strict=True)] == [2, 2, 2]

    now = await server_ms(app)
    raws = await app.redis.hmget(qk.jobs, ["one", "b1", "b2"])
    # a queued job's record is version 4 (its fields alone), a scheduled one's 2 or 3
    assert {r[:2] for r in raws} == {b"4|" if not delay_ms else b"3|" if grp else b"2|"}
    one, b1, b2 = (parse_record(r) for r in raws)
    assert [r["seq"] for r in (one, b1, b2)] == [after_one[0], after_one[0] + 1,
                                                 after_one[0] + 2]
    for record in (one, b1, b2):  # the instants, on the server clock
        assert now - 5_000 <= record["enq_ms"] <= now
        assert record["ready_ms"] == (0 if delay_ms else record["enq_ms"])
        assert record["due_ms"] == (record["enq_ms"] + delay_ms if delay_ms else 0)
    for record in (one, b1):
        for f in ("seq", "enq_ms", "ready_ms", "due_ms"):
            record[f] = "-"
    assert one == b1  # state, budgets, prio, name, grp: all alike
    assert (one["state"], one["prio"], one["max_attempts"], one["max_infra"], one["name"],
            one["grp"]) == (state, priority, *budgets, "mail.send", grp)
    # both paths keep a small payload inside the record, none in the payloads hash
    assert [split_record(r)[1] for r in await app.redis.hmget(qk.jobs, ["one", "b1"])] == \
        [b"\x94\x01\xa0\xa0\x80"] * 2
    assert await app.redis.hlen(qk.payloads) == 0
    if not delay_ms and priority == 0:
        # priority 0 waits in the line, FIFO across the two paths, nothing in the ready set
        assert await app.redis.lrange(qk.line, 0, -1) == [b"one", b"b1", b"b2"]
        assert await app.redis.zcard(qk.ready) == 0
        return
    assert await app.redis.llen(qk.line) == 0
    where = qk.scheduled if delay_ms else qk.ready
    # FIFO within one priority across the two paths, each score as the batch's
    members = await app.redis.zrange(where, 0, -1, withscores=True)
    # (the scheduled set is scored by due ms alone: ties sort by id)
    assert [m.decode() for m, _ in members] == (["b1", "b2", "one"] if delay_ms and
                                                members[0][1] == members[2][1]
                                                else ["one", "b1", "b2"])
    if not delay_ms:
        scores = [int(score) for _, score in members]
        assert scores[1] - scores[0] == scores[2] - scores[1] == 1
        assert scores[0] == (32767 - priority) * 2 ** 36 + after_one[0]


async def test_an_id_over_a_malformed_record_is_answered_malformed_and_writes_nothing(
        app: App) -> None:
    """A record edited into nonsense under a job id: enqueueing that id again,
    one job or in a batch, answers 'malformed' (not created) and neither the
    record nor anything else changes."""
    qk = app.keys(Q)
    await app.redis.hset(qk.jobs, "bad", "nonsense")
    one = await app.enqueue("add", {"a": 1}, queue=Q, job_id="bad")
    assert (one.created, one.state) == (False, "malformed")
    many = await app.enqueue_many([JobRequest("add", job_id="bad", queue=Q),
                                   JobRequest("add", job_id="fine", queue=Q)])
    assert [(e.created, e.state) for e in many] == [(False, "malformed"), (True, "queued")]
    assert await app.redis.hget(qk.jobs, "bad") == b"nonsense"
    assert await app.redis.hexists(qk.payloads, "bad") == 0
    assert await ready_ids(app, qk) == ["fine"]
    assert int(await app.redis.hget(qk.stats, "enqueued")) == 1


async def test_a_batch_answers_each_job_whether_it_answers_in_pairs_or_in_one_state(
        app: App) -> None:
    """enqueue.lua answers a call that created every job, all in one state,
    with that state alone, and in (code, state) pairs otherwise: each caller
    learns its own job's fate either way."""
    qk = app.keys(Q)
    one_state = [JobRequest(n, job_id=f"u{i}", queue=Q) for i, n in enumerate("aab")]  # 2 runs
    jobs = [app.producer.prepare(r)[1] for r in one_state]
    raw = await app.scripts.run("enqueue", qk, enqueue_args(app.scripts.settings, jobs))
    assert raw in (b"queued", "queued")  # one string for the three
    assert [(e.created, e.state) for e in await app.enqueue_many(
        [JobRequest("a", job_id=f"v{i}", queue=Q) for i in range(3)])] == [(True, "queued")] * 3
    two_states = [JobRequest("a", job_id="w0", queue=Q),
                  JobRequest("a", job_id="w1", queue=Q, delay=60),
                  JobRequest("a", job_id="w2", queue=Q)]
    assert [(e.id, e.created, e.state) for e in await app.enqueue_many(two_states)] == [
        ("w0", True, "queued"), ("w1", True, "scheduled"), ("w2", True, "queued")]
    again = [JobRequest("a", job_id="u0", queue=Q), JobRequest("a", job_id="x0", queue=Q)]
    assert [(e.id, e.created, e.state) for e in await app.enqueue_many(again)] == [
        ("u0", False, "queued"), ("x0", True, "queued")]


async def test_priority_then_exact_fifo(app: App) -> None:
    reqs = [JobRequest("j", {"i": i}, job_id=f"p0-{i}", queue=Q) for i in range(50)]
    reqs += [JobRequest("j", {"i": i}, job_id=f"p5-{i}", queue=Q, priority=5) for i in range(50)]
    reqs += [JobRequest("j", job_id="neg", queue=Q, priority=-3)]
    await app.enqueue_many(reqs)
    batch = await claim(app, 200)
    order = [j.id for j in batch.jobs]
    assert order == [f"p5-{i}" for i in range(50)] + [f"p0-{i}" for i in range(50)] + ["neg"]


async def test_a_mixed_batch_goes_in_runs_and_each_job_keeps_its_own_options(app: App) -> None:
    """enqueue.lua takes a batch as runs of jobs alike (one head per run, an
    id and a payload per job): a batch that changes name, delay, priority or
    budgets from job to job is cut into runs, and each job's record holds
    its own options, in order, with a repeated id answered as existing."""
    reqs = [
        JobRequest("a", {"i": 0}, job_id="a0", queue=Q),
        JobRequest("a", {"i": 1}, job_id="a1", queue=Q),
        JobRequest("b", {"i": 2}, job_id="b2", queue=Q, delay=60),
        JobRequest("a", {"i": 3}, job_id="a3", queue=Q, priority=4),
        JobRequest("a", {"i": 4}, job_id="a4", queue=Q, priority=4, max_attempts=2,
                   max_infra_attempts=7),
        JobRequest("a", {"i": 5}, job_id="a0", queue=Q),  # repeats a0: existed
        JobRequest("a", {"i": 6}, job_id="a6", queue=Q),
    ]
    jobs = [app.producer.prepare(r)[1] for r in reqs]
    args = enqueue_args(app.scripts.settings, jobs)
    # five runs (a a | b | a+4 | a+4 budgets | a a): 3 + 5 heads of 8; the runs
    # of one job send its payload in the head and its id alone, the others a
    # pair per job (their payloads differ)
    assert len(args) == 3 + 5 * 8 + 3 + 2 * 4
    out = await app.enqueue_many(reqs)
    assert [(e.id, e.created, e.state) for e in out] == [
        ("a0", True, "queued"), ("a1", True, "queued"), ("b2", True, "scheduled"),
        ("a3", True, "queued"), ("a4", True, "queued"), ("a0", False, "queued"),
        ("a6", True, "queued")]
    for job_id, name, i, prio, budgets in [
            ("a0", "a", 0, 0, (None, None)), ("a1", "a", 1, 0, (None, None)),
            ("b2", "b", 2, 0, (None, None)), ("a3", "a", 3, 4, (None, None)),
            ("a4", "a", 4, 4, (2, 7)), ("a6", "a", 6, 0, (None, None))]:
        rec = await app.get_job(job_id)
        assert (rec.name, rec.payload, rec.priority) == (name, {"i": i}, prio), job_id
        assert (rec.max_attempts, rec.max_infra_attempts) == budgets, job_id
    assert (await app.get_job("b2")).due_ms is not None
    batch = await claim(app, 10)
    assert [j.id for j in batch.jobs] == ["a3", "a4", "a0", "a1", "a6"]


async def test_a_run_of_one_payload_sends_it_once_and_every_job_keeps_it(app: App) -> None:
    """A run whose jobs all carry the same payload sends it once, in the run's
    head, and each job's id alone; a run whose payloads differ sends a pair
    per job. Either way every job's record holds its own payload, inside the
    record or, over the inline limit, in the payloads hash."""
    big = {"blob": "x" * 2000}  # over INLINE_MAX once encoded: beside the record
    reqs = [JobRequest("a", job_id=f"e{i}", queue=Q) for i in range(3)]  # no payload
    reqs += [JobRequest("b", big, job_id=f"big{i}", queue=Q) for i in range(2)]
    reqs += [JobRequest("a", {"i": i}, job_id=f"m{i}", queue=Q, priority=1)
             for i in (1, 1, 2)]
    reqs += [JobRequest("a", job_id="e1", queue=Q, delay=60)]  # exists: not written
    jobs = [app.producer.prepare(r)[1] for r in reqs]
    args = enqueue_args(app.scripts.settings, jobs)
    heads = [3, 3 + 8 + 3, 3 + 2 * 8 + 3 + 2, 3 + 3 * 8 + 3 + 2 + 2 * 3]
    assert [args[h] for h in heads] == [3, 2, 3, 1]  # each run's count
    assert [args[h + 7] for h in heads] == [jobs[0].payload, jobs[3].payload, b"",
                                            jobs[8].payload]
    assert args[heads[0] + 8:heads[1]] == ["e0", "e1", "e2"]
    assert args[heads[2] + 8:heads[3]] == [j for job in jobs[5:8] for j in (job.id, job.payload)]
    assert len(args) == heads[3] + 8 + 1
    out = await app.enqueue_many(reqs)
    assert [(e.id, e.created) for e in out] == [
        ("e0", True), ("e1", True), ("e2", True), ("big0", True), ("big1", True),
        ("m1", True), ("m1", False), ("m2", True), ("e1", False)]
    for job_id, payload in [("e0", {}), ("e2", {}), ("big0", big), ("big1", big),
                            ("m1", {"i": 1}), ("m2", {"i": 2})]:
        assert (await app.get_job(job_id)).payload == payload, job_id
    assert await app.redis.hexists(app.keys(Q).payloads, "big1")
    assert (await app.get_job("e1")).state == "queued"  # the later delayed copy wrote nothing
    one = app.producer.prepare(JobRequest("a", {"k": 1}, job_id="solo", queue=Q))[1]
    assert enqueue_args(app.scripts.settings, [one])[3:] == [
        1, *(run_shape(one)), one.payload, "solo"]
    await app.enqueue("a", {"k": 1}, job_id="solo", queue=Q)
    assert (await app.get_job("solo")).payload == {"k": 1}


def test_a_batch_of_one_run_packs_as_the_runs_loop_does() -> None:
    """enqueue_args sends a batch of one run with one payload (what a bulk
    enqueue of one kind of job is) without its loop a job at a time: the
    arguments must be the runs loop's, value for value, and any batch that
    is not one run of one payload must go to the loop."""
    settings = lq.App("memory://").scripts.settings
    # distinct numbers in every field, so a field out of place shows
    base = NewJob("id0", "a", b"\x81", 10, 2, 3, 4, "")
    same = [base._replace(id=f"id{i}") for i in range(5)]
    # equal, not one object (bytes(b) of bytes is b itself)
    equal_payload = [j._replace(payload=bytes(bytearray(j.payload))) for j in same]
    assert equal_payload[1].payload is not equal_payload[0].payload
    cases = {
        "one run": same,
        "equal payloads": equal_payload,
        "a name changes": [*same[:3], same[3]._replace(name="b"), same[4]],
        "a delay changes": [*same[:4], same[4]._replace(delay_ms=5)],
        "a payload equal, not the same object": [*same[:4], equal_payload[4]],
        "a priority changes": [same[0]._replace(priority=2), *same[1:]],
        "budgets change": [*same[:2], same[2]._replace(max_attempts=3), *same[3:]],
        "infra budget changes": [*same[:2], same[2]._replace(max_infra=3), *same[3:]],
        "a group changes": [*same[:4], same[4]._replace(grp="g")],
        "a payload differs": [*same[:4], same[4]._replace(payload=b"\x82")],
        "empty payloads": [j._replace(payload=b"") for j in same],
        "one job": same[:1],
        "two runs back": [*same[:2], same[2]._replace(name="b"), *same[3:]],
    }
    # jobs alike (ids too): blank below, as the coalescer's batch of one name
    cases["alike, one object"] = [base] * 5
    cases["alike, one object each"] = [base._replace(id="id0") for _ in range(5)]
    for label, jobs in cases.items():
        assert enqueue_args(settings, jobs) == runs_args(settings, jobs), label
        # the same batch with no ids of its own, drawn by its sender (the coalescer)
        blank = [j._replace(id="") for j in jobs]
        drawn = [f"new{i}" for i in range(len(jobs))]
        assert enqueue_args(settings, blank, drawn) == runs_args(settings, blank, drawn), label
    # the fast path's answer for one run: one head, the payload in it, the ids
    assert enqueue_args(settings, same) == [
        settings.events_maxlen, settings.audit_flag, settings.wake_cap, 5, "a", 10, 2, 3, 4, "",
        b"\x81", *(f"id{i}" for i in range(5))]
    assert enqueue_args(settings, [base._replace(id="")] * 3, ["x", "y", "z"]) == [
        settings.events_maxlen, settings.audit_flag, settings.wake_cap, 3, "a", 10, 2, 3, 4, "",
        b"\x81", "x", "y", "z"]


def test_a_plain_batch_makes_the_jobs_prepare_many_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of plain requests (no payload, id, correlation or request id,
    the very shape objects of the first) is made a call's worth at a time
    (Producer.plain_batch, PlainBatch): the jobs must be prepare_many's
    field for field, ids included (the same random bytes), cut into the
    same calls, whatever the batch's size against the call's 500."""
    randomness = os.urandom(14 * 1_500)
    monkeypatch.setattr(producer_module.os, "urandom", lambda n: randomness[:n])
    producer = lq.App("memory://plain-made").producer
    for n in (1, 2, 499, 500, 501, 1_001, 1_500):
        requests = [JobRequest("x") for _ in range(n)]
        plain = producer.plain_batch(requests, None)
        assert plain is not None and plain.size == n and plain.queue == Q
        assert [list(plain.span(k)) for k in range(len(plain))] == chunks(list(range(n)))
        made = [job for part in plain for job in part]
        expected = [job for _, job in producer.prepare_many(requests)]
        assert made == expected and {type(job) for job in made} == {NewJob}, n
        assert len({job.id for job in made}) == n
        assert plain[-1] is plain[len(plain) - 1]  # made once, kept
        with pytest.raises(IndexError):
            plain[len(plain)]
        first = plain[0]
        plain.forget(0)  # answered: dropped, and made again the same when read again
        assert plain[0] == first and plain[0] is not first


def test_any_request_not_plain_sends_the_batch_to_prepare_many() -> None:
    """plain_batch answers None (prepare_many takes the batch, checking and
    encoding each request) for a batch with a request that brings its own
    payload, id, correlation or request id, or other shape objects than the
    first's, for an App with enqueue hooks, and for a sharded queue or a job
    with limit keys (each payload renders its own)."""
    app = lq.App("memory://plain-not", queue_shards={"hot": 3})

    @app.job(max_concurrent=1, concurrency_key="order:{order_id}")
    async def keyed(order_id: int) -> None: ...

    @app.job()
    async def plain_job() -> None: ...

    producer = app.producer
    plain = [JobRequest("plain_job") for _ in range(3)]
    assert producer.plain_batch(plain, None) is not None
    other_name = "".join(["plain", "_job"])  # equal to the name, another object
    assert other_name is not plain[0].name
    for label, odd in {
        "a payload": JobRequest("plain_job", {"a": 1}),
        "an empty payload": JobRequest("plain_job", {}),
        "an id": JobRequest("plain_job", job_id="j"),
        "a correlation id": JobRequest("plain_job", correlation_id="c"),
        "a request id": JobRequest("plain_job", request_id="r"),
        "another name object": JobRequest(other_name),
        "a queue": JobRequest("plain_job", queue="other"),
        "a delay": JobRequest("plain_job", delay=1.0),
        "a priority": JobRequest("plain_job", priority=5),
        "budgets": JobRequest("plain_job", max_attempts=3),
        "infra budgets": JobRequest("plain_job", max_infra_attempts=3),
    }.items():
        assert producer.plain_batch([*plain, odd, *plain], None) is None, label
    assert producer.plain_batch(plain, []) is None  # enqueue hooks see each job
    assert producer.plain_batch([JobRequest("plain_job", queue="hot")] * 3, None) is None
    assert producer.plain_batch([JobRequest("keyed")] * 3, None) is None
    assert producer.plain_batch([], None) is None


async def test_a_plain_batch_is_written_in_order_and_checked_before_any_write(app: App) -> None:
    """A plain batch of 1,201 jobs (three calls) answers each job in its
    request's place, created, and queues them in request order; a batch
    whose first request is wrong, or whose later one is, writes nothing."""
    qk = app.keys(Q)
    jobs = await app.enqueue_many([JobRequest("x") for _ in range(1_201)])
    assert len(jobs) == 1_201 and len({j.id for j in jobs}) == 1_201
    assert all(j.created and j.state == "queued" and j.queue == Q and j.name == "x"
               for j in jobs)
    assert await ready_ids(app, qk) == [j.id for j in jobs]
    # each call's jobs are dropped once it is answered (a kept call's 500 jobs
    # would be promoted to the collector's oldest generation)
    batches: list[Any] = []
    plain_batch = app.producer.plain_batch

    def spy(*args: Any) -> Any:
        batches.append(plain_batch(*args))
        return batches[-1]

    app.producer.plain_batch = spy  # type: ignore[method-assign]
    assert len(await app.enqueue_many([JobRequest("x") for _ in range(1_201)])) == 1_201
    assert len(batches) == 1 and batches[0]._calls == {}
    app.producer.plain_batch = plain_batch  # type: ignore[method-assign]
    for wrong in ([JobRequest("x", priority=True)] + [JobRequest("x")] * 600,
                  [JobRequest("x")] * 600 + [JobRequest("x", priority=True)]):
        with pytest.raises(ConfigError):
            await app.enqueue_many(wrong)
    assert len(await ready_ids(app, qk)) == 2_402  # the two good batches, nothing of the wrong


@pytest.mark.parametrize("start", [0, 7, 97, 9_999_998, 2 ** 36 - 30])
async def test_a_batch_numbers_its_records_in_sequence_across_tens(app: App, start: int) -> None:
    """A batch writes each record's sequence number as text from the text of
    its tens and its last digit: across a ten, a hundred and a new digit
    (here from just past ``start``, up to the seqs the scores allow), every
    record holds the number the queue's counter gave it, as a job enqueued
    alone does."""
    qk = app.keys(Q)
    await app.redis.hset(qk.stats, "seq", start)
    ids = [f"s{i}" for i in range(25)]
    await app.enqueue_many([JobRequest("a", job_id=i, queue=Q) for i in ids])
    raws = await app.redis.hmget(qk.jobs, ids)
    assert [parse_record(r)["seq"] for r in raws] == list(range(start + 1, start + 26))
    assert [r.split(b"|")[2] for r in raws] == [str(n).encode()
                                                for n in range(start + 1, start + 26)]
    # alone (enqueue_one.lua, which prints its seq as Lua prints a number): the
    # same text up to the seqs the scores allow (SEQ_SPAN, 2^36)
    await app.enqueue("a", job_id="after", queue=Q)
    raw = await app.redis.hget(qk.jobs, "after")
    assert parse_record(raw)["seq"] == start + 26
    assert raw.split(b"|")[2] == str(start + 26).encode()


def run_shape(job: NewJob) -> tuple[object, ...]:
    """A run head's six shape values for ``job`` (between its count and payload)."""
    return (job.name, job.delay_ms, job.priority, job.max_attempts, job.max_infra, job.grp)


@pytest.mark.parametrize("field, good, bad", [
    ("priority", 3, 40_000), ("delay", 5.0, -1.0), ("max_attempts", 2, True),
    ("max_infra_attempts", 2, 0), ("queue", "other", "no such:queue"), ("name", "b", "")])
async def test_a_batch_checks_every_request_whose_options_differ_from_the_one_before(
        app: App, field: str, good: object, bad: object) -> None:
    """prepare_many checks name, queue, priority, delay and budgets once for
    a run of requests that hold the very same objects: a request that
    changes any one of them is checked on its own and keeps its own value,
    and a bad one refuses the whole batch (nothing written)."""
    base: dict[str, Any] = {"name": "a", "queue": Q}
    await app.enqueue_many([JobRequest(**base, job_id="j0"),
                            JobRequest(**{**base, field: good}, job_id="j1")])
    first = await app.get_job("j0", queue=Q)
    rec = await app.get_job("j1", queue="other" if field == "queue" else Q)
    seen = {"priority": rec.priority, "delay": rec.state, "max_attempts": rec.max_attempts,
            "max_infra_attempts": rec.max_infra_attempts, "queue": rec.queue, "name": rec.name}
    wanted = {"delay": "scheduled"}.get(field, good)
    assert seen[field] == wanted
    assert (first.name, first.queue, first.priority, first.state, first.max_attempts,
            first.max_infra_attempts) == ("a", Q, 0, "queued", None, None)
    with pytest.raises(ConfigError):
        await app.enqueue_many([JobRequest(**base, job_id="k0"),
                                JobRequest(**{**base, field: bad}, job_id="k1")])
    for job_id in ("k0", "k1"):
        with pytest.raises(JobNotFound):
            await app.get_job(job_id)


class _Header(lq.Hooks):
    """A hook that adds a header to every job it sees enqueued."""

    def before_enqueue(self, job: lq.EnqueueInfo) -> None:
        job.headers["tenant"] = "t1"


@pytest.mark.parametrize("kind", ["plain", "hooks", "rate on the queue", "payload limit",
                                  "rate keyed by payload"])
def test_a_batch_prepares_every_request_as_prepare_does_alone(kind: str) -> None:
    """prepare_many builds a request of the plain kind (no payload, job id,
    correlation or request id; no limit keys, no hooks) itself, without
    prepare(): every request of a batch that mixes them comes out as
    prepare() makes it alone, fresh ids apart (distinct, 28 hex characters),
    under the smallest payload limit too; a batch prepare() would refuse is
    refused whole."""
    app = App("memory://batch-prepare", prefix="bp",
              queue_rates={Q: lq.Rate(10)} if kind == "rate on the queue" else None,
              max_payload_bytes=1 if kind == "payload limit" else 1024)
    if kind == "hooks":
        app.hooks.add(_Header())

    @app.job(rate=lq.Rate(10, key="tenant:{who}") if kind == "rate keyed by payload" else [])
    async def a(who: str = "") -> None: ...

    reqs = [JobRequest("a"), JobRequest("a", payload={"who": "x"}), JobRequest("a"),
            JobRequest("a", job_id="given"), JobRequest("a"), JobRequest("a", correlation_id="c"),
            JobRequest("a"), JobRequest("a", request_id="r"), JobRequest("a"),
            JobRequest("a", priority=3), JobRequest("a"), JobRequest("a")]
    producer = app.producer
    infos: list[lq.EnqueueInfo] | None = [] if kind == "hooks" else None
    if kind == "payload limit":  # the limit counts the kwargs: {} is 1 byte, {"who": "x"} 7
        with pytest.raises(PayloadTooLarge):
            producer.prepare_many(reqs)
        reqs[1] = JobRequest("a", payload={})
    if kind == "rate keyed by payload":  # a job without the key's field is refused, whole batch
        with pytest.raises(LimitKeyError):
            producer.prepare(reqs[0])
        with pytest.raises(LimitKeyError):
            producer.prepare_many([JobRequest("a"), JobRequest("a")])
        return
    batch = producer.prepare_many(reqs, infos)
    alone = [producer.prepare(r, [] if infos is not None else None) for r in reqs]
    fresh = [job.id for r, (_, job) in zip(reqs, batch, strict=True) if r.job_id is None]
    assert len(set(fresh)) == len(fresh) == len(reqs) - 1
    assert all(len(i) == 28 and int(i, 16) >= 0 for i in fresh)
    assert batch[3][1].id == "given"
    assert [(q, job._replace(id="")) for q, job in batch] == [
        (q, job._replace(id="")) for q, job in alone]
    assert len(infos or ()) == (len(reqs) if kind == "hooks" else 0)


@pytest.mark.parametrize("first_exists", [False, True])
async def test_a_batch_answers_every_job_in_order_whatever_it_created(
        app: App, first_exists: bool) -> None:
    """enqueue.lua answers a batch with one state when it created every job
    in one state; otherwise a pair per job. The pairs are built once a job
    existed (the jobs before it were created, each in its run's state) or at
    the end when every job was created in states of more than one run."""
    if first_exists:
        await app.enqueue("a", queue=Q, job_id="x0")
    reqs = [JobRequest("a", job_id="x0", queue=Q), JobRequest("b", job_id="x1", queue=Q,
                                                               delay=60),
            JobRequest("a", job_id="x2", queue=Q)]
    out = await app.enqueue_many(reqs)
    assert [(e.id, e.created, e.state) for e in out] == [
        ("x0", not first_exists, "queued"), ("x1", True, "scheduled"), ("x2", True, "queued")]
    assert (await app.stats(Q)).ready == 2 and (await app.stats(Q)).scheduled == 1


@pytest.mark.parametrize("held, batch", [(5, 40), (5, 31), (600, 40)])
async def test_a_batch_finds_the_jobs_that_exist_whatever_the_size_of_the_jobs_hash(
        app: App, held: int, batch: int) -> None:
    """enqueue.lua looks a batch's ids up in the jobs hash by HMGET, or, for a
    batch of at least 32 ids into a hash of at most 512 entries, by reading
    the hash's ids once (HKEYS): either way an id that exists, or repeats in
    the batch, is answered with its state and written once, and every other
    job is created."""
    await app.enqueue_many([JobRequest("a", job_id=f"h{i}", queue=Q) for i in range(held)])
    await app.enqueue("a", queue=Q, job_id="late", delay=60)
    ids = [f"n{i}" for i in range(batch - 4)] + ["h1", "late", "n0", f"h{held - 1}"]
    out = await app.enqueue_many([JobRequest("a", job_id=i, queue=Q) for i in ids])
    assert [(e.id, e.created, e.state) for e in out] == [
        *((f"n{i}", True, "queued") for i in range(batch - 4)),
        ("h1", False, "queued"), ("late", False, "scheduled"), ("n0", False, "queued"),
        (f"h{held - 1}", False, "queued")]
    stats = await app.stats(Q)
    assert (stats.ready, stats.scheduled) == (held + batch - 4, 1)
    claimed = await claim(app, held + batch)
    assert len(claimed.jobs) == len({j.id for j in claimed.jobs}) == held + batch - 4


async def test_claim_leases_on_server_clock(app: App) -> None:
    job = await app.enqueue("j", queue=Q)
    before = await server_ms(app)
    batch = await claim(app, 5, lease_ms=7_000)
    after = await server_ms(app)
    assert [j.id for j in batch.jobs] == [job.id]
    j = batch.jobs[0]
    assert (j.token, j.attempt, j.name) == (1, 1, "j")
    rec = await app.get_job(job.id)
    assert rec.state == "leased" and rec.worker == "w1"
    assert rec.lease_expires_ms is not None
    assert before + 7_000 <= rec.lease_expires_ms <= after + 7_000
    assert before <= batch.now_ms <= after
    assert (await claim(app, 5)).jobs == []


async def test_claim_is_bounded_by_count(app: App) -> None:
    await app.enqueue_many([JobRequest("j", queue=Q) for _ in range(30)])
    assert len((await claim(app, 10)).jobs) == 10
    assert (await app.stats(Q)).ready == 20


async def test_delay_goes_to_scheduled_and_promotes_when_due(app: App) -> None:
    before = await server_ms(app)
    job = await app.enqueue("j", queue=Q, delay=60)
    rec = await app.get_job(job.id)
    assert rec.state == "scheduled" and rec.due_ms is not None
    assert before + 60_000 <= rec.due_ms <= before + 61_000
    batch = await claim(app)
    assert batch.jobs == [] and 59_000 <= batch.next_due_in_ms <= 60_000
    await make_due(app, Q, job.id)
    assert [j.id for j in (await claim(app)).jobs] == [job.id]


async def test_renew_fenced_by_token(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    j = (await claim(app)).jobs[0]
    assert await app.scripts.renew(qk, [("a", j.token), ("a", j.token + 1), ("zz", 1)],
                                   60_000) == [1, 0, 0]
    rec = await app.get_job("a")
    assert rec.lease_expires_ms is not None and rec.lease_expires_ms > await server_ms(app) + 50_000
    assert await app.cancel("a") == "cancel-requested"
    assert await app.scripts.renew(qk, [("a", j.token)], 60_000) == [2]


async def test_ack_stores_result_and_refuses_stale(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    j = (await claim(app)).jobs[0]
    assert await app.scripts.ack(qk, "succeeded", 1000, [("a", j.token + 1, b"", "")]) == [0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", j.token, b"\xa2ok", "")]) == [1]
    # the same ack again (a lost reply, the call sent again): finished so already,
    # nothing written twice (the result, the counter); another outcome or token is refused
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", j.token, b"\xa2ok", "")]) == [1]
    assert await app.scripts.ack(qk, "skipped", 60_000, [("a", j.token, b"", "")]) == [0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("a", j.token + 1, b"", "")]) == [0]
    rec = await app.get_job("a")
    assert rec.state == "succeeded" and rec.result == "ok" and rec.finished_ms is not None
    assert await all_keys_state(app, Q) == {
        "ready": [], "scheduled": [], "leases": [], "dead": [], "done": ["a"]}
    assert (await app.stats(Q)).counters["succeeded"] == 1


async def test_ack_with_zero_retention_deletes_record(app: App) -> None:
    await app.enqueue("j", queue=Q, job_id="a")
    j = (await claim(app)).jobs[0]
    assert await app.scripts.ack(app.keys(Q), "succeeded", 0, [("a", j.token, b"\x01", "")]) == [1]
    assert await app.redis.hlen(app.keys(Q).jobs) == 0
    assert await app.redis.hlen(app.keys(Q).payloads) == 0


async def test_expire_trims_finished_in_bounded_batches(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"x{i}", queue=Q) for i in range(25)])
    jobs = (await claim(app, 25)).jobs
    await app.scripts.ack(qk, "succeeded", 1, [(j.id, j.token, b"", "") for j in jobs])
    now = await server_ms(app)
    await app.redis.zadd(qk.done, {j.id: now - 10 for j in jobs}, xx=True)
    assert await app.scripts.expire(qk, 10) == 10
    assert await app.scripts.expire(qk, 10) == 10
    assert await app.scripts.expire(qk, 10) == 5
    assert await app.scripts.expire(qk, 10) == 0
    assert await app.redis.hlen(qk.jobs) == 0


async def test_expire_leaves_a_live_record_alone(app: App) -> None:
    """A done entry whose record is live again (never expected: the guard
    against deleting work) is dropped from the done set; the record stays."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("l", "q")])
    leased = (await claim(app)).jobs[0]
    now = await server_ms(app)
    await app.redis.zadd(qk.done, {"q": now - 10, "l": now - 10})
    assert await app.scripts.expire(qk, 10) == 2
    assert await app.redis.zcard(qk.done) == 0
    assert (await app.get_job("q")).state == "queued"
    assert (await app.get_job(leased.id)).state == "leased"
    assert None not in await stored_payloads(app, qk, ["l", "q"])
    assert [j.id for j in (await claim(app)).jobs] == ["q"]


async def test_fail_work_retries_with_delay_then_dies(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=2)
    j = (await claim(app)).jobs[0]
    before = await server_ms(app)
    out = await fail_job(app, qk, "a", j.token, "work", "", "boom", 5_000)
    assert (out.code, out.state, out.attempt, out.work_failures) == (1, "scheduled", 1, 1)
    rec = await app.get_job("a")
    assert rec.due_ms is not None and before + 5_000 <= rec.due_ms <= before + 6_000
    assert rec.error == "boom"
    await make_due(app, Q, "a")
    j2 = (await claim(app)).jobs[0]
    assert (j2.attempt, j2.token, j2.work_failures) == (2, 2, 1)
    out = await fail_job(app, qk, "a", j2.token, "work", "", "boom again", 5_000)
    assert (out.code, out.state) == (2, "dead")
    rec = await app.get_job("a")
    assert rec.reason == "max-attempts" and rec.error == "boom again"
    letters = await app.dead_letters(Q)
    assert letters[0]["job"] == "a" and letters[0]["reason"] == "max-attempts"
    assert letters[0]["attempt"] == "2" and letters[0]["work_fail"] == "2"
    assert await all_keys_state(app, Q) == {
        "ready": [], "scheduled": [], "leases": [], "dead": ["a"], "done": []}


async def test_fail_infra_has_its_own_budget_and_refunds_attempt(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=1, max_infra_attempts=3)
    for n in (1, 2):
        j = (await claim(app)).jobs[0]
        assert j.attempt == 1
        out = await fail_job(app, qk, "a", j.token, "infra", "", "conn reset", 0)
        assert (out.code, out.state, out.attempt, out.infra_failures) == (1, "queued", 0, n)
    j = (await claim(app)).jobs[0]
    out = await fail_job(app, qk, "a", j.token, "infra", "", "conn reset", 0)
    assert (out.code, out.state) == (2, "dead")
    assert (await app.get_job("a")).reason == "max-infra-attempts"


async def test_fail_permanent_goes_dead_at_once_and_stale_refused(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=10)
    j = (await claim(app)).jobs[0]
    assert (await fail_job(app, qk, "a", j.token + 1, "dead", "permanent", "x", 0)).code == 0
    out = await fail_job(app, qk, "a", j.token, "dead", "permanent", "bad input", 0)
    assert (out.code, out.state) == (2, "dead")
    assert (await app.get_job("a")).reason == "permanent"
    assert (await fail_job(app, qk, "a", j.token, "dead", "permanent", "x", 0)).code == 0


async def test_release_refunds_attempt_keeps_place_and_is_idempotent(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    a = (await claim(app)).jobs[0]
    assert a.id == "a"
    # a stale token is refused: the lease stays with its holder
    assert await app.scripts.release(qk, [("a", a.token + 1)], 0, "test") == [0]
    assert (await app.get_job("a")).state == "leased"
    assert await app.scripts.release(qk, [("a", a.token)], 0, "test") == [1]
    assert await app.scripts.release(qk, [("a", a.token)], 0, "test") == [0]
    rec = await app.get_job("a")
    assert rec.state == "queued" and rec.attempt == 0 and rec.token == 1
    assert [j.id for j in (await claim(app, 3)).jobs] == ["a", "b", "c"]


async def test_reap_requeues_expired_and_is_idempotent(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=3)
    j = (await claim(app)).jobs[0]
    assert (await app.scripts.reap(qk, 100, 0, 0,
                                   {}, DEFAULT_BUDGET)).requeued == 0  # not expired yet
    await expire_lease(app, Q, "a")
    out = await app.scripts.reap(qk, 100, 0, 0, {}, DEFAULT_BUDGET)
    assert (out.requeued, out.dead) == (1, 0)
    assert (await app.scripts.reap(qk, 100, 0, 0, {}, DEFAULT_BUDGET)).requeued == 0
    rec = await app.get_job("a")
    assert rec.state == "queued" and rec.attempt == 1  # the expired run was an attempt
    # the old holder's writes are refused now
    assert await app.scripts.ack(qk, "succeeded", 1000, [("a", j.token, b"", "")]) == [0]
    assert await app.scripts.renew(qk, [("a", j.token)], 1000) == [0]


async def test_reap_with_backoff_schedules(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a", max_attempts=3)
    await claim(app)
    await expire_lease(app, Q, "a")
    before = await server_ms(app)
    await app.scripts.reap(qk, 100, 1_000, 10_000, {}, DEFAULT_BUDGET)
    rec = await app.get_job("a")
    assert rec.state == "scheduled" and rec.due_ms is not None
    assert before + 1_000 <= rec.due_ms <= before + 2_000


async def test_reap_is_bounded(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"x{i}", queue=Q) for i in range(30)])
    await claim(app, 30)
    now = await server_ms(app)
    await app.redis.zadd(qk.leases, {f"x{i}": now - 1 for i in range(30)}, xx=True)
    assert (await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)).requeued == 10
    assert (await app.stats(Q)).leased == 20


async def test_poison_job_dies_lease_expired(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("poison", queue=Q, job_id="p", max_attempts=3)
    for _ in range(3):
        jobs = (await claim(app)).jobs
        assert [j.id for j in jobs] == ["p"]
        await expire_lease(app, Q, "p")
        await app.scripts.reap(qk, 100, 0, 0, {}, DEFAULT_BUDGET)
    rec = await app.get_job("p")
    assert rec.state == "dead" and rec.reason == "lease-expired" and rec.attempt == 3
    assert (await claim(app)).jobs == []
    assert (await app.dead_letters(Q))[0]["reason"] == "lease-expired"


async def test_cancel_each_state_and_idempotent(app: App) -> None:
    await app.enqueue("j", queue=Q, job_id="q")
    await app.enqueue("j", queue=Q, job_id="s", delay=100)
    assert await app.cancel("q") == "canceled"
    assert await app.cancel("q") == "final"
    assert await app.cancel("s") == "canceled"
    await app.enqueue("j", queue=Q, job_id="l")
    j = (await claim(app)).jobs[0]
    assert await app.cancel("l") == "cancel-requested"
    assert await app.cancel("l") == "cancel-requested"
    # the holder gives it back: it ends canceled, not queued
    assert await app.scripts.release(app.keys(Q), [("l", j.token)], 0, "t") == [2]
    assert (await app.get_job("l")).state == "canceled"
    assert await all_keys_state(app, Q) == {
        "ready": [], "scheduled": [], "leases": [], "dead": [], "done": ["l", "q", "s"]}


async def test_replay_gives_fresh_counters_and_purge(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q, max_attempts=1)
                            for i in ("a", "b")])
    for j in (await claim(app, 2)).jobs:
        await fail_job(app, qk, j.id, j.token, "work", "", "e", 0)
    assert (await app.stats(Q)).dead == 2
    assert await app.replay(["a"], queue=Q) == 1
    assert await app.replay(["a"], queue=Q) == 0
    rec = await app.get_job("a")
    assert (rec.state, rec.attempt, rec.work_failures, rec.token) == ("queued", 0, 0, 1)
    assert await app.purge_dead(Q) == 1
    assert (await app.stats(Q)).dead == 0
    assert await app.redis.hexists(qk.jobs, "b") == 0


async def test_stats_counts_and_oldest_age(app: App) -> None:
    await app.enqueue("j", queue=Q, job_id="old", priority=0)
    await app.enqueue("j", queue=Q, job_id="hi", priority=9)
    await app.enqueue("j", queue=Q, job_id="later", delay=30)
    qk = app.keys(Q)
    # age the low-priority job by 5 s, as if it had waited
    raw = await app.redis.hget(qk.jobs, "old")
    fields = raw.split(b"|")
    # version 4 (a job as enqueued): its ready_ms is its enq_ms, the 4th value
    at = 3 if fields[0] == b"4" else 1 + RECORD_FIELDS.index("ready_ms")
    fields[at] = str(int(fields[at]) - 5_000).encode()
    await app.redis.hset(qk.jobs, "old", b"|".join(fields))
    st = await app.stats(Q)
    assert (st.ready, st.scheduled, st.leased, st.dead) == (2, 1, 0, 0)
    assert st.oldest_ready_age_ms is not None and 5_000 <= st.oldest_ready_age_ms < 7_000
    assert st.next_due_in_ms is not None and 28_000 < st.next_due_in_ms <= 30_000
    assert st.counters["enqueued"] == 3


async def test_noscript_recovery_after_script_flush(app: App) -> None:
    await app.enqueue("j", queue=Q)
    await app.redis.script_flush()
    job = await app.enqueue("j", queue=Q)
    assert job.created
    assert len((await claim(app, 5)).jobs) == 2


async def test_malformed_record_is_a_typed_error_and_buried_on_claim(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="m")
    await app.redis.hset(qk.jobs, "m", b"{not json")
    with pytest.raises(MalformedJob):
        await app.get_job("m")
    await app.enqueue("j", queue=Q, job_id="ok")
    assert [j.id for j in (await claim(app, 5)).jobs] == ["ok"]
    assert await app.redis.hget(qk.jobs, "m") == b"{not json"  # evidence kept
    assert (await app.dead_letters(Q))[0]["reason"] == "malformed"
    assert await app.purge_dead(Q) == 1


async def test_wrong_types_in_record_are_malformed(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="m")
    await app.redis.hset(qk.jobs, "m", b"1|queued|x|0|0|0|3|10|0|0|1|1|1|0|0|0|j||")
    with pytest.raises(MalformedJob):
        await app.get_job("m")
    assert (await claim(app)).jobs == []
    assert (await app.stats(Q)).dead == 1


async def test_garbage_in_ready_is_skipped_and_counted(app: App) -> None:
    qk = app.keys(Q)
    await app.redis.zadd(qk.ready, {"ghost": 1})
    await app.enqueue("j", queue=Q, job_id="real")
    assert [j.id for j in (await claim(app, 5)).jobs] == ["real"]
    assert (await app.stats(Q)).counters["garbage"] == 1


async def test_a_stale_ready_entry_does_not_lease_its_job(app: App) -> None:
    """A ready-set entry whose record is leased or finished (a stale entry)
    is skipped and counted: claim leases queued records only."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("l", "f")])
    held = {j.id: j for j in (await claim(app, 2)).jobs}
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("f", held["f"].token, b"", "")]) == [1]
    await app.redis.zadd(qk.ready, {"l": 1, "f": 2})
    assert (await claim(app, 5, worker="w2")).jobs == []
    assert (await app.stats(Q)).counters["garbage"] == 2
    rec = await app.get_job("l")
    assert (rec.state, rec.token, rec.worker, rec.attempt) == ("leased", held["l"].token, "w1", 1)
    assert (await app.get_job("f")).state == "succeeded"
    # the holder's token still rules
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("l", held["l"].token, b"", "")]) == [1]


async def test_cancel_fenced_by_token_leaves_other_runs_alone(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="f")
    j = (await claim(app)).jobs[0]
    assert await app.scripts.cancel(qk, "f", j.token + 1) == ("stale", "leased")
    assert not (await app.get_job("f")).cancel_requested
    assert await app.scripts.cancel(qk, "f", j.token) == ("cancel-requested", "leased")
    await app.enqueue("j", queue=Q, job_id="q")
    assert await app.scripts.cancel(qk, "q", 7) == ("stale", "queued")  # a queued job: untouched
    assert (await app.get_job("q")).state == "queued"
