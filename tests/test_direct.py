"""The scripts' connection lane (store/direct.py): connections kept out of the
pool's per-call bookkeeping must never hand a stale reply to the next call."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import pytest
import redis as redis_sync

from leasequeue import App
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
