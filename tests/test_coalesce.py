"""Group commit of concurrent enqueues (leasequeue/store/coalesce.py), on a
real Redis: concurrent App.enqueue calls of one queue share script calls,
each caller gets its own reply or its own error, a failed call fails every
caller of its batch and nothing of it is half-written, and a cancelled
caller takes nothing from the others."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import redis as redis_sync
from redis.asyncio import Redis as AsyncRedis

import leasequeue as lq
from leasequeue import App, EnqueuedJob, StoreSettings
from leasequeue.codec import decode_envelope, encode_envelope
from leasequeue.errors import (
    ConfigError,
    PayloadNotSerializable,
    RedisUnavailable,
    UnknownJob,
)
from leasequeue.hooks import EnqueueInfo
from leasequeue.ids import new_job_ids
from leasequeue.models import NewJob
from leasequeue.producer import NO_DELAY, NO_PRIORITY
from leasequeue.store.coalesce import Answer, EnqueueCoalescer, answer_all, ids_at_send
from leasequeue.store.keys import QueueKeys, queue_keys
from leasequeue.store.record import split_record
from leasequeue.store.scripts import enqueue_args
from tests.harness.redis_proc import RedisProcess
from tests.harness.tcp_proxy import TcpProxy
from tests.helpers import eventually, in_forked_child, ready_ids_sync

pytestmark = pytest.mark.anyio

N = 100


def script_calls(r: redis_sync.Redis) -> int:
    """EVALSHA (and EVAL) calls the server has run so far."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
               for c in ("evalsha", "eval", "evalsha_ro"))


