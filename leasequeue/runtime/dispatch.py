"""The hand-off from the claimer to the executors: a bounded deque. An
executor that finds work waiting takes it without a task switch, which is
most of the per-job cost of a general-purpose stream under load."""

from __future__ import annotations

from collections import deque

import anyio

from .runs import RunRecord


class Closed(Exception):
    """The claimer has stopped and every claimed job has been taken."""


YIELD_EVERY = 16


class Dispatch:
    def __init__(self) -> None:
        self._jobs: deque[RunRecord] = deque()
        self._arrived = anyio.Event()
        self._closed = False
        self._taken = 0
        self._waiting = 0  # executors blocked in get()

    def put_many(self, jobs: list[RunRecord]) -> None:
        self._jobs.extend(jobs)
        self._arrived.set()

    def close(self) -> None:
        self._closed = True
        self._arrived.set()

    async def get(self) -> RunRecord:
        while True:
            if self._jobs:
                self._taken += 1
                if self._taken % YIELD_EVERY == 0:
                    # let the acker and the claimer talk to Redis while the
                    # rest of the batch runs, so both cores stay busy
                    await anyio.lowlevel.checkpoint()
                    if not self._jobs:
                        continue
                return self._jobs.popleft()
            if self._closed:
                raise Closed
            if self._arrived.is_set():
                self._arrived = anyio.Event()
            self._waiting += 1
            try:
                await self._arrived.wait()
            finally:
                self._waiting -= 1

    @property
    def idle_takers(self) -> int:
        """Executors that would take a job handed over now, beyond what waits."""
        return max(0, self._waiting - len(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)
