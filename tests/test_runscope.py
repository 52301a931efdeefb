"""RunScope (leasequeue/runtime/runscope.py): an async run's cancel scope
behaves as anyio's CancelScope does for the executor, on asyncio's loop and
on uvloop's: its cancel stops the handler at its await, again at the next if
the handler swallows one, holds off while an anyio scope inside it is
shielded, swallows only its own cancellation, and leaves the task's count of
pending cancellations as it found it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from leasequeue.runtime import handler, runscope
from leasequeue.runtime.runscope import RunScope
from tests.helpers import eventually

LOOPS = ["asyncio", "uvloop"]


def run_on(loop: str, main: Callable[[], Awaitable[Any]]) -> Any:
    options = {"use_uvloop": True} if loop == "uvloop" else {}
    return anyio.run(main, backend="asyncio", backend_options=options)


def test_the_executor_uses_it() -> None:
    """anyio's layout here is the one RunScope reads (else the executor would
    fall back to anyio's own scope), and an async run's scope is one."""
    assert runscope.AVAILABLE

    async def main() -> None:
        seen: list[object] = []

        async def fn(ctx: object) -> None:
            seen.append(run.scope)

        run: Any = SimpleNamespace(ctx=None, scope=None, stop_reason=None)
        definition: Any = SimpleNamespace(is_async=True, fn=fn)
        outcome = await handler.execute(run, definition, {}, anyio.CapacityLimiter(1),
                                        runscope.host())
        assert outcome is handler.SUCCEEDED, outcome
        assert isinstance(seen[0], RunScope) and run.scope is None

    run_on("asyncio", main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancel_from_another_task_stops_the_handler_at_its_await(loop: str) -> None:
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []

        async def run() -> None:
            task = asyncio.current_task()
            assert task is not None
            with scope:
                seen.append("started")
                await anyio.sleep(30)
                seen.append("not reached")
            seen.append(f"after, cancelling={task.cancelling()}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: seen == ["started"])
            scope.cancel()
        assert seen == ["started", "after, cancelling=0"]
        assert scope.cancel_called and scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_handler_that_swallows_the_cancel_is_cancelled_at_its_next_await(loop: str) -> None:
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []

        async def run() -> None:
            with scope:
                try:
                    seen.append("started")
                    await anyio.sleep(30)
                except asyncio.CancelledError:
                    seen.append("swallowed")
                await asyncio.sleep(3)  # cancelled again here
                seen.append("not reached")
            seen.append("after")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: seen == ["started"])
            scope.cancel()
        assert seen == ["started", "swallowed", "after"]
        assert scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_shielded_anyio_scope_inside_the_run_finishes_before_the_cancel_lands(
        loop: str) -> None:
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []
        release = anyio.Event()

        async def run() -> None:
            with scope:
                with anyio.CancelScope(shield=True):
                    seen.append("shielded")
                    await release.wait()  # the cancel comes meanwhile: held off
                    await anyio.sleep(0.01)
                    seen.append("shield done")
                await anyio.sleep(30)  # lands here
                seen.append("not reached")
            seen.append("after")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: seen == ["shielded"])
            scope.cancel()
            for _ in range(20):  # turns of the loop with the cancel pending
                await anyio.lowlevel.checkpoint()
            assert seen == ["shielded"]
            release.set()
        assert seen == ["shielded", "shield done", "after"]
        assert scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_outer_anyio_cancellation_goes_on_up_through_it(loop: str) -> None:
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                with scope:
                    seen.append("started")
                    await anyio.sleep(30)
                seen.append("not reached: the outer cancellation is not the run's")

            tg.start_soon(run)
            await eventually(lambda: seen == ["started"])
            tg.cancel_scope.cancel()
        assert seen == ["started"]
        assert not scope.cancel_called and not scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_outer_cancellation_in_the_same_turn_as_the_runs_goes_on_up(loop: str) -> None:
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []
        outer = anyio.CancelScope()

        async def run() -> None:
            with outer:
                with scope:
                    seen.append("started")
                    await anyio.sleep(30)
                seen.append("not reached: the outer scope's cancellation went on up")
            seen.append("outer caught it")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: seen == ["started"])
            scope.cancel()
            outer.cancel()
        assert seen == ["started", "outer caught it"]
        assert outer.cancelled_caught and not scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_handlers_own_timeouts_are_its_own(loop: str) -> None:
    """move_on_after and asyncio.timeout inside the run work as they would
    without it; the run's cancel inside them reaches the run's scope."""
    async def main() -> None:
        scope = RunScope()
        seen: list[str] = []

        async def run() -> None:
            with scope:
                with anyio.move_on_after(0.01) as inner:
                    await anyio.sleep(30)
                seen.append(f"moved on: {inner.cancelled_caught}")
                try:
                    async with asyncio.timeout(0.01):
                        await asyncio.sleep(30)
                except TimeoutError:
                    seen.append("timed out")
                seen.append("waiting")
                with anyio.move_on_after(30):
                    async with asyncio.timeout(30):
                        await anyio.sleep(30)
                seen.append("not reached")
            seen.append("after")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: "waiting" in seen)
            scope.cancel()
        assert seen == ["moved on: True", "timed out", "waiting", "after"]
        assert scope.cancelled_caught

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancel_before_the_first_await_lands_on_it(loop: str) -> None:
    async def main() -> None:
        seen: list[str] = []

        async def run() -> None:
            task = asyncio.current_task()
            assert task is not None
            with RunScope() as scope:
                scope.cancel()  # from the run's own task, before it awaits
                seen.append("still running")
                await anyio.sleep(30)
                seen.append("not reached")
            assert scope.cancelled_caught and task.cancelling() == 0
            seen.append("after")
            await anyio.lowlevel.checkpoint()  # the task is not cancelled any more

        await run()
        assert seen == ["still running", "after"]

    run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_run_that_ends_before_the_cancel_lands_is_not_caught(loop: str) -> None:
    async def main() -> None:
        with RunScope() as scope:
            scope.cancel()  # its own task: it would land on the next await
        assert scope.cancel_called and not scope.cancelled_caught
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await anyio.sleep(0.01)  # nothing lands after the scope
        scope.cancel()  # a no-op once exited

    run_on(loop, main)