async def gather(calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run the calls as concurrent tasks; each one's result or exception."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            out[i] = await calls[i]()
        except Exception as exc:  # the test looks at each caller's error
            out[i] = exc

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(one, i)
    return out


def enqueue_call(app: App, *args: Any, **kw: Any) -> Callable[[], Awaitable[EnqueuedJob]]:
    return lambda: app.enqueue(*args, **kw)


def unspun_app(redis_server: RedisProcess, prefix: str, **options: Any) -> App:
    """An App whose one-job enqueue does not read its reply off the socket
    (StoreSettings.reply_spin_us=0): these tests are of the coalescer, and
    a spun lone call is answered before the burst's other callers run, so
    how many calls a burst takes would hang on the spin's timing too (on
    uvloop, before spin.LoopTurn, up to all of them alone). The spin's own
    bursts are tested in test_reply_spin.py."""
    return App(redis_server.url, prefix=prefix, settings=StoreSettings(reply_spin_us=0),
               **options)


async def test_concurrent_enqueues_share_script_calls(
        redis_server: RedisProcess, prefix: str, sync_redis: redis_sync.Redis) -> None:
    app = unspun_app(redis_server, prefix)
    try:
        before = script_calls(sync_redis)
        # a cold App: the first enqueues also check the queue's shard count, once
        replies = await gather([enqueue_call(app, "noop", {"i": i}, queue="default")
                                for i in range(N)])
        calls = script_calls(sync_redis) - before
        assert all(isinstance(r, EnqueuedJob) for r in replies), replies
        # one queue check, the first enqueue alone, then the others in a batch or two
        assert calls <= 10, calls
        assert len({r.id for r in replies}) == N
        for i, reply in enumerate(replies):
            assert reply.created and reply.state == "queued"
            record = await app.get_job(reply.id, queue="default")
            assert record.payload == {"i": i}
        assert (await app.stats("default")).ready == N
    finally:
        await app.close()


async def test_a_lone_enqueue_is_sent_at_once_alone(
        real_app: App, sync_redis: redis_sync.Redis) -> None:
    await real_app.enqueue("noop", queue="default")  # the queue check
    before = script_calls(sync_redis)
    for i in range(20):
        job = await real_app.enqueue("noop", {"i": i}, queue="default")
        assert job.created
    assert script_calls(sync_redis) - before == 20  # one call each, nothing else
    assert not real_app.coalescer._tasks  # no batch was ever started


async def test_each_caller_gets_its_own_reply(real_app: App) -> None:
    """Replies map to their callers: pre-existing ids answer created=False
    with their state, new delayed ones 'scheduled', the others 'queued'; an
    id given by two concurrent callers is created once."""
    await real_app.enqueue("noop", queue="default")  # the queue check
    existing = {f"job-{i}" for i in range(0, N, 3)}
    for job_id in sorted(existing):
        await real_app.enqueue("noop", job_id=job_id, queue="default", delay=3600)
    calls = [enqueue_call(real_app, "noop", {"i": i}, job_id=f"job-{i}", queue="default",
                          delay=60 if i % 2 else 0) for i in range(N)]
    calls += [enqueue_call(real_app, "noop", job_id="twice", queue="default")] * 2
    replies = await gather(calls)
    for i, reply in enumerate(replies[:N]):
        assert isinstance(reply, EnqueuedJob), reply
        assert reply.id == f"job-{i}"
        if reply.id in existing:
            assert (reply.created, reply.state) == (False, "scheduled"), (i, reply)
        else:
            expected = "scheduled" if i % 2 else "queued"
            assert (reply.created, reply.state) == (True, expected), (i, reply)
            assert (await real_app.get_job(reply.id)).payload == {"i": i}
    assert sorted(r.created for r in replies[N:]) == [False, True]


async def test_a_bad_job_among_concurrent_ones_gets_its_own_error(
        redis_server: RedisProcess, prefix: str) -> None:
    app = App(redis_server.url, prefix=prefix)

    @app.job(queue="default")
    async def noop() -> None:
        return None

    try:
        calls = [enqueue_call(app, "noop", {"i": i}) for i in range(N)]
        calls[10] = enqueue_call(app, "noop", {"bad": object()})
        calls[20] = enqueue_call(app, "nobody-knows-me", {"i": 20})
        calls[30] = enqueue_call(app, "noop", {"i": 30}, priority=10**9)
        replies = await gather(calls)
        assert isinstance(replies[10], PayloadNotSerializable)
        assert isinstance(replies[20], UnknownJob)
        assert isinstance(replies[30], ConfigError)
        good = [r for i, r in enumerate(replies) if i not in (10, 20, 30)]
        assert all(isinstance(r, EnqueuedJob) and r.created for r in good), good
        assert (await app.stats("default")).ready == N - 3
    finally:
        await app.close()


async def test_redis_down_fails_every_caller_and_writes_nothing_by_halves(
        server: RedisProcess, proxy: TcpProxy, prefix: str) -> None:
    """100 tasks enqueue in a loop through a proxy that is cut mid-stream:
    every task ends with RedisUnavailable, none hangs; every job a caller was
    told about exists, and every job is there whole (record, payload, ready
    entry) or not at all; then with Redis unreachable from the start, every
    caller of a batch gets RedisUnavailable and nothing is written."""
    app = App(proxy.url, prefix=prefix)
    direct = AsyncRedis(port=server.port)
    r = redis_sync.Redis(port=server.port)
    qk = app.keys("default")
    told: list[str] = []
    ended: list[BaseException] = []

    async def producer(t: int) -> None:
        k = 0
        while True:
            try:
                job = await app.enqueue("noop", {"t": t, "k": k}, job_id=f"{t}-{k}",
                                        queue="default")
            except Exception as exc:
                ended.append(exc)
                return
            told.append(job.id)
            k += 1

    try:
        await app.enqueue("noop", job_id="warm", queue="default")
        before = script_calls(r)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for t in range(N):
                    tg.start_soon(producer, t)
                await eventually(lambda: mid_stream(direct, qk), what="2,000 jobs")
                proxy.cut()
        assert len(ended) == N and all(isinstance(e, RedisUnavailable) for e in ended), ended
        records = {k.decode() for k in r.hkeys(qk.jobs)}
        payloads = {k.decode() for k, v in r.hgetall(qk.jobs).items()
                    if split_record(v)[1] is not None}  # inside the record
        ready = set(ready_ids_sync(r, qk))
        assert records == payloads == ready  # no job is there by halves
        assert set(told) | {"warm"} <= records
        assert int(r.hget(qk.stats, "enqueued") or 0) == len(records)
        # shared calls: far fewer script calls than jobs
        assert script_calls(r) - before < len(records) / 5

        # unreachable from the start: a lone call and a batch behind it fail alike
        replies = await gather([enqueue_call(app, "noop", job_id=f"down-{i}", queue="default")
                                for i in range(N)])
        assert all(isinstance(x, RedisUnavailable) for x in replies), replies
        assert not r.hexists(qk.jobs, "down-1") and r.hlen(qk.jobs) == len(records)
    finally:
        await app.close()
        await direct.aclose()
        r.close()


async def mid_stream(direct: AsyncRedis, qk: QueueKeys) -> bool:
    return int(await direct.hlen(qk.jobs)) >= 2000


def waiting(app: App) -> int:
    """Callers waiting for the next call of the default queue."""
    return len(app.coalescer._lanes[app.keys("default").queue].jobs)


class Gate:
    """Holds the coalescer's script calls until released, one event per
    call in order: the test decides when each call reaches Redis."""

    def __init__(self, app: App, calls: int) -> None:
        self.send = app.coalescer._send
        self.sent: list[list[str]] = []  # job ids of each call, once it is let through
        self.entered: list[list[str]] = []
        self.events = [anyio.Event() for _ in range(calls)]
        app.coalescer._send = self

    def __call__(self, qk: QueueKeys, jobs: Sequence[NewJob],
                 ids: Sequence[str] | None) -> Awaitable[Any]:
        return self._run(qk, jobs, ids)

    async def _run(self, qk: QueueKeys, jobs: Sequence[NewJob],
                   ids: Sequence[str] | None) -> Any:
        i = len(self.entered)
        call = [j.id for j in jobs] if ids is None else list(ids)
        self.entered.append(call)
        if i < len(self.events):
            await self.events[i].wait()
        self.sent.append(call)
        return await self.send(qk, jobs, ids)

    async def wait_entered(self, count: int) -> None:
        await eventually(lambda: len(self.entered) >= count, what=f"call {count}")


async def test_a_cancelled_caller_takes_nothing_from_the_others(real_app: App) -> None:
    """The lone call held; ten callers come in one turn: six of them go
    beside it (half of the eleven callers, rounded up; held too), four wait,
    as two calls are in flight. One cancelled while it waits is never sent;
    one cancelled after its call was sent has its job written; the others,
    and one that came later, get their own replies, in order."""
    app = real_app
    await app.enqueue("noop", queue="default")  # the queue check
    gate = Gate(app, 3)
    results: dict[str, Any] = {}
    scopes: dict[str, anyio.CancelScope] = {}

    async def caller(job_id: str) -> None:
        with anyio.CancelScope() as scope:
            scopes[job_id] = scope
            try:
                results[job_id] = await app.enqueue("noop", {"id": job_id}, job_id=job_id,
                                                    queue="default")
            except BaseException as exc:
                results[job_id] = exc
                raise

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "lead")
            await gate.wait_entered(1)  # the lone call is in flight (held)
            for i in range(10):
                tg.start_soon(caller, f"b{i}")  # all in one turn of the loop
            await gate.wait_entered(2)  # the call beside it (held)
            assert gate.entered[1] == [f"b{i}" for i in range(6)]
            assert waiting(app) == 4
            scopes["b7"].cancel()  # cancelled while waiting: never sent
            scopes["b2"].cancel()  # cancelled after its job was sent
            await anyio.lowlevel.checkpoint()
            tg.start_soon(caller, "late")  # waits with the others: two calls in flight
            await eventually(lambda: waiting(app) == 5, what="late waiting")
            gate.events[0].set()  # the lone call returns: the waiting ones go
            await gate.wait_entered(3)
            gate.events[1].set()
            gate.events[2].set()
    assert gate.entered == [["lead"], [f"b{i}" for i in range(6)], ["b6", "b8", "b9", "late"]]
    ids = {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}
    assert "b7" not in ids
    assert "b2" in ids  # sent before its caller was cancelled: the job exists
    for name in ["lead", "late", *(f"b{i}" for i in range(10) if i not in (2, 7))]:
        reply = results[name]
        assert isinstance(reply, EnqueuedJob) and reply.id == name and reply.created, name
        assert name in ids
    assert not isinstance(results["b7"], EnqueuedJob)
    assert not isinstance(results["b2"], EnqueuedJob)
    # the queue is idle again: the next enqueue goes at once, alone
    job = await app.enqueue("noop", job_id="after", queue="default")
    assert job.created and gate.sent[-1] == ["after"]


