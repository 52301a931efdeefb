"""A lane connection (store/direct.py) serves the event loop it was made on,
in the process that made it: a forked child never writes on its parent's
sockets (a pre-forking server that made its App before the fork), and an
App used again on a new event loop (asyncio.run twice) never writes on the
closed loop's transport. Before (found by a review, 2026-12-07): the
child's call went out on the parent's socket, and a child killed after
its write left the parent's connection one reply behind for good, each
call then answered with the call before's reply; the next loop's enqueue
ran its script, then failed with RuntimeError: Event loop is closed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from leasequeue import App
from leasequeue.errors import JobNotFound
from tests.harness.redis_proc import RedisProcess
from tests.helpers import forked_mid_step, used_on_one_loop


def _port(conn: object) -> int:
    transport = conn._writer.transport  # type: ignore[attr-defined]
    return int(transport.get_extra_info("sockname")[1])


@contextlib.contextmanager
def _app_on_a_loop(url: str, prefix: str) -> Iterator[tuple[App, asyncio.AbstractEventLoop]]:
    """An App with job "j", and a loop of its own that stays open between
    the test's steps (a fork happens between two of them); closed after."""
    app = App(url, prefix=prefix)
    app.job(lambda ctx: None, name="j")
    loop = asyncio.new_event_loop()
    try:
        yield app, loop
        loop.run_until_complete(app.close())
    finally:
        loop.close()


def test_a_forked_child_calls_on_connections_of_its_own_and_the_parent_s_stay_in_step(
        redis_server: RedisProcess, prefix: str) -> None:
    with _app_on_a_loop(redis_server.url, prefix) as (app, loop):
        loop.run_until_complete(app.enqueue("j", job_id="parent-1"))
        lane = app.scripts._lane
        assert lane is not None
        loop.run_until_complete(app.get_job("parent-1"))  # (a pipeline: redis-py's own)
        (lane_port,) = [_port(c) for c in lane._idle]  # (no connection held here: the
        pool = lane._pool  # child's collector finds none of the parent's but through the lane)
        parent_ports = {_port(c) for c in (*pool._available_connections,
                                           *pool._in_use_connections)}
        assert lane_port in parent_ports and len(parent_ports) >= 2  # (the lane's, redis-py's)

        def child() -> str:
            async def main() -> str:
                job = await asyncio.wait_for(app.enqueue("j", job_id="child-1"), 10)
                stats = await asyncio.wait_for(app.stats(), 10)
                await asyncio.wait_for(app.get_job("child-1"), 10)
                ports = sorted({_port(c) for c in lane._idle})
                # what the child dropped is collected under its running loop:
                # a connection of the parent's finalized here would close its
                # transport, taking its descriptor out of the shared epoll set
                gc.collect()
                return f"{job.created} {stats.ready} {' '.join(map(str, ports))}"
            return asyncio.run(main())  # a loop of its own

        created, ready, *ports = forked_mid_step(loop, child).split()
        assert (created, ready) == ("True", "2")
        # connections of its own: none of the parent's, the lane's or the pool's
        assert ports and not parent_ports & set(map(int, ports))
        # the parent's connections, untouched by the child, answer in step and
        # at once: the lane's, and redis-py's (a pipeline's)
        assert [_port(c) for c in lane._idle] == [lane_port]
        assert loop.run_until_complete(asyncio.wait_for(app.stats(), 2)).ready == 2
        loop.run_until_complete(asyncio.wait_for(app.get_job("child-1"), 2))
        assert loop.run_until_complete(app.enqueue("j", job_id="parent-2")).created
        assert loop.run_until_complete(app.stats()).ready == 3
        assert [_port(c) for c in lane._idle] == [lane_port]


