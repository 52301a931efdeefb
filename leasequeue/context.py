"""Context: what a handler knows about its run (ids, attempt, failure counts,
a logger that carries the ids on every line, and whether it should stop).
It reads the run's stop reason from the run table's record; it never
changes it."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .errors import LeaseLost, NoRunState, RunStopped
from .log import Log, get_log
from .runlog import RunLogCapture

if TYPE_CHECKING:
    from .resources import CloseFn, OpenFn, RunResources


class _StopState(Protocol):
    """What a Context reads of its run's record (the run table writes it)."""

    @property
    def stop_reason(self) -> Any: ...

    @property
    def timeout_at(self) -> float: ...  # time.monotonic(); inf = no timeout


class Context:
    """What a handler knows about its run, passed as its first argument:
    ``job_id``, ``name``, ``queue``, ``attempt``, ``token`` (the run's fencing
    token), ``worker_id``, ``correlation_id``, ``request_id``,
    ``work_failures``, ``infra_failures``, ``log`` (a logger that carries the
    ids on every line and feeds the per-run log), and the stop signals
    ``is_stopping()``, ``stop_reason`` and ``raise_if_stopping()``."""

    __slots__ = (
        "_capture", "_capture_caps", "_kit", "_log", "_resources", "_run", "attempt",
        "correlation_id", "infra_failures", "job_id", "name", "queue", "request_id", "token",
        "work_failures", "worker_id",
    )

    def __init__(self, *, job_id: str, name: str, queue: str, attempt: int, token: int,
                 worker_id: str, correlation_id: str, request_id: str,
                 run: _StopState, work_failures: int = 0,
                 infra_failures: int = 0,
                 capture: tuple[int, int] | None = None,
                 kit: Any = None,
                 resources: RunResources | None = None) -> None:
        self.job_id = job_id
        self.name = name
        self.queue = queue
        #: this run's attempt against max_attempts (1 = the first). An
        #: infrastructure failure refunds its attempt, so a job that only ever
        #: meets TransientError sees attempt 1 each time: read infra_failures.
        self.attempt = attempt
        self.token = token
        self.worker_id = worker_id
        self.correlation_id = correlation_id
        self.request_id = request_id
        #: work failures and infrastructure failures of earlier runs
        self.work_failures = work_failures
        self.infra_failures = infra_failures
        self._run = run
        self._log: Log | None = None
        # (lines, bytes) caps of the run-log capture, made on the first
        # ctx.log use: a run that logs nothing costs nothing
        self._capture_caps = capture
        self._capture: RunLogCapture | None = None
        # the worker's RunStateStore (checkpoints, progress, sagas); None
        # outside a worker run
        self._kit = kit
        self._resources = resources

    @property
    def log(self) -> Log:
        """A structured logger with job_id, run (job:token), correlation and request ids.
        What it writes during the run is also kept with the job when the job's
        ``run_logs`` policy says so (see ``captured``)."""
        if self._log is None:
            if self._capture_caps is not None:
                self._capture = RunLogCapture(*self._capture_caps)
            self._log = get_log(
                "job", sink=self._capture, job_id=self.job_id, job=self.name, queue=self.queue,
                run=f"{self.job_id}:{self.token}", attempt=self.attempt,
                worker_id=self.worker_id, correlation_id=self.correlation_id,
                request_id=self.request_id,
            )
        return self._log

    @property
    def captured(self) -> RunLogCapture | None:
        """This run's log capture (None: the job's run_logs policy is "none")."""
        return self._capture

    def is_stopping(self) -> bool:
        """True once the run should wrap up: timeout reached, lease or a limiter
        slot lost, cancel requested, replaced, or the worker shutting down.
        Long loops should check it."""
        return self._run.stop_reason is not None or time.monotonic() >= self._run.timeout_at

    @property
    def stop_reason(self) -> str | None:
        """Why the run should stop (timeout, lease-lost, slot-lost, canceled,
        replaced, shutdown), or None."""
        reason = self._run.stop_reason
        if reason is None and time.monotonic() >= self._run.timeout_at:
            return "timeout"
        return None if reason is None else str(reason)

    def raise_if_stopping(self) -> None:
        """Raise RunStopped (LeaseLost when the lease is gone) once the run
        should stop: a one-line way out of a long loop in a sync handler."""
        reason = self.stop_reason
        if reason == "lease-lost":
            raise LeaseLost(f"job {self.job_id}: the lease of run {self.token} is gone")
        if reason is not None:
            raise RunStopped(reason)

    # -- the resilience kit: what a run leaves for the next attempt ------------

    def _store(self) -> Any:
        if self._kit is None:
            raise NoRunState("checkpoints, progress and sagas need a run of a Worker")
        return self._kit

    async def checkpoints(self) -> dict[str, Any]:
        """The checkpoints this job's runs accepted so far, name -> value (a
        copy). Read from Redis on the first call of the run (one round trip),
        then kept in step with this run's own checkpoint() calls."""
        return dict(await self._store().checkpoints(self._run))

    async def checkpoint(self, name: str, value: Any = None) -> None:
        """Commit a phase: ``name`` (1-100 of A-Z a-z 0-9 _ . : -) -> ``value``
        (anything msgpack encodes, e.g. the SHA of an accepted output). Fenced
        by this run's token: a run that lost its lease gets LeaseLost and
        nothing is written. All of a job's checkpoints together are bounded
        (StateTooLarge over it; the earlier ones stand). Kept with the job
        for its retention, across retries and replays."""
        await self._store().checkpoint(self._run, name, value)

    async def progress(self, fraction: float, note: str = "") -> None:
        """Report progress (0..1, and a note cut at 200 characters), shown by
        get_job, the events stream and the CLI. Cheap to call in a tight loop:
        at most one write per run per second goes to Redis (fenced), and the
        last value always lands (at the latest before the run settles).
        LeaseLost once a write was refused."""
        self._store().progress(self._run, fraction, note)

    def resource(self, kind: str, key: str, *, open: OpenFn | None = None,
                 close: CloseFn | None = None) -> AbstractAsyncContextManager[Any]:
        """``async with ctx.resource("tmpdir", key, open=..., close=...) as value:``
        records the resource in the ledger (kind, key, this run, now), calls
        ``open(key)`` (its return value is ``value``; without ``open`` it is the
        key), and on the way out calls ``close(key)`` (default: the kind's close
        registered with ``app.resource_kind``) and clears the entry. If this
        run dies holding it, the reconcilers close it with the kind's close.
        A key still held by an earlier run that is no longer live is closed
        first (sweep); one held by a live run raises ResourceBusy."""
        if self._resources is None:
            raise RuntimeError("ctx.resource needs a resource kind: register it with "
                               "app.resource_kind(kind, close=...) before the worker starts")
        return self._resources.open(kind, key, open, close)

    def __repr__(self) -> str:
        return f"Context(job_id={self.job_id!r}, name={self.name!r}, attempt={self.attempt})"

    def fields(self) -> dict[str, Any]:
        """The run's ids as log fields (what ``ctx.log`` adds to every line)."""
        return {"job_id": self.job_id, "job": self.name, "queue": self.queue,
                "run": f"{self.job_id}:{self.token}", "attempt": self.attempt,
                "correlation_id": self.correlation_id}
