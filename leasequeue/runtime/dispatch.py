"""The hand-off from the claimer to the executors: a bounded deque. An
executor that finds work waiting takes it without a task switch, which is
most of the per-job cost of a general-purpose stream under load."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import anyio

from .runs import RunRecord


class Closed(Exception):
    """The claimer has stopped and every claimed job has been taken."""


YIELD_EVERY = 16


class Dispatch:
    """Works on the running asyncio loop (as the App's store does): a sleeping
    executor waits on a bare future, an eighth of what an anyio Event costs to
    make, and executors sleep and wake about once per batch under load."""

    def __init__(self) -> None:
        self._jobs: deque[RunRecord] = deque()
        # one future per executor blocked in get(), oldest first: a hand-off
        # wakes one executor, and each take with jobs left behind the next
        # (put_many), not every idle one (waking all of them ran each one's
        # task for every job that reached an idle worker)
        self._sleepers: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._taken = 0
        self._waiting = 0  # executors blocked in get(), woken ones until they run
        self._woken = 0  # executors woken and not yet run
        self.filled_at = 0.0  # monotonic: when the hand-off last went from empty to not

    def put_many(self, jobs: list[RunRecord]) -> None:
        """Hand jobs over; one sleeping executor is woken for them (unless one
        is on its way already), and each executor that takes a job with more
        behind it wakes the next (get): as many run as the jobs keep busy.
        Woken one per job, most of a batch's executors woke to an empty
        hand-off, as the first few ran through the batch (a no-op job ends
        without letting another task run), and went back to sleep."""
        if not self._jobs:
            self.filled_at = time.monotonic()  # runs wait here from now on
        self._jobs.extend(jobs)
        if not self._woken:
            self._wake(1)

    def _wake(self, count: int) -> None:
        sleepers = self._sleepers
        while count > 0 and sleepers:
            sleeper = sleepers.popleft()
            if not sleeper.done():  # (cancelled: its executor is leaving)
                sleeper.set_result(None)
                self._woken += 1
                count -= 1

    def close(self) -> None:
        self._closed = True
        self._wake(len(self._sleepers))

    async def get(self) -> RunRecord:
        while True:
            if self._jobs:
                self._taken += 1
                if self._taken % YIELD_EVERY == 0 and len(self._jobs) > 1:
                    # let the acker and the claimer talk to Redis while the
                    # rest of the batch runs, so both cores stay busy (a job
                    # with none behind it goes at once: the one executor
                    # woken for it would wait a turn of the loop for nothing)
                    await anyio.lowlevel.checkpoint()
                    if not self._jobs:
                        continue
                run = self._jobs.popleft()
                if self._jobs and not self._woken:
                    # more behind it: the next executor, in case this run
                    # waits on I/O (if it does not, this one takes them too)
                    self._wake(1)
                return run
            if self._closed:
                raise Closed
            sleeper = asyncio.get_running_loop().create_future()
            self._sleepers.append(sleeper)
            self._waiting += 1
            try:
                await sleeper
            except BaseException:
                if sleeper.done() and not sleeper.cancelled():
                    self._woken -= 1
                    if self._jobs:
                        self._wake(1)  # woken for a job, then cancelled: pass it on
                else:
                    with contextlib.suppress(ValueError):  # (a wake may have popped it)
                        self._sleepers.remove(sleeper)
                raise
            finally:
                self._waiting -= 1
            self._woken -= 1

    @property
    def taken(self) -> int:
        """How many runs executors have taken so far."""
        return self._taken

    def take_back(self, count: int) -> list[RunRecord]:
        """Up to ``count`` runs taken back out of the hand-off, the newest
        first (held.py gives them back)."""
        jobs = self._jobs
        return [jobs.pop() for _ in range(min(count, len(jobs)))]

    @property
    def idle_takers(self) -> int:
        """Executors that would take a job handed over now, beyond what waits."""
        return max(0, self._waiting - len(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)
