"""The scripts' connection lane (store/direct.py): connections kept out of the
pool's per-call bookkeeping must never hand a stale reply to the next call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import hiredis
import pytest
import redis as redis_sync
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from leasequeue import App, JobRequest, SyncApp
from leasequeue.errors import JobNotFound, RedisUnavailable
from leasequeue.store import direct
from tests.harness.redis_proc import RedisProcess, stall_in_background
from tests.harness.tcp_proxy import TcpProxy
from tests.helpers import eventually, used_on_two_loops

pytestmark = pytest.mark.anyio


async def _lane_conn(app: App) -> object:
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="warm")
    lane = app.scripts._lane
    assert lane is not None and len(lane._idle) == 1
    return lane._idle[0]


@asynccontextmanager
async def _lane_app(url: str, prefix: str,
                    socket_timeout: float | None) -> AsyncIterator[tuple[App, Any]]:
    """An App on a client with its own ``socket_timeout``, and the one lane
    connection its first enqueue left; the App is closed after."""
    app = App(url, prefix=prefix, redis=Redis.from_url(url, socket_timeout=socket_timeout))
    try:
        yield app, await _lane_conn(app)
    finally:
        await app.close()


async def test_a_call_cancelled_mid_reply_does_not_leave_its_reply_to_the_next(
        debug_server: RedisProcess) -> None:
    app = App(debug_server.url, prefix="lane")
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="warm")  # the lane holds one idle connection now
    stall = stall_in_background(debug_server, 0.5)
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
        # every reply above is the same "queued": a call whose reply differs
        # (an existing id) shows whether each call read its own
        again = await app.enqueue("j", job_id="warm")
        assert (again.created, again.state) == (False, "queued")
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


async def _seconds_to_fail_in_a_stall(app: App, server: RedisProcess) -> float:
    """Redis stalled 2 s (DEBUG SLEEP): how long an enqueue takes to raise
    RedisUnavailable (two tries, each cut by the socket timeout)."""
    stall = stall_in_background(server, 2.0)
    await anyio.sleep(0.1)  # the sleep has begun
    started = anyio.current_time()
    with pytest.raises(RedisUnavailable):
        await app.enqueue("j", job_id="late")  # two tries, each timed out
    took = anyio.current_time() - started
    stall.join()
    return took


async def test_a_reply_later_than_the_socket_timeout_raises_and_drops_the_connection(
        debug_server: RedisProcess) -> None:
    async with _lane_app(debug_server.url, "lane", 0.3) as (app, conn):
        lane = app.scripts._lane
        assert lane is not None
        stale = conn._reader
        took = await _seconds_to_fail_in_a_stall(app, debug_server)
        assert 0.5 <= took < 1.5, took  # two socket timeouts, not the stall's full length
        # the timed-out connection went (the pool may reconnect the same object)
        assert not any(c._reader is stale for c in lane._idle)
        assert (await app.enqueue("j", job_id="after")).id == "after"


async def test_a_read_after_a_long_wait_cut_short_times_out_at_its_own_deadline(
        debug_server: RedisProcess) -> None:
    """A connection keeps one read timer armed across reads (direct._Watch): a
    wait that may block 5 s arms it for then; when the wait ends early, the
    next read must still time out within its own socket timeout, not at the
    wait's deadline."""
    with redis_sync.Redis(port=debug_server.port) as pusher:
        async with _lane_app(debug_server.url, "lane", 0.3) as (app, _):
            lane = app.scripts._lane
            assert lane is not None

            async def token_soon() -> None:
                await anyio.sleep(0.6)  # the timer the warm-up armed fires in the wait
                pusher.rpush("{lane}:token", "1")

            async with anyio.create_task_group() as tg:
                tg.start_soon(token_soon)
                assert await lane.blpop(["{lane}:token"], 5.0) is not None  # cut short at 0.6 s
            took = await _seconds_to_fail_in_a_stall(app, debug_server)
            assert 0.5 <= took < 1.5, took  # the socket timeout's, not the wait's (5 s)
            assert (await app.enqueue("j", job_id="after")).id == "after"


