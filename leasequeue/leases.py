"""The lease table: the runs this worker holds, keyed by (queue, job id,
token). The token is part of the key: a job reaped from under this worker
and claimed again by it is two runs, and the stale one must still be seen
(and stopped) by the heartbeater."""

from __future__ import annotations

from collections.abc import Iterator

from .run import Run


class LeaseTable:
    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, int], Run] = {}

    def add(self, run: Run) -> None:
        self._runs[(run.job.queue, run.job.id, run.job.token)] = run

    def remove(self, run: Run) -> None:
        self._runs.pop((run.job.queue, run.job.id, run.job.token), None)

    def by_queue(self) -> dict[str, list[Run]]:
        grouped: dict[str, list[Run]] = {}
        for (queue, _, _), run in self._runs.items():
            grouped.setdefault(queue, []).append(run)
        return grouped

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)
