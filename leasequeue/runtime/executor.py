"""Executors: take claimed runs from the claimer, start them (limiter slots
first, then the start check of the run table), run them, and settle the
outcome in Redis (ack through the acker, fail, or release). One executor
task per unit of concurrency: a handler that will not return keeps its
executor busy, so it keeps counting against ``concurrency``."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import codec
from ..backoff import delay_ms
from ..context import Context
from ..errors import LimitKeyError, MalformedJob, RedisUnavailable, ScriptError
from ..hooks import RETURNED_OK, HookSet, Returned, RunEnd, Settled
from ..log import get_log
from ..registry import JobDefinition, Registry
from ..resources import RunResources
from ..runlog import RunLogCapture, RunLogs
from ..store.keys import QueueKeys
from ..store.scripts import Park, Scripts
from ..store.shards import logical
from ..store.specs import FailReply, ReleaseReply
from .acker import Acker
from .breakers import BreakerGate, verdict
from .dispatch import Closed, Dispatch
from .handler import SUCCEEDED_, Ending, Outcome, RunScopes, execute
from .limits import Full, Limits
from .observe import failed, released_as
from .rates import NotNow, Rates, RateUse, Wait, park_group
from .runs import CLAIMED, LOST, RunRecord, RunTable, StopReason
from .runstate import RunStateStore
from .slots import Slots
from .starter import Starter

WRITE_TRIES = 5
RUN_LOGS_ALL = RunLogs.ALL  # a global: Enum class attributes are slow on Python 3.11
# what a run passes through when no breaker, limit, rate or key applies to it
_PLAIN: tuple[BreakerGate | None, list[RateUse]] = (None, [])
SLOT_WAIT = 1.0  # most a run waits in place for a slot before going back to the queue
# a run that waited longer than this since its claim asks Redis before its
# handler runs (a cancel may have reached it); one that starts sooner is
# marked started in the background while its handler runs
CONFIRM_AFTER = 0.05
# a run starts only while its lease (and slots) stay valid this much longer
# by our own clock; less means the process stalled or renewals failed
MIN_LEASE_SHARE = 1 / 3


@dataclass(frozen=True, slots=True)
class ExecutorParams:
    scripts: Scripts
    registry: Registry
    keys: Callable[[str], QueueKeys]
    table: RunTable
    slots: Slots
    acker: Acker
    starter: Starter
    limits: Limits
    rates: Rates
    worker_id: str
    threads: anyio.CapacityLimiter
    lease_s: float
    hooks: HookSet = field(default_factory=HookSet)  # the App's; inactive: no RunInfo built
    runstate: RunStateStore | None = None  # checkpoints, progress, sagas
    breakers: BreakerGate | None = None  # the jobs' circuit breakers
    # the resource ledger's view of a run (ctx.resource), when the App has kinds
    resources: Callable[[RunRecord], RunResources] | None = None


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a definition and a physical queue decide for every run of them,
    worked out once: most runs pass no breaker, limit, rate or key, and skip
    the admission path whole."""

    definition: JobDefinition
    queue: str  # the logical queue (the context's)
    gated: bool  # a breaker, a concurrency limit or key, or a rate applies
    capture: tuple[int, int] | None  # run-log caps, None: run_logs="none"


