"""Coalesces finished runs into one ack script call per queue: while one
flush is in flight, the next batch gathers. Runs leave the lease table only
once their ack is written, so the heartbeater keeps them alive until then."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from .errors import RedisUnavailable, ScriptError
from .keys import QueueKeys
from .log import get_log
from .run import Run
from .scripts import Scripts

MAX_BATCH = 500

AckItem = tuple[str, int, str, bytes, int]  # id, token, outcome, result, retention_ms


class Acker:
    def __init__(self, scripts: Scripts, keys: Callable[[str], QueueKeys],
                 on_done: Callable[[Run, bool], None]) -> None:
        self._scripts = scripts
        self._keys = keys
        self._on_done = on_done  # (run, accepted) once the ack is written or refused
        self._pending: list[tuple[Run, AckItem]] = []
        self._wakeup = anyio.Event()
        self._closing = False
        self.finished = anyio.Event()
        self._log = get_log("acker")

    def submit(self, run: Run, outcome: str, result: bytes) -> None:
        job = run.job
        self._pending.append((run, (job.id, job.token, outcome, result,
                                    run.definition.retention_ms)))
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

    async def _flush(self, batch: list[tuple[Run, AckItem]]) -> None:
        by_queue: dict[str, list[tuple[Run, AckItem]]] = {}
        for entry in batch:
            by_queue.setdefault(entry[0].job.queue, []).append(entry)
        for queue, entries in by_queue.items():
            answers = await self._scripts.ack(self._keys(queue), [item for _, item in entries])
            for (run, _item), accepted in zip(entries, answers, strict=True):
                self._on_done(run, accepted == 1)
