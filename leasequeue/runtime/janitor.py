"""The TTL janitor of the resource ledger: every worker runs the loop, but
only the holder of a cluster-wide limiter lease (limit 1, renewed by taking
it again each pass) closes anything, so one worker sweeps at a time and a
dead janitor's turn lapses with its lease. It closes resources past their
TTL whose owner run is not live (resources.Ledger.janitor_pass)."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..resources import Ledger
from ..store.keys import limit_keys
from ..store.scripts import Scripts
from ..store.specs import LimiterAcquireReply

JANITOR_LIMIT = "resources.janitor"  # the limiter key of the singleton lease


@dataclass(frozen=True, slots=True)
class JanitorParams:
    ledger: Ledger
    scripts: Scripts
    limiter_prefix: str
    worker_id: str
    life: str
    interval: float  # seconds between passes; the lease is three of them


class Janitor:
    def __init__(self, params: JanitorParams) -> None:
        self._p = params
        self.holder = f"{params.worker_id}:{params.life}"
        self.closed = 0
        self.passes = 0  # passes this worker ran as the singleton
        self._keys = limit_keys(params.limiter_prefix, JANITOR_LIMIT)
        self._log = get_log("janitor", worker_id=params.worker_id)

    async def run(self) -> None:
        p = self._p
        lease_ms = int(p.interval * 3 * 1000)
        try:
            while True:
                try:
                    code, _ = await p.scripts.limiter_acquire(self._keys, self.holder, 1,
                                                              lease_ms, False)
                    if code is not LimiterAcquireReply.NO_SLOT:
                        self.passes += 1
                        closed = await p.ledger.janitor_pass(f"janitor:{self.holder}")
                        self.closed += closed
                        if closed:
                            self._log.info("janitor closed orphaned resources", closed=closed)
                except (RedisUnavailable, ScriptError) as exc:
                    self._log.warning("janitor pass failed", error=str(exc))
                await anyio.sleep(p.interval)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                try:
                    await p.scripts.limiter_release(self._keys, [self.holder])
                except (RedisUnavailable, ScriptError):
                    pass  # the lease lapses on its own
