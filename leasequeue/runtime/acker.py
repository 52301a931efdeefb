"""Coalesces finished runs into one ack script call per queue: while one
flush is in flight, the next batch gathers. Runs leave the lease table only
once their ack is written, so the heartbeater keeps them alive until then."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from .handler import Run

MAX_BATCH = 500

AckItem = tuple[str, int, bytes, str]  # id, token, result, note


class Acker:
    def __init__(self, scripts: Scripts, keys: Callable[[str], QueueKeys],
                 on_done: Callable[[Run, bool], None]) -> None:
        self._scripts = scripts
        self._keys = keys
        self._on_done = on_done  # (run, accepted) once the ack is written or refused
        self._pending: list[tuple[Run, str, AckItem]] = []
        self._wakeup = anyio.Event()
        self._closing = False
        self.finished = anyio.Event()
        self._log = get_log("acker")

    def submit(self, run: Run, outcome: str, result: bytes) -> None:
        job = run.job
        self._pending.append((run, outcome, (job.id, job.token, result, "")))
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
            try:
                await self._flush(batch)
                delay = 0.05
            except (RedisUnavailable, ScriptError) as exc:
                # keep the batch; the leases may lapse meanwhile, then the
                # fencing check refuses these acks and the jobs run again
                self._pending[:0] = batch
                self._log.warning("ack failed; retrying", error=str(exc), pending=len(
                    self._pending), retry_in=delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _flush(self, batch: list[tuple[Run, str, AckItem]]) -> None:
        # one script call per (queue, outcome, retention): usually just one
        groups: dict[tuple[str, str, int], list[tuple[Run, AckItem]]] = {}
        for run, outcome, item in batch:
            group = (run.job.queue, outcome, run.definition.retention_ms)
            groups.setdefault(group, []).append((run, item))
        for (queue, outcome, retention_ms), entries in groups.items():
            answers = await self._scripts.ack(self._keys(queue), outcome, retention_ms,
                                              [item for _, item in entries])
            for (run, _item), accepted in zip(entries, answers, strict=True):
                self._on_done(run, accepted == 1)