def test_a_child_killed_after_its_write_leaves_the_parent_s_replies_in_step(
        redis_server: RedisProcess, prefix: str) -> None:
    with _app_on_a_loop(redis_server.url, prefix) as (app, loop):
        loop.run_until_complete(app.enqueue("j", job_id="p1"))
        scripts, lane = app.scripts, app.scripts._lane
        assert lane is not None
        qk = app.keys("default")
        cfg = scripts._call_keys("queue_config", qk)
        stats = scripts._call_keys("stats", qk)
        assert isinstance(loop.run_until_complete(
            lane.run(scripts._scripts["stats"], stats, [32])), list)

        def child() -> str:
            async def main() -> None:
                # the child's call is written, and the child dies before its
                # read (SIGKILL, the OOM killer, a crash)
                call = asyncio.ensure_future(
                    lane.run(scripts._scripts["queue_config"], cfg, [7, -1]))
                await asyncio.sleep(0)
                os.kill(os.getpid(), signal.SIGKILL)
                await call
            asyncio.run(main())
            return "not killed"

        pid = os.fork()
        if pid == 0:  # (in_forked_child wants a report: this child never gives one)
            try:
                child()
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        for _ in range(3):  # each call answered with its own reply, in step
            assert isinstance(loop.run_until_complete(
                lane.run(scripts._scripts["stats"], stats, [32])), list)
            assert loop.run_until_complete(
                lane.run(scripts._scripts["queue_config"], cfg, [7, -1])) in (0, 1, b"1", "1")


def _loops_of(conns: Any) -> list[Any]:
    """The event loops the connected ones of ``conns`` have their streams on."""
    return [conn._reader._loop for conn in conns if conn._reader is not None]


def _none_of(old_loops: list[Any], *holders: Any) -> bool:
    """No connection the holders keep has its stream on one of ``old_loops``
    (a connection may be made again on the new loop: redis-py's pool
    reconnects one whose stream is another loop's, connection._OfTheLoopHere)."""
    return not any(loop in old_loops for holder in holders for loop in _loops_of(holder))


def _run(loop: str, main: Any) -> Any:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_app_used_again_on_a_new_loop_enqueues_once_on_a_connection_of_that_loop(
        redis_server: RedisProcess, prefix: str, loop: str) -> None:
    app = App(redis_server.url, prefix=prefix)
    app.job(lambda ctx: None, name="j")
    async def first() -> None:
        await app.enqueue("j", job_id="a")  # the lane keeps a connection of that loop
        await app.get_job("a")  # (a pipeline: a connection of redis-py's, kept in the pool)

    _run(loop, first())
    lane = app.scripts._lane
    assert lane is not None
    (old,) = lane._idle
    old_loops = _loops_of(lane._idle)

    async def again() -> tuple[bool, int]:
        job = await asyncio.wait_for(app.enqueue("j", job_id="b"), 2)
        stats = await asyncio.wait_for(app.stats(), 2)
        # redis-py's own calls too: the pool kept no connection of the old loop
        await asyncio.wait_for(app.get_job("b"), 2)
        return job.created, stats.ready

    assert _run(loop, again()) == (True, 2)
    assert old not in lane._idle and lane._idle  # forgotten; one of the new loop's kept
    assert old not in app.scripts._lane._pool._in_use_connections  # nor counted in the pool
    pool = lane._pool
    assert _none_of(old_loops, lane._idle, pool._available_connections, pool._in_use_connections)
    gc.collect()  # (the old loop's transports, here, under this test's filters)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_new_loop_s_first_call_never_takes_a_pooled_connection_of_the_old_loop(
        redis_server: RedisProcess, prefix: str, loop: str) -> None:
    """The lane held no connection of the old loop (it made no call there),
    but redis-py's pool kept one (a pipeline's): handed it, the lane would
    write on the closed loop's transport, run the script, and wait out its
    timeout for a reply nothing delivers."""
    app = App(redis_server.url, prefix=prefix)
    app.job(lambda ctx: None, name="j")

    async def look() -> None:
        with pytest.raises(JobNotFound):
            await app.get_job("nothing")

    _run(loop, look())
    lane = app.scripts._lane
    assert lane is not None and not lane._idle and lane._pool._available_connections
    pool = lane._pool
    old_loops = _loops_of(pool._available_connections)
    assert old_loops
    job = _run(loop, asyncio.wait_for(app.enqueue("j", job_id="b"), 2))
    assert job.created and lane._idle
    assert _none_of(old_loops, lane._idle, pool._available_connections, pool._in_use_connections)
    gc.collect()


