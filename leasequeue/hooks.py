"""Hooks: code of yours called around enqueue and around each run (error
reporters, metrics, tracing). A hook that raises is logged and skipped; it
never changes what happens to a job. Prometheus and OpenTelemetry support
(leasequeue.metrics, leasequeue.tracing) are hooks themselves.

    class Reporter(lq.Hooks):
        def on_dead(self, run: lq.RunInfo, settled: lq.Settled) -> None:
            sentry_sdk.capture_exception(settled.exception)

    app.add_hook(Reporter())

Every method is called synchronously on the worker's (or producer's) event
loop: keep it short, hand slow work to a thread or queue of your own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .log import get_log

if TYPE_CHECKING:
    from .models import EnqueuedJob, ReapOutcome
    from .runtime.runs import RunRecord


class RunEnd(StrEnum):
    """How a claimed run was settled in Redis."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"  # failed, to be tried again (Settled.kind: work | infra)
    DEAD = "dead"  # dead-lettered (Settled.reason says why)
    CANCELED = "canceled"
    SKIPPED = "skipped"  # on_conflict="skip" found no slot
    RELEASED = "released"  # back to the queue, no attempt spent (shutdown, slot busy)
    LOST = "lost"  # lease lost (or the write never landed): nothing recorded by this run


@dataclass(slots=True)
class EnqueueInfo:
    """One job about to be enqueued. ``headers`` is carried in the job's
    payload envelope to the run (``RunInfo.headers``): before_enqueue may add
    string entries (a trace context, a tenant id)."""

    name: str
    queue: str
    job_id: str
    correlation_id: str
    request_id: str
    delay: float
    headers: dict[str, str] = field(default_factory=dict)
    #: a scratch space for hooks between before_enqueue and after_enqueue
    #: (use a key of your own, e.g. the hook itself)
    state: dict[Any, Any] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class RunInfo:
    """One run of a job as hooks see it, from before_run (or its settling,
    for a run that never started) to on_settled."""

    job_id: str
    name: str
    queue: str  # the logical queue
    attempt: int
    token: int
    worker_id: str
    correlation_id: str
    request_id: str
    enqueued_ms: int  # server clock
    first_run: bool  # no earlier failure: wait_seconds is enqueue -> start
    headers: dict[str, str]
    started: bool = False
    #: enqueue -> start of a first run, in seconds (server clock at the claim,
    #: plus this worker's time from claim to start); None for later runs
    wait_seconds: float | None = None
    run_seconds: float | None = None  # the handler's wall time, once it returned
    #: a scratch space for hooks between before_run and on_settled (use a key
    #: of your own, e.g. the hook itself)
    state: dict[Any, Any] = field(default_factory=dict)
    pending: str = ""  # the ack outcome waiting for its write (the executor's)


@dataclass(frozen=True, slots=True)
class Returned:
    """How the handler returned (after_run), before anything is written."""

    ok: bool
    error: str = ""
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Settled:
    """What was written for a run (on_settled, on_retry, on_dead)."""

    end: RunEnd
    kind: str = ""  # retried / dead: work | infra | dead
    reason: str = ""  # dead: permanent, max-attempts, bad-payload, unknown-job...
    error: str = ""
    exception: BaseException | None = None  # the handler's, when it raised


# the common answers, built once: a frozen dataclass costs about 2 us to build
# (object.__setattr__ per field), which the hot path of every run would pay
RETURNED_OK = Returned(True)
SETTLED: dict[str, Settled] = {end.value: Settled(end) for end in RunEnd}


class Hooks:
    """Subclass and override what you need; every method is a no-op here and
    one left alone costs nothing (it is not called)."""

    def before_enqueue(self, job: EnqueueInfo) -> None:
        """Before the job is encoded and written (in the producer's process)."""

    def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
        """After the write; ``result`` is None when the enqueue raised."""

    def before_run(self, run: RunInfo) -> None:
        """The handler is about to start, in the task (context) it runs in."""

    def after_run(self, run: RunInfo, returned: Returned) -> None:
        """The handler returned or raised, in the same task as before_run;
        nothing is written yet."""

    def on_settled(self, run: RunInfo, settled: Settled) -> None:
        """Every run this worker settled, started or not (a skip, a release,
        a job buried before it ran), once Redis has answered."""

    def on_retry(self, run: RunInfo, settled: Settled) -> None:
        """A run failed and its job will be tried again (after on_settled)."""

    def on_dead(self, run: RunInfo, settled: Settled) -> None:
        """A job was dead-lettered by this run (after on_settled)."""

    def on_reaped(self, queue: str, outcome: ReapOutcome) -> None:
        """The reaper handed expired leases back (physical queue)."""


