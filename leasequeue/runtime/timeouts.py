"""Stops runs that pass their timeout and marks sync handlers that outlive
their stop grace as abandoned. One ticker for all runs is cheaper than a
timer per run (a deadline on each run's cancel scope cost about half of the
per-job overhead); timeouts land within one tick.

An abandoned thread keeps its concurrency slot, its job lease and its
limiter slots until it really returns (a thread cannot be killed, and
running its job again meanwhile would run it twice at once). When
``max_abandoned`` of them pile up, ``on_cap`` is called: the worker stops so
that its process can exit, which is the only way to end such a thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..log import get_log
from .runs import Phase, RunTable, StopReason

TICK = 0.05


@dataclass(frozen=True, slots=True)
class TimeoutParams:
    table: RunTable
    max_abandoned: int
    on_cap: Callable[[int], None]
    tick: float = TICK


class TimeoutWatch:
    def __init__(self, params: TimeoutParams) -> None:
        self._p = params
        self._capped = False
        self._log = get_log("timeouts")

    async def run(self) -> None:
        while True:
            await anyio.sleep(self._p.tick)
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        table = self._p.table
        for run in table.running():
            if run.stop_reason is None and run.timeout_at <= now:
                table.stop(run, StopReason.TIMEOUT)
            if run.phase is Phase.STARTED and run.stop_deadline <= now:
                table.abandon(run)
                if run.ctx is not None:
                    run.ctx.log.warning(
                        "handler did not stop within its stop grace; abandoned: it keeps its "
                        "slot, lease and limiter slots until it returns",
                        grace=run.stop_grace, reason=str(run.stop_reason))
        abandoned = table.abandoned
        if abandoned >= self._p.max_abandoned and not self._capped:
            self._capped = True
            self._p.on_cap(abandoned)
