"""Gives back what a stalled worker holds ahead. Runs claimed ahead (slots.py)
wait in the hand-off for a free executor. When runs have waited there
HOLD_MAX with no executor taking one (every executor busy), and the
worker's finishing rate has fallen so that it holds more than its
concurrency and its allowance ahead (a long run among short ones, at
concurrency 1 most of all), the runs beyond that go back to the queue,
newest first: unstarted, no attempt spent, in their old place in line (a
run whose cancel was asked ends canceled), for another worker to take
instead of waiting out the long run.

One release call per queue, sent once: runs whose call failed go back into
the hand-off as they were (the next look, or an executor, takes them), so a
Redis outage holds nothing up here, and a stop meanwhile finds every run
either settled or back where the executors' shutdown releases it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from ..store.specs import ReleaseReply
from .dispatch import Dispatch
from .runs import CLAIMED, LOST, RunRecord, RunTable
from .slots import Slots

TICK = 0.05  # how often the hand-off is looked at (the finishing rate's window)
HOLD_MAX = 0.1  # how long runs may wait there, none taken, before the excess goes back
WHY = "held ahead behind busy executors"


@dataclass(frozen=True, slots=True)
class HeldParams:
    scripts: Scripts
    keys: Callable[[str], QueueKeys]
    table: RunTable
    slots: Slots


class HeldRuns:
    def __init__(self, params: HeldParams) -> None:
        self._p = params
        self.given_back = 0
        self._taken = 0  # the hand-off's count of runs taken, when last seen to move
        self._still_since = time.monotonic()  # since when it has not moved
        self._log = get_log("held")

    async def run(self, dispatch: Dispatch) -> None:
        while True:
            await anyio.sleep(TICK)
            count = self.due(dispatch, time.monotonic())
            if count:
                await self.give_back(dispatch, dispatch.take_back(count))

    def due(self, dispatch: Dispatch, now: float) -> int:
        """How many runs to give back now: what the worker holds beyond its
        concurrency and its allowance ahead (refreshed), once runs have
        waited in the hand-off HOLD_MAX with none taken; else 0."""
        if dispatch.taken != self._taken:
            self._taken, self._still_since = dispatch.taken, now
        slots = self._p.slots
        slots.refresh_ahead()
        excess = slots.in_use - slots.size - slots.ahead
        if excess <= 0 or not len(dispatch):
            return 0
        if now - max(self._still_since, dispatch.filled_at) < HOLD_MAX:
            return 0
        return excess

    async def give_back(self, dispatch: Dispatch, runs: list[RunRecord]) -> None:
        """Release ``runs``, taken out of the hand-off: one call per queue;
        a run lost meanwhile only frees its slot; what a failed call could
        not release goes back into the hand-off."""
        by_queue: dict[str, list[RunRecord]] = {}
        keep: list[RunRecord] = []
        for run in runs:
            if run.phase is LOST:  # (the table forgot it: nothing to write)
                self._p.slots.give(finished=False)
            elif run.phase is CLAIMED:
                by_queue.setdefault(run.job.queue, []).append(run)
            else:
                keep.append(run)
        for queue, held in by_queue.items():
            try:
                # shielded: a stop must find these settled or back in the hand-off
                with anyio.CancelScope(shield=True):
                    answers = await self._p.scripts.release(
                        self._p.keys(queue), [(r.job.id, r.job.token) for r in held], 0, WHY)
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("could not give back runs held ahead; kept",
                                  queue=queue, runs=len(held), error=str(exc))
                keep += held
                continue
            for run, answer in zip(held, answers, strict=True):
                if self._p.table.settling(run):
                    self._p.table.settled(run, answer is not ReleaseReply.REFUSED)
                self._p.slots.give(finished=False)
            self.given_back += len(held)
            self._log.info("runs held ahead given back to the queue", queue=queue,
                           runs=len(held))
        if keep:
            dispatch.put_many(keep[::-1])  # (taken newest first)
