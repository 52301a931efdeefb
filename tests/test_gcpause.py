"""A batch is prepared with automatic garbage collection held off, and
collection comes back exactly as the program had it (leasequeue/gcpause.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from leasequeue import App, JobRequest, SyncApp, UnknownJob
from leasequeue.gcpause import collection_held
from tests.harness.redis_proc import RedisProcess


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every automatic collection while the test runs."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)
        gc.enable()


def _app() -> App:
    app = App("memory://gcpause", prefix="gcpause")

    @app.job
    async def noop() -> None: ...

    return app


def test_no_collection_runs_while_a_batch_is_prepared(collections: list[int]) -> None:
    producer = _app().producer
    requests = [JobRequest("noop") for _ in range(5_000)]  # ~10,000 objects kept alive
    gc.collect()
    collections.clear()
    prepared = producer.prepare_many(requests)
    # at most the one young pass that the first allocation after the hold makes
    assert len(prepared) == 5_000 and collections in ([], [0]), collections
    assert gc.isenabled()
    # without the hold, the same batch triggers collections as it goes
    prepare = producer.prepare
    again = [prepare(r) for r in requests]
    assert len(again) == 5_000 and len(collections) >= 5


def test_collection_comes_back_as_the_program_had_it(collections: list[int]) -> None:
    producer = _app().producer
    with pytest.raises(UnknownJob):  # an error inside the hold
        producer.prepare_many([JobRequest("noop"), JobRequest("nope")])
    assert gc.isenabled()
    gc.disable()  # a program that turned collection off keeps it off
    producer.prepare_many([JobRequest("noop")])
    assert not gc.isenabled()
    gc.enable()
    with collection_held():  # holds nest: the inner one leaves it off
        with collection_held():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_last_thread_out_turns_collection_back_on(collections: list[int]) -> None:
    inside = threading.Barrier(3)
    leave = [threading.Event(), threading.Event()]

    def hold(k: int) -> None:
        with collection_held():
            inside.wait(timeout=10)
            leave[k].wait(timeout=10)

    threads = [threading.Thread(target=hold, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    inside.wait(timeout=10)  # both threads hold
    assert not gc.isenabled()
    leave[0].set()
    threads[0].join(timeout=10)
    assert not threads[0].is_alive() and not gc.isenabled()  # the other still holds
    leave[1].set()
    threads[1].join(timeout=10)
    assert gc.isenabled()


def _spy_on_prepare(producer: Any) -> list[bool]:
    """Whether automatic collection was on as each job was prepared."""
    held: list[bool] = []
    real = producer.prepare

    def prepare(r: JobRequest, *rest: Any) -> Any:
        held.append(gc.isenabled())
        return real(r, *rest)

    producer.prepare = prepare
    return held


# a correlation id each: requests that take prepare() (plain ones prepare_many
# builds itself, under the same hold: test_no_collection_runs_while_a_batch_is_prepared)
BATCH = [JobRequest("noop", queue="default", correlation_id=f"c{i}") for i in range(3)]


def test_sync_app_prepares_its_batches_with_collection_held(
        redis_server: RedisProcess, prefix: str, collections: list[int]) -> None:
    sync = SyncApp(redis_server.url, prefix=prefix)
    held = _spy_on_prepare(sync.producer)
    try:
        replies = sync.enqueue_many(BATCH)
    finally:
        sync.close()
    assert [r.created for r in replies] == [True] * 3
    assert held == [False] * 3 and gc.isenabled()


@pytest.mark.anyio
async def test_app_prepares_its_batches_with_collection_held(
        real_app: App, collections: list[int]) -> None:
    held = _spy_on_prepare(real_app.producer)
    replies = await real_app.enqueue_many(BATCH)
    assert [r.created for r in replies] == [True] * 3
    assert held == [False] * 3 and gc.isenabled()