async def test_a_cancelled_first_caller_does_not_strand_the_waiting_ones(
        real_app: App) -> None:
    """The lone call and the call beside it held, two callers waiting
    behind both: the lone call's caller cancelled (its call never sent) lets
    the waiting ones go."""
    app = real_app
    await app.enqueue("noop", queue="default")
    gate = Gate(app, 2)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            # the lone call, held before it reaches Redis, then cancelled
            lead_scope = anyio.CancelScope()

            async def lead_caller() -> None:
                with lead_scope:
                    await app.enqueue("noop", job_id="lead", queue="default")

            tg.start_soon(lead_caller)
            await gate.wait_entered(1)
            for _ in range(6):
                tg.start_soon(app.enqueue, "noop", None)
            await gate.wait_entered(2)  # four of the seven callers beside it (held)
            assert waiting(app) == 2
            lead_scope.cancel()
            await gate.wait_entered(3)  # the two waiting ones, sent
            gate.events[1].set()
    sent = [i for call in gate.sent for i in call]
    assert "lead" not in sent and len(sent) == 6 and len(set(sent)) == 6
    assert [len(call) for call in gate.entered] == [1, 4, 2]
    ids = {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}
    assert "lead" not in ids and set(sent) <= ids


async def test_concurrent_enqueues_to_a_sharded_queue_route_per_job_and_call_hooks(
        redis_server: RedisProcess, prefix: str, sync_redis: redis_sync.Redis) -> None:
    """Each job lands in the shard its id routes to (the shards are separate
    queues, batched separately), and the enqueue hooks see every caller's
    own job, its header in its own payload envelope, and its own answer."""
    app = unspun_app(redis_server, prefix, queue_shards={"default": 4})
    seen: dict[str, EnqueuedJob | None] = {}

    class Tag(lq.Hooks):
        def before_enqueue(self, job: EnqueueInfo) -> None:
            job.headers["tag"] = job.job_id

        def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
            seen[job.job_id] = result

    app.add_hook(Tag())
    try:
        await app.enqueue("noop", job_id="warm", queue="default")
        before = script_calls(sync_redis)
        replies = await gather([enqueue_call(app, "noop", {"i": i}, job_id=f"s{i}",
                                             queue="default") for i in range(N)])
        # a few calls per shard at most: the lone call, one beside it, then
        # the rest in one or two as those return (two calls in flight)
        assert script_calls(sync_redis) - before <= 4 * 4
        for i, reply in enumerate(replies):
            assert isinstance(reply, EnqueuedJob) and reply.id == f"s{i}", reply
            assert seen[reply.id] == reply
            qk = app.producer.keys_for("default", reply.id)
            envelope = decode_envelope(split_record(sync_redis.hget(qk.jobs, reply.id))[1] or b"",
                                       reply.id)
            assert envelope.kwargs == {"i": i} and envelope.headers == {"tag": reply.id}
        counts = [sync_redis.hlen(app.keys(f"default#{k}").jobs) for k in range(4)]
        assert sum(counts) == N + 1 and all(counts), counts
    finally:
        await app.close()