@pytest.mark.anyio
async def test_a_call_of_a_stopped_loop_puts_its_connection_back_where_the_lane_finds_it(
        real_app: App) -> None:
    """The lane forgets another loop's idle connections in place: a call of
    that loop, stopped with the list in hand and resumed later, puts its
    connection back in the list the lane reads (and the lane's next call
    here forgets it), never in a list nobody reads, out of every count."""
    app = real_app
    app.job(lambda ctx: None, name="j")
    await app.enqueue("j", job_id="a")
    lane = app.scripts._lane
    assert lane is not None
    held = lane._idle  # what a stopped loop's call holds
    (mine,) = held
    lane._forget_other_loops()  # (every connection here is of this loop: all kept)
    assert lane._idle is held and held == [mine]


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_redis_py_s_own_calls_on_a_new_loop_never_take_a_connection_of_the_old_one(
        redis_server: RedisProcess, prefix: str, loop: str) -> None:
    """App's plain commands (a set, a pipeline, SMEMBERS), not the lane's
    scripts, first on the new loop: redis-py's pool handed each its idle
    connection of the closed loop, and the call failed with a bare
    ``RuntimeError: Event loop is closed`` (connection._OfTheLoopHere)."""
    app = used_on_one_loop(redis_server.url, prefix, lambda main: _run(loop, main))
    pool = app.redis.connection_pool
    old_loops = _loops_of(pool._available_connections)
    assert old_loops  # redis-py's own, kept idle in its pool

    async def again() -> tuple[list[str], str, bool]:
        queues, job, paused = await asyncio.wait_for(asyncio.gather(
            app.queues(), app.get_job("a"), app.paused("default")), 2)
        # served by connections made again on this loop (the old loop's
        # idle ones not handed out yet stay, each made again when it is)
        here = asyncio.get_running_loop()
        assert here in _loops_of([*pool._available_connections, *pool._in_use_connections])
        await app.close()
        return queues, job.state, paused

    assert _run(loop, again()) == (["default"], "queued", False)
    gc.collect()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_app_closed_on_a_new_loop_leaves_the_old_loop_s_connections_alone(
        redis_server: RedisProcess, prefix: str, loop: str) -> None:
    """App.close() on a new loop, its pool holding idle connections of the
    closed one: disconnecting those raised ``RuntimeError: Event loop is
    closed``; they are left alone, and the close completes."""
    app = used_on_one_loop(redis_server.url, prefix, lambda main: _run(loop, main))
    pool = app.redis.connection_pool
    assert _loops_of(pool._available_connections)
    _run(loop, asyncio.wait_for(app.close(), 2))  # (raised)
    gc.collect()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_lane_takes_no_connection_of_the_old_loop_from_a_client_of_the_caller_s_own(
        redis_server: RedisProcess, prefix: str, loop: str) -> None:
    """``App(redis=...)``, a plain redis-py client whose connections are not
    loop-aware (connection._OfTheLoopHere is connect()'s): the lane checks
    what it is handed itself. Its pool kept one connection of the closed
    loop (a pipeline's); the lane, handed it, would write on that loop's
    transport, run the script, and wait out its timeout."""
    from redis.asyncio import Redis

    app = App(redis_server.url, prefix=prefix, redis=Redis.from_url(redis_server.url))
    app.job(lambda ctx: None, name="j")

    async def look() -> None:
        with pytest.raises(JobNotFound):
            await app.get_job("nothing")

    _run(loop, look())
    lane = app.scripts._lane
    assert lane is not None and not lane._idle
    (old,) = lane._pool._available_connections
    job = _run(loop, asyncio.wait_for(app.enqueue("j", job_id="b"), 2))
    assert job.created
    assert old not in lane._idle and old not in lane._pool._available_connections
    assert old not in lane._pool._in_use_connections
    gc.collect()

