"""Coalesces finished runs into one ack script call per (queue, outcome,
retention): while one flush is in flight, the next batch gathers. A run
stays in the run table (settling, its lease renewed) until its ack is
written; a group whose call failed is sent again, and only that group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from ..store.specs import AckReply
from .runs import RunRecord

MAX_BATCH = 500


class AckItem:
    """One finished run waiting for its ack. A plain class: a frozen
    dataclass sets each field through object.__setattr__, which cost about
    2 us a run on the hot path."""

    __slots__ = ("logs", "note", "outcome", "result", "retention_ms", "run")

    def __init__(self, run: RunRecord, outcome: str, retention_ms: int, result: bytes,
                 note: str, logs: str = "") -> None:
        self.run = run
        self.outcome = outcome  # succeeded | skipped | canceled
        self.retention_ms = retention_ms
        self.result = result
        self.note = note
        self.logs = logs  # the run's captured log lines ('' = none)


@dataclass(frozen=True, slots=True)
class AckerParams:
    scripts: Scripts
    keys: Callable[[str], QueueKeys]
    on_done: Callable[[RunRecord, bool], None]  # (run, accepted) once written or refused


class Acker:
    def __init__(self, params: AckerParams) -> None:
        self._p = params
        self._pending: list[AckItem] = []
        self._wakeup = anyio.Event()
        self._closing = False
        self.finished = anyio.Event()
        self._log = get_log("acker")

    def submit(self, run: RunRecord, outcome: str, retention_ms: int, result: bytes = b"",
               note: str = "", logs: str = "") -> None:
        self._pending.append(AckItem(run, outcome, retention_ms, result, note, logs))
        if len(self._pending) == 1:  # the loop waits only on an empty list
            self._wakeup.set()

    def close(self) -> None:
        """Flush what is pending, then let run() return."""
        self._closing = True
        self._wakeup.set()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            self.finished.set()

    async def _loop(self) -> None:
        delay = 0.05
        while True:
            if not self._pending:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            unsent = await self._flush(batch)
            if not unsent:
                delay = 0.05
                continue
            # keep what did not land; its leases stay renewed meanwhile, and if
            # they lapse the fencing check refuses these acks (the jobs run again)
            self._pending[:0] = unsent
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _flush(self, batch: list[AckItem]) -> list[AckItem]:
        """Send each group; return the items of the groups that failed."""
        groups: dict[tuple[str, str, int], list[AckItem]] = {}
        for item in batch:
            groups.setdefault((item.run.job.queue, item.outcome, item.retention_ms),
                              []).append(item)
        unsent: list[AckItem] = []
        for (queue, outcome, retention_ms), items in groups.items():
            try:
                answers = await self._p.scripts.ack(
                    self._p.keys(queue), outcome, retention_ms,
                    [(i.run.job.id, i.run.job.token, i.result, i.note, i.logs)
                     for i in items])
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("ack failed; retrying", queue=queue, error=str(exc),
                                  jobs=len(items))
                unsent += items
                continue
            for item, answer in zip(items, answers, strict=True):
                self._p.on_done(item.run, answer is AckReply.FINISHED)
        return unsent
