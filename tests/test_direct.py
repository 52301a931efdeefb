"""The scripts' connection lane (store/direct.py): connections kept out of the
pool's per-call bookkeeping must never hand a stale reply to the next call."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import hiredis
import pytest
import redis as redis_sync
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from leasequeue import App
from leasequeue.errors import RedisUnavailable
from leasequeue.store import direct
from tests.harness.redis_proc import RedisProcess

pytestmark = pytest.mark.anyio


def _stall(server: RedisProcess, seconds: float) -> threading.Thread:
    """DEBUG SLEEP on a connection of its own: Redis answers nobody meanwhile."""
    def sleep() -> None:
        client = redis_sync.Redis(port=server.port)
        try:
            client.execute_command("DEBUG", "SLEEP", seconds)
        finally:
            client.close()
    thread = threading.Thread(target=sleep)
    thread.start()
    return thread


@pytest.fixture
def debug_server() -> Iterator[RedisProcess]:
    proc = RedisProcess(extra=["--enable-debug-command", "yes"])  # Redis 7 refuses DEBUG
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


async def test_a_call_cancelled_mid_reply_does_not_leave_its_reply_to_the_next(
        debug_server: RedisProcess) -> None:
    app = App(debug_server.url, prefix="lane")
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="warm")  # the lane holds one idle connection now
    stall = _stall(debug_server, 0.5)
    await anyio.sleep(0.1)  # the sleep has begun
    with anyio.move_on_after(0.1) as scope:
        await app.enqueue("j", job_id="first")  # sent, its reply comes after the stall
    stall.join()
    assert scope.cancelled_caught
    # a reused connection would read "first"'s reply here
    try:
        second = await app.enqueue("j", job_id="second")
        assert second.id == "second"
        assert (await app.get_job("second")) is not None
    finally:
        await app.close()


async def test_an_error_reply_keeps_the_connection_in_the_lane(real_app: App) -> None:
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    before = app.scripts._lane._idle[:]  # type: ignore[union-attr]
    assert len(before) == 1
    await app.redis.config_set("maxmemory", 1)  # enqueue is refused over maxmemory
    try:
        try:
            await app.enqueue("j", job_id="b")
        except Exception as exc:  # the typed error is another test's subject
            assert "OOM" in str(exc) or "memory" in str(exc).lower()
        else:
            raise AssertionError("enqueue over maxmemory was accepted")
    finally:
        await app.redis.config_set("maxmemory", 0)
    assert app.scripts._lane._idle == before  # type: ignore[union-attr]
    assert (await app.enqueue("j", job_id="c")).id == "c"


# -- the direct read and write of a plain connection (direct._send_and_read) --

async def test_a_reply_larger_than_one_read_comes_whole(real_app: App) -> None:
    app = real_app
    app.job(lambda ctx, blob: None, name="j")
    blob = bytes(range(256)) * 2000  # 512 KB: the claim's reply takes many reads
    await app.enqueue("j", {"blob": blob}, job_id="big")
    assert direct.READ_SIZE < len(blob)
    batch = await app.scripts.claim(app.keys("default"), 1, 30_000, "w", 1, "c1")
    assert [j.id for j in batch.jobs] == ["big"]
    assert blob in batch.jobs[0].payload
    conn = app.scripts._lane._idle[0]  # type: ignore[union-attr]
    assert direct._direct_io(conn)  # the path under test is the one taken


async def test_a_reply_later_than_the_socket_timeout_raises_and_drops_the_connection(
        debug_server: RedisProcess) -> None:
    client = Redis.from_url(debug_server.url, socket_timeout=0.3)
    app = App(debug_server.url, prefix="lane", redis=client)
    app.job(lambda ctx: None, name="j")
    try:
        await app.enqueue("j", job_id="warm")
        lane = app.scripts._lane
        assert lane is not None
        stale = [c._reader for c in lane._idle]
        stall = _stall(debug_server, 2.0)
        await anyio.sleep(0.1)
        started = anyio.current_time()
        with pytest.raises(RedisUnavailable):
            await app.enqueue("j", job_id="late")  # two tries, each timed out
        took = anyio.current_time() - started
        stall.join()
        assert 0.5 <= took < 1.5, took  # two socket timeouts, not the stall's full length
        # the timed-out connection went (the pool may reconnect the same object)
        assert not any(c._reader in stale for c in lane._idle)
        assert (await app.enqueue("j", job_id="after")).id == "after"
    finally:
        await app.close()


async def test_a_stream_left_in_error_is_never_reused(real_app: App) -> None:
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None
    bad = lane._idle[0]._reader
    # what a read timer that fires as its reply comes in leaves behind
    bad.set_exception(direct._ReadTimeout())
    # never written on the bad stream: sent there, the enqueue would run, its
    # reply be lost, and the retry answer "existed"
    assert (await app.enqueue("j", job_id="b")).created
    assert [c._reader for c in lane._idle] != [bad] and lane._idle
    assert all(c._reader is not bad for c in lane._idle)
    assert (await app.get_job("b")) is not None


async def test_a_sentinel_connection_keeps_redis_py_s_path() -> None:
    pool = SentinelConnectionPool("mymaster", Sentinel([("127.0.0.1", 1)]))
    conn = SentinelManagedConnection(connection_pool=pool)
    assert not direct._direct_io(conn)  # READONLY after a failover must reconnect
    assert not direct._direct_io(Connection())  # not connected yet


async def test_the_wake_up_blpop_returns_a_token_or_none_and_a_cut_one_fouls_nothing(
        real_app: App) -> None:
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None and direct._direct_io(lane._idle[0])
    key = app.keys("default").wake
    await app.redis.delete(key)
    started = anyio.current_time()
    assert await lane.blpop([key], 0.2) is None  # Redis's own timeout, no error
    assert 0.15 <= anyio.current_time() - started < 2.0
    await app.redis.rpush(key, "1")
    assert await lane.blpop([key], 1.0) == [key.encode(), b"1"]
    with anyio.move_on_after(0.1):
        await lane.blpop([key], 1.0)  # cut while Redis blocks
    await app.redis.rpush(key, "1")  # a reused blocked connection would take this
    assert (await app.enqueue("j", job_id="b")).created  # (and it pushes a token of its own)
    assert await app.redis.llen(key) == 2


async def test_a_resp3_push_before_the_reply_is_skipped(real_app: App) -> None:
    """redis-py speaks RESP3 by default: a push (here a client-tracking
    invalidation) may come on a lane connection before a script's reply."""
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None
    conn = lane._idle[0]
    assert conn.protocol == 3 and direct._direct_io(conn)
    assert await direct._send_and_read(conn, hiredis.pack_command(
        ("CLIENT", "TRACKING", "ON"))) == b"OK"
    await direct._send_and_read(conn, hiredis.pack_command(("GET", "watched")))
    await app.redis.set("watched", "1")  # an invalidation push for the lane connection
    await anyio.sleep(0.05)  # (it is in the socket's buffer by now, or comes first anyway)
    second = await app.enqueue("j", job_id="b")
    assert second.created and second.id == "b"
    assert lane._idle == [conn]  # the same connection, read to the end of its reply
