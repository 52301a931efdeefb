"""Bad input gets a typed error, and the error proves nothing was written:
every job is validated before the first script call."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.exceptions

from leasequeue import App, JobRequest
from leasequeue.app import ENQUEUE_CHUNK
from leasequeue.errors import (
    ConfigError,
    JobNotFound,
    LeaseQueueError,
    PayloadNotSerializable,
    PayloadTooLarge,
    RedisUnavailable,
    UnknownJob,
)
from tests.harness.redis_proc import RedisProcess, free_port
from tests.helpers import START_ALL, new_claim_id

pytestmark = pytest.mark.anyio

Q = "default"


async def written(app: App) -> list[bytes]:
    """Every key under the app's prefix (each queue's keys start with '{prefix:')."""
    return [k async for k in app.redis.scan_iter(match="{" + app.prefix + ":*")]


async def test_payload_not_serialisable(app: App) -> None:
    with pytest.raises(PayloadNotSerializable):
        await app.enqueue("j", {"x": object()}, queue=Q)
    with pytest.raises(PayloadNotSerializable):
        await app.enqueue("j", {1: "non-str key"}, queue=Q)  # type: ignore[dict-item]
    assert await written(app) == []


async def test_payload_over_the_limit(app: App) -> None:
    async with App(app.url, prefix=app.prefix, max_payload_bytes=1024) as small:
        with pytest.raises(PayloadTooLarge) as caught:
            await small.enqueue("j", {"x": "a" * 2000}, queue=Q)
        assert caught.value.limit == 1024 and caught.value.size > 1024
        assert await written(small) == []
        # just under the limit is fine
        assert (await small.enqueue("j", {"x": "a" * 1000}, queue=Q)).created


@pytest.mark.parametrize("bad, error", [
    (JobRequest("j", {"x": object()}, queue=Q), PayloadNotSerializable),
    (JobRequest("j", {"x": "a" * 600_000}, queue=Q), PayloadTooLarge),  # default is 512 KiB
    (JobRequest("j", queue="not a queue"), ConfigError),
    (JobRequest("j", queue=Q, priority=40_000), ConfigError),
    (JobRequest("j", queue=Q, delay=-1), ConfigError),
], ids=["unserialisable", "too-large", "bad-queue", "bad-priority", "negative-delay"])
async def test_one_bad_job_in_a_batch_writes_none(app: App, bad: JobRequest,
                                                  error: type[LeaseQueueError]) -> None:
    # the bad job comes after the first chunk, so a chunk-by-chunk check would
    # already have written 500 jobs
    good = [JobRequest("j", {"i": i}, queue=Q) for i in range(ENQUEUE_CHUNK + 200)]
    with pytest.raises(error):
        await app.enqueue_many([*good, bad, JobRequest("j", queue="other")])
    assert await written(app) == []


@pytest.mark.parametrize("options", [
    {"max_attempts": -1}, {"max_infra_attempts": -5}, {"delay": math.nan}, {"delay": math.inf},
    {"delay": -0.001}, {"delay": 10 * 365 * 24 * 3600.0}, {"priority": True},
    {"priority": 1.5}, {"priority": 32_768}, {"priority": -32_768},
], ids=["negative-max-attempts", "negative-max-infra", "nan-delay", "inf-delay",
        "negative-delay", "ten-year-delay", "bool-priority", "float-priority",
        "priority-over", "priority-under"])
async def test_bad_numbers_are_config_errors(prefix: str, options: dict[str, Any]) -> None:
    async with App(f"memory://{prefix}", prefix=prefix) as app:
        with pytest.raises(ConfigError):
            await app.enqueue("j", queue=Q, **options)


async def test_redis_unreachable(prefix: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    async with App(url, prefix=prefix) as app:
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: app.enqueue("j", queue=Q), lambda: app.get_job("x", queue=Q), app.ping,
            lambda: app.scripts.claim(app.keys(Q), 1, 1000, "w", START_ALL, new_claim_id()),
        ]
        for call in calls:
            with pytest.raises(RedisUnavailable) as caught:
                await call()
            assert url in str(caught.value)
            # code that catches redis-py's own error keeps working
            assert isinstance(caught.value, redis.exceptions.ConnectionError)
            assert caught.value.url == url


async def test_get_job_of_a_missing_id(app: App) -> None:
    with pytest.raises(JobNotFound):
        await app.get_job("nope")
    with pytest.raises(JobNotFound):
        await app.get_job("nope", queue="elsewhere")
    await app.enqueue("j", queue="elsewhere", job_id="there")
    with pytest.raises(JobNotFound):  # it exists, but not in the queue asked
        await app.get_job("there", queue=Q)


async def test_unregistered_name_on_an_app_with_jobs(app: App) -> None:
    @app.job(queue="mail")
    async def send(ctx: object) -> None: ...

    with pytest.raises(UnknownJob):
        await app.enqueue("sned", {"to": "x"})
    with pytest.raises(UnknownJob):  # a batch fails as a whole
        await app.enqueue_many([JobRequest("send"), JobRequest("sned")])
    assert await written(app) == []
    # a registered name finds its queue; queue= enqueues for another service
    assert (await app.enqueue("send")).queue == "mail"
    assert (await app.enqueue("other_service_job", queue="theirs")).queue == "theirs"


async def test_config_errors_are_typed(app: App) -> None:
    with pytest.raises(ConfigError):
        App("http://localhost:6379")
    with pytest.raises(ConfigError):
        App("memory://", prefix="has space")
    with pytest.raises(ConfigError):
        await app.enqueue("j", queue=Q, job_id="x" * 513)
    assert await written(app) == []


async def test_a_connection_closed_under_a_call_inside_redis_py_is_unavailable() -> None:
    """redis-py's cluster client disconnects a node's connections in a
    failover while other tasks' commands use them. Before redis-py 8.2 those
    failed inside redis-py with an AttributeError on the closed writer (8.2
    checks the writer first and raises its ConnectionError). Either way it is
    a lost connection (RedisUnavailable), not a crash of the task that sent
    it; an AttributeError of anyone else's code still rises as it is."""
    import os

    from redis.asyncio.connection import Connection

    from leasequeue.errors import RedisUnavailable
    from leasequeue.store.translate import translate_errors, unavailable

    closed = Connection()  # never connected: its writer is None, as after a disconnect
    with pytest.raises(RedisUnavailable):
        await translate_errors("redis://x", "start", closed._send_packed_command([b"PING"]))
    # whatever the installed redis-py raises for it: the waker's own check
    with pytest.raises((AttributeError, redis.exceptions.ConnectionError)) as raw:
        await closed._send_packed_command([b"PING"])
    assert unavailable(raw.value)

    # the error of a redis-py before 8.2, raised as it was, from a file of
    # redis-py's tree (what closed_under_a_call looks for), whichever
    # redis-py is installed: the older ones are still allowed (pyproject)
    older: dict[str, Any] = {}
    where = os.path.join(os.sep, "site-packages", "redis", "asyncio", "connection.py")
    exec(compile("async def send(writer):\n    writer.writelines([b'PING'])\n", where, "exec"),
         older)
    with pytest.raises(AttributeError) as raw:
        await older["send"](None)
    assert unavailable(raw.value), raw.value
    with pytest.raises(RedisUnavailable):
        await translate_errors("redis://x", "start", older["send"](None))

    async def our_bug() -> None:
        none: Any = None
        none.writelines([b"PING"])

    with pytest.raises(AttributeError) as ours:
        await translate_errors("redis://x", "start", our_bug())
    assert not unavailable(ours.value)


