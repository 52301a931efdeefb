"""The lease table: every job this worker holds, from claim to settled,
keyed by (queue, job id, token). The heartbeater renews from it and stops
runs whose lease is gone. The token is part of the key: a job reaped from
under this worker and claimed again by it is two holdings, and the stale one
must still be seen (and stopped) by the heartbeater."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..models import ClaimedJob
from .handler import Run


class Held:
    """A claimed job, and its run once an executor has started it."""

    __slots__ = ("job", "lost", "renewed_at", "run")

    def __init__(self, job: ClaimedJob) -> None:
        self.job = job
        self.run: Run | None = None
        self.lost = False  # lease gone before the run started: do not start it
        self.renewed_at = time.monotonic()  # last time Redis confirmed the lease


def _key(job: ClaimedJob) -> tuple[str, str, int]:
    return (job.queue, job.id, job.token)


class LeaseTable:
    def __init__(self) -> None:
        self._held: dict[tuple[str, str, int], Held] = {}

    def claimed(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            self._held[_key(job)] = Held(job)

    def started(self, run: Run) -> bool:
        """Attach a run to its holding; False when its lease was lost meanwhile."""
        held = self._held.get(_key(run.job))
        if held is None or held.lost:
            return False
        held.run = run
        return True

    def remove(self, job: ClaimedJob) -> None:
        self._held.pop(_key(job), None)

    def by_queue(self) -> dict[str, list[Held]]:
        grouped: dict[str, list[Held]] = {}
        for held in self._held.values():
            grouped.setdefault(held.job.queue, []).append(held)
        return grouped

    def runs(self) -> Iterator[Run]:
        return iter([h.run for h in self._held.values() if h.run is not None])

    def __len__(self) -> int:
        return len(self._held)