async def held_lone_call_then(app: App, calls: Sequence[Callable[[], Awaitable[Any]]],
                              held: int = 1) -> Gate:
    """The lone call ("lead") held before it reaches Redis while ``calls``
    start, all in one turn of the loop, and park behind it; the first
    ``held`` calls are held until the second one entered, then let through
    in order; every caller ends. The gate's ``entered``: each script call's
    job ids, in the order the calls were made."""
    await app.enqueue("noop", queue="default")  # the queue check
    gate = Gate(app, held)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue_call(app, "noop", job_id="lead", queue="default"))
            await gate.wait_entered(1)
            for call in calls:
                tg.start_soon(call)
            await gate.wait_entered(2)
            for event in gate.events:
                event.set()
    return gate


async def test_callers_of_one_turn_go_beside_the_call_in_flight_and_the_rest_wait(
        real_app: App) -> None:
    """20 callers come in one turn while the lone call is in flight: half of
    the 21 callers (rounded up), 11, go at the end of that turn as a second
    call beside it; the other 9 wait, as two calls are in flight, and go
    together when one of them returns (the lone one, here: the second is
    held); all in order and all created."""
    app = real_app
    await app.enqueue("noop", queue="default")  # the queue check
    gate = Gate(app, 2)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue_call(app, "noop", job_id="lead", queue="default"))
            await gate.wait_entered(1)
            for i in range(20):
                tg.start_soon(enqueue_call(app, "noop", job_id=f"w{i}", queue="default"))
            await gate.wait_entered(2)
            assert waiting(app) == 9  # not a third call while two are in flight
            gate.events[0].set()
            await gate.wait_entered(3)
            gate.events[1].set()
    assert gate.entered == [["lead"], [f"w{i}" for i in range(11)],
                            [f"w{i}" for i in range(11, 20)]]
    ids = {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}
    assert {"lead", *(f"w{i}" for i in range(20))} <= ids


async def test_a_batch_s_payloads_add_up_to_max_bytes_at_most(real_app: App) -> None:
    """Beyond its first job, a call takes jobs while their payloads add up
    to max_bytes at most: with room for two of these payloads and a half,
    calls of two jobs at most; a payload over max_bytes on its own goes
    alone."""
    small, big = {"s": "x" * 1000}, {"s": "x" * 3000}
    size = len(encode_envelope(small, "", ""))
    real_app.coalescer.max_bytes = size * 5 // 2
    payloads = [big if i == 4 else small for i in range(10)]
    calls = [enqueue_call(real_app, "noop", payloads[i], job_id=f"w{i}", queue="default")
             for i in range(10)]
    gate = await held_lone_call_then(real_app, calls, held=2)
    assert gate.entered[:3] == [["lead"], ["w0", "w1"], ["w2", "w3"]]
    assert ["w4"] in gate.entered
    assert all(len(call) <= 2 for call in gate.entered)
    assert [job_id for call in gate.entered[1:] for job_id in call] == [
        f"w{i}" for i in range(10)]
    for i in range(10):
        assert (await real_app.get_job(f"w{i}", queue="default")).payload == payloads[i]


# -- ids drawn at the send ------------------------------------------------------------

HEX_ID = re.compile(r"[0-9a-f]{28}")


async def test_common_calls_get_ids_drawn_as_their_batch_is_sent(
        redis_server: RedisProcess, prefix: str, sync_redis: redis_sync.Redis) -> None:
    """App.enqueue's common call (a name and a payload, nothing else) makes
    its job with no id; the coalescer draws a batch's ids in one read as it
    sends it. Each caller's answer names the job that holds its own payload;
    the ids are distinct, 28 hex characters each, and no job is stored under
    an empty id."""
    app = unspun_app(redis_server, prefix)
    send = app.coalescer._send
    seen: list[tuple[int, bool, bool]] = []  # (jobs, all with no id, ids given)

    def recording(qk: QueueKeys, jobs: Sequence[NewJob],
                  ids: Sequence[str] | None) -> Awaitable[Any]:
        seen.append((len(jobs), not any(j.id for j in jobs), ids is not None))
        return send(qk, jobs, ids)

    app.coalescer._send = recording
    try:
        await app.enqueue("noop")  # the queue check
        before = script_calls(sync_redis)
        replies = await gather([enqueue_call(app, "noop", {"i": i}) for i in range(N)])
        assert script_calls(sync_redis) - before <= 10  # batches, not a call each
        # a batch's jobs came with no id and went with the ids drawn for them;
        # a lone call's job has its id in it, and goes with no ids beside
        assert sum(n for n, _, _ in seen[1:]) == N, seen
        assert all(blank == drawn for _, blank, drawn in seen), seen
        assert any(n > 1 and drawn for n, _, drawn in seen), seen
        ids = [r.id for r in replies]
        assert len(set(ids)) == N and all(HEX_ID.fullmatch(i) for i in ids), ids
        for i, reply in enumerate(replies):
            assert (reply.created, reply.state) == (True, "queued"), reply
            assert (await app.get_job(reply.id)).payload == {"i": i}
        stored = set(sync_redis.hkeys(app.keys("default").jobs))
        assert b"" not in stored and {i.encode() for i in ids} <= stored
    finally:
        await app.close()


