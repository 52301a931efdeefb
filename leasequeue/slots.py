"""Counts the runs this process holds against its concurrency (the first
layer of limits) and wakes whoever waits for a slot or for none in use."""

from __future__ import annotations

import anyio


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0
        self._changed = anyio.Event()
        self._waiters = 0

    @property
    def free(self) -> int:
        return self.size - self.in_use

    def take(self, n: int = 1) -> None:
        self.in_use += n
        self._notify()

    def give(self, n: int = 1) -> None:
        self.in_use -= n
        self._notify()

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
