"""Renews every held lease in one script call per queue, about every lease/3.
A lease reported lost, or a cancel request, stops that run."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from .leases import Held, LeaseTable
from .limits import Limits

CHUNK = 500


class Heartbeater:
    def __init__(self, scripts: Scripts, table: LeaseTable, lease_ms: int,
                 keys: Callable[[str], QueueKeys], limits: Limits | None = None) -> None:
        self._scripts = scripts
        self._table = table
        self._lease_ms = lease_ms
        self._keys = keys
        self._limits = limits
        self._log = get_log("heartbeater")

    @property
    def interval(self) -> float:
        """A third of the shortest lease it keeps alive: the jobs' and the limiter's."""
        lease_ms = self._lease_ms
        if self._limits is not None and self._limits.lease_ms is not None:
            lease_ms = min(lease_ms, self._limits.lease_ms)
        return lease_ms / 3000.0

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            await self.beat()

    async def beat(self) -> None:
        if self._limits is not None:
            await self._limits.renew()
        for queue, holdings in self._table.by_queue().items():
            for start in range(0, len(holdings), CHUNK):
                chunk = holdings[start:start + CHUNK]
                try:
                    answers = await self._scripts.renew(
                        self._keys(queue), [(h.job.id, h.job.token) for h in chunk],
                        self._lease_ms)
                except (RedisUnavailable, ScriptError) as exc:
                    self._log.warning("lease renewal failed", queue=queue, error=str(exc))
                    self._lapse(chunk)
                    continue  # the other queues may live on other nodes
                now = time.monotonic()
                for held, answer in zip(chunk, answers, strict=True):
                    if answer:
                        held.renewed_at = now
                    self._apply(held, answer)

    def _lapse(self, chunk: list[Held]) -> None:
        """Renewals keep failing: once a lease must have run out by our own
        (monotonic) clock, stop its run. The job is someone else's by now, and
        the fencing check would refuse this run's result anyway."""
        now = time.monotonic()
        for held in chunk:
            if now - held.renewed_at <= self._lease_ms / 1000:
                continue
            run = held.run
            if run is None:
                held.lost = True  # not started: it must not start now
            elif not run.finished:
                run.ctx.log.warning("lease lapsed: renewals failed for longer than the lease; "
                                    "stopping the run")
                run.stop("lease-lost")

    def _apply(self, held: Held, answer: int) -> None:
        run = held.run
        if answer == 0 and run is None:
            held.lost = True  # claimed but not started: the executor skips it
            self._log.warning("lease lost before the run started", job_id=held.job.id,
                              queue=held.job.queue)
        elif run is None or run.finished:
            return  # not started yet, or its ack or failure is being written
        elif answer == 0:
            run.ctx.log.warning("lease lost; stopping the run, its result will be discarded")
            run.stop("lease-lost")
        elif answer == 2:
            run.ctx.log.info("cancel requested; stopping the run")
            run.stop("canceled")
