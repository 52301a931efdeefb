"""The cancel scope an executor calls its async runs in (handler.RunScopes):
one anyio scope kept entered from run to run until a stop cancels it. What a
handler runs inside its own anyio scopes must still be stopped with the run
(its task group's children, a thread that checks for cancellation), and a
stop must reach only the run it names: not the executor's steps after it,
nor the next run on the same executor (concurrency 1: every run below goes
through one executor task)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import anyio
import pytest

from leasequeue import App, Context
from leasequeue.runtime.runs import StopReason
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio


async def _state(app: App, job_id: str, *states: str) -> Any:
    rec = await app.get_job(job_id)
    return rec if rec.state in states else None


def _stuck_and_last(app: App) -> None:
    """The two jobs a test runs after what it tries, on the same executor:
    ``stuck``, which its timeout stops, then ``last``, which must run whole."""

    @app.job(max_attempts=1, timeout=0.2)
    async def stuck(ctx: Context) -> None:
        await anyio.sleep(30)

    @app.job(max_attempts=1)
    async def last(ctx: Context) -> str:
        for _ in range(3):
            await anyio.sleep(0.02)  # a stop that reached this run would land here
        return "last"


async def _run_in_order(app: App, jobs: str, shutdown_may_raise: bool = False,
                        **options: Any) -> dict[str, Any]:
    """Enqueue ``jobs`` (each job's id is its name) in order and run one
    worker at concurrency 1 (one executor) until each has ended: their
    records by name. ``shutdown_may_raise``: what the worker raises as it
    ends is not the test's (a job missing from the records still fails it)."""
    names = jobs.split()
    for name in names:
        await app.enqueue(name, job_id=name)
    seen: dict[str, Any] = {}
    with contextlib.suppress(Exception) if shutdown_may_raise else contextlib.nullcontext():
        async with worker_running(app, concurrency=1, **options):
            for name in names:
                seen[name] = await eventually(
                    lambda j=name: _state(app, j, "succeeded", "dead"), limit=8)
    return seen


def _stuck_stopped_and_last_whole(seen: dict[str, Any]) -> None:
    assert seen["stuck"].state == "dead" and "timed out" in (seen["stuck"].error or "")
    assert (seen["last"].state, seen["last"].result) == ("succeeded", "last")


async def test_a_timeout_cancels_the_children_of_the_handlers_own_task_group(
        real_app: App) -> None:
    app = real_app
    children_cancelled: list[str] = []

    @app.job(max_attempts=1, timeout=0.3)
    async def fan_out(ctx: Context) -> None:
        async def child(name: str) -> None:
            try:
                await anyio.sleep(30)
            except anyio.get_cancelled_exc_class():
                children_cancelled.append(name)
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(child, "a")
            tg.start_soon(child, "b")

    await app.enqueue("fan_out", job_id="f")
    t0 = time.monotonic()
    async with worker_running(app, concurrency=1):
        rec = await eventually(lambda: _state(app, "f", "dead"), limit=10)
    assert sorted(children_cancelled) == ["a", "b"]
    assert rec.error is not None and "timed out after 0.3s" in rec.error
    assert time.monotonic() - t0 < 8  # not left to the children's own 30 s


async def test_a_stop_reaches_a_thread_that_checks_for_cancellation(real_app: App) -> None:
    app = real_app
    seen: list[str] = []

    def poll() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                anyio.from_thread.check_cancelled()
            except BaseException:
                seen.append("cancelled")
                raise
            time.sleep(0.01)

    @app.job(max_attempts=1, timeout=0.3)
    async def in_thread(ctx: Context) -> None:
        await anyio.to_thread.run_sync(poll)

    await app.enqueue("in_thread", job_id="t")
    t0 = time.monotonic()
    async with worker_running(app, concurrency=1):
        rec = await eventually(lambda: _state(app, "t", "dead"), limit=15)
    assert seen == ["cancelled"]
    assert rec.error is not None and "timed out after 0.3s" in rec.error
    assert time.monotonic() - t0 < 10  # the thread saw the stop, not its own 20 s


async def test_a_handler_that_swallows_its_stop_leaves_what_follows_uncancelled(
        real_app: App) -> None:
    app = real_app
    slept: list[str] = []

    @app.job(max_attempts=1, timeout=0.2)
    async def swallows(ctx: Context) -> str:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            pass  # a handler should not do this; the worker must survive it
        return "swallowed"

    @app.job(max_attempts=1)
    async def after(ctx: Context) -> str:
        for _ in range(3):
            await anyio.sleep(0.02)
        slept.append(ctx.job_id)
        return "whole"

    await app.enqueue("swallows", job_id="s")
    await app.enqueue("after", job_id="n")
    async with worker_running(app, concurrency=1):
        first = await eventually(lambda: _state(app, "s", "succeeded", "dead"))
        second = await eventually(lambda: _state(app, "n", "succeeded", "dead"))
    # its stop was swallowed, so it returned: a success (as with a scope per
    # run), settled although the scope it ran in was cancelled
    assert (first.state, first.result) == ("succeeded", "swallowed")
    assert (second.state, second.result) == ("succeeded", "whole")
    assert slept == ["n"]


async def test_a_stopped_run_leaves_the_next_run_on_its_executor_whole(real_app: App) -> None:
    _stuck_and_last(real_app)
    _stuck_stopped_and_last_whole(await _run_in_order(real_app, "stuck last"))


async def test_a_stop_of_a_run_that_ended_does_not_reach_the_next(real_app: App) -> None:
    app = real_app
    runs: dict[str, Any] = {}
    scopes: dict[str, Any] = {}
    second_waiting = threading.Event()
    stop_sent = anyio.Event()

    @app.job(max_attempts=1)
    async def first(ctx: Context) -> str:
        runs["first"] = ctx._run  # the run record (what the run table stops)
        scopes["first"] = ctx._run.scope  # type: ignore[attr-defined]
        return "first"

    @app.job(max_attempts=1)
    async def second(ctx: Context) -> str:
        scopes["second"] = ctx._run.scope  # type: ignore[attr-defined]
        second_waiting.set()
        await stop_sent.wait()
        await anyio.sleep(0.05)  # a stop that reached this run would land here
        return "second"

    await app.enqueue("first", job_id="1")
    await app.enqueue("second", job_id="2")
    async with worker_running(app, concurrency=1) as worker:
        await eventually(second_waiting.is_set, what="the second run to wait")
        # a late stop of the first run (a cancel or a lost lease that comes
        # after it ended), while the second runs on the same executor
        worker.table.stop(runs["first"], StopReason.CANCELED)
        stop_sent.set()
        rec = await eventually(lambda: _state(app, "2", "succeeded", "dead", "canceled"))
    assert (rec.state, rec.result) == ("succeeded", "second")
    # one executor, no stop between them: both runs were called in one scope
    assert scopes["first"] is scopes["second"] is not None


async def test_a_native_cancel_a_handler_swallowed_does_not_break_later_stops(
        real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1)
    async def rogue(ctx: Context) -> str:
        # cancels its own task natively and swallows it: the task's count of
        # cancel requests stays one up (nothing calls uncancel)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass
        return "rogue"

    _stuck_and_last(app)
    # the stop of `stuck` is the run's own: the executor catches it and goes on
    _stuck_stopped_and_last_whole(await _run_in_order(app, "rogue stuck last"))


async def test_a_handler_that_leaves_its_own_scope_open_fails_and_later_stops_work(
        real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1)
    async def leaky(ctx: Context) -> str:
        # a scope entered and never left, as an async generator broken out of
        # inside its own move_on_after leaves one (anyio forbids both)
        anyio.CancelScope().__enter__()
        return "leaky"

    _stuck_and_last(app)
    # the scope the handler left open is still this worker's executor's when
    # it stops, and anyio says so as the worker ends (as with a scope per run)
    seen = await _run_in_order(app, "leaky stuck last", shutdown_may_raise=True,
                               shutdown_timeout=2)
    # as a `with` around the call ends: anyio's RuntimeError fails that run
    assert seen["leaky"].state == "dead" and "cancel scope" in (seen["leaky"].error or "")
    # and a stop after it still lands where it should, with the next run whole
    _stuck_stopped_and_last_whole(seen)