async def test_a_batch_of_common_calls_and_given_ids_keeps_the_given_ones(
        redis_server: RedisProcess, prefix: str) -> None:
    """One batch holds common calls (ids drawn at the send) and calls with
    their own job_id: the given ids go as given, the others get fresh ones,
    and each caller is answered with the id its job was stored under."""
    app = unspun_app(redis_server, prefix)
    results: dict[int, EnqueuedJob] = {}

    async def caller(k: int, job_id: str | None) -> None:
        results[k] = await app.enqueue("noop", {"k": k}, job_id=job_id)

    try:
        await app.enqueue("noop")  # the queue check
        gate = Gate(app, 1)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller, -1, None)  # the lone call (held)
                await gate.wait_entered(1)
                for k in range(6):
                    tg.start_soon(caller, k, f"given-{k}" if k % 2 else None)
                await gate.wait_entered(2)  # four of them beside it, all of one turn
                gate.events[0].set()
        assert [len(call) for call in gate.entered] == [1, 4, 2]
        sent = [job_id for call in gate.entered[1:] for job_id in call]
        for k in range(6):
            if k % 2:
                assert sent[k] == f"given-{k}"
            else:
                assert HEX_ID.fullmatch(sent[k]), sent
            assert results[k].id == sent[k] and results[k].created
            assert (await app.get_job(sent[k])).payload == {"k": k}
        assert HEX_ID.fullmatch(gate.entered[0][0]) and results[-1].id == gate.entered[0][0]
        assert len(set(sent)) == 6
    finally:
        await app.close()


async def test_a_job_with_no_id_is_never_sent(
        real_app: App, sync_redis: redis_sync.Redis) -> None:
    """A job made for an id drawn at the send that reaches Scripts.enqueue
    without one (a sender that forgot it) raises ValueError, alone or in a
    batch, and writes nothing; so do ids that do not match the jobs."""
    app = real_app
    _, qk, blank = app.producer.one("noop", None, None, None, NO_DELAY, NO_PRIORITY, None,
                                    None, None, None, None, True)
    assert blank.id == ""
    for jobs in ([blank], [blank, blank]):
        with pytest.raises(ValueError, match="no id"):
            await app.scripts.enqueue(qk, jobs)
        with pytest.raises(ValueError, match="no id"):
            enqueue_args(app.settings, jobs)
    with pytest.raises(ValueError, match="ids for"):
        await app.scripts.enqueue(qk, [blank, blank], ["a" * 28])
    with pytest.raises(ValueError, match="ids for"):
        await app.scripts.enqueue(qk, [blank, blank], ["a" * 28, ""])
    assert sync_redis.hlen(qk.jobs) == 0
    # with its ids it goes: the given ones are the stored ones
    replies = await app.scripts.enqueue(qk, [blank, blank], ["a" * 28, "b" * 28])
    assert replies == [(True, "queued"), (True, "queued")]
    assert set(sync_redis.hkeys(qk.jobs)) == {b"a" * 28, b"b" * 28}


def test_ids_at_send_draws_only_the_missing_ones() -> None:
    given = NewJob("mine", "noop", b"", 0, 0, 1, 1, "")
    blank = given._replace(id="")
    assert ids_at_send([given, given]) is None
    fresh = ids_at_send([blank] * 50)
    assert fresh is not None and len(set(fresh)) == 50
    assert all(HEX_ID.fullmatch(i) for i in fresh)
    mixed = ids_at_send([blank, given, blank])
    assert mixed is not None and mixed[1] == "mine"
    assert HEX_ID.fullmatch(mixed[0]) and HEX_ID.fullmatch(mixed[2]) and mixed[0] != mixed[2]
    assert new_job_ids(0) == []
    many = new_job_ids(1000)
    assert len(set(many)) == 1000 and all(HEX_ID.fullmatch(i) for i in many)
    # each id its own 112 bits: no two share a half (ids cut from one read overlapping)
    halves = [half for i in many for half in (i[:14], i[14:])]
    assert len(set(halves)) == 2000


def test_a_lane_reset_for_a_new_loop_is_not_counted_out_by_the_old_loop_s_call(
        redis_server: RedisProcess, prefix: str) -> None:
    """A lone call left in flight by an event loop closed mid-call: the next
    loop resets the lane; when the old call's coroutine is closed later (its
    finally runs, as when the collector takes it), it does not count itself
    out of the new loop's calls, and enqueues on the new loop go on."""
    app = unspun_app(redis_server, prefix)
    app._verified.add("default")  # (no queue check on the first loop: its I/O stays untouched)
    send = app.coalescer._send
    sent: list[int] = []

    async def held_first(qk: QueueKeys, jobs: Sequence[NewJob],
                         ids: Sequence[str] | None) -> Any:
        sent.append(len(jobs))
        if len(sent) == 1:
            await asyncio.get_running_loop().create_future()  # never answered
        return await send(qk, jobs, ids)

    app.coalescer._send = held_first
    old_loop = asyncio.new_event_loop()
    stranded = old_loop.create_task(app.enqueue("noop"))
    old_loop.run_until_complete(asyncio.sleep(0.05))
    assert sent == [1] and not stranded.done()
    old_loop.close()

    async def on_the_new_loop() -> list[EnqueuedJob]:
        answers = [await asyncio.wait_for(app.enqueue("noop"), 10)]  # resets the lane
        stranded._log_destroy_pending = False  # type: ignore[attr-defined]
        stranded.get_coro().close()  # the old call's finally runs now
        for _ in range(3):
            answers.append(await asyncio.wait_for(app.enqueue("noop"), 10))
        await app.close()
        return answers

    new_loop = asyncio.new_event_loop()
    try:
        answers = new_loop.run_until_complete(on_the_new_loop())
    finally:
        new_loop.close()
    assert [a.created for a in answers] == [True] * 4 and sent == [1, 1, 1, 1, 1]


