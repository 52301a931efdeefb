"""Counts the jobs this process holds (claimed and not yet finished) against
its concurrency, the first layer of limits, and wakes whoever waits for room.

Claiming ahead: at most ``concurrency`` jobs run (one executor each), but the
claimer may hold a few more, ``ahead``, so the next batch is on its way
while this one runs and Redis and Python work at the same time. ``ahead`` is
what this worker has been finishing in AHEAD_HORIZON, capped at the
concurrency: about zero for long jobs (no hoarding from other workers), a
full batch for short ones."""

from __future__ import annotations

import time

import anyio

AHEAD_HORIZON = 0.02  # seconds of work a worker may hold beyond what it runs
RATE_WINDOW = 0.05


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0
        self.ahead = 0
        self.completed = 0
        self._changed = anyio.Event()
        self._waiters = 0
        self._rate = 0.0
        self._rate_since = time.monotonic()
        self._rate_count = 0

    @property
    def free(self) -> int:
        """How many more jobs the claimer may take now."""
        return self.size + self.ahead - self.in_use

    def take(self, n: int = 1) -> None:
        self.in_use += n
        self._notify()

    def give(self, n: int = 1) -> None:
        self.in_use -= n
        self.completed += n
        self._notify()

    def refresh_ahead(self) -> None:
        """Re-estimate the finishing rate (smoothed) and with it ``ahead``."""
        now = time.monotonic()
        elapsed = now - self._rate_since
        if elapsed < RATE_WINDOW:
            return
        rate = (self.completed - self._rate_count) / elapsed
        self._rate = rate if rate < self._rate else (self._rate + rate) / 2
        self._rate_since, self._rate_count = now, self.completed
        self.ahead = min(self.size, int(self._rate * AHEAD_HORIZON))

    def _notify(self) -> None:
        if self._waiters:  # an Event per change is wasted when nobody waits
            self._changed.set()
            self._changed = anyio.Event()

    async def _wait_change(self) -> None:
        self._waiters += 1
        try:
            await self._changed.wait()
        finally:
            self._waiters -= 1

    async def wait_free(self, at_least: int = 1) -> int:
        while self.free < at_least:
            await self._wait_change()
        return self.free

    async def wait_empty(self) -> None:
        while self.in_use:
            await self._wait_change()
