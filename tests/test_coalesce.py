"""Group commit of concurrent enqueues (leasequeue/store/coalesce.py), on a
real Redis: concurrent App.enqueue calls of one queue share script calls,
each caller gets its own reply or its own error, a failed call fails every
caller of its batch and nothing of it is half-written, and a cancelled
caller takes nothing from the others."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
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
from leasequeue.models import NewJob
from leasequeue.store.keys import QueueKeys
from leasequeue.store.record import split_record
from tests.harness.redis_proc import RedisProcess
from tests.harness.tcp_proxy import TcpProxy
from tests.helpers import eventually, ready_ids_sync

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

    def __call__(self, qk: QueueKeys, jobs: Sequence[NewJob]) -> Awaitable[Any]:
        return self._run(qk, jobs)

    async def _run(self, qk: QueueKeys, jobs: Sequence[NewJob]) -> Any:
        i = len(self.entered)
        self.entered.append([j.id for j in jobs])
        if i < len(self.events):
            await self.events[i].wait()
        self.sent.append([j.id for j in jobs])
        return await self.send(qk, jobs)

    async def wait_entered(self, count: int) -> None:
        await eventually(lambda: len(self.entered) >= count, what=f"call {count}")


async def test_a_cancelled_caller_takes_nothing_from_the_others(real_app: App) -> None:
    app = real_app
    await app.enqueue("noop", queue="default")  # the queue check
    gate = Gate(app, 2)
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

    async def wait_waiting(count: int) -> None:
        await eventually(lambda: waiting(app) >= count, what=f"{count} waiting")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "lead")
            await gate.wait_entered(1)  # the lone call is in flight (held)
            for i in range(10):
                tg.start_soon(caller, f"b{i}")
            await wait_waiting(10)
            scopes["b3"].cancel()  # cancelled while waiting: never sent
            await anyio.lowlevel.checkpoint()
            gate.events[0].set()
            await gate.wait_entered(2)  # the batch of the others is in flight (held)
            scopes["b5"].cancel()  # cancelled after its job was sent
            tg.start_soon(caller, "late")  # waits for the call after the batch
            await wait_waiting(1)
            gate.events[1].set()
    assert gate.sent[0] == ["lead"]
    assert "b5" in gate.sent[1]  # the held call
    # every other caller's job sent once, in order; b3's never
    expected = [*(f"b{i}" for i in range(10) if i != 3), "late"]
    assert [job_id for call in gate.sent[1:] for job_id in call] == expected
    ids = {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}
    assert "b3" not in ids
    assert "b5" in ids  # sent before its caller was cancelled: the job exists
    for name in ["lead", "late", *(f"b{i}" for i in range(10) if i not in (3, 5))]:
        reply = results[name]
        assert isinstance(reply, EnqueuedJob) and reply.id == name and reply.created, name
        assert name in ids
    assert not isinstance(results["b3"], EnqueuedJob)
    assert not isinstance(results["b5"], EnqueuedJob)
    # the queue is idle again: the next enqueue goes at once, alone
    job = await app.enqueue("noop", job_id="after", queue="default")
    assert job.created and gate.sent[-1] == ["after"]


async def test_a_cancelled_first_caller_does_not_strand_the_waiting_ones(
        real_app: App) -> None:
    app = real_app
    await app.enqueue("noop", queue="default")
    gate = Gate(app, 1)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            # the lone call, held before it reaches Redis, then cancelled
            lead_scope = anyio.CancelScope()

            async def lead_caller() -> None:
                with lead_scope:
                    await app.enqueue("noop", job_id="lead", queue="default")

            tg.start_soon(lead_caller)
            await gate.wait_entered(1)
            for _ in range(5):
                tg.start_soon(app.enqueue, "noop", None)
            await eventually(lambda: waiting(app) >= 5, what="5 waiting")
            lead_scope.cancel()
    sent = [i for call in gate.sent for i in call]
    assert "lead" not in sent and len(sent) == 5 and len(set(sent)) == 5
    ids = {k.decode() for k in await app.redis.hkeys(app.keys("default").jobs)}
    assert "lead" not in ids


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
        assert script_calls(sync_redis) - before <= 4 * 3  # a few calls per shard at most
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


async def held_lone_call_then(app: App, calls: Sequence[Callable[[], Awaitable[Any]]]) -> Gate:
    """The lone call ("lead") held before it reaches Redis while ``calls``
    start and wait behind it, in order, then let through; every caller ends.
    The gate's ``sent``: each script call's job ids, in order."""
    await app.enqueue("noop", queue="default")  # the queue check
    gate = Gate(app, 1)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue_call(app, "noop", job_id="lead", queue="default"))
            await gate.wait_entered(1)
            for k, call in enumerate(calls):
                tg.start_soon(call)
                # one at a time: they wait in the order they were started
                await eventually(lambda k=k: waiting(app) > k, what=f"{k + 1} waiting")
            gate.events[0].set()
    return gate


async def test_a_batch_takes_half_of_the_callers_and_the_next_call_the_rest(
        real_app: App) -> None:
    """20 callers wait behind the lone call: the next call takes 11 of them,
    half of the 22 (the one just answered, the 20, rounded up), and the call
    after it the other 9, all in order and all created."""
    calls = [enqueue_call(real_app, "noop", job_id=f"w{i}", queue="default") for i in range(20)]
    gate = await held_lone_call_then(real_app, calls)
    assert gate.sent == [["lead"], [f"w{i}" for i in range(11)],
                         [f"w{i}" for i in range(11, 20)]]
    ids = {k.decode() for k in await real_app.redis.hkeys(real_app.keys("default").jobs)}
    assert {"lead", *(f"w{i}" for i in range(20))} <= ids


async def test_a_batch_s_payloads_add_up_to_max_bytes_at_most(real_app: App) -> None:
    """Beyond its first job, a call takes jobs while their payloads add up
    to max_bytes at most: with room for two of these payloads and a half,
    calls of two jobs; a payload over max_bytes on its own goes alone."""
    small, big = {"s": "x" * 1000}, {"s": "x" * 3000}
    size = len(encode_envelope(small, "", ""))
    real_app.coalescer.max_bytes = size * 5 // 2
    payloads = [big if i == 4 else small for i in range(10)]
    calls = [enqueue_call(real_app, "noop", payloads[i], job_id=f"w{i}", queue="default")
             for i in range(10)]
    gate = await held_lone_call_then(real_app, calls)
    assert gate.sent == [["lead"], ["w0", "w1"], ["w2", "w3"], ["w4"], ["w5", "w6"],
                         ["w7", "w8"], ["w9"]]
    for i in range(10):
        assert (await real_app.get_job(f"w{i}", queue="default")).payload == payloads[i]