def test_a_write_on_a_transport_closed_under_a_call_on_uvloop_is_unavailable(
        redis_server: RedisProcess) -> None:
    """On uvloop, a write on a transport that is already closed raises
    uvloop's RuntimeError (asyncio's loop: ConnectionResetError). redis-py
    before 8.2 let it through (8.2 checks is_closing() before its write, so
    the write is made here directly): a worker on uvloop whose cluster client wrote a claim
    on a connection a master failover had closed lost its claimer to it, and
    stopped (CI of 8b04270). It is a lost connection: RedisUnavailable for
    redis-py's calls, redis-py's ConnectionError on the lane (which drops
    the connection and retries); any other RuntimeError rises as it is."""
    import uvloop
    from redis.asyncio.connection import Connection
    from redis.exceptions import ConnectionError as RedisConnectionError

    from leasequeue.errors import RedisUnavailable
    from leasequeue.store import direct
    from leasequeue.store.translate import translate_errors, unavailable

    opened: list[Connection] = []

    async def closed() -> Connection:
        conn = Connection(port=redis_server.port)
        await conn.connect()
        opened.append(conn)
        conn._writer.transport.close()  # type: ignore[union-attr]
        await asyncio.sleep(0.01)  # uvloop closes the handle on the next turn
        return conn

    async def main() -> None:
        conn = await closed()
        # the write redis-py made (redis-py 8.2 checks is_closing() first and
        # raises its ConnectionError; a transport closed later still gets here)
        with pytest.raises(RuntimeError) as raw:
            conn._writer.writelines([b"*1\r\n$4\r\nPING\r\n"])  # type: ignore[union-attr]
        assert unavailable(raw.value), raw.value
        conn = await closed()
        with pytest.raises(RedisUnavailable):
            await translate_errors(redis_server.url, "claim",
                                   conn._send_packed_command([b"*1\r\n$4\r\nPING\r\n"]))
        conn = await closed()
        with pytest.raises(RedisConnectionError):
            direct._write(conn, b"*1\r\n$4\r\nPING\r\n")

        async def our_bug() -> None:
            raise RuntimeError("unable to perform operation on this")

        with pytest.raises(RuntimeError) as ours:
            await translate_errors(redis_server.url, "claim", our_bug())
        assert not unavailable(ours.value)

    async def close_all() -> None:
        for conn in opened:
            await conn.disconnect()

    loop = uvloop.new_event_loop()
    try:
        try:
            loop.run_until_complete(main())
        finally:  # failed or not: no connection left for a later test's collector
            loop.run_until_complete(close_all())
    finally:
        loop.close()