async def test_a_dropped_connection_is_retried_once_not_more(real_app: App) -> None:
    """Lane.run retries a call once on a dropped connection: with two broken
    idle connections the call fails (nothing written), and the next call
    takes a fresh one."""
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None
    extra = await lane._pool.get_connection()
    lane._idle.append(extra)
    assert len(lane._idle) == 2
    broken = [c._reader for c in lane._idle]
    for stream in broken:  # what a read timer firing as the reply comes leaves
        stream.set_exception(direct._ReadTimeout())
    with pytest.raises(RedisUnavailable):
        await app.enqueue("j", job_id="b")
    with pytest.raises(JobNotFound):
        await app.get_job("b")
    assert not any(c._reader in broken for c in lane._idle)
    assert (await app.enqueue("j", job_id="c")).created


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


async def test_a_read_timer_firing_as_a_noscript_comes_in_times_the_call_out_and_retries_it(
        real_app: App, sync_redis: redis_sync.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read timer fires as a NOSCRIPT reply comes in (its error left on
    the stream): the script's load is refused like a write (a timeout of the
    call), and the call is sent again on another connection, loaded there
    and answered. Before (found by a review, 2026-12-07), SCRIPT LOAD was
    written and redis-py's read raised the lane's own _ReadTimeout, which
    reached the caller untranslated and was not retried."""
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None
    lane._spin = None  # (every read is _read's, whatever the CPUs and the spin's state)
    (first,) = lane._idle
    bad = first._reader
    sync_redis.script_flush()  # the next call answers NOSCRIPT (inline, then in _run)
    real_read = direct._read
    noscripts: list[object] = []

    async def read(conn: Any, wait: float = 0.0) -> Any:
        try:
            return await real_read(conn, wait)
        except direct.NoScriptError:
            noscripts.append(conn)
            if len(noscripts) == 2:  # _run's call, about to load the script
                conn._reader.set_exception(direct._ReadTimeout())
            raise

    monkeypatch.setattr(direct, "_read", read)
    job = await app.enqueue("j", job_id="b")
    monkeypatch.undo()
    assert job.created and noscripts[:2] == [first, first]
    assert lane._idle and all(c._reader is not bad for c in lane._idle)  # dropped
    assert (await app.get_job("b")).id == "b"


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


# -- the lane's own protocol in front of redis-py's stream (direct._LaneProtocol) --

async def test_a_lane_read_takes_its_reply_from_the_lane_protocol(real_app: App) -> None:
    conn: Any = await _lane_conn(real_app)
    # the protocol's own path: no reply read off the socket first (that
    # path is tests/test_reply_spin.py's)
    real_app.scripts._lane._spin = None  # type: ignore[union-attr]
    proto = conn._writer.transport.get_protocol()
    assert isinstance(proto, direct._LaneProtocol) and proto.stream is conn._reader
    fed = []
    inner_data_received = proto.inner.data_received
    proto.inner.data_received = lambda data: fed.append(data) or inner_data_received(data)
    for i in range(20):
        assert (await real_app.enqueue("j", job_id=f"p{i}")).created
    assert fed == []  # no byte went through redis-py's stream
    assert not conn._reader._buffer


async def test_redis_py_s_reads_and_the_lane_s_share_a_connection_in_order(
        real_app: App) -> None:
    """redis-py reads its own commands on a lane connection (SCRIPT LOAD after
    a NOSCRIPT): every reply, on either path, small or many reads long, is
    the one its command asked for."""
    conn: Any = await _lane_conn(real_app)
    big = bytes(range(256)) * 1200  # 300 kB: several reads on either path
    await real_app.redis.set("big", big)
    for i in range(30):
        with anyio.fail_after(5):  # a byte fed to the wrong reader hangs a read
            if i % 3 == 0:
                await conn.send_command("GET", "big")
                assert await conn.read_response() == big
            elif i % 3 == 1:
                await conn.send_command("ECHO", f"e{i}")
                assert await conn.read_response() == f"e{i}".encode()
            else:
                got = await direct._send_and_read(conn, hiredis.pack_command(("GET", "big")))
                assert got == big
            assert (await real_app.enqueue("j", job_id=f"m{i}")).id == f"m{i}"
    assert (await real_app.enqueue("j", job_id="m0")).created is False  # its own reply


async def test_a_reconnected_lane_connection_gets_a_protocol_of_its_own(real_app: App) -> None:
    conn: Any = await _lane_conn(real_app)
    first = conn._lq_proto
    await real_app.redis.client_kill_filter(_type="normal", skipme=True)
    with anyio.fail_after(5):
        assert (await real_app.enqueue("j", job_id="after")).created  # the retry reconnects
    lane = real_app.scripts._lane
    assert lane is not None
    again: Any = lane._idle[-1]
    proto = again._writer.transport.get_protocol()
    assert isinstance(proto, direct._LaneProtocol) and proto is not first
    assert proto.stream is again._reader
    for i in range(5):
        with anyio.fail_after(5):
            assert (await real_app.enqueue("j", job_id=f"r{i}")).created
    # closed by the pool, not by the lane (which forgets the protocol it
    # drops): redis-py reconnects the same object on its next command
    await real_app.redis.connection_pool.disconnect()
    for i in range(5):
        with anyio.fail_after(5):
            assert (await real_app.enqueue("j", job_id=f"d{i}")).created
    proto = again._writer.transport.get_protocol()
    assert isinstance(proto, direct._LaneProtocol) and proto.stream is again._reader


async def test_a_connection_lost_mid_read_fails_the_read_at_once(
        redis_server: RedisProcess) -> None:
    """No socket timeout: only the protocol's connection_lost can end a read
    whose connection the server closed."""
    async with _lane_app(redis_server.url, "lost", None) as (app, _):
        lane = app.scripts._lane
        assert lane is not None
        key = app.keys("default").wake
        await app.redis.delete(key)

        async def kill_soon() -> None:
            await anyio.sleep(0.3)
            await app.redis.client_kill_filter(_type="normal", skipme=True)

        started = anyio.current_time()
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_soon)
                with pytest.raises(RedisConnectionError):
                    await lane.blpop([key], 30.0)
        assert anyio.current_time() - started < 3
        assert (await app.enqueue("j", job_id="after")).created


def _unread(transport: Any) -> int:
    """Bytes waiting in the kernel for the transport's socket (FIONREAD)."""
    import fcntl
    import struct
    import termios

    got = fcntl.ioctl(transport.get_extra_info("socket").fileno(), termios.FIONREAD, b"\0" * 4)
    return int(struct.unpack("i", got)[0])


