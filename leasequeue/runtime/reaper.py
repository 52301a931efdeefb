"""Hands expired leases back and deletes finished jobs past their retention
(the ack script trims retention under load; this is the idle-time backstop).
Every worker runs one; the scripts are idempotent and bounded, so many
reapers at once do no harm."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..models import ReapOutcome
from ..store.keys import QueueKeys
from ..store.scripts import Scripts

REAP_BATCH = 100
EXPIRE_BATCH = 500
MAX_ROUNDS = 20  # batches per queue per tick, so one tick stays short


@dataclass(frozen=True, slots=True)
class ReaperParams:
    scripts: Scripts
    queues: Sequence[str]
    keys: Callable[[str], QueueKeys]
    interval: float
    backoff_base_ms: int
    backoff_cap_ms: int
    # the budgets of the jobs this worker defines, by physical queue (the
    # handler's definition decides a job stored with "unset" budgets)
    budgets: Mapping[str, Mapping[str, tuple[int, int]]]
    default_budget: tuple[int, int]
    on_reaped: Callable[[str, ReapOutcome], None] | None = None  # hooks (metrics)


class Reaper:
    def __init__(self, params: ReaperParams) -> None:
        self._p = params
        self.interval = params.interval
        self._log = get_log("reaper")

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("reaper tick failed", error=str(exc))
            await anyio.sleep(self.interval)

    async def tick(self) -> None:
        p = self._p
        for queue in p.queues:
            qk = p.keys(queue)
            budgets = p.budgets.get(queue, {})
            for _ in range(MAX_ROUNDS):
                out = await p.scripts.reap(qk, REAP_BATCH, p.backoff_base_ms, p.backoff_cap_ms,
                                           budgets, p.default_budget)
                if out.requeued or out.dead or out.canceled or out.unstarted:
                    self._log.info("reaped expired leases", queue=queue, requeued=out.requeued,
                                   dead=out.dead, canceled=out.canceled,
                                   never_started=out.unstarted)
                    if p.on_reaped is not None:
                        p.on_reaped(queue, out)
                examined = out.requeued + out.dead + out.canceled + out.stale
                if examined < REAP_BATCH:
                    break
            for _ in range(MAX_ROUNDS):
                if await p.scripts.expire(qk, EXPIRE_BATCH) < EXPIRE_BATCH:
                    break
