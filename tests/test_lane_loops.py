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
import os
import signal

import pytest

from leasequeue import App
from tests.harness.redis_proc import RedisProcess
from tests.helpers import in_forked_child


def _port(conn: object) -> int:
    transport = conn._writer.transport  # type: ignore[attr-defined]
    return int(transport.get_extra_info("sockname")[1])


def test_a_forked_child_calls_on_connections_of_its_own_and_the_parent_s_stay_in_step(
        redis_server: RedisProcess, prefix: str) -> None:
    app = App(redis_server.url, prefix=prefix)
    app.job(lambda ctx: None, name="j")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app.enqueue("j", job_id="parent-1"))
        lane = app.scripts._lane
        assert lane is not None
        (conn,) = lane._idle
        pool = lane._pool
        parent_ports = {_port(c) for c in (*pool._available_connections,
                                           *pool._in_use_connections)}
        assert _port(conn) in parent_ports and len(parent_ports) >= 2  # (the lane's, redis-py's)

        def child() -> str:
            async def main() -> str:
                job = await asyncio.wait_for(app.enqueue("j", job_id="child-1"), 10)
                stats = await asyncio.wait_for(app.stats(), 10)
                ports = sorted({_port(c) for c in lane._idle})
                return f"{job.created} {stats.ready} {' '.join(map(str, ports))}"
            return asyncio.run(main())  # a loop of its own

        async def fork() -> str:
            # forked from a task's step of the parent's loop: in the child that
            # loop is a copy mid-step, whose task the child still sees as
            # current, so only the fork itself tells its connections apart
            return in_forked_child(child)

        created, ready, *ports = loop.run_until_complete(fork()).split()
        assert (created, ready) == ("True", "2")
        # connections of its own: none of the parent's, the lane's or the pool's
        assert ports and not parent_ports & set(map(int, ports))
        # the parent's connection, untouched by the child, answers in step
        assert lane._idle == [conn]
        assert loop.run_until_complete(asyncio.wait_for(app.stats(), 2)).ready == 2
        assert loop.run_until_complete(app.enqueue("j", job_id="parent-2")).created
        assert loop.run_until_complete(app.stats()).ready == 3
        assert lane._idle == [conn]
        loop.run_until_complete(app.close())
    finally:
        loop.close()


def test_a_child_killed_after_its_write_leaves_the_parent_s_replies_in_step(
        redis_server: RedisProcess, prefix: str) -> None:
    app = App(redis_server.url, prefix=prefix)
    app.job(lambda ctx: None, name="j")
    loop = asyncio.new_event_loop()
    try:
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
        loop.run_until_complete(app.close())
    finally:
        loop.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_app_used_again_on_a_new_loop_enqueues_once_on_a_connection_of_that_loop(
        redis_server: RedisProcess, prefix: str) -> None:
    app = App(redis_server.url, prefix=prefix)
    app.job(lambda ctx: None, name="j")
    asyncio.run(app.enqueue("j", job_id="a"))  # the lane keeps a connection of that loop
    lane = app.scripts._lane
    assert lane is not None
    (old,) = lane._idle

    async def again() -> tuple[bool, int]:
        job = await asyncio.wait_for(app.enqueue("j", job_id="b"), 10)
        stats = await app.stats()
        return job.created, stats.ready

    assert asyncio.run(again()) == (True, 2)
    assert old not in lane._idle and lane._idle  # forgotten; one of the new loop's kept
    assert old not in app.scripts._lane._pool._in_use_connections  # nor counted in the pool
