"""Tells Redis which claimed runs have started (start.lua), so that a lease
that expires counts as an attempt only for a run that really started
(invariant 4). A run handed to an idle executor at once is marked started by
the claim itself; the others (claimed ahead, or waiting for a limiter slot)
are marked here: in batches, one call per queue, while their handlers
already run — or, for a run that waited long enough for a cancel to reach
it, before its handler runs (``confirm``). A run that finishes before its
mark is sent needs none: its ack or failure counts the attempt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from ..store.specs import StartReply
from .runs import Phase, RunRecord, RunTable, StopReason

# how long a batch of marks gathers before it is sent: a run that kills its
# process within this (plus a round trip) of starting is charged to the infra
# budget once (see the module docstring); the wake-ups cost one per window
COALESCE = 0.005
LIVE = (Phase.CLAIMED, Phase.STARTED, Phase.ABANDONED)


@dataclass(frozen=True, slots=True)
class StarterParams:
    scripts: Scripts
    keys: Callable[[str], QueueKeys]
    table: RunTable


class Starter:
    def __init__(self, params: StarterParams) -> None:
        self._p = params
        self._pending: list[RunRecord] = []
        self._wakeup = anyio.Event()
        self._flushed = anyio.Event()  # set after each batch is sent (or failed)
        self._log = get_log("starter")

    def mark(self, run: RunRecord) -> None:
        """Mark a started run in the next batch (its handler runs meanwhile)."""
        self._pending.append(run)
        if len(self._pending) == 1:  # the loop waits only on an empty list
            self._wakeup.set()

    async def confirm(self, run: RunRecord, within: float) -> bool:
        """Mark a run started before its handler runs (in the next batch, with
        every other run waiting to start); False when Redis refused (lease
        gone, or canceled before it started) or did not answer ``within``
        seconds: the run must not start."""
        done = self._flushed
        self.mark(run)
        with anyio.move_on_after(within):
            while not run.start_known and run.phase is Phase.CLAIMED:
                await done.wait()
                done = self._flushed
        return run.start_known and run.phase is Phase.CLAIMED

    async def run(self) -> None:
        delay = 0.05
        while True:
            if not self._pending:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            # let the batch gather: most short runs settle meanwhile and need
            # no mark at all (one wake-up per window, not one per run)
            await anyio.sleep(COALESCE)
            batch, self._pending = self._pending, []
            flushed, self._flushed = self._flushed, anyio.Event()
            try:
                await self._flush(batch)
                delay = 0.05
            except (RedisUnavailable, ScriptError) as exc:
                # keep them: their leases may lapse meanwhile, which the
                # heartbeater sees and the reaper counts as never started
                self._pending[:0] = batch
                self._log.warning("start marks failed; retrying", error=str(exc),
                                  pending=len(self._pending), retry_in=delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            finally:
                flushed.set()

    async def _flush(self, batch: list[RunRecord]) -> None:
        by_queue: dict[str, list[RunRecord]] = {}
        for run in batch:
            # a run already settling needs no mark: its ack or failure counts it
            if run.phase in LIVE and not run.start_known:
                by_queue.setdefault(run.job.queue, []).append(run)
        for queue, runs in by_queue.items():
            answers = await self._p.scripts.start(self._p.keys(queue),
                                                  [(r.job.id, r.job.token) for r in runs])
            for run, answer in zip(runs, answers, strict=True):
                self._apply(run, answer)

    def _apply(self, run: RunRecord, answer: StartReply) -> None:
        table = self._p.table
        if run.phase not in LIVE:
            return  # settled meanwhile: the settle reply decides
        if answer is StartReply.LOST:
            self._log.warning("lease lost before the run could be marked started; stopping it",
                              **run.fields())
            table.lose(run, StopReason.LEASE_LOST)
            return
        table.start_confirmed(run)
        if answer is StartReply.CANCEL_REQUESTED:
            table.stop(run, StopReason.CANCELED)
