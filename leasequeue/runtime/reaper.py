"""Hands expired leases back and deletes finished jobs past their retention.
Every worker runs one; the scripts are idempotent and bounded, so many
reapers at once do no harm."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..registry import Defaults
from ..store.keys import QueueKeys
from ..store.scripts import Scripts

REAP_BATCH = 100
EXPIRE_BATCH = 500
MAX_ROUNDS = 20  # batches per queue per tick, so one tick stays short
# the runtime starts every run it claims, and enqueue writes each job's budgets:
# these only apply to a record written without them
_DEFAULT_BUDGET = (Defaults().max_attempts, Defaults().max_infra_attempts)


class Reaper:
    def __init__(self, scripts: Scripts, queues: Sequence[str],
                 keys: Callable[[str], QueueKeys], interval: float,
                 backoff_base_ms: int, backoff_cap_ms: int) -> None:
        self._scripts = scripts
        self._queues = list(queues)
        self._keys = keys
        self.interval = interval
        self._base_ms = backoff_base_ms
        self._cap_ms = backoff_cap_ms
        self._log = get_log("reaper")

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("reaper tick failed", error=str(exc))
            await anyio.sleep(self.interval)

    async def tick(self) -> None:
        for queue in self._queues:
            qk = self._keys(queue)
            for _ in range(MAX_ROUNDS):
                out = await self._scripts.reap(qk, REAP_BATCH, self._base_ms, self._cap_ms,
                                               {}, _DEFAULT_BUDGET)
                if out.requeued or out.dead or out.canceled:
                    self._log.info("reaped expired leases", queue=queue, requeued=out.requeued,
                                   dead=out.dead, canceled=out.canceled)
                if out.requeued + out.dead + out.canceled + out.stale < REAP_BATCH:
                    break
            for _ in range(MAX_ROUNDS):
                if await self._scripts.expire(qk, EXPIRE_BATCH) < EXPIRE_BATCH:
                    break