class _HeldOnOneLoop:
    """A coalescer's send that never answers on ``held`` (a call stays in
    flight there) and answers at once, every job created, on any other
    loop; it counts the jobs it was sent."""

    def __init__(self) -> None:
        self.held: asyncio.AbstractEventLoop | None = None
        self.jobs = 0

    async def __call__(self, qk: QueueKeys, jobs: Sequence[NewJob],
                       ids: Sequence[str] | None) -> list[tuple[bool, str]]:
        self.jobs += len(jobs)
        loop = asyncio.events.get_running_loop()  # (not the name the tests count)
        if loop is self.held:
            await loop.create_future()
        return [(True, "queued")] * len(jobs)


def _job() -> NewJob:
    return NewJob("", "noop", b"", 0, 0, 1, 1)


@contextlib.contextmanager
def _counting_asks(monkeypatch: pytest.MonkeyPatch, asked: list[int]) -> Iterator[None]:
    """asyncio.get_running_loop, as code looks it up by that name, counted
    into ``asked`` while the block runs (the fake send looks it up
    elsewhere: its asks are not counted)."""
    running = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        asked.append(1)
        return running()

    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    try:
        yield
    finally:
        monkeypatch.setattr(asyncio, "get_running_loop", running)


def test_a_forked_child_never_parks_on_its_parent_s_loop() -> None:
    """A fork from a task of the loop whose lane is busy (a call in flight,
    callers parked): in the child that loop is a copy, mid-step, that no
    one runs. The child's enqueues on a loop of its own go out and are
    answered there (parked on the copy, they would fail as a future of
    another loop, or never be answered)."""
    send = _HeldOnOneLoop()
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    qk = queue_keys("fork", "default")

    def in_the_child() -> str:
        async def three() -> list[Answer]:
            return list(await asyncio.wait_for(asyncio.gather(
                *(coalescer.enqueue(qk, _job()) for _ in range(3))), 5))
        return str(len(asyncio.run(three())))

    async def in_the_parent() -> str:
        send.held = asyncio.get_running_loop()
        first = asyncio.ensure_future(coalescer.enqueue(qk, _job()))
        await asyncio.sleep(0)  # the first call in flight, held
        parked = [asyncio.ensure_future(coalescer.enqueue(qk, _job())) for _ in range(2)]
        for _ in range(3):  # the end of the turn, then the batch call's task
            await asyncio.sleep(0)
        assert send.jobs == 3 and not any(f.done() for f in (first, *parked))
        said = in_forked_child(in_the_child)  # forked from this task's step
        for f in (first, *parked):
            f.cancel()
        return said

    assert asyncio.run(in_the_parent()) == "3"


def test_a_parked_caller_does_not_ask_for_the_running_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers that park behind a call in flight know their loop from the
    lane (on Python 3.11 asyncio.get_running_loop() makes a getpid() system
    call each time): of 100 concurrent callers only the lone first asks."""
    asked: list[int] = []
    send = _HeldOnOneLoop()
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    qk = queue_keys("asked", "default")

    async def hundred() -> None:
        send.held = asyncio.get_running_loop()
        calls = [asyncio.ensure_future(coalescer.enqueue(qk, _job()))]
        await asyncio.sleep(0)  # the first: alone, in flight (held)
        assert send.jobs == 1
        with _counting_asks(monkeypatch, asked):
            returned = [coalescer.enqueue(qk, _job()) for _ in range(99)]
        # each parked at once: its own future, no coroutine that asks later
        assert all(isinstance(r, asyncio.Future) for r in returned)
        calls += [asyncio.ensure_future(r) for r in returned]
        for _ in range(3):  # the end of the turn, then the batch call's task
            await asyncio.sleep(0)
        # a batch of half the callers beside the first, held; the rest wait
        assert send.jobs == 51 and not any(call.done() for call in calls)
        for call in calls:
            call.cancel()

    asyncio.run(hundred())
    assert asked == []


def test_a_lone_call_on_its_lane_s_loop_does_not_ask_for_the_running_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One enqueue at a time (each sent alone, the queue idle): after the
    queue's first call, the lane's loop is known to be the running one
    from its current task, and no call asks asyncio.get_running_loop()
    (a getpid() system call each on Python 3.11). A new loop's first call
    asks, once."""
    asked: list[int] = []
    send = _HeldOnOneLoop()  # (held on no loop: every call answered at once)
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    qk = queue_keys("lone", "default")

    async def ten() -> list[Answer]:
        answers = [await coalescer.enqueue(qk, _job())]  # the lane's loop set
        with _counting_asks(monkeypatch, asked):
            for _ in range(9):
                answers.append(await coalescer.enqueue(qk, _job()))
        return answers

    assert len({job_id for job_id, _ in asyncio.run(ten())}) == 10
    assert send.jobs == 10 and asked == []

    async def on_a_new_loop() -> Answer:
        with _counting_asks(monkeypatch, asked):
            return await coalescer.enqueue(qk, _job())

    assert asyncio.run(on_a_new_loop())[1] == (True, "queued") and asked == [1]


class _OwnFuture(asyncio.Future):  # type: ignore[type-arg]
    pass


