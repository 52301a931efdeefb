"""One run of one job: call the handler under its timeout and stop grace,
and classify how it ended. It never writes to Redis (executor.py settles)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import anyio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import codec
from ..codec import Envelope
from ..context import Context
from ..errors import LeaseQueueError, PermanentError, Retry, TransientError
from ..models import ClaimedJob
from ..registry import JobDefinition
from ..store.shards import logical

# failures of the infrastructure around the job, retried under their own budget
INFRA_ERRORS: tuple[type[BaseException], ...] = (
    TransientError, ConnectionError, TimeoutError, RedisConnectionError, RedisTimeoutError,
)
MAX_ERROR_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended. ending: succeeded | work | infra | dead | timeout |
    lease-lost | canceled | shutdown."""

    ending: str
    result: bytes = b""
    error: str = ""
    reason: str = ""
    delay: float | None = None  # explicit retry delay (Retry)
    abandoned: bool = False


SUCCEEDED = Outcome("succeeded")


class Run:
    """A leased job being run; the heartbeater and shutdown call stop()."""

    __slots__ = ("_hard_scope", "_scope", "_timed_out", "ctx", "definition", "finished", "job",
                 "kwargs", "started", "timeout_at")

    def __init__(self, job: ClaimedJob, envelope: Envelope, definition: JobDefinition,
                 worker_id: str) -> None:
        self.job = job
        self.kwargs = envelope.kwargs
        self.definition = definition
        self.started = time.monotonic()
        timeout = definition.timeout
        # time.monotonic() is also the clock of anyio's asyncio backend
        self.timeout_at = self.started + timeout if timeout else math.inf
        self._timed_out = False
        self.ctx = Context(
            job_id=job.id, name=job.name, queue=logical(job.queue), attempt=job.attempt,
            token=job.token,
            worker_id=worker_id, correlation_id=envelope.correlation_id,
            request_id=envelope.request_id,
            soft_deadline=self.timeout_at,
        )
        self._scope: anyio.CancelScope | None = None
        self._hard_scope: anyio.CancelScope | None = None
        # set once the handler has returned: a renewal that races the ack is
        # then no reason to stop anything (the ack's fencing check decides)
        self.finished = False

    def stop(self, reason: str) -> None:
        """Ask the run to stop: cancel an async handler now; give a sync handler
        (a thread, which cannot be interrupted) its stop grace, then abandon it."""
        self.ctx._request_stop(reason)
        if self._scope is not None:
            self._scope.cancel()
        if self._hard_scope is not None:
            grace_end = anyio.current_time() + self.definition.stop_grace
            self._hard_scope.deadline = min(self._hard_scope.deadline, grace_end)

    def time_out(self) -> None:
        """Called by the timeout watch once the run is past its timeout."""
        if not self._timed_out:
            self._timed_out = True
            self.stop("timeout")

    async def execute(self, thread_limiter: anyio.CapacityLimiter) -> Outcome:
        d = self.definition
        kwargs = self.kwargs
        try:
            if d.is_async:
                # no deadline on the scope: the timeout watch stops it (cheaper)
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    if self.ctx._stop_reason is not None:  # stopped before it started
                        scope.cancel()
                    value = await d.fn(self.ctx, **kwargs)
                if scope.cancelled_caught:
                    return self._stopped(abandoned=False)
            else:
                with anyio.CancelScope(deadline=self.timeout_at + d.stop_grace) as hard:
                    self._hard_scope = hard
                    if self.ctx.stop_reason is not None:
                        self.stop(self.ctx.stop_reason)
                    value = await anyio.to_thread.run_sync(
                        partial(d.fn, self.ctx, **kwargs), abandon_on_cancel=True,
                        limiter=thread_limiter,
                    )
                if hard.cancelled_caught:
                    return self._stopped(abandoned=True)
        except Exception as exc:  # every handler error is classified, none escapes
            return self._failed(exc)
        if value is None:
            return SUCCEEDED
        try:
            return Outcome("succeeded", result=codec.encode_result(value))
        except LeaseQueueError as exc:
            self.ctx.log.warning("result cannot be stored; the run counts as succeeded",
                                 error=str(exc))
            return Outcome("succeeded")

    def _stopped(self, abandoned: bool) -> Outcome:
        reason = self.ctx.stop_reason or "timeout"
        if reason == "timeout":
            return Outcome("timeout", error=f"timed out after {self.definition.timeout}s",
                           abandoned=abandoned)
        return Outcome(reason, error=f"stopped: {reason}", abandoned=abandoned)

    def _failed(self, exc: Exception) -> Outcome:
        stop = self.ctx.stop_reason
        if stop in ("lease-lost", "canceled", "shutdown"):
            # the handler raised because it was told to stop: that is the stop
            return Outcome(stop, error=f"stopped: {stop}")
        text = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT]
        if isinstance(exc, PermanentError):
            return Outcome("dead", error=text, reason="permanent")
        if isinstance(exc, Retry):
            return Outcome("work", error=text, delay=exc.delay)
        if isinstance(exc, INFRA_ERRORS):
            return Outcome("infra", error=text)
        return Outcome("work", error=text)