async def test_a_lane_read_behind_bytes_the_stream_holds_reads_them_first(
        real_app: App) -> None:
    """redis-py reads a reply that came in one stream read with the start of
    the lane's reply behind it: the rest of the stream's bytes are the
    lane's, read from the stream before anything the protocol would feed.

    Set up so, every time: both commands in one write (Redis answers them in
    one go), the socket not read until more than redis-py's one read of
    the stream (64 kB) waits in the kernel, redis-py waiting on the stream
    when reading resumes. Left to timing, the two replies came apart in one
    run of three, and the stream held none of the lane's bytes."""
    conn: Any = await _lane_conn(real_app)
    transport = conn._writer.transport
    big = bytes(range(256)) * 4096  # 1 MB: far more than redis-py's one read takes
    await real_app.redis.set("big", big)

    async def echo(into: list[bytes]) -> None:
        into.append(await conn.read_response())

    for _ in range(3):
        with anyio.fail_after(10):
            transport.pause_reading()
            direct._write(conn, hiredis.pack_command(("ECHO", "first"))
                          + hiredis.pack_command(("GET", "big")))
            await eventually(lambda: _unread(transport) > direct.READ_SIZE + 1024, 5,
                             "more than one stream read of the replies in the socket")
            echoed: list[bytes] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(echo, echoed)
                await eventually(lambda: conn._reader._waiter is not None, 5,
                                 "redis-py waiting on the stream")
                transport.resume_reading()
            assert echoed == [b"first"]
            assert conn._reader._buffer  # the start of the lane's reply is in the stream
            assert await direct._read(conn) == big
    assert not conn._reader._buffer


async def test_a_reset_of_an_idle_lane_connection_fails_its_next_read(
        proxy: TcpProxy) -> None:
    """An RST while no read waits leaves the error on the stream (the
    protocol's connection_lost passes it on): the next lane read raises it
    at once instead of waiting on a protocol nothing reaches any more."""
    async with _lane_app(proxy.url, "reset", None) as (_, conn):
        proxy.cut()  # RST on every proxied connection
        await eventually(lambda: conn._reader.exception() is not None, 5, "the reset")
        with anyio.fail_after(5):
            with pytest.raises(RedisConnectionError):
                await direct._read(conn)