_METHODS = ("before_enqueue", "after_enqueue", "before_run", "after_run", "on_settled",
            "on_retry", "on_dead", "on_reaped")


class HookSet:
    """The hooks of one App, each method called in the order added, each
    call guarded: an exception is logged (hook, method, job) and the rest go on."""

    def __init__(self) -> None:
        self._hooks: list[Hooks] = []
        self._by_method: dict[str, list[Callable[..., None]]] = {m: [] for m in _METHODS}
        #: any run hook at all: the executor builds RunInfo only then
        self.active = False
        #: any hook with before_enqueue or after_enqueue: enqueue builds
        #: EnqueueInfo only then (an attribute: read on every enqueue)
        self.wants_enqueue = False
        self.errors = 0  # hook calls that raised
        self._log = get_log("hooks")

    def add(self, hook: Hooks) -> None:
        if not isinstance(hook, Hooks):
            raise ConfigError(f"a hook must be a leasequeue.Hooks instance, not "
                              f"{type(hook).__name__}")
        self._hooks.append(hook)
        for method in _METHODS:
            if getattr(type(hook), method) is not getattr(Hooks, method):
                self._by_method[method].append(getattr(hook, method))
        self.active = True
        self.wants_enqueue = bool(self._by_method["before_enqueue"]
                                  or self._by_method["after_enqueue"])

    def __len__(self) -> int:
        return len(self._hooks)

    def __iter__(self) -> Iterator[Hooks]:
        return iter(list(self._hooks))

    def wants(self, method: str) -> bool:
        return bool(self._by_method[method])

    def _call(self, method: str, *args: Any) -> None:
        for fn in self._by_method[method]:
            try:
                fn(*args)
            except Exception as exc:  # a hook never changes what happens to a job
                self.errors += 1
                job = args[0]
                self._log.error("hook failed; ignored", exc_info=True,
                                hook=type(getattr(fn, "__self__", fn)).__name__, method=method,
                                job_id=getattr(job, "job_id", None), error=repr(exc))

    # -- producer side -------------------------------------------------------------

    def before_enqueue(self, job: EnqueueInfo) -> None:
        self._call("before_enqueue", job)

    def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
        self._call("after_enqueue", job, result)

    # -- worker side ---------------------------------------------------------------

    @staticmethod
    def run_info(run: RunRecord, worker_id: str, logical_queue: str, correlation_id: str,
                 request_id: str, headers: dict[str, str]) -> RunInfo:
        job = run.job
        first = job.work_failures == 0 and job.infra_failures == 0 and run.attempt == 1
        return RunInfo(job.id, job.name, logical_queue, run.attempt, job.token, worker_id,
                       correlation_id, request_id, job.enqueued_ms, first, headers)

    def before_run(self, info: RunInfo, run: RunRecord) -> None:
        info.started = True
        if info.first_run and run.job.claimed_ms:
            # the claim's server instant, plus our own time from claim to start
            waited_ms = run.job.claimed_ms - info.enqueued_ms
            info.wait_seconds = max(0.0, waited_ms / 1000 + (run.started_at - run.claimed_at))
        self._call("before_run", info)

    def after_run(self, info: RunInfo, run: RunRecord, returned: Returned) -> None:
        info.run_seconds = time.monotonic() - run.started_at
        self._call("after_run", info, returned)

    def settled(self, info: RunInfo, settled: Settled) -> None:
        self._call("on_settled", info, settled)
        if settled.end is RunEnd.RETRIED:
            self._call("on_retry", info, settled)
        elif settled.end is RunEnd.DEAD:
            self._call("on_dead", info, settled)

    def reaped(self, queue: str, outcome: ReapOutcome) -> None:
        self._call("on_reaped", queue, outcome)
