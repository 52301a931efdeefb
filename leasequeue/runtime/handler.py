"""Calls one run's handler under its timeout and stop grace and classifies
how it ended. It never writes to Redis (the executor settles) and never
changes a run's phase (the run table does)."""

from __future__ import annotations

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

try:  # the asyncio backend's scope itself (what anyio.CancelScope() makes there,
    # after a backend lookup and a second __init__): 2.4 us a run instead of 4.5.
    # A worker runs on asyncio only (redis.asyncio needs it)
    from anyio._backends._asyncio import CancelScope as _AsyncioScope

    _scope: type[CancelScope] = _AsyncioScope
except ImportError:  # pragma: no cover - another anyio layout: the public class
    _scope = CancelScope

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


async def execute(run: RunRecord, definition: JobDefinition, kwargs: dict[str, Any],
                  threads: anyio.CapacityLimiter) -> Outcome:
    """Run the handler. An async handler runs in a cancel scope the run table
    cancels on a stop; a sync handler runs in a worker thread to the end (it
    keeps its concurrency slot meanwhile), unless shutdown leaves it behind."""
    ctx = run.ctx
    try:
        if definition.is_async:
            with _scope() as scope:
                run.scope = scope
                if run.stop_reason is not None:  # stopped before it started
                    scope.cancel()
                value = await _call(definition.fn, ctx, kwargs)
            run.scope = None
            if scope.cancelled_caught:
                return stopped(run)
        else:
            with _scope() as left:
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