async def test_a_read_timer_firing_between_two_waits_fails_the_read(
        redis_server: RedisProcess) -> None:
    """The timer fires while the read has no wait of its own (in an async
    push handler): the stream keeps the timeout, and the read's next wait
    raises it at once instead of waiting with no timer armed (here: for
    the 30 s of a timer armed anew)."""
    async with _lane_app(redis_server.url, "between", 30) as (_, conn):
        proto = conn._lq_proto
        assert proto.waiter is None
        proto.set_exception(direct._ReadTimeout())  # what _Watch._fire calls
        with anyio.fail_after(3):
            with pytest.raises(RedisTimeoutError):
                await direct._read(conn)


async def test_a_reply_hiredis_cannot_parse_fails_the_read_not_the_transport(
        real_app: App) -> None:
    conn: Any = await _lane_conn(real_app)
    proto = conn._lq_proto
    waiter = proto.waiter = proto.loop.create_future()
    proto.data_received(b"?not RESP\r\n")  # raises nothing into the transport
    assert proto.waiter is None
    with pytest.raises(Exception, match=r"(?i)protocol|invalid"):
        waiter.result()


async def test_a_unix_socket_connection_takes_the_direct_path(tmp_path: Path) -> None:
    path = tmp_path / "redis.sock"
    with RedisProcess(extra=["--unixsocket", str(path), "--unixsocketperm", "700"]):
        app = App(f"unix://{path}", prefix="unix")
        try:
            conn: Any = await _lane_conn(app)
            assert isinstance(conn, UnixDomainSocketConnection) and direct._direct_io(conn)
            assert isinstance(conn._writer.transport.get_protocol(), direct._LaneProtocol)
            for i in range(20):
                assert (await app.enqueue("j", job_id=f"u{i}")).created
            assert (await app.enqueue("j", job_id="u0")).created is False
            ids = [r.id for r in await app.enqueue_many(
                [JobRequest("j", job_id=f"b{i}") for i in range(600)])]
            assert ids == [f"b{i}" for i in range(600)]
            sync = SyncApp(f"unix://{path}", prefix="unix")  # the sync producer too
            try:
                assert sync.enqueue("j", job_id="s1", queue="default").created
                assert sync.enqueue("j", job_id="u1", queue="default").created is False
            finally:
                sync.close()
        finally:
            await app.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_app_on_a_unix_socket_used_again_on_a_new_loop_takes_no_connection_of_the_old_one(
        tmp_path: Path) -> None:
    """unix:// connections are loop-aware (connection.LoopAwareUnixConnection)."""
    path = tmp_path / "redis.sock"
    with RedisProcess(extra=["--unixsocket", str(path), "--unixsocketperm", "700"]):
        assert used_on_two_loops(f"unix://{path}", "unix2") == (
            ["default"], "queued", False, True)


# -- run_many: enqueue_many's chunks pipelined on one connection ----------------

def _first_difference(got: Sequence[object], want: Sequence[object]) -> str | None:
    """None when the lists are equal, else where they first differ: a cheap
    failure message (pytest's full diff of two lists of 1,500 items takes
    minutes where CI is set, which shows it untruncated)."""
    if got == want:
        return None
    shorter = min(len(got), len(want))
    i = next((k for k in range(shorter) if got[k] != want[k]), shorter)
    return f"{len(got)} items against {len(want)}; first difference at {i}: " \
           f"{got[i:i + 1]} against {want[i:i + 1]}"


async def _claim_order(app: App, n: int) -> list[str]:
    from tests.helpers import START_ALL, new_claim_id
    batch = await app.scripts.claim(app.keys("default"), n, 30_000, "w", START_ALL,
                                    new_claim_id())
    return [j.id for j in batch.jobs]


