"""Executors: take claimed jobs from the claimer, run them, and settle the
outcome in Redis (ack through the acker, fail, or release). Bounded by the
worker's slots; one executor task per slot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .. import codec
from ..backoff import delay_ms
from ..errors import MalformedJob, RedisUnavailable, ScriptError
from ..log import get_log
from ..models import ClaimedJob
from ..registry import Registry
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from .acker import Acker
from .dispatch import Closed, Dispatch
from .handler import Outcome, Run
from .leases import LeaseTable
from .limits import Limits
from .slots import Slots

WRITE_TRIES = 5
SLOT_WAIT = 1.0  # most a run waits in place for a slot before going back to the queue


class Executor:
    def __init__(self, scripts: Scripts, registry: Registry, keys: Callable[[str], QueueKeys],
                 table: LeaseTable, slots: Slots, acker: Acker, worker_id: str,
                 thread_limiter: anyio.CapacityLimiter, limits: Limits) -> None:
        self._scripts = scripts
        self._registry = registry
        self._keys = keys
        self._table = table
        self._slots = slots
        self._acker = acker
        self._worker_id = worker_id
        self._threads = thread_limiter
        self._limits = limits
        self.running: set[Run] = set()
        self.draining = False  # set at shutdown: jobs not started yet go back at once
        self._log = get_log("executor", worker_id=worker_id)

    async def serve(self, dispatch: Dispatch) -> None:
        while True:
            try:
                job = await dispatch.get()
            except Closed:
                return
            try:
                await self._process(job)
            finally:
                self._slots.give()

    async def _process(self, job: ClaimedJob) -> None:
        run = await self._prepare(job)
        if run is None:
            self._table.remove(job)
            return
        if self.draining:
            await self._release(run, "shutdown before start")
            return
        slots: list[str] | None = None
        if self._limits.applies(run):
            d = run.definition
            # under `enqueue` a run first waits a little for a slot in place:
            # sending it back at once would churn the queue while slots turn over
            wait = min(SLOT_WAIT, d.slot_backoff) if d.on_conflict == "enqueue" else 0.0
            slots = await self._limits.acquire(run, wait)
            if slots is None:
                await self._on_conflict(run)
                return
            if self.draining:  # shutdown began while it waited for a slot
                await self._give_back(run, slots)
                await self._release(run, "shutdown before start")
                return
        self.running.add(run)
        try:
            outcome = await run.execute(self._threads)
        finally:
            run.finished = True
            self.running.discard(run)
            if slots:
                await self._give_back(run, slots)
        await self._settle(run, outcome)

    async def _give_back(self, run: Run, slots: list[str]) -> None:
        """Give limiter slots back even when cancelled: shielded, bounded."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self._limits.release(run, slots)

    async def _on_conflict(self, run: Run) -> None:
        """No slot free: skip (finish as skipped) or back to the queue after
        slot_backoff with the attempt refunded (enqueue; and replace, which
        gets here when a queue limit is full or the limiter is down)."""
        d = run.definition
        if d.on_conflict == "skip":
            run.finished = True
            run.ctx.log.info("skipped: no slot free", max_concurrent=d.max_concurrent,
                             queue_limit=self._limits.queue_limits.get(run.ctx.queue))
            self._acker.submit(run, "skipped", b"")
        else:
            await self._release(run, "slot busy", int(d.slot_backoff * 1000))

    async def _prepare(self, job: ClaimedJob) -> Run | None:
        """The run for a claimed job, or None when it cannot or must not start
        (unknown name and bad payload are dead-lettered here)."""
        definition = self._registry.find(job.name)
        if definition is None:
            await self._bury(job, "unknown-job",
                             f"no handler is registered for job name {job.name!r}")
            return None
        try:
            envelope = codec.decode_envelope(job.payload, job.id)
        except MalformedJob as exc:
            await self._bury(job, "bad-payload", str(exc))
            return None
        run = Run(job, envelope, definition, self._worker_id)
        if not self._table.started(run):
            self._log.info("not started: its lease was lost while it waited", job_id=job.id)
            return None
        return run

    async def _bury(self, job: ClaimedJob, reason: str, error: str) -> None:
        # kind "dead" checks no budget; any positive one will do
        await self._write(job, "fail", lambda: self._scripts.fail(
            self._keys(job.queue), job.id, job.token, "dead", reason, error, 0,
            max(job.max_attempts, 1), max(job.max_infra, 1)))
        self._log.warning("dead-lettered before running", job_id=job.id, job=job.name,
                          queue=job.queue, reason=reason, error=error)

    async def _settle(self, run: Run, outcome: Outcome) -> None:
        ending = outcome.ending
        if outcome.abandoned:
            run.ctx.log.warning("handler did not stop within its stop grace; abandoned",
                                grace=run.definition.stop_grace, reason=ending)
        if ending == "succeeded":
            self._acker.submit(run, "succeeded", outcome.result)
        elif ending == "canceled":
            self._acker.submit(run, "canceled", b"")
        elif ending == "lease-lost":
            self._table.remove(run.job)
            run.ctx.log.warning("lease lost; result discarded")
        elif ending == "shutdown":
            await self._release(run, "shutdown")
        else:
            await self._fail(run, outcome)

    async def _fail(self, run: Run, outcome: Outcome) -> None:
        job, d = run.job, run.definition
        if outcome.ending == "infra":
            kind, delay = "infra", delay_ms(d.infra_backoff, job.infra_failures + 1)
        elif outcome.ending == "dead":
            kind, delay = "dead", 0
        else:  # work failure, explicit retry, or our own timeout
            kind = "work"
            delay = (delay_ms(lambda _: outcome.delay or 0.0, job.attempt)
                     if outcome.delay is not None else delay_ms(d.backoff, job.attempt))
        result = await self._write(job, "fail", lambda: self._scripts.fail(
            self._keys(job.queue), job.id, job.token, kind, outcome.reason, outcome.error, delay,
            job.max_attempts or d.max_attempts, job.max_infra or d.max_infra_attempts))
        self._table.remove(job)
        if result is None:
            return
        if result.code == 0:
            run.ctx.log.warning("failure not recorded: lease lost", error=outcome.error)
        elif result.code == 2:
            run.ctx.log.warning("job is dead", error=outcome.error, kind=kind,
                                reason=result.state)
        else:
            run.ctx.log.warning("job failed; will retry", error=outcome.error, kind=kind,
                                retry_in_ms=delay, state=result.state)

    async def _release(self, run: Run, why: str, delay_ms: int = 0) -> None:
        job = run.job
        answers = await self._write(job, "release", lambda: self._scripts.release(
            self._keys(job.queue), [(job.id, job.token)], delay_ms, why))
        self._table.remove(job)
        if answers == [1]:
            run.ctx.log.info("returned to the queue", why=why, retry_in_ms=delay_ms)

    async def _write(self, job: ClaimedJob, what: str,
                     call: Callable[[], Awaitable[Any]]) -> Any:
        """Run one settling write, retrying a Redis outage a few times. When it
        never lands the lease lapses and the reaper hands the job back."""
        for attempt in range(WRITE_TRIES):
            try:
                return await call()
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning(f"{what} failed", job_id=job.id, error=str(exc),
                                  attempt=attempt + 1)
                await anyio.sleep(0.1 * 2 ** attempt)
        return None