class Executor:
    def __init__(self, params: ExecutorParams) -> None:
        self._p = params
        self.draining = False  # set at shutdown: runs not started yet go back at once
        self._log = get_log("executor", worker_id=params.worker_id)
        # (id of the definition, physical queue) -> plan; the plan holds the
        # definition, so its id is not reused while the entry lives
        self._plans: dict[tuple[int, str], _Plan] = {}

    def _plan(self, definition: JobDefinition, queue: str) -> _Plan:
        plan = self._plans.get((id(definition), queue))
        if plan is None:
            gated = (bool(definition.breakers) or definition.concurrency_key is not None
                     or self._p.limits.applies(definition, queue)
                     or self._p.rates.applies(definition, queue))
            capture = (None if definition.run_logs == RunLogs.NONE
                       else (definition.run_log_lines, definition.run_log_bytes))
            plan = self._plans[(id(definition), queue)] = _Plan(
                definition, logical(queue), gated, capture)
        return plan

    async def serve(self, dispatch: Dispatch) -> None:
        # this task's async runs are called in one cancel scope, kept entered
        # from run to run until a stop cancels it (handler.RunScopes): here it
        # is left when the task ends, as a `with` around the loop would be
        scopes = RunScopes()
        try:
            await self._serve(dispatch, scopes)
        except BaseException as exc:
            scopes.leave(exc)
            raise
        scopes.leave()

    async def _serve(self, dispatch: Dispatch, scopes: RunScopes) -> None:
        while True:
            try:
                run = await dispatch.get()
            except Closed:
                return
            try:
                await self._process(run, scopes)
            finally:
                # the run and its context point at each other: cut the cycle so
                # that refcounting frees both now, not a GC pass later (the
                # acker needs only the job; a handler's ctx keeps working)
                run.ctx = None
                # the finishing rate (what the claimer may hold ahead) counts
                # runs whose handler started: one skipped, sent back or
                # released before it started frees its slot but is no sign
                # of work this worker can take (counted, a key at its limit
                # would have a worker claim ahead as fast as it sends runs
                # back)
                self._p.slots.give(finished=run.started_at > 0.0)

    async def _process(self, run: RunRecord, scopes: RunScopes) -> None:
        prepared = await self._prepare(run)
        if prepared is None:
            return
        plan, kwargs = prepared
        definition = plan.definition
        if self.draining:
            await self._not_started(run, "shutdown before start")
            return
        admitted = await self._admit(run, definition, kwargs) if plan.gated else _PLAIN
        if admitted is None:
            return
        gate, uses = admitted
        if not await self._start(run):
            if run.slots:
                await self._p.limits.release(run)
            if gate is not None:
                await gate.done(run, definition, "release")
            await self._not_started(run, "not started")
            return
        if run.info is not None:
            self._p.hooks.before_run(run.info, run)
        outcome: Outcome | None = None
        try:
            outcome = await execute(run, definition, kwargs, self._p.threads, scopes)
        finally:
            self._p.table.returned(run)
            if run.slots:
                await self._p.limits.release(run)  # only now: its thread has returned
            if gate is not None:
                with anyio.CancelScope(shield=True):
                    await gate.done(run, definition,
                                    verdict(outcome) if outcome is not None else "release")
        if run.info is not None:
            self._p.hooks.after_run(run.info, run, RETURNED_OK
                                    if outcome.ending is SUCCEEDED_
                                    else Returned(False, outcome.error, outcome.exception))
        kit = self._p.runstate
        if kit is not None and kit.used_by(run):  # dict lookups: free for runs that did not
            await kit.finish(run)  # its last progress lands before it settles
        await self._settle(run, definition, outcome, uses)

    async def _gate(self, run: RunRecord, definition: JobDefinition,
                    kwargs: dict[str, Any]) -> list[RateUse] | None:
        """Take the run's limiter slots and rate starts: the rates it drew
        from when it may start, None when it was settled here (over a limit
        or rate, bad limit key) and must not start."""
        try:
            key = (None if definition.concurrency_key is None
                   else definition.concurrency_key.render(kwargs))
            uses = (self._p.rates.uses(definition, run.job.queue, kwargs)
                    if self._p.rates.applies(definition, run.job.queue) else [])
        except LimitKeyError as exc:
            await self._bury(run, "bad-limit-key", str(exc))
            return None
        if self._p.limits.applies(definition, run.job.queue):
            # under `enqueue` a run first waits a little for a slot in place:
            # sending it back at once would churn the queue while slots turn
            # over. Not for a per-key slot: runs of one busy key waiting in
            # place would hold this worker's executors from every other key
            wait = (min(SLOT_WAIT, definition.slot_backoff)
                    if definition.on_conflict == "enqueue" and key is None else 0.0)
            full = await self._p.limits.acquire(run, definition, wait, key)
            if full is not None:
                if run.stop_reason is not None:  # canceled or lost while it waited
                    await self._not_started(run, "stopped before start")
                else:
                    await self._on_conflict(run, definition, full)
                return None
        if uses:  # after the slots: a start taken is spent, a slot can be given back
            not_now = await self._p.rates.take(run, uses,
                                               reserve=definition.on_conflict != "skip")
            if not_now is not None:
                if run.slots:
                    await self._p.limits.release(run)
                await self._over_rate(run, definition, not_now, uses)
                return None
        return uses

    async def _admit(self, run: RunRecord, definition: JobDefinition, kwargs: dict[str, Any],
                     ) -> tuple[BreakerGate | None, list[RateUse]] | None:
        """Pass the run's circuit breakers, then take its limiter slots and
        rate starts (_gate): its breaker gate (if it has breakers) and the
        rates it drew from when it may start, None when it must not start
        (it was put back, skipped or ended here)."""
        gate = self._p.breakers if definition.breakers else None
        if gate is not None:
            # before any slot is taken: a run held back costs the limits nothing
            hold = await gate.admit(run, definition)
            if hold is not None:
                await self._release(run, "breaker open", max(1, int(hold * 1000)))
                return None
        uses = await self._gate(run, definition, kwargs)
        if uses is None:
            if gate is not None:
                await gate.done(run, definition, "release")  # its probe turn, if it had one
            return None
        return gate, uses

    async def _start(self, run: RunRecord) -> bool:
        """Whether the run may start now; marks it started in Redis."""
        if self.draining or run.stop_reason is not None or run.phase is not CLAIMED:
            return False
        if run.start_known:  # marked started by the claim: the hot path
            if not self._p.table.start(run, MIN_LEASE_SHARE):
                return False
            if run.timeout is not None:
                run.timeout_at = run.started_at + run.timeout
            return True
        # a run asks Redis first when it waited long (a cancel may have reached
        # it) or when its job already has an infrastructure failure: a job that
        # kills its process at once would otherwise die before its background
        # mark lands, each time, and be charged to the infra budget, not attempts
        confirm = not run.start_known and (
            run.job.infra_failures > 0 or time.monotonic() - run.claimed_at > CONFIRM_AFTER)
        if confirm and not await self._p.starter.confirm(run, self._p.lease_s * MIN_LEASE_SHARE):
            return False
        if not self._p.table.start(run, MIN_LEASE_SHARE):
            if run.phase is CLAIMED and run.stop_reason is None:
                run.ctx.log.warning("not started: its lease may have lapsed (stall or failed "
                                    "renewals); it goes back to the queue")
            return False
        if run.timeout is not None:
            run.timeout_at = run.started_at + run.timeout
        if not run.start_known:
            self._p.starter.mark(run)
        return True

    async def _prepare(self, run: RunRecord) -> tuple[_Plan, dict[str, Any]] | None:
        """The definition and keyword arguments of a claimed run, or None when
        it cannot run (unknown name and bad payload are dead-lettered here)."""
        job = run.job
        definition = self._p.registry.find(job.name)
        if definition is None:
            await self._bury(run, "unknown-job",
                             f"no handler is registered for job name {job.name!r}")
            return None
        try:
            envelope = codec.decode_envelope(job.payload, job.id)
        except MalformedJob as exc:
            await self._bury(run, "bad-payload", str(exc))
            return None
        plan = self._plan(definition, job.queue)
        run.is_sync = not definition.is_async
        run.stop_grace = definition.stop_grace
        run.timeout = definition.timeout
        p = self._p
        run.ctx = Context(
            job_id=job.id, name=job.name, queue=plan.queue, attempt=run.attempt,
            token=job.token, worker_id=p.worker_id,
            correlation_id=envelope.correlation_id, request_id=envelope.request_id,
            run=run, work_failures=job.work_failures,
            infra_failures=job.infra_failures, capture=plan.capture, kit=p.runstate,
            resources=p.resources(run) if p.resources is not None else None,
        )
        if self._p.hooks.active:
            run.info = HookSet.run_info(run, self._p.worker_id, run.ctx.queue,
                                        envelope.correlation_id, envelope.request_id,
                                        envelope.headers or {})
        return plan, envelope.kwargs

    # -- settling --------------------------------------------------------------

    async def _settle(self, run: RunRecord, d: JobDefinition, outcome: Outcome,
                      uses: list[RateUse]) -> None:
        ending, stop = outcome.ending, outcome.stop
        if ending is Ending.LEFT:
            run.ctx.log.warning("still running at the end of shutdown: left behind; its lease "
                                "is left to lapse (the job runs again elsewhere)")
            self._p.table.lose(run, StopReason.SHUTDOWN)
            self._ended(run, Settled(RunEnd.LOST, error="left behind at shutdown"))
            return
        if run.phase is LOST:
            run.ctx.log.warning("lease lost; result discarded")
            self._ended(run, Settled(RunEnd.LOST, error="lease lost"))
            return
        if ending is SUCCEEDED_:
            self._ack(run, d, "succeeded", outcome.result, outcome.note)
        elif ending is Ending.STOPPED and stop in (StopReason.CANCELED, StopReason.REPLACED):
            self._ack(run, d, "canceled")
        elif ending is Ending.STOPPED and stop is StopReason.SHUTDOWN:
            await self._release(run, "shutdown")
        elif ending is Ending.HELD:  # BreakerOpen from a breaker used in the handler
            await self._release(run, "breaker open", max(1, int((outcome.delay or 0) * 1000)))
        elif ending is Ending.RATE_LIMITED:
            await self._pushed_back(run, outcome, uses)
        elif ending is Ending.STOPPED:  # a limiter slot lost: an infrastructure failure
            await self._fail(run, d, Outcome(Ending.INFRA, error=f"stopped: {stop}"))
        else:
            await self._fail(run, d, outcome)

    def _ack(self, run: RunRecord, d: JobDefinition, outcome: str, result: bytes = b"",
             note: str = "") -> None:
        if self._p.table.settling(run):
            if run.info is not None:
                run.info.pending = outcome  # reported once the acker's write lands
            # a success keeps its run's log lines only under run_logs="all"
            self._p.acker.submit(run, outcome, d.retention_ms, result, note,
                                 _run_logs(run, d, failed=False)
                                 if d.run_logs == RUN_LOGS_ALL else "")
        else:
            self._ended(run, Settled(RunEnd.LOST, error="lease lost"))

    async def _on_conflict(self, run: RunRecord, d: JobDefinition, full: Full) -> None:
        """No slot free: skip (finish as skipped) or back to the queue with the
        attempt refunded (enqueue; and replace, which gets here when a queue
        limit is full or the limiter is down): after slot_backoff, or, for a
        run registered as a waiter of its key, after its fallback delay (a
        release of the key wakes it before)."""
        if d.on_conflict == "skip":
            run.ctx.log.info("skipped: no slot free", max_concurrent=d.max_concurrent,
                             queue_limit=self._p.limits.queue_limits.get(run.ctx.queue))
            self._ack(run, d, "skipped")
        elif full.waiting_s > 0:
            await self._release(run, "slot busy: waiting for a wake",
                                int(full.waiting_s * 1000))
        else:
            await self._release(run, "slot busy", int(d.slot_backoff * 1000))

    async def _over_rate(self, run: RunRecord, d: JobDefinition, not_now: NotNow,
                         uses: list[RateUse]) -> None:
        """Over a rate: back to the queue, scheduled to the instant its start
        was reserved for, no attempt spent (it never started); ``skip`` ends
        it skipped; a limiter that did not answer: back after slot_backoff.
        The release parks the key's group when it is the job's (claims then
        schedule that key's queued jobs one interval apart: lua/claim.lua)."""
        if not_now.why is Wait.DENIED:
            run.ctx.log.info("skipped: over its rate", limit=not_now.use.label)
            self._ack(run, d, "skipped")
            return
        if not_now.why is Wait.UNAVAILABLE:
            await self._release(run, "rate limiter unavailable", int(d.slot_backoff * 1000))
            return
        # rounded up, +1 ms: due no earlier than its reservation (a run that
        # came back early would only be sent back again)
        use = not_now.use
        interval = use.rate.interval_us
        park = Park(use.label if use.label == park_group(uses) else "",
                    round(not_now.wait_s * 1_000_000) + interval, interval)
        await self._release(run, f"rate limited: {use.label}",
                            math.ceil(not_now.wait_s * 1000) + 1, park)

    async def _pushed_back(self, run: RunRecord, outcome: Outcome, uses: list[RateUse]) -> None:
        """The handler raised RateLimited: push its keys back for every worker,
        and release the run to its reserved turn with its attempt refunded."""
        retry_after = max(0.0, outcome.delay or 0.0)
        wait = (await self._p.rates.push_back(run, uses, retry_after, outcome.reason or None)
                if uses else None)
        if not uses:
            run.ctx.log.warning("RateLimited raised by a job without a rate limit: it is only "
                                "retried after retry_after", retry_after=retry_after)
        delay = wait if wait is not None else retry_after
        # a reservation to redeem: its park group is cleared (no claim parks it)
        await self._release(run, "rate limited by the handler", math.ceil(delay * 1000) + 1,
                            Park("", 0, 0) if wait is not None else None)

    async def _not_started(self, run: RunRecord, why: str) -> None:
        """A run that must not start: ended canceled when that was asked, gone
        when its lease was lost, else back to the queue (no attempt spent)."""
        if run.phase is not CLAIMED:
            self._ended(run, Settled(RunEnd.LOST, error="lease lost"))
            return  # lost: nothing to write
        if run.stop_reason is StopReason.CANCELED:
            definition = self._p.registry.find(run.job.name)
            if definition is not None:
                self._ack(run, definition, "canceled")
                return
        await self._release(run, why)

    async def _fail(self, run: RunRecord, d: JobDefinition, outcome: Outcome) -> None:
        job = run.job
        if outcome.ending is Ending.INFRA:
            kind, delay = "infra", delay_ms(d.infra_backoff, job.infra_failures + 1)
        elif outcome.ending is Ending.DEAD:
            kind, delay = "dead", 0
        else:  # work failure, explicit retry, or our own timeout
            kind = "work"
            retry = outcome.delay
            delay = (delay_ms(lambda _: retry or 0.0, run.attempt) if retry is not None
                     else delay_ms(d.backoff, run.attempt))
        max_attempts = job.max_attempts or d.max_attempts
        max_infra = job.max_infra or d.max_infra_attempts
        if not self._p.table.settling(run):
            self._ended(run, Settled(RunEnd.LOST, error="lease lost"))
            return
        logs = _run_logs(run, d, failed=True)
        result = await self._write(run, "fail", lambda: self._p.scripts.fail(
            self._p.keys(job.queue), job.id, job.token, kind, outcome.reason, outcome.error,
            delay, max_attempts, max_infra, logs))
        self._p.table.settled(run, result is not None and result.code is not FailReply.REFUSED)
        if run.info is not None:
            self._ended(run, failed(result.code if result is not None else None, kind,
                                    outcome))
        if result is None:
            return
        summary = outcome.error.split("\n", 1)[0]
        log = run.ctx.log
        if result.code is FailReply.REFUSED:
            log.warning("failure not recorded: lease lost", error=summary)
        elif result.code is FailReply.DEAD:
            log.warning("job is dead", error=summary, kind=kind, reason=result.state,
                        traceback=outcome.error)
        else:
            log.warning("job failed; will retry", error=summary, kind=kind, retry_in_ms=delay,
                        state=result.state, traceback=outcome.error)

    async def _release(self, run: RunRecord, why: str, delay: int = 0,
                       park: Park | None = None) -> None:
        job = run.job
        if not self._p.table.settling(run):
            return
        answers = await self._write(run, "release", lambda: self._p.scripts.release(
            self._p.keys(job.queue), [(job.id, job.token)], delay, why, park))
        released = answers is not None and answers[0] is not ReleaseReply.REFUSED
        self._p.table.settled(run, released)
        if run.info is not None:
            self._ended(run, released_as(answers[0] if answers is not None else None, why))
        if released and run.ctx is not None:
            # a run waiting for its rate is routine (one per deferred job): debug
            level = run.ctx.log.debug if why.startswith("rate limited:") else run.ctx.log.info
            level("returned to the queue", why=why, retry_in_ms=delay)

    async def _bury(self, run: RunRecord, reason: str, error: str) -> None:
        job = run.job
        if not self._p.table.settling(run):
            return
        result = await self._write(run, "fail", lambda: self._p.scripts.fail(
            self._p.keys(job.queue), job.id, job.token, "dead", reason, error, 0,
            job.max_attempts or 1, job.max_infra or 1))
        accepted = result is not None and result.code is not FailReply.REFUSED
        self._p.table.settled(run, accepted)
        self._log.warning("dead-lettered before running", job_id=job.id, job=job.name,
                          queue=job.queue, reason=reason, error=error)
        if self._p.hooks.active:
            if run.info is None:
                run.info = HookSet.run_info(run, self._p.worker_id, logical(job.queue), "", "",
                                            {})
            self._ended(run, Settled(RunEnd.DEAD if accepted else RunEnd.LOST, kind="dead",
                                     reason=reason, error=error))

    def _ended(self, run: RunRecord, settled: Settled) -> None:
        """Tell the hooks how a run was settled (a no-op without run hooks)."""
        if run.info is not None:
            self._p.hooks.settled(run.info, settled)

    async def _write(self, run: RunRecord, what: str,
                     call: Callable[[], Awaitable[Any]]) -> Any:
        """Run one settling write, retrying a Redis outage a few times. When it
        never lands the lease lapses and the reaper hands the job back."""
        for attempt in range(WRITE_TRIES):
            try:
                return await call()
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning(f"{what} failed", job_id=run.job.id, error=str(exc),
                                  attempt=attempt + 1)
                await anyio.sleep(0.1 * 2 ** attempt)
        return None


def _run_logs(run: RunRecord, d: JobDefinition, failed: bool) -> str:
    """The run's captured ctx.log lines to store with its settling write, by
    the job's run_logs policy ('' = nothing to store: the common case costs
    nothing)."""
    capture: RunLogCapture | None = run.ctx.captured if run.ctx is not None else None
    if capture is None or capture.empty:
        return ""
    if d.run_logs == RunLogs.ALL or (failed and d.run_logs == RunLogs.ERRORS):
        return capture.text()
    return ""