async def test_enqueue_many_pipelines_its_chunks_and_keeps_their_order(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four chunks of 500: the first through run(), then each call written
    before the reply to the one before it is read; Redis runs them in order,
    so the batch claims back in exact FIFO order across the chunks."""
    from leasequeue import JobRequest
    events: list[str] = []
    write, read = direct._write, direct._read

    def logged_write(conn: object, packed: bytes) -> None:
        events.append("w")
        write(conn, packed)

    async def logged_read(conn: object, wait: float = 0.0) -> object:
        events.append("r")
        return await read(conn, wait)

    await real_app.verify_queues(["default"])  # its script call is not logged
    monkeypatch.setattr(direct, "_write", logged_write)
    monkeypatch.setattr(direct, "_read", logged_read)
    n = 1800
    ids = [f"j{i:05d}" for i in range(n)]
    out = await real_app.enqueue_many([JobRequest("j", job_id=i, queue="default") for i in ids])
    assert _first_difference([e.id for e in out], list(ids)) is None
    assert all(e.created for e in out)
    # run(): write read; then w w r, w r, ... : the second pipelined call is
    # written before the first pipelined reply is read
    assert events == ["w", "r", "w", "w", "r", "w", "r", "r"]
    assert _first_difference(list(await _claim_order(real_app, n)), list(ids)) is None


async def test_a_lost_reply_mid_pipeline_sends_the_rest_one_by_one_and_loses_no_job(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection lost as the first pipelined reply is read: the calls not
    answered go through run(); every job exists once, in order, and each is
    answered (the calls that ran and lost their replies answer their jobs as
    existing, as run()'s own retry does)."""
    from leasequeue import JobRequest
    read = direct._read
    reads = 0

    async def failing_read(conn: object, wait: float = 0.0) -> object:
        nonlocal reads
        reads += 1
        if reads == 2:  # the first pipelined reply: that call ran, its reply is lost
            raise direct.RedisConnectionError("lost")
        return await read(conn, wait)

    await real_app.verify_queues(["default"])  # its script call is not counted
    monkeypatch.setattr(direct, "_read", failing_read)
    ids = [f"k{i:05d}" for i in range(1500)]
    out = await real_app.enqueue_many([JobRequest("j", job_id=i, queue="default") for i in ids])
    assert _first_difference([e.id for e in out], list(ids)) is None
    # the second and third calls were both written (two in flight) and both ran
    assert _first_difference([e.created for e in out], [True] * 500 + [False] * 1000) is None
    assert await real_app.redis.hlen(real_app.keys("default").jobs) == 1500
    assert _first_difference(list(await _claim_order(real_app, 1500)), list(ids)) is None


async def test_a_script_flushed_mid_pipeline_is_loaded_again_and_no_job_is_lost(
        real_app: App, sync_redis: redis_sync.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """SCRIPT FLUSH after the first call: the pipelined calls answer NOSCRIPT,
    run() loads the script and sends them again; every job is created once."""
    from leasequeue import JobRequest
    write = direct._write
    flushed = False

    def flushing_write(conn: object, packed: bytes) -> None:
        nonlocal flushed
        if not flushed and packed.startswith(b"*") and b"EVALSHA" in packed[:40]:
            sync_redis.script_flush()
            flushed = True
        write(conn, packed)

    monkeypatch.setattr(direct, "_write", flushing_write)
    ids = [f"s{i:05d}" for i in range(1500)]
    out = await real_app.enqueue_many([JobRequest("j", job_id=i, queue="default") for i in ids])
    assert flushed
    assert _first_difference([e.id for e in out], list(ids)) is None
    assert all(e.created for e in out)
    assert _first_difference(list(await _claim_order(real_app, 1500)), list(ids)) is None


async def test_on_a_connection_not_driven_directly_enqueue_many_goes_call_by_call(
        real_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Sentinel connection (any _direct_io False) is not pipelined: every
    call goes through run() and redis-py's path, in order, and the lane
    keeps the connection."""
    from leasequeue import JobRequest

    def never(conn: object, packed: bytes) -> None:
        raise AssertionError("pipelined write on a connection not driven directly")

    monkeypatch.setattr(direct, "_direct_io", lambda conn: False)
    monkeypatch.setattr(direct, "_write", never)
    ids = [f"n{i:05d}" for i in range(1500)]
    out = await real_app.enqueue_many([JobRequest("j", job_id=i, queue="default") for i in ids])
    assert _first_difference([e.id for e in out], list(ids)) is None
    assert all(e.created for e in out)
    assert len(real_app.scripts._lane._idle) == 1  # type: ignore[union-attr]
    assert _first_difference(list(await _claim_order(real_app, 1500)), list(ids)) is None