class _OwnFutureLoop(asyncio.SelectorEventLoop):
    """A loop that gives futures of its own kind (as uvloop does)."""

    def create_future(self) -> asyncio.Future[Any]:
        return _OwnFuture(loop=self)


def test_a_parked_caller_s_future_is_its_loop_s_kind_on_each_loop_in_turn() -> None:
    """A parked caller's future is made without BaseEventLoop.create_future's
    Python frame on asyncio's own loop (coalesce.future_maker: a C partial
    of Future(loop=)), by the loop's own create_future on any other (a
    loop that gives futures of its own kind gets them). One coalescer on
    asyncio's loop, then on a loop of its own kind, then on asyncio's
    again: each loop's 99 parked callers get futures of that loop, of its
    kind, and every one of the 100 callers is answered with an id of its
    own."""
    coalescer = EnqueueCoalescer(lambda qk, jobs, ids: send(qk, jobs, ids), max_jobs=50)
    qk = queue_keys("kind", "default")
    release: list[asyncio.Event] = []

    async def send(qk: QueueKeys, jobs: Sequence[NewJob],
                   ids: Sequence[str] | None) -> list[tuple[bool, str]]:
        await release[-1].wait()  # every call held until the callers parked
        return [(True, "queued")] * len(jobs)

    async def hundred(kind: type[asyncio.Future[Any]]) -> list[Answer]:
        loop = asyncio.get_running_loop()
        release.append(asyncio.Event())
        first = asyncio.ensure_future(coalescer.enqueue(qk, _job()))
        await asyncio.sleep(0)  # alone, in flight (held): the lane's loop is this one
        parked = [coalescer.enqueue(qk, _job()) for _ in range(99)]
        assert all(type(f) is kind and f.get_loop() is loop for f in parked)
        release[-1].set()
        return list(await asyncio.wait_for(asyncio.gather(first, *parked), 5))

    for new_loop, kind in ((asyncio.new_event_loop, asyncio.Future), (_OwnFutureLoop, _OwnFuture),
                           (asyncio.new_event_loop, asyncio.Future)):
        loop = new_loop()
        try:
            answers = loop.run_until_complete(hundred(kind))
        finally:
            loop.close()
        assert len({job_id for job_id, _ in answers}) == 100
        assert {reply for _, reply in answers} == {(True, "queued")}


