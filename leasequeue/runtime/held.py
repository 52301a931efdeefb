"""Gives back what a stalled worker holds ahead. Runs claimed ahead (slots.py)
wait in the hand-off for a free executor; when one of them has waited there
HOLD_MAX with every executor busy, and the worker's finishing rate has
fallen so that it holds more than its concurrency and its allowance ahead
(a long run among short ones, at concurrency 1 most of all), the runs beyond
that go back to the queue, newest first: unstarted, no attempt spent, in
their old place in line, for another worker to take instead of waiting out
the long run."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from .dispatch import Dispatch
from .runs import RunRecord
from .slots import Slots

TICK = 0.05  # how often the hand-off is looked at (the finishing rate's window)
HOLD_MAX = 0.1  # how long a run may wait there, all executors busy, before it is given back


@dataclass(frozen=True, slots=True)
class HeldParams:
    slots: Slots
    give_back: Callable[[list[RunRecord]], Awaitable[None]]  # release them, free their slots


class HeldRuns:
    def __init__(self, params: HeldParams) -> None:
        self._p = params
        self.given_back = 0

    async def run(self, dispatch: Dispatch) -> None:
        slots = self._p.slots
        while True:
            await anyio.sleep(TICK)
            slots.refresh_ahead()
            excess = slots.in_use - slots.size - slots.ahead
            if excess <= 0:
                continue
            runs = dispatch.take_back(excess, time.monotonic() - HOLD_MAX)
            if runs:
                self.given_back += len(runs)
                # shielded: a stop now must not leave a run taken out of the
                # hand-off and never settled (its slot would never be freed)
                with anyio.CancelScope(shield=True):
                    await self._p.give_back(runs)
