"""Counts the jobs this process holds (claimed and not yet finished) against
its concurrency, the first layer of limits, and wakes whoever waits for room.

Claiming ahead: at most ``concurrency`` jobs run (one executor each), but the
claimer may hold a few more, ``ahead``, so the next batch is on its way
while this one runs and Redis and Python work at the same time. ``ahead`` is
what this worker has been finishing in AHEAD_HORIZON, capped at the
concurrency or at AHEAD_MAX, whichever is larger: about zero for long jobs
(no hoarding from other workers), a full batch for short ones, at a low
concurrency too (a worker of concurrency 1 running short jobs would
otherwise pay a claim and an ack round trip for every job or two). What a
stalled worker holds beyond that goes back to the queue (held.py)."""

from __future__ import annotations

import time

import anyio

AHEAD_HORIZON = 0.02  # seconds of work a worker may hold beyond what it runs
AHEAD_MAX = 100  # jobs held ahead at most, unless the concurrency is larger (a claim's batch)
RATE_WINDOW = 0.05


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0
        self.ahead = 0
        self.completed = 0
        self._changed = anyio.Event()
        self._waiters = 0
        self._needs: list[int] = []  # the free slots each waiter waits for (0: empty)
        self._rate = 0.0
        self._rate_since = time.monotonic()
        self._rate_count = 0

    @property
    def free(self) -> int:
        """How many more jobs the claimer may take now."""
        return self.size + self.ahead - self.in_use

    @property
    def idle(self) -> int:
        """How many more jobs the executors could start now (none ahead)."""
        return self.size - self.in_use

    def take(self, n: int = 1) -> None:
        self.in_use += n  # fewer free slots: no waiter can proceed because of it

    def give(self, n: int = 1, finished: bool = True) -> None:
        """``n`` slots free again: runs that ran and ended, or (``finished``
        False) runs that never started (given back, skipped, pushed back),
        which the finishing rate must not count: it would have the worker
        hold that much ahead again, the same jobs first in line."""
        self.in_use -= n
        if finished:
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
        self.ahead = min(max(self.size, AHEAD_MAX), int(self._rate * AHEAD_HORIZON))

    def _notify(self) -> None:
        # wake the waiters only when one of them can go on: a wake-up (and a
        # new Event) per finished job would cost more than the job's own work
        if self._waiters and (self.in_use == 0 or self.free >= min(self._needs)):
            self._changed.set()
            self._changed = anyio.Event()

    async def _wait_change(self, need: int) -> None:
        self._waiters += 1
        self._needs.append(need)
        try:
            await self._changed.wait()
        finally:
            self._waiters -= 1
            self._needs.remove(need)

    async def wait_free(self, at_least: int = 1) -> int:
        while self.free < at_least:
            await self._wait_change(at_least)
        return self.free

    async def wait_empty(self) -> None:
        while self.in_use:
            await self._wait_change(self.size + self.ahead + 1)  # woken by in_use == 0
