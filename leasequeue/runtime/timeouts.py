"""Stops async runs that pass their timeout. One ticker for all runs is
cheaper than a timer per run (a deadline on each run's cancel scope cost
about half of the per-job overhead); timeouts land within one tick."""

from __future__ import annotations

import time
from collections.abc import Collection

import anyio

from .handler import Run

TICK = 0.05


class TimeoutWatch:
    def __init__(self, running: Collection[Run], tick: float = TICK) -> None:
        self._running = running
        self._tick = tick

    async def run(self) -> None:
        while True:
            await anyio.sleep(self._tick)
            now = time.monotonic()
            for run in list(self._running):
                if run.timeout_at <= now:
                    run.time_out()
