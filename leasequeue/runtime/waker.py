"""Blocks an idle claimer until one of its queues' wake lists gets a token.

On one Redis a single BLPOP spans every list. On a cluster the lists live
in different slots, so each gets its own BLPOP; a BLPOP is left to end on
its own (a token or its timeout) rather than cancelled, because cancelling a
blocked read drops its connection. On one Redis the BLPOP goes through the
scripts' lane (store/direct.py) when there is one: its reply is the first
hop on a job's way to an idle worker."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup
from redis.asyncio import Redis

from ..errors import RedisUnavailable
from ..store.direct import Lane
from ..store.translate import unavailable


class Waker:
    def __init__(self, redis: Redis, wake_keys: Sequence[str], one_call: bool,
                 lane: Lane | None = None) -> None:
        self._redis = redis
        self._lane = lane
        self._keys = list(wake_keys)
        self._one_call = one_call or len(self._keys) == 1
        self._pending: set[str] = set()
        self._woken = anyio.Event()
        self._tg: TaskGroup | None = None

    async def run(self) -> None:
        """Hosts the per-list BLPOPs (cluster only); runs until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await anyio.sleep_forever()

    async def wait(self, block_for: float) -> None:
        try:
            if self._one_call:
                if self._lane is not None:
                    await self._lane.blpop(self._keys, block_for)
                else:
                    await self._redis.blpop(self._keys, timeout=block_for)
                return
            await self._wait_any(block_for)
        except Exception as exc:
            if unavailable(exc):
                raise RedisUnavailable("(wake list)", exc) from exc
            raise

    async def _wait_any(self, block_for: float) -> None:
        if self._tg is None:
            raise RuntimeError("Waker.run() is not running")
        for key in self._keys:
            if key not in self._pending:
                self._pending.add(key)
                self._tg.start_soon(self._block, key, block_for)
        with anyio.move_on_after(block_for):
            await self._woken.wait()
        if self._woken.is_set():
            self._woken = anyio.Event()

    async def _block(self, key: str, block_for: float) -> None:
        try:
            if await self._redis.blpop([key], timeout=block_for):
                self._woken.set()
        except Exception as exc:
            if not unavailable(exc):
                raise
            # this list's Redis is down (a shard in a failover): wait a little
            # rather than wake the claimer into a tight loop
            await anyio.sleep(0.5)
        finally:
            self._pending.discard(key)
