"""An error reply that redis-py's parser makes a connection error (-LOADING,
a Redis restarted with persistence still loading its dataset, which it
tells every connected client; -NOAUTH, -WRONGPASS) is raised by both
lanes (store/direct.py, store/sync_lane.py) as the call's error, never
returned as the script's value: the call fails with RedisUnavailable,
writes nothing, and the next call after the load is answered as usual.
Before, a lane raised only ResponseError values, and such a reply came
back as the reply itself (enqueue: TypeError "object of type
'BusyLoadingError' has no len()"; a claim: "not subscriptable", past the
claimer's loop). Found by a review (2026-12-07)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis as redis_sync
from redis.exceptions import BusyLoadingError, RedisError

from leasequeue import App, SyncApp
from leasequeue.errors import JobNotFound, RedisUnavailable
from leasequeue.store import spin
from tests.harness.redis_proc import RedisProcess, wait_until

pytestmark = pytest.mark.anyio

KEYS, DELAY_US = 2_000, 1_000  # a load of about 2 s, serving -LOADING meanwhile


def _loading(server: RedisProcess) -> bool:
    client = redis_sync.Redis(port=server.port)
    try:
        return int(client.info("persistence")["loading"]) == 1
    finally:
        client.close()


@contextmanager
def loading(server: RedisProcess) -> Iterator[None]:
    """Redis reloading its dataset from disk (DEBUG RELOAD, from a thread,
    each key's load slowed), answering other clients -LOADING meanwhile:
    entered once INFO says it loads; left once the reload is over."""
    client = server.client()
    client.execute_command("DEBUG", "POPULATE", KEYS, "filler")
    client.config_set("key-load-delay", DELAY_US)
    client.config_set("loading-process-events-interval-bytes", 1024)
    client.save()
    reload = threading.Thread(target=lambda: client.execute_command("DEBUG", "RELOAD"))
    reload.start()
    try:
        wait_until(lambda: _loading(server), 10.0, "Redis to start loading")
        yield
    finally:
        reload.join()
        client.config_set("key-load-delay", 0)
        client.close()


async def test_the_async_lane_raises_a_loading_reply_and_enqueue_says_redis_is_unavailable(
        debug_server: RedisProcess) -> None:
    app = App(debug_server.url, prefix="ld")
    app.job(lambda ctx: None, name="j")
    try:
        await app.enqueue("j", job_id="before")  # the lane holds an idle connection
        lane = app.scripts._lane
        assert lane is not None and len(lane._idle) == 1
        lane._spin = spin.ReplySpin(1_000_000)  # a spin that reads every reply (any CPUs)
        with loading(debug_server):
            # the lane itself: the reply raised, not returned, both where the
            # spin read it (the idle connection's call) and where _read did
            # (its retry, on a new connection)
            with pytest.raises(RedisError) as raw:
                await lane.run(app.scripts._scripts["stats"], [b"x"], [], spin=True)
            assert isinstance(raw.value, BusyLoadingError) and not lane._idle
            with pytest.raises(RedisUnavailable):
                await app.enqueue("j", job_id="during")
            assert _loading(debug_server)  # (all of it while Redis loaded)
        after = await app.enqueue("j", job_id="after")
        assert after.created and after.state == "queued"
        with pytest.raises(JobNotFound):  # nothing written by the failed call
            await app.get_job("during")
        assert (await app.get_job("before")).id == "before"
    finally:
        await app.close()


def test_the_sync_lane_raises_a_loading_reply_and_enqueue_says_redis_is_unavailable(
        debug_server: RedisProcess) -> None:
    with SyncApp(debug_server.url, prefix="ld") as sync:
        sync.enqueue("j", job_id="before")  # its connection and queue check
        with loading(debug_server):
            with pytest.raises(RedisUnavailable):
                sync.enqueue("j", job_id="during")
            assert _loading(debug_server)
        after = sync.enqueue("j", job_id="after")
        assert after.created and after.state == "queued"
        sync_jobs = [key for key in debug_server.client().keys("*ld*") if b"jobs" in key]
    client = debug_server.client()
    try:
        (jobs,) = sync_jobs
        assert client.hexists(jobs, "after") and client.hexists(jobs, "before")
        assert not client.hexists(jobs, "during")  # nothing written by the failed call
    finally:
        client.close()
