"""Calls one run's handler under its timeout and stop grace and classifies
how it ended. It never writes to Redis (the executor settles) and never
changes a run's phase (the run table does)."""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio
from anyio import CancelScope
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import codec
from ..errors import (
    BreakerOpen,
    LeaseQueueError,
    PermanentError,
    RateLimited,
    Retry,
    RunStopped,
    TransientError,
)
from ..registry import JobDefinition
from .runs import RunRecord, StopReason
from .scopes import new_scope, task_states

# failures of the infrastructure around the job, retried under their own budget
INFRA_ERRORS: tuple[type[BaseException], ...] = (
    TransientError, ConnectionError, TimeoutError, RedisConnectionError, RedisTimeoutError,
)
MAX_ERROR_TEXT = 4000  # one error with its traceback, as stored with the job


class Ending(StrEnum):
    SUCCEEDED = "succeeded"
    WORK = "work"  # a work failure (exception, Retry, timeout): counts an attempt
    INFRA = "infra"  # an infrastructure failure: refunds the attempt
    DEAD = "dead"  # PermanentError, or a handler that cannot take the payload
    STOPPED = "stopped"  # stopped by the worker: see Outcome.stop
    LEFT = "left"  # still running at the end of shutdown: left behind, nothing written
    HELD = "held"  # a circuit breaker was open (BreakerOpen): back in line, attempt refunded
    RATE_LIMITED = "rate-limited"  # RateLimited: push the keys back, release (no attempt)


# module constants for the hot path (see runs.py: Enum attributes are slow on 3.11)
SUCCEEDED_, WORK_, INFRA_ = Ending.SUCCEEDED, Ending.WORK, Ending.INFRA


@dataclass(frozen=True, slots=True)
class Outcome:
    ending: Ending
    result: bytes = b""
    error: str = ""
    reason: str = ""  # dead reason (permanent, bad-payload); RateLimited: the limit named
    delay: float | None = None  # explicit retry delay (Retry, RateLimited)
    stop: StopReason | None = None
    note: str = ""  # stored with a success (e.g. why the result was not stored)
    exception: BaseException | None = None  # what the handler raised (hooks report it)


SUCCEEDED = Outcome(Ending.SUCCEEDED)


class _CannotTakePayload(Exception):
    """The handler's signature does not accept (ctx, **payload)."""


def _call(fn: Any, ctx: Any, kwargs: dict[str, Any]) -> Any:
    try:
        return fn(ctx, **kwargs)
    except TypeError as exc:
        # raised by the call itself (no frame of the handler in the
        # traceback): the payload does not fit the signature; retrying the
        # same payload cannot help
        tb = exc.__traceback__
        if tb is not None and tb.tb_next is None:
            raise _CannotTakePayload(str(exc)) from exc
        raise


class RunScopes:
    """The cancel scope an executor's async runs are called in: one anyio
    ``CancelScope``, entered before a run and kept entered, run after run,
    until a stop cancels it; then it is exited right where the stopped
    handler returned or raised (``leave``), and the next run enters a new one.

    It is anyio's own scope, entered and exited by anyio's own ``__enter__``
    and ``__exit__``: what a handler does inside (its task groups, shields,
    threads that call ``from_thread.check_cancelled()``) sits below it in
    anyio's tree as below a scope per run. Only a run's stop cancels it, and
    only while that run's handler is being called (``run.scope`` is set for
    exactly that time), so the executor's own steps between runs, inside it
    too, are never cancelled by it. Entering and exiting an anyio scope costs
    about 3 us, a tenth of a worker's instructions per drained job, which
    this pays once per stopped run instead of once per run."""

    __slots__ = ("_cancelling", "_scope", "_state", "_task")

    def __init__(self) -> None:
        self._scope: CancelScope | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0  # the task's cancel requests when the scope was entered
        self._state: Any = None  # anyio's state of the task: its current scope

    def enter(self) -> CancelScope:
        """The entered scope; a new one when the last was left (or none yet),
        or when the task's count of cancel requests moved since it was
        entered (a native ``Task.cancel()`` that a handler swallowed): anyio
        reads that count on enter, to tell its own cancellation from a native
        one on exit, and a scope per run would have read it fresh."""
        scope = self._scope
        if scope is not None:
            task = self._task
            if task is not None and task.cancelling() == self._cancelling:
                return scope
            self.leave()
        task = self._task = asyncio.current_task()
        self._cancelling = task.cancelling() if task is not None else 0
        scope = self._scope = new_scope()
        scope.__enter__()
        self._state = task_states.get(task) if task is not None else None
        return scope

    def check(self) -> None:
        """After a run that was not stopped: when the handler left an anyio
        scope of its own open (an async generator broken out of inside its
        ``move_on_after``, say), the scope is left now, as a ``with`` around
        the call would have been: anyio raises its RuntimeError (the run
        fails with it), and the next run enters a new scope. Without anyio's
        task state (another anyio layout) every run is checked out: a scope
        per run."""
        state = self._state
        if state is None or state.cancel_scope is not self._scope:
            self.leave()

    def leave(self, exc: BaseException | None = None) -> bool:
        """Exit the scope now, as a ``with`` block ending with ``exc`` would:
        True when anyio swallowed ``exc`` (the scope's own cancellation)."""
        scope, self._scope = self._scope, None
        if scope is None:
            return False
        if exc is None:
            return bool(scope.__exit__(None, None, None))
        return bool(scope.__exit__(type(exc), exc, exc.__traceback__))