class _CountingLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, counting its call_soon calls."""

    soon = 0

    def call_soon(self, *args: Any, **kwargs: Any) -> asyncio.Handle:
        self.soon += 1
        return super().call_soon(*args, **kwargs)


def _batch_of_99(loop: _CountingLoop) -> tuple[int, list[Answer]]:
    """99 callers parked behind a held call, then every call answered: the
    loop's call_soon calls from the release to the last caller answered,
    and the answers."""
    coalescer = EnqueueCoalescer(lambda qk, jobs, ids: send(qk, jobs, ids), max_jobs=100)
    qk = queue_keys("soon", "default")
    release = asyncio.Event()

    async def send(qk: QueueKeys, jobs: Sequence[NewJob],
                   ids: Sequence[str] | None) -> list[tuple[bool, str]]:
        await release.wait()
        return [(True, "queued")] * len(jobs)

    async def run() -> tuple[int, list[Answer]]:
        first = asyncio.ensure_future(coalescer.enqueue(qk, _job()))
        await asyncio.sleep(0)  # alone, in flight (held)
        parked = [asyncio.ensure_future(coalescer.enqueue(qk, _job())) for _ in range(99)]
        for _ in range(4):  # the end of the turn, then the batch call's task: in flight
            await asyncio.sleep(0)
        assert not any(p.done() for p in parked)
        before = loop.soon
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, *parked), 5)
        return loop.soon - before, list(answers)

    return loop.run_until_complete(run())


def test_a_batch_s_callers_are_woken_in_one_handle_of_the_loop() -> None:
    """A batch's replies reach its parked callers through one handle of the
    loop (coalesce.answer_all), not a call_soon a caller (the Python of
    asyncio's call_soon and Handle was a quarter of the instructions of a
    call from 100 tasks): 99 callers answered for fewer than 20 call_soon
    calls in all; in debug mode the loop schedules each caller's wake-up
    itself (each timed by its slow-callback check), and every caller is
    answered with its own id either way."""
    for debug in (False, True):
        loop = _CountingLoop()
        loop.set_debug(debug)
        try:
            soon, answers = _batch_of_99(loop)
        finally:
            loop.close()
        assert len({job_id for job_id, _ in answers}) == 100
        assert {reply for _, reply in answers} == {(True, "queued")}
        assert (soon < 20) if not debug else (soon >= 99), (debug, soon)


_WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_answer_all_runs_a_lone_callback_in_its_context_and_leaves_the_rest_to_the_loop(
) -> None:
    """answer_all on a batch of five futures: one awaited by a task, one
    with a lone plain callback (run at once, in the context it was added
    in), one with two callbacks and one with none (resolved the usual way:
    the loop runs the two later), one cancelled (left cancelled). A lone
    callback that raises is reported to the loop's exception handler, as
    asyncio reports a callback's error, and the futures after it are
    answered all the same."""
    loop = asyncio.new_event_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    seen: list[tuple[str, object]] = []

    async def awaiting(future: asyncio.Future[Answer]) -> Answer:
        return await future

    def lone(future: asyncio.Future[Answer]) -> None:
        seen.append((_WHO.get(), future.result()))

    def failing(future: asyncio.Future[Answer]) -> None:
        raise ValueError("a callback's own bug")

    async def run() -> None:
        futures = [loop.create_future() for _ in range(6)]
        task = asyncio.ensure_future(awaiting(futures[0]))
        await asyncio.sleep(0)  # the task waits on futures[0]: its wake-up, a lone callback
        token = _WHO.set("the adder")
        futures[1].add_done_callback(lone)
        _WHO.reset(token)
        futures[2].add_done_callback(lone)
        futures[2].add_done_callback(lone)
        futures[4].cancel()
        futures[5].add_done_callback(failing)
        answers: list[Answer] = [(str(i), (True, "queued")) for i in range(6)]
        # (a handle of the loop, as _flush schedules it: a task's wake-up
        # cannot run inside another task's step)
        loop.call_soon(answer_all, loop, [futures[5], *futures[:5]], [answers[5], *answers[:5]])
        await asyncio.sleep(0)  # the handle runs, then this task
        assert seen == [("the adder", answers[1])]  # in that handle, in its own context
        assert task.done() and task.result() == answers[0]  # its wake-up ran there
        assert futures[3].result() == answers[3] and futures[4].cancelled()
        assert [c["exception"].args for c in reported] == [("a callback's own bug",)]
        await asyncio.sleep(0)  # the loop runs futures[2]'s two callbacks itself, after
        assert seen[1:] == [("nobody", answers[2])] * 2

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


def test_answer_all_interrupted_by_a_callback_answers_the_rest_the_usual_way() -> None:
    """A lone callback that raises KeyboardInterrupt: answer_all raises it
    (as the loop's handle of that callback would), and the futures after
    it are answered the usual way first, none left waiting for ever."""
    loop = asyncio.new_event_loop()

    def interrupting(future: asyncio.Future[Answer]) -> None:
        raise KeyboardInterrupt

    try:
        futures: list[asyncio.Future[Answer]] = [loop.create_future() for _ in range(4)]
        futures[1].add_done_callback(interrupting)
        answers: list[Answer] = [(str(i), (True, "queued")) for i in range(4)]
        with pytest.raises(KeyboardInterrupt):
            answer_all(loop, futures, answers)
        assert [f.result() for f in futures] == answers
    finally:
        loop.close()


def test_a_busy_lane_of_a_loop_that_lives_is_left_to_it_while_another_loop_enqueues() -> None:
    """Loop A stops (run_until_complete returns) with two calls in flight
    and two callers parked; loop B, in the same thread, enqueues on the
    same queue. B's call goes alone, beside A's lane, and is answered; when
    A runs again, all five of its callers are answered (the lane reset, as
    for a closed loop, dropped A's parked callers unanswered: they waited
    for ever; found by a review, 2026-12-07)."""
    loop_a = asyncio.new_event_loop()
    release = loop_a.create_future()
    sent: list[tuple[str, int]] = []

    async def send(qk: QueueKeys, jobs: Sequence[NewJob],
                   ids: Sequence[str] | None) -> list[tuple[bool, str]]:
        on_a = asyncio.events.get_running_loop() is loop_a  # (not the name counted)
        sent.append(("a" if on_a else "b", len(jobs)))
        if on_a and not release.done():
            await release  # in flight on loop A until released
        return [(True, "queued")] * len(jobs)

    coalescer = EnqueueCoalescer(send, max_jobs=50)
    qk = queue_keys("live", "default")

    async def start_on_a() -> list[asyncio.Future[Answer]]:
        calls = [asyncio.ensure_future(coalescer.enqueue(qk, _job()))]  # alone, in flight
        await asyncio.sleep(0)
        calls += [asyncio.ensure_future(coalescer.enqueue(qk, _job())) for _ in range(2)]
        for _ in range(3):
            await asyncio.sleep(0)  # the end of the turn, then the batch call's task
        calls += [asyncio.ensure_future(coalescer.enqueue(qk, _job())) for _ in range(2)]
        for _ in range(3):
            await asyncio.sleep(0)  # two calls in flight: these two stay parked
        return calls

    try:
        calls = loop_a.run_until_complete(start_on_a())
        lane = coalescer._lanes[qk.queue]
        assert (lane.calls, len(lane.jobs), sent) == (2, 2, [("a", 1), ("a", 2)])
        loop_b = asyncio.new_event_loop()
        try:
            job_id, reply = loop_b.run_until_complete(
                asyncio.wait_for(coalescer.enqueue(qk, _job()), 5))
        finally:
            loop_b.close()
        assert job_id and reply == (True, "queued") and sent[-1] == ("b", 1)
        assert (lane.calls, len(lane.jobs)) == (2, 2)  # A's, untouched

        async def finish_on_a() -> list[Answer]:
            release.set_result(None)
            return list(await asyncio.wait_for(asyncio.gather(*calls), 5))

        answers = loop_a.run_until_complete(finish_on_a())
        assert len({job_id for job_id, _ in answers}) == 5
        assert all(reply == (True, "queued") for _, reply in answers)
        assert sum(n for where, n in sent if where == "a") == 5  # each of A's jobs once
        assert (lane.calls, lane.sent, lane.jobs) == (0, 0, [])
    finally:
        loop_a.close()
