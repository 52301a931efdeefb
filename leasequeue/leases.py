"""The lease table: the runs this worker holds, keyed by (queue, job id).
The heartbeater renews from it and stops runs whose lease is gone."""

from __future__ import annotations

from collections.abc import Iterator

from .run import Run


class LeaseTable:
    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], Run] = {}

    def add(self, run: Run) -> None:
        self._runs[(run.job.queue, run.job.id)] = run

    def remove(self, run: Run) -> None:
        key = (run.job.queue, run.job.id)
        if self._runs.get(key) is run:
            del self._runs[key]

    def get(self, queue: str, job_id: str) -> Run | None:
        return self._runs.get((queue, job_id))

    def by_queue(self) -> dict[str, list[Run]]:
        grouped: dict[str, list[Run]] = {}
        for (queue, _), run in self._runs.items():
            grouped.setdefault(queue, []).append(run)
        return grouped

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)