async def execute(run: RunRecord, definition: JobDefinition, kwargs: dict[str, Any],
                  threads: anyio.CapacityLimiter, scopes: RunScopes) -> Outcome:
    """Run the handler. An async handler runs in the executor's cancel scope
    (``scopes``), which the run table cancels on a stop; a sync handler runs
    in a worker thread to the end (it keeps its concurrency slot meanwhile),
    unless shutdown leaves it behind."""
    ctx = run.ctx
    try:
        if definition.is_async:
            scope = scopes.enter()
            run.scope = scope
            if run.stop_reason is not None:  # stopped before it started
                scope.cancel()
            try:
                value = await _call(definition.fn, ctx, kwargs)
            except BaseException as exc:
                run.scope = None
                if scope.cancel_called:
                    # a stop of this run: the scope is left here, as a `with`
                    # around the call would end (it swallows its own cancellation)
                    if scopes.leave(exc):
                        return stopped(run)
                else:
                    scopes.check()
                raise
            run.scope = None
            if scope.cancel_called:
                # stopped, but the handler returned (the stop came while it
                # was shielded, or it swallowed the cancellation): left before
                # anything else awaits, so nothing after the call is cancelled
                scopes.leave()
            else:
                scopes.check()
        else:
            with new_scope() as left:
                run.thread_scope = left
                value = await anyio.to_thread.run_sync(
                    _call, definition.fn, ctx, kwargs, abandon_on_cancel=True, limiter=threads)
            run.thread_scope = None
            if left.cancelled_caught:
                return Outcome(Ending.LEFT, stop=run.stop_reason)
    except Exception as exc:  # every handler error is classified, none escapes
        return failed(run, exc)
    if value is None:
        return SUCCEEDED
    try:
        return Outcome(Ending.SUCCEEDED, result=codec.encode_result(value))
    except LeaseQueueError as exc:
        note = f"result not stored: {exc}"
        ctx.log.warning("result cannot be stored; the run counts as succeeded", error=str(exc))
        return Outcome(Ending.SUCCEEDED, note=note[:MAX_ERROR_TEXT])


def stopped(run: RunRecord) -> Outcome:
    reason = run.stop_reason or StopReason.TIMEOUT
    if reason is StopReason.TIMEOUT:
        return Outcome(Ending.WORK, error=f"TimeoutError: timed out after {run.timeout}s",
                       stop=reason)
    return Outcome(Ending.STOPPED, error=f"stopped: {reason}", stop=reason)


def failed(run: RunRecord, exc: Exception) -> Outcome:
    if isinstance(exc, _CannotTakePayload):
        return Outcome(Ending.DEAD, reason="bad-payload",
                       error=f"the handler cannot take this payload: {exc}", exception=exc)
    if run.stop_reason is not None and (isinstance(exc, RunStopped)
                                        or run.stop_reason is not StopReason.TIMEOUT):
        # the handler raised because it was told to stop: that is the stop
        return stopped(run)
    if isinstance(exc, RunStopped):  # raise_if_stopping() on a timeout
        return stopped(run)
    if isinstance(exc, BreakerOpen):
        return Outcome(Ending.HELD, error=str(exc), delay=exc.retry_after)
    text = error_text(exc)
    if isinstance(exc, PermanentError):
        return Outcome(Ending.DEAD, error=text, reason=exc.dead_reason, exception=exc)
    if isinstance(exc, Retry):
        return Outcome(Ending.WORK, error=text, delay=exc.delay, exception=exc)
    if isinstance(exc, RateLimited):
        return Outcome(Ending.RATE_LIMITED, error=text, delay=exc.retry_after,
                       reason=exc.limit or "")
    if isinstance(exc, INFRA_ERRORS):
        return Outcome(Ending.INFRA, error=text, exception=exc)
    return Outcome(Ending.WORK, error=text, exception=exc)


def error_text(exc: BaseException) -> str:
    """``Type: message`` on the first line, then the traceback, capped
    (the head and the innermost frames are kept)."""
    head = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(exc)).rstrip()
    text = f"{head}\n\n{trace}"
    if len(text) <= MAX_ERROR_TEXT:
        return text
    keep = MAX_ERROR_TEXT - len(head) - 20
    return f"{head}\n\n...\n{trace[-keep:]}" if keep > 0 else head[:MAX_ERROR_TEXT]
